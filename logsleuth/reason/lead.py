"""The lead: the verdict before disagreements between nodes are weighed, and the cross-rank facts
that move its first failure (the rank that never came to a wait, the odd collective, the rank that
left early, ranks that failed together)."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from logsleuth.events import AGENT_TEARDOWN, CHILD_FAILED, EXIT_KINDS, GLOO_TIMEOUT, WATCHDOG_TIMEOUT
from logsleuth.rulebook import RuleSet

from . import hangs
from .candidates import STRONG, Candidate, _own_time, _pos, _rank_first, _rank_list


def _lead(cands: list[Candidate], ev: pl.DataFrame, hang: hangs.Hang | None, rules: RuleSet) -> Candidate | None:
    """The verdict before disagreements between nodes are weighed."""
    strong = [c for c in cands if c.role == "primary" and c.weight >= STRONG]
    if strong:
        return strong[0]
    unexplained = ev.filter(pl.col("unexplained")).sort("pos")
    weak = [c for c in cands if c.role == "primary"]
    if not unexplained.is_empty():
        first = unexplained.row(0, named=True)
        weak_first = min(weak, key=lambda c: _pos(ev, c.eids[0])) if weak else None
        if weak_first is None or _pos(ev, weak_first.eids[0]) > first["pos"]:
            return Candidate(
                cause="unknown",
                category="unknown",
                role="primary",
                weight=0.5,
                confidence=0.0,
                eids=[int(e) for e in unexplained.get_column("eid").to_list()],
                rules=[],
                ranks=sorted({int(r) for r in unexplained.get_column("rank").drop_nulls().to_list()}),
                nodes=sorted(set(unexplained.get_column("node").drop_nulls().unique().to_list())),
            )
        return weak_first
    if weak:
        return weak[0]
    if hang is not None and (hang.hung or hang.mismatch):
        return _hang_candidate(cands, ev, hang, rules)
    return cands[0] if cands else None


def _refine(
    lead: Candidate,
    cands: list[Candidate],
    ev: pl.DataFrame,
    events: pl.DataFrame,
    hang: hangs.Hang | None,
    rules: RuleSet,
    notes: list[str],
) -> Candidate:
    """Cross-rank facts that move the first failure away from the lead's first line.

    - ranks that waited for the others (collective or rendezvous timeouts): the
      first failure is the rank that never came;
    - a collective mismatch: the rank whose collective differs from the others';
    - victims of a vanished peer: the rank that left the job without an error;
    - ranks that failed the same way at the same moment: the lowest of them.
    """
    split = _split_wait(lead, cands, ev, rules)
    if split is not None:
        return split
    if lead.category in rules.waiting and lead.role != "hang" and hang is not None and hang.hung:
        return _hang_candidate(cands, ev, hang, rules, cause=lead.cause)
    if lead.cause == "unknown" and hang is not None and hang.hung:
        # the unexplained errors were ranks giving up waiting (their exit records aside)
        lines = ev.filter(pl.col("eid").is_in(lead.eids) & ~pl.col("kind").is_in(EXIT_KINDS))
        if lines.select(hangs.IS_WAIT.all()).item():
            store = lines.select(hangs.IS_STORE_WAIT.any()).item()
            return _hang_candidate(cands, ev, hang, rules, cause="rendezvous_timeout" if store else None)
    if lead.category in ("collective_mismatch", "unknown") and lead.first is None:
        odd = hangs.fingerprints(ev)
        ranks, why = odd if odd else ((hang.odd, hang.mismatch or "") if hang and hang.odd else ([], ""))
        if ranks:
            if lead.category == "unknown":  # every rank raised "Detected mismatch between collectives"
                lead = _mismatch_candidate(ev, rules, ranks, why)
            lead.first = _rank_first(ev, ranks[0])
            lead.ranks = sorted(set(lead.ranks) | set(ranks))
            if why:
                notes.append(f"collective mismatch: {why}")
            return lead
    if lead.category == "peer_failure" and lead.role == "consequence":
        left = _left_early(ev, events)
        if left:
            rank = left[0]
            lead.first = _rank_first(ev, rank)
            where = f" ({lead.first['node']})" if lead.first.get("node") else ""
            lead.summary = (
                f"Rank {rank}{where} left the job without an error while the others still needed it; they failed on the closed connection"
            )
            return lead
    if lead.role == "primary" and lead.first is None and lead.category not in rules.waiting:
        tied = _simultaneous(ev, lead)
        if tied is not None:
            lead.first = _rank_first(ev, tied, among=lead.eids)
    return lead


def _split_wait(lead: Candidate, cands: list[Candidate], ev: pl.DataFrame, rules: RuleSet) -> Candidate | None:
    """Some ranks timed out waiting in the store (forming a new process group: ``new_group``, the
    DETAIL wrapper's helper group) while the other ranks timed out inside a collective: the ranks
    were in different operations. A collective runs on a group that formed already, so the ranks in
    the store were creating a group the others never asked for: they issued different collectives
    (new_group must be called by every rank, in the same order as their other collectives)."""
    if lead.role == "hang" or rules.category(lead.cause) != "rendezvous_timeout":
        return None
    lines = ev.filter(pl.col("eid").is_in(lead.eids))
    in_store = set(lines.filter(hangs.IS_STORE_WAIT).get_column("rank").drop_nulls().to_list())
    in_op = (
        (pl.col("category") == "collective_timeout")
        | pl.col("kind").is_in([WATCHDOG_TIMEOUT, GLOO_TIMEOUT])
        | pl.col("monitored_barrier").fill_null(False)  # the barrier DETAIL runs before a collective
    )
    waiting = ev.filter(in_op & pl.col("rank").is_not_null() & ~pl.col("rank").is_in(list(in_store)))
    in_collective = set(waiting.get_column("rank").to_list())
    if not in_store or not in_collective:
        return None
    base = next((c for c in cands if c.category == "collective_mismatch"), None)
    first = sorted(in_store)[0]
    return Candidate(
        cause=base.cause if base is not None else "collective_mismatch",
        category=rules.category("collective_mismatch"),
        role="primary",
        weight=0.75,
        confidence=0.0,
        eids=list(
            dict.fromkeys([*(int(e) for e in lines.get_column("eid")), *(int(e) for e in waiting.sort("pos").get_column("eid").head(2))])
        ),
        rules=sorted({*lead.rules, *(base.rules if base is not None else [])}),
        ranks=sorted(in_store | in_collective),
        nodes=list(lead.nodes),
        summary=(
            f"Rank {_rank_list(sorted(in_store))} timed out in the store creating a process group while rank"
            f" {_rank_list(sorted(in_collective))} timed out in a collective: the ranks called different collectives"
        ),
        first=_rank_first(ev, first),
    )


def _mismatch_candidate(ev: pl.DataFrame, rules: RuleSet, odd: list[int], why: str) -> Candidate:
    """collective_mismatch from the ranks' own collective fingerprints, when no rule named it."""
    lines = ev.filter(pl.col("fingerprint").fill_null(False)).sort("pos")
    first_odd = lines.filter(pl.col("rank").is_in(odd))
    eids = [int(e) for e in pl.concat([first_odd, lines]).get_column("eid").unique(maintain_order=True).to_list()]
    return Candidate(
        cause="collective_mismatch",
        category=rules.category("collective_mismatch"),
        role="primary",
        weight=0.8,
        confidence=0.0,
        eids=eids,
        rules=[],
        ranks=sorted({int(r) for r in lines.get_column("rank").drop_nulls().to_list()}),
        nodes=sorted(set(lines.get_column("node").drop_nulls().unique().to_list())),
        summary=f"Ranks issued different collectives: {why}",
    )


def _simultaneous(ev: pl.DataFrame, lead: Candidate) -> int | None:
    """The lowest rank when several ranks failed the same way and nothing orders them.

    Line order between ranks is only the order in which their output reached
    the file; the timeline's times (own stamps, or the stamped line above)
    decide when they differ by more than a second.
    """
    mine = ev.filter(pl.col("eid").is_in(lead.eids) & pl.col("own"))
    own = mine.filter(pl.col("rank").is_not_null())
    per_rank = own.group_by("rank").agg(pl.col("t").min(), pl.col("pos").min().alias("p"))
    # "the same way" means the same words (numbers aside): a victim quoting the culprit's error differs
    said = own.filter(~pl.col("kind").is_in(EXIT_KINDS)).sort("pos").group_by("rank").agg(pl.col("wording").first())
    if said.get_column("wording").n_unique() > 1:
        return None
    if per_rank.height < 2:
        # errors raised before init_process_group carry no rank prefix: the same message from
        # several processes, next to exit records of several ranks, is still a simultaneous failure
        repeated = mine.filter(pl.col("rank").is_null()).group_by("message").len().get_column("len").max()
        if repeated is None or int(repeated) < 2:  # type: ignore[arg-type]
            return None
        exited = ev.filter(pl.col("kind").is_in(EXIT_KINDS) & pl.col("rank").is_not_null()).get_column("rank")
        ranks = set(exited.unique().to_list()) | set(per_rank.get_column("rank").unique().to_list())
        return min(ranks) if len(ranks) >= 2 else None
    stamped = per_rank.drop_nulls("t")
    if stamped.height == per_rank.height:
        first = stamped.get_column("t").min()
        window = stamped.filter(pl.col("t") <= first + timedelta(seconds=1))  # type: ignore[operator]
        return int(window.get_column("rank").min()) if window.height > 1 else None  # type: ignore[arg-type]
    if stamped.height == 0:
        return int(per_rank.get_column("rank").min())  # type: ignore[arg-type]
    return None


def _left_early(ev: pl.DataFrame, events: pl.DataFrame) -> list[int]:
    """Ranks that stopped without an error while the others failed on their absence.

    Seen only where the launcher's failure table covers the rank's node and
    neither lists the rank nor had to stop it: it exited with code 0 first.
    """
    cfe = events.filter(pl.col("kind") == CHILD_FAILED)
    if cfe.is_empty():
        return []
    listed = set(cfe.get_column("rank").drop_nulls().unique().to_list())
    closed = set(events.filter(pl.col("kind") == AGENT_TEARDOWN).get_column("pid").drop_nulls().unique().to_list())
    nodes = set(cfe.get_column("node").drop_nulls().unique().to_list())
    ranked = ev.filter(pl.col("rank").is_not_null() & pl.col("node").is_in(list(nodes)))
    quiet = ranked.group_by("rank").agg(
        (pl.col("own") | pl.col("role").is_in(["primary", "consequence"])).any().alias("_failed"),
        pl.col("pid").drop_nulls().first().alias("_pid"),
    )
    left = quiet.filter(~pl.col("_failed") & ~pl.col("rank").is_in(list(listed)) & ~pl.col("_pid").is_in(list(closed)).fill_null(False))
    return sorted(int(r) for r in left.get_column("rank").to_list())


def _hang_candidate(cands: list[Candidate], ev: pl.DataFrame, hang: hangs.Hang, rules: RuleSet, cause: str | None = None) -> Candidate:
    """collective_timeout (or ``cause``, e.g. a rendezvous timeout) naming the ranks that never
    arrived, or collective_mismatch for a desync."""
    cause = cause or ("collective_mismatch" if hang.mismatch and not hang.hung else "collective_timeout")
    base = next((c for c in cands if c.cause == cause), None) or next((c for c in cands if c.category == rules.category(cause)), None)
    hung_rows = ev.filter(pl.col("rank").is_in(hang.hung)).sort("pos")
    # per hung rank: the line that shows it behind (its last enqueued collective), else the last it printed
    behind = pl.col("says_enqueued")
    shown = hung_rows.group_by("rank", maintain_order=True).agg(
        pl.coalesce(pl.col("eid").filter(behind).first(), pl.col("eid").last()).alias("eid")
    )
    hung_eids = shown.get_column("eid").head(2).to_list()
    eids = list(dict.fromkeys([*(int(e) for e in hung_eids), *hang.eids, *(base.eids if base is not None else [])]))
    where = ev.filter(pl.col("rank").is_in(hang.hung)).get_column("node").drop_nulls().unique().sort().to_list()
    waiting_for = "the rendezvous" if rules.category(cause) == "rendezvous_timeout" else "a collective"
    what = f"{hang.op} (SeqNum {hang.seq})" if hang.op and hang.seq is not None else waiting_for
    if hang.hung:
        ranks_text = _rank_list(hang.hung)
        summary = (
            f"{what} timed out{f' on {len(hang.timed_out)} rank(s)' if hang.timed_out else ''} because rank {ranks_text}"
            f"{' (' + ', '.join(where) + ')' if where else ''} never reached it"
        )
        if hang.behind:
            lag = sorted(set(hang.behind.values()))
            summary += f": its last enqueued collective is SeqNum {', '.join(str(v) for v in lag)}"
        if hang.mismatch:
            summary += f"; the ranks also disagree on the collective ({hang.mismatch})"
        first_rank: int | None = hang.hung[0]
    else:
        summary = f"ranks issued different collectives: {hang.mismatch}"
        first_rank = hang.odd[0] if hang.odd else None
    summary = summary[0].upper() + summary[1:]
    row = ev.filter(pl.col("rank") == first_rank).sort("pos").tail(1) if first_rank is not None else ev.clear()
    when = _own_time(ev, hang.eids[0]) if hang.eids else None
    first = {"rank": first_rank, "node": row.get_column("node")[0] if row.height else None, "time": when}
    return Candidate(
        cause=base.cause if base is not None else cause,
        category=rules.category(base.cause if base is not None else cause),
        role="hang",
        weight=max(0.75, base.weight if base is not None else 0.0),
        confidence=0.0,
        eids=eids,
        rules=base.rules if base is not None else [],
        ranks=sorted(set(hang.hung) | set(hang.timed_out)),
        nodes=where,
        summary=summary,
        first=first,
    )
