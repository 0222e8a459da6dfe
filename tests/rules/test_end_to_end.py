"""Realistic multi-line excerpts, one per cause, analysed end to end.

Each excerpt is a case folder (its log and a case.toml in the corpus format) that
tests/test_labelled_cases.py checks for its category and first failing rank; here, what
the catalogue of excerpts as a whole and a few pairs of them must show.
"""

from __future__ import annotations

from pathlib import Path

from logsleuth import analyze
from logsleuth.cases import find_cases
from logsleuth.taxonomy import NON_CAUSES, TAXONOMY

FIXTURES = Path(__file__).resolve().parent / "e2e"
CASES = find_cases([FIXTURES])


def test_excerpts_cover_at_least_twenty_causes() -> None:
    covered = {c.label for c in CASES} - NON_CAUSES
    assert covered <= set(TAXONOMY)
    assert len(covered) >= 20


def test_watchdog_abort_is_not_a_crash_but_a_lone_abort_is() -> None:
    # the same exitcode -6 table: after watchdog timeouts on those ranks it is their
    # consequence; on a rank that printed nothing else it is the crash itself
    assert analyze([FIXTURES / "collective_timeout--nccl-watchdog-abort"]).verdict.category == "collective_timeout"
    assert analyze([FIXTURES / "crash_signal--abort-alone"]).verdict.category == "crash_signal"


def test_errno_28_is_shared_memory_under_dev_shm_and_disk_elsewhere() -> None:
    assert analyze([FIXTURES / "shm_exhausted--errno28-under-dev-shm"]).verdict.category == "shm_exhausted"
    assert analyze([FIXTURES / "disk_full--checkpoint-errno28"]).verdict.category == "disk_full"
