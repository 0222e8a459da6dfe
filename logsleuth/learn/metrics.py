"""Scores of a set of verdicts against the labels: accuracy, top-3, macro-F1, per class, confusion, calibration."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Scores:
    """How one system did on one set of cases."""

    n: int
    accuracy: float
    top3: float | None
    macro_f1: float
    per_class: dict[str, dict[str, float]]
    confusion: dict[str, dict[str, int]]
    first_failure: float | None = None
    first_failure_n: int = 0
    ece: float | None = None
    abstained: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": self.n,
            "accuracy": self.accuracy,
            "top3": self.top3,
            "macro_f1": self.macro_f1,
            "per_class": self.per_class,
            "confusion": self.confusion,
        }
        if self.first_failure is not None:
            out["first_failure_rank_accuracy"] = self.first_failure
            out["first_failure_n"] = self.first_failure_n
        if self.ece is not None:
            out["ece"] = self.ece
        if self.abstained is not None:
            out["abstained"] = self.abstained
        out.update(self.extra)
        return out


def _r(x: float) -> float:
    return round(float(x), 4)


def score(
    truth: Sequence[str],
    pred: Sequence[str],
    ranked: Sequence[Sequence[str]] | None = None,
    *,
    confidence: Sequence[float] | None = None,
    first: Sequence[tuple[int | None, int | None]] | None = None,
) -> Scores:
    """Scores of ``pred`` against ``truth``.

    Macro-F1 averages over the labels present in ``truth`` (a label the set does not
    contain cannot be recalled; predicting it still costs the true label its recall).
    ``ranked`` gives each case's ranked labels for top-3; ``confidence`` the verdict's
    confidence for calibration error; ``first`` (true rank, predicted rank) pairs, scored
    where the true rank is known.
    """
    n = len(truth)
    if n == 0:
        return Scores(0, 0.0, None, 0.0, {}, {})
    correct = [t == p for t, p in zip(truth, pred, strict=True)]
    labels = sorted(set(truth))
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    confusion: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for t, p in zip(truth, pred, strict=True):
        confusion[t][p] += 1
        if t == p:
            tp[t] += 1
        else:
            fp[p] += 1
            fn[t] += 1
    per_class: dict[str, dict[str, float]] = {}
    for label in labels:
        prec = tp[label] / (tp[label] + fp[label]) if tp[label] + fp[label] else 0.0
        rec = tp[label] / (tp[label] + fn[label]) if tp[label] + fn[label] else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per_class[label] = {"precision": _r(prec), "recall": _r(rec), "f1": _r(f1), "support": tp[label] + fn[label]}
    top3 = None
    if ranked is not None:
        top3 = _r(sum(t in list(r)[:3] for t, r in zip(truth, ranked, strict=True)) / n)
    out = Scores(
        n=n,
        accuracy=_r(sum(correct) / n),
        top3=top3,
        macro_f1=_r(sum(v["f1"] for v in per_class.values()) / len(per_class)),
        per_class=per_class,
        confusion={t: dict(sorted(row.items())) for t, row in sorted(confusion.items())},
    )
    if confidence is not None:
        out.ece = _r(ece(confidence, correct))
        out.abstained = _r(sum(p == "unknown" for p in pred) / n)
    if first is not None:
        known = [(t, p) for t, p in first if t is not None]
        if known:
            out.first_failure = _r(sum(t == p for t, p in known) / len(known))
            out.first_failure_n = len(known)
    return out


def ece(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """Expected calibration error: |accuracy - confidence| averaged over equal-width confidence bins."""
    n = len(confidence)
    if n == 0:
        return 0.0
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [i for i, c in enumerate(confidence) if lo <= c < hi or (b == bins - 1 and c == 1.0)]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            conf = sum(confidence[i] for i in members) / len(members)
            total += len(members) / n * abs(acc - conf)
    return total
