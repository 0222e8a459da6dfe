"""torchrun's ChildFailedError table folds into one event per failed rank."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from tests.conftest import events_of
from tests.data_torchrun import TORCHRUN_VALUEERROR


def test_failure_table_entries_carry_rank_host_exit_signal_and_section() -> None:
    ev = events_of(TORCHRUN_VALUEERROR)
    got = (
        ev.filter(pl.col("kind") == "child_failed")
        .select("rank", "local_rank", "node", "pid", "exit_code", "signal", "detail", "time")
        .rows()
    )
    t = datetime(2026, 11, 22, 3, 59, 47)
    assert got == [
        (0, 0, "node01", 25299, -15, "SIGTERM", "failure", t),
        (2, 2, "node01", 25301, -15, "SIGTERM", "failure", t),
        (1, 1, "node01", 25300, 1, None, "root_cause", t),
    ]


def test_idx_is_not_taken_for_the_rank() -> None:
    ev = events_of(
        """
        Root Cause (first observed failure):
        [0]:
          time      : 2024-02-01_10:00:00
          host      : gpu-node-7.example.org
          rank      : 13 (local_rank: 5)
          exitcode  : -9 (pid: 4242)
          error_file: <N/A>
          traceback : Signal 9 (SIGKILL) received by PID 4242
        """
    )
    row = ev.filter(pl.col("kind") == "child_failed").row(0, named=True)
    assert (row["rank"], row["local_rank"], row["node"], row["signal"], row["line"]) == (13, 5, "gpu-node-7", "SIGKILL", 5)


def test_traceback_inside_the_table_gives_the_entry_its_exception() -> None:
    ev = events_of(
        """
        Failures:
          <NO_OTHER_FAILURES>
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2024-02-01_10:00:00
          host      : node02
          rank      : 3 (local_rank: 1)
          exitcode  : 1 (pid: 99)
          error_file: /tmp/torchelastic_x/error.json
          traceback : Traceback (most recent call last):
            File "/home/user/train.py", line 8, in main
              raise KeyError("label")
          KeyError: 'label'
        """
    )
    row = ev.filter(pl.col("kind") == "child_failed").row(0, named=True)
    assert (row["rank"], row["exc_type"]) == (3, "KeyError")
    assert ev.height == 1


def test_agent_lines_carry_exit_code_local_rank_pid_and_signal() -> None:
    ev = events_of(TORCHRUN_VALUEERROR)
    failed = ev.filter(pl.col("kind") == "agent_worker_failed").row(0, named=True)
    assert (failed["exit_code"], failed["local_rank"], failed["pid"], failed["source"]) == (1, 1, 25300, "launcher")
    teardown = ev.filter(pl.col("kind") == "agent_teardown")
    assert teardown.select("pid", "signal").rows() == [(25299, "SIGTERM"), (25301, "SIGTERM")]


def test_a_c10_stack_dump_gives_cpp_stack_events_for_its_origin_and_throw_frame() -> None:
    ev = events_of(
        """
        Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 (most recent call first):
        frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x1554e8b12f86 in /opt/venv/lib/python3.11/site-packages/torch/lib/libc10.so)
        frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)
        """
    )
    rows = ev.select("kind", "source", "level", "detail").rows()
    assert rows[:2] == [
        ("cpp_stack", "torch", "error", "ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521"),
        ("cpp_stack", "torch", "error", "c10::Error::Error"),
    ]
    assert rows[2][0] == "line"  # the other frames are the stack's detail


def test_a_watchdog_line_cut_short_by_the_paste_is_still_a_watchdog_timeout() -> None:
    ev = events_of(
        "(WorkerDict pid=833, ip=10.0.0.1) [rank62]:[E809 14:59:33.656957424 ProcessGroupNCCL.cpp:629] [Rank 62] Watchdog caught collective oper\n"
    )
    row = ev.row(0, named=True)
    assert (row["kind"], row["rank"], row["pid"], row["level"]) == ("watchdog_timeout", 62, 833, "error")
