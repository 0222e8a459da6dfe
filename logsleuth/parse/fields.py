"""Fields any event's text may carry, whatever its kind, parsed once for the stages after parsing.

Runs last, on the finished rows (folded blocks included), over the text the table keeps as
``message``; each field is looked for only in rows holding its literal.
"""

from __future__ import annotations

import polars as pl

from .common import field, on_rows_with

#: The CUDA driver version a process found (NCCL INFO ``cudaDriverVersion 12020``).
_DRIVER = r"cudaDriverVersion (\d+)"


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Fill the text fields of every row (rows without any of their literals are left alone)."""
    return on_rows_with(df, ("cudaDriverVersion ",), _driver)


def _driver(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(field(pl.col("msg"), _DRIVER, 1).alias("driver_version"))
