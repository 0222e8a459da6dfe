"""analyze(): the library entry point, on :func:`logsleuth.pipeline.run` (which wires the stages).

It never raises and keeps to its time budget (reading stops at pipeline.READ_SHARE of it,
so the analysis of what was read fits in the rest; a read that hangs is given up):
an epilog calls it and must always get a report back.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import BinaryIO

import polars as pl

from . import ingest, pipeline
from .pipeline import fused, unfinished
from .report.model import Report

__all__ = ["analyze", "analyze_jobs", "events_for", "fused", "unfinished"]


def analyze(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    rules: Sequence[str | os.PathLike[str]] | None = None,
    budget_s: float | None = None,
    stdin: BinaryIO | None = None,
    redact: bool = True,
    model: str | os.PathLike[str] | None = None,
    classifier: bool = True,
) -> Report:
    """Diagnose a failed job from its logs: one report for all inputs.

    ``paths``: files, globs, directories, ``.gz`` files, or ``-`` for stdin.
    ``rules``: extra rule folders or files (override built-in rules by id).
    ``budget_s``: return within about this many seconds, reporting on what was read
    (the end of each large file is read first).
    ``redact``: replace secrets (tokens, keys, passwords) in every text of the report.
    ``model``: the classifier to fuse with the rules (default: the shipped one);
    ``classifier=False`` reasons from rules alone.
    Inputs of several SLURM jobs are analysed together, with a note; :func:`analyze_jobs`
    reports them apart.
    """
    return _run(paths, rules=rules, budget_s=budget_s, stdin=stdin, redact=redact, model=model, classifier=classifier, split=False)[0]


def analyze_jobs(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    rules: Sequence[str | os.PathLike[str]] | None = None,
    budget_s: float | None = None,
    stdin: BinaryIO | None = None,
    redact: bool = True,
    model: str | os.PathLike[str] | None = None,
    classifier: bool = True,
    merge: bool = False,
) -> list[Report]:
    """Like :func:`analyze`, one report per job: a folder of several jobs' logs is several post-mortems.

    A file belongs to the SLURM job its name (``slurm-<id>.out``, ``<name>-<id>.err``) or its own
    SLURM lines (``*** JOB <id> ...``) name; files naming none form a group of their own. Inputs of
    one job (or none) give one report. Reports are in job-id order, each with its ``job``.
    ``merge=True`` gives :func:`analyze`'s single report (in a list).
    """
    return _run(paths, rules=rules, budget_s=budget_s, stdin=stdin, redact=redact, model=model, classifier=classifier, split=not merge)


def _run(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    rules: Sequence[str | os.PathLike[str]] | None,
    budget_s: float | None,
    stdin: BinaryIO | None,
    redact: bool,
    model: str | os.PathLike[str] | None,
    classifier: bool,
    split: bool,
) -> list[Report]:
    analyses = pipeline.run(
        paths, rules=rules, budget_s=budget_s, stdin=stdin, redact=redact, model=model, classifier=classifier, split=split, never_raise=True
    )
    return [a.report for a in analyses if a.report is not None]


def events_for(
    paths: Sequence[str | os.PathLike[str]],
    *,
    rules: Sequence[str | os.PathLike[str]] | None = None,
    redact: bool = True,
) -> tuple[pl.DataFrame, list[ingest.InputInfo]]:
    """The event table and input records, for `logsleuth events` and for people who query it."""
    (analysis,) = pipeline.run(paths, rules=rules, redact=redact, until="parse")
    return analysis.events, analysis.inputs
