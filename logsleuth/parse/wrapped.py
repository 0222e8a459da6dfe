"""Lines a terminal wrapped at its width, joined back into the lines the program printed.

A paste copied from a terminal (or from a web page that kept a terminal's output) breaks
every long line at the terminal's width, often in the middle of a word:
``... ProcessGroupNCCL'`` / ``s watchdog got stuck for 480 seconds ...``. The prefixes
(``[rank6]:``) stay on the first piece and the words a rule or a parser reads are cut
apart. A file reads as wrapped when its longest lines share one width, no line is longer,
and most lines of that width end inside a word that the next line goes on with; each such
line is joined with the next (a line cut after a word keeps its one space). Lines that a
terminal padded with spaces to its width end there. Files whose lines are not like this are left exactly as they are.
"""

from __future__ import annotations

import polars as pl

#: Narrower than this is taken for no terminal's width (pastes come from terminals of 80 columns and more).
MIN_WIDTH = 60
#: Share of the lines at the width, followed by the next line of the file, that must be cut inside
#: a word for the file to read as wrapped (a table whose rows happen to be alike is not cut so).
CUT_SHARE = 0.5
#: A line that starts a record of its own is never the tail of a wrapped one: a timestamp, a log
#: header, a traceback.
_RECORD_START = (
    r"^(?:\[|\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|Traceback |[A-Z][A-Za-z]+(?:Error|Exception|Warning): |[IWEF]\d{4} "
    r"|[\w.-]+:\d+:\d+ \[\d+\] )"  # NCCL's host:pid:tid [dev]
)
#: How many characters of a line's start, digits masked, say what kind of record it is: a line that
#: starts like the line at the width before it is the next record of the same kind, not its tail.
_SHAPE = 8


def unwrap(lines: pl.DataFrame) -> pl.DataFrame:
    """Join the lines a terminal wrapped (file, line, raw -> the same, fewer rows): each joined
    line keeps the number of its first piece."""
    if lines.is_empty():
        return lines
    length = pl.col("raw").str.len_chars()
    df = lines.sort("file", "line").with_columns(length.alias("_len"))
    widths = (
        df.filter(pl.col("_len") >= MIN_WIDTH)
        .group_by("file", "_len")
        .len()
        .sort(["file", "len", "_len"], descending=[False, True, True])
        .group_by("file", maintain_order=True)
        .first()
        .join(df.group_by("file").agg(pl.col("_len").max().alias("_max")), on="file")
        .filter((pl.col("len") >= 2) & (pl.col("_len") == pl.col("_max")))
        .select("file", pl.col("_len").alias("_width"))
    )
    if widths.is_empty():
        return lines
    next_raw = pl.col("raw").shift(-1).over("file")
    at_width = (pl.col("_len") == pl.col("_width")) & (pl.col("line").shift(-1).over("file") == pl.col("line") + 1)
    cut = (
        at_width
        & pl.col("raw").str.contains(r"\S ?$")
        & next_raw.str.contains(r"^\S")
        & ~next_raw.str.contains(_RECORD_START)
        & (_shape(pl.col("raw")) != _shape(next_raw))
    )
    df = df.join(widths, on="file", how="left").with_columns(at_width.fill_null(False).alias("_at"), cut.fill_null(False).alias("_cut"))
    wrapped = (pl.col("_cut").sum().over("file") >= 2) & (pl.col("_cut").sum().over("file") >= CUT_SHARE * pl.col("_at").sum().over("file"))
    df = df.with_columns((pl.col("_cut") & wrapped).alias("_cut"))
    if not df.get_column("_cut").any():
        return lines
    # a new piece starts wherever the line before it was not cut
    starts = ~pl.col("_cut").shift(1).over("file").fill_null(False)
    joined = (
        df.with_columns(starts.cum_sum().over("file").alias("_piece"), wrapped.alias("_wrapped"))
        .group_by("file", "_piece", maintain_order=True)
        .agg(pl.col("line").first(), pl.col("raw").str.join(""), pl.col("_wrapped").first())
        .with_columns(pl.when(pl.col("_wrapped")).then(pl.col("raw").str.strip_chars_end()).otherwise(pl.col("raw")).alias("raw"))
    )
    return joined.select(lines.columns).cast(lines.schema)


def _shape(text: pl.Expr) -> pl.Expr:
    return text.str.slice(0, _SHAPE).str.replace_all(r"\d", "0")
