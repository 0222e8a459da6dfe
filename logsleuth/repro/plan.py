"""What to reproduce: the collective, its shape, the processes and the environment.

A Plan comes from the logs (the watchdog's OpType and NumelIn, the ranks and
nodes seen, the NCCL/gloo tuning settings printed), from the flags, or from
both, a flag always winning. Everything that later reaches a process
environment or a script is validated here, once: a log is untrusted text.

A log never decides where a process connects, what it loads or what it
writes: of the variables a log sets only those on LOG_ENV_ALLOWED (NCCL's and
gloo's tuning knobs) are carried over; MASTER_ADDR, NCCL_COMM_ID, plugins,
files and the rest are dropped with a note, and the user may set them again
with ``--env``, which is the user confirming them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from logsleuth.events import NCCL_ENV, NCCL_NET, WATCHDOG_TIMEOUT
from logsleuth.parse.fields import ASSIGNMENT_SEPARATOR
from logsleuth.report.model import Verdict

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier")
BACKENDS = ("auto", "gloo", "nccl")
#: dtype -> (bytes per element, the name nccl-tests' -d takes)
DTYPES: Mapping[str, tuple[int, str]] = {
    "float32": (4, "float"),
    "float16": (2, "half"),
    "bfloat16": (2, "bfloat16"),
    "float64": (8, "double"),
    "int32": (4, "int32"),
    "int64": (8, "int64"),
    "int8": (1, "int8"),
    "uint8": (1, "uint8"),
}
_DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16", "bf16": "bfloat16", "double": "float64"}
#: PyTorch's scalar type names, as desync reports print them (TensorDtypes=Float).
_TORCH_DTYPES = {
    "Float": "float32",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Double": "float64",
    "Int": "int32",
    "Long": "int64",
    "Char": "int8",
    "Byte": "uint8",
}
#: ProcessGroup OpType -> the op that reproduces it exactly.
_OPTYPES = {
    "ALLREDUCE": "all_reduce",
    "ALLREDUCE_COALESCED": "all_reduce",
    "ALLGATHER": "all_gather",
    "_ALLGATHER_BASE": "all_gather",
    "ALLGATHER_COALESCED": "all_gather",
    "ALLGATHER_INTO_TENSOR_COALESCED": "all_gather",
    "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "reduce_scatter",
    "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter",
    "BROADCAST": "broadcast",
    "ALLTOALL": "all_to_all",
    "ALLTOALL_BASE": "all_to_all",
    "BARRIER": "barrier",
}
#: OpTypes with no collective of their own here -> the nearest one (same traffic pattern).
_NEAREST = {"REDUCE": "all_reduce", "GATHER": "all_gather", "SCATTER": "broadcast", "SEND": "all_to_all", "RECV": "all_to_all"}

#: Only these variables travel from a log or a flag into the processes and scripts.
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "MASTER_", "CUDA_")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:/@%^=+\-]{1,256}$")
#: Name parts of variables that make a process load code or write files where a log says
#: (DIR as a whole word: NCCL_P2P_DIRECT_DISABLE is a tuning setting, TORCH_EXTENSIONS_DIR a folder).
_ENV_DENY = re.compile(r"FILE|PATH|(?:^|_)DIRS?(?:_|$)|PLUGIN|INJECTION|HOME|CACHE|PRELOAD|(?:^|_)LIB")
#: The only variables taken over from a log: NCCL's and gloo's tuning settings. None of them
#: names an address, a port, a host, a file, a folder, a plugin, a library or a command; the
#: rest (MASTER_ADDR, NCCL_COMM_ID, NCCL_RAS_ADDR, NCCL_*_PLUGIN, NCCL_*_FILE, TORCH_TRACE, ...)
#: would let whoever wrote the log choose whom a rank rendezvouses with or what it loads.
LOG_ENV_ALLOWED = frozenset(
    {
        # interfaces and sockets
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_SOCKET_RETRY_CNT",
        "NCCL_SOCKET_RETRY_SLEEP_MSEC",
        "NCCL_OOB_NET_ENABLE",
        "NCCL_OOB_NET_IFNAME",
        "NCCL_CROSS_NIC",
        "GLOO_SOCKET_IFNAME",
        "GLOO_DEVICE_TRANSPORT",
        # InfiniBand / RoCE
        "NCCL_IB_DISABLE",
        "NCCL_IB_HCA",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_SL",
        "NCCL_IB_TC",
        "NCCL_IB_FIFO_TC",
        "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_IB_SPLIT_DATA_ON_QPS",
        "NCCL_IB_CUDA_SUPPORT",
        "NCCL_IB_PCI_RELAXED_ORDERING",
        "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_AR_THRESHOLD",
        "NCCL_IB_ECE_ENABLE",
        "NCCL_IB_MERGE_NICS",
        "NCCL_IB_MERGE_VFS",
        "NCCL_IB_RETURN_ASYNC_EVENTS",
        # network, GPUDirect RDMA
        "NCCL_NET",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_READ",
        "NCCL_NET_GDR_C2C",
        "NCCL_NET_SHARED_BUFFERS",
        "NCCL_NET_SHARED_COMMS",
        "NCCL_NET_DISABLE_INTRA",
        "NCCL_NET_FORCE_FLUSH",
        "NCCL_DMABUF_ENABLE",
        "NCCL_COLLNET_ENABLE",
        "NCCL_COLLNET_NODE_THRESHOLD",
        # peer-to-peer and shared memory
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_P2P_DIRECT_DISABLE",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE",
        "NCCL_P2P_PXN_LEVEL",
        "NCCL_PXN_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_SHM_USE_CUDA_MEMCPY",
        "NCCL_SHM_MEMCPY_MODE",
        "NCCL_SHM_LOCALITY",
        "NCCL_NVB_DISABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_NVLS_NCHANNELS",
        "NCCL_MNNVL_ENABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_CUMEM_HOST_ENABLE",
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_IGNORE_DISABLED_P2P",
        # algorithms, channels, buffers, launch
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_CTAS",
        "NCCL_MIN_CTAS",
        "NCCL_CGA_CLUSTER_SIZE",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_CTA_POLICY",
        "NCCL_LL_THRESHOLD",
        "NCCL_TREE_THRESHOLD",
        "NCCL_SINGLE_RING_THRESHOLD",
        "NCCL_LAUNCH_MODE",
        "NCCL_RUNTIME_CONNECT",
        "NCCL_GRAPH_MIXING_SUPPORT",
        "NCCL_GRAPH_REGISTER",
        "NCCL_LOCAL_REGISTER",
        "NCCL_LEGACY_CUDA_REGISTER",
        "NCCL_WORK_FIFO_DEPTH",
        "NCCL_COMM_BLOCKING",
        "NCCL_CHECKS_DISABLE",
        "NCCL_CHECK_POINTERS",
        "NCCL_SET_STACK_SIZE",
        "NCCL_SET_THREAD_NAME",
        "NCCL_UID_STAGGER_THRESHOLD",
        "NCCL_UID_STAGGER_RATE",
        # error handling and timeouts (old names PyTorch still reads)
        "NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_BLOCKING_WAIT",
        # debugging output, to stderr (NCCL_DEBUG_FILE, which names a file, is not here)
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_WARN_ENABLE_DEBUG_INFO",
    }
)
#: Variables the launcher sets on the node where it runs; a log's value is another machine's.
_NOT_FROM_LOGS = frozenset({"CUDA_VISIBLE_DEVICES"})
#: Names a log may set that point at a place to connect to (checked before any other reason).
_ENDPOINTS = frozenset({"MASTER_ADDR", "MASTER_PORT", "NCCL_COMM_ID"})
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")

#: The line prefix that carries a rank's result (JSON) on the worker's stdout.
RESULT_MARK = "logsleuth-repro-result "
#: Processes one machine is asked to start at most (the local run is one node's worth).
MAX_LOCAL_PROCESSES = 128
DEFAULTS: Mapping[str, object] = {
    "op": "all_reduce",
    "numel": 1 << 20,
    "dtype": "float32",
    "nproc": 2,
    "backend": "auto",
    "iters": 20,
    "warmup": 5,
    "timeout_s": 60.0,
}


class PlanError(ValueError):
    """A flag or combination that cannot be run; the message says what to change."""


def op_name(text: str) -> str | None:
    """'all_reduce', 'allreduce', 'all-reduce' or an OpType like 'ALLREDUCE' -> 'all_reduce'."""
    if text in _OPTYPES:
        return _OPTYPES[text]
    flat = text.strip().lower().replace("-", "").replace("_", "")
    return next((op for op in OPS if op.replace("_", "") == flat), None)


def dtype_name(text: str) -> str | None:
    """'float32', 'float', 'fp16', 'bf16', ... or PyTorch's 'Float' -> the canonical dtype name."""
    if text in _TORCH_DTYPES:
        return _TORCH_DTYPES[text]
    low = text.strip().lower()
    return low if low in DTYPES else _DTYPE_ALIASES.get(low)


def env_problem(name: str, value: str) -> str | None:
    """Why ``name=value`` may not reach a process or a script, or None when it may."""
    if not _ENV_NAME.match(name):
        return f"{name!r} is not a valid variable name"
    if not name.startswith(ENV_PREFIXES):
        return f"{name} is not an NCCL_/GLOO_/TORCH_/MASTER_/CUDA_ variable"
    if _ENV_DENY.search(name):
        return f"{name} names a file, folder or library; it is never carried over"
    if not _ENV_VALUE.match(value):
        return f"the value of {name} is empty, too long or has characters outside letters, digits and _.,:/@%^=+-"
    if name == "MASTER_PORT" and not (value.isdigit() and 0 < int(value) < 65536):
        return f"MASTER_PORT={value} is not a port number (1-65535)"
    return None


def log_env_problem(name: str, value: str) -> str | None:
    """Why ``name=value``, read in a log, is not carried over; None when it is (an allowed tuning setting, safe value)."""
    if name in LOG_ENV_ALLOWED:
        return env_problem(name, value)
    if name in _NOT_FROM_LOGS:
        return "the launcher sets it on the node where it runs"
    upper = name.upper()
    if name == "NCCL_HOSTID" or re.search(r"(?:^|_)(?:HOST|HOSTID|HOSTNAME)(?:_|$)", upper):
        return "names a host"
    if name in _ENDPOINTS or re.search(r"ADDR|(?:^|_)(?:PORT|ENDPOINT|URL|URI|ID|SERVER)(?:_|$)", upper):
        return "names an endpoint"
    if re.search(r"PLUGIN|LIB|PRELOAD|AUDIT|INJECTION", upper):
        return "loads a library"
    if name == "TORCH_TRACE" or re.search(r"FILE|PATH|DIR|HOME|CACHE", upper):
        return "names a file or folder"
    if re.search(r"(?:^|_)(?:CMD|COMMAND|EXEC|SHELL|SCRIPT)(?:_|$)", upper):
        return "runs a command"
    return "not an NCCL/gloo tuning setting the reproducer takes from logs"


def _dropped_note(name: str, value: str, why: str) -> str:
    """The note for a setting left behind: what, why, and how the user keeps it (when --env would take it)."""
    shown = name if _ENV_NAME.match(name) else ascii(name)
    if not _ENV_VALUE.match(value):  # unsafe or unprintable: the note must not carry it either
        return f"dropped {shown} from the logs: {why}"
    if env_problem(name, value) is None:
        return f"dropped {shown}={value} from the logs: {why}; pass --env {name}={value} to keep it"
    return f"dropped {shown}={value} from the logs: {why}; never carried over"


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` flags -> a validated mapping (PlanError on the first bad one)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise PlanError(f"--env {pair!r}: expected NAME=VALUE")
        problem = env_problem(name, value)
        if problem:
            raise PlanError(f"--env {pair!r}: {problem}")
        out[name] = value
    return out


def expand_nodes(text: str) -> tuple[str, ...]:
    """A node list as SLURM writes it ('node[01-03,07],gpu-2') -> the node names, in order."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text):
        names.extend(_expand_one(part.strip()))
    bad = [n for n in names if not _NODE.match(n)]
    if not names or bad:
        raise PlanError(f"--nodes {text!r}: not a node list (e.g. node01,node02 or node[01-04])")
    return tuple(dict.fromkeys(names))


def _expand_one(part: str) -> list[str]:
    m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", part)
    if not m:
        return [part] if part else []
    head, ranges, tail = m.groups()
    out: list[str] = []
    for spec in ranges.split(","):
        lo, _, hi = spec.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)) or (hi and int(hi) - int(lo) > 4096):
            raise PlanError(f"--nodes: bad range [{ranges}] in {part!r}")
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{str(n).zfill(len(lo))}{tail}"))
    return out


def size_bytes(op: str, numel: int, dtype: str, world: int) -> int:
    """The message size as nccl-tests counts it: all_gather's is the gathered output."""
    if op == "barrier":
        return 0
    return numel * DTYPES[dtype][0] * (world if op == "all_gather" else 1)


def bus_factor(op: str, world: int) -> float | None:
    """nccl-tests' busbw/algbw factor (doc/PERFORMANCE.md); None for barrier, which moves no payload."""
    n = world
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    return None


def bandwidth(op: str, nbytes: int, world: int, time_us: float) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s (10^9 bytes, as nccl-tests) for one iteration of ``time_us``."""
    factor = bus_factor(op, world)
    if factor is None or nbytes <= 0 or time_us <= 0:
        return None, None
    algbw = nbytes / 1e9 / (time_us / 1e6)
    return algbw, algbw * factor


@dataclass
class Found:
    """What the logs say about the suspect collective and its job; None where they say nothing."""

    op: str | None = None
    numel: int | None = None
    dtype: str | None = None
    world: int | None = None
    nproc: int | None = None
    nodes: tuple[str, ...] = ()
    implicated: tuple[str, ...] = ()
    backend: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    interfaces: tuple[str, ...] = ()
    suspect: str | None = None
    job_timeout_ms: int | None = None
    cause: str | None = None
    notes: list[str] = field(default_factory=list)


def find(events: pl.DataFrame, verdict: Verdict | None = None) -> Found:
    """Read the suspect collective, the job's shape and its environment from an event table."""
    found = Found(notes=[])
    if events.is_empty():
        return found
    events = events.sort("file", "line")
    _find_collective(events, found)
    _find_shape(events, found)
    _find_env(events, found)
    found.backend = _find_backend(events)
    found.interfaces = tuple(events.filter(pl.col("kind") == NCCL_NET).get_column("interface").drop_nulls().unique(maintain_order=True))
    if verdict is not None and verdict.category not in ("none", "unknown"):
        found.cause = verdict.cause
        named = [verdict.first_failure.node, *(e.node for e in verdict.evidence)]
        found.implicated = tuple(dict.fromkeys(n for n in named if n))
    return found


def _find_collective(events: pl.DataFrame, found: Found) -> None:
    """The collective that hung first: the watchdog's lowest SeqNum, else any Work(...) or fingerprint."""
    works = events.filter(pl.col("op").is_not_null() & pl.col("kind").is_in([WATCHDOG_TIMEOUT]))
    if works.is_empty():
        works = events.filter(pl.col("op").is_not_null() & pl.col("op").str.contains(r"^[A-Z_]+$"))
    if not works.is_empty():
        row = works.sort("seq", "file", "line", nulls_last=True).row(0, named=True)
        optype, numel = str(row["op"]), row["numel"]
        found.job_timeout_ms = row["timeout_ms"]
        where = f" on rank {row['rank']}" if row["rank"] is not None else ""
        seq = f" SeqNum={row['seq']}" if row["seq"] is not None else ""
        found.suspect = f"{optype}{seq}{where} ({row['file']}:{row['line']})"
    else:
        prints = events.filter(pl.col("optype").is_not_null())
        if prints.is_empty():
            return
        row = prints.row(0, named=True)
        optype, numel = str(row["optype"]), row["tensor_numel"]
        found.suspect = f"{optype} ({row['file']}:{row['line']})"
    found.op = _OPTYPES.get(optype) or _NEAREST.get(optype)
    if found.op is None:
        found.notes.append(f"OpType {optype} is not a collective the reproducer runs; choose one with --op")
    elif optype in _NEAREST:
        found.notes.append(f"OpType {optype} has no collective of its own here; {found.op} moves the same kind of traffic")
    if numel is not None and numel > 0:
        found.numel = int(numel)
    dtypes = events.get_column("dtype").drop_nulls()
    if dtypes.len():
        found.dtype = _TORCH_DTYPES.get(dtypes[0])


def _find_shape(events: pl.DataFrame, found: Found) -> None:
    """World size from NCCL's nranks, else the ranks seen; processes per node from local ranks or nodes."""
    nranks: list[int] = events.get_column("nranks").drop_nulls().to_list()
    ranks: list[int] = events.get_column("rank").drop_nulls().to_list()
    if nranks:
        found.world = max(nranks)
    elif ranks:
        found.world = max(ranks) + 1
        found.notes.append(f"world size {found.world} is the highest rank seen plus one; the job may have had more ranks")
    found.nodes = tuple(sorted(events.get_column("node").drop_nulls().unique()))
    local: list[int] = events.get_column("local_rank").drop_nulls().to_list()
    if local:
        found.nproc = max(local) + 1
    elif found.world:
        found.nproc = math.ceil(found.world / max(1, len(found.nodes)))


def _find_env(events: pl.DataFrame, found: Found) -> None:
    """The tuning settings the logs print (LOG_ENV_ALLOWED); the first value of each wins, the rest get a note."""
    seen: dict[str, list[str]] = {}
    settings = events.filter((pl.col("kind") == NCCL_ENV) & pl.col("env_name").is_not_null()).select("env_name", "env_value")
    for name, value in settings.iter_rows():
        seen.setdefault(name, []).append(value)
    for assigned in events.get_column("env_assignments").drop_nulls():  # parse.fields: "NAME=value" per setting
        for name, _, raw in (item.partition("=") for item in assigned.split(ASSIGNMENT_SEPARATOR)):
            seen.setdefault(name, []).append(raw.strip("'\"") if raw[0] in "'\"" else raw.rstrip(",.:"))
    for name, values in seen.items():
        distinct = list(dict.fromkeys(values))
        value = distinct[0]
        problem = log_env_problem(name, value)
        if problem:
            found.notes.append(_dropped_note(name, value, problem))
            continue
        if len(distinct) > 1:
            shown = ", ".join(v if _ENV_VALUE.match(v) else "(unsafe value)" for v in distinct[:4])
            found.notes.append(f"{name} has {len(distinct)} values in the logs ({shown}); using {value}")
        found.env[name] = value


def _find_backend(events: pl.DataFrame) -> str | None:
    if events.filter((pl.col("source") == "nccl") | pl.col("says_nccl")).height:
        return "nccl"
    if events.filter(pl.col("says_gloo")).height:
        return "gloo"
    return None


@dataclass(frozen=True)
class Plan:
    """One reproduction: what each process runs, how many, where, and with which environment.

    ``nproc`` processes start on this machine (the local run is one node's worth)
    and on each of ``nodes`` in an emitted script. ``world_size`` is what the
    local processes are told WORLD_SIZE is (by default ``nproc``): a larger one
    reproduces ranks that never arrive.
    """

    op: str
    numel: int
    dtype: str
    nproc: int
    backend: str
    iters: int
    warmup: int
    timeout_s: float
    world_size: int | None = None
    pg_timeout_s: float | None = None
    nodes: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    origin: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    found: Found | None = None

    @property
    def world(self) -> int:
        """The local run's WORLD_SIZE."""
        return self.world_size or self.nproc

    @property
    def nnodes(self) -> int:
        """Nodes an emitted script runs on (the allocation's when no node is named)."""
        return max(1, len(self.nodes))

    @property
    def collective_timeout_s(self) -> float:
        """The process group's timeout: by default half the hard limit, so PyTorch reports a hang before the kill."""
        return self.pg_timeout_s or max(1.0, self.timeout_s / 2)

    def size_bytes(self, world: int | None = None) -> int:
        return size_bytes(self.op, self.numel, self.dtype, world or self.world)

    def worker_args(self) -> list[str]:
        """The worker's command-line arguments (all validated values, no shell involved)."""
        return [
            f"--op={self.op}",
            f"--numel={self.numel}",
            f"--dtype={self.dtype}",
            f"--backend={self.backend}",
            f"--iters={self.iters}",
            f"--warmup={self.warmup}",
            f"--timeout={self.collective_timeout_s:g}",
        ]

    def describe(self) -> str:
        """One line a person reads: what runs, how big, how often."""
        what = self.op if self.op == "barrier" else f"{self.op} of {self.numel:,} {self.dtype} ({_human_bytes(self.size_bytes())})"
        ranks = f"{self.nproc} processes" + (f" told WORLD_SIZE={self.world}" if self.world != self.nproc else "")
        return f"{what}, {ranks}, backend {self.backend}, {self.warmup} warm-up + {self.iters} timed iterations"


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def make_plan(
    found: Found | None = None,
    *,
    op: str | None = None,
    numel: int | None = None,
    dtype: str | None = None,
    nproc: int | None = None,
    world_size: int | None = None,
    backend: str | None = None,
    iters: int | None = None,
    warmup: int | None = None,
    timeout_s: float | None = None,
    pg_timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    nodes: str | None = None,
) -> Plan:
    """Combine flags (which win), what the logs say, and defaults into a checked Plan."""
    found = found or Found()
    origin: dict[str, str] = {}
    notes = list(found.notes)

    def pick(name: str, flag: object, logged: object) -> object:
        if flag is not None:
            origin[name] = "flag"
            return flag
        if logged is not None:
            origin[name] = "logs"
            return logged
        return DEFAULTS[name]

    op_text = str(pick("op", op, found.op))
    chosen_op = op_name(op_text)
    if chosen_op is None:
        raise PlanError(f"--op {op_text!r}: choose one of {', '.join(OPS)}")
    dtype_text = str(pick("dtype", dtype, found.dtype))
    chosen_dtype = dtype_name(dtype_text)
    if chosen_dtype is None:
        raise PlanError(f"--dtype {dtype_text!r}: choose one of {', '.join(DTYPES)}")
    logged_backend = {"gloo": "gloo", "nccl": "auto"}.get(found.backend or "")
    chosen_backend = str(pick("backend", backend, logged_backend)).lower()
    if chosen_backend not in BACKENDS:
        raise PlanError(f"--backend {chosen_backend!r}: choose one of {', '.join(BACKENDS)}")
    if found.backend == "nccl" and backend is None:
        notes.append("the job used NCCL: this run uses NCCL where GPUs are present and gloo (over TCP) elsewhere")
    n = _positive("--nproc", pick("nproc", nproc, found.nproc))
    if n > MAX_LOCAL_PROCESSES:
        raise PlanError(f"--nproc {n}: at most {MAX_LOCAL_PROCESSES} processes per machine; pass a smaller --nproc")
    world = _positive("--world-size", world_size) if world_size is not None else None
    count = _positive("--numel", pick("numel", numel, found.numel))
    iterations = _positive("--iters", pick("iters", iters, None))
    warm = _non_negative("--warmup", pick("warmup", warmup, None))
    limit = float(pick("timeout_s", timeout_s, None))  # type: ignore[arg-type]
    if not 2 <= limit <= 24 * 3600:
        raise PlanError(f"--timeout {limit:g}: give seconds between 2 and 86400")
    if pg_timeout_s is not None:
        if not 1 <= pg_timeout_s <= 24 * 3600:
            raise PlanError(f"--pg-timeout {pg_timeout_s:g}: give seconds between 1 and 86400")
        if pg_timeout_s >= limit:
            notes.append(f"--pg-timeout {pg_timeout_s:g} is not below --timeout {limit:g}: a hang is killed before PyTorch can report it")
    node_list = expand_nodes(nodes) if nodes else _suspect_nodes(found, notes)
    if nodes:
        origin["nodes"] = "flag"
    # a Found made by hand (not by find()) is held to the same rule: only tuning settings come from logs
    logged_env = {k: v for k, v in found.env.items() if log_env_problem(k, v) is None}
    for name, value in (env or {}).items():
        problem = env_problem(name, value)
        if problem:
            raise PlanError(f"--env {name}: {problem}")
    merged = {**logged_env, **(env or {})}
    if env:
        origin["env"] = "flag"
    elif logged_env:
        origin["env"] = "logs"
    for name in merged:
        origin[f"env.{name}"] = "flag" if env and name in env else "logs"
    if chosen_op in ("reduce_scatter", "all_to_all"):
        step = math.lcm(world or n, n * max(1, len(node_list)))
        if count % step:
            rounded = max(step, count - count % step)
            notes.append(
                f"numel {count:,} is not a multiple of the world size ({step}); {chosen_op} splits it evenly, so {rounded:,} is used"
            )
            count = rounded
    return Plan(
        op=chosen_op,
        numel=count,
        dtype=chosen_dtype,
        nproc=n,
        backend=chosen_backend,
        iters=iterations,
        warmup=warm,
        timeout_s=limit,
        world_size=world,
        pg_timeout_s=pg_timeout_s,
        nodes=node_list,
        env=merged,
        origin=origin,
        notes=tuple(notes),
        found=found,
    )


def _suspect_nodes(found: Found, notes: list[str]) -> tuple[str, ...]:
    """The verdict's nodes; with a partner from the job when only one is implicated, so the test crosses the network."""
    nodes = list(found.implicated) or list(found.nodes)
    if len(nodes) == 1 and len(found.nodes) > 1:
        partner = next(n for n in found.nodes if n not in nodes)
        notes.append(f"only {nodes[0]} is implicated; {partner} joins it so the test crosses the network between nodes")
        nodes.append(partner)
    return tuple(nodes)


def _positive(flag: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PlanError(f"{flag} {value}: give a whole number of at least 1")
    return value


def _non_negative(flag: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PlanError(f"{flag} {value}: give a whole number of at least 0")
    return value
