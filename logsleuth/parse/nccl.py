"""NCCL debug lines (NVIDIA/nccl src/debug.cc).

``[stamp]<host>:<pid>:<tid> [<cudaDev>] [<file>:<line> [(func)] ]NCCL INFO|WARN <msg>``;
old releases omit the stamp and ``(func)``, very old ones the host. A line pasted without
its ``host:pid:tid [dev]`` prefix (``graph/topo.h:230 NCCL WARN Could not find NET with
id 0``) is still NCCL's line, without node and pid. The bracket
number is the CUDA device, not a rank: ranks come from ``Init COMPLETE`` lines,
which map (host, pid) to a global rank for the other lines of that process.
"""

from __future__ import annotations

import polars as pl

from logsleuth import events

from .common import Example, claim, field, on_rows_with, short_host, with_columns_of

_LINE = (
    r"^(?:\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)\] ?)?"
    r"(?:(?:(?P<host>[\w.%/-]+):(?P<pid>\d+):(?P<tid>\d+) )?\[(?P<dev>\d+)\] )?"
    r"(?:(?P<src>[\w./-]+:\d+) (?:\((?P<func>\w+)\) )?)?"
    r"NCCL (?P<lvl>INFO|WARN|TRACE|CALL|ABORT)\b ?(?P<body>.*)$"
)
_VERSION = r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda([\d.]+))?"
_BARE_VERSION = r"^\s*NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda[\d.]+)?\s*$"
_INIT = r"comm (0x[0-9a-fA-F]+) rank (\d+) nr?anks (\d+)\b.*Init COMPLETE"
#: Any communicator line: Init START/COMPLETE, Abort/Destroy COMPLETE, Revoke (init.cc, v2.7-HEAD; nvmlDev from 2.18).
_COMM = r"comm (0x[0-9a-fA-F]+) rank (\d+) n[Rr]anks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-fA-F]+)\b"
_COMM_ID = r"\bcommId (0x[0-9a-fA-F]+)\b"
_BOOTSTRAP_IF = r"Bootstrap ?: Using ([^:\s]+):"
_NET_IF = r"NET/(?:Socket|IB) ?: Using \[\d+\]([^:\s]+)"
_ENV = r"(NCCL_\w+) set by environment to (\S+)"
_UNWIND = r"^([\w./-]+:\d+) -> (\d+)"
_LEVEL = {"WARN": "warning", "INFO": "info", "TRACE": "debug", "CALL": "debug", "ABORT": "error"}


#: Literals of the NCCL lines worth keeping: the ingest prefilter keeps the lines that hold one (the
#: thousands of other INFO lines of NCCL_DEBUG=INFO are dropped before parsing; those that get through
#: for another keyword are still claimed, as nccl_info).
TRIGGERS = (
    "NCCL WARN",
    "NCCL version",
    "Init COMPLETE",
    "Init START",
    "Abort COMPLETE",
    "Destroy COMPLETE",
    "Bootstrap",
    "NET/",
    "NCCL_",
    # an error return unwinding, "init.cc:1234 -> 2", named by its source file (.cc/.cu/.h, a
    # plugin's .c): " -> " alone is in every "Channel 00/0 : 0[0] -> 1[1]" and "Ring" line
    ".cc:",
    ".cu:",
    ".h:",
    ".c:",
)

KINDS = (
    events.NCCL_VERSION,
    events.NCCL_INIT,
    events.NCCL_NET,
    events.NCCL_ENV,
    events.NCCL_UNWIND,
    events.NCCL_WARN,
    events.NCCL_INFO,
)

EXAMPLES: tuple[Example, ...] = (
    (
        "node01:1234:1234 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        {"kind": events.NCCL_VERSION, "version": "2.21.5", "node": "node01", "pid": 1234},
    ),
    ("NCCL version 2.18.1+cuda12.1", {"kind": events.NCCL_VERSION, "version": "2.18.1", "source": "nccl"}),
    (
        "node01:1234:1290 [1] NCCL INFO comm 0x55d4c0 rank 3 nranks 8 cudaDev 1 busId 1b000 commId 0x9f2e1c - Init COMPLETE",
        {"kind": events.NCCL_INIT, "rank": 3, "nranks": 8, "comm_rank": 3, "device": 1, "bus_id": "1b000", "comm_id": "0x9f2e1c"},
    ),
    (
        "node01:1234:1290 [1] NCCL INFO comm 0x55d4c0 rank 3 nRanks 8 cudaDev 1 busId 1b000 - Destroy COMPLETE",
        {"kind": events.NCCL_INFO, "comm_rank": 3, "device": 1},
    ),
    (
        "node01:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.12<0>",
        {"kind": events.NCCL_NET, "interface": "eth0", "address": "10.0.0.12"},
    ),
    ("node01:1234:1234 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.12<0>", {"kind": events.NCCL_NET, "interface": "ib0"}),
    (
        "node01:1234:1234 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
        {"kind": events.NCCL_ENV, "interface": "eth0", "detail": "NCCL_SOCKET_IFNAME=eth0"},
    ),
    (
        "kp-worker-0:3468:3905 [4] NCCL INFO transport/net.cc:1302 -> 6",
        {"kind": events.NCCL_UNWIND, "exit_code": 6, "detail": "transport/net.cc:1302", "level": "error", "node": "kp-worker-0"},
    ),
    (
        "node02:405884:407462 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.5<45213> failed : Software caused connection abort",
        {"kind": events.NCCL_WARN, "level": "warning", "node": "node02", "pid": 405884, "detail": "misc/socket.cc:484"},
    ),
    ("graph/topo.h:230 NCCL WARN Could not find NET with id 0", {"kind": events.NCCL_WARN, "source": "nccl"}),
)


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim NCCL lines (only rows that say "NCCL " are looked at)."""
    return on_rows_with(df, ("NCCL ",), _annotate)


def _annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim NCCL lines; fill node, pid, version, interface, rank and nranks, and for communicator
    lines the process's rank in it, its GPU (cudaDev, busId) and the communicator's commId."""
    parts = pl.col("msg").str.extract_groups(_LINE)
    df = df.with_columns(parts.alias("_n"))
    n = pl.col("_n")
    body = n.struct.field("body")
    # a pattern that several fields read is matched once: polars evaluates an expression again in
    # every column that holds it (and compiles it again, its regex cache being smaller than the parsers' set)
    df = df.with_columns(body.str.extract_groups(p).alias(f"_{name}") for name, p in _READ_ONCE.items())
    init, comm, env, unwind = (pl.col(f"_{name}").struct.field for name in _READ_ONCE)
    is_nccl = n.struct.field("lvl").is_not_null()
    lvl = n.struct.field("lvl")
    kind = (
        pl.when(body.str.contains(_VERSION))
        .then(pl.lit(events.NCCL_VERSION))
        .when(init("1").is_not_null())
        .then(pl.lit(events.NCCL_INIT))
        .when(body.str.contains(_BOOTSTRAP_IF) | body.str.contains(_NET_IF))
        .then(pl.lit(events.NCCL_NET))
        .when(env("1").is_not_null())
        .then(pl.lit(events.NCCL_ENV))
        .when(unwind("1").is_not_null())
        .then(pl.lit(events.NCCL_UNWIND))
        .when(lvl == "WARN")
        .then(pl.lit(events.NCCL_WARN))
        .otherwise(pl.lit(events.NCCL_INFO))
    )
    src = n.struct.field("src")
    # NCCL_DEBUG=VERSION (and WARN since 2.x) prints the version alone on a line, no host prefix
    bare = pl.col("msg").str.extract_groups(_BARE_VERSION)
    df = claim(
        df,
        ~is_nccl & bare.struct.field("v").is_not_null(),
        {
            "kind": pl.lit(events.NCCL_VERSION),
            "source": pl.lit("nccl"),
            "level": pl.lit("info"),
            "version": bare.struct.field("v"),
        },
    )
    df = claim(
        df,
        is_nccl,
        {
            "kind": kind,
            "source": pl.lit("nccl"),
            "level": pl.when(unwind("1").is_not_null()).then(pl.lit("error")).otherwise(lvl.replace_strict(_LEVEL, default="info")),
            "node": short_host(n.struct.field("host")),
            "pid": n.struct.field("pid").cast(pl.Int64, strict=False),
            "time": pl.coalesce(
                n.struct.field("ts").str.replace("T", " ").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us"),
                pl.col("time"),
            ),
            "version": pl.coalesce(field(body, _VERSION, 1), pl.col("version")),
            "interface": pl.coalesce(
                field(body, _BOOTSTRAP_IF, 1), field(body, _NET_IF, 1), field(body, r"NCCL_SOCKET_IFNAME set by environment to (\S+)", 1)
            ),
            "rank": pl.coalesce(_integer(init("2")).cast(pl.Int32), pl.col("rank")),
            "nranks": pl.coalesce(_integer(init("3")), _integer(comm("3"))).cast(pl.Int32),
            "comm_rank": _integer(comm("2")).cast(pl.Int32),
            "device": _integer(comm("4")).cast(pl.Int32),
            "bus_id": comm("5"),
            "comm_id": field(body, _COMM_ID, 1),
            "detail": pl.coalesce(
                pl.concat_str([env("1"), pl.lit("="), env("2")]),
                pl.when(src.is_not_null()).then(
                    pl.concat_str([src, pl.concat_str([pl.lit(" ("), n.struct.field("func"), pl.lit(")")])], ignore_nulls=True)
                ),
                unwind("1"),
            ),
            "exit_code": _integer(unwind("2")).cast(pl.Int32),
            "msg": body,
        },
    )
    return _fields(df.drop("_n", *(f"_{name}" for name in _READ_ONCE)))


#: The patterns _annotate reads several groups of, or tests and reads (each has a group 1 that takes
#: part in every match, so a match is a group 1 that is not null).
_READ_ONCE = {"init": _INIT, "comm": _COMM, "env": _ENV, "unwind": _UNWIND}


def _integer(group: pl.Expr) -> pl.Expr:
    """A group read as common.integer reads it."""
    return group.cast(pl.Int64, strict=False)


#: The interface and address of a "Using" line: ``Bootstrap : Using eth0:10.0.0.12<0>``,
#: ``NET/Socket : Using [0]eth0:10.0.0.12<0> [1]...``, an IPv6 address too (``eth0:fe80::1%eth0<0>``).
_USING = r"Using (?:\[\d+\])?([\w.-]+):([0-9a-fA-F.:%\w-]+?)<"


def _fields(df: pl.DataFrame) -> pl.DataFrame:
    """Per kind, the fields later stages compare across processes: an NCCL setting's name and value,
    the CUDA version of NCCL's build, the layer, interface and address of a "Using" line."""
    msg, kind = pl.col("msg"), pl.col("kind")
    env = kind == events.NCCL_ENV
    net = kind == events.NCCL_NET
    return df.with_columns(
        pl.when(env).then(field(msg, _ENV, 1)).alias("env_name"),
        pl.when(env).then(field(msg, _ENV, 2)).alias("env_value"),
        pl.when(kind == events.NCCL_VERSION).then(field(msg, r"\+cuda([\d.]+)", 1)).alias("cuda_version"),
        pl.when(net)
        .then(pl.when(msg.str.contains("Bootstrap", literal=True)).then(pl.lit("Bootstrap")).otherwise(pl.lit("NET/Socket")))
        .alias("net_layer"),
        pl.when(net).then(field(msg, _USING, 1)).alias("net_interface"),
        pl.when(net).then(field(msg, _USING, 2)).alias("net_address"),
    )


def attribute_ranks(df: pl.DataFrame) -> pl.DataFrame:
    """Give every NCCL line the rank its process announced in ``Init COMPLETE``.

    One process can hold several communicators; the rank in the first (the
    default process group, initialised first) is the global rank.
    """
    df = with_columns_of(df, "node", "nranks")
    ids = (
        df.filter((pl.col("kind") == events.NCCL_INIT) & pl.col("node").is_not_null() & pl.col("pid").is_not_null())
        .sort("file", "line")
        .group_by("node", "pid", maintain_order=True)
        .agg(pl.col("rank").first().alias("_rank"), pl.col("nranks").max().alias("_nranks"))
    )
    if ids.is_empty():
        return df
    return (
        df.join(ids, on=["node", "pid"], how="left", coalesce=True)
        .with_columns(pl.coalesce("rank", "_rank").alias("rank"))
        .drop("_rank", "_nranks")
    )
