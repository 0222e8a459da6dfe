"""The verdicts evaluation compares: rules only, classifier only, and fused (what `analyze` reports)."""

from __future__ import annotations

from dataclasses import dataclass

from logsleuth import classify, fuse
from logsleuth.reason import Reasoning
from logsleuth.report.build import build
from logsleuth.rulebook import RuleSet

from .corpus import Observation


@dataclass
class Verdict:
    """One system's answer on one case."""

    label: str
    ranked: list[str]
    confidence: float
    rank: int | None  # the first failing rank the report names


def _from_reasoning(obs: Observation, reasoning: Reasoning, ruleset: RuleSet) -> Verdict:
    """Read the verdict the way a user does: from the report built on this reasoning."""
    report = build(obs.events, obs.hits, reasoning, ruleset, [], version="")
    ranked = list(dict.fromkeys(c.category for c in report.candidates))
    v = report.verdict
    return Verdict(v.category, ranked, v.confidence, v.first_failure.rank)


def rules_only(obs: Observation, ruleset: RuleSet) -> Verdict:
    return _from_reasoning(obs, obs.reasoning, ruleset)


def classifier_only(prediction: classify.Prediction) -> Verdict:
    ranked = sorted(prediction.probs, key=lambda k: (-prediction.probs[k], k))
    return Verdict(ranked[0], ranked, prediction.probs[ranked[0]], None)


def fused(obs: Observation, prediction: classify.Prediction, model: classify.Model, ruleset: RuleSet) -> Verdict:
    return _from_reasoning(obs, fuse.fuse(obs.events, obs.reasoning, prediction, model), ruleset)


def predict(model: classify.Model, obs: Observation) -> classify.Prediction:
    """The classifier's prediction from an observation's precomputed features."""
    return classify.predict_from(model, obs.events, obs.feats)
