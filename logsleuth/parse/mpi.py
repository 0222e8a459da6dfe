"""Open MPI's signal handler: the report a process prints when it dies of a signal.

Open MPI installs its handler (opal/util/stacktrace.c, every release since 1.x) for the
signals of the MCA parameter ``opal_signal`` (default SIGABRT, SIGBUS, SIGFPE, SIGSEGV) in
every MPI process, so jobs started with mpirun (Horovod, nccl-tests, MPI-launched PyTorch)
report a crash as a block of lines, each after ``[<host>:<pid>] `` (``HOSTFORMAT``,
the host cut at its first dot, the pid zero-padded to at least five digits)::

    [node01:19474] *** Process received signal ***
    [node01:19474] Signal: Segmentation fault (11)
    [node01:19474] Signal code: Address not mapped (1)
    [node01:19474] Failing at address: (nil)
    [node01:19474] [ 0] /lib/x86_64-linux-gnu/libpthread.so.0(+0x11390)[0x7f13ce25a390]
    [node01:19474] *** End of error message ***

The handler runs once per process (it is installed one-shot), so each process's lines fold
into one ``signal_report`` event: its node and pid from the prefix, the signal from the
``Signal:`` line, and as message the report's own lines joined by ``; `` (the backtrace
frames are counted in ``detail``). A paste that keeps only some of the lines (only the
header) still gives the event. Only the handler's own wordings are read, so a program's
``[file.py:42] ...`` logging format is never taken for a host.
"""

from __future__ import annotations

import polars as pl

from logsleuth import events

from .common import SIGNUM, STRSIGNAL, Example, streams_with

#: The lines of the handler's report (``Associated errno:`` and the SIGCHLD/SIGPOLL details
#: only appear for those signals; ``[ N]`` are the backtrace frames).
_REPORT = (
    r"^\[(?P<host>[\w.-]+):(?P<pid>\d{5,})\] "
    r"(?P<body>\*\*\* Process received signal \*\*\*|\*\*\* End of error message \*\*\*"
    r"|Signal: (?:.+ \(\d+\)|\d+)|Signal code: .* \(-?\d+\)|Failing at address: (?:0x[0-9a-fA-F]+|\(nil\))"
    r"|Associated errno: .+ \(\d+\)|siginfo is NULL, additional information unavailable|\[ ?\d+\] .+)\s*$"
)
#: ``Signal: %s (%d)`` (strsignal and number), or ``Signal: %d`` without strsignal.
_SIGNAL = r"^Signal: (?:(.+?) \((\d+)\)|(\d+))$"
_HEADER = "*** Process received signal ***"
_FOOTER = "*** End of error message ***"


#: Literals one of which is in every line of the handler's report (the ingest prefilter keeps them).
TRIGGERS = (
    "Process received signal",
    "End of error message",
    "Signal: ",
    "Signal code: ",
    "Failing at address: ",
    "Associated errno: ",
    "siginfo is NULL",
    # a backtrace frame as glibc's backtrace_symbols_fd writes it (Open MPI's execinfo component):
    # "[ 0] /lib/x86_64-linux-gnu/libpthread.so.0(+0x11390)[0x7f13ce25a390]", or "[ 3] [0x7f13ce25a390]"
    # without a symbol (not c10's "frame #3: python() [0x651770]")
    ")[0x",
    "] [0x",
)

KINDS = (events.SIGNAL_REPORT,)

EXAMPLES: tuple[Example, ...] = (
    (
        "[node01:19474] *** Process received signal ***\n"
        "[node01:19474] Signal: Segmentation fault (11)\n"
        "[node01:19474] Signal code: Address not mapped (1)\n"
        "[node01:19474] Failing at address: (nil)\n"
        "[node01:19474] [ 0] /lib/x86_64-linux-gnu/libpthread.so.0(+0x11390)[0x7f13ce25a390]\n"
        "[node01:19474] [ 1] /opt/conda/lib/python3.10/site-packages/horovod/common/mpi_lib.so(+0x22603)[0x7f13cc796603]\n"
        "[node01:19474] *** End of error message ***",
        {
            "kind": events.SIGNAL_REPORT,
            "node": "node01",
            "pid": 19474,
            "signal": "SIGSEGV",
            "detail": "frames: 2",
            "message": "Signal: Segmentation fault (11); Signal code: Address not mapped (1); Failing at address: (nil)",
        },
    ),
    (
        "[gpu7:00421] *** Process received signal ***\n[gpu7:00421] siginfo is NULL, additional information unavailable",
        {"kind": events.SIGNAL_REPORT, "node": "gpu7", "pid": 421, "detail": "frames: 0"},
    ),
)


def fold(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (the table without the report lines, one ``signal_report`` event per reporting process)."""
    inside, others = streams_with(df, _REPORT)
    if inside.is_empty():
        return df, df.clear()
    parts = pl.col("msg").str.extract_groups(_REPORT)
    t = inside.with_columns(parts.alias("_o")).with_columns(
        pl.col("_o").struct.field("host").alias("_host"),
        pl.col("_o").struct.field("pid").cast(pl.Int64, strict=False).alias("_pid"),
        pl.col("_o").struct.field("body").alias("_body"),
    )
    lines = t.filter(pl.col("_body").is_not_null())
    body = pl.col("_body")
    frame = body.str.starts_with("[")
    banner = body.is_in([_HEADER, _FOOTER])
    said = body.filter(~frame & ~banner)
    signal = body.filter(body.str.starts_with("Signal: ")).first()
    reports = (
        lines.sort("line")
        .group_by("file", "stream", "_host", "_pid", maintain_order=True)
        .agg(
            pl.col("line").filter(body == _HEADER).first().alias("_hdr_line"),
            pl.col("line").filter(~frame).first().alias("_first_said"),
            pl.col("line").first().alias("block_start"),
            pl.col("raw").filter(~frame).first().alias("raw"),
            said.str.join("; ").alias("_said"),
            signal.alias("_signal"),
            frame.sum().alias("_frames"),
            pl.col("_body").filter(~frame).first().alias("_first"),
            *(pl.col(c).drop_nulls().first().alias(c) for c in ("task", "rank", "local_rank", "time", "host")),
        )
    )
    number = pl.coalesce(pl.col("_signal").str.extract(_SIGNAL, 2), pl.col("_signal").str.extract(_SIGNAL, 3))
    name = pl.col("_signal").str.extract(_SIGNAL, 1)
    folded = reports.select(
        "file",
        pl.coalesce("_hdr_line", "_first_said", "block_start").alias("line"),
        "block_start",
        pl.coalesce("raw", pl.lit("")).alias("raw"),
        "stream",
        "task",
        "rank",
        "local_rank",
        "time",
        "host",
        pl.col("_host").alias("node"),
        pl.col("_pid").alias("pid"),
        pl.when(pl.col("_said") != "").then(pl.col("_said")).otherwise(pl.coalesce("_first", pl.lit(_HEADER))).alias("msg"),
        pl.coalesce(
            number.replace_strict(SIGNUM, default=None, return_dtype=pl.String),
            name.replace_strict(STRSIGNAL, default=None, return_dtype=pl.String),
        ).alias("signal"),
        pl.concat_str([pl.lit("frames: "), pl.col("_frames").cast(pl.String)]).alias("detail"),
        pl.lit(events.SIGNAL_REPORT).alias("kind"),
        pl.lit("app").alias("source"),
        pl.lit("fatal").alias("level"),
    )
    rest = t.filter(pl.col("_body").is_null()).drop("_o", "_host", "_pid", "_body")
    return pl.concat([rest, others], how="diagonal_relaxed"), folded
