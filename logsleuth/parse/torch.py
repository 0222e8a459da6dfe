"""PyTorch and torchrun lines: watchdog timeouts, agent exits, C++ terminate blocks and
c10 exception stack dumps, and the torchrun ChildFailedError failure table.

Strings checked in pytorch/pytorch (ProcessGroupNCCL.cpp, elastic/multiprocessing/
api.py and errors/__init__.py) and in the 2.13/2.14 wheels.
"""

from __future__ import annotations

import polars as pl

from logsleuth import events

from .common import Example, claim, field, integer, on_rows_with, short_host, signal_name, streams_with, with_columns_of

_WORK = r"Work(?:NCCL|Gloo|UCC)?\("
_RANK_HINT = r"\[(?:PG [^\]]*?)?Rank (\d+)\]|communicator was aborted on rank (\d+)"
_AGENT_FAILED = r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\) of binary: (.*)$"
_CLOSING = r"Sending process (\d+) closing signal (SIG\w+)"
#: DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler) and torch.distributed.launch before
#: torchrun (torch <= 1.8 launch.py) kill every child when one exits non-zero or they are signalled
_KILLING = r"^(?:\[[^\]]*\] )*Killing subprocess \d+\s*$"
_DEATH = r"Received (SIG\w+|\d+) death signal, shutting down workers"
_TERMINATE = r"terminate called after throwing an instance of '([^']+)'"
_WHAT = r"^\s*what\(\):\s+(.*)$"
_GLOO_TIMEOUT = r"Timed out waiting (\d+)ms for (recv|send) operation to complete"
#: c10::Error's stack dump (c10/util/Exception.cpp, Logging.cpp; every torch since 1.x): the function,
#: file and line where a C++ exception was raised, then ``frame #N: <symbol> + 0x.. (0x.. in <lib>)``
#: lines whose frame #0 is the exception's constructor (``c10::Error::Error(...)``).
_RAISED_FROM = r"^Exception raised from (\S+) at (\S+:\d+) \(most recent call first\):"
_THROW_FRAME = r"^frame #0: (c10d?::(?:\w+::)*\w*(?:Error|Exception)::\w*(?:Error|Exception))\("
#: Field lines of the ChildFailedError table (errors/__init__.py _FAILURE_FORMAT_TEMPLATE).
_CFE_FIELD = r"^\s{1,4}(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$"
_CFE_SECTION = r"^\s*(Root Cause \(first observed failure\)|Failures):\s*$"


#: Literals one of which is in every line this module claims or folds: the ingest prefilter keeps the
#: lines that hold one.
TRIGGERS = (
    "GLOBAL_RANK",  # process-group membership lines: Lightning's
    "Discovered ",  # ... DeepSpeed's
    "Rank of current process",  # ... detectron2's
    "init",  # ... and a script's own "Distributed init: rank 0/2"
    "Init",
    "what():",
    "Watchdog caught",
    "Timeout(ms)",  # a watchdog timeout's Work(...) pasted without its first words
    "Timed out waiting",
    "exitcode",
    "closing signal",
    "Killing subprocess",
    "death signal",
    "terminate called",
    "Exception raised from",
    "frame #0: c10",
    # torchrun's ChildFailedError table (fold_failure_tables)
    "Failures:",
    "Root Cause",
    "time      :",
    "host      :",
    "rank      :",
    "error_file:",
    "traceback :",
)
#: What annotate() looks at: rows with one of these literals (cheaper than its patterns on every row).
_LOOK_AT = (*TRIGGERS, "what()", "Work")

KINDS = (
    events.DIST_MEMBER,
    events.WATCHDOG_TIMEOUT,
    events.GLOO_TIMEOUT,
    events.AGENT_WORKER_FAILED,
    events.AGENT_TEARDOWN,
    events.AGENT_SIGNAL,
    events.CPP_TERMINATE,
    events.CPP_WHAT,
    events.CPP_STACK,
    events.CHILD_FAILED,
)

EXAMPLES: tuple[Example, ...] = (
    ("initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/8", {"kind": events.DIST_MEMBER, "rank": 2, "nranks": 8}),
    ("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/4", {"kind": events.DIST_MEMBER, "rank": 1, "nranks": 4}),
    (
        "[2024-01-01 00:00:00,000] [INFO] [comm.py:637:mpi_discovery] Discovered MPI settings of world_rank=3, local_rank=3, world_size=4",
        {"kind": events.DIST_MEMBER, "rank": 3, "nranks": 4},
    ),
    ("Rank of current process: 5. World size: 8", {"kind": events.DIST_MEMBER, "rank": 5, "nranks": 8}),
    ("Distributed init: rank 0/2", {"kind": events.DIST_MEMBER, "rank": 0, "nranks": 2}),
    (
        "[rank0]:[E1122 04:47:08.123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.",
        {
            "kind": events.WATCHDOG_TIMEOUT,
            "rank": 0,
            "seq": 5,
            "op": "ALLREDUCE",
            "timeout_ms": 600000,
            "elapsed_ms": 600021,
            "level": "error",
        },
    ),
    (
        "WorkNCCL(SeqNum=9, OpType=BROADCAST, NumelIn=4, NumelOut=4, Timeout(ms)=1800000) ran for 1800427 milliseconds before timing out.",
        {"kind": events.WATCHDOG_TIMEOUT, "seq": 9, "op": "BROADCAST"},
    ),
    (
        "[E socket.cpp:922] Timed out waiting 30000ms for send operation to complete",
        {"kind": events.GLOO_TIMEOUT, "timeout_ms": 30000, "op": "send"},
    ),
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 2345) of binary: /usr/bin/python3",
        {"kind": events.AGENT_WORKER_FAILED, "exit_code": -9, "signal": "SIGKILL", "local_rank": 1, "pid": 2345, "source": "launcher"},
    ),
    (
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2346 closing signal SIGTERM",
        {"kind": events.AGENT_TEARDOWN, "pid": 2346, "signal": "SIGTERM"},
    ),
    (
        "[2023-09-10 11:45:59,501] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 6294",
        {"kind": events.AGENT_TEARDOWN, "source": "launcher", "level": "warning"},
    ),
    ("Killing subprocess 2701979", {"kind": events.AGENT_TEARDOWN, "source": "launcher"}),
    (
        "WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers",
        {"kind": events.AGENT_SIGNAL, "signal": "SIGTERM"},
    ),
    (
        "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG 0 Rank 1] Process group watchdog thread terminated with exception",
        {"kind": events.CPP_WHAT, "exc_type": "c10::DistBackendError", "rank": 1, "level": "fatal"},
    ),
    (
        "terminate called after throwing an instance of 'std::runtime_error'",
        {"kind": events.CPP_TERMINATE, "exc_type": "std::runtime_error", "level": "fatal"},
    ),
    (
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:565 (most recent call first):",
        {"kind": events.CPP_STACK, "detail": "checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:565"},
    ),
    (
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f2c in /usr/lib/libc10.so)",
        {"kind": events.CPP_STACK, "detail": "c10::Error::Error"},
    ),
    (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-11-22_04:47:08\n"
        "  host      : node01.cluster.local\n"
        "  rank      : 2 (local_rank: 2)\n"
        "  exitcode  : 1 (pid: 4242)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================",
        {"kind": events.CHILD_FAILED, "rank": 2, "local_rank": 2, "node": "node01", "pid": 4242, "exit_code": 1, "detail": "root_cause"},
    ),
)
ENRICH_TRIGGERS = ("Work", "Rank ", "on rank ")


def enrich(df: pl.DataFrame) -> pl.DataFrame:
    """Fill the fields an event's text carries whatever its kind (rows with a trigger only)."""
    return on_rows_with(df, ENRICH_TRIGGERS, _enrich)


def _enrich(df: pl.DataFrame) -> pl.DataFrame:
    """Fields any event's text may carry, whatever its kind: the rank named in
    ``[PG ... Rank N]``, and the Work(...) description of a collective."""
    msg = pl.col("msg")
    rank_hint = pl.coalesce(integer(msg, _RANK_HINT, 1), integer(msg, _RANK_HINT, 2)).cast(pl.Int32)
    work = msg.str.contains(_WORK)

    def fill(col: str, expr: pl.Expr) -> pl.Expr:
        return pl.coalesce(pl.col(col), pl.when(work).then(expr)).alias(col)

    return with_columns_of(df, "seq", "op", "numel", "timeout_ms", "elapsed_ms").with_columns(
        pl.coalesce(pl.col("rank"), rank_hint).alias("rank"),
        fill("seq", integer(msg, r"SeqNum=(\d+)")),
        # a line cut short ("OpType=ALLR") names no operation
        fill("op", field(msg, r"OpType=(\w+)[,)]")),
        fill("numel", integer(msg, r"NumelIn=(\d+)")),
        fill("timeout_ms", integer(msg, r"Timeout\(ms\)=(\d+)")),
        fill("elapsed_ms", integer(msg, r"ran for (\d+) milliseconds")),
    )


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim single-line PyTorch and torchrun events (rows with a trigger only)."""
    return on_rows_with(df, _LOOK_AT, _annotate)


#: Lines in which a process says which global rank of how large a world it is, once as it joins
#: the group: (pattern, group of the rank, group of the world size).
_DECLARATIONS = (
    # Lightning, every version: "initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/8" (1.x),
    # "Initializing distributed: ..." (1.6+), "initializing deepspeed distributed: ..." (its DeepSpeed strategy)
    (r"(?i)initializing (?:ddp|(?:deepspeed )?distributed): GLOBAL_RANK: (\d+), MEMBER: (\d+)/(\d+)", 1, 3),
    # DeepSpeed's environment discovery (deepspeed/comm/comm.py) under mpirun, AzureML, SageMaker
    (r"Discovered (?:MPI|AzureML|AWS SageMaker) settings of world_rank=(\d+), local_rank=\d+, world_size=(\d+)", 1, 2),
    # detectron2's default_setup
    (r"Rank of current process: (\d+)\. World size: (\d+)", 1, 2),
    # a training script announcing its own init: "Distributed init: rank 0/2", "initialized rank 3 of 8",
    # "init_process_group: rank=0, world_size=2"
    (r"(?i)\binit\w*\b[^\d\n]{0,30}?\brank\W{1,3}(\d+)\s*(?:/|of)\s*(\d+)\b", 1, 2),
    (r"(?i)\binit\w*\b[^\d\n]{0,30}?\brank\W{1,3}(\d+),?\s+world[_ ]size\W{1,3}(\d+)\b", 1, 2),
)
#: Any of them (an inline ``(?i)`` holds to the end of its group).
_MEMBER = "|".join(f"(?:{p})" for p, _, _ in _DECLARATIONS)


def _declared(msg: pl.Expr, which: int) -> pl.Expr:
    """The declared rank (``which`` = 1) or world size (2) of a membership line."""
    return pl.coalesce(*(integer(msg, p, g if which == 1 else w) for p, g, w in _DECLARATIONS))


def _annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim single-line PyTorch and torchrun events."""
    msg = pl.col("msg")
    df = claim(
        df,
        msg.str.contains(_MEMBER),
        {
            "kind": pl.lit(events.DIST_MEMBER),
            "source": pl.lit("torch"),
            "level": pl.lit("info"),
            "rank": _declared(msg, 1).cast(pl.Int32),
            "nranks": _declared(msg, 2).cast(pl.Int32),
        },
    )
    is_what = msg.str.contains(_WHAT)
    df = df.with_columns(pl.when(is_what).then(field(msg, _WHAT)).otherwise(msg).alias("msg"), is_what.alias("_what"))
    df = claim(
        df,
        # "Watchdog caught collective operation timeout" (the only wording; a paste may cut it short)
        msg.str.contains("Watchdog caught collective", literal=True)
        | (msg.str.contains(_WORK) & msg.str.contains(r"ran for \d+ milliseconds")),
        {"kind": pl.lit(events.WATCHDOG_TIMEOUT), "source": pl.lit("torch"), "level": pl.lit("error")},
    )
    df = claim(
        df,
        msg.str.contains(_GLOO_TIMEOUT),
        {
            "kind": pl.lit(events.GLOO_TIMEOUT),
            "source": pl.lit("torch"),
            "level": pl.lit("error"),
            "timeout_ms": integer(msg, _GLOO_TIMEOUT),
            "op": field(msg, _GLOO_TIMEOUT, 2),
        },
    )
    code = field(msg, _AGENT_FAILED, 1)
    df = claim(
        df,
        msg.str.contains(_AGENT_FAILED),
        {
            "kind": pl.lit(events.AGENT_WORKER_FAILED),
            "source": pl.lit("launcher"),
            "level": pl.lit("error"),
            "exit_code": code.cast(pl.Int32, strict=False),
            "signal": pl.when(code.str.starts_with("-")).then(signal_name(code)),
            "local_rank": integer(msg, _AGENT_FAILED, 2).cast(pl.Int32),
            "pid": integer(msg, _AGENT_FAILED, 3),
        },
    )
    df = claim(
        df,
        msg.str.contains(_CLOSING),
        {
            "kind": pl.lit(events.AGENT_TEARDOWN),
            "source": pl.lit("launcher"),
            "level": pl.lit("warning"),
            "pid": integer(msg, _CLOSING, 1),
            "signal": field(msg, _CLOSING, 2),
        },
    )
    # every child is killed, the one that failed too: the pid does not mark a victim, so none is kept
    df = claim(
        df,
        msg.str.contains(_KILLING),
        {"kind": pl.lit(events.AGENT_TEARDOWN), "source": pl.lit("launcher"), "level": pl.lit("warning")},
    )
    death = field(msg, _DEATH, 1)
    df = claim(
        df,
        msg.str.contains(_DEATH),
        {
            "kind": pl.lit(events.AGENT_SIGNAL),
            "source": pl.lit("launcher"),
            "level": pl.lit("error"),
            "signal": pl.when(death.str.starts_with("SIG")).then(death).otherwise(signal_name(death)),
        },
    )
    df = claim(
        df,
        msg.str.contains(_TERMINATE),
        {"kind": pl.lit(events.CPP_TERMINATE), "source": pl.lit("torch"), "level": pl.lit("fatal"), "exc_type": field(msg, _TERMINATE)},
    )
    df = claim(df, pl.col("_what"), {"kind": pl.lit(events.CPP_WHAT), "source": pl.lit("torch"), "level": pl.lit("fatal")})
    df = claim(
        df,
        msg.str.contains(_RAISED_FROM) | msg.str.contains(_THROW_FRAME),
        {
            "kind": pl.lit(events.CPP_STACK),
            "source": pl.lit("torch"),
            "level": pl.lit("error"),
            "detail": pl.coalesce(
                pl.concat_str([field(msg, _RAISED_FROM, 1), pl.lit(" at "), field(msg, _RAISED_FROM, 2)]), field(msg, _THROW_FRAME, 1)
            ),
        },
    )
    return _attach_what(df).drop("_what")


def _attach_what(df: pl.DataFrame) -> pl.DataFrame:
    """Give a ``what():`` line the exception type of the ``terminate called`` line before it."""
    prev_kind = pl.col("kind").shift(1).over("stream", order_by="line")
    prev_type = pl.col("exc_type").shift(1).over("stream", order_by="line")
    return with_columns_of(df, "exc_type").with_columns(
        pl.when(pl.col("_what") & (prev_kind == events.CPP_TERMINATE)).then(prev_type).otherwise(pl.col("exc_type")).alias("exc_type")
    )


def fold_failure_tables(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fold the failure tables of the streams that print one (see _fold_tables)."""
    inside, others = streams_with(df, _CFE_SECTION)
    if inside.is_empty():
        return df, df.clear()
    rest, folded = _fold_tables(inside)
    return pl.concat([rest, others], how="diagonal_relaxed"), folded


def _fold_tables(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fold torchrun's ChildFailedError tables into one event per failed rank.

    Returns (the table without the folded lines, the folded events). Entries
    start at their ``time`` field; ``[idx]:`` is an enumeration, not a rank, and
    the ``Root Cause`` entry is torchrun's guess, kept in ``detail``.
    """
    msg = pl.col("msg")
    # rows that continue a table: fields, traceback text, "[idx]:" and "----" lines
    continues = msg.str.contains(r"^\s") | msg.str.contains(r"^\[\d+\]:\s*$|^-{10,}\s*$|^\s*<NO_OTHER_FAILURES>")
    section = msg.str.extract(_CFE_SECTION, 1)
    key = msg.str.extract(_CFE_FIELD, 1)
    t = df.sort("stream", "line").with_columns(
        section.alias("_sec"),
        key.alias("_key"),
        msg.str.extract(_CFE_FIELD, 2).str.strip_chars().alias("_val"),
        (~continues | section.is_not_null()).cum_sum().over("stream").alias("_seg"),
    )
    t = t.with_columns(
        pl.col("_sec").first().over("stream", "_seg").alias("_segsec"),
        (pl.col("_key") == "time").fill_null(False).cum_sum().over("stream", "_seg").alias("_entry"),
    )
    # every row of a segment that starts at a section header belongs to the table
    t = t.with_columns(pl.col("_segsec").is_not_null().alias("_member"))
    rows = t.filter(pl.col("_member") & (pl.col("_entry") > 0))
    if rows.is_empty():
        return df, df.clear()

    def val(key: str) -> pl.Expr:
        return pl.col("_val").filter(pl.col("_key") == key).first()

    exc = r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout)):\s?(.*)$"
    entries = rows.group_by("stream", "_seg", "_entry", maintain_order=True).agg(
        pl.col("file").first(),
        pl.col("line").filter(pl.col("_key") == "rank").first().alias("line"),
        pl.col("line").first().alias("block_start"),
        pl.col("raw").filter(pl.col("_key") == "rank").first().alias("raw"),
        pl.col("task").first(),
        pl.col("_segsec").first().alias("section"),
        val("time").alias("_time"),
        val("host").alias("_host"),
        val("rank").alias("_rank"),
        val("exitcode").alias("_exit"),
        val("error_file").alias("_efile"),
        val("traceback").alias("_tb"),
        pl.col("msg").filter(pl.col("msg").str.contains(exc)).last().alias("_exc"),
    )
    code = pl.col("_exit").str.extract(r"^(-?\d+)", 1)
    sig = pl.coalesce(
        pl.col("_exit").str.extract(r"\((SIG\w+)\)", 1),
        pl.col("_tb").str.extract(r"\((SIG\w+)\) received", 1),
        pl.when(code.str.starts_with("-")).then(signal_name(code)),
    )
    detail = pl.when(pl.col("section").str.starts_with("Root")).then(pl.lit("root_cause")).otherwise(pl.lit("failure"))
    folded = entries.select(
        "file",
        pl.coalesce("line", "block_start").alias("line"),
        "block_start",
        pl.coalesce("raw", pl.lit("")).alias("raw"),
        "task",
        "stream",
        pl.col("_rank").str.extract(r"^(\d+)", 1).cast(pl.Int32, strict=False).alias("rank"),
        pl.col("_rank").str.extract(r"local_rank: (\d+)", 1).cast(pl.Int32, strict=False).alias("local_rank"),
        short_host(pl.col("_host")).alias("node"),
        pl.col("_exit").str.extract(r"pid: (\d+)", 1).cast(pl.Int64, strict=False).alias("pid"),
        pl.col("_time").str.to_datetime("%Y-%m-%d_%H:%M:%S", strict=False, time_unit="us").alias("time"),
        code.cast(pl.Int32, strict=False).alias("exit_code"),
        sig.alias("signal"),
        pl.col("_exc").str.extract(exc, 1).alias("exc_type"),
        detail.alias("detail"),
        pl.concat_str(
            [
                pl.lit("rank "),
                pl.col("_rank").fill_null("?"),
                pl.lit(" on "),
                pl.col("_host").fill_null("?"),
                pl.lit(" failed: exitcode "),
                pl.col("_exit").fill_null("?"),
                pl.when(pl.col("_exc").is_not_null())
                .then(pl.concat_str([pl.lit("; "), pl.col("_exc").str.strip_chars()]))
                .otherwise(pl.concat_str([pl.lit("; "), pl.col("_tb")]))
                .fill_null(""),
            ]
        ).alias("msg"),
        pl.lit(events.CHILD_FAILED).alias("kind"),
        pl.lit("launcher").alias("source"),
        pl.lit("error").alias("level"),
    )
    rest = t.filter(~pl.col("_member")).drop("_sec", "_key", "_val", "_seg", "_segsec", "_entry", "_member")
    return rest, folded
