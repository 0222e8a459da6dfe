"""Candidates: one per cause from the rule hits, their order and confidence, and where a
candidate's first failure is (rank, node, time)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from logsleuth.events import CHILD_FAILED
from logsleuth.hostlist import collect_ranges
from logsleuth.rulebook import RuleSet

#: Primary hits at least this strong compete on time: the earliest is the root cause.
#: A hit's weight says how sure its line is of its cause, not which cause comes first.
STRONG = 0.5

EVIDENCE_LIMIT = 6


@dataclass
class Candidate:
    """A cause with the events that support it, best first."""

    cause: str
    category: str
    role: str
    weight: float
    confidence: float
    eids: list[int]
    rules: list[str]
    ranks: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    summary: str | None = None  # a sentence the reasoner wrote (hangs, disagreements)
    first: dict[str, object] | None = None  # first failure, when not its first event's


def _candidates(ev: pl.DataFrame, rules: RuleSet) -> list[Candidate]:
    """One candidate per cause from the events a rule gave a primary or consequence role.

    Exit records the reasoner reread (teardown, summaries) only decide a rank's
    status; their rule's cause was about the line, not the job.
    """
    rows = ev.filter(pl.col("role").is_in(["primary", "consequence"]) & pl.col("why").is_null() & pl.col("cause").is_not_null()).sort("pos")
    out: list[Candidate] = []
    for (cause,), group in rows.group_by(["cause"], maintain_order=True):  # one per cause: few
        role = "primary" if (group.get_column("role") == "primary").any() else "consequence"
        main = group.filter(pl.col("role") == role)
        out.append(
            Candidate(
                cause=str(cause),
                category=rules.category(str(cause)),
                role=role,
                weight=float(main.get_column("weight").max()),  # type: ignore[arg-type]
                confidence=0.0,
                eids=[int(e) for e in main.get_column("eid").to_list()]
                + [int(e) for e in group.filter(pl.col("role") != role).get_column("eid").to_list()],
                rules=sorted(set(group.get_column("rule").drop_nulls().unique().to_list())),
                ranks=sorted({int(r) for r in group.get_column("rank").drop_nulls().to_list()}),
                nodes=sorted(set(group.get_column("node").drop_nulls().unique().to_list())),
            )
        )
    firsts = [c.eids[0] for c in out]
    pos = {int(e): int(p) for e, p in ev.filter(pl.col("eid").is_in(firsts)).select("eid", "pos").iter_rows()}
    primaries = [c for c in out if c.role == "primary"]
    consequences = [c for c in out if c.role != "primary"]
    strong = sorted((c for c in primaries if c.weight >= STRONG), key=lambda c: pos.get(c.eids[0], 0))
    weak = sorted((c for c in primaries if c.weight < STRONG), key=lambda c: -c.weight)
    conseq = sorted(consequences, key=lambda c: (-c.weight, pos.get(c.eids[0], 0)))
    return strong + weak + conseq


def _confidence(cands: list[Candidate]) -> None:
    """Confidence: the lead's weight, less when a rival of another category is as strong."""
    lead = cands[0]
    rivals = [c for c in cands[1:] if c.category != lead.category and c.role == lead.role]
    for i, c in enumerate(cands):
        margin = 1.0
        if i == 0 and rivals:
            margin = 0.85 if rivals[0].weight >= lead.weight else 0.93
        penalty = 0.8 if c.role == "consequence" else 1.0
        c.confidence = round(max(0.05, min(0.99, c.weight * margin * penalty * (1.0 if i == 0 else 0.6))), 3)


def _pos(ev: pl.DataFrame, eid: int) -> int:
    got = ev.filter(pl.col("eid") == eid).get_column("pos")
    return int(got[0]) if got.len() else 0


def _own_time(ev: pl.DataFrame, eid: int) -> str | None:
    """An event's own timestamp, or its rank's torchrun failure time (to the second)."""
    row = ev.filter(pl.col("eid") == eid)
    if row.is_empty():
        return None
    when: datetime | None = row.get_column("time")[0]
    rank = row.get_column("rank")[0]
    if when is None and rank is not None:
        stamped = ev.filter((pl.col("rank") == rank) & (pl.col("kind") == CHILD_FAILED) & pl.col("time").is_not_null())
        if stamped.height:
            when = stamped.get_column("time").min()  # type: ignore[assignment]
    return when.isoformat() if when is not None else None


def _first_failure(ev: pl.DataFrame, lead: Candidate | None) -> dict[str, object]:
    """Rank, node and time of the lead's first event (a rank-less first event borrows the next ranked one's rank)."""
    if lead is None:
        return {"rank": None, "node": None, "time": None}
    if lead.first is not None:
        return dict(lead.first)
    rows = ev.filter(pl.col("eid").is_in(lead.eids)).sort("pos")
    if rows.is_empty():
        return {"rank": None, "node": None, "time": None}
    head = rows.row(0, named=True)
    ranked = rows.filter(pl.col("rank").is_not_null())
    rank, node = head["rank"], head["node"]
    if rank is None and ranked.height:  # e.g. slurmstepd's OOM line, then srun's "task 3: Out Of Memory"
        rank, node = ranked.get_column("rank")[0], ranked.get_column("node")[0] or node
    elif rank is None and node is not None:  # a node-level line: the rank on that node that died on its own
        own = ev.filter(pl.col("own") & (pl.col("node") == node) & pl.col("rank").is_not_null()).sort("pos")
        if own.height:
            rank = own.get_column("rank")[0]
    if (node is None or "[" in node or "," in node) and rank is not None:
        node = ev.filter((pl.col("rank") == rank) & pl.col("node").is_not_null()).get_column("node").mode().sort().first()
    return {"rank": rank, "node": node, "time": _own_time(ev, int(head["eid"]))}


def _rank_first(ev: pl.DataFrame, rank: int, among: list[int] | None = None) -> dict[str, object]:
    """First failure at ``rank``: its node, and the time of its first failure line (of ``among``, if given)."""
    rows = ev.filter(pl.col("rank") == rank)
    if among is not None:
        rows = rows.filter(pl.col("eid").is_in(among))
    failing = rows.filter(pl.col("own") | pl.col("role").is_in(["primary", "consequence"])).sort("pos")
    pick = failing if failing.height else rows.sort("pos")
    nodes = ev.filter((pl.col("rank") == rank) & pl.col("node").is_not_null()).get_column("node")
    node = nodes.mode().sort()[0] if nodes.len() else None
    when = _own_time(ev, int(pick.get_column("eid")[0])) if pick.height else None
    return {"rank": rank, "node": node, "time": when}


def _rank_list(ranks: list[int]) -> str:
    return collect_ranges(ranks) if len(ranks) > 1 else str(ranks[0])
