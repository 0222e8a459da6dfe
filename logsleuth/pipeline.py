"""The pipeline: ingest -> parse -> match -> reason -> classify/fuse -> report, wired in one place.

:func:`run` is the only code that chains the stages. Everything that analyses logs goes
through it and stops at the stage it needs: :func:`logsleuth.analyze` and ``logsleuth
analyze`` (every stage, one report per job), ``logsleuth events`` (the event table),
``logsleuth repro`` (the event table and the report of one read), ``rules check`` and
``rules coverage`` (texts, up to the rule hits), training and evaluation (up to the
rules' reasoning, before the classifier), the tests and the benchmarks.

Inputs are files (paths, globs, folders, ``-`` for stdin) or named texts, each read as
if it were a file. The result is an :class:`Analysis` per job: what was read, the event
table, the rule hits, the reasoning and the report, as far as the run went.

With ``never_raise=True`` (what :func:`logsleuth.analyze` promises an epilog) no
exception escapes: an analysis that fails gives a report that says so. Reading stops
at :data:`READ_SHARE` of ``budget_s`` so the rest of the stages fit in the budget.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import BinaryIO, Literal

import polars as pl

from . import __version__, classify, fuse, ingest, jobs, match, parse, reason, rulebook, stages
from .events import numbered
from .redact import redact_all, redact_frame
from .report.build import build
from .report.model import CandidateOut, Evidence, FirstFailure, InputOut, Report, Verdict

#: The stage a run stops after: ``parse`` (the event table, identities resolved), ``match``
#: (plus the rule hits), ``reason`` (plus the rules' reasoning, no classifier) or ``report``
#: (the classifier fused in and the report built, one per job).
Stage = Literal["parse", "match", "reason", "report"]
_ORDER: tuple[Stage, ...] = ("parse", "match", "reason", "report")

Paths = Sequence[str | os.PathLike[str]] | str | os.PathLike[str]

#: Share of a time budget spent reading; the rest is for parsing, matching and reasoning,
#: whose work is bounded by the lines kept (ingest.MAX_KEPT_LINES).
READ_SHARE = 0.8

#: Input problems after which the rest of an input was not read.
_CUT_SHORT = ("time budget ran out", "the rest was not read", "truncated gzip", "corrupt gzip")


@dataclass
class Analysis:
    """What the pipeline made of one job's inputs, as far as it ran (later stages are None)."""

    inputs: list[ingest.InputInfo]
    events: pl.DataFrame
    hits: pl.DataFrame | None = None
    reasoning: reason.Reasoning | None = None  # the classifier fused in when the run reached ``report``
    report: Report | None = None


def run(
    paths: Paths = (),
    *,
    texts: Mapping[str, str] | None = None,
    rules: rulebook.RuleSet | Sequence[str | os.PathLike[str]] | None = None,
    until: Stage = "report",
    budget_s: float | None = None,
    stdin: BinaryIO | None = None,
    redact: bool = True,
    model: str | os.PathLike[str] | None = None,
    classifier: bool = True,
    split: bool = False,
    tail: bool = True,
    year: int | None = None,
    one_job: bool = True,
    never_raise: bool = False,
) -> list[Analysis]:
    """Run the stages up to ``until`` on files or texts; one :class:`Analysis`, or one per job.

    ``paths``: files, globs, directories, ``.gz`` files, or ``-`` for ``stdin``.
    ``texts``: instead of files, name -> text, each read as a file of that name;
    ``tail=False`` keeps only the lines the prefilter keeps (rule checks), and ``year``
    dates glog stamps that no dated line of the text dates (default: as for files).
    ``one_job=False``: the texts are unrelated excerpts (rule examples, catalogued messages),
    so ranks and nodes are not resolved across them; only their own lines name them.
    ``rules``: a loaded rule set, or extra rule folders or files on top of the built-in ones.
    ``budget_s``: stop reading at :data:`READ_SHARE` of it (the end of a large file is read first).
    ``redact``: secrets are removed from the event table (so nothing built on it leaks them) and
    from the reports. ``model``/``classifier``: the classifier fused in at the ``report`` stage.
    ``split``: one analysis per SLURM job the inputs hold (else one, with a note when they hold
    several). ``never_raise``: an error gives an analysis whose report says so (``until="report"``).
    """
    started = time.monotonic()
    timer = stages.begin()
    if isinstance(paths, (str, os.PathLike)):  # one path given bare: a common slip, not an error
        paths = [paths]
    inputs: list[ingest.InputInfo] = []
    events = pl.DataFrame()
    try:
        with timer.stage("start"):
            inputs = [] if texts is not None else ingest.expand(paths)
            ruleset = rules if isinstance(rules, rulebook.RuleSet) else rulebook.load(rules or ())
        if texts is not None:
            events, inputs = _read_texts(texts, ruleset, tail=tail, year=year, one_job=one_job)
        else:
            events = _read(inputs, ruleset, budget_s=budget_s, stdin=stdin)
        if redact:
            with timer.stage("redact"):
                events = redact_frame(events)
        if until == "parse":
            return [Analysis(inputs, events)]
        if until != "report":
            return [_diagnose(Analysis(inputs, events), ruleset, until=until)]
        groups = jobs.group(events, inputs)
        if len(groups) < 2 or not split:
            one = _diagnose(Analysis(inputs, events), ruleset, model=model, classifier=classifier, started=started)
            assert one.report is not None
            one.report.job = groups[0].job if len(groups) == 1 else None
            if len(groups) > 1:
                one.report.notes.append(
                    f"the inputs hold {len(groups)} jobs ({jobs.describe(groups)}), analysed together;"
                    " `logsleuth analyze` without --merge (or analyze_jobs) reports each apart"
                )
            analyses = [one]
        else:
            analyses = []
            for g in groups:
                part = Analysis([i for i in inputs if i.file in g.files], events.filter(pl.col("file").is_in(g.files)))
                analysis = _diagnose(part, ruleset, model=model, classifier=classifier, started=started)
                assert analysis.report is not None
                analysis.report.job = g.job
                analyses.append(analysis)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - the promise: a report, never a traceback (a Rust panic is no Exception)
        if not never_raise:
            raise
        analyses = [Analysis(inputs, events, report=_failed_report(inputs, exc))]
    if redact:
        with timer.stage("report"):
            for analysis in analyses:
                if analysis.report is not None:
                    analysis.report = redact_all(analysis.report)
    return analyses


def _read(inputs: list[ingest.InputInfo], ruleset: rulebook.RuleSet, *, budget_s: float | None, stdin: BinaryIO | None) -> pl.DataFrame:
    """Ingest (with the prefilter) and parse files: the event table, identities resolved."""
    timer = stages.current()
    with timer.stage("ingest"):
        ingested = ingest.ingest(
            inputs,
            [*parse.KEYWORDS, *ruleset.keywords],
            deadline=ingest.deadline_from_budget(None if budget_s is None else budget_s * READ_SHARE),
            stdin=stdin,
        )
    with timer.stage("parse"):
        return reason.resolve_identity(parse.build(ingested.lines, _years(inputs, ingested.lines)))


def _read_texts(
    texts: Mapping[str, str], ruleset: rulebook.RuleSet, *, tail: bool, year: int | None, one_job: bool
) -> tuple[pl.DataFrame, list[ingest.InputInfo]]:
    """Ingest and parse texts, each as its own file: the event table and the input records."""
    timer = stages.current()
    keywords = [*parse.KEYWORDS, *ruleset.keywords]
    with timer.stage("ingest"):
        read = [ingest.ingest_text(text, keywords, name=name, tail=tail) for name, text in texts.items()]
        inputs = [i for r in read for i in r.inputs]
        lines = pl.concat([r.lines for r in read]) if read else pl.DataFrame(schema=ingest.LINE_SCHEMA)
    with timer.stage("parse"):
        years = dict.fromkeys(texts, year) if year is not None else _years(inputs, lines)
        events = parse.build(lines, years)
        return reason.resolve_identity(events) if one_job else events, inputs


def _diagnose(
    analysis: Analysis,
    ruleset: rulebook.RuleSet,
    *,
    until: Stage = "report",
    model: str | os.PathLike[str] | None = None,
    classifier: bool = True,
    started: float | None = None,
) -> Analysis:
    """Match, reason, fuse and build on one job's events, up to ``until``."""
    timer = stages.current()
    analysis.events = events = numbered(analysis.events)  # the event ids every stage names events by, given once
    with timer.stage("match"):
        analysis.hits = hits = match.match(events, ruleset)
    if _ORDER.index(until) < _ORDER.index("reason"):
        return analysis
    with timer.stage("reason"):
        analysis.reasoning = reasoning = reason.reason(events, hits, ruleset)
    if until != "report":
        return analysis
    clf_started = time.monotonic()
    with timer.stage("classify"):
        analysis.reasoning = reasoning = fused(events, reasoning, model, enabled=classifier)
    stats = {
        "events": events.height,
        "hits": hits.height,
        "rules": len(ruleset.rules),
        "classifier_seconds": round(time.monotonic() - clf_started, 3),
        "seconds": round(time.monotonic() - (clf_started if started is None else started), 3),
    }
    with timer.stage("report"):
        analysis.report = _honest(build(events, hits, reasoning, ruleset, analysis.inputs, version=__version__, stats=stats))
    return analysis


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
