"""Rules over the event table -> a hits table (event, rule, cause, role, weight).

Every rule becomes one boolean polars expression over the ``message`` column
(plus its scope filters); all rules are evaluated in a single ``select``, which
polars runs in parallel and in linear time, once per distinct message (a
warning every rank repeats a hundred thousand times is matched once). Only
rules whose keywords some message carries are evaluated at all. A pattern the
linear-time engine cannot run (look-around, back-references) falls back to the
``regex`` package with a per-line timeout, on the few events its keywords let
through.
"""

from __future__ import annotations

import polars as pl

from .events import EID, numbered
from .rulebook import Rule, RuleSet

#: Seconds one fallback regex may spend on one message.
PYTHON_REGEX_TIMEOUT = 0.05

HITS_SCHEMA = {
    "eid": pl.UInt32(),
    "rule": pl.String(),
    "cause": pl.String(),
    "category": pl.String(),
    "role": pl.String(),
    "weight": pl.Float64(),
}


def _scope(rule: Rule) -> pl.Expr:
    cond = pl.lit(True)
    for column, allowed in rule.scope.items():
        col = pl.col(column)
        cond = cond & (
            col.str.contains(allowed).fill_null(False) if isinstance(allowed, str) else col.is_in(list(allowed)).fill_null(False)
        )
    return cond


def _rule_expr(rule: Rule) -> pl.Expr:
    msg = pl.col("message")
    hit = msg.str.contains(rule.pattern).fill_null(False)
    for pat in rule.exclude:
        hit = hit & ~msg.str.contains(pat).fill_null(False)
    return (hit & _scope(rule)).alias(rule.id)


def _python_hits(events: pl.DataFrame, rule: Rule) -> pl.Series:
    """Evaluate a look-around rule with the regex package, only on keyword-bearing events."""
    import regex

    pats = [regex.compile(p) for p in rule.patterns]
    excl = [regex.compile(p) for p in rule.exclude]
    pre = events.select((pl.col("message").str.contains_any(list(rule.keywords)) & _scope(rule)).fill_null(False)).to_series()
    out = [False] * events.height
    messages = events.get_column("message")
    for i in pre.arg_true().to_list():  # only events that carry a keyword: few
        text = messages[i] or ""
        try:
            if any(p.search(text, timeout=PYTHON_REGEX_TIMEOUT) for p in pats) and not any(
                p.search(text, timeout=PYTHON_REGEX_TIMEOUT) for p in excl
            ):
                out[i] = True
        except TimeoutError:
            continue
    return pl.Series(rule.id, out, dtype=pl.Boolean)


def match(events: pl.DataFrame, rules: RuleSet) -> pl.DataFrame:
    """Return one row per (event, rule) hit; ``eid`` is the event's row index.

    Hits of ``deferred`` rules become consequences when the same rank also has a
    hit of a rule that is neither deferred nor context (see :func:`_defer`).
    """
    if events.is_empty() or not rules.rules:
        return pl.DataFrame(schema=HITS_SCHEMA)
    # rules read the message and their scope columns only: match each distinct combination once
    keys = ["message", *sorted({column for r in rules.rules for column in r.scope})]
    distinct = events.select(keys).unique(maintain_order=True)
    live = _live(distinct, rules)
    if not live:
        return pl.DataFrame(schema=HITS_SCHEMA)
    fast = [r for r in live if r.engine == "polars"]
    slow = [r for r in live if r.engine != "polars"]
    columns: list[pl.DataFrame] = []
    if fast:
        columns.append(distinct.select([_rule_expr(r) for r in fast]))
    if slow:
        columns.append(pl.DataFrame([_python_hits(distinct, r) for r in slow]))
    table = pl.concat(columns, how="horizontal")
    # the true cells of the rule columns, as (distinct row, rule index); then events and the rules' fields
    dids = [table.get_column(r.id).arg_true() for r in live]
    if not any(len(d) for d in dids):
        return pl.DataFrame(schema=HITS_SCHEMA)
    index = pl.Series("_r", range(len(live)), dtype=pl.UInt32)
    which = pl.select(index.repeat_by(pl.Series([len(e) for e in dids], dtype=pl.UInt32)).explode()).to_series()
    rows = (
        numbered(events).select(EID, *keys).join(distinct.with_row_index("_d"), on=keys, how="inner", nulls_equal=True).select("eid", "_d")
    )
    meta = pl.DataFrame(
        {
            "_r": index,
            "rule": [r.id for r in live],
            "cause": [r.cause for r in live],
            "category": [rules.category(r.cause) for r in live],
            "role": [r.role for r in live],
            "weight": [float(r.weight) for r in live],
        }
    )
    hits = (
        pl.DataFrame({"_d": pl.concat(dids).cast(pl.UInt32), "_r": which})
        .join(rows, on="_d", how="inner")
        .join(meta, on="_r", how="left")
        .select(list(HITS_SCHEMA))
        .sort("eid", "rule")
    )
    deferred = [r.id for r in rules.rules if r.deferred]
    return _defer(hits, events, deferred) if deferred else hits


def _live(distinct: pl.DataFrame, rules: RuleSet) -> list[Rule]:
    """The rules some message carries a keyword of: the others cannot hit, and skipping them
    skips compiling their patterns, which costs more than matching a small log."""
    found = distinct.select(pl.col("message").str.extract_many(rules.keywords, overlapping=True).explode().drop_nulls().unique())
    present = set(found.to_series().to_list())
    return [r for r in rules.rules if present.intersection(r.keywords)]


def _defer(hits: pl.DataFrame, events: pl.DataFrame, deferred: list[str]) -> pl.DataFrame:
    """Demote deferred hits (how a process ended: SIGABRT, SIGKILL, ...) to consequences
    on ranks that also show another failure: a process dies once, after everything it
    reported, so its own earlier error (or the watchdog timeout it aborted on) is the
    better explanation. Ranks are compared as the parsers left them; hits without a
    rank are compared within their file (a pasted single-process log, NCCL's generic
    "unhandled cuda error" explained by its own "Last error:" line).
    """
    eids = hits.get_column("eid")
    rank = events.get_column("rank").gather(eids).cast(pl.String)
    ranked = hits.with_columns(
        pl.when(rank.is_null()).then(pl.lit("file:") + events.get_column("file").gather(eids)).otherwise(rank).alias("_rank"),
        pl.col("rule").is_in(deferred).alias("_deferred"),
    )
    explained = (
        ranked.filter(~pl.col("_deferred") & (pl.col("role") != "context") & pl.col("_rank").is_not_null()).get_column("_rank").unique()
    )
    demote = pl.col("_deferred") & (pl.col("role") == "primary") & pl.col("_rank").is_in(explained.implode())
    return ranked.with_columns(pl.when(demote).then(pl.lit("consequence")).otherwise(pl.col("role")).alias("role")).drop(
        "_rank", "_deferred"
    )
