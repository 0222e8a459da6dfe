"""Labelled cases: the one format and the one reader, for corpus/, the tests and examples/.

A case is a folder with its logs and a ``case.toml`` that says what really happened and
where the logs came from (the format: corpus/README.md): ``label``/``category`` (a taxonomy
id), ``group``, ``[first_failure]`` (``rank``, ``node``; keys that are unknown are left out),
``log_supports`` and ``[provenance]`` (``kind``, ``batch``, ``script``/``url``/``generator``,
``versions``, ``notes``). The corpus (corpus/) and every labelled case outside it
(tests/rules/e2e, tests/data/cascades, tests/fixtures, examples/) are written alike and read
here; ``tests/test_labelled_cases.py`` runs every case outside the corpus, which must all
come out right.

This module needs only the standard library: scripts and tests read cases without the
training extra.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .taxonomy import TAXONOMY

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class CorpusError(Exception):
    """A case folder that does not follow corpus/README.md."""


@dataclass(frozen=True)
class Case:
    """One labelled job."""

    id: str
    path: Path
    label: str  # the taxonomy category (a finer label rolls up to it)
    group: str
    kind: str  # [provenance] kind (see KINDS), or "unknown" when case.toml names none
    rank: int | None
    node: str | None
    log_supports: bool = True  # false when the label rests on the thread's prose, not on the log
    batch: str | None = None  # the first-contact batch the case arrived in
    generator: str | None = None  # synthetic: the generator call that writes the case


#: How a case came to be ([provenance] kind): a job run here, a public report rebuilt, a generated
#: case (``generator`` records the call), or an excerpt composed by hand from the exact strings
#: the software prints (test cases only, never in corpus/).
KINDS = ("run-here", "public", "synthetic", "composed")


#: Real cases (public reports, jobs run here) and generated ones are scored apart, never pooled:
#: a score on cases generated from wordings we already knew measures memory, not diagnosis.
ORIGINS = ("real", "synthetic")


def origin_of(case: Case) -> str:
    """``synthetic`` for generated (and composed) cases, ``real`` for public reports and jobs run here."""
    return "synthetic" if case.kind in ("synthetic", "composed") else "real"


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
    """The case in ``folder`` (its ``case.toml``); :class:`CorpusError` when it breaks the format."""
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
        generator=str(prov["generator"]) if prov.get("generator") else None,
    )


def case_files(folder: Path) -> list[Path]:
    """Every log file of a case (all files but case.toml), as a user would pass them."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "case.toml")
