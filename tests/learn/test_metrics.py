"""Scores: the numbers `logsleuth eval` prints are the textbook definitions."""

from __future__ import annotations

import pytest

from logsleuth.learn import metrics


def test_accuracy_macro_f1_and_confusion_on_a_hand_checked_example() -> None:
    truth = ["a", "a", "b", "b", "c"]
    pred = ["a", "b", "b", "b", "a"]
    s = metrics.score(truth, pred)
    assert s.accuracy == 0.6
    # a: P 1/2 R 1/2 F 0.5; b: P 2/3 R 1 F 0.8; c: P 0 R 0 F 0 -> macro 0.4333
    assert s.per_class["b"] == {"precision": 0.6667, "recall": 1.0, "f1": 0.8, "support": 2}
    assert s.macro_f1 == pytest.approx(0.4333, abs=1e-4)
    assert s.confusion == {"a": {"a": 1, "b": 1}, "b": {"b": 2}, "c": {"a": 1}}


def test_top3_counts_the_truth_anywhere_in_the_first_three() -> None:
    s = metrics.score(["a", "b"], ["x", "x"], [["x", "y", "a"], ["x", "y", "z", "b"]])
    assert s.accuracy == 0.0 and s.top3 == 0.5


def test_first_failure_is_scored_only_where_the_true_rank_is_known() -> None:
    s = metrics.score(["a"] * 3, ["a"] * 3, first=[(1, 1), (2, 0), (None, 5)])
    assert (s.first_failure, s.first_failure_n) == (0.5, 2)


def test_calibration_error_is_zero_when_confidence_matches_accuracy() -> None:
    assert metrics.ece([0.75] * 4, [True, True, True, False]) == pytest.approx(0.0)
    assert metrics.ece([1.0, 1.0], [False, False]) == pytest.approx(1.0)


def test_abstention_rate_counts_unknown_verdicts() -> None:
    s = metrics.score(["a", "b", "c", "d"], ["a", "unknown", "unknown", "d"], confidence=[0.9, 0.2, 0.3, 0.8])
    assert s.abstained == 0.5
