"""Rules, cross-rank reasoning and the classifier -> one ranked candidate list with calibrated confidence.

For every label the fusion sees five signals: the strongest rule candidate of
that category (its confidence), whether the reasoner ranked it first (the
reasoner knows which failure came first across ranks), the classifier's log
probability, and whether the rules say "nothing failed" (for ``none``) or
"failed, no rule" (for ``unknown``). A conditional-logit model weighs them; its
five weights are fitted by ``logsleuth train`` on out-of-fold predictions, so
the resulting probabilities are calibrated on cases the classifier did not see.

When the best label's probability is under the fitted threshold the verdict is
``unknown`` (the evidence does not decide) and the ranked guesses follow it. A
job with no model file is reasoned by rules alone, exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np
import polars as pl

from .classify import Model, Prediction, softmax
from .reason import Candidate, Reasoning

#: Names of the per-label signals, in the order of the fitted weights.
SIGNALS = ("rule_confidence", "rule_first", "classifier_logp", "rules_say_none", "rules_say_unknown")
#: Probabilities below this are floored before the log (a label the classifier rules out still exists).
_FLOOR = 1e-6
#: Candidates shown after the verdict.
MAX_CANDIDATES = 6


def signals(reasoning: Reasoning, probs: dict[str, float], labels: Sequence[str]) -> np.ndarray:
    """The (labels x SIGNALS) matrix fusion weighs for one job."""
    best: dict[str, float] = {}
    for c in reasoning.candidates:
        best[c.category] = max(best.get(c.category, 0.0), c.confidence)
    first = reasoning.candidates[0].category if reasoning.candidates else None
    say_none = not reasoning.failed and not reasoning.candidates
    say_unknown = reasoning.failed and not reasoning.candidates
    out = np.zeros((len(labels), len(SIGNALS)))
    for i, label in enumerate(labels):
        out[i] = (
            best.get(label, 0.0),
            1.0 if label == first else 0.0,
            math.log(max(probs.get(label, 0.0), _FLOOR)),
            1.0 if say_none and label == "none" else 0.0,
            1.0 if say_unknown and label == "unknown" else 0.0,
        )
    return out


def fused_probs(reasoning: Reasoning, prediction: Prediction, model: Model) -> dict[str, float]:
    """Calibrated probability of every label after weighing rules and classifier."""
    z = signals(reasoning, prediction.probs, model.labels) @ np.asarray(model.fusion.weights)
    return {label: float(p) for label, p in zip(model.labels, softmax(z), strict=True)}


def fuse(events: pl.DataFrame, reasoning: Reasoning, prediction: Prediction | None, model: Model | None) -> Reasoning:
    """The reasoning with candidates re-ranked and confidences calibrated; rules only without a model."""
    if prediction is None or model is None:
        return reasoning
    probs = fused_probs(reasoning, prediction, model)
    ranked = sorted(probs, key=lambda label: (-probs[label], label))
    by_category: dict[str, list[Candidate]] = {}
    for c in reasoning.candidates:
        by_category.setdefault(c.category, []).append(c)
    out: list[Candidate] = []
    for label in ranked[:MAX_CANDIDATES]:
        p = round(probs[label], 3)
        ruled = by_category.get(label)
        if ruled:
            out.append(replace(ruled[0], confidence=p))
            out += [replace(c, confidence=round(min(p, c.confidence) / 2, 3)) for c in ruled[1:]]
        else:
            eids = prediction.evidence.get(label, []) if label not in ("none", "unknown") else []
            out.append(Candidate(label, label, "primary", p, p, eids, [], _ranks(events, eids)))
    lead = out[0]
    notes = list(reasoning.notes)
    decided = lead.category in ("none", "unknown") or (lead.eids and probs[lead.category] >= model.fusion.threshold)
    if not decided:
        notes.append(
            f"the evidence does not decide: the best candidate, {lead.category}, has confidence {probs[lead.category]:.2f}"
            f" (below {model.fusion.threshold:.2f}{'' if lead.eids else ', and no error line supports it'})"
        )
        out = [Candidate("unknown", "unknown", "primary", 0.0, round(1.0 - probs[lead.category], 3), [], [], [])] + [
            c for c in out if c.category != "unknown"
        ]
        lead = out[0]
    elif lead.category not in ("none", "unknown") and not lead.rules:
        notes.append(f"no rule recognises this failure; the verdict {lead.category} comes from the learned classifier")
    first_eid = lead.eids[0] if lead.eids else reasoning.first_eid
    first = reasoning.first_failure if first_eid == reasoning.first_eid or first_eid is None else _first_failure(events, first_eid)
    return replace(reasoning, candidates=out, first_eid=first_eid, first_failure=first, notes=notes)


def _ranks(events: pl.DataFrame, eids: list[int]) -> list[int]:
    ranks = events.get_column("rank")
    return sorted({int(r) for r in (ranks[e] for e in eids) if r is not None})


def _first_failure(events: pl.DataFrame, eid: int) -> dict[str, object]:
    """Rank, node and time of the event that leads the fused verdict."""
    row = events.row(eid, named=True)
    when: datetime | None = row["time"]
    return {"rank": row["rank"], "node": row["node"], "time": when.isoformat() if when is not None else None}
