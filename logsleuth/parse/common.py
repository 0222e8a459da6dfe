"""Small helpers shared by the per-source parsers."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from typing import TypeAlias

import polars as pl

from logsleuth.events import SCHEMA, matching

#: A parser's example: text as a log has it (one line, or a block of lines) and fields of the event it
#: must give. tests/parse/test_declared.py runs each one through ingest with the prefilter on, in the
#: middle of a long file, and compares the fields.
Example: TypeAlias = tuple[str, Mapping[str, object]]

#: strsignal() text (what srun prints) -> signal name.
STRSIGNAL = {
    "Hangup": "SIGHUP",
    "Interrupt": "SIGINT",
    "Quit": "SIGQUIT",
    "Illegal instruction": "SIGILL",
    "Trace/breakpoint trap": "SIGTRAP",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Killed": "SIGKILL",
    "User defined signal 1": "SIGUSR1",
    "Segmentation fault": "SIGSEGV",
    "User defined signal 2": "SIGUSR2",
    "Broken pipe": "SIGPIPE",
    "Alarm clock": "SIGALRM",
    "Terminated": "SIGTERM",
}

#: Signal number -> name, for "exitcode: -9" and "got signal: 15".
SIGNUM = {str(int(s)): s.name for s in signal.Signals if s.name.startswith("SIG") and not s.name.startswith("SIG_")}


def claim(df: pl.DataFrame, cond: pl.Expr, columns: Mapping[str, pl.Expr]) -> pl.DataFrame:
    """Set ``columns`` on the rows where ``cond`` holds and no parser has set ``kind`` yet.

    Each parser claims the lines it recognises; a line keeps the first claim,
    so the order of parsers is the order of precedence. ``cond`` is evaluated once, not once per
    column: polars repeats a shared expression in every column that holds it, and compiles its
    regexes again each time (its cache keeps 32 per thread; the parsers use more than 100).
    """
    take = df.select(cond.fill_null(False) & pl.col("kind").is_null()).to_series()
    if not take.any():  # most claims match nothing: skip building their columns
        return df
    df = with_columns_of(df, *columns)
    exprs = [
        pl.when(take).then(value.cast(df.schema[name], strict=False)).otherwise(pl.col(name)).alias(name) for name, value in columns.items()
    ]
    return df.with_columns(exprs)


def with_columns_of(df: pl.DataFrame, *names: str) -> pl.DataFrame:
    """``df`` with the event table's columns ``names`` it lacks, as nulls of their dtype.

    The table stays narrow while parsers work on it (each filter, concat and join copies every
    column): a column is added when a parser first sets or reads it, the rest by events.conform.
    """
    missing = [name for name in names if name not in df.columns]
    return df.with_columns(pl.lit(None, dtype=SCHEMA[name]).alias(name) for name in missing) if missing else df


def short_host(expr: pl.Expr) -> pl.Expr:
    """Host names as NCCL prints them: cut at the first dot (torchrun prints the FQDN)."""
    return expr.str.extract(r"^([^.\s]+)", 1)


def signal_name(number: pl.Expr) -> pl.Expr:
    """'9' or '-9' -> 'SIGKILL'."""
    return number.str.strip_chars_start("-").replace_strict(SIGNUM, default=None, return_dtype=pl.String)


def field(text: pl.Expr, pattern: str, group: int = 1) -> pl.Expr:
    """One regex group of ``text`` (null where it does not match)."""
    return text.str.extract(pattern, group)


def integer(text: pl.Expr, pattern: str, group: int = 1) -> pl.Expr:
    return field(text, pattern, group).cast(pl.Int64, strict=False)


def on_rows_with(
    df: pl.DataFrame, triggers: tuple[str, ...], annotate: Callable[[pl.DataFrame], pl.DataFrame], *, pattern: str | None = None
) -> pl.DataFrame:
    """Run ``annotate`` only on rows whose message contains one of ``triggers`` (or matches ``pattern``).

    A parser's expressions are evaluated on every row they are given (polars
    computes both branches of ``when``), so each parser names the literals its
    lines always contain and sees only those rows. Row order is not kept; the
    event table is sorted at the end.
    """
    mask = matching(df, triggers, pattern, column="msg")
    if not mask.any():
        return df
    return pl.concat([df.filter(~mask), annotate(df.filter(mask))], how="diagonal_relaxed")


def streams_with(df: pl.DataFrame, pattern: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split into (rows of the streams where some message matches ``pattern``, the other rows).

    Folding works per stream; streams without a block header have nothing to fold.
    """
    hit = df.filter(matching(df, pattern=pattern, column="msg")).get_column("stream").unique()
    inside = pl.col("stream").is_in(hit.implode())
    return df.filter(inside), df.filter(~inside)
