"""`logsleuth batch --engine ray` on a real local Ray cluster: the same verdict table as the local engine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import history
from logsleuth.cli import app
from tests.conftest import example_jobs

COLUMNS = ["job", "fingerprint", "rules_version", "cause", "category", "first_rank", "first_node", "ranks", "nodes"]
RAY = Path(sys.executable).parent / "ray"


def _unavailable(reason: str) -> None:
    """Skip on a developer machine without Ray; fail in CI, where LOGSLEUTH_REQUIRE_RAY=1 says it is installed."""
    if os.environ.get("LOGSLEUTH_REQUIRE_RAY") == "1":
        pytest.fail(f"Ray is required here (LOGSLEUTH_REQUIRE_RAY=1) but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A one-machine Ray cluster, started as a site would (`ray start --head`), stopped afterwards."""
    try:
        import ray  # noqa: F401
    except ImportError:
        _unavailable("Ray is not installed (pip install -e '.[ray]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = [str(RAY), "start", "--head", "--num-cpus=2", f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"]
    proc = subprocess.run(start, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        _unavailable(f"`ray start` failed: {(proc.stderr or proc.stdout)[-800:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True, timeout=300)


def _table(store: Path) -> pl.DataFrame:
    return history.load(store).table.select(COLUMNS).sort("fingerprint")


def test_ray_stores_the_verdicts_the_local_engine_stores(tmp_path: Path, ray_address: str) -> None:
    roots = example_jobs(tmp_path / "jobs", copies=2)
    local = CliRunner().invoke(app, ["batch", str(roots), "--out", str(tmp_path / "local"), "--format", "json"])
    assert local.exit_code == 0, local.output
    on_ray = CliRunner().invoke(
        app, ["batch", str(roots), "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-address", ray_address, "--format", "json"]
    )
    assert on_ray.exit_code == 0, on_ray.output
    assert _table(tmp_path / "ray").equals(_table(tmp_path / "local"))
    again = CliRunner().invoke(
        app, ["batch", str(roots), "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-address", ray_address, "--format", "json"]
    )
    assert '"skipped": 6' in again.stdout and '"analysed": 0' in again.stdout


def test_a_batch_on_ray_leaves_no_driver_connected(tmp_path: Path, ray_address: str) -> None:
    """A driver left connected is ended by Ray, with its whole process, when the cluster stops."""
    import ray

    roots = example_jobs(tmp_path / "jobs", copies=1)
    out = CliRunner().invoke(app, ["batch", str(roots), "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-address", ray_address])
    assert out.exit_code == 0, out.output
    assert not ray.is_initialized()
