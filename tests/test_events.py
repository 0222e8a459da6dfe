"""The event table's helpers."""

from __future__ import annotations

import polars as pl
import pytest

from logsleuth import events


@pytest.mark.parametrize("distinct_from", [0, 10**9], ids=["per-distinct-text", "per-row"])
def test_matching_marks_the_same_rows_per_row_and_per_distinct_text(distinct_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "DISTINCT_FROM", distinct_from)
    monkeypatch.setattr(events, "DISTINCT_SHARE", 1.0)
    df = pl.DataFrame({"message": ["NCCL WARN x", None, "ok", "NCCL WARN x", "a timeout", "ok"]})
    assert events.matching(df, ("NCCL",), r"time(?:d )?out").to_list() == [True, False, False, True, True, False]
    assert events.matching(df, ("absent",)).to_list() == [False] * 6
    assert events.matching(df).to_list() == [False] * 6
