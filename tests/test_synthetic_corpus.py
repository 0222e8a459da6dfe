"""The committed synthetic cases are exactly what their recorded generator calls write."""

from __future__ import annotations

import filecmp
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth.cases import read_case

ROOT = Path(__file__).resolve().parent.parent
SYNTH = sorted(p.parent for p in (ROOT / "corpus").glob("*--synth-*/case.toml"))


def generator_call(case: Path) -> list[str]:
    truth = read_case(case)
    assert truth.kind == "synthetic" and truth.generator is not None
    return shlex.split(truth.generator)


def test_every_synthetic_case_records_the_call_that_names_its_folder() -> None:
    assert len(SYNTH) >= 300
    for case in SYNTH:
        argv = generator_call(case)
        assert argv[0] == "corpus/tools/casegen.py"
        opts = dict(zip(argv[1::2], argv[2::2], strict=True))
        assert case.name == f"{opts['--label']}--synth-{opts['--variant']}-s{opts['--seed']}"


def test_the_plan_writes_every_committed_synthetic_case_and_no_other() -> None:
    code = "import casegen; print('\\n'.join(casegen.case_id(*c) for c in casegen.plan()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "corpus" / "tools", check=True, capture_output=True, text=True)
    assert out.stdout.split() == [c.name for c in SYNTH]


@pytest.mark.parametrize("case", SYNTH[:: max(1, len(SYNTH) // 12)], ids=lambda p: p.name)
def test_regenerating_a_case_gives_the_same_bytes(case: Path, tmp_path: Path) -> None:
    argv = generator_call(case)
    subprocess.run([sys.executable, *argv, "--out", str(tmp_path)], cwd=ROOT, check=True, capture_output=True)
    fresh = tmp_path / case.name
    cmp = filecmp.dircmp(case, fresh)
    assert not (cmp.left_only or cmp.right_only or cmp.diff_files), (cmp.left_only, cmp.right_only, cmp.diff_files)
    for sub in cmp.subdirs.values():
        assert not (sub.left_only or sub.right_only or sub.diff_files)
