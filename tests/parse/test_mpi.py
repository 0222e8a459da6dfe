"""Open MPI's signal handler report (opal/util/stacktrace.c): one event per dying process."""

from __future__ import annotations

from pathlib import Path

import logsleuth
from tests.conftest import events_of


def test_a_report_folds_into_one_event_with_node_pid_and_signal() -> None:
    ev = events_of(
        """
        [node01:19474] *** Process received signal ***
        [node01:19474] Signal: Segmentation fault (11)
        [node01:19474] Signal code: Address not mapped (1)
        [node01:19474] Failing at address: (nil)
        [node01:19474] [ 0] /lib/x86_64-linux-gnu/libpthread.so.0(+0x11390)[0x7f13ce25a390]
        [node01:19474] [ 1] /opt/conda/lib/python3.10/site-packages/horovod/common/mpi_lib.so(+0x22603)[0x7f13cc796603]
        [node01:19474] *** End of error message ***
        """
    )
    reports = ev.filter(ev["kind"] == "signal_report")
    assert reports.height == 1
    row = reports.row(0, named=True)
    assert (row["node"], row["pid"], row["signal"], row["level"], row["line"]) == ("node01", 19474, "SIGSEGV", "fatal", 1)
    assert row["message"] == "Signal: Segmentation fault (11); Signal code: Address not mapped (1); Failing at address: (nil)"
    assert row["detail"] == "frames: 2"


def test_each_process_of_mpirun_output_gets_its_own_report() -> None:
    ev = events_of(
        """
        [1,3]<stderr>:[container01:00121] *** Process received signal ***
        [1,3]<stderr>:[container01:00121] Signal: Bus error (7)
        [1,0]<stderr>:[container01:00118] *** Process received signal ***
        [1,3]<stderr>:[container01:00121] Signal code: Non-existant physical address (2)
        [1,0]<stderr>:[container01:00118] Signal: Bus error (7)
        """
    )
    reports = ev.filter(ev["kind"] == "signal_report").sort("rank")
    assert reports.select("rank", "pid", "signal").rows() == [(0, 118, "SIGBUS"), (3, 121, "SIGBUS")]


def test_a_program_s_own_bracket_prefix_is_not_a_host() -> None:
    ev = events_of("[train.py:42] Signal: handled SIGUSR1\n[node01:19474] all good\n")
    assert "signal_report" not in ev["kind"].to_list()


def test_a_paste_cut_after_the_header_still_reads_as_a_crash(tmp_path: Path) -> None:
    log = tmp_path / "nccl-tests.log"
    log.write_text(
        "node02:405884:407462 [0] NCCL INFO RAS client listening socket at ::1<28028>\n[node02:405884] *** Process received signal ***\n"
    )
    report = logsleuth.analyze([str(log)])
    assert report.verdict.category == "crash_signal"
    assert report.verdict.first_failure.node == "node02"
