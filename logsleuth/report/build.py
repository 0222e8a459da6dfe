"""Reasoning + events -> Report: pick the evidence, write the summary, attach the fix."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

import polars as pl

from logsleuth.events import numbered
from logsleuth.hostlist import collect_ranges
from logsleuth.ingest import InputInfo
from logsleuth.reason import EVIDENCE_LIMIT, Candidate, Reasoning
from logsleuth.rulebook import Rule, RuleSet
from logsleuth.taxonomy import TAXONOMY

from .model import CandidateOut, Evidence, FirstFailure, InputOut, RankOut, Report, SuspectNodeOut, Verdict

#: The readings of a job no cause explains, as (cause, reading) in rules/causes.toml, whose entries hold
#: their title, summary and fix: a failure no rule knows, a paste of set-up lines only, a clean run that
#: shows its ending, and one that does not.
_NO_CAUSE: dict[str, tuple[str, str | None]] = {
    "unknown": ("unknown", None),
    "quiet": ("unknown", "quiet"),
    "none": ("none", None),
    "unfinished": ("none", "unfinished"),
}


class _Lenient(string.Formatter):
    """str.format that prints '?' for fields a template names but the event lacks."""

    def get_value(self, key: Any, args: Any, kwargs: Mapping[str, Any]) -> Any:
        value = kwargs.get(key) if isinstance(key, str) else None
        return "?" if value is None or value == "" else value


def _groups(rule: Rule, text: str) -> dict[str, str]:
    """The named groups of the rule's first pattern that matches ``text``, for its summary template."""
    named = [p for p in rule.patterns if _NAMED_GROUP.search(p)]
    if not named:  # most rules name no group: spare the regex import
        return {}
    import regex

    for pat in named:
        try:
            m = regex.search(pat, text, timeout=0.05)
        except (regex.error, TimeoutError):
            continue
        if m:
            return {k: v for k, v in m.groupdict().items() if v is not None}
    return {}


#: A named group, in Python's and Rust's spellings (not a look-behind).
_NAMED_GROUP = re.compile(r"\(\?P?<[A-Za-z_]")


def _evidence(events: pl.DataFrame, eids: list[int], rules_by_eid: Mapping[int, str]) -> list[Evidence]:
    out = []
    for eid in eids:
        row = events.row(eid, named=True)
        out.append(
            Evidence(
                file=row["file"],
                line=int(row["line"]),
                rank=row["rank"],
                node=row["node"],
                text=row["raw"],
                rule=rules_by_eid.get(eid),
                kind=row["kind"],
                frame=row.get("frame"),
            )
        )
    return out


def _pick_evidence(events: pl.DataFrame, eids: list[int], limit: int = EVIDENCE_LIMIT) -> list[int]:
    """The first event, then one per further rank or kind, in order: proof without repetition."""
    chosen: list[int] = []
    seen: set[tuple[object, object]] = set()
    for eid in eids:
        row = events.row(eid, named=True)
        key = (row["rank"], row["kind"])
        if key in seen and chosen:
            continue
        seen.add(key)
        chosen.append(eid)
        if len(chosen) >= limit:
            break
    return chosen


def build(
    events: pl.DataFrame,
    hits: pl.DataFrame,
    reasoning: Reasoning,
    rules: RuleSet,
    inputs: list[InputInfo],
    *,
    version: str,
    stats: dict[str, Any] | None = None,
) -> Report:
    """Assemble the Report for one analysis."""
    rules_by_id = rules.by_id()
    best_rule = {
        int(e): str(r) for e, r in hits.sort("weight", descending=True).unique("eid", keep="first").select("eid", "rule").iter_rows()
    }
    cands = reasoning.candidates
    lead = cands[0] if cands else None
    if lead is not None and lead.category not in ("none", "unknown") and lead.eids:
        verdict = _cause_verdict(events, lead, reasoning, rules, rules_by_id, best_rule)
    else:
        verdict = _unknown_verdict(events, lead, reasoning, rules, best_rule)
    candidates = [CandidateOut(c.cause, c.category, c.confidence, c.rules, len(c.eids), c.ranks) for c in cands] or [
        CandidateOut(verdict.cause, verdict.category, verdict.confidence)
    ]
    ranks = [
        RankOut(
            r.rank,
            r.node,
            r.status,
            file=r.evidence[0] if r.evidence else None,
            line=r.evidence[1] if r.evidence else None,
            local_rank=r.local_rank,
            pid=r.pid,
            time=r.time,
            kind=r.kind,
            cause=r.cause,
            note=r.note,
            seq=r.seq,
            last_line={"file": r.last[0], "line": r.last[1], "text": r.last[2]} if r.last else None,
        )
        for r in reasoning.ranks
    ]
    suspects = [
        SuspectNodeOut(
            s.node,
            list(s.reasons),
            list(s.causes),
            list(s.ranks),
            [e for e in _evidence(events, s.eids, best_rule) if e.node in (None, s.node)][:4],
        )
        for s in reasoning.suspects
    ]
    timeline = {"ordering": reasoning.ordering, "note": reasoning.ordering_note, "clock_offsets_s": dict(reasoning.offsets)}
    return Report(
        verdict=verdict,
        candidates=candidates,
        inputs=[InputOut(i.file, i.bytes, i.lines, list(i.problems)) for i in inputs],
        ranks=ranks,
        suspect_nodes=suspects,
        hang=reasoning.hang.to_dict() if reasoning.hang else None,
        timeline=timeline,
        notes=list(reasoning.notes),
        stats={**dict(stats or {}), "ordering": reasoning.ordering},
        version=version,
    )


def _cause_verdict(
    events: pl.DataFrame,
    lead: Candidate,
    reasoning: Reasoning,
    rules: RuleSet,
    rules_by_id: Mapping[str, Rule],
    best_rule: Mapping[int, str],
) -> Verdict:
    """The verdict for a recognised cause: the rule's summary (or the reasoner's) and fix."""
    ff = reasoning.first_failure
    cause = rules.cause(lead.cause)
    ev_ids = _pick_evidence(events, lead.eids)
    first = events.row(lead.eids[0], named=True)
    # a verdict of the classifier alone (no rule) must not borrow the advice of a rule for another cause
    rule = rules_by_id.get(best_rule.get(lead.eids[0], ""), None) if lead.rules else None
    if lead.summary:
        summary = _sentence(lead.summary)
        rule = rule if rule is not None and rule.cause == lead.cause else None
    else:
        fields = {k: v for k, v in first.items() if v is not None}
        fields["rank"] = ff.get("rank")
        fields["node"] = ff.get("node")
        fields["where"] = _where_phrase(ff.get("rank"), ff.get("node"))
        fields.update(_groups(rule, first["message"] or "") if rule else {})
        template = (rule.summary if rule and rule.summary else "") or "{title} on {where}: {message}"
        fields.setdefault("title", cause.title)
        summary = _sentence(_Lenient().format(template, **fields))
    summary += _cascade_sentence(reasoning)
    return Verdict(
        cause=lead.cause,
        category=lead.category,
        confidence=lead.confidence,
        first_failure=FirstFailure(ff.get("rank"), ff.get("node"), ff.get("time")),  # type: ignore[arg-type]
        evidence=_evidence(events, ev_ids, best_rule),
        summary=summary,
        fix=list(rule.fix if rule and rule.fix else cause.fix),
        title=cause.title,
        explanation=(rule.explanation if rule and rule.explanation else cause.explanation),
        references=list(dict.fromkeys([*(rule.references if rule else ()), *cause.references])),
    )


def _unknown_verdict(
    events: pl.DataFrame, lead: Candidate | None, reasoning: Reasoning, rules: RuleSet, best_rule: Mapping[int, str]
) -> Verdict:
    """No recognised cause: ``unknown`` with the first failure's lines, or ``none`` for a clean run
    (texts from rules/causes.toml)."""
    ff = reasoning.first_failure
    if lead is not None:
        failures = lead.eids
    else:
        failures = list(reasoning.signals)
    if lead is not None and lead.category in ("none", "unknown"):
        category = lead.category
    else:
        category = "unknown" if reasoning.failed else "none"
    # nothing failed, but nothing shows the job at work either: an honest unknown, not an all-clear
    quiet = category in ("none", "unknown") and not reasoning.active
    if quiet:
        category = "unknown"
        last_lines = numbered(events).sort("file", "line").group_by("file", maintain_order=True).last()
        failures = last_lines.get_column("eid").to_list()
    # which of the four no-cause readings this is: its title, summary and fix
    kind = "quiet" if quiet else category if category == "unknown" or reasoning.ended else "unfinished"
    reading = rules.reading(*_NO_CAUSE[kind])
    title, summary, fix = reading.title, reading.summary, reading.fix
    located = rules.cause(category).located
    if category == "unknown" and not quiet and located and (ff.get("rank") is not None or ff.get("node")):
        summary = _Lenient().format(located, where=_where_phrase(ff.get("rank"), ff.get("node")).capitalize())
        summary += _cascade_sentence(reasoning)
    verdict = Verdict(
        cause=category,
        category=category,
        confidence=lead.confidence if lead is not None else (0.5 if category == "unknown" else 0.8),
        first_failure=FirstFailure(ff.get("rank"), ff.get("node"), ff.get("time")),  # type: ignore[arg-type]
        evidence=_evidence(events, _pick_evidence(events, failures, 3), best_rule),
        summary=summary,
        fix=list(fix),
        title=title,
        explanation=TAXONOMY[category],
    )
    if category == "unknown" and lead is None and failures and not quiet:
        row = events.row(failures[0], named=True)
        verdict.first_failure = FirstFailure(row["rank"], row["node"], row["time"].isoformat() if row["time"] else None)
    return verdict


def _cascade_sentence(reasoning: Reasoning) -> str:
    """' N other rank(s) failed as a consequence; rank(s) X hung.' (empty when nobody else was involved)."""
    victims = sum(1 for r in reasoning.ranks if r.status == "victim")
    hung = [r.rank for r in reasoning.ranks if r.status == "hung"]
    parts = []
    if victims:
        parts.append(f"{victims} other rank(s) failed as a consequence")
    if hung:
        parts.append(f"rank(s) {collect_ranges(hung)} hung without reaching the collective")
    return (" " + "; ".join(parts)[0].upper() + "; ".join(parts)[1:] + ".") if parts else ""


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _where_phrase(rank: object, node: object) -> str:
    if rank is not None and node:
        return f"rank {rank} ({node})"
    if rank is not None:
        return f"rank {rank}"
    if node:
        return f"node {node}"
    return "an unidentified rank"
