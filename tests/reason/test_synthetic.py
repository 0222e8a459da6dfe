"""The job-log generator (corpus/tools/synth.py), and the reasoner on jobs too big to run here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import logsleuth
from logsleuth.cases import read_case
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def synth() -> ModuleType:
    spec = importlib.util.spec_from_file_location("synth", ROOT / "corpus" / "tools" / "synth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["synth"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def analyze(synth: ModuleType, tmp_path: Path, **kw: object) -> tuple[logsleuth.Report, object]:
    spec = synth.JobSpec(**kw)
    paths = synth.write(spec, tmp_path / "job")
    return logsleuth.analyze([str(p) for p in paths]), synth.truth(spec)


def test_the_same_spec_gives_the_same_bytes(synth: ModuleType) -> None:
    spec = synth.JobSpec(ranks=32, nodes=4, failure="hang", seed=11, interleave=0.1)
    assert list(synth.lines(spec)) == list(synth.lines(spec))
    assert list(synth.lines(spec)) != list(synth.lines(synth.JobSpec(ranks=32, nodes=4, failure="hang", seed=12, interleave=0.1)))


def test_size_target_pads_the_training_phase(synth: ModuleType) -> None:
    spec = synth.JobSpec(ranks=8, nodes=1, failure="exception", size=300_000)
    total = sum(len(line) + 1 for _, line in synth.lines(spec))
    assert 300_000 <= total < 330_000


def test_layouts_write_the_files_launchers_write(synth: ModuleType, tmp_path: Path) -> None:
    names = {
        layout: sorted(p.name for p in synth.write(synth.JobSpec(ranks=12, nodes=3, layout=layout, failure="segfault"), tmp_path / layout))
        for layout in synth.LAYOUTS
    }
    assert names["srun"] == names["srun-torchrun"] == ["slurm-4242.out"]
    assert names["torchrun"] == ["gpu001.log", "gpu002.log", "gpu003.log"]
    assert names["per-rank"] == [f"rank-{r:02d}.out" for r in range(12)] + ["slurm-4242.out"]


def test_srun_labels_are_padded_to_the_widest_task_id(synth: ModuleType) -> None:
    labelled = [line for _, line in synth.lines(synth.JobSpec(ranks=11, nodes=1, failure="none")) if ": " in line[:4]]
    assert any(line.startswith(" 3: ") for line in labelled) and any(line.startswith("10: ") for line in labelled)


def test_the_recorded_command_regenerates_the_case(synth: ModuleType, tmp_path: Path) -> None:
    spec = synth.JobSpec(ranks=16, nodes=4, layout="srun-torchrun", failure="docker0", seed=5, steps=7)
    case = synth.write_case(spec, tmp_path / "corpus")
    truth = read_case(case)
    assert truth.label == "nccl_wrong_interface" and (truth.rank, truth.node) != (None, None)
    call = truth.generator
    assert call is not None
    assert call.startswith("corpus/tools/synth.py ")
    assert synth.main([*call.split()[1:], "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "slurm-4242.out").read_bytes() == (case / "slurm-4242.out").read_bytes()


def test_bad_specs_are_refused_with_a_message(synth: ModuleType) -> None:
    with pytest.raises(ValueError, match="multiple of nodes"):
        synth.JobSpec(ranks=10, nodes=4)
    assert synth.main(["--failure", "meteor", "--out", "x"]) == 2


def test_64_ranks_one_node_on_another_nccl_release_is_version_mismatch_on_that_node(synth: ModuleType, tmp_path: Path) -> None:
    report, truth = analyze(synth, tmp_path, ranks=64, nodes=8, failure="nccl_version", seed=3)
    v = report.verdict
    assert v.category == "version_mismatch" and v.first_failure.node == truth.node
    assert "2.27.3" in v.summary and "differs from 2.26.2" in v.summary
    assert report.suspect_nodes[0].node == truth.node
    assert any("NCCL version 2.27.3" in e.text for e in v.evidence)


def test_64_ranks_one_rank_on_docker0_is_the_wrong_interface_of_that_rank(synth: ModuleType, tmp_path: Path) -> None:
    report, truth = analyze(synth, tmp_path, ranks=64, nodes=8, failure="docker0", seed=4, layout="srun-torchrun")
    v = report.verdict
    assert v.category == "nccl_wrong_interface"
    assert (v.first_failure.rank, v.first_failure.node) == (truth.rank, truth.node)
    assert "docker0" in v.summary and "172.17.0.1" in v.summary
    assert any("docker0:172.17.0.1" in e.text for e in v.evidence)


def test_64_ranks_one_rank_never_entering_the_collective_is_hung_and_first(synth: ModuleType, tmp_path: Path) -> None:
    report, truth = analyze(synth, tmp_path, ranks=64, nodes=8, failure="hang", seed=9, interleave=0.05)
    v = report.verdict
    assert v.category == "collective_timeout"
    assert (v.first_failure.rank, v.first_failure.node) == (truth.rank, truth.node)
    status = {r.rank: r.status for r in report.ranks}
    assert status.pop(truth.rank) == "culprit" and set(status.values()) == {"victim"}
    assert report.hang is not None and report.hang["hung"] == [truth.rank] and len(report.hang["timed_out"]) == 63
    assert report.hang["behind"] == {str(truth.rank): report.hang["seq"] - 1}


@pytest.mark.parametrize(
    ("failure", "layout"),
    [
        ("exception", "torchrun"),
        ("segfault", "per-rank"),
        ("oom", "srun"),
        ("sigkill", "srun-torchrun"),
        ("mismatch", "torchrun"),
        ("hang", "srun-torchrun"),
        ("none", "per-rank"),
    ],
)
def test_every_failure_in_every_layout_names_its_culprit(synth: ModuleType, tmp_path: Path, failure: str, layout: str) -> None:
    report, truth = analyze(synth, tmp_path, ranks=16, nodes=4, failure=failure, layout=layout, seed=2, interleave=0.05)
    v = report.verdict
    assert (v.first_failure.rank, v.first_failure.node) == (truth.rank, truth.node)
    # a bare SIGKILL is crash_signal only once a rule says so; the rank is named either way
    assert v.category == truth.category or (failure == "sigkill" and v.category == "unknown")


@pytest.mark.parametrize(("failure", "category"), [("oom", "host_oom"), ("segfault", "crash_signal")])
def test_a_rank_that_died_while_the_others_timed_out_is_not_a_hang(synth: ModuleType, tmp_path: Path, failure: str, category: str) -> None:
    # NCCL never noticed the death: the other 63 ranks' watchdogs fire ten minutes later
    report, truth = analyze(synth, tmp_path, ranks=64, nodes=8, failure=failure, peer_symptom="timeout", seed=6)
    v = report.verdict
    assert (v.category, v.first_failure.rank, v.first_failure.node) == (category, truth.rank, truth.node)
    assert report.hang is not None and report.hang["hung"] == [] and len(report.hang["timed_out"]) == 63


def test_node_clocks_minutes_apart_are_realigned_on_the_stalled_collective(synth: ModuleType, tmp_path: Path) -> None:
    # one torchrun log per node, each node's clock up to 2 minutes off
    report, truth = analyze(synth, tmp_path, ranks=32, nodes=4, layout="torchrun", failure="hang", clock_skew=120.0, seed=8)
    assert (report.verdict.first_failure.rank, report.verdict.first_failure.node) == (truth.rank, truth.node)
    offsets = report.timeline["clock_offsets_s"]
    skew = {f"{host}.log": truth.clock_skew_s.get(host, 0.0) for host in ("gpu001", "gpu002", "gpu003", "gpu004")}
    ref = next(f for f in skew if not any(f in o for o in offsets))  # the file the others were aligned to
    for name, off in offsets.items():
        assert abs(off - (skew[ref] - skew[Path(name).name])) < 0.1
    assert len(offsets) >= 2 and "aligned" in report.timeline["note"]
