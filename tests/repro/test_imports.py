"""torch stays out of the analysis path: only the reproducer's worker processes load it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PROBE = """
import sys
from typer.testing import CliRunner
from logsleuth.cli import app
import logsleuth.repro.emit, logsleuth.repro.plan, logsleuth.repro.run, logsleuth.repro.view
runner = CliRunner()
assert runner.invoke(app, ["analyze", sys.argv[1]]).exit_code == 0
assert runner.invoke(app, ["repro", sys.argv[1], "--op", "all_gather", "--emit", "sbatch"]).exit_code == 0
print("torch" in sys.modules)
"""


def test_analyze_and_emitting_a_script_never_import_torch(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[rank1]: RuntimeError: Address already in use\n")
    done = subprocess.run([sys.executable, "-c", PROBE, str(log)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
