"""analyze(): the library entry point; wires ingest -> parse -> match -> reason -> report.

It never raises and keeps to its time budget (reading stops at READ_SHARE of it, so
the analysis of what was read fits in the rest; a read that hangs is given up):
an epilog calls it and must always get a report back.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import BinaryIO

import polars as pl

from . import __version__, classify, fuse, ingest, jobs, match, parse, reason, rulebook, stages
from .events import numbered
from .redact import redact_all, redact_frame
from .report.build import build
from .report.model import CandidateOut, Evidence, FirstFailure, InputOut, Report, Verdict


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
    started = time.monotonic()
    timer = stages.begin()
    if isinstance(paths, (str, os.PathLike)):  # one path given bare: a common slip, not an error
        paths = [paths]
    inputs: list[ingest.InputInfo] = []
    try:
        with timer.stage("start"):
            inputs = ingest.expand(paths)
            ruleset = rulebook.load(rules or ())
        events = load_events(inputs, ruleset, budget_s=budget_s, stdin=stdin, redact=redact)
        groups = jobs.group(events, inputs)
        if len(groups) < 2 or not split:
            report = _diagnose(events, inputs, ruleset, model, classifier, started)
            report.job = groups[0].job if len(groups) == 1 else None
            if len(groups) > 1:
                report.notes.append(
                    f"the inputs hold {len(groups)} jobs ({jobs.describe(groups)}), analysed together;"
                    " `logsleuth analyze` without --merge (or analyze_jobs) reports each apart"
                )
            reports = [report]
        else:
            reports = []
            for g in groups:
                report = _diagnose(
                    events.filter(pl.col("file").is_in(g.files)),
                    [i for i in inputs if i.file in g.files],
                    ruleset,
                    model,
                    classifier,
                    started,
                )
                report.job = g.job
                reports.append(report)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - the promise: a report, never a traceback (a Rust panic is no Exception)
        reports = [_failed_report(inputs, exc)]
    if not redact:
        return reports
    with timer.stage("report"):
        return [redact_all(r) for r in reports]


def _diagnose(
    events: pl.DataFrame,
    inputs: list[ingest.InputInfo],
    ruleset: rulebook.RuleSet,
    model: str | os.PathLike[str] | None,
    classifier: bool,
    started: float,
) -> Report:
    """Match, reason, fuse and build: one report from one job's events."""
    timer = stages.current()
    events = numbered(events)  # the event ids every stage names events by, given once
    with timer.stage("match"):
        hits = match.match(events, ruleset)
    with timer.stage("reason"):
        reasoning = reason.reason(events, hits, ruleset)
    clf_started = time.monotonic()
    with timer.stage("classify"):
        reasoning = fused(events, reasoning, model, enabled=classifier)
    stats = {
        "events": events.height,
        "hits": hits.height,
        "rules": len(ruleset.rules),
        "classifier_seconds": round(time.monotonic() - clf_started, 3),
        "seconds": round(time.monotonic() - started, 3),
    }
    with timer.stage("report"):
        return _honest(build(events, hits, reasoning, ruleset, inputs, version=__version__, stats=stats))


#: Input problems after which the rest of an input was not read.
#: Share of a time budget spent reading; the rest is for parsing, matching and reasoning,
#: whose work is bounded by the lines kept (ingest.MAX_KEPT_LINES).
READ_SHARE = 0.8

_CUT_SHORT = ("time budget ran out", "the rest was not read", "truncated gzip", "corrupt gzip")


def _honest(report: Report) -> Report:
    """Never an all-clear from what was not read: failures sit at the end of a log.

    Nothing readable gives ``unknown`` saying so; an input cut short (budget, read
    error, damaged gzip) marks the report ``partial`` and turns ``none`` into ``unknown``.
    """
    report.partial = any(any(cut in p for cut in _CUT_SHORT) for i in report.inputs for p in i.problems)
    if not report.readable:
        why = "No input could be read, so nothing was analysed; see the problems listed with the inputs."
    elif report.partial and report.verdict.category == "none":
        why = "No failure in what was read, but some input was not read to its end (see its problems): the failure may be in the rest."
    else:
        if report.partial:
            report.notes.append("some input was not read to its end: the verdict rests on what was read")
        return report
    report.verdict = replace(
        report.verdict, cause="unknown", category="unknown", confidence=0.0, summary=why, title="Not enough input", evidence=[], fix=[]
    )
    report.candidates = [CandidateOut("unknown", "unknown", 0.0)]
    report.notes.append(why)
    return report


def fused(
    events: pl.DataFrame, reasoning: reason.Reasoning, model: str | os.PathLike[str] | None, *, enabled: bool = True
) -> reason.Reasoning:
    """Fuse the classifier into the reasoning; without a usable model, say so and keep the rules' verdict."""

    def rules_only(why: str) -> reason.Reasoning:
        return replace(reasoning, notes=[*reasoning.notes, f"{why}: the verdict comes from the rules alone"])

    if not enabled:
        return rules_only("classifier disabled")
    try:
        loaded = classify.load(model)
        if loaded is not None:
            fuse.check(loaded)
    except classify.ModelError as exc:
        return rules_only(f"classifier model unusable ({exc})")
    if loaded is None:
        return rules_only(f"no classifier model at {classify.model_paths(model)[0]}")
    return fuse.fuse(events, reasoning, classify.predict(loaded, events), loaded)


def load_events(
    inputs: list[ingest.InputInfo],
    ruleset: rulebook.RuleSet,
    *,
    budget_s: float | None = None,
    stdin: BinaryIO | None = None,
    redact: bool = True,
) -> pl.DataFrame:
    """Ingest and parse: the event table for these inputs, identities resolved.

    Secrets are redacted here, once, so no output built on the table can leak them.
    """
    timer = stages.current()
    with timer.stage("ingest"):
        ingested = ingest.ingest(
            inputs,
            [*parse.KEYWORDS, *ruleset.keywords],
            deadline=ingest.deadline_from_budget(None if budget_s is None else budget_s * READ_SHARE),
            stdin=stdin,
        )
    with timer.stage("parse"):
        events = reason.resolve_identity(parse.build(ingested.lines, _years(inputs, ingested.lines)))
    if not redact:
        return events
    with timer.stage("redact"):
        return redact_frame(events)


def events_for(
    paths: Sequence[str | os.PathLike[str]],
    *,
    rules: Sequence[str | os.PathLike[str]] | None = None,
    redact: bool = True,
) -> tuple[pl.DataFrame, list[ingest.InputInfo]]:
    """The event table and input records, for `logsleuth events` and for people who query it."""
    inputs = ingest.expand(paths)
    return load_events(inputs, rulebook.load(rules or ()), redact=redact), inputs


def _years(inputs: list[ingest.InputInfo], lines: pl.DataFrame) -> dict[str, int]:
    """glog stamps have no year: take it from the first fully dated line of the same file
    (a SLURM or ISO stamp), else of any input, else the file's modification year (or this year).

    A copied or archived log has a new modification time; guessing the year from it would
    put a glog line before a dated SLURM line printed seconds later.
    """
    dated = (
        lines.select("file", pl.col("raw").str.extract(_DATED_YEAR, 1).cast(pl.Int32, strict=False).alias("year"))
        .drop_nulls("year")
        .group_by("file", maintain_order=True)
        .first()
    )
    seen = dict(zip(dated.get_column("file").to_list(), dated.get_column("year").to_list(), strict=True))
    fallback = next(iter(seen.values()), None)
    now = datetime.now().year

    @functools.lru_cache(maxsize=256)
    def year_of(minute: int) -> int:  # thousands of per-rank files are written in the same few minutes
        return datetime.fromtimestamp(minute * 60).year  # (time zones differ from UTC by whole quarter hours)

    return {i.file: seen.get(i.file) or fallback or (year_of(int(i.mtime) // 60) if i.mtime else now) for i in inputs}


#: A full date and time of day (SLURM, ISO, NCCL WARN stamps): the year group is what _years takes.
_DATED_YEAR = r"\b((?:19|20)\d\d)-[01]\d-[0-3]\d[T ][0-2]\d:[0-5]\d"


def _failed_report(inputs: list[ingest.InputInfo], exc: BaseException) -> Report:
    if isinstance(exc, rulebook.RuleError):  # the caller's rules, not logsleuth, are at fault
        note = f"invalid rules: {exc}"
        summary = "The rules given could not be loaded, so nothing was analysed; the note says what is wrong with them."
        fix = ["Fix the rule files named in the note (`logsleuth rules check FILE` lists every problem)."]
    else:
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        spot = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
        note = f"internal error{spot}: {type(exc).__name__}: {exc}"
        summary = "logsleuth could not finish the analysis; this is a bug in logsleuth, not in your job."
        fix = ["Report this with the note below and, if you can, the logs."]
    return unfinished(inputs, note=note, summary=summary, fix=fix)


def unfinished(inputs: Sequence[ingest.InputInfo], *, note: str, summary: str, fix: list[str]) -> Report:
    """The report of an analysis that could not finish: cause ``unknown``, every input kept, the reason in a note."""
    verdict = Verdict(
        cause="unknown",
        category="unknown",
        confidence=0.0,
        first_failure=FirstFailure(),
        evidence=list[Evidence](),
        summary=summary,
        fix=fix,
        title="Analysis failed",
    )
    return Report(
        verdict=verdict,
        candidates=[CandidateOut("unknown", "unknown", 0.0)],
        inputs=[InputOut(i.file, i.bytes, i.lines, list(i.problems)) for i in inputs],
        notes=[note],
        version=__version__,
    )
