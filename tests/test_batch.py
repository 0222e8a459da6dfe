"""`logsleuth batch`: many jobs found, grouped, analysed on all cores, stored once each, resumable."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import batch, history
from logsleuth.api import analyze
from logsleuth.cli import app
from tests.conftest import EXAMPLE_LOGS, example_jobs

LOGS = EXAMPLE_LOGS


def _touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _keys(found: batch.Found) -> dict[str, list[str]]:
    return {j.key: [os.path.basename(f) for f in j.files] for j in found.jobs}


def test_sbatch_output_pairs_and_array_tasks_are_jobs_of_their_own(tmp_path: Path) -> None:
    for name in ("slurm-10.out", "slurm-10.err", "slurm-11.out", "train-12_3.out", "train-12_4.out", "resnet-50.log"):
        _touch(tmp_path / "logs" / name)
    found = batch.discover([tmp_path / "logs"])
    assert _keys(found) == {
        "logs/10": ["slurm-10.err", "slurm-10.out"],
        "logs/11": ["slurm-11.out"],
        "logs/12_3": ["train-12_3.out"],
        "logs/12_4": ["train-12_4.out"],
        "logs": ["resnet-50.log"],  # names no job: the folder's files that name none
    }
    assert [j.name for j in found.jobs] == ["logs", "10", "11", "12_3", "12_4"]


def test_a_folder_naming_one_job_is_that_job_with_its_per_rank_logs(tmp_path: Path) -> None:
    for name in ("slurm-77.out", "rank0.log", "rank1.log"):
        _touch(tmp_path / "run" / name)
    (job,) = batch.discover([tmp_path / "run"]).jobs
    assert job.name == "77" and len(job.files) == 3


def test_a_torchrun_log_dir_run_is_one_job_whatever_its_attempts_and_ranks(tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "abc123_x1"
    for rel in ("attempt_0/0/stdout.log", "attempt_0/1/stderr.log", "attempt_1/0/stdout.log"):
        _touch(run / rel)
    _touch(tmp_path / "logdir" / "other" / "train.log")
    assert {k: len(v) for k, v in _keys(batch.discover([tmp_path / "logdir"])).items()} == {"logdir/abc123_x1": 3, "logdir/other": 1}


def test_job_folders_are_one_job_each_and_files_that_are_not_logs_are_left_alone(tmp_path: Path) -> None:
    _touch(tmp_path / "a" / "out.log")
    _touch(tmp_path / "b" / "node0.txt")
    _touch(tmp_path / "b" / "model.pt")
    assert _keys(batch.discover([tmp_path])) == {f"{tmp_path.name}/a": ["out.log"], f"{tmp_path.name}/b": ["node0.txt"]}


def test_job_key_groups_by_the_id_it_names_and_counts_what_it_leaves_out(tmp_path: Path) -> None:
    for rel in ("runs/7/a/x.log", "runs/7/y.log", "runs/8/z.log", "stray.log"):
        _touch(tmp_path / rel)
    found = batch.discover([tmp_path], job_key="runs/{id}/**")
    assert [(j.name, len(j.files)) for j in found.jobs] == [("7", 2), ("8", 1)]
    assert found.ignored == 1


@pytest.mark.parametrize("key", ["slurm-*.out", "{id}/{id}"])
def test_job_key_must_name_the_job_once(key: str) -> None:
    with pytest.raises(ValueError, match=r"\{id\} exactly once"):
        batch.key_pattern(key)


def test_a_missing_root_is_a_problem_not_a_stop(tmp_path: Path) -> None:
    _touch(tmp_path / "slurm-5.out")
    found = batch.discover([tmp_path / "nope", tmp_path])
    assert [j.name for j in found.jobs] == ["5"] and "no such file" in found.problems[0]


def test_the_fingerprint_changes_when_a_file_does(tmp_path: Path) -> None:
    log = _touch(tmp_path / "slurm-5.out", "x")
    before = batch.fingerprint([str(log)])
    os.utime(log, ns=(1, 1))
    assert batch.fingerprint([str(log)]) != before


def test_shards_split_the_jobs_between_them_without_overlap() -> None:
    jobs = [batch.Job(str(i), str(i), (), str(i)) for i in range(10)]
    shares = [batch.shard(jobs, i, 3) for i in range(3)]
    assert sorted(j.key for s in shares for j in s) == sorted(j.key for j in jobs)
    assert [len(s) for s in shares] == [4, 3, 3]
    with pytest.raises(ValueError):
        batch.shard(jobs, 3, 3)


def test_the_manifest_reads_back_the_jobs_written(tmp_path: Path) -> None:
    _touch(tmp_path / "j" / "slurm-1.out")
    jobs = batch.discover([tmp_path / "j"]).jobs
    batch.write_manifest(tmp_path / "m.jsonl", jobs)
    assert batch.read_manifest(tmp_path / "m.jsonl") == jobs
    (tmp_path / "bad.jsonl").write_text('{"key": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        batch.read_manifest(tmp_path / "bad.jsonl")


def _run(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(app, ["batch", *args, "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def _stored(store: Path) -> pl.DataFrame:
    return history.load(store).table.sort("job")


def test_batch_stores_the_verdict_analyze_gives_each_job(tmp_path: Path) -> None:
    root = example_jobs(tmp_path / "jobs")
    code, summary = _run(str(root), "--out", str(tmp_path / "store"), "--workers", "2")
    assert code == 0 and summary["analysed"] == 3 and summary["skipped"] == 0
    table = _stored(tmp_path / "store")
    assert table.height == 3
    for row in table.iter_rows(named=True):
        alone = analyze(row["inputs"])
        assert (row["cause"], row["first_rank"], row["first_node"]) == (
            alone.verdict.cause,
            alone.verdict.first_failure.rank,
            alone.verdict.first_failure.node,
        )
        assert row["fingerprint"] and row["rules_version"].startswith(alone.version)
    assert sum(summary["causes"].values()) == 3  # type: ignore[attr-defined]


def test_a_second_run_skips_stored_jobs_and_redoes_a_changed_one(tmp_path: Path) -> None:
    root, store = example_jobs(tmp_path / "jobs"), str(tmp_path / "store")
    assert _run(str(root), "--out", store)[1]["analysed"] == 3
    assert _run(str(root), "--out", store)[1] == {**_run(str(root), "--out", store)[1], "analysed": 0, "skipped": 3}
    changed = next((root / "port-0").iterdir())
    os.utime(changed, ns=(10**18, 10**18))
    assert _run(str(root), "--out", store)[1]["analysed"] == 1
    assert _run(str(root), "--out", store, "--force")[1]["analysed"] == 3
    assert _stored(Path(store)).height == 7


def test_jobs_are_analysed_again_under_other_rules_or_model(tmp_path: Path) -> None:
    root, store = example_jobs(tmp_path / "jobs"), str(tmp_path / "store")
    _run(str(root), "--out", store)
    assert _run(str(root), "--out", store, "--no-model")[1]["analysed"] == 3
    versions = set(_stored(Path(store)).get_column("rules_version"))
    assert len(versions) == 2 and any(v.endswith("+model.off") for v in versions)


def test_a_job_that_cannot_be_read_is_a_row_with_its_problem(tmp_path: Path) -> None:
    root = example_jobs(tmp_path / "jobs")
    broken = root / "broken"
    broken.mkdir()
    (broken / "slurm-9.out.gz").write_bytes(gzip.compress(LOGS["user"].read_bytes())[:300])
    code, summary = _run(str(root), "--out", str(tmp_path / "store"))
    assert code == 0 and summary["analysed"] == 4 and summary["with_problems"] == 1
    row = _stored(tmp_path / "store").filter(pl.col("job") == "9").row(0, named=True)
    assert row["partial"] and any("gzip" in p for p in row["problems"])
    assert _run(str(root), "--out", str(tmp_path / "store"))[1]["analysed"] == 1  # a partial verdict is not final


def test_list_shows_the_jobs_without_analysing(tmp_path: Path) -> None:
    root = example_jobs(tmp_path / "jobs")
    result = CliRunner().invoke(app, ["batch", str(root), "--list", "--format", "json"])
    assert result.exit_code == 0
    assert sorted(j["key"] for j in json.loads(result.stdout)) == ["jobs/port-0", "jobs/time_limit-0", "jobs/user-0"]


def test_a_folder_without_logs_is_no_input(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["batch", str(tmp_path / "empty"), "--out", str(tmp_path / "s")])
    assert result.exit_code == 3 and "no jobs found" in result.stderr


def test_emit_sbatch_writes_an_array_over_the_jobs_not_yet_stored(tmp_path: Path) -> None:
    root, store = example_jobs(tmp_path / "jobs", copies=2), tmp_path / "store"
    out = tmp_path / "emit"
    result = CliRunner().invoke(
        app,
        ["batch", str(root), "--out", str(store), "--emit", "sbatch", "--emit-dir", str(out), "--tasks", "4"]
        + ["--sbatch-option", "--partition=debug", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == 6
    script = (out / "batch.sbatch").read_text()
    assert "#SBATCH --array=0-3" in script and "#SBATCH --partition=debug" in script
    assert '"${SLURM_ARRAY_TASK_ID}/4"' in script and str(store.resolve()) in script
    assert subprocess.run(["bash", "-n", str(out / "batch.sbatch")]).returncode == 0
    assert len(batch.read_manifest(out / "jobs.jsonl")) == 6


def test_an_array_task_analyses_its_shard_of_the_manifest(tmp_path: Path) -> None:
    root, store = example_jobs(tmp_path / "jobs", copies=2), tmp_path / "store"
    batch.write_manifest(tmp_path / "m.jsonl", batch.discover([root]).jobs)
    for i in range(2):
        code, summary = _run("--manifest", str(tmp_path / "m.jsonl"), "--shard", f"{i}/2", "--out", str(store))
        assert code == 0 and summary["analysed"] == 3
    assert _stored(store).get_column("fingerprint").n_unique() == 6
    assert CliRunner().invoke(app, ["batch", "--manifest", str(tmp_path / "m.jsonl"), "--shard", "2/2", "--out", str(store)]).exit_code == 2


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "scancel"])
def test_an_interrupted_batch_resumes_without_redoing_finished_jobs(tmp_path: Path, sig: signal.Signals) -> None:
    root, store = example_jobs(tmp_path / "jobs", copies=12), tmp_path / "store"  # 36 jobs
    cmd = [sys.executable, "-m", "logsleuth", "batch", str(root), "--out", str(store), "--workers", "1", "--flush-every", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(store.glob("*.parquet")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    os.killpg(proc.pid, sig)  # what Ctrl-C and scancel send: the whole group, workers too
    _, err = proc.communicate(timeout=120)
    first = _stored(store).height
    assert proc.returncode == 130 and "run the same command again" in err
    assert 0 < first < 36
    code, summary = _run(str(root), "--out", str(store))
    assert code == 0 and summary["skipped"] == first and summary["analysed"] == 36 - first
    table = _stored(store)
    assert table.height == 36 and table.get_column("fingerprint").n_unique() == 36


def test_a_user_writes_parts_a_root_reader_believes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = pl.concat([history.record(analyze([LOGS["port"]]), job=str(i)) for i in range(history.FOREIGN_LIMITS.rows + 10)])
    monkeypatch.setattr(batch.os, "geteuid", lambda: 1000)
    writer = batch.PartWriter(tmp_path / "store", rows=10_000)
    writer.add(rows)
    writer.flush()
    sizes = sorted(pl.read_parquet(p).height for p in writer.parts)
    assert sizes == [10, history.FOREIGN_LIMITS.rows] and writer.written == rows.height
