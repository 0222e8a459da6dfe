"""The verdict history: append-safe store, and a summary where a bad node stands out."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import analyze, history
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


# -- this week against the week before -------------------------------------------------------------


NOW = T0 + timedelta(days=60)


def _weeks_store(store: Path) -> None:
    """cuda_oom all along; gpu_hardware_fault last week only; nccl_ib_error first seen this week."""
    for day in range(0, 60, 3):
        append(store, verdict("cuda_oom", f"gpu{day % 4:02d}"), job=f"oom{day}", when=T0 + timedelta(days=day))
    append(store, verdict("gpu_hardware_fault", "gpu07"), job="hw1", when=NOW - timedelta(days=10))
    append(store, verdict("gpu_hardware_fault", "gpu07"), job="hw2", when=NOW - timedelta(days=9))
    for i in range(3):  # the newest at NOW: the weeks end there
        append(store, verdict("nccl_ib_error", "gpu02"), job=f"ib{i}", when=NOW - timedelta(hours=i))


def test_this_week_against_last_counts_each_cause_and_names_the_new_ones(tmp_path: Path) -> None:
    _weeks_store(tmp_path)
    week = summarize(load(tmp_path).table, now=NOW)["this_week"]
    assert (week["from"], week["to"]) == ((NOW - timedelta(days=7)).isoformat(), NOW.isoformat())
    got = {c["cause"]: (c["this_week"], c["last_week"], c["new"]) for c in week["causes"]}
    # cuda_oom every 3 days: days 54 and 57 fall in the 7 days up to NOW (day 60), 48 and 51 in the 7 before
    assert got == {"nccl_ib_error": (3, 0, True), "cuda_oom": (2, 2, False), "gpu_hardware_fault": (0, 2, False)}
    assert week["causes"][0]["cause"] == "nccl_ib_error"  # new causes first
    assert (week["failures"], week["last_week"]) == (5, 4)


def test_the_weeks_end_at_the_newest_verdict_not_at_a_later_clock_nor_at_a_forged_future(tmp_path: Path) -> None:
    _weeks_store(tmp_path)
    later = summarize(load(tmp_path).table, now=NOW + timedelta(days=30))["this_week"]
    assert later == summarize(load(tmp_path).table, now=NOW)["this_week"] and later["to"] == NOW.isoformat()
    append(tmp_path, verdict("cuda_oom", "gpu01"), job="forged", when=NOW + timedelta(days=400))
    assert summarize(load(tmp_path).table, now=NOW + timedelta(days=1))["this_week"]["to"] == (NOW + timedelta(days=1)).isoformat()


def test_a_cause_is_new_only_if_the_whole_store_never_named_it_before_whatever_since_says(tmp_path: Path) -> None:
    _weeks_store(tmp_path)
    s = summarize(load(tmp_path).table, now=NOW, since=NOW - timedelta(days=2))
    assert s["verdicts"] == 3  # the window: the three IB errors
    got = {c["cause"]: c["new"] for c in s["this_week"]["causes"]}
    assert got == {"nccl_ib_error": True, "cuda_oom": False, "gpu_hardware_fault": False}


def test_this_week_is_in_json_and_on_the_terminal(tmp_path: Path) -> None:
    append(tmp_path, verdict("nccl_ib_error", "gpu02"), job="1")  # now: this week, and new
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "-f", "json"]).stdout)
    assert [(c["cause"], c["this_week"], c["new"]) for c in data["this_week"]["causes"]] == [("nccl_ib_error", 1, True)]
    text = runner.invoke(app, ["history", str(tmp_path), "--no-color"], env={"COLUMNS": "160"}).stdout
    section = text.split("This week against the week before", 1)[1]
    assert "nccl_ib_error" in section.split("Causes")[0] and "new" in section.split("Causes")[0]


# -- reading only what is needed ----------------------------------------------------------------------


def test_scan_decodes_only_the_columns_asked_for_and_the_writer(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    with history.scan(tmp_path, columns=history.SUMMARY_COLUMNS) as got:
        frame = got.frame().collect()
    assert frame.columns == ["time", "cause", "category", "nodes", "writer_uid"] and frame.height == 79
    assert load(tmp_path, columns=["job"]).table.columns == ["job", "writer_uid"]


@pytest.fixture
def big_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file of root's or the reader's counts as big: decoded lazily from its descriptor."""
    monkeypatch.setattr(history, "BIG_FILE_BYTES", 0)


def _summaries_agree(store: Path, now: datetime, **kw: Any) -> dict[str, Any]:
    """The summary of a scan (big files lazily, stored summaries where they stand for their files)
    must be that of every row loaded and summarised in memory."""
    with history.scan(store, columns=history.SUMMARY_COLUMNS) as got:
        lazy = summarize(got, now=now, top=50, **kw)
    assert lazy == summarize(load(store).table, now=now, top=50, **kw)
    return lazy


@pytest.mark.usefixtures("big_files")
def test_a_compacted_store_read_lazily_and_from_stored_summaries_says_what_its_rows_say(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    compact(tmp_path, part_rows=16)
    assert all(pl.read_parquet_metadata(f).get("logsleuth.summary.v1.rows") for f in tmp_path.glob("*.parquet"))
    now = T0 + timedelta(days=60)  # every file lies before the two weeks compared: all summaries stored
    for since in (None, T0 + timedelta(days=10), T0 + timedelta(days=30), T0 - timedelta(days=1)):
        _summaries_agree(tmp_path, now, since=since)
    s = _summaries_agree(tmp_path, T0 + timedelta(days=21))  # the last weeks' files: read
    assert s["nodes"][0]["node"] == "gpu07" and s["this_week"]["causes"]


@pytest.mark.usefixtures("big_files")
def test_a_stored_summary_is_not_used_for_a_file_holding_a_verdict_seen_twice(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    compact(tmp_path, part_rows=20)
    first = sorted(tmp_path.glob("*.parquet"))[0]
    (tmp_path / "zz-copy.parquet").write_bytes(first.read_bytes())  # as if a compaction had not removed it yet
    s = _summaries_agree(tmp_path, T0 + timedelta(days=60))
    assert s["verdicts"] == 79


# -- a verdict seen twice counts once, big files too ----------------------------------------------


@pytest.mark.usefixtures("big_files")
def test_a_verdict_in_a_big_file_and_in_a_small_one_counts_once(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    sources = {f.name: f.read_bytes() for f in tmp_path.glob("*.parquet")}
    compact(tmp_path)
    (merged,) = tmp_path.glob("*.parquet")
    for name, data in list(sources.items())[:5]:  # merged, not yet removed
        (tmp_path / name).write_bytes(data)
    with pytest.MonkeyPatch.context() as m:  # the merged file big, the others small
        m.setattr(history, "BIG_FILE_BYTES", merged.stat().st_size - 1)
        assert load(tmp_path).table.height == 79
        assert summarize(load(tmp_path).table)["verdicts"] == 79
        with history.scan(tmp_path, columns=history.SUMMARY_COLUMNS) as got:  # the copies left out: the small files'
            assert len(got.parts) == 1 and got.parts[0].stored is not None and got.small.height == 0
    assert load(tmp_path).table.height == 79  # all of them big


@pytest.mark.usefixtures("big_files")
def test_two_big_files_holding_the_same_verdicts_count_them_once(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    compact(tmp_path)
    (only,) = tmp_path.glob("*.parquet")
    (tmp_path / "copy.parquet").write_bytes(only.read_bytes())
    assert load(tmp_path).table.height == 79
    assert summarize(load(tmp_path).table)["verdicts"] == 79


@pytest.mark.usefixtures("big_files")
def test_a_big_file_is_decoded_from_the_file_that_was_checked_not_whatever_now_has_its_name(tmp_path: Path) -> None:
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    append(store, verdict("cuda_oom", "gpu01"), job="checked")
    append(elsewhere, verdict("gpu_hardware_fault", "gpu07"), job="swapped in")
    (checked,) = store.glob("*.parquet")
    with history.scan(store) as got:
        (next(elsewhere.glob("*.parquet"))).rename(checked)  # after the checks, before the decoding
        jobs = got.frame().collect().get_column("job").to_list()
    assert jobs == ["checked"]


@pytest.mark.usefixtures("big_files")
def test_history_node_and_summary_read_big_files(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    compact(tmp_path, part_rows=10)
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "--node", "gpu07", "-f", "json"]).stdout)
    assert len(data["jobs"]) == 11 + 5 and data["jobs"][0]["time"] > data["jobs"][-1]["time"]
    data = json.loads(runner.invoke(app, ["history", str(tmp_path), "-f", "json"]).stdout)
    assert data["nodes"][0]["node"] == "gpu07" and data["verdicts"] == 79 and data["problems"] == []


# -- compaction at scale ----------------------------------------------------------------------------------


def _spans(store: Path) -> list[tuple[int, datetime, datetime]]:
    out = []
    for f in sorted(store.glob("*.parquet")):
        n, low, high = (
            pl.scan_parquet(f).select(pl.len(), pl.col("time").min().alias("a"), pl.col("time").max().alias("b")).collect().row(0)
        )
        out.append((n, low, high))
    return sorted(out, key=lambda x: x[1])


def test_compact_cuts_the_store_by_time_into_files_of_at_most_part_rows(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    before = summarize(load(tmp_path).table)
    merged, problems = compact(tmp_path, part_rows=20)
    assert (merged, problems) == (79, [])
    spans = _spans(tmp_path)
    assert [n for n, _, _ in spans] == [20, 20, 20, 19]  # 79 verdicts: 4 files, cut evenly
    assert all(a[2] < b[1] for a, b in itertools.pairwise(spans))  # each its own stretch of time
    assert summarize(load(tmp_path).table) == before


def test_compact_leaves_full_files_alone_and_merges_new_verdicts_into_their_stretch_of_time(tmp_path: Path) -> None:
    _bad_node_store(tmp_path)
    compact(tmp_path, part_rows=20)
    full = sorted(f.name for f in tmp_path.glob("*.parquet"))
    late = T0 + timedelta(days=30)
    for i in range(3):  # newer than everything: their own file
        append(tmp_path, verdict("cuda_oom", "gpu01"), job=f"late{i}", when=late + timedelta(hours=i))
    assert compact(tmp_path, part_rows=20)[0] == 3  # the three new ones: into a file of their own
    names = sorted(f.name for f in tmp_path.glob("*.parquet"))
    assert set(full) <= set(names) and len(names) == 5  # the full files: untouched
    old = T0 + timedelta(days=2, minutes=30)  # a verdict inside the first file's stretch: that file is cut again
    append(tmp_path, verdict("cuda_oom", "gpu05"), job="old", when=old)
    compact(tmp_path, part_rows=20)
    spans = _spans(tmp_path)
    assert sum(n for n, _, _ in spans) == 79 + 3 + 1 and all(n <= 20 for n, _, _ in spans)
    assert all(a[2] < b[1] for a, b in itertools.pairwise(spans))
    assert any(low <= old <= high for _, low, high in spans)


def test_a_growing_store_stays_at_a_bounded_number_of_files(tmp_path: Path) -> None:
    part_rows, when = 12, T0
    for round_ in range(10):  # fewer new verdicts than half a file each time: the newest file keeps growing
        for i in range(4):
            when += timedelta(hours=1)
            append(tmp_path, verdict("cuda_oom", f"gpu{i:02d}"), job=f"{round_}-{i}", when=when)
        compact(tmp_path, part_rows=part_rows)
        rows = 4 * (round_ + 1)
        files = _spans(tmp_path)
        assert sum(n for n, _, _ in files) == rows
        assert len(files) <= 2 * rows / part_rows + 1 and all(n <= part_rows for n, _, _ in files)


def test_compact_merges_many_small_files_in_rounds_of_bounded_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        append(tmp_path, verdict("cuda_oom", "gpu01"), job=str(i), when=T0 + timedelta(minutes=i))
    seen: list[int] = []
    decode = history._decode_small

    def counting(sources: list[Any], names: list[str], problems: list[str]) -> pl.DataFrame:
        seen.append(len(sources))
        return decode(sources, names, problems)

    monkeypatch.setattr(history, "_decode_small", counting)
    assert compact(tmp_path, part_rows=8)[0] >= 30
    assert max(seen) <= 8 + 8  # a round takes at most part_rows verdicts of small files (and merged files of its own)
    assert load(tmp_path).table.height == 30 and all(n <= 8 for n, _, _ in _spans(tmp_path))


def test_own_limits_admit_a_store_of_ten_million_verdicts_compacted_into_one_file(tmp_path: Path) -> None:
    """A store compacted by an older logsleuth is one file; a year of a fleet's verdicts must still load."""
    rows = pl.concat(
        [
            record(verdict("nccl_ib_error", f"gpu{i % 2000:04d}", rank=i % 64, others=(f"gpu{(i * 7) % 2000:04d}",)), job=str(i))
            for i in range(2000)
        ]
    )
    path = tmp_path / "one.parquet"
    rows.write_parquet(path)
    shape = history._inspect(path.read_bytes(), pages=False)
    scale = 10_000_000 / rows.height
    assert scale * shape.rows <= history.OWN_LIMITS.rows
    assert scale * path.stat().st_size <= history.OWN_LIMITS.file_bytes
    assert scale * shape.plain <= history.OWN_LIMITS.decoded
