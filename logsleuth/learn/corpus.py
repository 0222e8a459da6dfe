"""The labelled corpus: cases, their grouped train/test split, and what the pipeline makes of each.

A case is a folder with ``case.toml`` (corpus/README.md). Near-duplicates share
a ``group`` (one injected scenario, one issue thread, one synthetic wording
family), and every split here keeps a group on one side, so a test score is a
score on wordings and jobs the model never saw.
"""

from __future__ import annotations

import hashlib
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from logsleuth import classify, pipeline
from logsleuth.reason import Reasoning
from logsleuth.rulebook import RuleSet
from logsleuth.taxonomy import TAXONOMY

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: Salt of the split hash: changing it reshuffles which groups are held out.
SPLIT_SALT = "logsleuth-split-v1"


class CorpusError(Exception):
    """A case folder that does not follow corpus/README.md."""


@dataclass(frozen=True)
class Case:
    """One labelled job."""

    id: str
    path: Path
    label: str  # the taxonomy category (a finer label rolls up to it)
    group: str
    kind: str  # run-here | public | synthetic
    rank: int | None
    node: str | None
    log_supports: bool = True  # false when the label rests on the thread's prose, not on the log
    batch: str | None = None  # the first-contact batch the case arrived in


#: Real cases (public reports, jobs run here) and generated ones are scored apart, never pooled:
#: a score on cases generated from wordings we already knew measures memory, not diagnosis.
ORIGINS = ("real", "synthetic")


def origin_of(case: Case) -> str:
    """``synthetic`` for generated cases, ``real`` for public reports and jobs run here."""
    return "synthetic" if case.kind == "synthetic" else "real"


def find_cases(roots: Iterable[str | Path]) -> list[Case]:
    """Every case under the given corpus folders, sorted by id (ids must be unique)."""
    cases: dict[str, Case] = {}
    for root in roots:
        for toml in sorted(Path(root).glob("*/case.toml")):
            case = read_case(toml.parent)
            if case.id in cases:
                raise CorpusError(f"{toml}: case id {case.id!r} also in {cases[case.id].path}")
            cases[case.id] = case
    return [cases[k] for k in sorted(cases)]


def read_case(folder: Path) -> Case:
    try:
        meta = tomllib.loads((folder / "case.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CorpusError(f"{folder}/case.toml: {exc}") from None
    label = str(meta.get("category") or meta.get("label") or "")
    if label not in TAXONOMY:
        raise CorpusError(f"{folder}/case.toml: category {label!r} is not a taxonomy id")
    ff = meta.get("first_failure") or {}
    prov = meta.get("provenance") or {}
    rank = ff.get("rank")
    return Case(
        id=folder.name,
        path=folder,
        label=label,
        group=str(meta.get("group") or folder.name),
        kind=str(prov.get("kind") or "unknown"),
        rank=int(rank) if isinstance(rank, int) else None,
        node=str(ff["node"]) if ff.get("node") is not None else None,
        log_supports=bool(meta.get("log_supports", True)),
        batch=str(prov["batch"]) if prov.get("batch") else None,
    )


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
