"""Starting the single-node SLURM the tests in this folder run jobs on (corpus/tools/slurm_setup.sh)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import NoReturn

import pytest

from tests.conftest import ROOT

EPILOG = ROOT / "examples" / "slurm" / "epilog.sh"
SETUP = ROOT / "corpus" / "tools" / "slurm_setup.sh"


def configured_epilog() -> str | None:
    """The Epilog of the SLURM answering here, '(null)' when it has none, None when none answers."""
    try:
        proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^Epilog\s*=\s*(\S+)", proc.stdout, re.MULTILINE)
    return m.group(1) if proc.returncode == 0 and m else None


def unavailable(reason: str) -> NoReturn:
    """Skip on a developer machine; fail in CI, where LOGSLEUTH_REQUIRE_SLURM=1 says the cluster must run."""
    if os.environ.get("LOGSLEUTH_REQUIRE_SLURM") == "1":
        pytest.fail(f"SLURM is required here (LOGSLEUTH_REQUIRE_SLURM=1) but: {reason}")
    pytest.skip(reason)


def ensure_running() -> str:
    """A SLURM answers here (started, with the example epilog, when none does); returns its Epilog."""
    if sys.platform != "linux" or os.geteuid() != 0:
        unavailable("needs root on Linux to start SLURM (corpus/tools/slurm_setup.sh)")
    current = configured_epilog()
    if current is None:
        setup = subprocess.run(
            ["bash", str(SETUP)], env={**os.environ, "LOGSLEUTH_EPILOG": str(EPILOG)}, capture_output=True, text=True, timeout=900
        )
        if setup.returncode != 0:
            unavailable(f"SLURM could not be started by {SETUP.name}: {(setup.stderr or setup.stdout)[-800:]}")
        current = configured_epilog() or "(null)"
    return current
