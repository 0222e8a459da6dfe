"""`logsleuth batch --emit sbatch` on a real SLURM: the job array stores the verdicts a local batch stores."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import history
from logsleuth.cli import app
from tests.conftest import example_jobs
from tests.slurm.common import ensure_running

pytestmark = pytest.mark.slurm

ARRAY_TIMEOUT_S = 600
COLUMNS = ["job", "fingerprint", "rules_version", "cause", "category", "first_rank", "first_node", "ranks", "nodes"]


def _table(store: Path) -> pl.DataFrame:
    return history.load(store).table.select(COLUMNS).sort("fingerprint")


def test_a_job_array_stores_the_verdicts_a_local_batch_stores(tmp_path: Path) -> None:
    ensure_running()
    roots = example_jobs(tmp_path / "jobs", copies=2)
    local = CliRunner().invoke(app, ["batch", str(roots), "--out", str(tmp_path / "local"), "--format", "json"])
    assert local.exit_code == 0, local.output
    emit = tmp_path / "emit"
    emitted = CliRunner().invoke(
        app,
        ["batch", str(roots), "--out", str(tmp_path / "array"), "--emit", "sbatch", "--emit-dir", str(emit)]
        + ["--tasks", "3", "--cpus-per-task", "1", "--format", "json"],
    )
    assert emitted.exit_code == 0, emitted.output
    assert json.loads(emitted.stdout)["jobs"] == 6
    sub = subprocess.run(["sbatch", "--parsable", str(emit / "batch.sbatch")], capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    array = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + ARRAY_TIMEOUT_S
    while subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True, timeout=60).stdout.strip():
        assert time.monotonic() < deadline, f"array {array} still queued or running after {ARRAY_TIMEOUT_S}s"
        time.sleep(2)
    logs = sorted((emit / "logs").glob(f"{array}_*.out"))
    said = "\n".join(f"{p.name}:\n{p.read_text(errors='replace')}" for p in logs)
    assert len(logs) == 3, said
    # each task wrote its own part, and together they hold exactly the local run's verdicts
    parts = list((tmp_path / "array").glob("*.parquet"))
    assert len({p.name.split("-")[-2] for p in parts}) == 3, said
    assert _table(tmp_path / "array").equals(_table(tmp_path / "local")), said
