"""Every output format on every fixture job, compared exactly with tests/snapshots/.

The fixtures under tests/fixtures/ are real failed runs (tests/fixtures/make_fixtures.sh).
When a change to rules, reasoning or rendering changes an output on purpose:

    python -m pytest tests/test_snapshots.py --update-snapshots

then read the diff of tests/snapshots/ before committing it.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cli import app

from .conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
SNAPSHOTS = ROOT / "tests" / "snapshots"
CASES = sorted(p for p in FIXTURES.glob("*/*") if p.suffix in (".out", ".log"))
FORMATS = {"terminal": ".terminal.txt", "json": ".json", "markdown": ".md", "github": ".github.txt"}
#: The fixtures were made on this day; glog stamps take their year from the file's time.
FIXTURE_TIME = datetime(2026, 11, 22, 12, 0).timestamp()


def _stable(text: str) -> str:
    """Mask what changes from run to run without changing the verdict: timing, version."""
    text = re.sub(r'"(classifier_)?seconds": [0-9.]+', r'"\1seconds": "<masked>"', text)
    return re.sub(r'"logsleuth_version": "[^"]*"', '"logsleuth_version": "<masked>"', text)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("case", CASES, ids=[c.parent.name for c in CASES])
def test_output_matches_snapshot(
    case: Path, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    rel = case.relative_to(ROOT)
    copy = tmp_path / rel
    copy.parent.mkdir(parents=True)
    shutil.copyfile(case, copy)
    os.utime(copy, (FIXTURE_TIME, FIXTURE_TIME))
    monkeypatch.chdir(tmp_path)
    for var in ("GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(var, raising=False)
    result = CliRunner().invoke(app, ["analyze", str(rel), "--format", fmt, "--no-color"])
    assert result.exit_code == 0, result.output
    got = _stable(result.stdout)
    snap = SNAPSHOTS / f"{case.parent.name}{FORMATS[fmt]}"
    if request.config.getoption("--update-snapshots"):
        SNAPSHOTS.mkdir(exist_ok=True)
        snap.write_text(got, encoding="utf-8")
        pytest.skip(f"wrote {snap.relative_to(ROOT)}")
    assert snap.exists(), f"no snapshot {snap.relative_to(ROOT)}: run pytest {Path(__file__).name} --update-snapshots"
    want = snap.read_text(encoding="utf-8")
    assert got == want, (
        f"{fmt} output of {rel} changed; if on purpose: pytest tests/test_snapshots.py --update-snapshots, then review the diff"
    )


def test_every_fixture_has_all_snapshots_and_no_snapshot_is_orphaned() -> None:
    expected = {f"{c.parent.name}{ext}" for c in CASES for ext in FORMATS.values()}
    assert {p.name for p in SNAPSHOTS.iterdir()} == expected
