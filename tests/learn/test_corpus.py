"""The corpus: reading cases, and splits that never put one group on both sides."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from logsleuth.learn.corpus import Case, CorpusError, find_cases, folds, read_case, split

ROOT = Path(__file__).resolve().parents[2]


def case(i: int, label: str, group: str, kind: str = "synthetic") -> Case:
    return Case(f"{label}--{i}", Path("."), label, group, kind, None, None)


def many() -> list[Case]:
    return [
        case(i, label, f"{label}:{g}", kind)
        for label in ("a", "b", "c")
        for kind in ("public", "synthetic")
        for g in range(6)
        for i in range(3)
    ]


def test_split_keeps_every_group_on_one_side_and_holds_out_a_quarter_of_each_stratum() -> None:
    train, test = split(many())
    assert not {c.group for c in train} & {c.group for c in test}
    held = Counter((c.label, c.kind) for c in test)
    assert set(held.values()) == {3 * 2}  # 2 of 6 groups (6 * 0.25 rounded), 3 cases each, in every stratum


def test_a_stratum_with_one_group_stays_in_training() -> None:
    cases = [*many(), case(0, "d", "d:only", "public")]
    train, test = split(cases)
    assert "d:only" in {c.group for c in train}


def test_split_depends_on_group_names_not_on_other_cases() -> None:
    base = many()
    _, test = split(base)
    _, test_more = split([*base, case(0, "z", "z:1"), case(0, "z", "z:2")])
    assert {c.group for c in test} <= {c.group for c in test_more}


def test_folds_keep_groups_together_and_deal_each_stratum_round() -> None:
    cases = many()
    f = folds(cases, 3)
    by_group: dict[str, set[int]] = {}
    for c, k in zip(cases, f, strict=True):
        by_group.setdefault(c.group, set()).add(int(k))
    assert all(len(v) == 1 for v in by_group.values())
    per_stratum = Counter((c.label, c.kind, int(k)) for c, k in zip(cases, f, strict=True))
    assert set(per_stratum.values()) == {6}  # 6 groups over 3 folds: 2 groups (6 cases) each


def test_find_cases_reads_the_committed_synthetic_corpus() -> None:
    cases = find_cases([ROOT / "corpus"])
    assert len(cases) >= 300 and all(c.kind == "synthetic" for c in cases if "--synth-" in c.id)
    assert {c.label for c in cases} >= {"none", "unknown", "nccl_ib_error", "gpu_hardware_fault"}


def test_a_case_outside_the_taxonomy_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "case.toml").write_text('label = "gremlins"\ncategory = "gremlins"\ngroup = "g"\n')
    with pytest.raises(CorpusError, match="not a taxonomy id"):
        read_case(tmp_path / "x")
