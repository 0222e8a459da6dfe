"""The event table: one schema, defined once, shared by every stage.

Parsers fill it, the matcher and the reasoner read it, `logsleuth events`
exports it. A row is one event: a log line worth looking at, or a block folded
into one row (a Python traceback, a torchrun failure entry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

SOURCES = ("slurm", "nccl", "torch", "launcher", "python", "app")
LEVELS = ("fatal", "error", "warning", "info", "debug")

# Event kinds (the ``kind`` column): what a row is. Each parser module in logsleuth/parse
# lists the kinds it emits (its ``KINDS``); every stage names them through these constants.
#: A line no parser claimed (its level from its words, an exit status it names).
LINE = "line"
#: A Python traceback folded into one event (parse.python), and an exception line outside one.
TRACEBACK = "traceback"
EXCEPTION = "exception"
#: C++ side of PyTorch (parse.torch): ``terminate called after throwing``, its ``what():`` line, a c10 stack dump.
CPP_TERMINATE = "cpp_terminate"
CPP_WHAT = "cpp_what"
CPP_STACK = "cpp_stack"
#: Collective timeouts: ProcessGroupNCCL's watchdog, Gloo's send/recv.
WATCHDOG_TIMEOUT = "watchdog_timeout"
GLOO_TIMEOUT = "gloo_timeout"
#: A process saying which rank of which world it is as it joins the group.
DIST_MEMBER = "dist_member"
#: torchrun's agent: a ChildFailedError table entry, a worker's failure, the survivors' teardown, the agent's own signal.
CHILD_FAILED = "child_failed"
AGENT_WORKER_FAILED = "agent_worker_failed"
AGENT_TEARDOWN = "agent_teardown"
AGENT_SIGNAL = "agent_signal"
#: Open MPI's signal handler report (parse.mpi).
SIGNAL_REPORT = "signal_report"
#: SLURM (parse.slurm).
SLURM_CANCEL = "slurm_cancel"
SLURM_FAILED = "slurm_failed"
SLURM_MEMORY_ERROR = "slurm_memory_error"
SLURM_OOM = "slurm_oom"
SLURM_MEM_LIMIT = "slurm_mem_limit"
SLURM_NODE_FAILURE = "slurm_node_failure"
SLURM_LINE = "slurm_line"
SRUN_EXIT = "srun_exit"
SRUN_ABORT = "srun_abort"
#: NCCL (parse.nccl).
NCCL_VERSION = "nccl_version"
NCCL_INIT = "nccl_init"
NCCL_NET = "nccl_net"
NCCL_ENV = "nccl_env"
NCCL_UNWIND = "nccl_unwind"
NCCL_WARN = "nccl_warn"
NCCL_INFO = "nccl_info"

#: Every kind a row can have.
KINDS = (
    LINE,
    TRACEBACK,
    EXCEPTION,
    CPP_TERMINATE,
    CPP_WHAT,
    CPP_STACK,
    WATCHDOG_TIMEOUT,
    GLOO_TIMEOUT,
    DIST_MEMBER,
    CHILD_FAILED,
    AGENT_WORKER_FAILED,
    AGENT_TEARDOWN,
    AGENT_SIGNAL,
    SIGNAL_REPORT,
    SLURM_CANCEL,
    SLURM_FAILED,
    SLURM_MEMORY_ERROR,
    SLURM_OOM,
    SLURM_MEM_LIMIT,
    SLURM_NODE_FAILURE,
    SLURM_LINE,
    SRUN_EXIT,
    SRUN_ABORT,
    NCCL_VERSION,
    NCCL_INIT,
    NCCL_NET,
    NCCL_ENV,
    NCCL_UNWIND,
    NCCL_WARN,
    NCCL_INFO,
)

#: Kinds of event that show a process or job failed (used to tell `unknown` from `none`).
FAILURE_KINDS = (
    TRACEBACK,
    CPP_TERMINATE,
    CPP_WHAT,
    WATCHDOG_TIMEOUT,
    GLOO_TIMEOUT,
    CHILD_FAILED,
    AGENT_WORKER_FAILED,
    SRUN_EXIT,
    SLURM_CANCEL,
    SLURM_OOM,
    SLURM_FAILED,
    SLURM_MEMORY_ERROR,
    SLURM_NODE_FAILURE,
    SIGNAL_REPORT,
)
#: Records of a process's exit, written by its launcher: summaries of a death, not its cause.
EXIT_KINDS = (CHILD_FAILED, AGENT_WORKER_FAILED, SRUN_EXIT)
#: What a rank says about its own failure (its exit record then only summarises it).
DETAIL_KINDS = (TRACEBACK, CPP_TERMINATE, CPP_WHAT, EXCEPTION, WATCHDOG_TIMEOUT, GLOO_TIMEOUT, NCCL_WARN, SIGNAL_REPORT)
#: Kinds that only a launcher agent (torchrun) writes.
AGENT_KINDS = (CHILD_FAILED, AGENT_WORKER_FAILED, AGENT_TEARDOWN, AGENT_SIGNAL)
#: NCCL's start-up lines that describe the job rather than report on it (version, communicator, network, settings).
NCCL_SETUP_KINDS = (NCCL_NET, NCCL_ENV, NCCL_VERSION, NCCL_INIT)

#: Column name -> dtype. The first block is what every row has; the second
#: holds the structured fields that some kinds of event carry.
SCHEMA: Mapping[str, pl.DataType] = {
    "file": pl.String(),  # the path as the user gave it
    "line": pl.UInt32(),  # 1-based line of the key line (the evidence to show)
    "block_start": pl.UInt32(),  # first line of a folded block, else = line
    "rank": pl.Int32(),  # global rank, when known
    "local_rank": pl.Int32(),
    "task": pl.Int32(),  # srun task id (srun --label)
    "node": pl.String(),  # short host name
    "pid": pl.Int64(),
    "time": pl.Datetime("us"),  # the line's own timestamp, local time, naive
    "source": pl.String(),  # one of SOURCES
    "level": pl.String(),  # one of LEVELS
    "kind": pl.String(),  # what the line is, e.g. traceback, nccl_warn, srun_exit
    "message": pl.String(),  # text without prefixes; folded blocks joined by \n
    "raw": pl.String(),  # the key line as written (ANSI codes removed)
    "stream": pl.String(),  # identity of the writer (file + prefixes), for folding
    # structured fields
    "exc_type": pl.String(),
    "detail": pl.String(),  # kind-specific extra: last frame, CFE section, NCCL file:line
    "frame": pl.String(),  # a traceback's innermost frame in the job's own code: "train.py:42 in step"
    "op": pl.String(),
    "seq": pl.Int64(),
    "numel": pl.Int64(),
    "timeout_ms": pl.Int64(),
    "elapsed_ms": pl.Int64(),
    "exit_code": pl.Int32(),
    "signal": pl.String(),  # SIGKILL, SIGTERM, ... (never a bare number)
    "version": pl.String(),
    "interface": pl.String(),
    "step": pl.Int64(),  # a progress line's step or iteration counter ("step 90", "iteration 90/1000", tqdm's "90/620 [")
    "address": pl.String(),  # an IPv4 address the line names: its own on NCCL's "Using" lines, else a peer's
    "nranks": pl.Int32(),
    # an NCCL communicator line ("comm 0x.. rank 1 nranks 2 cudaDev 0 busId 86000 [commId 0x..] - Init COMPLETE",
    # Abort/Destroy COMPLETE): the process's rank in that communicator, its GPU and the communicator's id
    "comm_rank": pl.Int32(),
    "device": pl.Int32(),  # the CUDA device index (cudaDev)
    "bus_id": pl.String(),  # the GPU's PCI bus id as NCCL prints it (busId, hex)
    "comm_id": pl.String(),  # the communicator's commId hash (NCCL >= 2.18), the same in every process of it
    "job": pl.String(),  # SLURM job or step id
    "reason": pl.String(),  # SLURM cancel reason, etc.
    "tasks": pl.String(),  # SLURM task range, e.g. "0-3,5"
    # fields that later stages read from a line's text, parsed once here (no stage after parse
    # applies a regex to ``message``)
    "env_name": pl.String(),  # an NCCL setting a process reports ("NCCL_SOCKET_IFNAME set by environment to eth0")
    "env_value": pl.String(),  # ... its value as printed ("eth0")
    "cuda_version": pl.String(),  # the CUDA version NCCL was built with ("NCCL version 2.21.5+cuda12.4": "12.4")
    "driver_version": pl.String(),  # the CUDA driver a process found ("cudaDriverVersion 12020")
    # NCCL's "Using" lines (nccl_net): the interface and address its Bootstrap or NET/Socket layer picked
    "net_layer": pl.String(),  # Bootstrap | NET/Socket
    "net_interface": pl.String(),
    "net_address": pl.String(),  # IPv4 or IPv6, as printed
    # ProcessGroupNCCL's hang reports
    "pg": pl.String(),  # the process group a line names ("[PG 0 Rank 3]", "[PG ID 1 ...]")
    "watchdog_at": pl.Int64(),  # the SeqNum a watchdog status line says it timed out at
    "last_enqueued": pl.Int64(),  # the last collective the rank enqueued (status and dump lines)
    "last_completed": pl.Int64(),  # ... and the last it completed
    "dump_self": pl.Boolean(),  # a dump signal from this rank's own watchdog (true) or another rank's (false)
    "dump_from": pl.Int64(),  # ... the rank it came from, when another
    "dump_first": pl.Boolean(),  # "First PG on this rank to signal dumping"
    # a rank that gave up waiting for others: collective (Gloo, monitored_barrier), store (rendezvous), watchdog
    "wait": pl.String(),
    "monitored_barrier": pl.Boolean(),  # the line is about monitored_barrier (TORCH_DISTRIBUTED_DEBUG=DETAIL runs one before a collective)
    "missing_rank": pl.Int64(),  # the rank monitored_barrier says did not arrive
    # the ranks whose keys a timed-out store wait waited for, sorted and comma-separated ("" when no key
    # names a rank): a plain string so that every export (CSV too) takes the table as it is
    "waited_ranks": pl.String(),
    "barrier_world": pl.Int64(),  # a rendezvous barrier's world size ("world_size=4, worker_count=5", "3/4 clients joined")
    "barrier_joined": pl.Int64(),  # ... and how many joined it
    # NCCL's own version check: "Mismatched NCCL version detected : rank 8 version 22703 rank 3 version 22602"
    "mismatch_rank": pl.Int64(),
    "mismatch_version": pl.String(),  # NCCL's version code (22703 is 2.27.3)
    "mismatch_peer_rank": pl.Int64(),
    "mismatch_peer_version": pl.String(),
    "loopback_fallback": pl.Boolean(),  # Gloo fell back to the loopback address (its host name did not resolve)
    # TORCH_DISTRIBUTED_DEBUG=DETAIL's collective fingerprints: "Rank 2 is running collective: CollectiveFingerPrint(...),
    # but Rank 3 is running collective: CollectiveFingerPrint(...)"
    "fingerprint": pl.Boolean(),  # the line reports one
    "fp_rank": pl.Int64(),
    "fp": pl.String(),
    "fp_peer_rank": pl.Int64(),
    "fp_peer": pl.String(),
    # a collective a line names outside a Work(...) too (a fingerprint's), for the reproducer
    "optype": pl.String(),  # its OpType
    "tensor_numel": pl.Int64(),  # the element count of its TensorShape
    "dtype": pl.String(),  # its TensorDtypes
    "wording": pl.String(),  # the message with its numbers and addresses masked ("#"): the same words on two ranks
    "env_assignments": pl.String(),  # settings a line assigns ("NCCL_IB_HCA=mlx5_0"), joined by parse.fields.ASSIGNMENT_SEPARATOR
    # what a line's words tell the reasoner (every row: true or false)
    "shutdown_noise": pl.Boolean(),  # ends a run without being a failure: "Exception ignored in", a warning
    "glog_below_error": pl.Boolean(),  # its own glog marker says warning or info ("[W socket.cpp:436]")
    "retrying": pl.Boolean(),  # a connection being retried ("failed to connect ..., retrying"), to an address it can use
    "nccl_error": pl.Boolean(),  # an NCCL error return as PyTorch reports it ("NCCL error: unhandled system error")
    "progress": pl.Boolean(),  # training at work: steps, epochs, a loss, a progress bar (not a traceback's source line)
    "progress_counted": pl.Boolean(),  # progress that counts (a number by its keyword, a bar, a rate): a process still working
    "ended_well": pl.Boolean(),  # the job or a worker ended well (torchelastic's SUCCEEDED, "training completed")
    "backtrace_frame": pl.Boolean(),  # a line of a native backtrace printed after an error (dmlc's "Stack trace:", "[bt] (3) ...")
    "start_banner": pl.Boolean(),  # a warning every job prints as it starts (torchrun's OMP_NUM_THREADS, glog's preamble)
    "socket_failed": pl.Boolean(),  # an NCCL line of its socket layer giving up (socket.cc -> 2, a refused or unroutable connect)
    "at_setup": pl.Boolean(),  # message or detail is about forming the process group (init_process_group, TCPStore, ...)
    "says_enqueued": pl.Boolean(),  # names a rank's "last enqueued" collective
    "says_nccl": pl.Boolean(),  # mentions NCCL (ProcessGroupNCCL, an NCCL error)
    "says_gloo": pl.Boolean(),  # mentions Gloo (ProcessGroupGloo, WorkGloo)
}

COLUMNS = tuple(SCHEMA)

#: The event id: the row's position in the table one job is analysed as (UInt32). Rule hits,
#: findings and evidence name events by it. It is no column of SCHEMA: a job's table is a part of
#: the inputs' table (jobs.group), so the id is given when the analysis starts (numbered), once.
EID = "eid"


def numbered(df: pl.DataFrame) -> pl.DataFrame:
    """The table with its event id column: the one it has, else row positions assigned now."""
    return df if EID in df.columns else df.with_row_index(EID)


def empty() -> pl.DataFrame:
    """An event table with no rows, for inputs with nothing to say."""
    return pl.DataFrame(schema=dict(SCHEMA))


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Give a parser's output exactly the schema: missing columns as nulls, fixed order.

    Parsers only produce the columns they know; this keeps every stage's input
    the same shape.
    """
    exprs = []
    for name, dtype in SCHEMA.items():
        if name in df.columns:
            exprs.append(pl.col(name).cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(exprs)


def matching(df: pl.DataFrame, literals: tuple[str, ...] = (), pattern: str | None = None, *, column: str = "message") -> pl.Series:
    """Rows whose ``column`` contains one of ``literals`` or matches ``pattern``."""
    tests = [pl.col(column).str.contains_any(list(literals))] if literals else []
    tests += [pl.col(column).str.contains(pattern)] if pattern is not None else []
    if not tests:
        return pl.repeat(False, df.height, dtype=pl.Boolean, eager=True)
    return per_text(df.select(column), {"_hit": pl.any_horizontal(tests).fill_null(False)}, column=column).get_column("_hit")


def per_text(df: pl.DataFrame, columns: Mapping[str, pl.Expr], *, column: str = "message") -> pl.DataFrame:
    """``df`` with ``columns`` added, expressions that read only ``column`` (see per_distinct).

    Tests of a few patterns cost about what hashing and joining back costs: they are run row by row
    unless at most DISTINCT_SHARE of the texts are distinct.
    """
    return per_distinct(df, lambda texts: texts.with_columns(**columns), column=column, share=DISTINCT_SHARE)


def per_distinct(
    df: pl.DataFrame, compute: Callable[[pl.DataFrame], pl.DataFrame], *, column: str = "message", share: float = 1.0
) -> pl.DataFrame:
    """``df`` with the columns ``compute`` adds, a function of ``column`` alone, row by row.

    Every rank of a big job repeats the same warnings: in a big table each distinct
    text is computed once and joined back (hashing a hundred thousand copies is cheaper
    than scanning each with a few hundred literals). A small table is computed as it is:
    there the hashing and joining back would cost more than the work. Nor is a table in which
    more than ``share`` of the texts are distinct (each rank's lines of a job written one file
    per rank name their rank or address), for a ``compute`` that costs less than the join back.
    ``compute`` may reorder rows; its new columns must not be in ``df`` already.
    """
    if df.height <= DISTINCT_FROM:
        return compute(df)
    texts = df.select(pl.col(column).unique())
    if texts.height > df.height * share:
        return compute(df)
    return df.join(compute(texts), on=column, how="left", maintain_order="left", nulls_equal=True)


#: Tables up to this many rows are tested row by row, bigger ones once per distinct text.
DISTINCT_FROM = 5000

#: ... by per_text unless more than this share of their texts are distinct. On 49,000 events of
#: 8,192 per-rank files, 75 % distinct, a test of a few literals took 23 ms row by row and 44 ms per
#: distinct text (7 ms of it finding them, 20 ms joining back).
DISTINCT_SHARE = 0.5
