"""Line tables -> the event table.

Order matters: tracebacks and torchrun failure tables are folded first (their
lines must not be claimed one by one), then each source claims the single
lines it recognises, then whatever is left becomes a plain ``line`` event.
"""

from __future__ import annotations

import polars as pl

from logsleuth import events
from logsleuth.events import matching

from . import fields, identity, mpi, nccl, prefixes, python, slurm, torch, wrapped
from .common import with_columns_of

#: The parser modules, each declaring ``TRIGGERS`` (literals one of which is in every line it
#: claims, folds or reads), ``KINDS`` (the event kinds it emits) and ``EXAMPLES`` (text -> fields
#: of its event; tests/parse/test_declared.py runs them through ingest with the prefilter on).
#: ``identity`` emits no kind: it reads the ranks some messages name (then resolves who wrote what).
PARSERS = (python, torch, mpi, slurm, nccl, identity)

#: What plain ``line`` events need (their level from trouble words, an exit status) and the
#: context lines rules and the reasoner read (launcher settings, versions). No parser claims these.
LINE_TRIGGERS: tuple[str, ...] = (
    # generic trouble words, in the case variants that occur
    "error",
    "Error",
    "ERROR",
    "warn",
    "Warn",
    "WARN",
    "xception",
    "fatal",
    "Fatal",
    "FATAL",
    "fail",
    "Fail",
    "FAIL",
    "abort",
    "Abort",
    "ABORT",
    "illed",
    "kill",
    "Kill",
    "ignal",
    "SIG",
    "imeout",
    "imed out",
    "TIME LIMIT",
    "CANCELLED",
    "cancelled",
    "refused",
    "denied",
    "Denied",
    "ermission",
    "Segmentation",
    "segfault",
    "core dumped",
    "terminate",
    "Terminat",
    "what():",
    "ssert",
    "xit",
    "OOM",
    "emory",
    "annot ",
    "ould not",
    "nable to",
    "not found",
    "o such",
    "nvalid",
    "ismatch",
    "No space",
    "uota",
    "esolv",
    "Name or service",
    "getaddrinfo",
    "onnection",
    "reset by peer",
    "Broken pipe",
    "EADDR",
    "ECONN",
    "rrno",
    "stuck",
    "hung",
    "eartbeat",
    "atchdog",
    "desync",
    "Xid",
    "NVRM",
    "ECC",
    "fallen off",
    "undefined symbol",
    "shared object",
    "dev/shm",
    "PREEMPT",
    "equeue",
    "NODE FAIL",
    "not responding",
    # launchers' and NCCL's identity and configuration
    "GLOO_",
    "IFNAME",
    "MASTER_",
    "master_addr",
    "Initializing distributed tasks at",
    "WORLD_SIZE",
    "world_size",
    "LOCAL_RANK",
    "c10d",
    "ndezvous",
    "torch.distributed",
    "ersion",
    # a job or worker that ended well (parse.fields._ENDED_WELL)
    "SUCCEEDED",
    "successfully finished",
    "Done waiting",
    "exits successfully",
    "Trainer.fit` stopped",
    "raining complete",
    "raining finished",
    "raining done",
    "Out of bounds values",
    "Avg bus bandwidth",
    "is successful!",
    # a benchmark's measured bandwidth (progress), MPI's fatal error handler (parse._SELF_ABORT)
    "algbw",
    "busbw",
    "MPI_ERRORS_ARE_FATAL",
    "Local abort",
    "Fatal error in",
)

#: Literal strings that make a raw line worth parsing (the ingest prefilter): every parser's
#: triggers and the plain lines'. Rules add their own keywords.
KEYWORDS: tuple[str, ...] = tuple(dict.fromkeys([*LINE_TRIGGERS, *(t for parser in PARSERS for t in parser.TRIGGERS)]))

#: A process's exit status as shells, IDEs, subprocess and job tools print it on a line of its own:
#: "exit status 1", "exited with code 139", "Process finished with exit code 1",
#: "returned non-zero exit status 2", "exit code: -9", horovodrun's "Process 1 exit with status code 139."
#: (Launcher and SLURM forms have their own parsers.)
_EXIT_STATUS = (
    r"(?i)\b(?:exit(?:ed)?(?: with)?(?: exit)? ?(?:status code|code|status)|exitcode|non-zero exit status|return ?code)\s*[:=]?\s*(-?\d+)\b"
)
#: A process aborting itself: allocators when memory runs out (Rust's std, C++ new_handler wrappers),
#: MPI's fatal error handler (Open MPI's errhandler_predefined.c: ``*** MPI_ERRORS_ARE_FATAL (processes in
#: this communicator will now abort,``, 1.x's ``*** MPI_ERRORS_ARE_FATAL: your MPI job will now abort``,
#: ``Local abort before MPI_INIT completed``; MPICH's ``Fatal error in PMPI_Allreduce: ...``).
_SELF_ABORT = (
    r"memory allocation of \d+ bytes failed|\*\*\* MPI_ERRORS_ARE_FATAL\b|\bLocal abort (?:before|after) MPI_INIT\b"
    r"|\bFatal error in P?MPI_\w+: "
)

_ERRORISH = (
    r"(?i)\b(?:error|exception|fatal|failed|failure|killed|abort(?:ed|ing)?|segmentation fault|cannot|unable to)\b"
    # a shell's report of a job it ran that a signal ended (bash's strsignal text: "Terminated",
    # "[1]+  Terminated   python train.py", "./run.sh: line 12:  4242 Terminated   python train.py")
    r"|^(?:\[\d+\][+-]?\s+|.*: line \d+:\s+\d+\s+)?(?:Terminated|Hangup|Quit)(?:\s{2,}\S.*)?\s*$"
)
#: (and a Python warning as warnings.showwarning prints it: ``train.py:15: UserWarning: ...``)
_WARNISH = r"(?i)\bwarn(?:ing)?\b|\w+Warning: "


#: An IPv4 address as NCCL, gloo and c10d print a host: `10.0.0.12<46322>`, `[10.0.0.12]:29500`,
#: `10.0.0.12:29500`, `eth0:10.0.0.12<0>`; the first one a line names.
_ADDRESS = r"(?:^|[^\d.])((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})(?:[<\]:]|\s|$|,)"


#: A progress counter: "step 90", "Step: 90/1000", "global_step=90", Megatron's "iteration       90/ 1000 |",
#: tqdm's "| 90/620 [00:52<...". The first that matches gives the line's step.
_STEP = (
    r"(?i)\b(?:global_)?step[s]?\s*[:=#]?\s*\[?\s*(\d+)\b",
    r"(?i)\biter(?:ation)?s?\s*[:=#]?\s*\[?\s*(\d+)\s*/",
    r"\|\s*(\d+)/\d+\s*\[\d",
)


def build(lines: pl.DataFrame, years: dict[str, int]) -> pl.DataFrame:
    """Parse kept lines (file, line, raw) into the event table (events.SCHEMA)."""
    if lines.is_empty():
        return events.empty()
    df = with_columns_of(prefixes.peel(wrapped.unwrap(lines), years), "kind")
    df, tracebacks = python.fold(df)
    df, failures = torch.fold_failure_tables(df)
    df, reports = mpi.fold(df)
    df = slurm.annotate(df)
    df = nccl.annotate(df)
    df = torch.annotate(df)
    df = python.annotate_exceptions(df)
    msg = pl.col("msg")
    level = (
        pl.when(matching(df, pattern=_ERRORISH, column="msg"))
        .then(pl.lit("error"))
        .when(matching(df, pattern=_WARNISH, column="msg"))
        .then(pl.lit("warning"))
        .otherwise(pl.lit("info"))
    )
    plain = pl.col("kind").is_null()
    df = with_columns_of(df, "exit_code")
    df = df.with_columns(
        pl.col("kind").fill_null(events.LINE),
        pl.when(plain & msg.str.contains(_SELF_ABORT)).then(pl.lit("fatal")).otherwise(pl.col("level").fill_null(level)).alias("level"),
        pl.col("source").fill_null("app"),
        pl.when(plain)
        .then(msg.str.extract(_EXIT_STATUS, 1).cast(pl.Int32, strict=False))
        .otherwise(pl.col("exit_code"))
        .alias("exit_code"),
    ).filter((pl.col("kind") != events.LINE) | ~msg.str.contains(r"^\s*(?:[=\-*#~_]{5,}\s*)?$"))
    df = pl.concat([df, tracebacks, failures, reports], how="diagonal_relaxed")
    df = torch.enrich(df)
    df = nccl.attribute_ranks(df)
    df = with_columns_of(fields.annotate(df), "block_start", "node").with_columns(
        pl.coalesce("block_start", "line").alias("block_start"),
        pl.coalesce("node", "host").alias("node"),
        pl.col("msg").str.extract(_ADDRESS, 1).alias("address"),
        pl.when(pl.col("kind") == events.LINE)
        .then(pl.coalesce(*(pl.col("msg").str.extract(p, 1) for p in _STEP)).cast(pl.Int64, strict=False))
        .alias("step"),
    )
    return events.conform(df.rename({"msg": "message"})).sort("file", "line")
