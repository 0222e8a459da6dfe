"""The labelled corpus for learning: its grouped train/test split, and what the pipeline makes of each case.

Cases are read by :mod:`logsleuth.cases` (the one reader of ``case.toml``; its names are
re-exported here). Near-duplicates share a ``group`` (one injected scenario, one issue
thread, one synthetic wording family), and every split here keeps a group on one side, so
a test score is a score on wordings and jobs the model never saw.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from logsleuth import classify, pipeline
from logsleuth.cases import KINDS, ORIGINS, Case, CorpusError, case_files, find_cases, origin_of, read_case
from logsleuth.reason import Reasoning
from logsleuth.rulebook import RuleSet

__all__ = [
    "KINDS",
    "ORIGINS",
    "SPLIT_SALT",
    "Case",
    "CorpusError",
    "Observation",
    "case_files",
    "find_cases",
    "folds",
    "observe",
    "origin_of",
    "read_case",
    "split",
]

#: Salt of the split hash: changing it reshuffles which groups are held out.
SPLIT_SALT = "logsleuth-split-v1"


def _key(text: str) -> str:
    return hashlib.sha256(f"{SPLIT_SALT}:{text}".encode()).hexdigest()


def _strata(cases: Sequence[Case]) -> dict[tuple[str, str], list[str]]:
    """Group names per (label, provenance) of the group's first case, each list in hash order."""
    first: dict[str, Case] = {}
    for c in sorted(cases, key=lambda c: c.id):
        first.setdefault(c.group, c)
    strata: dict[tuple[str, str], list[str]] = defaultdict(list)
    for g, c in first.items():
        strata[(c.label, c.kind)].append(g)
    return {k: sorted(v, key=_key) for k, v in strata.items()}


def split(cases: Sequence[Case], test_share: float = 0.25) -> tuple[list[Case], list[Case]]:
    """Hold out about ``test_share`` of the groups of every (label, provenance) stratum.

    A stratum with one group stays in training (nothing to learn it from otherwise);
    which groups are held out depends only on the names in the stratum.
    """
    held: set[str] = set()
    for names in _strata(cases).values():
        if len(names) >= 2:
            held.update(names[: int(len(names) * test_share + 0.5)])
    return [c for c in cases if c.group not in held], [c for c in cases if c.group in held]


def folds(cases: Sequence[Case], k: int) -> np.ndarray:
    """A fold per case for stratified grouped k-fold: a group's cases share a fold, and each
    (label, provenance) stratum deals its groups round the folds."""
    fold_of: dict[str, int] = {}
    for names in _strata(cases).values():
        start = int(_key(names[0])[:8], 16) % k
        for i, g in enumerate(names):
            fold_of[g] = (start + i) % k
    return np.array([fold_of[c.group] for c in cases], dtype=np.int64)


@dataclass
class Observation:
    """What the pipeline makes of one case: events, rule hits, reasoning and feature buckets."""

    case: Case
    events: pl.DataFrame
    hits: pl.DataFrame
    reasoning: Reasoning
    feats: pl.DataFrame  # (eid, feat, h)
    buckets: np.ndarray


def observe(case: Case, ruleset: RuleSet, features: classify.FeatureConfig) -> Observation:
    """Run the pipeline up to the rules' reasoning on a case, and compute its classifier features."""
    (run,) = pipeline.run([str(case.path)], rules=ruleset, until="reason")
    events, hits, reasoning = run.events, run.hits, run.reasoning
    assert hits is not None and reasoning is not None
    feats = classify.hashed(classify.event_features(events, features), features.dim)
    return Observation(case, events, hits, reasoning, feats, np.asarray(classify.job_vector(feats), dtype=np.int64))
