"""Every labelled case outside the corpus gets its category, and its first failing rank where stated.

The cases are folders with their logs and a ``case.toml`` in the corpus format
(corpus/README.md), read by :func:`logsleuth.cases.find_cases`: the end-to-end excerpts
(tests/rules/e2e), the real cascades (tests/data/cascades), the snapshot fixtures
(tests/fixtures) and the bundled examples (examples/). Each case folder is analysed as a
user would pass it. The corpus itself is scored, not asserted (``logsleuth eval``).
"""

from __future__ import annotations

import pytest

import logsleuth
from logsleuth.cases import KINDS, Case, find_cases
from logsleuth.taxonomy import TAXONOMY

from .conftest import ROOT

#: Where labelled cases live outside the corpus (each holds case folders).
ROOTS = [ROOT / "tests" / "rules" / "e2e", ROOT / "tests" / "data" / "cascades", ROOT / "tests" / "fixtures", ROOT / "examples"]
CASES = [case for root in ROOTS for case in find_cases([root])]


def _id(case: Case) -> str:
    return f"{case.path.parent.name}/{case.id}"


def test_every_root_holds_cases_and_every_log_folder_is_labelled() -> None:
    for root in ROOTS:
        assert find_cases([root]), root
    unlabelled = [p for root in ROOTS for p in root.iterdir() if p.is_dir() and not (p / "case.toml").exists()]
    assert unlabelled == [ROOT / "examples" / "slurm"]  # the epilog example: scripts, no logs


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_case_gets_its_category_and_first_failing_rank(case: Case) -> None:
    assert case.label in TAXONOMY and case.kind in KINDS
    verdict = logsleuth.analyze([case.path]).verdict
    assert verdict.category == case.label
    if case.rank is not None:
        assert verdict.first_failure.rank == case.rank
