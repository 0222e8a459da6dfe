"""End to end on the bundled examples: the README's promise, in JSON and in the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cases import find_cases, read_case
from logsleuth.cli import app

EXAMPLES = [c.path for c in find_cases([Path(__file__).resolve().parent.parent / "examples"])]
runner = CliRunner()


def _expected(case: Path) -> tuple[str, int | None]:
    truth = read_case(case)
    return truth.label, truth.rank


def test_there_are_examples_for_the_readme() -> None:
    assert {p.name for p in EXAMPLES} >= {"user-exception-cascade", "port-in-use", "slurm-time-limit"}


@pytest.mark.parametrize("case", EXAMPLES, ids=lambda p: p.name)
def test_example_gets_its_category_and_first_failing_rank_in_json(case: Path) -> None:
    category, rank = _expected(case)
    result = runner.invoke(app, ["analyze", str(case), "--format", "json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["category"] == category
    assert verdict["first_failure"]["rank"] == rank
    assert verdict["evidence"] and verdict["fix"]


@pytest.mark.parametrize("case", EXAMPLES, ids=lambda p: p.name)
def test_example_gets_its_category_and_first_failing_rank_in_the_terminal(case: Path) -> None:
    category, rank = _expected(case)
    result = runner.invoke(app, ["analyze", str(case), "--no-color"])
    assert result.exit_code == 0
    assert f"→ {category}" in result.stdout
    if rank is not None:
        assert f"First failure: rank {rank}" in result.stdout
