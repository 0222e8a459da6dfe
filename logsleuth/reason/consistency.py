"""Cross-rank consistency: the node that runs other software, or talks on another network.

Every rank of a healthy job prints the same NCCL version, the same CUDA
build and driver, picks the same kind of interface and sees the same world
size. A node that disagrees is a suspect even when its own lines say nothing
wrong; an interface such as docker0, virbr0 or lo, or an address in 172.17/16,
127/8 or 169.254/16, is suspect on its own in a job that spans nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from logsleuth.events import DIST_MEMBER, NCCL_ENV, NCCL_INIT, NCCL_NET, NCCL_VERSION, numbered

_BAD_IFACE = r"^(?:docker\d*|virbr\d*|lo|veth\w*|br-\w+|cni\d*|podman\d*|flannel\S*|tailscale\d*)$"
_BAD_ADDR = r"^(?:172\.17\.|127\.|169\.254\.|::1$|fe80:)"
_IFACE_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET")


@dataclass
class Finding:
    """One disagreement between ranks or nodes, with the lines that show it."""

    cause: str  # a cause id: version_mismatch, nccl_wrong_interface, env_misconfigured
    what: str  # what differs, in words
    nodes: list[str]  # the odd node(s)
    ranks: list[int]  # the odd rank(s), when known
    eids: list[int]  # evidence: the odd lines first, then one line of the majority
    summary: str
    weight: float  # how sure the finding alone makes us of its cause
    corroborated: bool = False  # failure lines of other ranks point at the odd node
    shows_failure: bool = False  # the finding itself shows that the job failed (processes never joined)


def check(events: pl.DataFrame) -> list[Finding]:
    """Every disagreement found in ``events`` (identities already resolved)."""
    ev = numbered(events).with_columns(
        pl.coalesce(pl.col("node"), pl.concat_str([pl.lit("rank "), pl.col("rank").cast(pl.String)]), pl.col("file")).alias("unit")
    )
    multi_node = ev.get_column("node").drop_nulls().filter(~ev.get_column("node").drop_nulls().str.contains(r"[\[,]")).n_unique() > 1
    out: list[Finding] = []
    versions = ev.filter(pl.col("kind") == NCCL_VERSION)
    out += _disagree(versions.with_columns(pl.col("version").alias("value")), "NCCL version", "version_mismatch", 0.75)
    out += _disagree(
        versions.with_columns(pl.col("cuda_version").alias("value")), "CUDA version of the NCCL build", "version_mismatch", 0.7
    )
    out += _disagree(
        ev.filter(pl.col("driver_version").is_not_null()).with_columns(pl.col("driver_version").alias("value")),
        "CUDA driver version",
        "version_mismatch",
        0.6,
    )
    out += _nccl_says_mismatch(ev)
    out += _interfaces(ev, multi_node)
    out += _env(ev)
    out += _world(ev)
    out += _membership(ev)
    out += _shared_gpus(ev)
    out += _master_address(ev)
    return out


def _shared_gpus(ev: pl.DataFrame) -> list[Finding]:
    """Two processes of one communicator on the same GPU of the same node (NCCL's communicator
    lines, parse.nccl: ``comm 0x.. rank 0 nranks 2 cudaDev 0 busId 86000 - Init COMPLETE`` /
    ``- Abort COMPLETE``): the ranks were mapped to GPUs wrongly (every process on cuda:0, a
    LOCAL_RANK that is not the local one), what NCCL >= 2.5 refuses as "Duplicate GPU detected".

    A communicator is told by its commId where NCCL prints one (2.18+), else by its size. A rank
    of a communicator held by two processes is a restart (a new process took its place) or several
    communicators of that size: such groups are not compared, so a restarted job never reads as
    two processes sharing a GPU.
    """
    comm = ev.filter(
        pl.col("bus_id").is_not_null() & pl.col("node").is_not_null() & pl.col("pid").is_not_null() & pl.col("comm_rank").is_not_null()
    )
    if comm.is_empty():
        return []
    key = ["nranks", "comm_id"]
    restarted = comm.group_by([*key, "comm_rank"]).agg(pl.col("pid").n_unique().alias("_pids")).filter(pl.col("_pids") > 1)
    comm = comm.join(restarted.select(key).unique(), on=key, how="anti", nulls_equal=True)
    shared = (
        comm.group_by([*key, "node", "bus_id"], maintain_order=True)
        .agg(
            pl.col("pid").unique(maintain_order=True).alias("pids"),
            pl.coalesce("rank", "comm_rank").unique(maintain_order=True).alias("ranks"),
            pl.col("device").drop_nulls().first(),
            pl.col("eid").sort().first().alias("_first"),
        )
        .filter(pl.col("pids").list.len() > 1)
    )
    out: list[Finding] = []
    for row in shared.iter_rows(named=True):  # one per shared GPU: few
        pids = [int(p) for p in row["pids"]]
        mine = comm.filter(pl.col("pid").is_in(pids) & (pl.col("node") == row["node"]) & (pl.col("bus_id") == row["bus_id"]))
        eids = mine.sort("eid").unique("pid", keep="first", maintain_order=True).get_column("eid").head(4).to_list()
        ranks = sorted(int(r) for r in row["ranks"] if r is not None)
        dev = f" (cudaDev {row['device']})" if row["device"] is not None else ""
        who = ", ".join(str(r) for r in ranks) if ranks else "?"
        out.append(
            Finding(
                cause="device_misassignment",
                what="GPU shared by two processes",
                nodes=[row["node"]],
                ranks=ranks,
                eids=[int(e) for e in eids],
                summary=f"ranks {who} (processes {', '.join(str(p) for p in pids[:4])}) on {row['node']} all use the GPU at busId"
                f" {row['bus_id']}{dev}: two processes of one communicator on one GPU, the ranks are not mapped to their own GPUs",
                weight=0.85,
            )
        )
    return out


def _membership(ev: pl.DataFrame) -> list[Finding]:
    """What the processes' join lines (Lightning's GLOBAL_RANK/MEMBER, DeepSpeed's and detectron2's
    rank announcements, a script's own "init: rank 0/2") say about the world.

    A global rank claimed by two processes while another rank of the world is never claimed:
    the processes were not given their own ranks (more processes than the trainer's world, e.g.
    SLURM tasks vs num_nodes x devices; or mpirun starting every copy as rank 0 because the
    script does not read the MPI rank), and they collide. (Every rank announced twice is a
    restart, not a collision.) Fewer members than the world at the end of the log: the rest
    never started (a multi-node job launched without srun) or never reached the group, and the
    joined ones wait forever."""
    joins = ev.filter((pl.col("kind") == DIST_MEMBER) & pl.col("rank").is_not_null() & pl.col("nranks").is_not_null())
    if joins.is_empty():
        return []
    out: list[Finding] = []
    world = int(joins.get_column("nranks").max())  # type: ignore[arg-type]
    # the same rank twice in one file (a copy of a rank's output in another file, torchrun --tee, is no collision)
    twice = joins.group_by("file", "rank").agg(pl.len(), pl.col("eid").first()).filter(pl.col("len") > 1).sort("rank")
    joined = sorted(int(r) for r in joins.get_column("rank").unique())
    if not twice.is_empty() and len(joined) < world:
        ranks = sorted({int(r) for r in twice.get_column("rank")})
        out.append(
            Finding(
                cause="env_misconfigured",
                what="global ranks claimed by two processes",
                nodes=[],
                ranks=ranks,
                eids=[int(e) for e in twice.get_column("eid")][:4],
                summary=f"global rank(s) {_names([str(r) for r in ranks])} joined the group more than once (world {world}),"
                f" rank(s) {_names([str(r) for r in range(world) if r not in joined][:8])} never:"
                " the processes were not given their own ranks, so they collide (more processes started than the trainer's world,"
                " e.g. SLURM tasks vs num_nodes x devices; or mpirun starting every copy as rank 0 when the script does not read"
                " the MPI rank)",
                weight=0.8,
            )
        )
    elif len(joined) < world and ev.filter(pl.col("level").is_in(["error", "fatal"])).is_empty():
        out.append(
            Finding(
                cause="rendezvous_timeout",
                what="processes missing from the group",
                nodes=[],
                ranks=joined,
                eids=[int(e) for e in joins.unique("rank", keep="first").sort("eid").get_column("eid")][:4],
                summary=f"only {len(joined)} of {world} processes joined the group (ranks {_names([str(r) for r in joined])})"
                " and the log ends there: the others never started or never reached it (a multi-node job started without srun"
                " starts one node's processes only), and the joined ones wait for them",
                weight=0.75,
                shows_failure=True,
            )
        )
    return out


def _nccl_says_mismatch(ev: pl.DataFrame) -> list[Finding]:
    """NCCL >= 2.23 compares versions itself: ``rank 8 version 22703 rank 3 version 22602``.

    Every rank that sees a different peer names one; the version fewer ranks
    run is the odd one, and the ranks that run it are named by the others.
    """
    warns = ev.filter(pl.col("mismatch_rank").is_not_null())
    if warns.is_empty():
        return []
    pairs = pl.concat(
        [
            warns.select(pl.col("mismatch_rank").alias("r"), pl.col("mismatch_version").alias("v")),
            warns.select(pl.col("mismatch_peer_rank").alias("r"), pl.col("mismatch_peer_version").alias("v")),
        ]
    ).unique()
    # fewest ranks first; on a tie, the side without rank 0 (the job's reference) is the odd one
    by_version = (
        pairs.group_by("v")
        .agg(pl.col("r").unique().sort())
        .with_columns(pl.col("r").list.len().alias("n"), pl.col("r").list.contains(0).alias("has0"))
        .sort(["n", "has0", "v"])
    )
    if by_version.height < 2:
        return []
    odd_version, odd_ranks = by_version.row(0)[0], [int(r) for r in by_version.row(0)[1]]
    major = by_version.row(by_version.height - 1)[0]
    nodes = sorted(set(ev.filter(pl.col("rank").is_in(odd_ranks)).get_column("node").drop_nulls().to_list()))
    where = _names(nodes) if nodes else f"rank(s) {', '.join(str(r) for r in odd_ranks[:8])}"
    return [
        Finding(
            cause="version_mismatch",
            what="NCCL version (NCCL's own check)",
            nodes=nodes,
            ranks=odd_ranks,
            eids=[int(e) for e in warns.sort("eid").get_column("eid").head(3).to_list()],
            summary=f"NCCL refused to start: NCCL {_dotted(odd_version)} on {where} differs from {_dotted(major)} on the other ranks",
            weight=0.9,
            corroborated=True,
        )
    ]


#: Where a process says which rendezvous host it uses: an environment assignment or dump (``MASTER_ADDR=10.0.0.1``,
#: ``export MASTER_ADDR=node01``, ``MASTER_ADDR: node01``), torchrun's launch configuration (``master_addr : node01``),
#: LLaMA-Factory's ``Initializing distributed tasks at: 10.0.0.2:29500``.
_MASTER_ADDR = (
    r"(?:\bMASTER_ADDR\s*[=:]\s*[\"']?|^\s*master_addr\s*:\s*|Initializing distributed tasks at: )"
    r"([A-Za-z0-9][\w.-]*[A-Za-z0-9])"
)
_IPV4 = r"^\d{1,3}(?:\.\d{1,3}){3}$"


def _master_address(ev: pl.DataFrame) -> list[Finding]:
    """Nodes (or launch files) told different rendezvous hosts never meet: each waits at its own store.

    Compared only where every unit names one host and all are addresses or all are names (node01 and
    its own address may be the same host), so a renamed master is no disagreement."""
    said = ev.filter(pl.col("message").str.contains(r"MASTER_ADDR|master_addr|Initializing distributed tasks at")).with_columns(
        pl.col("message").str.extract(_MASTER_ADDR, 1).alias("value")
    )
    said = said.drop_nulls("value").filter(~pl.col("value").str.contains(r"^(?:\$|\{)"))
    if said.get_column("unit").n_unique() < 2:
        return []
    per_unit = said.group_by("unit").agg(pl.col("value").n_unique().alias("n"))
    if per_unit.get_column("n").max() != 1:
        return []
    kinds = said.get_column("value").str.contains(_IPV4).unique()
    if kinds.len() != 1:
        return []
    found = _disagree(said, "rendezvous host (MASTER_ADDR)", "env_misconfigured", 0.75)
    for f in found:
        f.shows_failure = True  # the groups can never form: each node waits at its own store
        f.summary += ": every node must be given the same MASTER_ADDR and MASTER_PORT (the address of the rank-0 node)"
    return found


def _dotted(code: str) -> str:
    """NCCL's version code (major*10000 + minor*100 + patch since 2.9) as 2.27.3."""
    n = int(code)
    return f"{n // 10000}.{n % 10000 // 100}.{n % 100}" if n >= 20900 else code


def _units_ranks(df: pl.DataFrame) -> tuple[list[str], list[int]]:
    nodes = sorted(df.get_column("node").drop_nulls().unique().to_list())
    ranks = sorted(int(r) for r in df.get_column("rank").drop_nulls().unique().to_list())
    return nodes, ranks


def _disagree(sub: pl.DataFrame, what: str, cause: str, weight: float) -> list[Finding]:
    """Values of ``sub.value`` that a minority of units (nodes, else ranks, else files) report."""
    sub = sub.drop_nulls("value")
    if sub.is_empty():
        return []
    groups = (
        sub.group_by("value")
        .agg(pl.col("unit").n_unique().alias("units"), pl.col("eid").min().alias("first"))
        .sort(["units", "first"], descending=[True, False])
    )
    if groups.height < 2:
        return []
    major = groups.get_column("value")[0]
    odd = sub.filter(pl.col("value") != major)
    nodes, ranks = _units_ranks(odd)
    units = sorted(odd.get_column("unit").unique().to_list())
    odd_values = ", ".join(groups.get_column("value")[1:].to_list())
    n_major = int(groups.get_column("units")[0])
    evidence = odd.sort("eid").unique("value", keep="first", maintain_order=True).get_column("eid").to_list()
    evidence.append(int(sub.filter(pl.col("value") == major).get_column("eid").min()))  # type: ignore[arg-type]
    where = _names(nodes) if nodes else ", ".join(units[:8])
    summary = f"{what} {odd_values} on {where} differs from {major} on the other {n_major} {_unit_word(sub)}"
    return [Finding(cause=cause, what=what, nodes=nodes, ranks=ranks, eids=[int(e) for e in evidence], summary=summary, weight=weight)]


def _unit_word(sub: pl.DataFrame) -> str:
    return "node(s)" if sub.get_column("node").null_count() == 0 else "rank(s)/file(s)"


def _names(items: list[str], limit: int = 6) -> str:
    text = ", ".join(items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _interfaces(ev: pl.DataFrame, multi_node: bool) -> list[Finding]:
    """Interfaces NCCL/Gloo chose: suspicious ones, and the odd ones out across nodes."""
    msg = pl.col("message")
    net = ev.filter(pl.col("kind") == NCCL_NET).with_columns(
        pl.col("net_interface").alias("iface"), pl.col("net_address").alias("addr"), pl.col("net_layer").alias("layer")
    )
    out: list[Finding] = []
    # one node's log of a job that spans nodes: its sockets failing says so (a one-node job
    # reaches its own docker0 or loopback address, so such an address alone is no fault there)
    sockets_failed = not multi_node and bool(ev.select(pl.col("socket_failed").fill_null(False).any()).item())
    if not multi_node and not sockets_failed:
        return out
    failures = ev.filter(pl.col("level").is_in(["error", "fatal", "warning"]) & (pl.col("kind") != NCCL_NET))
    bad = net.filter(pl.col("iface").str.contains(_BAD_IFACE).fill_null(False) | pl.col("addr").str.contains(_BAD_ADDR).fill_null(False))
    if not bad.is_empty():
        nodes, ranks = _units_ranks(bad)
        addrs = sorted(set(bad.get_column("addr").drop_nulls().unique().to_list()))
        ifaces = sorted(set(bad.get_column("iface").drop_nulls().unique().to_list()))
        mentioned = failures.filter(msg.str.contains_any(addrs)) if addrs else failures.clear()
        good = net.filter(~pl.col("eid").is_in(bad.get_column("eid").implode()))
        evidence = bad.sort("eid").unique("unit", keep="first", maintain_order=True).get_column("eid").head(4).to_list()
        evidence += mentioned.get_column("eid").head(2).to_list() + good.get_column("eid").head(1).to_list()
        used = ", ".join(f"{i}" for i in ifaces) + (f" ({', '.join(addrs[:3])})" if addrs else "")
        summary = f"NCCL on {_names(nodes) or 'some ranks'} uses {used}, an interface that does not reach other nodes"
        if not good.is_empty():
            summary += f"; the other nodes use {', '.join(sorted(set(good.get_column('iface').drop_nulls().to_list()))[:3])}"
        if mentioned.height:
            summary += f"; {mentioned.height} failure line(s) of other ranks name that address"
        out.append(
            Finding(
                "nccl_wrong_interface",
                "network interface",
                nodes,
                ranks,
                [int(e) for e in evidence],
                summary,
                0.9 if mentioned.height else 0.75,
                corroborated=mentioned.height > 0,
            )
        )
    else:
        for layer in ("Bootstrap", "NET/Socket"):
            sub = net.filter(pl.col("layer") == layer).with_columns(pl.col("iface").alias("value"))
            for f in _disagree(sub, f"{layer} interface", "nccl_wrong_interface", 0.55):
                out.append(f)
                break
            if out:
                break
    fallback = ev.filter(pl.col("loopback_fallback").fill_null(False))
    if not fallback.is_empty() and not out:
        nodes, ranks = _units_ranks(fallback)
        out.append(
            Finding(
                "nccl_wrong_interface",
                "Gloo interface",
                nodes,
                ranks,
                fallback.sort("eid").unique("unit", keep="first", maintain_order=True).get_column("eid").head(4).cast(pl.Int64).to_list(),
                f"Gloo on {_names(nodes) or 'some ranks'} could not resolve its host name and fell back to the loopback address, which other nodes cannot reach",
                0.5,
            )
        )
    return out


def _env(ev: pl.DataFrame) -> list[Finding]:
    """NCCL_* settings that differ across nodes, or are set on some nodes only."""
    env = ev.filter((pl.col("kind") == NCCL_ENV) & pl.col("env_name").is_not_null()).with_columns(
        pl.col("env_name").alias("var"), pl.col("env_value").str.strip_chars_end(".").alias("value")
    )
    if env.is_empty():
        return []
    nccl_units = ev.filter(pl.col("source") == "nccl").select("unit").unique()
    out: list[Finding] = []
    for (var,), sub in env.group_by(["var"], maintain_order=True):  # one per variable: few
        unset = nccl_units.join(sub.select("unit").unique(), on="unit", how="anti")
        rows = sub
        if unset.height and sub.get_column("unit").n_unique() > 0:
            first_line = ev.filter(pl.col("source") == "nccl").join(unset, on="unit").sort("eid").unique("unit", keep="first")
            rows = pl.concat(
                [sub, first_line.with_columns(pl.lit(str(var)).alias("var"), pl.lit("(unset)").alias("value"))], how="diagonal_relaxed"
            )
        cause, weight = ("nccl_wrong_interface", 0.6) if var in _IFACE_VARS else ("env_misconfigured", 0.5)
        out += _disagree(rows, f"{var}", cause, weight)
    return out


def _world(ev: pl.DataFrame) -> list[Finding]:
    """The world size each process's first communicator reports should be the same everywhere."""
    first = (
        ev.filter((pl.col("kind") == NCCL_INIT) & pl.col("nranks").is_not_null())
        .sort("eid")
        .unique(["node", "pid", "file"], keep="first")
        .with_columns(pl.col("nranks").cast(pl.String).alias("value"))
    )
    return _disagree(first, "world size (nranks of the first communicator)", "env_misconfigured", 0.6)
