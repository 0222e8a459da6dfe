"""The verdict history: append-safe store, and a summary where a bad node stands out."""

from __future__ import annotations

import json
import multiprocessing
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import analyze
from logsleuth.cli import app
from logsleuth.history import append, compact, load, parse_since, record, summarize
from logsleuth.report.model import CandidateOut, FirstFailure, RankOut, Report, Verdict

from .conftest import ROOT

runner = CliRunner()
RAISE_JOB = ROOT / "tests" / "fixtures" / "slurm-raise" / "slurm-23.out"
T0 = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)


def verdict(category: str, node: str | None, rank: int | None = 0, others: tuple[str, ...] = ()) -> Report:
    """A report as the pipeline builds it: first failure on ``node``, other failed ranks on ``others``."""
    ranks = [RankOut(rank or 0, node, "culprit")] + [RankOut(i + 10, n, "failed") for i, n in enumerate(others)]
    v = Verdict(category, category, 0.8, FirstFailure(rank, node, None), [], f"{category} on {node}", [])
    return Report(v, [CandidateOut(category, category, 0.8)], [], ranks=ranks)


def test_record_holds_the_verdict_job_and_inputs() -> None:
    row = record(analyze([RAISE_JOB]), job="23", when=T0).row(0, named=True)
    assert (row["job"], row["category"], row["first_rank"], row["first_node"]) == ("23", "user_code_error", 1, "node01")
    assert row["nodes"] == ["node01"] and row["ranks"] == [1] and row["inputs"] == [str(RAISE_JOB)]
    assert row["time"] == T0 and 0 < row["confidence"] <= 1


def _append_many(store: str, worker: int) -> None:
    for i in range(10):
        append(store, verdict("cuda_oom", f"gpu{worker:02d}"), job=f"{worker}-{i}")


def test_concurrent_appends_from_many_processes_lose_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ctx = multiprocessing.get_context("spawn")  # fork and polars threads do not mix
    procs = [ctx.Process(target=_append_many, args=(str(store), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    loaded = load(store)
    assert loaded.problems == [] and loaded.table.height == 40
    assert loaded.table.get_column("job").n_unique() == 40
    assert not list(store.glob(".*"))  # no temporary files left behind


def test_a_damaged_file_is_reported_and_the_rest_still_read(tmp_path: Path) -> None:
    append(tmp_path, verdict("cuda_oom", "gpu01"), job="1")
    (tmp_path / "20261101T000000-broken.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / ".20261101T000001-partial.parquet.tmp").write_bytes(b"half")
    loaded = load(tmp_path)
    assert loaded.table.height == 1
    assert len(loaded.problems) == 1 and "broken.parquet: unreadable" in loaded.problems[0]


def _bad_node_store(store: Path) -> None:
    """Three weeks of failures: gpu07 keeps failing, the rest fail now and then."""
    when = T0
    for day in range(21):
        when = T0 + timedelta(days=day)
        append(store, verdict("user_code_error", f"gpu{day % 6:02d}"), job=f"u{day}", when=when)
        if day % 2 == 0:
            append(store, verdict("gpu_hardware_fault", "gpu07", rank=3), job=f"x{day}", when=when + timedelta(hours=1))
        if day % 5 == 0:
            append(store, verdict("nccl_ib_error", "gpu02", others=("gpu07",)), job=f"ib{day}", when=when + timedelta(hours=2))
        append(store, verdict("slurm_time_limit", "gpu03"), job=f"t{day}", when=when + timedelta(hours=3))
        append(store, verdict("none", None, rank=None), job=f"ok{day}", when=when + timedelta(hours=4))


def test_the_recurring_node_comes_first(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    s = summarize(load(tmp_path).table)
    assert (s["verdicts"], s["clean"]) == (21 + 11 + 5 + 21 + 21, 21)
    first = s["nodes"][0]
    assert first["node"] == "gpu07" and first["failures"] == 11 + 5
    assert first["causes"] == {"gpu_hardware_fault": 11, "nccl_ib_error": 5}
    # a time limit says nothing about the node it stopped on
    assert all(n["causes"].get("slurm_time_limit") is None for n in s["nodes"])
    counts = {c["cause"]: c["count"] for c in s["causes"]}
    assert counts == {"user_code_error": 21, "slurm_time_limit": 21, "gpu_hardware_fault": 11, "nccl_ib_error": 5}


def test_timeline_counts_failures_per_period(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    table = load(tmp_path).table
    daily = summarize(table)["timeline"]
    assert len(daily) == 21 and daily[0] == {
        "period": "2026-11-01",
        "total": 4,
        "causes": {"gpu_hardware_fault": 1, "nccl_ib_error": 1, "slurm_time_limit": 1, "user_code_error": 1},
    }
    weekly = summarize(table, by="week")["timeline"]
    assert sum(w["total"] for w in weekly) == summarize(table)["failures"] and len(weekly) == 4


def test_cli_history_names_the_bad_node_first_in_terminal_and_json(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    term = runner.invoke(app, ["history", str(tmp_path), "--no-color"], env={"COLUMNS": "120"})
    assert term.exit_code == 0
    section = term.stdout.split("Nodes implicated most often", 1)[1]
    assert section.split("\n")[2].split()[0] == "gpu07"  # the first row under the header
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "--format", "json"]).stdout)
    assert data["nodes"][0]["node"] == "gpu07" and data["failures"] == 21 + 11 + 5 + 21


def test_since_keeps_only_recent_verdicts(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "-f", "json", "--since", "2026-11-20"]).stdout)
    # 2026-11-20 is day 19 (user, time limit, clean) and day 20 adds a hardware fault and an IB error
    assert data["first"] == "2026-11-20T08:00:00+00:00" and data["verdicts"] == 3 + 5
    assert parse_since("7d", now=T0) == T0 - timedelta(days=7)
    assert parse_since("2026-11-01T08:00") == T0
    with pytest.raises(ValueError):
        parse_since("yesterday")


def test_analyze_store_records_the_slurm_job_id(tmp_path: Path) -> None:
    store = tmp_path / "h"
    result = runner.invoke(app, ["analyze", str(RAISE_JOB), "--store", str(store)], env={"SLURM_JOB_ID": "4242"})
    assert result.exit_code == 0
    assert pl.read_parquet(next(store.glob("*.parquet"))).item(0, "job") == "4242"


def test_compact_merges_every_file_into_one_and_keeps_every_verdict(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    before = summarize(load(tmp_path).table)
    merged, problems = compact(tmp_path)
    assert (merged, problems) == (79, []) and len(list(tmp_path.glob("*.parquet"))) == 1
    assert summarize(load(tmp_path).table) == before
    append(tmp_path, verdict("cuda_oom", "gpu01"), job="later")  # appending goes on as before
    assert load(tmp_path).table.height == 80


def test_a_verdict_seen_twice_while_compacting_counts_once(tmp_path: Path) -> None:
    first = append(tmp_path, verdict("cuda_oom", "gpu01"), job="1")
    append(tmp_path, verdict("cuda_oom", "gpu02"), job="2")
    copy = tmp_path / "x.parquet"
    copy.write_bytes(first.read_bytes())  # the merged file is in, the source not yet gone
    assert load(tmp_path).table.get_column("job").sort().to_list() == ["1", "2"]


def test_compact_leaves_unreadable_files_alone(tmp_path: Path) -> None:
    for i in range(3):
        append(tmp_path, verdict("cuda_oom", "gpu01"), job=str(i))
    bad = tmp_path / "20261101T000000-broken.parquet"
    bad.write_bytes(b"PAR1 not really")
    merged, problems = compact(tmp_path)
    assert merged == 3 and bad.exists() and "broken.parquet: unreadable" in problems[0]
    assert load(tmp_path).table.height == 3


def test_cli_history_compact(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    result = runner.invoke(app, ["history", str(tmp_path), "--compact", "--format", "json"])
    assert result.exit_code == 0 and "merged 79 files" in result.stderr
    assert json.loads(result.stdout)["nodes"][0]["node"] == "gpu07" and len(list(tmp_path.glob("*.parquet"))) == 1


def test_a_verdict_is_filed_under_the_jobs_own_failure_time_not_the_analysis_time() -> None:
    report = verdict("cuda_oom", "gpu03")
    report.verdict.first_failure.time = "2026-10-02T03:04:05"
    row = record(report, job="7", when=T0).row(0, named=True)
    assert row["time"] == datetime(2026, 10, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert row["analyzed"] == T0
    assert record(verdict("cuda_oom", "gpu03"), when=T0).item(0, "time") == T0  # no stamp: the analysis time


def test_history_node_lists_the_jobs_that_implicate_that_node(tmp_path: Path) -> None:
    for i, node in enumerate(["gpu07", "gpu01", "gpu07"]):
        append(tmp_path, verdict("gpu_hardware_fault", node), job=f"10{i}", when=T0 + timedelta(hours=i))
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "--node", "gpu07", "-f", "json"]).stdout)
    assert [j["job"] for j in data["jobs"]] == ["102", "100"]
    text = runner.invoke(app, ["history", str(tmp_path), "--node", "gpu07"]).stdout
    assert "2 verdict(s) implicate gpu07" in text and "job 102" in text


def test_each_verdict_carries_the_uid_of_its_writer(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    table = load(tmp_path).table
    assert table.get_column("writer_uid").unique().to_list() == [os.geteuid()]  # every file here is this process's
    assert summarize(table)["nodes"][0]["writers"] == 1
    compact(tmp_path)
    assert load(tmp_path).table.get_column("writer_uid").unique().to_list() == [os.geteuid()]
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "--node", "gpu07", "-f", "json"]).stdout)
    assert {j["writer_uid"] for j in data["jobs"]} == {os.geteuid()}
