"""Realistic multi-line excerpts, one per cause, analysed end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth import analyze
from logsleuth.taxonomy import NON_CAUSES, TAXONOMY

FIXTURES = Path(__file__).resolve().parent / "e2e"
CASES = sorted(FIXTURES.glob("*.log"))

#: where the excerpt itself says which rank failed first
FIRST_RANK = {
    "cuda_oom--torch-outofmemory-rank3.log": 3,
    "device_misassignment--invalid-device-ordinal.log": 4,
    "permission_denied--torch-save-enforce-fail.log": 1,
    "import_error--module-missing-on-one-node.log": 2,
    "master_unreachable--srun-connect-timeout.log": 1,
    "crash_signal--abort-alone.log": 1,
    "crash_signal--run-segfault-torchrun.log": 1,
    "nccl_ib_error--ib-completion-status12.log": 3,
    "gpu_hardware_fault--ecc-via-watchdog.log": 3,
    "user_code_error--run-valueerror-torchrun.log": 1,
}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_excerpt_gets_its_category(path: Path) -> None:
    report = analyze([path])
    assert report.verdict.category == path.name.split("--")[0]
    if path.name in FIRST_RANK:
        assert report.verdict.first_failure.rank == FIRST_RANK[path.name]


def test_excerpts_cover_at_least_twenty_causes() -> None:
    covered = {p.name.split("--")[0] for p in CASES} - NON_CAUSES
    assert covered <= set(TAXONOMY)
    assert len(covered) >= 20


def test_watchdog_abort_is_not_a_crash_but_a_lone_abort_is() -> None:
    # the same exitcode -6 table: after watchdog timeouts on those ranks it is their
    # consequence; on a rank that printed nothing else it is the crash itself
    assert analyze([FIXTURES / "collective_timeout--nccl-watchdog-abort.log"]).verdict.category == "collective_timeout"
    assert analyze([FIXTURES / "crash_signal--abort-alone.log"]).verdict.category == "crash_signal"


def test_errno_28_is_shared_memory_under_dev_shm_and_disk_elsewhere() -> None:
    assert analyze([FIXTURES / "shm_exhausted--errno28-under-dev-shm.log"]).verdict.category == "shm_exhausted"
    assert analyze([FIXTURES / "disk_full--checkpoint-errno28.log"]).verdict.category == "disk_full"
