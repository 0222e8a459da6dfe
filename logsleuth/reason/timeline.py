"""One order for the events of every input, and how far to trust it.

Events are placed by their own timestamps (glog, NCCL WARN, SLURM, torchrun
failure entries, ISO stamps) and, where a line has none, by its position in its
file: it happened after the stamped line above it. Files from different nodes
may run on different clocks; events that must have happened together on every
rank line them up (a watchdog timeout minus its ``ran for`` time is the start
of the same collective everywhere; NCCL ``Init COMPLETE`` of one communicator).
Without such anchors, stamps are taken at face value and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from logsleuth.events import NCCL_INIT, WATCHDOG_TIMEOUT, numbered

#: Clock differences below this are left alone: anchors themselves are only this precise.
MIN_OFFSET_S = 1.0


@dataclass
class Timeline:
    """``order``: eid, pos (0 = earliest), t (best estimate on a common clock)."""

    order: pl.DataFrame
    ordering: str  # timestamps | mixed | line-order
    note: str
    offsets: dict[str, float] = field(default_factory=dict)


def build(events: pl.DataFrame, focus: pl.Series | None = None) -> Timeline:
    """Order ``events`` (eid = row index). ``focus`` (eids) are the events whose order
    matters for the verdict; how many of them carry a stamp decides ``ordering``."""
    df = numbered(events).select("eid", "file", "line", "time", "kind", "pg", "comm_id", "elapsed_ms", "seq", "op")
    if df.is_empty():
        empty = pl.DataFrame(schema={"eid": pl.UInt32(), "pos": pl.UInt32(), "t": pl.Datetime("us")})
        return Timeline(empty, "line-order", "no events")
    measured = _offsets(df)
    offsets = {f: o for f, o in measured.items() if abs(o) >= MIN_OFFSET_S}
    shift = pl.col("file").replace_strict(offsets, default=0.0, return_dtype=pl.Float64) if offsets else pl.lit(0.0)
    own = pl.col("time") + pl.duration(microseconds=(shift * 1e6).cast(pl.Int64))
    df = df.with_columns(own.alias("_own"), pl.col("file").rank("dense").alias("_f"))
    df = df.sort("_f", "line", "eid").with_columns(
        pl.coalesce("_own", pl.col("_own").forward_fill().over("_f"), pl.col("_own").backward_fill().over("_f")).alias("t")
    )
    df = df.sort("t", "_f", "line", "eid", nulls_last=False).with_row_index("pos")
    order = df.select("eid", "pos", "t")
    ordering, note = _trust(df, focus, offsets, checked=len(measured))
    return Timeline(order.sort("eid"), ordering, note, offsets)


def _anchors(df: pl.DataFrame) -> pl.DataFrame:
    """(file, key, value): instants that were the same on every rank, per file."""
    wd = df.filter((pl.col("kind") == WATCHDOG_TIMEOUT) & pl.col("time").is_not_null() & pl.col("seq").is_not_null()).select(
        "file",
        pl.concat_str(
            [pl.lit("wd"), pl.col("pg").fill_null("0"), pl.col("seq").cast(pl.String), pl.col("op").fill_null("")],
            separator=":",
        ).alias("key"),
        (pl.col("time") - pl.duration(milliseconds=pl.col("elapsed_ms").fill_null(0))).alias("value"),
    )
    init = df.filter((pl.col("kind") == NCCL_INIT) & pl.col("time").is_not_null()).select(
        "file",
        pl.concat_str([pl.lit("init"), pl.col("comm_id")]).alias("key"),
        pl.col("time").alias("value"),
    )
    both = pl.concat([wd, init]).drop_nulls("key")
    return both.group_by("file", "key").agg(pl.col("value").median())


def _offsets(df: pl.DataFrame) -> dict[str, float]:
    """Seconds to add to each file's stamps so anchors agree with the reference file's clock.

    The reference is the file with the most anchors; a file sharing no anchor
    with it keeps its own clock. Every measured file is returned, even at 0.
    """
    anchors = _anchors(df)
    if anchors.is_empty() or anchors.get_column("file").n_unique() < 2:
        return {}
    counts = anchors.group_by("file").len().sort(["len", "file"], descending=[True, False])
    ref = counts.get_column("file")[0]
    ref_values = anchors.filter(pl.col("file") == ref).select("key", pl.col("value").alias("_ref"))
    diffs = (
        anchors.filter(pl.col("file") != ref)
        .join(ref_values, on="key")
        .group_by("file")
        .agg(((pl.col("_ref") - pl.col("value")).dt.total_microseconds() / 1e6).median().alias("off"))
    )
    return {f: round(float(o), 3) for f, o in diffs.iter_rows() if o is not None}


def _trust(df: pl.DataFrame, focus: pl.Series | None, offsets: dict[str, float], *, checked: int) -> tuple[str, str]:
    """How sure the order of the ``focus`` events is, in a word and a sentence."""
    sub = df if focus is None or focus.len() == 0 else df.filter(pl.col("eid").is_in(focus.implode()))
    stamped = sub.get_column("_own").is_not_null()
    files = df.group_by("file").agg(pl.col("_own").is_not_null().any().alias("has"))
    unstamped_files = files.filter(~pl.col("has")).get_column("file").to_list()
    n_files = files.height
    if stamped.all() and not unstamped_files:
        ordering = "timestamps"
    elif not stamped.any() and (n_files == 1 or len(unstamped_files) == n_files):
        ordering = "line-order"
    else:
        ordering = "mixed"
    parts = []
    if ordering == "timestamps":
        parts.append("every failure line carries its own timestamp")
    elif ordering == "line-order":
        parts.append("no failure line carries a timestamp: events are ordered by their position in each file")
        if n_files > 1:
            parts.append(f"the {n_files} files cannot be ordered against each other, so the first failure across files is a best guess")
    else:
        parts.append(
            f"{int(stamped.sum())} of {stamped.len()} failure lines carry a timestamp; the others are placed after the last stamped line above them"
        )
        if unstamped_files:
            parts.append(f"{len(unstamped_files)} file(s) have no timestamps at all and are ordered by line position only")
    stamped_files = n_files - len(unstamped_files)
    if offsets:
        shown = ", ".join(f"{f} {o:+.1f}s" for f, o in sorted(offsets.items()))
        parts.append(f"clocks aligned on events every rank saw at once ({shown})")
    elif checked:
        parts.append(f"the clocks of {checked + 1} files agree within {MIN_OFFSET_S:g} s on events every rank saw at once")
    elif stamped_files > 1:
        parts.append(f"the clocks of the {stamped_files} timestamped files are assumed to agree (no shared event to check them against)")
    return ordering, "; ".join(parts) + "."
