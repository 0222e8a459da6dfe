"""A real single-node SLURM runs failing DDP jobs, and the epilog says why each one failed.

This test is also the recipe for wiring the epilog on a cluster:

1. /etc/logsleuth/epilog.conf tells examples/slurm/epilog.sh how to run logsleuth
   (LOGSLEUTH_CMD) and, if wanted, where to keep the history (LOGSLEUTH_STORE);
2. slurm.conf names the script: ``Epilog=/path/to/examples/slurm/epilog.sh``
   (corpus/tools/slurm_setup.sh writes that line from LOGSLEUTH_EPILOG);
3. every failed job then finds ``<output>.logsleuth.json`` and ``.md`` next to its
   ``slurm-<id>.out``, owned by the job's user.

.ci/run starts the cluster before pytest:
    LOGSLEUTH_EPILOG=$PWD/examples/slurm/epilog.sh bash corpus/tools/slurm_setup.sh
Without a cluster the test starts one the same way (as root); it skips, saying
why, only when SLURM cannot be started, or when a SLURM that is already running
here has another Epilog (it does not reconfigure a cluster someone else is using).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.slurm.common import EPILOG, SETUP, ensure_running, unavailable

pytestmark = pytest.mark.slurm

JOB = ROOT / "tests" / "slurm" / "job.sbatch"
TRAIN = ROOT / "tests" / "slurm" / "train.py"
CONF = Path("/etc/logsleuth/epilog.conf")
MARK = "# written by the logsleuth SLURM integration test (tests/slurm); removed when it ends"
#: The time-limit job dominates: SLURM's minimum is one minute, checked every half minute or so.
JOB_TIMEOUT_S = 300


@dataclass
class Cluster:
    jobs: Path  # the submit directory, owned by the job user
    user: str
    uid: int
    log: Path  # the epilog's log: one line per job
    store: Path  # the history the epilog appends to


def _job_user() -> str:
    """nobody, when nobody can run this Python with torch and logsleuth; else root (say, a checkout under /root)."""
    probe = ["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={ROOT}", sys.executable, "-c", "import torch, logsleuth"]
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return "nobody" if ok and os.access(JOB, os.R_OK) else "root"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if sys.platform != "linux" or os.geteuid() != 0:
        unavailable("needs root on Linux to start SLURM (corpus/tools/slurm_setup.sh)")
    if CONF.exists() and MARK not in CONF.read_text():
        unavailable(f"{CONF} exists and was not written by this test: not overwriting a real configuration")
    current = ensure_running()
    if current != str(EPILOG):
        unavailable(
            f"a SLURM already runs here with Epilog={current}; this test does not reconfigure a cluster in use. "
            f"Start it with: LOGSLEUTH_EPILOG={EPILOG} bash {SETUP.relative_to(ROOT)}"
        )
    user = _job_user()
    base = Path(tempfile.mkdtemp(prefix="logsleuth-slurm-"))
    base.chmod(0o755)
    jobs = base / "jobs"
    jobs.mkdir()
    shutil.chown(jobs, user)
    cl = Cluster(jobs=jobs, user=user, uid=jobs.stat().st_uid, log=base / "epilog.log", store=base / "history")
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(
        f"{MARK}\n"
        f'LOGSLEUTH_CMD="{sys.executable} -m logsleuth"\n'
        f"LOGSLEUTH_PYTHONPATH={ROOT}\n"
        f"LOGSLEUTH_STORE={cl.store}\n"
        f"LOGSLEUTH_LOG={cl.log}\n"
        "LOGSLEUTH_BUDGET=20\n"
        "LOGSLEUTH_TIMEOUT=90\n"
    )
    try:
        yield cl
    finally:
        CONF.unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def sbatch(cl: Cluster, *options: str, fail: str) -> str:
    as_user = [] if cl.user == "root" else ["runuser", "-u", cl.user, "--"]
    cmd = [*as_user, "sbatch", "--parsable", *options, str(JOB), sys.executable, str(TRAIN), "--fail", fail]
    proc = subprocess.run(cmd, cwd=cl.jobs, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.strip().split(";")[0]


@pytest.fixture(scope="module")
def jobs(cluster: Cluster) -> dict[str, str]:
    """Submit every job at once; each test then waits for its own."""
    submitted = {
        "raise": sbatch(cluster, fail="raise"),
        "time_limit": sbatch(cluster, "--time=1", "--output=tl-%x-%j.out", fail="forever"),
        "cancel": sbatch(cluster, fail="forever"),
        "clean": sbatch(cluster, fail="none"),
    }
    out = cluster.jobs / f"slurm-{submitted['cancel']}.out"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (out.exists() and "step 2" in out.read_text(errors="replace")):
        assert time.monotonic() < deadline, f"job {submitted['cancel']} never reached step 2"
        time.sleep(1)
    subprocess.run(["scancel", submitted["cancel"]], check=True, timeout=60)
    return submitted


def finished(cl: Cluster, job: str) -> str:
    """Wait until SLURM is done with the job, epilog included; return the epilog's log lines for it."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60).stdout.strip()
        if state in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") and f"job {job}: " in _read(cl.log):
            return "\n".join(ln for ln in _read(cl.log).splitlines() if f"job {job}: " in ln)
        time.sleep(2)
    raise AssertionError(f"job {job} not finished after {JOB_TIMEOUT_S}s; epilog log:\n{_read(cl.log)}")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def report_of(cl: Cluster, stem: str) -> dict[str, object]:
    path = cl.jobs / f"{stem}.logsleuth.json"
    assert path.exists(), f"no report {path.name}; epilog log:\n{_read(cl.log)}"
    assert path.stat().st_uid == cl.uid and path.stat().st_mode & 0o400, "the job's user must own and read it"
    assert (cl.jobs / f"{stem}.logsleuth.md").exists()
    data: dict[str, object] = json.loads(path.read_text())
    return data


def test_rank_exception_names_the_rank_that_raised(cluster: Cluster, jobs: dict[str, str]) -> None:
    log = finished(cluster, jobs["raise"])
    report = report_of(cluster, f"slurm-{jobs['raise']}")
    verdict = report["verdict"]
    assert isinstance(verdict, dict)
    assert (verdict["category"], verdict["first_failure"]["rank"], verdict["first_failure"]["node"]) == ("user_code_error", 1, "node01")
    assert "user_code_error" in log


def test_time_limit_with_an_output_pattern(cluster: Cluster, jobs: dict[str, str]) -> None:
    finished(cluster, jobs["time_limit"])
    # --output=tl-%x-%j.out: the slurmd epilog gets the raw pattern and no job name
    report = report_of(cluster, f"tl-job.sbatch-{jobs['time_limit']}")
    assert report["verdict"]["category"] == "slurm_time_limit"  # type: ignore[index]


def test_scancel(cluster: Cluster, jobs: dict[str, str]) -> None:
    finished(cluster, jobs["cancel"])
    report = report_of(cluster, f"slurm-{jobs['cancel']}")
    assert report["verdict"]["category"] == "slurm_cancelled"  # type: ignore[index]


def test_a_clean_job_gets_no_report(cluster: Cluster, jobs: dict[str, str]) -> None:
    log = finished(cluster, jobs["clean"])
    assert "skipped, exit 0:0" in log
    assert not list(cluster.jobs.glob(f"slurm-{jobs['clean']}.logsleuth.*"))


def test_history_of_the_epilog_verdicts(cluster: Cluster, jobs: dict[str, str]) -> None:
    for job in jobs.values():
        finished(cluster, job)
    proc = subprocess.run(
        [sys.executable, "-m", "logsleuth", "history", str(cluster.store), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = json.loads(proc.stdout)
    assert summary["verdicts"] == 3 and {c["category"] for c in summary["causes"]} == {
        "user_code_error",
        "slurm_time_limit",
        "slurm_cancelled",
    }
    assert summary["nodes"][0]["node"] == "node01"
