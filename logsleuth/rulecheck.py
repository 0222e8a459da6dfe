"""`logsleuth rules check`: a rule set is valid when every rule's examples behave.

Each example is run through the real pipeline (ingest with the prefilter,
parse, match), so a rule whose keywords miss its own example, or whose
pattern only works on text the parsers never produce, fails here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import regex

from . import ingest, match, parse
from .rulebook import Rule, RuleSet, validate

#: Inputs that make a backtracking regex blow up; a fallback pattern must stay fast on them.
_ADVERSARIAL = ("a" * 3000 + "!", " " * 3000 + "x", "0" * 3000 + "x", "a" * 1500 + " " * 1500 + "!")
_SLOW_S = 0.05


def rule_hits(rule: Rule, rules: RuleSet, example: str) -> bool:
    """Does ``rule`` hit any event parsed from ``example`` (a log excerpt)?"""
    ingested = ingest.ingest_text(example, [*parse.KEYWORDS, *rules.keywords], name="<example>", tail=False)
    events = parse.build(ingested.lines, {"<example>": 2026})
    only = RuleSet(rules=[rule], causes=rules.causes)
    return not match.match(events, only).is_empty()


def check(rules: RuleSet) -> list[str]:
    """All problems, as ``file:line: message`` strings (empty when the set is valid)."""
    problems = validate(rules)
    for rule in rules.rules:
        problems.extend(_check_examples(rule, rules))
        if rule.engine == "python":
            problems.extend(_check_backtracking(rule))
    return problems


def _check_examples(rule: Rule, rules: RuleSet) -> Iterable[str]:
    for ex in rule.examples_match:
        if not rule_hits(rule, rules, ex):
            yield f"{rule.origin}: rule {rule.id}: 'match' example does not match: {_short(ex)}"
    for ex in rule.examples_no_match:
        if rule_hits(rule, rules, ex):
            yield f"{rule.origin}: rule {rule.id}: 'no_match' example matches: {_short(ex)}"


def _check_backtracking(rule: Rule) -> Iterable[str]:
    for pat in (*rule.patterns, *rule.exclude):
        compiled = regex.compile(pat)
        for text in _ADVERSARIAL:
            start = time.perf_counter()
            try:
                compiled.search(text, timeout=1.0)
            except TimeoutError:
                yield f"{rule.origin}: rule {rule.id}: pattern backtracks catastrophically: {pat!r}"
                break
            if time.perf_counter() - start > _SLOW_S:
                yield f"{rule.origin}: rule {rule.id}: pattern is slow on adversarial input (> {_SLOW_S * 1000:.0f} ms): {pat!r}"
                break


def _short(text: str, limit: int = 120) -> str:
    one = text.strip().replace("\n", " ⏎ ")
    return one if len(one) <= limit else one[: limit - 1] + "…"
