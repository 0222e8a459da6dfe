"""A paste a terminal wrapped at its width is read as the lines the program printed; other files stay as they are."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import logsleuth
from logsleuth.parse.wrapped import unwrap

WATCHDOG = (
    "[rank6]:[E429 13:55:49.384372190 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL's"
    " watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives. This typically"
    " indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another"
    " thread holding the GIL inside a CUDA api."
)


def _wrap(text: str, width: int) -> list[str]:
    """What a terminal of ``width`` columns shows: pieces of that width, the last padded with spaces."""
    pieces = [text[i : i + width] for i in range(0, len(text), width)]
    return [p.ljust(width) for p in pieces]


def _table(rows: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"file": ["f"] * len(rows), "line": list(range(1, len(rows) + 1)), "raw": rows}).cast({"line": pl.UInt32})


def test_a_line_wrapped_at_the_terminal_width_is_joined_back_with_its_number() -> None:
    rows = [*_wrap(WATCHDOG, 116), "[rank6]:[F429 14:03:49.385461578 ProcessGroupNCCL.cpp:1554] Terminating the process"]
    got = unwrap(_table(rows))
    assert got["raw"].to_list() == [WATCHDOG, rows[-1]]
    assert got["line"].to_list() == [1, len(rows)]


def test_a_wrapped_paste_keeps_the_rank_its_first_piece_names(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text("\n".join(_wrap(WATCHDOG, 116)) + "\n")
    report = logsleuth.analyze(log)
    assert report.verdict.category == "collective_timeout"
    assert report.verdict.first_failure.rank == 6


def test_rows_of_one_width_that_are_not_cut_inside_a_word_stay_apart() -> None:
    # nccl-tests' result rows are all alike and no line is longer, but every row is whole
    rows = [
        "   134217728      33554432     float     sum      -1   2666.0   50.35   94.40      0   2660.4   50.45   94.59      0",
        "   268435456      67108864     float     sum      -1   5301.2   50.64   94.95      0   5299.8   50.65   94.97      0",
        "   536870912     134217728     float     sum      -1    10593   50.68   95.03      0    10590   50.70   95.06      0",
    ]
    assert unwrap(_table(rows))["raw"].to_list() == rows


def test_a_line_at_the_width_before_a_new_record_is_not_joined_to_it() -> None:
    text = ("/home/user/.cache/kernels/" + "abcdefghijklmnopqrstuvwxyz" * 9)[:240]  # three pieces of 80, each cut inside a word
    record = "[2024-01-04 11:42:31,620] INFO: Run time: 0:01:25 CPU: 0.80% RSS: 49.03GB"
    got = unwrap(_table([*_wrap(text, 80), record]))
    assert got["raw"].to_list() == [text, record]
