"""Every rank's part in the failure (culprit, failed, hung, victim, finished) and the nodes to look at."""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from logsleuth.events import AGENT_SIGNAL, AGENT_TEARDOWN, CHILD_FAILED, EXIT_KINDS, NCCL_INIT, NCCL_NET, numbered
from logsleuth.parse.identity import rank_table

from . import consistency, hangs
from .candidates import Candidate, _rank_list


@dataclass
class RankState:
    """One rank's part in the failure."""

    rank: int
    node: str | None
    status: str  # culprit | failed | hung | victim | finished | unknown
    evidence: tuple[str, int] | None = None  # file, line
    local_rank: int | None = None
    pid: int | None = None
    time: str | None = None
    kind: str | None = None
    cause: str | None = None
    note: str | None = None  # why this status, in a few words
    seq: int | None = None  # last collective SeqNum the rank reported
    last: tuple[str, int, str] | None = None  # the last line it printed: file, line, text


@dataclass
class Suspect:
    """A node the evidence points at, and why."""

    node: str
    reasons: list[str]
    causes: list[str]
    ranks: list[int]
    eids: list[int]


#: Steps behind the furthest rank at which a rank counts as stalled (one step apart is timing).
STALL_STEPS = 2

#: How a rank found stalled by its progress lines is noted (the suspects read it back).
_STALLED = "last progress at step"


def _stalled_by_progress(events: pl.DataFrame, ranks: list[RankState], notes: list[str]) -> list[RankState]:
    """Ranks whose last progress step is well behind the others' (a minority of at least three
    ranks printing steps): the job hung there, and the others waited until it was ended. They
    become ``hung`` with their last step in the note; the other ranks stay victims."""
    last = events.filter(pl.col("step").is_not_null() & pl.col("rank").is_not_null()).group_by("rank").agg(pl.col("step").max())
    if last.height < 3:
        return ranks
    top = int(last.get_column("step").max())  # type: ignore[arg-type]
    behind = last.filter(pl.col("step") <= top - STALL_STEPS).sort("step", "rank")
    if behind.is_empty() or behind.height * 2 >= last.height:
        return ranks
    stalled = {int(r): int(s) for r, s in behind.select("rank", "step").iter_rows()}
    notes.append(
        "progress stopped first on rank(s) "
        + ", ".join(f"{r} (step {s})" for r, s in stalled.items())
        + f"; the other ranks reached step {top}: look there for the hang"
    )
    out = []
    for st in ranks:
        if st.rank in stalled and st.status in ("victim", "unknown", "finished"):
            st = replace(st, status="hung", note=f"{_STALLED} {stalled[st.rank]} (others: {top})")
        out.append(st)
    return out


def _rank_states(
    ranked: pl.DataFrame,
    events: pl.DataFrame,
    first: dict[str, object],
    hang: hangs.Hang | None,
    failed: bool,
    lead_role: str | None,
    lead_category: str | None = None,
    lead_cause: str | None = None,
) -> list[RankState]:
    """Per rank: the culprit, others that failed on their own, hung ranks, victims, and the rest.

    A verdict made of victims' symptoms only (peer_failure) names no culprit:
    the rank that failed first there is the first victim.
    """
    world = events.filter(pl.col("kind") == NCCL_INIT).get_column("nranks").drop_nulls().mode().sort()
    table = rank_table(events, int(world[0]) if world.len() and world[0] <= 65536 else None)
    if table.is_empty():
        return []
    ranked = ranked.sort("pos")
    ranked = ranked.select("rank", "file", "line", "time", "kind", "cause", "why", "raw", "own", "role", "pos", "source", "signal")
    own = ranked.filter(pl.col("own")).group_by("rank", maintain_order=True).first()
    victim = ranked.filter(pl.col("role") == "consequence").group_by("rank", maintain_order=True).first()
    # the last line the rank printed itself; the launcher's lines about it only when there is nothing else
    by_launcher = (pl.col("source") == "launcher") | pl.col("kind").is_in([*EXIT_KINDS, AGENT_TEARDOWN, AGENT_SIGNAL])
    last = ranked.sort(by_launcher, "pos", descending=[True, False]).group_by("rank", maintain_order=True).last()
    cfe_nodes = set(events.filter(pl.col("kind") == CHILD_FAILED).get_column("node").drop_nulls().unique().to_list())
    closed = set(events.filter(pl.col("kind") == AGENT_TEARDOWN).get_column("pid").drop_nulls().unique().to_list())
    lookup = {
        name: {int(r["rank"]): r for r in frame.iter_rows(named=True)} for name, frame in (("own", own), ("victim", victim), ("last", last))
    }
    hung = set(hang.hung) if hang else set()
    last_seq = hang.last_seq if hang else {}
    culprit = first.get("rank") if lead_role in ("primary", "hang", "consistency") else None
    mismatch = lead_category == "collective_mismatch" and culprit is not None
    states: list[RankState] = []
    for rank, node, local_rank, pid in table.iter_rows():  # one per rank
        r = int(rank)
        o, v, ll = lookup["own"].get(r), lookup["victim"].get(r), lookup["last"].get(r)
        if not failed:
            status, ev_row, note = "finished", ll, None
        elif culprit is not None and r == culprit:
            status, ev_row, note = "culprit", o or (ll if r in hung else v) or ll, "failed first"
            if r in hung:
                note = "never arrived where the other ranks waited for it"
        elif (
            o is not None
            and lead_role == "hang"
            and hang is not None
            and (r in hang.timed_out or (o["kind"] in EXIT_KINDS and not o["signal"]))
        ):
            # it reported the wait, or it only exited with an error code while the others waited
            status, ev_row, note = "victim", o, "gave up waiting for the ranks that never came"
        elif o is not None and mismatch and o.get("cause") in (None, "collective_mismatch"):
            status, ev_row, note = "victim", o, "reported the mismatched collective"
        elif o is not None:
            status, ev_row, note = "failed", o, "failed on its own"
        elif r in hung:
            status, ev_row, note = "hung", ll, "never arrived where the other ranks waited for it"
        elif v is not None:
            status, ev_row, note = "victim", v, v.get("why") or "failed because another rank did"
        elif ll is None and world.len():
            status, ev_row, note = "unknown", None, "printed nothing attributable"
        elif node in cfe_nodes and pid not in closed and ll is not None and ll["kind"] not in EXIT_KINDS:
            status, ev_row, note = "finished", ll, "exited without an error while its peers failed"
        else:
            status, ev_row, note = "unknown", ll, None
        states.append(
            RankState(
                rank=r,
                node=node,
                status=status,
                evidence=(ev_row["file"], int(ev_row["line"])) if ev_row else None,
                local_rank=local_rank,
                pid=pid,
                time=ev_row["time"].isoformat() if ev_row and ev_row["time"] else None,
                kind=ev_row["kind"] if ev_row else None,
                cause=lead_cause if status in ("culprit", "hung") and lead_cause else (ev_row.get("cause") if ev_row else None),
                note=note,
                seq=last_seq.get(r),
                last=(ll["file"], int(ll["line"]), (ll["raw"] or "")[:300])
                if ll and status in ("culprit", "hung", "finished", "unknown")
                else None,
            )
        )
    return states


def _suspects(
    events: pl.DataFrame,
    cands: list[Candidate],
    findings: list[consistency.Finding],
    ranks: list[RankState],
    hang: hangs.Hang | None,
    first: dict[str, object],
) -> list[Suspect]:
    """Nodes to look at: the culprit's, the hung ranks', the odd ones out and the peers errors name."""
    out: dict[str, Suspect] = {}

    def add(node: object, reason: str, cause: str, rank_ids: list[int], eids: list[int]) -> None:
        if not isinstance(node, str) or not node or "[" in node:
            return
        s = out.setdefault(node, Suspect(node, [], [], [], []))
        if reason not in s.reasons:
            s.reasons.append(reason)
        if cause not in s.causes:
            s.causes.append(cause)
        s.ranks = sorted(set(s.ranks) | set(rank_ids))
        s.eids += [e for e in eids if e not in s.eids][:4]

    if cands and first.get("node"):
        lead = cands[0]
        rank = first.get("rank")
        add(
            first["node"],
            f"first failure ({lead.cause})" + (f" on rank {rank}" if rank is not None else ""),
            lead.cause,
            [rank] if isinstance(rank, int) else [],
            lead.eids[:2],
        )
    if hang and hang.hung:
        by_node: dict[str, list[int]] = {}
        for st in ranks:
            if st.rank in hang.hung and st.node:
                by_node.setdefault(st.node, []).append(st.rank)
        for node, rs in by_node.items():
            add(node, f"rank(s) {_rank_list(rs)} never reached the collective", "collective_timeout", rs, [])
    for f in findings:
        for node in f.nodes:
            add(node, f.summary, f.cause, f.ranks, f.eids)
    for st in ranks:
        if st.status == "hung" and st.note and st.note.startswith(_STALLED):
            add(st.node, f"rank {st.rank} stopped making progress first ({st.note})", "collective_timeout", [st.rank], [])
    if cands:
        for node, reason, rank_ids, eids in _named_peers(events):
            add(node, reason, cands[0].cause, rank_ids, eids)
    return list(out.values())


def _named_peers(events: pl.DataFrame) -> list[tuple[str, str, list[int], list[int]]]:
    """Peers that error lines of at least two ranks (or two lines) point at by address, as
    (node, reason, ranks, event ids): the node every InfiniBand or socket error names is the
    one to look at, even when it printed nothing. An address is named by the node that
    announced it on NCCL's "Using" lines, else shown as it is."""
    own = (
        events.filter((pl.col("kind") == NCCL_NET) & pl.col("address").is_not_null() & pl.col("node").is_not_null())
        .group_by("address")
        .agg(pl.col("node").first())
    )
    named = (
        numbered(events)
        .filter(pl.col("address").is_not_null() & (pl.col("kind") != NCCL_NET) & pl.col("level").is_in(["error", "fatal", "warning"]))
        .join(own.rename({"node": "peer"}), on="address", how="left")
        .filter(pl.col("peer").is_null() | (pl.col("peer") != pl.col("node").fill_null("")))
        .group_by("address", maintain_order=True)
        .agg(pl.col("peer").first(), pl.col("rank").drop_nulls().unique().sort(), pl.col("eid"), pl.len().alias("n"))
        .filter((pl.col("n") >= 2) | (pl.col("rank").list.len() >= 2))
    )
    out = []
    for row in named.iter_rows(named=True):  # one row per address: a handful
        ranks = [int(r) for r in row["rank"]]
        who = f" on rank(s) {_rank_list(ranks)}" if ranks else ""
        node = row["peer"] or row["address"]
        also = f" ({row['address']})" if row["peer"] else ""
        out.append((node, f"named as the peer{also} by {row['n']} error line(s){who}", ranks, [int(e) for e in row["eid"][:4]]))
    return out
