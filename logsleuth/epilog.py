"""Diagnose a finished SLURM job from inside an Epilog or EpilogSlurmctld script.

The script (examples/slurm/epilog.sh) does what needs root: a time limit, the
switch to the job's user, the spool folders. This module does the rest, from
the environment SLURM gives the script and without calling any SLURM command
(the docs forbid it there):

- find the job's output: ``SLURM_JOB_STDOUT``/``STDERR`` when set, which on
  22.05 are the raw ``--output`` patterns (``%j``, ``%x``, ... unexpanded), or
  SLURM's default ``slurm-%j.out`` in ``SLURM_JOB_WORK_DIR``;
- decide whether the job failed. The exit codes are not enough: a job killed
  at its time limit or by ``scancel`` reaches the epilog with
  ``SLURM_JOB_EXIT_CODE=0``, so a zero exit is checked against the end of the
  output for SLURM's kill messages and tracebacks;
- analyse under a time budget and write the report (JSON and Markdown) next to
  the output or into a report folder, and optionally append it to a history store.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .files import write_text_atomic

if TYPE_CHECKING:
    from .report.model import Report

#: Bytes at the end of each output read to tell a killed job from a clean one.
SNIFF_BYTES = 64 << 10
#: What a failed job leaves at the end of its output even when its exit code is 0.
_FAILURE_TAIL = re.compile(
    rb"\*\*\* (?:JOB|STEP) \S+ ON \S+ (?:CANCELLED|FAILED|UNCORRECTABLE)"
    rb"|DUE TO (?:TIME LIMIT|NODE FAILURE|PREEMPTION)"
    rb"|oom[-_]kill"
    rb"|^srun: error: "
    rb"|Traceback \(most recent call last\)"
    rb"|ChildFailedError",
    re.MULTILINE,
)
_PATTERN = re.compile(r"%(\d*)([jJAaxuNnts%])")


@dataclass
class Job:
    """What the epilog's environment says about the job (any field may be missing)."""

    id: str
    user: str | None = None
    name: str | None = None
    array_job: str | None = None
    array_task: str | None = None
    node: str | None = None  # SLURMD_NODENAME: where this epilog runs (Epilog only)
    nodelist: str | None = None
    work_dir: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    context: str | None = None
    exit_codes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Job:
        def get(*names: str) -> str | None:
            for n in names:
                if env.get(n):
                    return env[n]
            return None

        return cls(
            id=get("SLURM_JOB_ID", "SLURM_JOBID") or "",
            user=get("SLURM_JOB_USER"),
            name=get("SLURM_JOB_NAME"),
            array_job=get("SLURM_ARRAY_JOB_ID"),
            array_task=get("SLURM_ARRAY_TASK_ID"),
            node=get("SLURMD_NODENAME"),
            nodelist=get("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
            work_dir=get("SLURM_JOB_WORK_DIR"),
            stdout=get("SLURM_JOB_STDOUT"),
            stderr=get("SLURM_JOB_STDERR"),
            context=get("SLURM_SCRIPT_CONTEXT"),
            exit_codes={k: env[k] for k in ("SLURM_JOB_EXIT_CODE", "SLURM_JOB_EXIT_CODE2", "SLURM_JOB_DERIVED_EC") if env.get(k)},
        )

    def batch_host(self) -> str | None:
        return first_host(self.nodelist) if self.nodelist else None

    def exit_status(self) -> str:
        """``exit:signal`` as SLURM prints it (from EXIT_CODE2, else decoded from the raw wait status)."""
        if "SLURM_JOB_EXIT_CODE2" in self.exit_codes:
            return self.exit_codes["SLURM_JOB_EXIT_CODE2"]
        raw = self.exit_codes.get("SLURM_JOB_EXIT_CODE", "")
        return f"{int(raw) >> 8}:{int(raw) & 0x7F}" if raw.isdigit() else "?"

    def failed(self) -> bool | None:
        """True when an exit code says so, False when all say 0, None when SLURM gave none."""
        if not self.exit_codes:
            return None
        return any(n != 0 for value in self.exit_codes.values() for n in map(int, re.findall(r"\d+", value)))


def first_host(nodelist: str) -> str:
    """The first host of a SLURM hostlist: ``gpu[07-09,12],cpu1`` -> ``gpu07``.

    The batch script, and so the job's output, lives on the first node.
    """
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            end = i
            break
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[-,]", m.group(1))[0], nodelist[:end])


#: What SLURM writes for %a in a job that is not an array task (NO_VAL).
NOT_AN_ARRAY = "4294967294"


def expand_pattern(pattern: str, job: Job, *, array: tuple[str | None, str | None]) -> str:
    """Expand SLURM's filename pattern (sbatch --output) the way slurmstepd does.

    ``array`` gives %A and %a. A field the environment does not give (the job
    name in a slurmd Epilog, say) becomes ``*``, to be globbed. A backslash
    anywhere turns expansion off, as in SLURM.
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    values = {
        "j": job.id,
        "J": job.id,  # jobid.stepid, but the batch step's output has no step part
        "A": array[0],
        "a": array[1],
        "x": job.name,
        "u": job.user,
        "N": job.node or job.batch_host(),
        "n": "0",  # node and task index of the batch script
        "t": "0",
        "s": "batch",
    }

    def one(m: re.Match[str]) -> str:
        width, key = m.group(1), m.group(2)
        if key == "%":
            return "%"
        value = values.get(key)
        if value is None:
            return "*"
        return value.zfill(int(width)) if width and value.isdigit() else value

    return _PATTERN.sub(one, pattern)


def _array_guesses(job: Job) -> list[tuple[str | None, str | None]]:
    """(%A, %a) values to try: exact when SLURM says, else not-an-array first, then any.

    EpilogSlurmctld gets the array variables; a slurmd Epilog never does, so
    there an array task's file can only be found by a glob that matches one file.
    """
    if job.array_job or job.array_task:
        return [(job.array_job, job.array_task)]
    guesses: list[tuple[str | None, str | None]] = [(job.id, NOT_AN_ARRAY)]
    if job.context != "epilog_slurmctld":
        guesses.append((None, None))
    return guesses


def output_files(job: Job) -> list[str]:
    """The job's output files that exist, stdout first; [] when none can be found."""
    patterns = [p for p in (job.stdout, job.stderr) if p]
    if not patterns:  # SLURM's default name in the submit directory: the first that exists
        array = job.array_job or job.array_task
        defaults = ["slurm-%A_%a.out"] if array else ["slurm-%j.out", "slurm-%A_%a.out"]
        return next((files for d in defaults if (files := _resolve(d, job))), [])
    found: list[str] = []
    for pattern in patterns:
        found += [f for f in _resolve(pattern, job) if f not in found]
    return found


def _resolve(pattern: str, job: Job) -> list[str]:
    """The one existing file a pattern names for this job, as a list ([] if none or ambiguous)."""
    for guess in _array_guesses(job):
        path = expand_pattern(pattern, job, array=guess)
        if not os.path.isabs(path) and job.work_dir:
            path = os.path.join(job.work_dir, path)
        matches = glob.glob(glob.escape(path).replace("[*]", "*")) if "*" in path else [path]
        # a glob with more than one match cannot tell this job's file from the others
        if len(matches) == 1 and os.path.isfile(matches[0]):
            return matches
    return []


def tail_shows_failure(paths: list[str]) -> bool:
    """Whether the end of any output shows a kill, a failed step or a traceback."""
    for path in paths:
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - SNIFF_BYTES))
                if _FAILURE_TAIL.search(fh.read()):
                    return True
        except OSError:
            continue
    return False


@dataclass
class Outcome:
    """What the epilog did, as one line for its log, and the files it wrote."""

    message: str
    written: list[str] = field(default_factory=list)


def run(
    env: Mapping[str, str],
    *,
    budget_s: float = 10.0,
    report_dir: str | None = None,
    store: str | None = None,
    always: bool = False,
    rules: list[str] | None = None,
) -> Outcome:
    """Analyse the job described by ``env`` if it failed; write its report."""
    job = Job.from_env(env)
    if not job.id:
        return Outcome("no SLURM_JOB_ID in the environment: not run from a SLURM epilog")
    tag = f"job {job.id}"
    batch = job.batch_host()
    if job.context != "epilog_slurmctld" and job.node and batch and job.node != batch:
        return Outcome(f"{tag}: skipped on {job.node}; the output is analysed on the batch host {batch}")
    outputs = output_files(job)
    if not outputs:
        wanted = ", ".join(p for p in (job.stdout, job.stderr) if p) or "slurm-%j.out"
        return Outcome(f"{tag}: no output file found ({wanted} in {job.work_dir or '?'})")
    failed = job.failed()
    if not always and not failed and not tail_shows_failure(outputs):
        return Outcome(f"{tag}: skipped, exit {job.exit_status()} and no failure at the end of its output")
    # imported only now: most jobs end well, and deciding that must stay cheap
    from .api import analyze
    from .history import append

    report = analyze(outputs, rules=rules, budget_s=budget_s)
    v, ff = report.verdict, report.verdict.first_failure
    try:
        written = _write(report, job, outputs[0], report_dir)
    except OSError as exc:
        return Outcome(f"{tag}: {v.category}, but the report could not be written: {exc}")
    if store:
        from .batch import Options, fingerprint

        try:
            # with the fingerprint and version `batch` would give it, so a later batch over the archive skips this job
            made = Options(rules=tuple(rules or ()), budget_s=budget_s).version()
            paths = [os.path.abspath(p) for p in outputs]
            written.append(str(append(store, report, job=job.id, fingerprint=fingerprint(paths), rules_version=made)))
        except OSError as exc:
            return Outcome(f"{tag}: {v.category} -> {written[0]}; not added to the history: {exc}", written)
    where = "".join(f"; {x}" for x in (f"rank {ff.rank}" if ff.rank is not None else None, ff.node) if x)
    return Outcome(f"{tag}: {v.category} ({v.cause}{where}) -> {written[0]}", written)


def _write(report: Report, job: Job, stdout: str, report_dir: str | None) -> list[str]:
    """Write report JSON and Markdown, atomically, next to the output or into ``report_dir``."""
    from .report.render import markdown

    if report_dir:
        folder, stem = Path(report_dir), f"slurm-{job.id}"
    else:
        out = Path(stdout)
        folder, stem = out.parent, (out.stem if out.suffix in (".out", ".log", ".txt", ".err") else out.name)
    data = json.loads(report.to_json())  # to_json's guard: non-finite numbers become null, never bare NaN
    data["job"] = {
        "id": job.id,
        "user": job.user,
        "name": job.name,
        "nodes": job.nodelist,
        "exit": job.exit_status(),
        "analysed_on": socket.gethostname(),
    }
    head = f"Job {job.id}" + (f" ({job.name})" if job.name else "") + f", exit {job.exit_status()}, nodes {job.nodelist or '?'}\n\n"
    texts = {
        folder / f"{stem}.logsleuth.json": json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n",
        folder / f"{stem}.logsleuth.md": head + markdown(report),
    }
    folder.mkdir(parents=True, exist_ok=True)
    mode = os.stat(stdout).st_mode & 0o666  # no one may read the report who may not read the output
    for path, text in texts.items():
        write_text_atomic(path, text, mode)
    return [str(p) for p in texts]
