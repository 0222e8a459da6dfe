"""`logsleuth rules check`: a rule set is valid when every rule's examples behave.

Each example is run through the real pipeline (:func:`logsleuth.pipeline.run`: ingest with
the prefilter, parse, then match), so a rule whose keywords miss its own example, or whose
pattern only works on text the parsers never produce, fails here. All examples
are parsed together, each as its own file, and matched in one pass: checking
hundreds of rules costs one pipeline run, not one per example.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import polars as pl
import regex

from . import match, pipeline
from .rulebook import Rule, RuleSet, compile_problems, validate

#: Inputs that make a backtracking regex blow up; a fallback pattern must stay fast on them.
_ADVERSARIAL = ("a" * 3000 + "!", " " * 3000 + "x", "0" * 3000 + "x", "a" * 1500 + " " * 1500 + "!")
_SLOW_S = 0.05


def rule_hits(rule: Rule, rules: RuleSet, example: str) -> bool:
    """Does ``rule`` hit any event parsed from ``example`` (a log excerpt)?"""
    only = RuleSet(rules=[rule], causes=rules.causes)
    return not texts_hits([example], rules, only=only).is_empty()


#: (rule id, "match" or "no_match", index of the example in that list)
ExampleKey = tuple[str, str, int]


def example_results(rules: RuleSet) -> dict[ExampleKey, bool]:
    """Does each rule hit each of its own examples? One pipeline run for all of them."""
    texts: dict[ExampleKey, str] = {}
    for rule in rules.rules:
        for kind, examples in (("match", rule.examples_match), ("no_match", rule.examples_no_match)):
            for i, text in enumerate(examples):
                texts[(rule.id, kind, i)] = text
    if not texts:
        return {}
    keys = list(texts)
    hits = texts_hits([texts[key] for key in keys], rules)
    hit = {(keys[i], rule) for i, rule in zip(hits.get_column("text").to_list(), hits.get_column("rule").to_list(), strict=True)}
    return {key: (key, key[0]) in hit for key in keys}


def texts_hits(texts: Sequence[str], rules: RuleSet, *, only: RuleSet | None = None) -> pl.DataFrame:
    """Every rule hit on every text (each a log excerpt parsed as its own file), in one pipeline run.

    Returns the hits table of :func:`match.match` plus ``text``, the index of the text the
    hit's event came from. Rule examples and the message catalogue (``logsleuth rules
    coverage``) both go through here. The texts are read with ``rules``' keywords, only the
    lines the prefilter keeps (no tail), unredacted and each on its own (identities are not
    resolved across them); ``only`` matches a subset of the rules.
    """
    if not texts:
        return pl.DataFrame(schema={**match.HITS_SCHEMA, "text": pl.UInt32()})
    names = [f"<example {n}>" for n in range(len(texts))]
    (read,) = pipeline.run(texts=dict(zip(names, texts, strict=True)), rules=rules, until="parse", tail=False, redact=False, one_job=False)
    events = read.events
    hits = match.match(events, rules if only is None else only)
    index = {name: n for n, name in enumerate(names)}
    files = events.get_column("file").gather(hits.get_column("eid")).to_list()
    return hits.with_columns(pl.Series("text", [index[f] for f in files], dtype=pl.UInt32()))


def check(rules: RuleSet) -> list[str]:
    """All problems, as ``file:line: message`` strings (empty when the set is valid)."""
    problems = validate(rules)
    compiled = [p for rule in rules.rules for p in compile_problems(rule)]
    if compiled:  # examples cannot run through patterns that do not compile
        return problems + compiled
    results = example_results(rules)
    for rule in rules.rules:
        problems.extend(_check_examples(rule, results))
        if rule.engine == "python":
            problems.extend(_check_backtracking(rule))
    return problems


def _check_examples(rule: Rule, results: dict[ExampleKey, bool]) -> Iterable[str]:
    for i, ex in enumerate(rule.examples_match):
        if not results[(rule.id, "match", i)]:
            yield f"{rule.origin}: rule {rule.id}: 'match' example does not match: {_short(ex)}"
    for i, ex in enumerate(rule.examples_no_match):
        if results[(rule.id, "no_match", i)]:
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
