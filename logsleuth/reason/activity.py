"""Errors the job survived, and whether the logs show it at work or ending: what a verdict
without a failure may say (``none``, or an honest ``unknown`` for a paste of set-up lines)."""

from __future__ import annotations

import polars as pl

from logsleuth.events import AGENT_TEARDOWN, DIST_MEMBER, LINE, TRACEBACK

from .exits import _DIED, IS_FAILURE


def _launcher_saw_no_failure(ev: pl.DataFrame) -> bool:
    """The launcher's own output is in the inputs (torchrun's log lines, srun's labels) and it
    reported no worker's death and stopped none: errors printed along the way were survived."""
    present = ev.filter((pl.col("source") == "launcher") | pl.col("task").is_not_null()).height > 0
    if not present or not ev.filter(_DIED | (pl.col("kind") == AGENT_TEARDOWN)).is_empty():
        return False
    # and every file went on with ordinary output after its last error (a cut-off log did not)
    # (a labelled empty line, srun's "201:", is no output)
    ordinary = (pl.col("kind") == LINE) & (pl.col("level") == "info") & (pl.col("message") != "")
    per_file = ev.group_by("file").agg(
        pl.col("line").filter(IS_FAILURE).max().alias("_err"), pl.col("line").filter(ordinary).max().alias("_ok")
    )
    return per_file.filter(pl.col("_err").is_not_null() & (pl.col("_ok").is_null() | (pl.col("_ok") < pl.col("_err")))).is_empty()


#: An ordinary output line that shows training going on (not a source line of a traceback printed unfolded).
_PROGRESS_LINE = (pl.col("kind") == LINE) & (pl.col("level") == "info") & pl.col("progress")


def shows_activity(ev: pl.DataFrame) -> bool:
    """Do the logs show the job at work, so that finding no failure in them means something?

    A log with no failure signal reads as ``none`` only if it shows more than set-up
    chatter: a warning or error (the alarming line a user asks about, judged harmless; not the
    banners every job prints as it starts, parse.fields' start_banner),
    a line a rule explains, training progress (steps, epochs, a loss, a progress bar) or
    an ending (torchelastic's SUCCEEDED). A paste of NCCL's initialisation lines alone,
    or of a launcher's banner, stops before anything happened: its failure, if any, is
    after the last line, and "the job ran to completion" would be a guess."""
    if ev.is_empty():
        return False
    hit = pl.col("hit_role").is_not_null() if "hit_role" in ev.columns else pl.lit(False)
    at_work = (
        (pl.col("level").is_in(["warning", "error", "fatal"]) & ~pl.col("start_banner").fill_null(False))
        | hit
        | pl.col("step").is_not_null()
        | _PROGRESS_LINE
        | pl.col("ended_well").fill_null(False)
    )
    return bool(ev.select(at_work.fill_null(False).any()).item())


def shows_ending(ev: pl.DataFrame) -> bool:
    """Does a line say the job, or a worker of it, ended well? Without one, "no failure found"
    means only that the lines read show none: a job that hung or was killed silently reads the same."""
    return not ev.is_empty() and bool(ev.select(pl.col("ended_well").fill_null(False).any()).item())


def _handled(ev: pl.DataFrame) -> list[int]:
    """Tracebacks the process survived: no process of the job died, and the same rank (or, in
    single-process output, the same file) went on making progress (steps, epochs, loss) after each.

    Only whole tracebacks count: a bare exception line with text after it is usually a
    pasted fragment whose message runs on over several lines, not a survived error.

    Where several ranks write to one file without rank prefixes, an unranked traceback
    cannot be tied to the process that kept printing, so it is never read as handled.
    """
    if not ev.filter(_DIED).is_empty():
        return []
    # a join line names its rank, but says nothing about who wrote the unprefixed lines around it
    said = ev.filter(pl.col("rank").is_not_null() & (pl.col("kind") != DIST_MEMBER))
    ranked_files = said.get_column("file").unique().to_list()
    multi_rank = said.get_column("rank").n_unique() > 1
    # the same process: a traceback whose writer is known (Ray's "(Worker pid=N)") is survived only by that pid's progress
    # progress that counts (a step, a loss value): a wrapped exception message runs on with words like "loss"
    counted = _PROGRESS_LINE & pl.col("progress_counted").fill_null(False)
    ordinary = ev.filter(counted).group_by("file", "rank", "pid").agg(pl.col("line").max().alias("_last_ok"))
    tb = ev.filter((pl.col("kind") == TRACEBACK) & pl.col("level").is_in(["error", "fatal"]))
    if tb.is_empty():
        return []
    joined = tb.join(ordinary, on=["file", "rank", "pid"], how="left", nulls_equal=True)
    ok = (pl.col("_last_ok") > pl.col("line")).fill_null(False) & (
        pl.col("rank").is_not_null() | (~pl.col("file").is_in(ranked_files) & pl.lit(not multi_rank))
    )
    survived = joined.filter(ok)
    # the same exception seen again through another file (torchrun --tee writes it to the console
    # and to the rank's stderr.log) is the same survived exception
    handled = tb.filter(
        pl.col("message").is_in(survived.get_column("message").implode())
        & (pl.col("rank").is_null() | pl.col("rank").is_in(survived.get_column("rank").drop_nulls().implode()))
    ).get_column("eid")
    # every error of the job must be survived for any to count as handled
    others = ev.filter(IS_FAILURE & ~pl.col("eid").is_in(handled))
    return [] if not others.is_empty() else [int(e) for e in handled.to_list()]
