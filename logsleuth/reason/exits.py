"""Which events show a failure, and exit records read in the light of their rank's other lines.

Rules see one line at a time. Before ranking, each event gets its final ``role``, ``why`` it was
reread and whether it is its rank's ``own`` failure: a worker the launcher killed while tearing the
job down (``Sending process N closing signal SIGTERM``, exit -15, ``srun: ... Terminated`` after
another task failed) is a victim; an exit whose rank printed its own error is only a summary of that
error (SIGABRT after a watchdog timeout is the watchdog's abort); a cancellation after ranks had died
is the clean-up. What is left is each rank's own failure.
"""

from __future__ import annotations

import polars as pl

from logsleuth.events import (
    AGENT_TEARDOWN,
    CPP_STACK,
    CPP_TERMINATE,
    DETAIL_KINDS,
    DIST_MEMBER,
    EXCEPTION,
    EXIT_KINDS,
    FAILURE_KINDS,
    LINE,
    NCCL_INFO,
    NCCL_UNWIND,
    NCCL_WARN,
    SLURM_CANCEL,
    SLURM_FAILED,
    SLURM_LINE,
    SLURM_MEMORY_ERROR,
    SLURM_NODE_FAILURE,
    SLURM_OOM,
    SRUN_EXIT,
    TRACEBACK,
    WATCHDOG_TIMEOUT,
    numbered,
)
from logsleuth.hostlist import HostlistError, expand_ranges
from logsleuth.parse.identity import per_node_files
from logsleuth.parse.python import CUT_OFF
from logsleuth.rulebook import RuleSet

from .candidates import STRONG

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
    record torchrun's launcher logs for an exception (its error-file JSON), a launcher stopping workers
    that were still running (torchrun's ``closing signal``, DeepSpeed's ``Killing subprocess``: a worker
    failed or the launcher was signalled; a job that ends well has none left), an exception of Ray's own
    (``ray.exceptions.RaySystemError: System error: ...``: the report of a failed task), a fatal
    line (an allocator abort), an error line that ends its file but for a native backtrace (a log cut right
    after its error; slurmstepd's ``error:`` lines count), a connection still retried when its log ends, and a log that ends
    while processes are still joining the group (fewer members than its world) all count.
    With the rule ``hits`` at hand, an NCCL WARN that no rule knows (not even as harmless
    context) counts too: NCCL warns just before it returns an error. (A traceback cut
    before its exception line is already a traceback event: parse.python folds it.)
    """
    if events.is_empty():
        return pl.Series("failure", [], dtype=pl.Boolean)
    kind, level = pl.col("kind"), pl.col("level")
    # the last line of its file, a native backtrace printed under it aside
    frame = pl.col("backtrace_frame").fill_null(False)
    last = ~frame & (pl.col("line") == pl.col("line").filter(~frame).max().over("file"))
    members = pl.col("rank").filter(kind == DIST_MEMBER).n_unique()  # over every file: a rank may write its own
    still_joining = last & (kind == DIST_MEMBER) & (members < pl.col("nranks"))
    ends_in_error = still_joining | last & (
        (
            kind.is_in([LINE, EXCEPTION, SLURM_LINE])
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
        | (kind == AGENT_TEARDOWN)
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

#: Launcher reports of a death: any of them means the job did fail.
_DEATH_REPORTS = (*EXIT_KINDS, SLURM_CANCEL, SLURM_OOM, SLURM_FAILED, SLURM_MEMORY_ERROR, SLURM_NODE_FAILURE, WATCHDOG_TIMEOUT)

_DIED = pl.col("kind").is_in(_DEATH_REPORTS) | LAUNCHER_ERROR_RECORD


def _still_retrying(ev: pl.DataFrame) -> pl.DataFrame:
    """A connection a rule knows as a retry (context: c10d's or NCCL's "failed to connect ...,
    retrying") that is still being retried when its log ends: the process never reached its
    peer, so the retries of that file are its failure (a weak primary: any stronger failure wins)."""
    # the last line of its file, a native backtrace printed under it aside
    frame = pl.col("backtrace_frame").fill_null(False)
    last = ~frame & (pl.col("line") == pl.col("line").filter(~frame).max().over("file"))
    retrying = last & (pl.col("hit_role") == "context") & pl.col("retrying").fill_null(False)
    ended = ev.filter(retrying.fill_null(False)).select("file", "rule").unique()
    if ended.is_empty():
        return ev
    same = ev.select("file", "rule").join(ended.with_columns(pl.lit(True).alias("_r")), on=["file", "rule"], how="left")
    promote = same.get_column("_r").fill_null(False) & (ev.get_column("hit_role") == "context").fill_null(False)
    return ev.with_columns(pl.when(promote).then(pl.lit("primary")).otherwise(pl.col("hit_role")).alias("hit_role"))


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
    # (unless a strong primary rule says what the launcher itself ran into: DeepSpeed's ssh check of its hosts)
    named = ((pl.col("hit_role") == "primary") & (pl.col("weight") >= STRONG)).fill_null(False)
    # (mp.spawn's "process 1 terminated with signal SIGSEGV" is the only record of a crash: the child printed nothing;
    # a SIGKILL or SIGTERM was sent by someone else, the OOM killer or the scheduler, and stays the launcher's report)
    death = pl.col("exc_type").str.ends_with("ProcessExitedException").fill_null(False) & pl.col("message").str.contains(
        r"terminated with signal SIG(?:SEGV|ABRT|BUS|ILL|FPE)\b"
    ).fill_null(False)
    launcher = (pl.col("kind") == TRACEBACK) & pl.col("exc_type").str.contains(LAUNCHER_EXCEPTIONS).fill_null(False) & ~named & ~death
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
