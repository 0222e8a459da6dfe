"""Hangs: which collective stalled, whose watchdog fired, and who never arrived.

When a collective hangs, every rank that entered it times out and says so
(NCCL watchdog ``WorkNCCL(SeqNum=.., OpType=..)``, Gloo ``Timed out waiting``);
the rank that never entered it is the cause and is often the quietest one. It
shows as a rank whose last enqueued collective is older than the one the others
time out on (``last enqueued NCCL work: 166`` while others hang on 167), as a rank
that was alive (it printed, or the launcher had to kill it) but reported no
timeout, or as a rank told by the TCPStore that *another* rank timed out
(``Received a dump signal ... from rank N``). Ranks stuck on different
collectives (another SeqNum, another op or size at the same SeqNum) are a
desync, not a straggler.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import polars as pl

from logsleuth.events import GLOO_TIMEOUT, WATCHDOG_TIMEOUT

#: Gloo's own timeout (also inside a traceback's exception line) and monitored_barrier's.
#: Lines in which a rank says it gave up waiting for others (parse.fields reads what for).
IS_WAIT = pl.col("wait").is_not_null()
#: ... on the rendezvous store (the process group never formed), not on a collective.
IS_STORE_WAIT = pl.col("waited_ranks").is_not_null()


@dataclass
class Hang:
    """What the timeout lines say about one stalled collective."""

    pg: str | None
    seq: int | None
    op: str | None
    numel: int | None
    timeout_ms: int | None
    timed_out: list[int]  # ranks whose own timeout fired on it
    hung: list[int]  # ranks that never reached it
    first_fired: list[int]  # ranks whose watchdog fired first
    notified: list[int]  # ranks only told by another rank
    mismatch: str | None  # why this looks like a desync, if it does
    odd: list[int] = field(default_factory=list)  # in a desync, the ranks in the smaller group
    behind: dict[int, int] = field(default_factory=dict)  # rank -> last collective it enqueued
    last_seq: dict[int, int] = field(default_factory=dict)  # rank -> last SeqNum it reported
    eids: list[int] = field(default_factory=list)  # the timeout events, earliest first

    def to_dict(self) -> dict[str, object]:
        return {
            "pg": self.pg,
            "seq": self.seq,
            "op": self.op,
            "numel": self.numel,
            "timeout_ms": self.timeout_ms,
            "timed_out": list(self.timed_out),
            "hung": list(self.hung),
            "first_fired": list(self.first_fired),
            "notified": list(self.notified),
            "mismatch": self.mismatch,
            "odd": list(self.odd),
            "behind": {str(k): v for k, v in sorted(self.behind.items())},
        }


def analyze(
    ev: pl.DataFrame, alive: set[int], failing: set[int], stopped: set[int] | None = None, *, waiting: Collection[str] = ()
) -> Hang | None:
    """Read the timeout lines of ``ev`` (eid, pos, rank, kind, message, seq, op, numel, ...).

    ``alive``: ranks known to have run (they printed, or were killed); ``failing``:
    ranks with a failure of their own, which are never called hung; ``stopped``:
    ranks the launcher had to kill at the end (still running: a sign of a hang); ``waiting``:
    the categories whose lines say "I waited for the others and gave up" (``waits`` in
    rules/causes.toml: the rank that never came is the culprit).

    Process groups are told apart by their ``[PG n ...]`` tag; when some lines
    lack it (older PyTorch), all lines are read as one group. When the silent
    ranks outnumber the ranks that timed out, the logs are more likely
    incomplete than the job mostly hung: only silent ranks the launcher had to
    stop, or on the node of a rank shown behind, are called hung then.
    """
    ranked = ev.filter(pl.col("rank").is_not_null())
    wd = ranked.filter(pl.col("kind") == WATCHDOG_TIMEOUT)
    # ranks that waited for others and gave up: collective timeouts, and store/rendezvous waits
    timeout_hit = pl.col("category").is_in(sorted(waiting)).fill_null(False) if "category" in ev.columns else pl.lit(False)
    gloo = ranked.filter(
        (pl.col("kind") != WATCHDOG_TIMEOUT)
        & ((pl.col("kind") == GLOO_TIMEOUT) | (pl.col("wait") == "collective").fill_null(False) | timeout_hit)
    )
    status = ranked.filter(pl.col("watchdog_at").is_not_null()).select(
        "rank", "pg", pl.col("watchdog_at").alias("at"), pl.col("last_enqueued").alias("enq")
    )
    dump = ranked.filter(pl.col("dump_self").is_not_null()).select(
        "rank", "pos", "pg", pl.col("dump_self").alias("self"), pl.col("dump_from").alias("from"), pl.col("last_enqueued").alias("enq")
    )
    named = _named_missing(ev)
    if wd.is_empty() and gloo.is_empty() and status.is_empty() and dump.is_empty() and not named:
        return None
    # the watchdog line itself may lack the tag its rank's status line for the same SeqNum has
    tags = status.drop_nulls("pg").select("rank", pl.col("at").alias("seq"), pl.col("pg").alias("_tag")).unique(["rank", "seq"])
    wd = wd.join(tags, on=["rank", "seq"], how="left").with_columns(pl.coalesce("pg", "_tag").alias("pg")).drop("_tag")
    tagged = all(f.get_column("pg").null_count() == 0 for f in (wd, status, dump))
    if not tagged:
        wd, status, dump = (f.with_columns(pl.lit("*").alias("pg")) for f in (wd, status, dump))
    pg: str | None = None
    seq: int | None = None
    op: str | None = None
    numel: int | None = None
    timeout: int | None = None
    mismatch: str | None = None
    odd: list[int] = []
    seen = pl.concat([wd.select("pg", pl.col("seq").alias("at"), "rank"), status.select("pg", "at", "rank")]).drop_nulls("at")
    if not seen.is_empty():
        top = seen.group_by("pg", "at").agg(pl.col("rank").n_unique().alias("n")).sort(["n", "pg", "at"], descending=[True, False, False])
        pg, seq = top.get_column("pg")[0], int(top.get_column("at")[0])
        mismatch, odd = _desync(wd.filter(pl.col("pg") == pg), seen.filter(pl.col("pg") == pg), seq)
    here = wd.filter((pl.col("pg") == pg) & (pl.col("seq") == seq)) if seq is not None else wd
    if not here.is_empty():
        op = _mode(here, "op")
        numel = _int(_mode(here, "numel"))
        timeout = _int(_mode(here, "timeout_ms"))
    in_pg = seen.filter(pl.col("pg") == pg) if pg is not None else seen
    timed_out = set(in_pg.get_column("rank").unique().to_list()) | set(gloo.get_column("rank").unique().to_list())
    behind: dict[int, int] = {}
    reached: set[int] = set()
    if seq is not None:
        lag = pl.concat([status.select("rank", "pg", "enq"), dump.select("rank", "pg", "enq")]).filter(pl.col("pg") == pg)
        for rank, enq in lag.filter(pl.col("enq") < seq).group_by("rank").agg(pl.col("enq").max()).iter_rows():
            behind[int(rank)] = int(enq)
        reached = set(lag.filter(pl.col("enq") >= seq).get_column("rank").to_list()) - set(behind)
    quiet = alive - timed_out - failing - reached if timed_out else set()
    if len(quiet) > len(timed_out):
        behind_nodes = set(ranked.filter(pl.col("rank").is_in(list(behind))).get_column("node").drop_nulls().unique().to_list())
        on_nodes = set(ranked.filter(pl.col("node").is_in(list(behind_nodes))).get_column("rank").unique().to_list())
        quiet &= (stopped or set()) | on_nodes
    hung = sorted((set(behind) | quiet | named) - failing - (timed_out - named))
    fired = set(dump.filter(pl.col("self")).get_column("rank").to_list())
    fired |= set(ranked.filter(pl.col("dump_first").fill_null(False)).get_column("rank").to_list())
    fired |= {int(r) for r in dump.get_column("from").drop_nulls().to_list() if r >= 0}
    notified = sorted(set(dump.filter(~pl.col("self")).get_column("rank").to_list()) - fired)
    timeouts = pl.concat([here.select("eid", "pos", "rank"), gloo.select("eid", "pos", "rank")]).sort("pos")
    if not fired and not timeouts.is_empty():
        fired = {int(timeouts.get_column("rank")[0])}
    last_seq = {int(r): int(s) for r, s in wd.group_by("rank").agg(pl.col("seq").max()).drop_nulls().iter_rows()}
    return Hang(
        pg=pg if pg != "*" else None,
        seq=seq,
        op=op,
        numel=numel,
        timeout_ms=timeout,
        timed_out=sorted(timed_out),
        hung=hung,
        first_fired=sorted(fired),
        notified=notified,
        mismatch=mismatch,
        odd=odd,
        behind=behind,
        last_seq=last_seq,
        eids=timeouts.get_column("eid").cast(pl.Int64).to_list(),
    )


def _named_missing(ev: pl.DataFrame) -> set[int]:
    """Ranks other ranks name as missing: monitored_barrier's report, and the per-rank store
    keys a timed-out wait was still waiting for (agreed on by every waiter that lists keys)."""
    named = {int(r) for r in ev.get_column("missing_rank").drop_nulls().to_list()}
    per_wait = ev.get_column("waited_ranks").drop_nulls()
    if per_wait.len():
        sets = [frozenset(int(x) for x in keys.split(",") if x) for keys in per_wait.to_list()]  # one per wait line: few
        if sets and all(sets) and len(set(sets)) == 1:
            named |= set(sets[0])
    return named


def _mode(df: pl.DataFrame, col: str) -> str | None:
    """The most frequent value of a column, as text (None when the column is empty)."""
    values = df.get_column(col).drop_nulls()
    return str(values.mode().sort()[0]) if values.len() else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _desync(wd: pl.DataFrame, seen: pl.DataFrame, seq: int) -> tuple[str | None, list[int]]:
    """Why the timed-out ranks disagree on the collective (None when they agree), and the odd ranks."""
    seqs = seen.group_by("at").agg(pl.col("rank").unique().sort()).sort("at")
    # a rank reporting several SeqNums mixes process groups (old logs have no PG tag): no verdict on SeqNums then
    one_each = seen.group_by("rank").agg(pl.col("at").n_unique().alias("n")).get_column("n").max() == 1
    ats = seqs.get_column("at").to_list()
    # SeqNum N on some ranks, N+1 on the others: those completed N, which needs every rank (or, for a
    # rooted broadcast, only the root's send): the N ranks are stuck finishing it, not in another collective
    behind_by_one = len(ats) == 2 and ats[1] == ats[0] + 1
    if seqs.height > 1 and one_each and not behind_by_one:
        parts = [f"SeqNum {at} on rank(s) {_short(r)}" for at, r in seqs.iter_rows()]
        return "ranks time out on different collectives: " + "; ".join(parts), _smallest(seqs.get_column("rank").to_list())
    same = wd.filter(pl.col("seq") == seq)
    for col, what in (("op", "operations"), ("numel", "sizes")):
        groups = same.drop_nulls(col).group_by(col).agg(pl.col("rank").unique().sort()).sort(col)
        if groups.height > 1:
            parts = [f"{v} on rank(s) {_short(r)}" for v, r in groups.iter_rows()]
            return f"ranks run different {what} at SeqNum {seq}: " + "; ".join(parts), _smallest(groups.get_column("rank").to_list())
    return None, []


def _smallest(groups: list[list[int]]) -> list[int]:
    """The smallest group of ranks (the odd ones out); ties go to the group with the highest ranks."""
    smallest: list[int] = min(groups, key=lambda g: (len(g), -max(g)))
    return sorted(smallest)


def _short(ranks: list[int], limit: int = 8) -> str:
    text = ",".join(str(r) for r in ranks[:limit])
    return text + (f",… ({len(ranks)})" if len(ranks) > limit else "")


def fingerprints(ev: pl.DataFrame) -> tuple[list[int], str] | None:
    """With TORCH_DISTRIBUTED_DEBUG=DETAIL every rank reports its own collective and a peer's
    (``Rank 2 is running collective: CollectiveFingerPrint(...), but Rank 3 is running ...``).
    Ranks grouped by fingerprint: the smaller group is the odd one out. None without such lines."""
    said = pl.concat(
        [
            ev.select(pl.col("fp_rank").alias("who"), "fp"),
            ev.select(pl.col("fp_peer_rank").alias("who"), pl.col("fp_peer").alias("fp")),
        ]
    ).drop_nulls()
    per_rank = said.with_columns(pl.col("who").cast(pl.Int64)).group_by("who").agg(pl.col("fp").mode().sort().first())
    groups = per_rank.group_by("fp").agg(pl.col("who").sort().alias("ranks"))
    if groups.height < 2:
        return None
    odd = _smallest(groups.get_column("ranks").to_list())
    return odd, f"rank(s) {_short(odd)} ran a different collective from the other {per_rank.height - len(odd)} rank(s)"
