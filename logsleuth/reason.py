"""Across ranks: who failed first, who only suffered, and what the cause is.

Each event keeps its strongest rule hit. A hit's role says how to read it:
``primary`` (a root cause in itself: an exception in user code, an OOM kill, a
time limit), ``consequence`` (what victims print: peer closed the connection,
watchdog timeouts, SIGTERM from the launcher) or ``context`` (supports a
verdict, never makes one). The verdict is the earliest primary failure among
the strong ones; consequences decide only when no primary failure is in the
logs, which is exactly when ``peer_failure`` or ``collective_timeout`` apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from .rulebook import RuleSet

#: Kinds of event that show a process or job failed (used to tell `unknown` from `none`).
FAILURE_KINDS = (
    "traceback",
    "cpp_terminate",
    "cpp_what",
    "watchdog_timeout",
    "gloo_timeout",
    "child_failed",
    "agent_worker_failed",
    "srun_exit",
    "slurm_cancel",
    "slurm_oom",
    "slurm_failed",
    "slurm_memory_error",
    "slurm_node_failure",
)
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


@dataclass
class RankState:
    rank: int
    node: str | None
    status: str  # culprit | failed | victim | finished | unknown
    evidence: tuple[str, int] | None = None  # file, line


@dataclass
class Reasoning:
    """What the reasoner concluded; the report is rendered from this and the events."""

    candidates: list[Candidate]
    failed: bool
    first_eid: int | None
    first_failure: dict[str, object]
    ranks: list[RankState]
    notes: list[str]


def resolve_identity(events: pl.DataFrame) -> pl.DataFrame:
    """Fill rank and node where other lines of the same job tell them.

    - srun with one task per rank (no torchrun local ranks anywhere): rank = task.
    - a process (node, pid) named by a torchrun failure entry or NCCL: its rank.
    - srun exit lines map task ranges to nodes; a single-node job has one node.
    """
    if events.is_empty():
        return events
    has_local = events.get_column("local_rank").drop_nulls().len() > 0
    df = events
    if not has_local:
        df = df.with_columns(pl.coalesce("rank", "task").alias("rank"))
    by_pid = (
        df.filter(pl.col("pid").is_not_null() & pl.col("rank").is_not_null() & pl.col("kind").is_in(["child_failed", "nccl_init"]))
        .group_by("pid")
        .agg(pl.col("rank").first().alias("_prank"), pl.col("node").drop_nulls().first().alias("_pnode"))
    )
    if not by_pid.is_empty():
        df = (
            df.join(by_pid, on="pid", how="left")
            .with_columns(pl.coalesce("rank", "_prank").alias("rank"), pl.coalesce("node", "_pnode").alias("node"))
            .drop("_prank", "_pnode")
        )
    rank_node = (
        df.filter(pl.col("rank").is_not_null() & pl.col("node").is_not_null())
        .group_by("rank")
        .agg(pl.col("node").mode().first().alias("_rnode"))
    )
    if not rank_node.is_empty():
        df = df.join(rank_node, on="rank", how="left").with_columns(pl.coalesce("node", "_rnode").alias("node")).drop("_rnode")
    nodes = df.get_column("node").drop_nulls().unique()
    if nodes.len() == 1:
        df = df.with_columns(pl.col("node").fill_null(nodes[0]))
    return df


def _order(events: pl.DataFrame) -> pl.DataFrame:
    """An ordering key: the event's time, else the last time seen above it in its file."""
    return (
        events.with_row_index("eid")
        .with_columns(
            pl.col("time").forward_fill().over("file", order_by="line").alias("_t"),
            pl.col("file").rank("dense").alias("_f"),
        )
        .sort("_t", "_f", "line", nulls_last=False)
    )


def reason(events: pl.DataFrame, hits: pl.DataFrame, rules: RuleSet) -> Reasoning:
    """Rank the causes and find the first failure; never raises on empty input."""
    notes: list[str] = []
    ordered = _order(events)
    position = {eid: i for i, eid in enumerate(ordered.get_column("eid").to_list())}
    role_rank = pl.col("role").replace_strict({"primary": 0, "consequence": 1, "context": 2}, return_dtype=pl.Int8)
    best = (
        hits.sort(["eid", "weight", role_rank], descending=[False, True, False])
        .group_by("eid", maintain_order=True)
        .first()
        .with_columns(pl.col("eid").replace_strict(position, return_dtype=pl.Int64).alias("_pos"))
        .sort("_pos")
    )
    failed = bool(events.filter(pl.col("kind").is_in(FAILURE_KINDS) & pl.col("level").is_in(["error", "fatal"])).height) or bool(
        best.filter(pl.col("role") != "context").height
    )
    ranks_of = events.get_column("rank")
    candidates: list[Candidate] = []
    for (cause,), group in best.filter(pl.col("role") != "context").group_by(["cause"], maintain_order=True):
        roles = set(group.get_column("role").to_list())
        eids = group.get_column("eid").to_list()
        candidates.append(
            Candidate(
                cause=str(cause),
                category=rules.category(str(cause)),
                role="primary" if "primary" in roles else "consequence",
                weight=float(group.get_column("weight").max()),  # type: ignore[arg-type]
                confidence=0.0,
                eids=eids,
                rules=sorted(set(group.get_column("rule").to_list())),
                ranks=sorted({r for r in (ranks_of[e] for e in eids) if r is not None}),
            )
        )
    candidates = _rank(candidates, position)
    first_eid = candidates[0].eids[0] if candidates else None
    if not candidates and failed:
        notes.append("the job failed, but no rule recognises the failure")
    first = _first_failure(events, first_eid)
    return Reasoning(
        candidates=candidates,
        failed=failed,
        first_eid=first_eid,
        first_failure=first,
        ranks=_rank_states(events, best, first_eid),
        notes=notes,
    )


def _rank(cands: list[Candidate], position: dict[int, int]) -> list[Candidate]:
    """Order candidates: strong primaries by time, then weaker ones, then consequences; set confidence."""
    if not cands:
        return cands
    for c in cands:
        c.eids.sort(key=lambda e: position.get(e, 0))
    primaries = [c for c in cands if c.role == "primary"]
    consequences = [c for c in cands if c.role != "primary"]
    strong = sorted((c for c in primaries if c.weight >= STRONG), key=lambda c: position.get(c.eids[0], 0))
    weak = sorted((c for c in primaries if c.weight < STRONG), key=lambda c: -c.weight)
    conseq = sorted(consequences, key=lambda c: (-c.weight, position.get(c.eids[0], 0)))
    ordered = strong + weak + conseq
    lead = ordered[0]
    rivals = [c for c in ordered[1:] if c.category != lead.category and c.role == lead.role]
    for i, c in enumerate(ordered):
        margin = 1.0
        if i == 0 and rivals:
            margin = 0.85 if rivals[0].weight >= lead.weight else 0.93
        penalty = 0.8 if c.role == "consequence" else 1.0
        c.confidence = round(max(0.05, min(0.99, c.weight * margin * penalty * (1.0 if i == 0 else 0.6))), 3)
    return ordered


def _first_failure(events: pl.DataFrame, eid: int | None) -> dict[str, object]:
    if eid is None:
        return {"rank": None, "node": None, "time": None}
    row = events.row(eid, named=True)
    when: datetime | None = row["time"]
    if when is None and row["rank"] is not None:
        # torchrun's failure entry for the same rank carries a time (to the second)
        stamped = events.filter((pl.col("rank") == row["rank"]) & (pl.col("kind") == "child_failed") & pl.col("time").is_not_null())
        if stamped.height:
            when = stamped.get_column("time").min()  # type: ignore[assignment]
    return {
        "rank": row["rank"],
        "node": row["node"],
        "time": when.isoformat() if when is not None else None,
    }


def _rank_states(events: pl.DataFrame, best: pl.DataFrame, first_eid: int | None) -> list[RankState]:
    """Per rank: the culprit, others that failed on their own, victims, and the rest."""
    ranked = events.with_row_index("eid").filter(pl.col("rank").is_not_null())
    if ranked.is_empty():
        return []
    culprit = events.row(first_eid, named=True)["rank"] if first_eid is not None else None
    roles = ranked.join(best.select("eid", "role"), on="eid", how="left")
    states: list[RankState] = []
    for (rank,), group in roles.sort("rank", "eid").group_by(["rank"], maintain_order=True):
        node = group.get_column("node").drop_nulls().first() if group.get_column("node").drop_nulls().len() else None
        primary = group.filter(pl.col("role") == "primary")
        victim = group.filter(pl.col("role") == "consequence")
        errors = group.filter(pl.col("kind").is_in(FAILURE_KINDS))
        if rank == culprit:
            status, ev = "culprit", group.filter(pl.col("eid") == first_eid) if first_eid is not None else primary
        elif primary.height:
            status, ev = "failed", primary
        elif victim.height or errors.height:
            status, ev = "victim", victim if victim.height else errors
        else:
            status, ev = "unknown", group.head(0)
        first = ev.head(1).row(0, named=True) if ev.height else None
        states.append(RankState(int(rank), node, status, (first["file"], first["line"]) if first else None))  # type: ignore[arg-type]
    return states
