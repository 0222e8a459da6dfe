"""Which job each input belongs to: a folder of several jobs' logs is several post-mortems.

A file belongs to the SLURM job that its name carries (``slurm-%j.out``, ``%x-%j.err``,
``slurm-%A_%a.out`` of an array task) or, failing that, that its own SLURM lines name
(``*** JOB 1234 ON node01 CANCELLED ...``, ``oom_kill events in StepId=1234.0``). Files
that name no job stay together in a group of their own. Reading the names and the
parsed SLURM events costs nothing more: the event table is already built.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from .ingest import InputInfo

#: A SLURM output file name: ``slurm-1234.out``, ``train-1234.err``, ``job_1234_7.log``
#: (the %j or %A_%a of sbatch's --output pattern, after a name and before the extension).
_NAME_JOB = re.compile(r"(?:^|[-_.])(\d{2,})(?:_\d+)?\.(?:out|err|log|txt)(?:\.gz)?$")
_NAME_HINT = re.compile(r"(?i)slurm|job|sbatch|srun")


@dataclass
class Group:
    """The inputs of one job (``job`` is None for files that name none)."""

    job: str | None
    files: list[str]


def job_of_name(path: str) -> str | None:
    """The SLURM job id a file name carries, when it looks like sbatch's output pattern."""
    base = os.path.basename(path)
    m = _NAME_JOB.search(base)
    if m is None or not _NAME_HINT.search(base):
        return None
    return m.group(1)


def group(events: pl.DataFrame, inputs: Sequence[InputInfo]) -> list[Group]:
    """The inputs grouped by job, in job-id order; files naming no job come last."""
    said: dict[str, str] = {}
    if "job" in events.columns and not events.is_empty():
        named = events.select("file", pl.col("job").str.extract(r"^(\d+(?:_\d+)?)", 1).alias("job")).drop_nulls()
        top = named.group_by("file", "job").len().sort("len", "job", descending=True).group_by("file", maintain_order=True).first()
        said = dict(zip(top.get_column("file").to_list(), top.get_column("job").to_list(), strict=True))
    by_job: dict[str | None, list[str]] = {}
    for i in inputs:
        job = job_of_name(i.file) or said.get(i.file)
        by_job.setdefault(job, []).append(i.file)
    if len([j for j in by_job if j is not None]) < 2:
        # one job (or none): every file is that job's, whatever names it
        only = next((j for j in by_job if j is not None), None)
        return [Group(only, [i.file for i in inputs])] if inputs else []
    ids = sorted((j for j in by_job if j is not None), key=_order)
    out = [Group(j, by_job[j]) for j in ids]
    if None in by_job:
        out.append(Group(None, by_job[None]))
    return out


def describe(groups: Sequence[Group]) -> str:
    """``job 91, job 93 and 1 file naming no job``."""
    parts = [f"job {g.job}" for g in groups if g.job is not None]
    loose = sum(len(g.files) for g in groups if g.job is None)
    if loose:
        parts.append(f"{loose} file{'s' if loose > 1 else ''} naming no job")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else "no job"


def _order(job: str) -> tuple[int, int]:
    head, _, task = job.partition("_")
    return int(head), int(task or -1)
