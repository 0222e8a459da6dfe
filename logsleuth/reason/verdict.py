"""Across ranks: who failed first, who only suffered, and what the cause is.

Each event keeps its strongest rule hit. A hit's role says how to read it:
``primary`` (a root cause in itself: an exception in user code, an OOM kill, a
time limit), ``consequence`` (what victims print: peer closed the connection,
watchdog timeouts, SIGTERM from the launcher) or ``context`` (supports a
verdict, never makes one).

Rules see one line at a time; the cascade needs the whole job. So before
ranking, exit records are read in the light of their rank's other lines: a
worker the launcher killed while tearing the job down (``Sending process N
closing signal SIGTERM``, exit -15, ``srun: ... Terminated`` after another
task failed) is a victim; an exit whose rank printed its own error is only a
summary of that error (SIGABRT after a watchdog timeout is the watchdog's
abort). What is left is each rank's own failure. The verdict is the earliest
strong primary failure; then a failure no rule explains (the rank is named,
the cause is unknown); then, when only victims' symptoms are in the logs, the
rank that never reached the stalled collective; and a node whose software or
network disagrees with the others explains symptoms that name no culprit.

``reason`` runs the steps; each lives in a module of its own: ``exits`` (which events
show a failure; exit records reread), ``activity`` (errors survived, a job at work or
ending), ``candidates`` (one per cause, their order and confidence), ``lead`` (the
verdict before disagreements, and the cross-rank facts that move its first failure),
``findings`` (disagreements between nodes, GPU faults and file:// init files that
explain the lead's symptoms) and ``ranks`` (every rank's part, the nodes to look at).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from logsleuth.events import EID, numbered
from logsleuth.rulebook import RuleSet

from . import consistency, hangs, timeline
from .activity import _handled, _launcher_saw_no_failure, shows_activity, shows_ending
from .candidates import EVIDENCE_LIMIT, STRONG, Candidate, _candidates, _confidence, _first_failure
from .exits import IS_FAILURE, LAUNCHER_ERROR_RECORD, RAY_ERROR, _attributed, _best_hits, _read_exits, _still_retrying, failure_signals
from .findings import _hardware_first, _init_file_first, _with_findings
from .lead import _lead, _refine
from .ranks import RankState, Suspect, _rank_states, _stalled_by_progress, _suspects

__all__ = [
    "EVIDENCE_LIMIT",
    "IS_FAILURE",
    "LAUNCHER_ERROR_RECORD",
    "RAY_ERROR",
    "STRONG",
    "Candidate",
    "RankState",
    "Reasoning",
    "Suspect",
    "failure_signals",
    "reason",
    "shows_activity",
    "shows_ending",
]


@dataclass
class Reasoning:
    """What the reasoner concluded; the report is rendered from this and the events."""

    candidates: list[Candidate]
    failed: bool
    first_eid: int | None
    first_failure: dict[str, object]
    ranks: list[RankState]
    notes: list[str]
    hang: hangs.Hang | None = None
    suspects: list[Suspect] = field(default_factory=list)
    ordering: str = "line-order"
    ordering_note: str = ""
    offsets: dict[str, float] = field(default_factory=dict)
    handled: list[int] = field(default_factory=list)  # exceptions the process survived (events it kept working after)
    signals: list[int] = field(default_factory=list)  # events that show a failure, explained or not (failure_signals)
    active: bool = True  # a failure, or the job at work: an alarming line, progress or an ending (failed or shows_activity)
    ended: bool = False  # a line says the job or a worker of it ended well (shows_ending)


def reason(events: pl.DataFrame, hits: pl.DataFrame, rules: RuleSet) -> Reasoning:
    """Rank the causes, find the first failure and every rank's part; never raises on empty input."""
    notes: list[str] = []
    ev = numbered(events)
    best = _best_hits(hits)
    focus = ev.join(best, on="eid", how="left").filter(IS_FAILURE | (pl.col("hit_role").is_not_null() & (pl.col("hit_role") != "context")))
    tl = timeline.build(events, focus.get_column("eid"))
    ev = ev.join(tl.order, on="eid", how="left").join(best, on="eid", how="left")
    ev = _read_exits(_still_retrying(ev), events, rules)
    handled: list[int] = []
    signal = failure_signals(events, hits)
    if _launcher_saw_no_failure(ev):
        # an error the job survived (a caught, logged exception): the launcher reported no death
        ev = ev.with_columns(pl.lit(False).alias("unexplained"), (pl.col("role") == "primary").fill_null(False).alias("own"))
        failed = bool(best.filter(pl.col("hit_role") != "context").height)
    else:
        handled = _handled(ev)
        if handled:
            # a traceback after which the same process kept working: logged and survived, a note
            where = ev.filter(pl.col("eid").is_in(handled)).select("file", "line").row(0)
            notes.append(f"{len(handled)} exception(s) were handled: the process kept working after them (first at {where[0]}:{where[1]})")
            ev = ev.with_columns(
                pl.when(pl.col("eid").is_in(handled)).then(pl.lit("context")).otherwise(pl.col("role")).alias("role"),
                pl.when(pl.col("eid").is_in(handled))
                .then(pl.lit("handled: the process kept working"))
                .otherwise(pl.col("why"))
                .alias("why"),
                pl.col("unexplained") & ~pl.col("eid").is_in(handled),
                pl.col("own") & ~pl.col("eid").is_in(handled),
            )
        live = signal & ~numbered(events).get_column(EID).is_in(handled)
        failed = bool(live.any()) or bool(best.filter((pl.col("hit_role") != "context") & ~pl.col("eid").is_in(handled)).height)

    attributed = _attributed(ev, events)
    failing = set(attributed.filter(pl.col("own")).get_column("rank").unique().to_list())
    alive = set(attributed.get_column("rank").unique().to_list())
    stopped = set(attributed.filter(pl.col("why") == "stopped by the launcher").get_column("rank").unique().to_list())
    hang = hangs.analyze(ev, alive, failing, stopped, waiting=rules.waiting) if failed else None
    findings = consistency.check(events)

    candidates = _candidates(ev, rules)
    lead = _lead(candidates, ev, hang, rules)
    if lead is not None:
        lead = _refine(lead, candidates, ev, events, hang, rules, notes)
        # a hang candidate absorbs the rule candidate of the same cause it was built from
        candidates = [lead] + [c for c in candidates if c is not lead and not (lead.role == "hang" and c.cause == lead.cause)]
    candidates = _with_findings(candidates, findings, hang, ev, rules, failed)
    candidates = _hardware_first(candidates, ev, rules, notes)
    candidates = _init_file_first(candidates, ev, rules, notes)
    if candidates:
        _confidence(candidates)
        if candidates[0].cause == "unknown":
            notes.append("no rule explains the first failure; it is shown with its rank and lines")
    elif failed:
        notes.append("the job failed, but no rule recognises the failure")
    first_eid = candidates[0].eids[0] if candidates and candidates[0].eids else None
    first = _first_failure(ev, candidates[0] if candidates else None)
    lead_now = candidates[0] if candidates else None
    ranks = _rank_states(
        attributed,
        events,
        first,
        hang,
        failed,
        lead_now.role if lead_now else None,
        lead_now.category if lead_now else None,
        lead_now.cause if lead_now else None,
    )
    if failed and lead_now is not None and lead_now.category in rules.ended_from_outside and not (hang and hang.hung):
        ranks = _stalled_by_progress(events, ranks, notes)
    if failed and tl.ordering != "timestamps" and events.get_column("file").n_unique() > 1:
        notes.append(f"ordering across files: {tl.note}")
    return Reasoning(
        candidates=candidates,
        failed=failed,
        first_eid=first_eid,
        first_failure=first,
        ranks=ranks,
        notes=notes,
        hang=hang,
        suspects=_suspects(events, candidates, findings, ranks, hang, first),
        ordering=tl.ordering,
        ordering_note=tl.note,
        offsets=tl.offsets,
        handled=handled,
        signals=[int(e) for e in signal.arg_true().to_list() if e not in handled],
        active=failed or shows_activity(ev),
        ended=shows_ending(ev),
    )
