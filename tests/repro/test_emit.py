"""Cluster scripts and the nccl-tests line: same test, quoted, and valid shell."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cli import app
from logsleuth.repro.emit import nccl_tests, script
from logsleuth.repro.plan import find, make_plan
from tests.conftest import events_of

from .test_plan import WATCHDOG_JOB

runner = CliRunner()


@pytest.mark.parametrize(
    ("flags", "world", "line"),
    [
        ({"op": "all_reduce"}, 2, "all_reduce_perf -b 4194304 -e 4194304 -g 1 -d float -o sum -n 20 -w 5 -c 1"),
        ({"op": "all_gather", "numel": 1000, "dtype": "bfloat16"}, 8, "all_gather_perf -b 16000 -e 16000 -g 1 -d bfloat16 -n 20 -w 5 -c 1"),
        (
            {"op": "broadcast", "numel": 10, "dtype": "float64", "iters": 3},
            4,
            "broadcast_perf -b 80 -e 80 -g 1 -d double -r 0 -n 3 -w 5 -c 1",
        ),
        ({"op": "all_to_all", "numel": 64, "dtype": "half"}, 4, "alltoall_perf -b 128 -e 128 -g 1 -d half -n 20 -w 5 -c 1"),
    ],
)
def test_nccl_tests_line_has_the_same_op_size_type_and_iterations(flags: dict[str, object], world: int, line: str) -> None:
    assert nccl_tests(make_plan(None, **flags), world=world) == line  # type: ignore[arg-type]


def test_barrier_has_no_nccl_tests_equivalent() -> None:
    assert nccl_tests(make_plan(None, op="barrier"), world=2) is None


def test_sbatch_script_runs_the_suspect_collective_on_the_implicated_nodes() -> None:
    plan = make_plan(find(events_of(WATCHDOG_JOB, "slurm-7.out")), nodes="gpu-a[01-02]")
    text = script(plan, "sbatch")
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --ntasks-per-node=2\n" in text
    assert "#SBATCH --nodelist=gpu-a01,gpu-a02\n" in text and "#SBATCH --gpus-per-node=2\n" in text
    assert "export NCCL_SOCKET_IFNAME='^docker0,lo'\n" in text and "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n" in text
    assert "29511" not in text  # the logged port is not the rendezvous port (issue 18)
    assert "srun --label" in text and "-m logsleuth.repro.worker --op=reduce_scatter --numel=4194304 --dtype=float32" in text
    assert "reduce_scatter_perf -b 16777216" in text


def test_nothing_unsafe_from_a_log_reaches_a_script() -> None:
    plan = make_plan(find(events_of(WATCHDOG_JOB, "slurm-7.out")))
    for kind in ("sbatch", "torchrun"):
        text = script(plan, kind)
        assert "reboot" not in text and "NCCL_DEBUG_FILE" not in text and "libevil" not in text and "CUDA_VISIBLE_DEVICES" not in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("kind", ["sbatch", "torchrun"])
def test_emitted_scripts_are_valid_bash(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"repro.{kind}"
    result = runner.invoke(
        app, ["repro", "--nodes", "n1,n2", "--nproc", "4", "--env", "NCCL_SOCKET_IFNAME=^lo", "--emit", kind, "-o", str(path)]
    )
    assert result.exit_code == 0, result.output
    assert path.stat().st_mode & 0o111
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert "nccl-tests equivalent: all_reduce_perf -b 4194304" in result.stderr


def test_emit_from_logs_reports_what_it_did_not_carry_over(tmp_path: Path) -> None:
    log = tmp_path / "slurm-7.out"
    log.write_text(WATCHDOG_JOB)
    result = runner.invoke(app, ["repro", str(log), "--emit", "torchrun"])
    assert result.exit_code == 0
    assert result.stdout.startswith("#!/bin/bash\n") and "--nnodes=2 --nproc-per-node=2" in result.stdout
    assert "gpu-a01:" not in result.stdout and "29511" not in result.stdout  # the endpoint is never the log's
    assert '"${MASTER_ADDR:?' in result.stdout
    assert "note: dropped NCCL_DEBUG_FILE=/tmp/nccl.%h.log from the logs: names a file or folder" in result.stderr
    assert "note: dropped MASTER_ADDR=gpu-a01 from the logs: names an endpoint; pass --env MASTER_ADDR=gpu-a01 to keep it" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--emit", "slurm"], 2, "--emit"),
        (["--format", "yaml"], 2, "--format"),
        (["--op", "allgatherv", "--emit", "sbatch"], 2, "--op 'allgatherv'"),
        (["--env", "LD_PRELOAD=/tmp/x.so", "--emit", "sbatch"], 2, "LD_PRELOAD"),
        (["no-such-job.out", "--emit", "sbatch"], 3, "no readable input"),
        (["--emit", "sbatch", "-o", "/nonexistent-dir/x.sbatch"], 2, "cannot write /nonexistent-dir/x.sbatch"),
    ],
)
def test_bad_usage_gives_a_message_and_exit_code_not_a_traceback(args: list[str], code: int, message: str) -> None:
    result = runner.invoke(app, ["repro", *args])
    assert result.exit_code == code and message in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
