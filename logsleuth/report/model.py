"""The Report: what every output format renders, and the JSON contract.

Field names in ``to_dict()`` follow docs/report-contract.md exactly
(schema_version, verdict{cause, category, confidence, first_failure, evidence,
summary, fix}, candidates, inputs); everything else is additional.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

SCHEMA_VERSION = "1"

T = TypeVar("T")


def map_text(value: T, fn: Callable[[str], str]) -> T:
    """A copy of a report (or any part of one) with ``fn`` applied to every string in it.

    Dict keys are left alone: they are the contract's field names, not log text."""
    if isinstance(value, str):
        return fn(value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [map_text(v, fn) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: map_text(v, fn) for k, v in value.items()}  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: map_text(getattr(value, f.name), fn) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value


def collect_text(value: object, out: set[str]) -> None:
    """Add every string inside ``value`` to ``out`` (the strings :func:`map_text` would map).

    Numbers and None are passed over before the dataclass test, and a dataclass's field names are
    looked up once per class: the report of a job of 4,096 ranks holds 100,000 values.
    """
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, list | dict) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        values = value if isinstance(value, list) else value.values() if isinstance(value, dict) else _values(value)
        for v in values:
            if isinstance(v, str):
                out.add(v)
            elif not isinstance(v, _SCALARS):
                collect_text(v, out)


#: Values that hold no text.
_SCALARS = (int, float, type(None))


def _values(obj: object) -> list[object]:
    """A dataclass instance's field values."""
    cls = type(obj)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(obj))  # type: ignore[arg-type]
    return [getattr(obj, name) for name in names]


#: A dataclass's field names, per class.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


@dataclass
class Evidence:
    file: str
    line: int
    rank: int | None
    node: str | None
    text: str
    rule: str | None = None
    kind: str | None = None
    frame: str | None = None  # for a traceback: where the job's own code raised, "train.py:42 in step"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "rank": self.rank,
            "node": self.node,
            "text": self.text,
            "rule": self.rule,
            "kind": self.kind,
            "frame": self.frame,
        }


@dataclass
class FirstFailure:
    rank: int | None = None
    node: str | None = None
    time: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "time": self.time}


@dataclass
class Verdict:
    cause: str
    category: str
    confidence: float
    first_failure: FirstFailure
    evidence: list[Evidence]
    summary: str
    fix: list[str]
    title: str = ""
    explanation: str = ""
    references: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "category": self.category,
            "confidence": self.confidence,
            "first_failure": self.first_failure.to_dict(),
            "evidence": [e.to_dict() for e in self.evidence],
            "summary": self.summary,
            "fix": list(self.fix),
            "title": self.title,
            "explanation": self.explanation,
            "references": list(self.references),
        }


@dataclass
class CandidateOut:
    cause: str
    category: str
    confidence: float
    rules: list[str] = field(default_factory=list)
    events: int = 0
    ranks: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "category": self.category,
            "confidence": self.confidence,
            "rules": list(self.rules),
            "events": self.events,
            "ranks": list(self.ranks),
        }


@dataclass
class RankOut:
    """One rank's part in the failure; ``file``/``line`` point at the line that shows it."""

    rank: int
    node: str | None
    status: str  # culprit | failed | hung | victim | finished | unknown
    file: str | None = None
    line: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    time: str | None = None
    kind: str | None = None
    cause: str | None = None
    note: str | None = None
    seq: int | None = None
    last_line: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "status": self.status,
            "file": self.file,
            "line": self.line,
            "local_rank": self.local_rank,
            "pid": self.pid,
            "time": self.time,
            "kind": self.kind,
            "cause": self.cause,
            "note": self.note,
            "seq": self.seq,
            "last_line": self.last_line,
        }


@dataclass
class SuspectNodeOut:
    """A node the evidence points at: the culprit's, hung ranks', or one that disagrees with the others."""

    node: str
    reasons: list[str]
    causes: list[str]
    ranks: list[int]
    evidence: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "reasons": list(self.reasons),
            "causes": list(self.causes),
            "ranks": list(self.ranks),
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass
class InputOut:
    file: str
    bytes: int
    lines: int
    problems: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "lines": self.lines, "problems": list(self.problems)}


@dataclass
class Report:
    """The result of one analysis. ``to_json()`` is what ``--format json`` prints."""

    verdict: Verdict
    candidates: list[CandidateOut]
    inputs: list[InputOut]
    ranks: list[RankOut] = field(default_factory=list)
    suspect_nodes: list[SuspectNodeOut] = field(default_factory=list)
    hang: dict[str, Any] | None = None
    timeline: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    version: str = ""
    partial: bool = False  # some input was not read to its end (time budget, read error, damaged gzip)
    job: str | None = None  # the SLURM job id the inputs name, when they name one

    @property
    def readable(self) -> bool:
        """True when at least one input contributed lines."""
        return any(i.lines > 0 for i in self.inputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "inputs": [i.to_dict() for i in self.inputs],
            "ranks": [r.to_dict() for r in self.ranks],
            "suspect_nodes": [s.to_dict() for s in self.suspect_nodes],
            "hang": self.hang,
            "timeline": dict(self.timeline),
            "notes": list(self.notes),
            "stats": dict(self.stats),
            "logsleuth_version": self.version,
            "partial": self.partial,
            "job": self.job,
        }

    def to_json(self, indent: int | None = 2) -> str:
        """Always valid JSON: a number that is not finite (NaN or infinity, from a broken model or
        a bad input) becomes null, and ``allow_nan=False`` guards that none is left as bare ``NaN``."""

        def finite(value: Any) -> Any:
            if isinstance(value, float):
                return value if math.isfinite(value) else None
            if isinstance(value, dict):
                return {k: finite(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [finite(v) for v in value]
            return value

        return json.dumps(finite(self.to_dict()), indent=indent, ensure_ascii=False, default=str, allow_nan=False)
