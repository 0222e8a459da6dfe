"""Across ranks: who failed first, who only suffered, and what the cause is.

Each event keeps its strongest rule hit. A hit's role says how to read it:
``primary`` (a root cause in itself: an exception in user code, an OOM kill, a
time limit), ``consequence`` (what victims print: peer closed the connection,
watchdog timeouts, SIGTERM from the launcher) or ``context`` (supports a
verdict, never makes one).

Rules see one line at a time; the cascade needs the whole job. So before
ranking, exit records are read in the light of their rank's other lines: a
worker the launcher killed while tearing the job down (``Sending process N
closing signal SIGTERM``, exit -15, ``srun: ... Terminated`` after another
task failed) is a victim; an exit whose rank printed its own error is only a
summary of that error (SIGABRT after a watchdog timeout is the watchdog's
abort). What is left is each rank's own failure. The verdict is the earliest
strong primary failure; then a failure no rule explains (the rank is named,
the cause is unknown); then, when only victims' symptoms are in the logs, the
rank that never reached the stalled collective; and a node whose software or
network disagrees with the others explains symptoms that name no culprit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import polars as pl

from logsleuth.events import (
    AGENT_SIGNAL,
    AGENT_TEARDOWN,
    CHILD_FAILED,
    CPP_STACK,
    CPP_TERMINATE,
    DETAIL_KINDS,
    DIST_MEMBER,
    EID,
    EXCEPTION,
    EXIT_KINDS,
    FAILURE_KINDS,
    GLOO_TIMEOUT,
    LINE,
    NCCL_INFO,
    NCCL_INIT,
    NCCL_NET,
    NCCL_UNWIND,
    NCCL_WARN,
    SLURM_CANCEL,
    SLURM_FAILED,
    SLURM_MEMORY_ERROR,
    SLURM_NODE_FAILURE,
    SLURM_OOM,
    SRUN_EXIT,
    TRACEBACK,
    WATCHDOG_TIMEOUT,
    numbered,
)
from logsleuth.hostlist import HostlistError, collect_ranges, expand_ranges
from logsleuth.parse.identity import per_node_files, rank_table
from logsleuth.parse.python import CUT_OFF
from logsleuth.rulebook import RuleSet

from . import consistency, hangs, timeline

#: An event of a failure kind at error level: a process or the job failed here.
IS_FAILURE = pl.col("kind").is_in(FAILURE_KINDS) & pl.col("level").is_in(["error", "fatal"])
#: The exception torchrun's launcher logs from an error file (``ERROR:...error_handler:{ "message": ...``):
#: written when a process died of an uncaught exception (elastic's ``@record``), never for a handled one.
LAUNCHER_ERROR_RECORD = (pl.col("kind") == EXCEPTION) & (pl.col("source") == "launcher") & (pl.col("level") == "error")
#: An exception of Ray's own (ray/exceptions.py: RaySystemError, ActorDiedError, WorkerCrashedError ...) on a line
#: of its own: Ray raises them in the caller of a task or actor that failed, so the line is that failure's report.
RAY_ERROR = (pl.col("kind") == EXCEPTION) & pl.col("exc_type").str.starts_with("ray.exceptions.")


def failure_signals(events: pl.DataFrame, hits: pl.DataFrame | None = None) -> pl.Series:
    """Per event: does it show that something failed, whether or not a rule explains it?

    A job reads as ``none`` only when no event does. Besides the failure kinds
    (tracebacks, watchdog timeouts, exit records), a non-zero exit status on a
    line of its own, an NCCL error return (``init.cc:1234 -> 2``, or PyTorch's
    ``NCCL error: unhandled system error`` / ``ncclSystemError: ...``), a c10 exception's
    stack dump (``Exception raised from <fn> at <file>:<line>``, ``frame #0: c10::Error::Error(``,
    parse.torch's cpp_stack events), the error
    record torchrun's launcher logs for an exception (its error-file JSON), an exception of Ray's own
    (``ray.exceptions.RaySystemError: System error: ...``: the report of a failed task), a fatal
    line (an allocator abort), an error line that ends its file (a log cut right
    after its error), a connection still retried when its log ends, and a log that ends
    while processes are still joining the group (fewer members than its world) all count.
    With the rule ``hits`` at hand, an NCCL WARN that no rule knows (not even as harmless
    context) counts too: NCCL warns just before it returns an error. (A traceback cut
    before its exception line is already a traceback event: parse.python folds it.)
    """
    if events.is_empty():
        return pl.Series("failure", [], dtype=pl.Boolean)
    kind, level = pl.col("kind"), pl.col("level")
    last = pl.col("line") == pl.col("line").max().over("file")
    members = pl.col("rank").filter(kind == DIST_MEMBER).n_unique()  # over every file: a rank may write its own
    still_joining = last & (kind == DIST_MEMBER) & (members < pl.col("nranks"))
    ends_in_error = still_joining | last & (
        (
            kind.is_in([LINE, EXCEPTION])
            & (level == "error")
            & ~pl.col("shutdown_noise").fill_null(False)
            & ~pl.col("glog_below_error").fill_null(False)
        )
        | (kind.is_in([LINE, NCCL_INFO, NCCL_WARN]) & pl.col("retrying").fill_null(False))
    )
    nccl_error = level.is_in(["error", "fatal"]) & pl.col("nccl_error").fill_null(False)
    signal = (
        IS_FAILURE
        | (kind == CPP_STACK)
        | (kind.is_in([NCCL_UNWIND, LINE]) & (pl.col("exit_code").fill_null(0) != 0))
        | (level == "fatal")
        | ends_in_error
        | nccl_error
        | LAUNCHER_ERROR_RECORD
        | RAY_ERROR
    )
    out = events.select(signal.fill_null(False).alias("failure")).to_series()
    if hits is not None:
        known = hits.get_column("eid").unique().implode()
        unknown_warn = numbered(events).select(((kind == NCCL_WARN) & ~pl.col("eid").is_in(known)).fill_null(False)).to_series()
        out = (out | unknown_warn).alias("failure")
    return out


#: Signals launchers send to stop the survivors.
TEARDOWN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
#: Exceptions that launchers raise about their children, never a cause in themselves.
LAUNCHER_EXCEPTIONS = r"(?:ChildFailedError|SignalException|CalledProcessError|ProcessExitedException|ProcessRaisedException)$"
#: Primary hits at least this strong compete on time: the earliest is the root cause.
#: A hit's weight says how sure its line is of its cause, not which cause comes first.
STRONG = 0.5
EVIDENCE_LIMIT = 6
#: A stalled collective with a SeqNum above this shows the job had been running:
#: set-up problems (versions, interfaces) are then unlikely to be the cause.
PROGRESS_SEQ = 2


@dataclass
class Candidate:
    """A cause with the events that support it, best first."""

    cause: str
    category: str
    role: str
    weight: float
    confidence: float
    eids: list[int]
    rules: list[str]
    ranks: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    summary: str | None = None  # a sentence the reasoner wrote (hangs, disagreements)
    first: dict[str, object] | None = None  # first failure, when not its first event's


@dataclass
class RankState:
    """One rank's part in the failure."""

    rank: int
    node: str | None
    status: str  # culprit | failed | hung | victim | finished | unknown
    evidence: tuple[str, int] | None = None  # file, line
    local_rank: int | None = None
    pid: int | None = None
    time: str | None = None
    kind: str | None = None
    cause: str | None = None
    note: str | None = None  # why this status, in a few words
    seq: int | None = None  # last collective SeqNum the rank reported
    last: tuple[str, int, str] | None = None  # the last line it printed: file, line, text


@dataclass
class Suspect:
    """A node the evidence points at, and why."""

    node: str
    reasons: list[str]
    causes: list[str]
    ranks: list[int]
    eids: list[int]


@dataclass
class Reasoning:
    """What the reasoner concluded; the report is rendered from this and the events."""

    candidates: list[Candidate]
    failed: bool
    first_eid: int | None
    first_failure: dict[str, object]
    ranks: list[RankState]
    notes: list[str]
    hang: hangs.Hang | None = None
    suspects: list[Suspect] = field(default_factory=list)
    ordering: str = "line-order"
    ordering_note: str = ""
    offsets: dict[str, float] = field(default_factory=dict)
    handled: list[int] = field(default_factory=list)  # exceptions the process survived (events it kept working after)
    signals: list[int] = field(default_factory=list)  # events that show a failure, explained or not (failure_signals)
    active: bool = True  # a failure, or the job at work: an alarming line, progress or an ending (failed or shows_activity)
    ended: bool = False  # a line says the job or a worker of it ended well (shows_ending)


def reason(events: pl.DataFrame, hits: pl.DataFrame, rules: RuleSet) -> Reasoning:
    """Rank the causes, find the first failure and every rank's part; never raises on empty input."""
    notes: list[str] = []
    ev = numbered(events)
    best = _best_hits(hits)
    focus = ev.join(best, on="eid", how="left").filter(IS_FAILURE | (pl.col("hit_role").is_not_null() & (pl.col("hit_role") != "context")))
    tl = timeline.build(events, focus.get_column("eid"))
    ev = ev.join(tl.order, on="eid", how="left").join(best, on="eid", how="left")
    ev = _read_exits(_still_retrying(ev), events, rules)
    handled: list[int] = []
    signal = failure_signals(events, hits)
    if _launcher_saw_no_failure(ev):
        # an error the job survived (a caught, logged exception): the launcher reported no death
        ev = ev.with_columns(pl.lit(False).alias("unexplained"), (pl.col("role") == "primary").fill_null(False).alias("own"))
        failed = bool(best.filter(pl.col("hit_role") != "context").height)
    else:
        handled = _handled(ev)
        if handled:
            # a traceback after which the same process kept working: logged and survived, a note
            where = ev.filter(pl.col("eid").is_in(handled)).select("file", "line").row(0)
            notes.append(f"{len(handled)} exception(s) were handled: the process kept working after them (first at {where[0]}:{where[1]})")
            ev = ev.with_columns(
                pl.when(pl.col("eid").is_in(handled)).then(pl.lit("context")).otherwise(pl.col("role")).alias("role"),
                pl.when(pl.col("eid").is_in(handled))
                .then(pl.lit("handled: the process kept working"))
                .otherwise(pl.col("why"))
                .alias("why"),
                pl.col("unexplained") & ~pl.col("eid").is_in(handled),
                pl.col("own") & ~pl.col("eid").is_in(handled),
            )
        live = signal & ~numbered(events).get_column(EID).is_in(handled)
        failed = bool(live.any()) or bool(best.filter((pl.col("hit_role") != "context") & ~pl.col("eid").is_in(handled)).height)

    attributed = _attributed(ev, events)
    failing = set(attributed.filter(pl.col("own")).get_column("rank").unique().to_list())
    alive = set(attributed.get_column("rank").unique().to_list())
    stopped = set(attributed.filter(pl.col("why") == "stopped by the launcher").get_column("rank").unique().to_list())
    hang = hangs.analyze(ev, alive, failing, stopped, waiting=rules.waiting) if failed else None
    findings = consistency.check(events)

    candidates = _candidates(ev, rules)
    lead = _lead(candidates, ev, hang, rules)
    if lead is not None:
        lead = _refine(lead, candidates, ev, events, hang, rules, notes)
        # a hang candidate absorbs the rule candidate of the same cause it was built from
        candidates = [lead] + [c for c in candidates if c is not lead and not (lead.role == "hang" and c.cause == lead.cause)]
    candidates = _with_findings(candidates, findings, hang, ev, rules, failed)
    candidates = _hardware_first(candidates, ev, rules, notes)
    candidates = _init_file_first(candidates, ev, rules, notes)
    if candidates:
        _confidence(candidates)
        if candidates[0].cause == "unknown":
            notes.append("no rule explains the first failure; it is shown with its rank and lines")
    elif failed:
        notes.append("the job failed, but no rule recognises the failure")
    first_eid = candidates[0].eids[0] if candidates and candidates[0].eids else None
    first = _first_failure(ev, candidates[0] if candidates else None)
    lead_now = candidates[0] if candidates else None
    ranks = _rank_states(
        attributed,
        events,
        first,
        hang,
        failed,
        lead_now.role if lead_now else None,
        lead_now.category if lead_now else None,
        lead_now.cause if lead_now else None,
    )
    if failed and lead_now is not None and lead_now.category in rules.ended_from_outside and not (hang and hang.hung):
        ranks = _stalled_by_progress(events, ranks, notes)
    if failed and tl.ordering != "timestamps" and events.get_column("file").n_unique() > 1:
        notes.append(f"ordering across files: {tl.note}")
    return Reasoning(
        candidates=candidates,
        failed=failed,
        first_eid=first_eid,
        first_failure=first,
        ranks=ranks,
        notes=notes,
        hang=hang,
        suspects=_suspects(events, candidates, findings, ranks, hang, first),
        ordering=tl.ordering,
        ordering_note=tl.note,
        offsets=tl.offsets,
        handled=handled,
        signals=[int(e) for e in signal.arg_true().to_list() if e not in handled],
        active=failed or shows_activity(ev),
        ended=shows_ending(ev),
    )


def _still_retrying(ev: pl.DataFrame) -> pl.DataFrame:
    """A connection a rule knows as a retry (context: c10d's or NCCL's "failed to connect ...,
    retrying") that is still being retried when its log ends: the process never reached its
    peer, so the retries of that file are its failure (a weak primary: any stronger failure wins)."""
    last = pl.col("line") == pl.col("line").max().over("file")
    retrying = last & (pl.col("hit_role") == "context") & pl.col("retrying").fill_null(False)
    ended = ev.filter(retrying.fill_null(False)).select("file", "rule").unique()
    if ended.is_empty():
        return ev
    same = ev.select("file", "rule").join(ended.with_columns(pl.lit(True).alias("_r")), on=["file", "rule"], how="left")
    promote = same.get_column("_r").fill_null(False) & (ev.get_column("hit_role") == "context").fill_null(False)
    return ev.with_columns(pl.when(promote).then(pl.lit("primary")).otherwise(pl.col("hit_role")).alias("hit_role"))


#: Steps behind the furthest rank at which a rank counts as stalled (one step apart is timing).
STALL_STEPS = 2
#: How a rank found stalled by its progress lines is noted (the suspects read it back).
_STALLED = "last progress at step"


def _stalled_by_progress(events: pl.DataFrame, ranks: list[RankState], notes: list[str]) -> list[RankState]:
    """Ranks whose last progress step is well behind the others' (a minority of at least three
    ranks printing steps): the job hung there, and the others waited until it was ended. They
    become ``hung`` with their last step in the note; the other ranks stay victims."""
    last = events.filter(pl.col("step").is_not_null() & pl.col("rank").is_not_null()).group_by("rank").agg(pl.col("step").max())
    if last.height < 3:
        return ranks
    top = int(last.get_column("step").max())  # type: ignore[arg-type]
    behind = last.filter(pl.col("step") <= top - STALL_STEPS).sort("step", "rank")
    if behind.is_empty() or behind.height * 2 >= last.height:
        return ranks
    stalled = {int(r): int(s) for r, s in behind.select("rank", "step").iter_rows()}
    notes.append(
        "progress stopped first on rank(s) "
        + ", ".join(f"{r} (step {s})" for r, s in stalled.items())
        + f"; the other ranks reached step {top}: look there for the hang"
    )
    out = []
    for st in ranks:
        if st.rank in stalled and st.status in ("victim", "unknown", "finished"):
            st = replace(st, status="hung", note=f"{_STALLED} {stalled[st.rank]} (others: {top})")
        out.append(st)
    return out


#: Launcher reports of a death: any of them means the job did fail.
_DEATH_REPORTS = (*EXIT_KINDS, SLURM_CANCEL, SLURM_OOM, SLURM_FAILED, SLURM_MEMORY_ERROR, SLURM_NODE_FAILURE, WATCHDOG_TIMEOUT)
_DIED = pl.col("kind").is_in(_DEATH_REPORTS) | LAUNCHER_ERROR_RECORD


def _launcher_saw_no_failure(ev: pl.DataFrame) -> bool:
    """The launcher's own output is in the inputs (torchrun's log lines, srun's labels) and it
    reported no worker's death: errors printed along the way were survived."""
    present = ev.filter((pl.col("source") == "launcher") | pl.col("task").is_not_null()).height > 0
    if not present or not ev.filter(_DIED).is_empty():
        return False
    # and every file went on with ordinary output after its last error (a cut-off log did not)
    ordinary = (pl.col("kind") == LINE) & (pl.col("level") == "info")
    per_file = ev.group_by("file").agg(
        pl.col("line").filter(IS_FAILURE).max().alias("_err"), pl.col("line").filter(ordinary).max().alias("_ok")
    )
    return per_file.filter(pl.col("_err").is_not_null() & (pl.col("_ok").is_null() | (pl.col("_ok") < pl.col("_err")))).is_empty()


#: An ordinary output line that shows training going on (not a source line of a traceback printed unfolded).
_PROGRESS_LINE = (pl.col("kind") == LINE) & (pl.col("level") == "info") & pl.col("progress")


def shows_activity(ev: pl.DataFrame) -> bool:
    """Do the logs show the job at work, so that finding no failure in them means something?

    A log with no failure signal reads as ``none`` only if it shows more than set-up
    chatter: a warning or error (the alarming line a user asks about, judged harmless),
    a line a rule explains, training progress (steps, epochs, a loss, a progress bar) or
    an ending (torchelastic's SUCCEEDED). A paste of NCCL's initialisation lines alone,
    or of a launcher's banner, stops before anything happened: its failure, if any, is
    after the last line, and "the job ran to completion" would be a guess."""
    if ev.is_empty():
        return False
    hit = pl.col("hit_role").is_not_null() if "hit_role" in ev.columns else pl.lit(False)
    at_work = (
        pl.col("level").is_in(["warning", "error", "fatal"])
        | hit
        | pl.col("step").is_not_null()
        | _PROGRESS_LINE
        | pl.col("ended_well").fill_null(False)
    )
    return bool(ev.select(at_work.fill_null(False).any()).item())


def shows_ending(ev: pl.DataFrame) -> bool:
    """Does a line say the job, or a worker of it, ended well? Without one, "no failure found"
    means only that the lines read show none: a job that hung or was killed silently reads the same."""
    return not ev.is_empty() and bool(ev.select(pl.col("ended_well").fill_null(False).any()).item())


def _handled(ev: pl.DataFrame) -> list[int]:
    """Tracebacks the process survived: no process of the job died, and the same rank (or, in
    single-process output, the same file) went on making progress (steps, epochs, loss) after each.

    Only whole tracebacks count: a bare exception line with text after it is usually a
    pasted fragment whose message runs on over several lines, not a survived error.

    Where several ranks write to one file without rank prefixes, an unranked traceback
    cannot be tied to the process that kept printing, so it is never read as handled.
    """
    if not ev.filter(_DIED).is_empty():
        return []
    # a join line names its rank, but says nothing about who wrote the unprefixed lines around it
    said = ev.filter(pl.col("rank").is_not_null() & (pl.col("kind") != DIST_MEMBER))
    ranked_files = said.get_column("file").unique().to_list()
    multi_rank = said.get_column("rank").n_unique() > 1
    # the same process: a traceback whose writer is known (Ray's "(Worker pid=N)") is survived only by that pid's progress
    ordinary = ev.filter(_PROGRESS_LINE).group_by("file", "rank", "pid").agg(pl.col("line").max().alias("_last_ok"))
    tb = ev.filter((pl.col("kind") == TRACEBACK) & pl.col("level").is_in(["error", "fatal"]))
    if tb.is_empty():
        return []
    joined = tb.join(ordinary, on=["file", "rank", "pid"], how="left", nulls_equal=True)
    ok = (pl.col("_last_ok") > pl.col("line")).fill_null(False) & (
        pl.col("rank").is_not_null() | (~pl.col("file").is_in(ranked_files) & pl.lit(not multi_rank))
    )
    survived = joined.filter(ok)
    # the same exception seen again through another file (torchrun --tee writes it to the console
    # and to the rank's stderr.log) is the same survived exception
    handled = tb.filter(
        pl.col("message").is_in(survived.get_column("message").implode())
        & (pl.col("rank").is_null() | pl.col("rank").is_in(survived.get_column("rank").drop_nulls().implode()))
    ).get_column("eid")
    # every error of the job must be survived for any to count as handled
    others = ev.filter(IS_FAILURE & ~pl.col("eid").is_in(handled))
    return [] if not others.is_empty() else [int(e) for e in handled.to_list()]


def _best_hits(hits: pl.DataFrame) -> pl.DataFrame:
    """Per event, its strongest hit (ties: primary before consequence before context)."""
    role_rank = pl.col("role").replace_strict({"primary": 0, "consequence": 1, "context": 2}, return_dtype=pl.Int8)
    return (
        hits.sort(["eid", "weight", role_rank], descending=[False, True, False])
        .group_by("eid", maintain_order=True)
        .first()
        .select("eid", "rule", "cause", "category", pl.col("role").alias("hit_role"), "weight")
    )


def _attributed(ev: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """The events with a rank, plus one row per rank of each multi-task srun exit line."""
    multi = ev.filter((pl.col("kind") == SRUN_EXIT) & pl.col("rank").is_null()).drop("rank")
    expanded = multi.join(_exit_ranks(ev, events), on="eid").with_columns(pl.col("rank").cast(pl.Int32))
    return pl.concat([ev.filter(pl.col("rank").is_not_null()), expanded.select(ev.columns)])


def _exit_ranks(ev: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """eid -> the ranks an exit record covers (srun task ranges expand; one loop per srun line: few)."""
    agents = per_node_files(events)
    rows: list[tuple[int, int]] = []
    srun = ev.filter((pl.col("kind") == SRUN_EXIT) & pl.col("tasks").is_not_null() & ~pl.col("file").is_in(list(agents)))
    for eid, tasks in srun.select("eid", "tasks").iter_rows():
        try:
            rows.extend((eid, t) for t in expand_ranges(tasks))
        except HostlistError:
            continue
    single = ev.filter(pl.col("kind").is_in(EXIT_KINDS) & pl.col("rank").is_not_null() & (pl.col("kind") != SRUN_EXIT)).select(
        "eid", pl.col("rank").cast(pl.Int64)
    )
    listed = pl.DataFrame(rows, schema={"eid": pl.UInt32(), "rank": pl.Int64()}, orient="row")
    return pl.concat([single.cast({"eid": pl.UInt32}), listed])


def _read_exits(ev: pl.DataFrame, events: pl.DataFrame, rules: RuleSet) -> pl.DataFrame:
    """Set each event's final ``role``, ``why`` it was reread, and whether it is its rank's ``own`` failure."""
    is_exit = pl.col("kind").is_in(EXIT_KINDS)
    teardown = ev.filter((pl.col("kind") == AGENT_TEARDOWN) & pl.col("pid").is_not_null()).select(
        pl.col("file"), pl.col("task").fill_null(-1).alias("_task"), "pid", pl.lit(True).alias("_closed")
    )
    ev = (
        ev.with_columns(pl.col("task").fill_null(-1).alias("_task"))
        .join(teardown.unique(), on=["file", "_task", "pid"], how="left")
        .drop("_task")
        .with_columns(pl.col("_closed").fill_null(False))
    )
    # srun reports the first task to die first; later SIGKILL/SIGTERM exits are its teardown
    first_srun = ev.filter(pl.col("kind") == SRUN_EXIT).group_by("file").agg(pl.col("line").min().alias("_first_srun"))
    cancelled = ev.filter(pl.col("kind") == SLURM_CANCEL).height > 0
    ev = ev.join(first_srun, on="file", how="left")
    signalled = pl.col("signal").is_in(["SIGKILL", "SIGTERM"]).fill_null(False)
    torn = (
        is_exit & (pl.col("signal").is_in(TEARDOWN_SIGNALS).fill_null(False) | pl.col("_closed"))
        | ((pl.col("kind") == SRUN_EXIT) & signalled & ((pl.col("line") > pl.col("_first_srun")) | pl.lit(cancelled)))
        | ((pl.col("kind") == TRACEBACK) & pl.col("exc_type").str.contains(r"SignalException$").fill_null(False))
    )
    agents = list(per_node_files(events))
    launcher = (pl.col("kind") == TRACEBACK) & pl.col("exc_type").str.contains(LAUNCHER_EXCEPTIONS).fill_null(False)
    # where srun starts one torchrun per node, "task 0: Exited with exit code 1" is that torchrun reporting its workers
    launcher = launcher | ((pl.col("kind") == SRUN_EXIT) & pl.col("file").is_in(agents) & pl.col("signal").is_null())
    # "terminate called after throwing ..." only announces the what(): line that follows it
    header = pl.col("kind") == CPP_TERMINATE
    ev = ev.with_columns(torn.fill_null(False).alias("_torn"), launcher.alias("_launcher"), header.alias("_header"))

    # what each rank said itself (not counting exit records)
    said = ev.filter(~is_exit & pl.col("rank").is_not_null() & ~pl.col("_launcher") & ~pl.col("_torn")).group_by("rank")
    per_rank = said.agg(
        (pl.col("kind").is_in(DETAIL_KINDS) | pl.col("hit_role").is_in(["primary", "consequence"])).any().alias("_detail"),
        (pl.col("hit_role") == "consequence").any().alias("_conseq"),
        (pl.col("hit_role") == "primary").any().alias("_primary"),
    )
    covered = _exit_ranks(ev, events).join(per_rank.cast({"rank": pl.Int64}), on="rank", how="left")
    per_exit = covered.group_by("eid").agg(
        pl.col("_detail").fill_null(False).all().alias("_x_detail"),
        (pl.col("_conseq").fill_null(False) & ~pl.col("_primary").fill_null(False)).all().alias("_x_conseq"),
    )
    ev = ev.join(per_exit, on="eid", how="left").join(per_rank, on="rank", how="left")
    summary = is_exit & pl.col("_x_detail").fill_null(False)
    after_peer = is_exit & pl.col("_x_conseq").fill_null(False)
    why = (
        pl.when(pl.col("_torn"))
        .then(pl.lit("stopped by the launcher"))
        .when(pl.col("_launcher"))
        .then(pl.lit("the launcher's report"))
        .when(pl.col("_header"))
        .then(pl.lit("announces the line after it"))
        .when(summary & ~after_peer)
        .then(pl.lit("exit after its own error"))
        .when(after_peer)
        .then(pl.lit("exit after a peer failed"))
    )
    role = (
        pl.when(pl.col("_torn") | after_peer)
        .then(pl.lit("consequence"))
        .when(pl.col("_launcher") | pl.col("_header") | summary)
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(pl.col("hit_role"))
    )
    ev = ev.with_columns(why.alias("why"), role.alias("role"))
    ev = _late_cancellations(ev, rules)
    quiet_rank = ~pl.col("_conseq").fill_null(False) & ~pl.col("_primary").fill_null(False)
    # a traceback cut before its exception line says nothing of its own; printed after lines a rule
    # explains, it is one of theirs (a victim's traceback, the launcher's), not another failure
    explained = ev.filter(pl.col("role").is_in(["primary", "consequence"]) & pl.col("why").is_null()).get_column("pos").min()
    mute_after = (pl.col("message") == CUT_OFF) & (pl.col("pos") > explained) if explained is not None else pl.lit(False)
    unexplained = IS_FAILURE & pl.col("role").is_null() & pl.col("why").is_null() & quiet_rank & ~mute_after
    return ev.with_columns(
        unexplained.alias("unexplained"),
        ((pl.col("role") == "primary").fill_null(False) | unexplained).alias("own"),
    ).drop("_closed", "_first_srun", "_x_detail", "_x_conseq", "_detail", "_conseq", "_primary")


def _late_cancellations(ev: pl.DataFrame, rules: RuleSet) -> pl.DataFrame:
    """A cancellation or time limit after ranks had already died is the clean-up, not the cause.

    A job that hangs after a failure runs until someone scancels it or its time
    limit ends it (``scheduler_ended`` causes); SLURM's line then comes last. It keeps its role only when no
    process had exited and no strong failure line was printed before it.
    """
    is_exit = pl.col("kind").is_in(EXIT_KINDS) & ~pl.col("_torn")
    strong = pl.col("role").is_in(["primary", "consequence"]) & (pl.col("weight") >= STRONG) & (pl.col("kind") != SLURM_CANCEL)
    before = ev.filter(is_exit | strong.fill_null(False)).get_column("pos").min()
    if before is None:
        return ev
    late = (pl.col("kind") == SLURM_CANCEL) & pl.col("category").is_in(sorted(rules.scheduler_ended)) & (pl.col("pos") > before)
    return ev.with_columns(
        pl.when(late).then(pl.lit("context")).otherwise(pl.col("role")).alias("role"),
        pl.when(late).then(pl.lit("ended a job that had already failed")).otherwise(pl.col("why")).alias("why"),
    )


def _candidates(ev: pl.DataFrame, rules: RuleSet) -> list[Candidate]:
    """One candidate per cause from the events a rule gave a primary or consequence role.

    Exit records the reasoner reread (teardown, summaries) only decide a rank's
    status; their rule's cause was about the line, not the job.
    """
    rows = ev.filter(pl.col("role").is_in(["primary", "consequence"]) & pl.col("why").is_null() & pl.col("cause").is_not_null()).sort("pos")
    out: list[Candidate] = []
    for (cause,), group in rows.group_by(["cause"], maintain_order=True):  # one per cause: few
        role = "primary" if (group.get_column("role") == "primary").any() else "consequence"
        main = group.filter(pl.col("role") == role)
        out.append(
            Candidate(
                cause=str(cause),
                category=rules.category(str(cause)),
                role=role,
                weight=float(main.get_column("weight").max()),  # type: ignore[arg-type]
                confidence=0.0,
                eids=[int(e) for e in main.get_column("eid").to_list()]
                + [int(e) for e in group.filter(pl.col("role") != role).get_column("eid").to_list()],
                rules=sorted(set(group.get_column("rule").drop_nulls().unique().to_list())),
                ranks=sorted({int(r) for r in group.get_column("rank").drop_nulls().to_list()}),
                nodes=sorted(set(group.get_column("node").drop_nulls().unique().to_list())),
            )
        )
    firsts = [c.eids[0] for c in out]
    pos = {int(e): int(p) for e, p in ev.filter(pl.col("eid").is_in(firsts)).select("eid", "pos").iter_rows()}
    primaries = [c for c in out if c.role == "primary"]
    consequences = [c for c in out if c.role != "primary"]
    strong = sorted((c for c in primaries if c.weight >= STRONG), key=lambda c: pos.get(c.eids[0], 0))
    weak = sorted((c for c in primaries if c.weight < STRONG), key=lambda c: -c.weight)
    conseq = sorted(consequences, key=lambda c: (-c.weight, pos.get(c.eids[0], 0)))
    return strong + weak + conseq


def _lead(cands: list[Candidate], ev: pl.DataFrame, hang: hangs.Hang | None, rules: RuleSet) -> Candidate | None:
    """The verdict before disagreements between nodes are weighed."""
    strong = [c for c in cands if c.role == "primary" and c.weight >= STRONG]
    if strong:
        return strong[0]
    unexplained = ev.filter(pl.col("unexplained")).sort("pos")
    weak = [c for c in cands if c.role == "primary"]
    if not unexplained.is_empty():
        first = unexplained.row(0, named=True)
        weak_first = min(weak, key=lambda c: _pos(ev, c.eids[0])) if weak else None
        if weak_first is None or _pos(ev, weak_first.eids[0]) > first["pos"]:
            return Candidate(
                cause="unknown",
                category="unknown",
                role="primary",
                weight=0.5,
                confidence=0.0,
                eids=[int(e) for e in unexplained.get_column("eid").to_list()],
                rules=[],
                ranks=sorted({int(r) for r in unexplained.get_column("rank").drop_nulls().to_list()}),
                nodes=sorted(set(unexplained.get_column("node").drop_nulls().unique().to_list())),
            )
        return weak_first
    if weak:
        return weak[0]
    if hang is not None and (hang.hung or hang.mismatch):
        return _hang_candidate(cands, ev, hang, rules)
    return cands[0] if cands else None


def _refine(
    lead: Candidate,
    cands: list[Candidate],
    ev: pl.DataFrame,
    events: pl.DataFrame,
    hang: hangs.Hang | None,
    rules: RuleSet,
    notes: list[str],
) -> Candidate:
    """Cross-rank facts that move the first failure away from the lead's first line.

    - ranks that waited for the others (collective or rendezvous timeouts): the
      first failure is the rank that never came;
    - a collective mismatch: the rank whose collective differs from the others';
    - victims of a vanished peer: the rank that left the job without an error;
    - ranks that failed the same way at the same moment: the lowest of them.
    """
    split = _split_wait(lead, cands, ev, rules)
    if split is not None:
        return split
    if lead.category in rules.waiting and lead.role != "hang" and hang is not None and hang.hung:
        return _hang_candidate(cands, ev, hang, rules, cause=lead.cause)
    if lead.cause == "unknown" and hang is not None and hang.hung:
        # the unexplained errors were ranks giving up waiting (their exit records aside)
        lines = ev.filter(pl.col("eid").is_in(lead.eids) & ~pl.col("kind").is_in(EXIT_KINDS))
        if lines.select(hangs.IS_WAIT.all()).item():
            store = lines.select(hangs.IS_STORE_WAIT.any()).item()
            return _hang_candidate(cands, ev, hang, rules, cause="rendezvous_timeout" if store else None)
    if lead.category in ("collective_mismatch", "unknown") and lead.first is None:
        odd = hangs.fingerprints(ev)
        ranks, why = odd if odd else ((hang.odd, hang.mismatch or "") if hang and hang.odd else ([], ""))
        if ranks:
            if lead.category == "unknown":  # every rank raised "Detected mismatch between collectives"
                lead = _mismatch_candidate(ev, rules, ranks, why)
            lead.first = _rank_first(ev, ranks[0])
            lead.ranks = sorted(set(lead.ranks) | set(ranks))
            if why:
                notes.append(f"collective mismatch: {why}")
            return lead
    if lead.category == "peer_failure" and lead.role == "consequence":
        left = _left_early(ev, events)
        if left:
            rank = left[0]
            lead.first = _rank_first(ev, rank)
            where = f" ({lead.first['node']})" if lead.first.get("node") else ""
            lead.summary = (
                f"Rank {rank}{where} left the job without an error while the others still needed it; they failed on the closed connection"
            )
            return lead
    if lead.role == "primary" and lead.first is None and lead.category not in rules.waiting:
        tied = _simultaneous(ev, lead)
        if tied is not None:
            lead.first = _rank_first(ev, tied, among=lead.eids)
    return lead


def _split_wait(lead: Candidate, cands: list[Candidate], ev: pl.DataFrame, rules: RuleSet) -> Candidate | None:
    """Some ranks timed out waiting in the store (forming a new process group: ``new_group``, the
    DETAIL wrapper's helper group) while the other ranks timed out inside a collective: the ranks
    were in different operations. A collective runs on a group that formed already, so the ranks in
    the store were creating a group the others never asked for: they issued different collectives
    (new_group must be called by every rank, in the same order as their other collectives)."""
    if lead.role == "hang" or rules.category(lead.cause) != "rendezvous_timeout":
        return None
    lines = ev.filter(pl.col("eid").is_in(lead.eids))
    in_store = set(lines.filter(hangs.IS_STORE_WAIT).get_column("rank").drop_nulls().to_list())
    in_op = (
        (pl.col("category") == "collective_timeout")
        | pl.col("kind").is_in([WATCHDOG_TIMEOUT, GLOO_TIMEOUT])
        | pl.col("monitored_barrier").fill_null(False)  # the barrier DETAIL runs before a collective
    )
    waiting = ev.filter(in_op & pl.col("rank").is_not_null() & ~pl.col("rank").is_in(list(in_store)))
    in_collective = set(waiting.get_column("rank").to_list())
    if not in_store or not in_collective:
        return None
    base = next((c for c in cands if c.category == "collective_mismatch"), None)
    first = sorted(in_store)[0]
    return Candidate(
        cause=base.cause if base is not None else "collective_mismatch",
        category=rules.category("collective_mismatch"),
        role="primary",
        weight=0.75,
        confidence=0.0,
        eids=list(
            dict.fromkeys([*(int(e) for e in lines.get_column("eid")), *(int(e) for e in waiting.sort("pos").get_column("eid").head(2))])
        ),
        rules=sorted({*lead.rules, *(base.rules if base is not None else [])}),
        ranks=sorted(in_store | in_collective),
        nodes=list(lead.nodes),
        summary=(
            f"Rank {_rank_list(sorted(in_store))} timed out in the store creating a process group while rank"
            f" {_rank_list(sorted(in_collective))} timed out in a collective: the ranks called different collectives"
        ),
        first=_rank_first(ev, first),
    )


def _mismatch_candidate(ev: pl.DataFrame, rules: RuleSet, odd: list[int], why: str) -> Candidate:
    """collective_mismatch from the ranks' own collective fingerprints, when no rule named it."""
    lines = ev.filter(pl.col("fingerprint").fill_null(False)).sort("pos")
    first_odd = lines.filter(pl.col("rank").is_in(odd))
    eids = [int(e) for e in pl.concat([first_odd, lines]).get_column("eid").unique(maintain_order=True).to_list()]
    return Candidate(
        cause="collective_mismatch",
        category=rules.category("collective_mismatch"),
        role="primary",
        weight=0.8,
        confidence=0.0,
        eids=eids,
        rules=[],
        ranks=sorted({int(r) for r in lines.get_column("rank").drop_nulls().to_list()}),
        nodes=sorted(set(lines.get_column("node").drop_nulls().unique().to_list())),
        summary=f"Ranks issued different collectives: {why}",
    )


def _rank_first(ev: pl.DataFrame, rank: int, among: list[int] | None = None) -> dict[str, object]:
    """First failure at ``rank``: its node, and the time of its first failure line (of ``among``, if given)."""
    rows = ev.filter(pl.col("rank") == rank)
    if among is not None:
        rows = rows.filter(pl.col("eid").is_in(among))
    failing = rows.filter(pl.col("own") | pl.col("role").is_in(["primary", "consequence"])).sort("pos")
    pick = failing if failing.height else rows.sort("pos")
    nodes = ev.filter((pl.col("rank") == rank) & pl.col("node").is_not_null()).get_column("node")
    node = nodes.mode().sort()[0] if nodes.len() else None
    when = _own_time(ev, int(pick.get_column("eid")[0])) if pick.height else None
    return {"rank": rank, "node": node, "time": when}


def _simultaneous(ev: pl.DataFrame, lead: Candidate) -> int | None:
    """The lowest rank when several ranks failed the same way and nothing orders them.

    Line order between ranks is only the order in which their output reached
    the file; the timeline's times (own stamps, or the stamped line above)
    decide when they differ by more than a second.
    """
    mine = ev.filter(pl.col("eid").is_in(lead.eids) & pl.col("own"))
    own = mine.filter(pl.col("rank").is_not_null())
    per_rank = own.group_by("rank").agg(pl.col("t").min(), pl.col("pos").min().alias("p"))
    # "the same way" means the same words (numbers aside): a victim quoting the culprit's error differs
    said = own.filter(~pl.col("kind").is_in(EXIT_KINDS)).sort("pos").group_by("rank").agg(pl.col("message").first())
    if said.get_column("message").str.replace_all(r"0x[0-9a-fA-F]+|\d+", "#").n_unique() > 1:
        return None
    if per_rank.height < 2:
        # errors raised before init_process_group carry no rank prefix: the same message from
        # several processes, next to exit records of several ranks, is still a simultaneous failure
        repeated = mine.filter(pl.col("rank").is_null()).group_by("message").len().get_column("len").max()
        if repeated is None or int(repeated) < 2:  # type: ignore[arg-type]
            return None
        exited = ev.filter(pl.col("kind").is_in(EXIT_KINDS) & pl.col("rank").is_not_null()).get_column("rank")
        ranks = set(exited.unique().to_list()) | set(per_rank.get_column("rank").unique().to_list())
        return min(ranks) if len(ranks) >= 2 else None
    stamped = per_rank.drop_nulls("t")
    if stamped.height == per_rank.height:
        first = stamped.get_column("t").min()
        window = stamped.filter(pl.col("t") <= first + timedelta(seconds=1))  # type: ignore[operator]
        return int(window.get_column("rank").min()) if window.height > 1 else None  # type: ignore[arg-type]
    if stamped.height == 0:
        return int(per_rank.get_column("rank").min())  # type: ignore[arg-type]
    return None


def _left_early(ev: pl.DataFrame, events: pl.DataFrame) -> list[int]:
    """Ranks that stopped without an error while the others failed on their absence.

    Seen only where the launcher's failure table covers the rank's node and
    neither lists the rank nor had to stop it: it exited with code 0 first.
    """
    cfe = events.filter(pl.col("kind") == CHILD_FAILED)
    if cfe.is_empty():
        return []
    listed = set(cfe.get_column("rank").drop_nulls().unique().to_list())
    closed = set(events.filter(pl.col("kind") == AGENT_TEARDOWN).get_column("pid").drop_nulls().unique().to_list())
    nodes = set(cfe.get_column("node").drop_nulls().unique().to_list())
    ranked = ev.filter(pl.col("rank").is_not_null() & pl.col("node").is_in(list(nodes)))
    quiet = ranked.group_by("rank").agg(
        (pl.col("own") | pl.col("role").is_in(["primary", "consequence"])).any().alias("_failed"),
        pl.col("pid").drop_nulls().first().alias("_pid"),
    )
    left = quiet.filter(~pl.col("_failed") & ~pl.col("rank").is_in(list(listed)) & ~pl.col("_pid").is_in(list(closed)).fill_null(False))
    return sorted(int(r) for r in left.get_column("rank").to_list())


def _pos(ev: pl.DataFrame, eid: int) -> int:
    got = ev.filter(pl.col("eid") == eid).get_column("pos")
    return int(got[0]) if got.len() else 0


def _hang_candidate(cands: list[Candidate], ev: pl.DataFrame, hang: hangs.Hang, rules: RuleSet, cause: str | None = None) -> Candidate:
    """collective_timeout (or ``cause``, e.g. a rendezvous timeout) naming the ranks that never
    arrived, or collective_mismatch for a desync."""
    cause = cause or ("collective_mismatch" if hang.mismatch and not hang.hung else "collective_timeout")
    base = next((c for c in cands if c.cause == cause), None) or next((c for c in cands if c.category == rules.category(cause)), None)
    hung_rows = ev.filter(pl.col("rank").is_in(hang.hung)).sort("pos")
    # per hung rank: the line that shows it behind (its last enqueued collective), else the last it printed
    behind = pl.col("says_enqueued")
    shown = hung_rows.group_by("rank", maintain_order=True).agg(
        pl.coalesce(pl.col("eid").filter(behind).first(), pl.col("eid").last()).alias("eid")
    )
    hung_eids = shown.get_column("eid").head(2).to_list()
    eids = list(dict.fromkeys([*(int(e) for e in hung_eids), *hang.eids, *(base.eids if base is not None else [])]))
    where = ev.filter(pl.col("rank").is_in(hang.hung)).get_column("node").drop_nulls().unique().sort().to_list()
    waiting_for = "the rendezvous" if rules.category(cause) == "rendezvous_timeout" else "a collective"
    what = f"{hang.op} (SeqNum {hang.seq})" if hang.op and hang.seq is not None else waiting_for
    if hang.hung:
        ranks_text = _rank_list(hang.hung)
        summary = (
            f"{what} timed out{f' on {len(hang.timed_out)} rank(s)' if hang.timed_out else ''} because rank {ranks_text}"
            f"{' (' + ', '.join(where) + ')' if where else ''} never reached it"
        )
        if hang.behind:
            lag = sorted(set(hang.behind.values()))
            summary += f": its last enqueued collective is SeqNum {', '.join(str(v) for v in lag)}"
        if hang.mismatch:
            summary += f"; the ranks also disagree on the collective ({hang.mismatch})"
        first_rank: int | None = hang.hung[0]
    else:
        summary = f"ranks issued different collectives: {hang.mismatch}"
        first_rank = hang.odd[0] if hang.odd else None
    summary = summary[0].upper() + summary[1:]
    row = ev.filter(pl.col("rank") == first_rank).sort("pos").tail(1) if first_rank is not None else ev.clear()
    when = _own_time(ev, hang.eids[0]) if hang.eids else None
    first = {"rank": first_rank, "node": row.get_column("node")[0] if row.height else None, "time": when}
    return Candidate(
        cause=base.cause if base is not None else cause,
        category=rules.category(base.cause if base is not None else cause),
        role="hang",
        weight=max(0.75, base.weight if base is not None else 0.0),
        confidence=0.0,
        eids=eids,
        rules=base.rules if base is not None else [],
        ranks=sorted(set(hang.hung) | set(hang.timed_out)),
        nodes=where,
        summary=summary,
        first=first,
    )


def _with_findings(
    cands: list[Candidate],
    findings: list[consistency.Finding],
    hang: hangs.Hang | None,
    ev: pl.DataFrame,
    rules: RuleSet,
    signalled: bool = False,
) -> list[Candidate]:
    """Add disagreements between nodes as candidates; one leads when it explains a symptom-only
    verdict or a failure no rule explains (``signalled``: some line shows the job failed, see
    failure_signals, e.g. a log that ends while processes are still joining)."""
    if not findings:
        return cands
    lead = cands[0] if cands else None
    progressed = hang is not None and hang.seq is not None and hang.seq > PROGRESS_SEQ
    named_culprit = lead is not None and lead.role == "hang" and bool(hang and hang.hung)
    failed = signalled or bool(ev.filter(IS_FAILURE).height) or lead is not None or any(f.shows_failure for f in findings)
    extra: list[Candidate] = []
    promoted: Candidate | None = None
    absorbed: Candidate | None = None
    for f in sorted(findings, key=lambda f: (-f.corroborated, -f.weight)):
        cand = _finding_candidate(f, ev, rules)
        # a rule already names this category from some rank's line; the comparison
        # across nodes says which node is the odd one, so it names the culprit
        agrees = lead is not None and lead.category == cand.category
        explains = lead is None or agrees or lead.cause == "unknown" or lead.category in rules.symptoms(f.cause)
        strong = f.corroborated or agrees or (f.weight >= 0.7 and not progressed and not named_culprit)
        if failed and promoted is None and explains and strong:
            promoted = cand
            absorbed = lead if agrees else None
        elif promoted is not None and f.cause == promoted.cause and set(f.nodes) <= set(promoted.nodes or f.nodes):
            promoted.eids += [e for e in f.eids if e not in promoted.eids]  # the same disagreement, seen another way
        elif f.weight >= 0.6:  # weaker findings stay suspect nodes, not candidates
            extra.append(cand)
    if not failed:
        return cands
    if promoted is not None and absorbed is not None:
        # the rule's lines come after the comparison's own evidence (the odd node's lines)
        promoted.eids += [e for e in absorbed.eids if e not in promoted.eids]
        promoted.rules = sorted(set(promoted.rules) | set(absorbed.rules))
        promoted.weight = max(promoted.weight, absorbed.weight)
        cands = [c for c in cands if c is not absorbed]
    head = [promoted] if promoted else []
    return head + cands + extra


def _hardware_first(cands: list[Candidate], ev: pl.DataFrame, rules: RuleSet, notes: list[str]) -> list[Candidate]:
    """A GPU the driver reports as faulty (Xid, ECC, fallen off the bus, needing a reset) explains
    the CUDA errors, crashes, stalls and unusable devices the programs saw (the causes that are a
    ``symptom_of`` gpu_hardware_fault), whichever file happens to come first."""
    symptoms = rules.symptoms("gpu_hardware_fault")
    fault = next((c for c in cands if c.category == "gpu_hardware_fault" and c.role == "primary" and c.weight >= STRONG), None)
    if fault is None or (cands[0] is not fault and cands[0].category not in symptoms):
        return cands
    symptom = next((c for c in cands if c.category in symptoms), None)
    if cands[0] is not fault:
        notes.append(f"the GPU fault explains the {cands[0].category} the processes reported")
    if symptom is not None and _first_failure(ev, fault).get("rank") is None:
        fault.first = _first_failure(ev, symptom)  # a kernel line names a PCI address; the rank that saw it is the culprit
    return [fault] + [c for c in cands if c is not fault]


def _init_file_first(cands: list[Candidate], ev: pl.DataFrame, rules: RuleSet, notes: list[str]) -> list[Candidate]:
    """A job that meets through a file:// init file and fails to reach its peers at set-up:
    the init file (stale, or not shared by every node) explains what the ranks saw: connects to dead
    addresses, peers that close on them, waits that never end (a ``symptom_of`` file_init_error)."""
    if not cands or cands[0].category not in rules.symptoms("file_init_error"):
        return cands
    uses = ev.filter((pl.col("role") == "context") & (pl.col("cause") == "file_init_error")).sort("pos")
    lead = cands[0]
    shown = ev.filter(pl.col("eid").is_in(lead.eids))
    at_setup = shown.select(pl.col("at_setup").any()).item()
    if uses.is_empty() or not at_setup:
        return cands
    notes.append(f"the job meets through a file:// init file: it explains the {lead.category} the ranks reported at set-up")
    promoted = Candidate(
        cause="file_init_error",
        category=rules.category("file_init_error"),
        role="primary",
        weight=STRONG,
        confidence=0.0,
        eids=[*lead.eids, int(uses.get_column("eid")[0])],
        rules=sorted({*lead.rules, *uses.get_column("rule").drop_nulls().to_list()}),
        ranks=list(lead.ranks),
        nodes=list(lead.nodes),
        summary=(
            f"The ranks met through a file:// init file and then could not reach each other ({lead.category}):"
            " an init file left by an earlier run, or one not shared by every node, hands out dead or foreign addresses"
        ),
        first=lead.first or _first_failure(ev, lead),
    )
    return [promoted, *cands]


def _finding_candidate(f: consistency.Finding, ev: pl.DataFrame, rules: RuleSet) -> Candidate:
    """A disagreement as a candidate; its first failure is the odd rank when there is one,
    else the first failing rank on the odd node."""
    on_node = ev.filter(pl.col("node").is_in(f.nodes) & pl.col("rank").is_not_null())
    failing = on_node.filter(pl.col("own") | pl.col("role").is_in(["primary", "consequence"])).sort("pos")
    rank: int | None
    node: str | None
    when: str | None
    if len(f.ranks) == 1:
        rank = f.ranks[0]
        node = f.nodes[0] if len(f.nodes) == 1 else None
        mine = failing.filter(pl.col("rank") == rank)
        when = _own_time(ev, int(mine.get_column("eid")[0])) if mine.height else None
    elif failing.height:
        row = failing.row(0, named=True)
        rank, node, when = row["rank"], row["node"], _own_time(ev, int(row["eid"]))
    else:
        rank = f.ranks[0] if f.ranks else None
        node, when = (f.nodes[0] if f.nodes else None), None
    return Candidate(
        cause=f.cause,
        category=rules.category(f.cause),
        role="consistency",
        weight=f.weight,
        confidence=0.0,
        eids=list(f.eids),
        rules=[],
        ranks=list(f.ranks),
        nodes=list(f.nodes),
        summary=f.summary,
        first={"rank": rank, "node": node, "time": when},
    )


def _confidence(cands: list[Candidate]) -> None:
    """Confidence: the lead's weight, less when a rival of another category is as strong."""
    lead = cands[0]
    rivals = [c for c in cands[1:] if c.category != lead.category and c.role == lead.role]
    for i, c in enumerate(cands):
        margin = 1.0
        if i == 0 and rivals:
            margin = 0.85 if rivals[0].weight >= lead.weight else 0.93
        penalty = 0.8 if c.role == "consequence" else 1.0
        c.confidence = round(max(0.05, min(0.99, c.weight * margin * penalty * (1.0 if i == 0 else 0.6))), 3)


def _own_time(ev: pl.DataFrame, eid: int) -> str | None:
    """An event's own timestamp, or its rank's torchrun failure time (to the second)."""
    row = ev.filter(pl.col("eid") == eid)
    if row.is_empty():
        return None
    when: datetime | None = row.get_column("time")[0]
    rank = row.get_column("rank")[0]
    if when is None and rank is not None:
        stamped = ev.filter((pl.col("rank") == rank) & (pl.col("kind") == CHILD_FAILED) & pl.col("time").is_not_null())
        if stamped.height:
            when = stamped.get_column("time").min()  # type: ignore[assignment]
    return when.isoformat() if when is not None else None


def _first_failure(ev: pl.DataFrame, lead: Candidate | None) -> dict[str, object]:
    """Rank, node and time of the lead's first event (a rank-less first event borrows the next ranked one's rank)."""
    if lead is None:
        return {"rank": None, "node": None, "time": None}
    if lead.first is not None:
        return dict(lead.first)
    rows = ev.filter(pl.col("eid").is_in(lead.eids)).sort("pos")
    if rows.is_empty():
        return {"rank": None, "node": None, "time": None}
    head = rows.row(0, named=True)
    ranked = rows.filter(pl.col("rank").is_not_null())
    rank, node = head["rank"], head["node"]
    if rank is None and ranked.height:  # e.g. slurmstepd's OOM line, then srun's "task 3: Out Of Memory"
        rank, node = ranked.get_column("rank")[0], ranked.get_column("node")[0] or node
    elif rank is None and node is not None:  # a node-level line: the rank on that node that died on its own
        own = ev.filter(pl.col("own") & (pl.col("node") == node) & pl.col("rank").is_not_null()).sort("pos")
        if own.height:
            rank = own.get_column("rank")[0]
    if (node is None or "[" in node or "," in node) and rank is not None:
        node = ev.filter((pl.col("rank") == rank) & pl.col("node").is_not_null()).get_column("node").mode().sort().first()
    return {"rank": rank, "node": node, "time": _own_time(ev, int(head["eid"]))}


def _rank_list(ranks: list[int]) -> str:
    return collect_ranges(ranks) if len(ranks) > 1 else str(ranks[0])


def _rank_states(
    ranked: pl.DataFrame,
    events: pl.DataFrame,
    first: dict[str, object],
    hang: hangs.Hang | None,
    failed: bool,
    lead_role: str | None,
    lead_category: str | None = None,
    lead_cause: str | None = None,
) -> list[RankState]:
    """Per rank: the culprit, others that failed on their own, hung ranks, victims, and the rest.

    A verdict made of victims' symptoms only (peer_failure) names no culprit:
    the rank that failed first there is the first victim.
    """
    world = events.filter(pl.col("kind") == NCCL_INIT).get_column("nranks").drop_nulls().mode().sort()
    table = rank_table(events, int(world[0]) if world.len() and world[0] <= 65536 else None)
    if table.is_empty():
        return []
    ranked = ranked.sort("pos")
    ranked = ranked.select("rank", "file", "line", "time", "kind", "cause", "why", "raw", "own", "role", "pos", "source", "signal")
    own = ranked.filter(pl.col("own")).group_by("rank", maintain_order=True).first()
    victim = ranked.filter(pl.col("role") == "consequence").group_by("rank", maintain_order=True).first()
    # the last line the rank printed itself; the launcher's lines about it only when there is nothing else
    by_launcher = (pl.col("source") == "launcher") | pl.col("kind").is_in([*EXIT_KINDS, AGENT_TEARDOWN, AGENT_SIGNAL])
    last = ranked.sort(by_launcher, "pos", descending=[True, False]).group_by("rank", maintain_order=True).last()
    cfe_nodes = set(events.filter(pl.col("kind") == CHILD_FAILED).get_column("node").drop_nulls().unique().to_list())
    closed = set(events.filter(pl.col("kind") == AGENT_TEARDOWN).get_column("pid").drop_nulls().unique().to_list())
    lookup = {
        name: {int(r["rank"]): r for r in frame.iter_rows(named=True)} for name, frame in (("own", own), ("victim", victim), ("last", last))
    }
    hung = set(hang.hung) if hang else set()
    last_seq = hang.last_seq if hang else {}
    culprit = first.get("rank") if lead_role in ("primary", "hang", "consistency") else None
    mismatch = lead_category == "collective_mismatch" and culprit is not None
    states: list[RankState] = []
    for rank, node, local_rank, pid in table.iter_rows():  # one per rank
        r = int(rank)
        o, v, ll = lookup["own"].get(r), lookup["victim"].get(r), lookup["last"].get(r)
        if not failed:
            status, ev_row, note = "finished", ll, None
        elif culprit is not None and r == culprit:
            status, ev_row, note = "culprit", o or (ll if r in hung else v) or ll, "failed first"
            if r in hung:
                note = "never arrived where the other ranks waited for it"
        elif (
            o is not None
            and lead_role == "hang"
            and hang is not None
            and (r in hang.timed_out or (o["kind"] in EXIT_KINDS and not o["signal"]))
        ):
            # it reported the wait, or it only exited with an error code while the others waited
            status, ev_row, note = "victim", o, "gave up waiting for the ranks that never came"
        elif o is not None and mismatch and o.get("cause") in (None, "collective_mismatch"):
            status, ev_row, note = "victim", o, "reported the mismatched collective"
        elif o is not None:
            status, ev_row, note = "failed", o, "failed on its own"
        elif r in hung:
            status, ev_row, note = "hung", ll, "never arrived where the other ranks waited for it"
        elif v is not None:
            status, ev_row, note = "victim", v, v.get("why") or "failed because another rank did"
        elif ll is None and world.len():
            status, ev_row, note = "unknown", None, "printed nothing attributable"
        elif node in cfe_nodes and pid not in closed and ll is not None and ll["kind"] not in EXIT_KINDS:
            status, ev_row, note = "finished", ll, "exited without an error while its peers failed"
        else:
            status, ev_row, note = "unknown", ll, None
        states.append(
            RankState(
                rank=r,
                node=node,
                status=status,
                evidence=(ev_row["file"], int(ev_row["line"])) if ev_row else None,
                local_rank=local_rank,
                pid=pid,
                time=ev_row["time"].isoformat() if ev_row and ev_row["time"] else None,
                kind=ev_row["kind"] if ev_row else None,
                cause=lead_cause if status in ("culprit", "hung") and lead_cause else (ev_row.get("cause") if ev_row else None),
                note=note,
                seq=last_seq.get(r),
                last=(ll["file"], int(ll["line"]), (ll["raw"] or "")[:300])
                if ll and status in ("culprit", "hung", "finished", "unknown")
                else None,
            )
        )
    return states


def _suspects(
    events: pl.DataFrame,
    cands: list[Candidate],
    findings: list[consistency.Finding],
    ranks: list[RankState],
    hang: hangs.Hang | None,
    first: dict[str, object],
) -> list[Suspect]:
    """Nodes to look at: the culprit's, the hung ranks', the odd ones out and the peers errors name."""
    out: dict[str, Suspect] = {}

    def add(node: object, reason: str, cause: str, rank_ids: list[int], eids: list[int]) -> None:
        if not isinstance(node, str) or not node or "[" in node:
            return
        s = out.setdefault(node, Suspect(node, [], [], [], []))
        if reason not in s.reasons:
            s.reasons.append(reason)
        if cause not in s.causes:
            s.causes.append(cause)
        s.ranks = sorted(set(s.ranks) | set(rank_ids))
        s.eids += [e for e in eids if e not in s.eids][:4]

    if cands and first.get("node"):
        lead = cands[0]
        rank = first.get("rank")
        add(
            first["node"],
            f"first failure ({lead.cause})" + (f" on rank {rank}" if rank is not None else ""),
            lead.cause,
            [rank] if isinstance(rank, int) else [],
            lead.eids[:2],
        )
    if hang and hang.hung:
        by_node: dict[str, list[int]] = {}
        for st in ranks:
            if st.rank in hang.hung and st.node:
                by_node.setdefault(st.node, []).append(st.rank)
        for node, rs in by_node.items():
            add(node, f"rank(s) {_rank_list(rs)} never reached the collective", "collective_timeout", rs, [])
    for f in findings:
        for node in f.nodes:
            add(node, f.summary, f.cause, f.ranks, f.eids)
    for st in ranks:
        if st.status == "hung" and st.note and st.note.startswith(_STALLED):
            add(st.node, f"rank {st.rank} stopped making progress first ({st.note})", "collective_timeout", [st.rank], [])
    if cands:
        for node, reason, rank_ids, eids in _named_peers(events):
            add(node, reason, cands[0].cause, rank_ids, eids)
    return list(out.values())


def _named_peers(events: pl.DataFrame) -> list[tuple[str, str, list[int], list[int]]]:
    """Peers that error lines of at least two ranks (or two lines) point at by address, as
    (node, reason, ranks, event ids): the node every InfiniBand or socket error names is the
    one to look at, even when it printed nothing. An address is named by the node that
    announced it on NCCL's "Using" lines, else shown as it is."""
    own = (
        events.filter((pl.col("kind") == NCCL_NET) & pl.col("address").is_not_null() & pl.col("node").is_not_null())
        .group_by("address")
        .agg(pl.col("node").first())
    )
    named = (
        numbered(events)
        .filter(pl.col("address").is_not_null() & (pl.col("kind") != NCCL_NET) & pl.col("level").is_in(["error", "fatal", "warning"]))
        .join(own.rename({"node": "peer"}), on="address", how="left")
        .filter(pl.col("peer").is_null() | (pl.col("peer") != pl.col("node").fill_null("")))
        .group_by("address", maintain_order=True)
        .agg(pl.col("peer").first(), pl.col("rank").drop_nulls().unique().sort(), pl.col("eid"), pl.len().alias("n"))
        .filter((pl.col("n") >= 2) | (pl.col("rank").list.len() >= 2))
    )
    out = []
    for row in named.iter_rows(named=True):  # one row per address: a handful
        ranks = [int(r) for r in row["rank"]]
        who = f" on rank(s) {_rank_list(ranks)}" if ranks else ""
        node = row["peer"] or row["address"]
        also = f" ({row['address']})" if row["peer"] else ""
        out.append((node, f"named as the peer{also} by {row['n']} error line(s){who}", ranks, [int(e) for e in row["eid"][:4]]))
    return out
