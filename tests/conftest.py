"""Shared helpers: parse a log excerpt with the real pipeline (logsleuth.pipeline.run)."""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import polars as pl
import pytest

from logsleuth import pipeline, rulebook

ROOT = Path(__file__).resolve().parent.parent

# the suite keeps its parsed-rules cache to itself (subprocesses inherit this), not in the user's home
os.environ.setdefault("LOGSLEUTH_CACHE_DIR", tempfile.mkdtemp(prefix="logsleuth-test-cache-"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-snapshots",
        action="store_true",
        help="Rewrite tests/snapshots/ from the current output instead of comparing with it (then review git diff).",
    )


#: The year the excerpts' glog stamps (which carry none) were printed in.
EXCERPT_YEAR = 2026


def events_of(text: str, name: str = "job.log") -> pl.DataFrame:
    """The event table of a log excerpt (dedented), identities resolved."""
    body = textwrap.dedent(text).lstrip("\n")
    (read,) = pipeline.run(texts={name: body}, until="parse", redact=False, year=EXCERPT_YEAR)
    return read.events


@pytest.fixture(scope="session")
def ruleset() -> rulebook.RuleSet:
    return rulebook.load()


@pytest.fixture
def write(tmp_path: Path):
    """Write a file under tmp_path and return its path."""

    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
        else:
            path.write_bytes(content)
        return path

    return _write


#: One example log per cause, for the tests that need many small jobs (batch).
EXAMPLE_LOGS = {
    "time_limit": ROOT / "examples" / "slurm-time-limit" / "slurm-34.out",
    "port": ROOT / "examples" / "port-in-use" / "torchrun.log",
    "user": ROOT / "examples" / "user-exception-cascade" / "torchrun.log",
}


def example_jobs(root: Path, copies: int = 1) -> Path:
    """A folder per job under ``root``, each holding one example log: ``copies`` jobs of each of three causes."""
    import shutil

    for n in range(copies):
        for kind, log in EXAMPLE_LOGS.items():
            dest = root / f"{kind}-{n}"
            dest.mkdir(parents=True)
            shutil.copy(log, dest / log.name)
    return root
