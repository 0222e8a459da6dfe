"""Fields any event's text may carry, whatever its kind, parsed once for the stages after parsing.

Runs last, on the finished rows (folded blocks included), over the text the table keeps as
``message``; each group of fields is looked for only in rows holding one of its literals.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from logsleuth.events import matching, per_distinct

from .common import field, integer, with_columns_of
from .python import SHOWN_SOURCE

#: The CUDA driver version a process found (NCCL INFO ``cudaDriverVersion 12020``).
_DRIVER = r"cudaDriverVersion (\d+)"
#: The process group a ProcessGroupNCCL line names: ``[PG 0 Rank 3]``, ``[PG ID 1 PG GUID 1 Rank 3]``.
_PG = r"\[PG (?:ID )?(\d+)"
#: The watchdog's status line: the SeqNum it timed out at and how far its rank got.
_STATUS = (
    r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work):? (\d+),? (?:PG status: )?"
    r"last enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)"
)
#: A rank told to dump its state because a collective timed out, here or on another rank.
_DUMP = r"Received a dump signal due to a collective timeout from (this local rank|\s*rank (-?\d+))"
_DUMP_STATUS = r"Last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
_FIRST = "First PG on this rank to signal dumping"
#: A rank that gave up waiting for the others: Gloo's timeout (also inside a traceback's exception
#: line) and monitored_barrier's (collective); a rendezvous store wait (store); NCCL's watchdog.
_GLOO = r"Timed out waiting \d+ms for (?:recv|send) operation|failed to pass monitoredBarrier|timed out in monitoredBarrier"
#: A store wait that timed out lists the keys it waited for; per-rank keys end in the rank
#: (gloo's full-mesh rendezvous: ``keys: /default_pg/0//cpu//0/3``).
_STORE_WAIT = r"wait timeout after \d+ ?ms, keys: (.+)$"
_WATCHDOG = "Watchdog caught collective operation timeout"
#: Gloo's monitored_barrier names the rank that did not arrive.
_MISSED_BARRIER = r"Rank (\d+) failed to pass monitoredBarrier"
#: What the rendezvous barrier says about its members: the TCPStore barrier's ``world_size=4,
#: worker_count=5`` (or ``num_workers_joined``), c10d's ``3/4 clients joined``.
_BARRIER = r"world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+)"
_CLIENTS = r"(\d+)/(\d+) (?:clients|workers) joined"


# What a line's words tell the reasoner (reason.verdict), one Boolean column each, on every row.
#: Messages that end a run without being a failure in themselves (interpreter shutdown noise).
_SHUTDOWN_NOISE = r"(?i)^Exception ignored in|\bwarn(?:ing)?\b"
#: A connection being retried (c10d's client socket, NCCL's bootstrap, Gloo): as the last line
#: of a log, the process was still trying to reach its peers when the log ends.
_STILL_CONNECTING = r"(?i)fail(?:ed)? to connect|connect(?: to \S+)? returned .*retrying|Connection (?:refused|timed out).*retry"
#: ... except an address the socket cannot use at all (c10d tries every address of the host in
#: turn: an IPv6 one gives EINVAL or EAFNOSUPPORT, and the next one is tried), which is no retry.
_UNUSABLE_ADDRESS = r"errno: (?:22|97)\b"
#: A line whose own glog marker says warning or info (``[W socket.cpp:436]``, ``[W1008 23:40:22.83 socket.cpp:767]``),
#: whatever a wrapper that labels every stderr line an error put before it.
#: TensorFlow's, XLA's and absl's logging (``2020-06-08 05:30:15.889706: W tensorflow/core/.../x.cc:103] ...``) say it the same way.
_GLOG_NOT_ERROR = r"\[[WI]\d{0,4}(?: [\d:.]+)?(?: \d+)? ?[\w/.-]+\.(?:cpp|cc|h|hpp):\d+\]|(?:^|\d: )[WI] [\w/.-]+\.(?:cpp|cc|h|hpp):\d+\] "
#: An NCCL error return as PyTorch (or NCCL's own API) reports it: ``NCCL error in: ...``,
#: ``NCCL error: unhandled system error``, ``ncclSystemError: System call ...``.
NCCL_ERROR_RETURN = r"\bNCCL error\b|\bnccl(?:System|Internal|UnhandledCuda|InvalidUsage|InvalidArgument|Remote)Error\b"
#: A line that says the job, or a worker of it, ended well (torchelastic's events and agent, Trainer loops).
_ENDED_WELL = (
    r"torchelastic\.worker\.status\.SUCCEEDED|worker group successfully finished|Done waiting for other agents"
    r"|Local worker group finished \(WorkerState\.SUCCEEDED\)|Process \d+ exits successfully\."
    r"|`Trainer\.fit` stopped: `max_(?:epochs|steps|time)=|(?i:\btraining (?:completed|finished|complete|done)\b)"
    # nccl-tests' summary after its last size (src/common.cu): every check passed, the run is over
    r"|^# Out of bounds values : 0 OK|^# Avg bus bandwidth\s*: "
    # the distributed sanity check of vLLM's troubleshooting guide (docs/.../troubleshooting.md's test.py)
    r"|\b(?:PyTorch|vLLM) (?:NCCL|GLOO)(?: with cuda graph)? is successful!|^sanity check is successful!"
)
#: Warnings that launchers and libraries print as every job starts, whatever happens next: they show
#: the job starting, not at work (torchrun's OMP_NUM_THREADS banner and its star lines, and mmcv's copy of it, torch.distributed.launch's deprecation, accelerate's
#: defaults, glog's preamble, ssh's known-hosts note, DeepSpeed's missing-hostfile note, libibverbs'
#: config directory, and the source line a Python warning echoes).
_START_BANNER = (
    r"Setting (?:OMP|MKL)_NUM_THREADS environment variable for each process|^(?:torch\.distributed\.run: \[WARNING\]\s*)?\**\s*$"
    r"|The following values were not passed to .accelerate launch.|To avoid this warning pass in values for each of the problematic"
    r"|The module torch\.distributed\.launch is deprecated|Logging before InitGoogleLogging\(\) is written to STDERR|Permanently added .* to the list of known hosts"
    r"|Unable to find hostfile, will proceed with training with local resources only"
    r"|libibverbs: Warning: couldn't open config directory|^\s*warnings\.warn\("
)
#: A native backtrace as dmlc-core prints it under an error (DGL, MXNet, TVM, XGBoost: "Stack trace:",
#: then "[bt] (N) lib.so(...) [0x...]"): the error's own lines, not output that followed it.
_BACKTRACE_FRAME = r"^\s*\[bt\] \(\d+\) |^\s*Stack trace:\s*$"
#: NCCL's socket layer giving up (misc/socket.cc returning an error, a refused or unroutable connect).
_SOCKET_FAILED = r"socket\.cc:\d+ -> [1-9]|(?i:connection refused|no route to host|network is unreachable|connect(?:ion)? timed out)"


#: A collective benchmark's measured bandwidth (``algbw: 11.1 GBps``, ``busbw: 20.9 GBps``): progress, and progress that counts.
_BANDWIDTH = r"\b(?:algbw|busbw)\W{0,3}\d"
#: A line that shows training going on: step/epoch/iteration counters, a loss, a progress bar, a printed
#: tensor that autograd computed (``tensor(0.52, device='cuda:1', grad_fn=<MseLossBackward0>)``), a
#: benchmark's result row.
_PROGRESS = (
    r"(?i)\b(?:step|steps|iter|iteration|epoch|loss|batch|it/s|s/it|samples/s|tokens/s)\b|\d+%\||grad_fn=<\w*Backward"
    rf"|{_BANDWIDTH}"
    # a result row of nccl-tests (size, count, type, redop, root, then times and bandwidths)
    r"|^\s*\d+\s+\d+\s+(?:float|double|half|bfloat16|int8|uint8|int32|uint32|int64|uint64|f8e4m3|f8e5m2)\s+(?:sum|prod|max|min|avg|none|mulsum)\s+-?\d+\s+\d"
)
#: Progress that counts: a number by its keyword (``step 12``, ``loss: 0.52``, ``Epoch 3/10``), a bar, a
#: rate. What a process printed after an exception shows it kept working only if it counts; a wrapped
#: exception message runs on with words such as "participate in calculating loss".
_COUNTED = (
    r"(?i)\b(?:step|steps|iter|iteration|epoch|ep|loss|batch)\b\W{0,3}[-+]?\d|\d+%\||\b\d+/\d+\b|^\s*\d+\s+\d+\s+[a-z]\w*\s+[a-z]+\s+-?\d"
    rf"|\b(?:it/s|s/it|samples/s|tokens/s)\b|grad_fn=<\w*Backward|{_BANDWIDTH}"
)
#: A command line echoed into the log (a shell prompt, a launcher's ``cmd = ...``): its ``--batch-size``
#: and ``--epochs`` options are no training at work.
_COMMAND_LINE = r"\s--[A-Za-z][\w-]*(?:[= ]|$)"
#: Where a set-up failure is raised: forming the process group, or DDP's first exchange.
_SETUP = (
    r"init_process_group|_new_process_group_helper|connectFullMesh|rendezvous|_verify_param|_store_based_barrier"
    r"|TCPStore|FileStore|new_group|Connection refused|Timed out waiting|wait timeout"
)


def _says(texts: pl.DataFrame) -> pl.DataFrame:
    """The columns of what a line's words say: flags, and the wording."""
    msg = pl.col("msg")

    def has(pattern: str) -> pl.Expr:
        return msg.str.contains(pattern).fill_null(False)

    return texts.with_columns(
        **{
            "shutdown_noise": has(_SHUTDOWN_NOISE),
            "glog_below_error": has(_GLOG_NOT_ERROR),
            "retrying": has(_STILL_CONNECTING) & ~has(_UNUSABLE_ADDRESS),
            "nccl_error": has(NCCL_ERROR_RETURN),
            "progress": has(_PROGRESS) & ~has(SHOWN_SOURCE) & ~has(_COMMAND_LINE),
            "progress_counted": has(_COUNTED) & has(_PROGRESS) & ~has(SHOWN_SOURCE) & ~has(_COMMAND_LINE),
            "ended_well": has(_ENDED_WELL),
            "start_banner": has(_START_BANNER),
            "backtrace_frame": has(_BACKTRACE_FRAME),
            "_socket_words": has(_SOCKET_FAILED),
            "says_enqueued": has("(?i)last enqueued"),
            "says_nccl": has("NCCL"),
            "says_gloo": has(r"(?i)\bgloo\b|ProcessGroupGloo|WorkGloo"),
            "wording": msg.str.replace_all(_NUMBERS, "#"),
        }
    )


def _driver(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(field(pl.col("msg"), _DRIVER, 1).alias("driver_version"))


def _pg(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(field(pl.col("msg"), _PG, 1).alias("pg"))


def _progress(df: pl.DataFrame) -> pl.DataFrame:
    """The watchdog's status line and a dump's: SeqNum timed out at, last enqueued and completed."""
    msg = pl.col("msg")
    return df.with_columns(
        integer(msg, _STATUS, 1).alias("watchdog_at"),
        pl.coalesce(integer(msg, _STATUS, 2), integer(msg, _DUMP_STATUS, 1)).alias("last_enqueued"),
        pl.coalesce(integer(msg, _STATUS, 3), integer(msg, _DUMP_STATUS, 2)).alias("last_completed"),
    )


def _dump(df: pl.DataFrame) -> pl.DataFrame:
    """Where a dump signal came from: this rank's own watchdog (dump_self) or another rank's (dump_from)."""
    msg = pl.col("msg")
    origin = field(msg, _DUMP, 1)
    return df.with_columns(
        pl.when(origin.is_not_null()).then(origin == "this local rank").alias("dump_self"),
        integer(msg, _DUMP, 2).alias("dump_from"),
        pl.when(msg.str.contains(_FIRST, literal=True)).then(pl.lit(True)).alias("dump_first"),
    )


def _wait(df: pl.DataFrame) -> pl.DataFrame:
    """What a rank gave up waiting for, the rank a monitored barrier missed, the ranks a store wait waited for."""
    msg = pl.col("msg")
    keys = field(msg, _STORE_WAIT, 1)
    return df.with_columns(
        pl.when(msg.str.contains(_GLOO))
        .then(pl.lit("collective"))
        .when(keys.is_not_null())
        .then(pl.lit("store"))
        .when(msg.str.contains(_WATCHDOG, literal=True))
        .then(pl.lit("watchdog"))
        .alias("wait"),
        pl.when(msg.str.contains("monitoredBarrier", literal=True)).then(pl.lit(True)).alias("monitored_barrier"),
        integer(msg, _MISSED_BARRIER, 1).alias("missing_rank"),
        keys.str.split(", ")
        .list.eval(pl.element().str.extract(r"/(\d+)$", 1).cast(pl.Int64).drop_nulls().unique().sort().cast(pl.String))
        .list.join(",")
        .alias("waited_ranks"),
    )


def _barrier(df: pl.DataFrame) -> pl.DataFrame:
    """Members of a rendezvous barrier: how many the world has, how many joined."""
    msg = pl.col("msg")
    return df.with_columns(
        pl.coalesce(integer(msg, _BARRIER, 1), integer(msg, _CLIENTS, 2)).alias("barrier_world"),
        pl.coalesce(integer(msg, _BARRIER, 2), integer(msg, _CLIENTS, 1)).alias("barrier_joined"),
    )


#: NCCL's own version check (>= 2.23): its rank and version code, and the peer's that differ.
_MISMATCH_WARN = r"Mismatched NCCL version detected : rank (\d+) version (\d+) rank (\d+) version (\d+)"
#: Gloo could not resolve its host name and fell back to the loopback address.
_LOOPBACK_FALLBACK = "Using the loopback address as fallback"
#: TORCH_DISTRIBUTED_DEBUG=DETAIL: each rank reports its own collective's fingerprint and a peer's
#: (``Rank 2 is running collective: CollectiveFingerPrint(...), but Rank 3 is running collective: ...``).
_FINGERPRINT = "is running (?:inconsistent )?collective: "
_FP_SELF = r"Rank (\d+) is running (?:inconsistent )?collective: (.+?)(?:, but Rank \d+ is running collective: |$)"
_FP_PEER = r", but Rank (\d+) is running collective: (.+?)(?:\.?Collectives differ in the following aspects|$)"


def _nccl_check(df: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("msg")
    return df.with_columns(
        integer(msg, _MISMATCH_WARN, 1).alias("mismatch_rank"),
        field(msg, _MISMATCH_WARN, 2).alias("mismatch_version"),
        integer(msg, _MISMATCH_WARN, 3).alias("mismatch_peer_rank"),
        field(msg, _MISMATCH_WARN, 4).alias("mismatch_peer_version"),
    )


def _loopback(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(pl.col("msg").str.contains(_LOOPBACK_FALLBACK, literal=True).alias("loopback_fallback"))


def _fingerprints(df: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("msg")
    return df.with_columns(
        msg.str.contains(_FINGERPRINT).alias("fingerprint"),
        integer(msg, _FP_SELF, 1).alias("fp_rank"),
        field(msg, _FP_SELF, 2).alias("fp"),
        integer(msg, _FP_PEER, 1).alias("fp_peer_rank"),
        field(msg, _FP_PEER, 2).alias("fp_peer"),
    )


def _tensors(df: pl.DataFrame) -> pl.DataFrame:
    """The collective a line names by its OpType (a fingerprint's too, not only a Work's), the element
    count of its TensorShape and its TensorDtypes."""
    msg = pl.col("msg")
    dims = (
        field(msg, r"TensorShape=\[([\d, ]*)\]", 1)
        .str.split(",")
        .list.eval(pl.element().filter(pl.element().str.strip_chars() != "").str.strip_chars().cast(pl.Int64))
    )
    return df.with_columns(
        field(msg, r"OpType=([A-Z_]+)", 1).alias("optype"),
        dims.list.eval(pl.element().product()).list.first().alias("tensor_numel"),
        field(msg, r"TensorDtypes=(\w+)", 1).alias("dtype"),
    )


#: A setting the reproducer reads (to carry it over, or to say why it was dropped), as a launcher, a
#: script or NCCL prints it (``NCCL_IB_HCA=mlx5_0``, ``MASTER_ADDR='node01'``): name and value, quoted or bare.
_ASSIGNMENT = (
    r"\b(?:(?:NCCL|GLOO|TORCH|MASTER|CUDA)_[A-Z0-9_]+|LD_PRELOAD|LD_LIBRARY_PATH|LD_AUDIT)"
    r"=(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"';)]+)"
)
#: Joins the assignments of one line in ``env_assignments`` (a character no log line holds).
ASSIGNMENT_SEPARATOR = "\x1f"


def _assignments(df: pl.DataFrame) -> pl.DataFrame:
    found = pl.col("msg").str.extract_all(_ASSIGNMENT)
    return df.with_columns(pl.when(found.list.len() > 0).then(found.list.join(ASSIGNMENT_SEPARATOR)).alias("env_assignments"))


#: Numbers and addresses, which differ between ranks that failed the same way.
_NUMBERS = r"0x[0-9a-fA-F]+|\d+"


#: (literals one of which the text holds, the fields read from such rows)
_GROUPS: tuple[tuple[tuple[str, ...], Callable[[pl.DataFrame], pl.DataFrame]], ...] = (
    (("cudaDriverVersion ",), _driver),
    (("[PG ",), _pg),
    (("ast enqueued",), _progress),
    (("Received a dump signal", _FIRST), _dump),
    (("Timed out waiting", "monitoredBarrier", "wait timeout after", _WATCHDOG), _wait),
    (("world_size=", " joined"), _barrier),
    (("Mismatched NCCL version",), _nccl_check),
    ((_LOOPBACK_FALLBACK,), _loopback),
    (("is running ",), _fingerprints),
    (("OpType=", "TensorDtypes="), _tensors),
    (("NCCL_", "GLOO_", "TORCH_", "MASTER_", "CUDA_", "LD_"), _assignments),
)


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Fill the text fields of every row, each distinct text once (per_distinct): every field but
    socket_failed and at_setup reads the message alone."""
    df = per_distinct(with_columns_of(df, "detail"), _read, column="msg")
    with_detail = df.select(pl.concat_str([pl.col("msg"), pl.col("detail").fill_null("")], separator=" ").alias("_text"))
    return df.with_columns(
        (pl.col("_socket_words") & (pl.col("source") == "nccl")).alias("socket_failed"),
        matching(with_detail, pattern=_SETUP, column="_text").alias("at_setup"),
    ).drop("_socket_words")


def _read(texts: pl.DataFrame) -> pl.DataFrame:
    """The message fields of ``texts``: each group's read only on the texts holding one of its literals."""
    names = [f"_group{i}" for i in range(len(_GROUPS))]
    texts = texts.with_columns(
        pl.col("msg").str.contains_any(list(literals)).fill_null(False).alias(name)
        for name, (literals, _) in zip(names, _GROUPS, strict=True)
    )
    for name, (_, read) in zip(names, _GROUPS, strict=True):
        mask = texts.get_column(name)
        if mask.any():
            texts = pl.concat([texts.filter(~mask), read(texts.filter(mask))], how="diagonal_relaxed")
    return _says(texts.drop(names))
