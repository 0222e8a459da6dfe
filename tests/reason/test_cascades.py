"""Real cascades: the rank that failed first is named, never one of its victims."""

from __future__ import annotations

from pathlib import Path

import pytest

import logsleuth
from logsleuth.cases import read_case

DATA = Path(__file__).resolve().parent.parent / "data" / "cascades"


def analyze(case: str) -> logsleuth.Report:
    return logsleuth.analyze(sorted(str(p) for p in (DATA / case).iterdir() if p.suffix in (".log", ".out")))


def statuses(report: logsleuth.Report) -> dict[int, str]:
    return {r.rank: r.status for r in report.ranks}


#: The cascades with one culprit whose victims all fail after it (the truth: each case.toml).
CULPRIT_AND_VICTIMS = [
    "valueerror-tee-4",
    "valueerror-2node-tee",
    "segfault-4",
    "segfault-2node",
    "sigkill-tee-4",
    "sigkill-rank0-4",
    "abort-2",
    "silent-exit1-4",
    "hang-4",
    "hang-2node",
    # SLURM jobs from corpus/tools/inject.py (branch real-logs)
    "real-valueerror-srun-4task",
    "real-valueerror-srun-torchrun-4rank",
    "real-segfault-srun-4task",
    "real-sigkill-srun-4task",
    "real-abort-srun-2task",
    "real-oom-srun-4task",
    "real-hang-srun-4task",
    "real-hang-before-init-torchrun-4rank",
]


@pytest.mark.parametrize("case", CULPRIT_AND_VICTIMS)
def test_first_failure_is_the_faulty_rank_and_the_rest_are_victims(case: str) -> None:
    truth = read_case(DATA / case)
    report = analyze(case)
    v = report.verdict
    assert (v.first_failure.rank, v.first_failure.node) == (truth.rank, truth.node)
    assert v.category != "peer_failure"
    st = statuses(report)
    assert st.pop(truth.rank) == "culprit"
    assert set(st.values()) == {"victim"}


# each case's category is checked with every labelled case, by tests/test_labelled_cases.py


def test_a_rank_killed_without_a_word_is_named_even_when_no_rule_knows_why() -> None:
    report = analyze("silent-exit1-4")
    v = report.verdict
    assert v.category == "unknown" and v.first_failure.rank == 2
    assert v.evidence[0].rank == 2 and v.evidence[0].kind in ("child_failed", "agent_worker_failed")


def test_the_launchers_root_cause_is_one_signal_among_others() -> None:
    # torchrun's "Root Cause (first observed failure)" names rank 0, which only timed out
    text = (DATA / "hang-4" / "torchrun.log").read_text()
    root = text[text.index("Root Cause") :]
    assert "rank      : 0 (local_rank: 0)" in root
    assert analyze("hang-4").verdict.first_failure.rank == 1


def test_a_hung_rank_is_the_one_that_never_reported_the_timeout() -> None:
    report = analyze("hang-2node")
    assert report.hang is not None
    assert report.hang["hung"] == [3] and report.hang["timed_out"] == [0, 1, 2]
    assert "rank 3 (node02) never reached it" in report.verdict.summary
    culprit = next(r for r in report.ranks if r.rank == 3)
    assert culprit.kind in ("agent_teardown", "child_failed") and culprit.last_line is not None


def test_victims_are_listed_with_their_evidence() -> None:
    report = analyze("valueerror-tee-4")
    victims = [r for r in report.ranks if r.status == "victim"]
    assert {r.rank for r in victims} == {0, 1, 3}
    by_rank = {r.rank: r for r in victims}
    assert by_rank[0].note == "stopped by the launcher" and by_rank[0].kind == "child_failed"
    assert by_rank[1].kind == "traceback" and by_rank[1].cause == "peer_failure"
    assert all(r.file and r.line for r in victims)
    assert "3 other rank(s) failed as a consequence" in report.verdict.summary


def test_a_rank_that_left_silently_leaves_only_victims_in_the_log() -> None:
    # rank 1 returned with exit code 0 and is never named: the first failure is not in the log
    report = analyze("exit-early-2")
    assert report.verdict.category == "peer_failure"
    assert statuses(report) == {0: "victim"}


def test_two_node_files_get_nodes_from_their_own_lines() -> None:
    report = analyze("segfault-2node")
    assert {r.rank: r.node for r in report.ranks} == {0: "node01", 1: "node01", 2: "node02", 3: "node02"}
    assert report.to_dict()["stats"]["ordering"] in ("mixed", "timestamps")


def test_slurmstepd_lines_in_task_0s_stream_do_not_make_rank_0_the_culprit() -> None:
    # "0: slurmstepd-node01: error: Detected 1 oom-kill event(s)" is about task 2
    report = analyze("real-oom-srun-4task")
    assert report.verdict.first_failure.rank == 2
    assert any("oom" in e.text for e in report.verdict.evidence)


def test_a_cancellation_after_ranks_had_died_is_the_clean_up_not_the_cause() -> None:
    # the hung job was scancelled two minutes after three ranks had timed out and exited
    report = analyze("real-hang-srun-4task")
    assert report.verdict.category == "collective_timeout"
    assert "slurm_cancelled" not in [c.cause for c in report.candidates[:1]]


def test_with_detail_debug_the_rank_whose_collective_differs_is_the_culprit() -> None:
    report = analyze("real-mismatch-shape-detail-srun-4task")
    v = report.verdict
    assert (v.category, v.first_failure.rank) == ("collective_mismatch", 3)
    assert statuses(report) == {0: "victim", 1: "victim", 2: "victim", 3: "culprit"}


def test_a_rank_that_left_without_an_error_is_named_when_its_tee_lines_show_it() -> None:
    # torchrun --tee 3: "[default3]:rank 3: no more data in shard, stopping", and rank 3 is in no failure table
    report = analyze("real-exit-early-torchrun-tee-4rank")
    v = report.verdict
    assert (v.category, v.first_failure.rank) == ("peer_failure", 3)
    assert "left the job without an error" in v.summary
    assert statuses(report) == {0: "victim", 1: "victim", 2: "victim", 3: "finished"}


def test_ranks_failing_alike_before_init_give_the_lowest_rank() -> None:
    # both ranks raise the same error before init_process_group (no rank prefix yet); torchrun saw rank 1 first
    report = analyze("real-backend-nccl-torchrun-2rank")
    assert report.verdict.first_failure.rank == 0


@pytest.mark.parametrize("case", ["real-harmless-torchrun-2rank", "real-harmless-srun-4task"])
def test_an_exception_the_job_survived_is_not_a_failure(case: str) -> None:
    # rank 0 logs a caught ConnectionError with its traceback, retries, and training finishes
    report = analyze(case)
    assert report.verdict.category == "none"
    assert set(statuses(report).values()) <= {"finished"}


def test_a_pasted_traceback_without_launcher_output_still_counts_as_a_failure(write) -> None:
    text = (DATA / "real-harmless-torchrun-2rank" / "torchrun.log").read_text()
    start = text.index("Traceback (most recent call last):")
    paste = text[start : text.index("metrics: connected")]
    assert logsleuth.analyze([write("paste.txt", paste)]).verdict.category == "unknown"


def test_a_log_cut_off_right_after_an_error_still_counts_as_a_failure(write) -> None:
    # torchrun's banner is there, its failure report is not: the log ends at the traceback
    text = (DATA / "real-harmless-torchrun-2rank" / "torchrun.log").read_text()
    cut = text[: text.index("metrics: connected")]
    assert logsleuth.analyze([write("torchrun.log", cut)]).verdict.category == "unknown"


def test_store_keys_still_awaited_name_the_rank_that_never_reached_init() -> None:
    # rank 3 never called init_process_group; the others' pre-init errors carry no rank prefix,
    # but each lists the key it waited for: keys: /default_pg/0//cpu//0/3
    report = analyze("real-hang-before-init-torchrun-4rank")
    v = report.verdict
    assert (v.category, v.first_failure.rank) == ("rendezvous_timeout", 3)
    assert report.hang is not None and report.hang["hung"] == [3]
