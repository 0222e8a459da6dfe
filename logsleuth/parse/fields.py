"""Fields any event's text may carry, whatever its kind, parsed once for the stages after parsing.

Runs last, on the finished rows (folded blocks included), over the text the table keeps as
``message``; each group of fields is looked for only in rows holding one of its literals.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from .common import field, integer, on_rows_with

#: The CUDA driver version a process found (NCCL INFO ``cudaDriverVersion 12020``).
_DRIVER = r"cudaDriverVersion (\d+)"
#: The process group a ProcessGroupNCCL line names: ``[PG 0 Rank 3]``, ``[PG ID 1 PG GUID 1 Rank 3]``.
_PG = r"\[PG (?:ID )?(\d+)"
#: The watchdog's status line: the SeqNum it timed out at and how far its rank got.
_STATUS = (
    r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work):? (\d+),? (?:PG status: )?"
    r"last enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)"
)
#: A rank told to dump its state because a collective timed out, here or on another rank.
_DUMP = r"Received a dump signal due to a collective timeout from (this local rank|\s*rank (-?\d+))"
_DUMP_STATUS = r"Last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
_FIRST = "First PG on this rank to signal dumping"
#: A rank that gave up waiting for the others: Gloo's timeout (also inside a traceback's exception
#: line) and monitored_barrier's (collective); a rendezvous store wait (store); NCCL's watchdog.
_GLOO = r"Timed out waiting \d+ms for (?:recv|send) operation|failed to pass monitoredBarrier|timed out in monitoredBarrier"
#: A store wait that timed out lists the keys it waited for; per-rank keys end in the rank
#: (gloo's full-mesh rendezvous: ``keys: /default_pg/0//cpu//0/3``).
_STORE_WAIT = r"wait timeout after \d+ ?ms, keys: (.+)$"
_WATCHDOG = "Watchdog caught collective operation timeout"
#: Gloo's monitored_barrier names the rank that did not arrive.
_MISSED_BARRIER = r"Rank (\d+) failed to pass monitoredBarrier"
#: What the rendezvous barrier says about its members: the TCPStore barrier's ``world_size=4,
#: worker_count=5`` (or ``num_workers_joined``), c10d's ``3/4 clients joined``.
_BARRIER = r"world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+)"
_CLIENTS = r"(\d+)/(\d+) (?:clients|workers) joined"


def _driver(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(field(pl.col("msg"), _DRIVER, 1).alias("driver_version"))


def _pg(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(field(pl.col("msg"), _PG, 1).alias("pg"))


def _progress(df: pl.DataFrame) -> pl.DataFrame:
    """The watchdog's status line and a dump's: SeqNum timed out at, last enqueued and completed."""
    msg = pl.col("msg")
    return df.with_columns(
        integer(msg, _STATUS, 1).alias("watchdog_at"),
        pl.coalesce(integer(msg, _STATUS, 2), integer(msg, _DUMP_STATUS, 1)).alias("last_enqueued"),
        pl.coalesce(integer(msg, _STATUS, 3), integer(msg, _DUMP_STATUS, 2)).alias("last_completed"),
    )


def _dump(df: pl.DataFrame) -> pl.DataFrame:
    """Where a dump signal came from: this rank's own watchdog (dump_self) or another rank's (dump_from)."""
    msg = pl.col("msg")
    origin = field(msg, _DUMP, 1)
    return df.with_columns(
        pl.when(origin.is_not_null()).then(origin == "this local rank").alias("dump_self"),
        integer(msg, _DUMP, 2).alias("dump_from"),
        pl.when(msg.str.contains(_FIRST, literal=True)).then(pl.lit(True)).alias("dump_first"),
    )


def _wait(df: pl.DataFrame) -> pl.DataFrame:
    """What a rank gave up waiting for, the rank a monitored barrier missed, the ranks a store wait waited for."""
    msg = pl.col("msg")
    keys = field(msg, _STORE_WAIT, 1)
    return df.with_columns(
        pl.when(msg.str.contains(_GLOO))
        .then(pl.lit("collective"))
        .when(keys.is_not_null())
        .then(pl.lit("store"))
        .when(msg.str.contains(_WATCHDOG, literal=True))
        .then(pl.lit("watchdog"))
        .alias("wait"),
        pl.when(msg.str.contains("monitoredBarrier", literal=True)).then(pl.lit(True)).alias("monitored_barrier"),
        integer(msg, _MISSED_BARRIER, 1).alias("missing_rank"),
        keys.str.split(", ")
        .list.eval(pl.element().str.extract(r"/(\d+)$", 1).cast(pl.Int64).drop_nulls().unique().sort().cast(pl.String))
        .list.join(",")
        .alias("waited_ranks"),
    )


def _barrier(df: pl.DataFrame) -> pl.DataFrame:
    """Members of a rendezvous barrier: how many the world has, how many joined."""
    msg = pl.col("msg")
    return df.with_columns(
        pl.coalesce(integer(msg, _BARRIER, 1), integer(msg, _CLIENTS, 2)).alias("barrier_world"),
        pl.coalesce(integer(msg, _BARRIER, 2), integer(msg, _CLIENTS, 1)).alias("barrier_joined"),
    )


#: (literals one of which the text holds, the fields read from such rows)
_GROUPS: tuple[tuple[tuple[str, ...], Callable[[pl.DataFrame], pl.DataFrame]], ...] = (
    (("cudaDriverVersion ",), _driver),
    (("[PG ",), _pg),
    (("ast enqueued",), _progress),
    (("Received a dump signal", _FIRST), _dump),
    (("Timed out waiting", "monitoredBarrier", "wait timeout after", _WATCHDOG), _wait),
    (("world_size=", " joined"), _barrier),
)


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Fill the text fields of every row (rows without any of a group's literals are left alone)."""
    for literals, read in _GROUPS:
        df = on_rows_with(df, literals, read)
    return df
