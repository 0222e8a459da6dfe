"""SLURM lines: cancellations (every release's wording), OOM kills, srun task exits."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import events_of


@pytest.mark.parametrize(
    ("line", "job", "node", "reason"),
    [
        (
            "slurmstepd-node01: error: *** JOB 4 ON node01 CANCELLED AT 2026-11-22T02:49:22 DUE TO TIME LIMIT ***",
            "4",
            "node01",
            "TIME LIMIT",
        ),
        (
            "0: slurmstepd-node01: error: *** STEP 4.0 ON node01 CANCELLED AT 2026-11-22T02:49:22 DUE TO TIME LIMIT ***",
            "4.0",
            "node01",
            "TIME LIMIT",
        ),
        ("slurmstepd: error: *** JOB 123 ON gpu07 CANCELLED AT 2024-01-01T00:00:00 DUE TO PREEMPTION ***", "123", "gpu07", "PREEMPTION"),
        (
            "slurmstepd: error: *** JOB 9 ON n3 CANCELLED AT 2024-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
            "9",
            "n3",
            "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS",
        ),
        (
            "slurmstepd: error: *** STEP 5.0 ON n1 CANCELLED AT 2025-06-01T00:00:00 DUE to SIGNAL Terminated ***",
            "5.0",
            "n1",
            "SIGNAL Terminated",
        ),
        ("slurmstepd: error: *** JOB 77 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***", "77", "n1", "CANCELLED"),
        ("slurmstepd: *** JOB 1234 CANCELLED AT 2019-05-01T10:00:00 DUE TO TIME LIMIT *** on node-b", "1234", "node-b", "TIME LIMIT"),
    ],
)
def test_cancellation_wordings_give_job_node_and_reason(line: str, job: str, node: str, reason: str) -> None:
    row = events_of(line).row(0, named=True)
    assert (row["kind"], row["job"], row["node"], row["reason"], row["source"]) == ("slurm_cancel", job, node, reason, "slurm")


@pytest.mark.parametrize(
    ("line", "job"),
    [
        ("slurmstepd: error: Detected 1 oom_kill event in StepId=123.batch. Some of the step tasks have been OOM Killed.", "123.batch"),
        (
            "slurmstepd-node01: error: Detected 1 oom-kill event(s) in StepId=8.0. Some of your processes may have been killed by the cgroup out-of-memory handler.",
            "8.0",
        ),
        (
            "slurmstepd: error: Detected 3 oom-kill event(s) in step 77.0 cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
            "77.0",
        ),
    ],
)
def test_oom_kill_in_both_wordings(line: str, job: str) -> None:
    row = events_of(line).row(0, named=True)
    assert (row["kind"], row["job"], row["level"]) == ("slurm_oom", job, "error")


@pytest.mark.parametrize(
    ("line", "node", "tasks", "code", "signal"),
    [
        ("srun: error: node01: task 3: Exited with exit code 1", "node01", "3", 1, None),
        ("srun: error: node[01-02]: tasks 0-7: Killed", "node[01-02]", "0-7", None, "SIGKILL"),
        ("srun: error: node01: task 0: Segmentation fault (core dumped)", "node01", "0", None, "SIGSEGV"),
        ("srun: error: node01: tasks 0-1: Terminated", "node01", "0-1", None, "SIGTERM"),
        ("srun: error: node01: task 1: Out Of Memory", "node01", "1", None, None),
    ],
)
def test_srun_task_exit_lines(line: str, node: str, tasks: str, code: int | None, signal: str | None) -> None:
    row = events_of(line).row(0, named=True)
    assert (row["kind"], row["node"], row["tasks"], row["exit_code"], row["signal"]) == ("srun_exit", node, tasks, code, signal)


def test_step_aborted_is_an_info_line_not_an_error_prefix() -> None:
    ev = events_of("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    assert ev.filter(pl.col("kind") == "srun_abort").height == 1
