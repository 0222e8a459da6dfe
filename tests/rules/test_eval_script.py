"""scripts/eval_rules.py: per-category accuracy and misses over case folders."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.conftest import ROOT


def _load():
    spec = importlib.util.spec_from_file_location("eval_rules", ROOT / "scripts" / "eval_rules.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _case(root: Path, name: str, category: str, log: str, rank: int | None = None) -> None:
    folder = root / name
    folder.mkdir()
    extra = f"\n[first_failure]\nrank = {rank}\n" if rank is not None else ""
    (folder / "case.toml").write_text(f'label = "{category}"\ncategory = "{category}"\n{extra}')
    (folder / "job.log").write_text(log)


def test_eval_counts_hits_and_lists_misses(tmp_path: Path) -> None:
    ev = _load()
    _case(tmp_path, "port_in_use--a", "port_in_use", "RuntimeError: Address already in use\n")
    _case(tmp_path, "disk_full--b", "disk_full", "[rank1]: OSError: [Errno 28] No space left on device\n", rank=1)
    _case(tmp_path, "cuda_oom--c", "cuda_oom", "RuntimeError: Address already in use\n")
    results = ev.evaluate([tmp_path])
    assert [(r.case, r.category_ok) for r in results] == [("cuda_oom--c", False), ("disk_full--b", True), ("port_in_use--a", True)]
    assert results[1].rank_ok is True
    text = ev.summary(results)
    assert "TOTAL" in text and "2/3" in text
    assert "cuda_oom--c: got port_in_use" in text
