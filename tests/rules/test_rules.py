"""Every rule's examples, run through the real pipeline; the catalogue's invariants."""

from __future__ import annotations

import pytest

from logsleuth import rulebook
from logsleuth.rulecheck import check, example_results, rule_hits
from logsleuth.taxonomy import NON_CAUSES, TAXONOMY

RULES = rulebook.load()
MATCH = [pytest.param(r, i, id=f"{r.id}-match-{i}") for r in RULES.rules for i in range(len(r.examples_match))]
NO_MATCH = [pytest.param(r, i, id=f"{r.id}-no_match-{i}") for r in RULES.rules for i in range(len(r.examples_no_match))]


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str, int], bool]:
    """Every example of every rule through the pipeline, in one run."""
    return example_results(RULES)


@pytest.mark.parametrize(("rule", "index"), MATCH)
def test_rule_matches_its_match_example(rule: rulebook.Rule, index: int, results: dict[tuple[str, str, int], bool]) -> None:
    assert results[(rule.id, "match", index)], rule.examples_match[index]


@pytest.mark.parametrize(("rule", "index"), NO_MATCH)
def test_rule_does_not_match_its_no_match_example(rule: rulebook.Rule, index: int, results: dict[tuple[str, str, int], bool]) -> None:
    assert not results[(rule.id, "no_match", index)], rule.examples_no_match[index]


def test_examples_checked_together_behave_as_checked_one_by_one(results: dict[tuple[str, str, int], bool]) -> None:
    # batching must not let one example's lines change another's result
    for rule in RULES.rules[::10]:
        for i, ex in enumerate(rule.examples_match):
            assert rule_hits(rule, RULES, ex) == results[(rule.id, "match", i)]
        for i, ex in enumerate(rule.examples_no_match):
            assert rule_hits(rule, RULES, ex) == results[(rule.id, "no_match", i)]


def test_builtin_rules_pass_the_checker() -> None:
    assert check(RULES) == []


def test_every_taxonomy_id_has_an_explanation_and_a_fix() -> None:
    for cid in set(TAXONOMY) - NON_CAUSES:
        cause = RULES.cause(cid)
        assert cause.explanation and cause.fix, cid


def test_finer_causes_roll_up_to_their_taxonomy_parent() -> None:
    for cid, cause in RULES.causes.items():
        assert RULES.category(cid) == cause.parent in TAXONOMY


def test_checker_rejects_a_rule_whose_keywords_miss_its_example(tmp_path) -> None:
    (tmp_path / "bad.toml").write_text(
        """
[[rule]]
id = "ZZZ001"
name = "needs-keyword"
cause = "disk_full"
keywords = ["quux-not-in-line"]
patterns = ['''zorblax overflowed''']
match = ['''zorblax overflowed''']
"""
    )
    problems = check(rulebook.load([tmp_path]))
    assert any("ZZZ001" in p and "does not match" in p and "bad.toml:3" in p for p in problems)


def test_checker_rejects_catastrophic_backtracking(tmp_path) -> None:
    (tmp_path / "slow.toml").write_text(
        """
[[rule]]
id = "ZZZ002"
name = "backtracks"
cause = "disk_full"
keywords = ["a"]
patterns = ['''^(a+)+(?=b)''']
match = ['''aab''']
"""
    )
    problems = check(rulebook.load([tmp_path]))
    assert any("ZZZ002" in p and ("backtrack" in p or "slow" in p) for p in problems)


def test_invalid_rule_file_gives_file_and_line(tmp_path) -> None:
    (tmp_path / "broken.toml").write_text('[[rule]]\nid = "ZZZ003"\nname = "x"\ncause = "disk_full"\npatterns = ["("]\nkeywords = ["x"]\n')
    with pytest.raises(rulebook.RuleError, match=r"broken.toml:2: rule ZZZ003: pattern does not compile"):
        rulebook.load([tmp_path])


def test_every_problem_of_a_rule_file_is_listed_at_once_with_the_whole_regex_error(tmp_path) -> None:
    (tmp_path / "site.toml").write_text(
        '[[rule]]\nid = "ZZZ004"\nname = "a"\ncause = "disk_full"\npatterns = ["foo("]\nkeywords = ["foo"]\n\n'
        '[[rule]]\nid = "ZZZ005"\nname = "b"\ncause = "disk_full"\nrole = "primry"\nweight = 2\npatterns = ["b"]\nkeywords = ["b"]\n'
    )
    with pytest.raises(rulebook.RuleError) as err:
        rulebook.load([tmp_path])
    problems = str(err.value)
    assert "site.toml:2: rule ZZZ004: pattern does not compile: 'foo('" in problems
    assert "unclosed group" in problems  # the engine's own explanation, not only its first line
    assert "site.toml:9: rule ZZZ005: role must be one of" in problems
    assert "site.toml:9: rule ZZZ005: weight must be a number in (0, 1]" in problems


def test_user_rules_override_builtin_rules_by_id(tmp_path) -> None:
    builtin = RULES.by_id()["NET001"]
    (tmp_path / "mine.toml").write_text(
        f"""
[[rule]]
id = "NET001"
name = "{builtin.name}"
cause = "port_in_use"
weight = 0.5
keywords = ["Address already in use"]
patterns = ['''Address already in use''']
match = ['''RuntimeError: Address already in use''']
"""
    )
    merged = rulebook.load([tmp_path])
    assert merged.by_id()["NET001"].weight == 0.5
    assert len(merged.rules) == len(RULES.rules)
