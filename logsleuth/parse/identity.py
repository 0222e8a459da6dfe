"""Who wrote each line: global rank, node, local rank and pid, joined across sources.

No single source names everything. NCCL ``Init COMPLETE`` lines map host:pid to a
global rank; torchrun failure tables map rank to local rank, FQDN host and pid;
``srun --label`` task ids are global ranks when srun starts one task per rank,
but node indexes when srun starts one torchrun per node; ``srun: error:
node[01-02]: tasks 0-7`` maps task ranges to hosts. This module joins them so
every event that can be attributed is, and builds the rank table the report shows.
"""

from __future__ import annotations

import polars as pl

from logsleuth.events import AGENT_KINDS, EXCEPTION, LINE, SRUN_EXIT, TRACEBACK
from logsleuth.hostlist import HostlistError, expand_hostlist, expand_ranges

from .common import Example

#: Kinds that only a launcher agent (torchrun) writes: their srun task is a node, not a rank.
_AGENT_KINDS = AGENT_KINDS


def per_node_files(events: pl.DataFrame) -> set[str]:
    """Files whose srun task labels number torchrun agents (one per node), not ranks.

    Evidence that a task is an agent: its lines carry torchrun's ``[defaultN]:``
    local ranks or agent messages, or its ``[rankN]:`` prefixes disagree with
    the task id more often than they agree.
    """
    labelled = events.filter(pl.col("task").is_not_null())
    if labelled.is_empty():
        return set()
    stats = labelled.group_by("file").agg(
        (pl.col("local_rank").is_not_null() | pl.col("kind").is_in(_AGENT_KINDS)).sum().alias("agent"),
        (pl.col("rank") == pl.col("task")).sum().alias("agree"),
        (pl.col("rank") != pl.col("task")).sum().alias("disagree"),
    )
    return set(stats.filter((pl.col("agent") > 0) | (pl.col("disagree") > pl.col("agree"))).get_column("file").to_list())


def srun_task_nodes(events: pl.DataFrame) -> pl.DataFrame:
    """(file, task, node) from ``srun: error: <hostlist>: tasks <ranges>`` lines.

    When a hostlist names several nodes and the tasks cannot be split among
    them, no mapping is made (srun's block distribution is not guaranteed).
    """
    rows: list[tuple[str, int, str]] = []
    exits = events.filter((pl.col("kind") == SRUN_EXIT) & pl.col("tasks").is_not_null() & pl.col("node").is_not_null())
    for file, hosts, tasks in exits.select("file", "node", "tasks").unique().iter_rows():  # one per srun exit line: few
        try:
            nodes, ids = expand_hostlist(hosts), expand_ranges(tasks)
        except HostlistError:
            continue
        if len(nodes) == 1:
            rows.extend((file, t, nodes[0]) for t in ids)
        elif len(ids) % len(nodes) == 0:  # srun's default block distribution, tasks split evenly
            per = len(ids) // len(nodes)
            rows.extend((file, t, nodes[i // per]) for i, t in enumerate(ids))
    return pl.DataFrame(rows, schema={"file": pl.String(), "task": pl.Int32(), "node": pl.String()}, orient="row").unique(
        ["file", "task"], keep="first"
    )


#: The columns identity resolution reads, and those of them it fills.
_READS = ("file", "line", "kind", "source", "message", "task", "tasks", "rank", "node", "local_rank", "pid")
_FILLS = ("rank", "node", "local_rank", "pid")


def resolve_identity(events: pl.DataFrame) -> pl.DataFrame:
    """Fill ``rank``, ``node``, ``local_rank`` and ``pid`` where other lines of the same job tell them.

    Worked out on the few columns it reads (each of its joins would copy all of the
    event table's), then set in the table's rows.
    """
    if events.is_empty():
        return events
    who = _resolve(events.select(_READS).with_row_index("_row")).sort("_row")
    return events.with_columns(who.get_column(name) for name in _FILLS)


def _resolve(df: pl.DataFrame) -> pl.DataFrame:
    """Order matters: srun labels first (they decide what a task id means), then
    nodes of single-node files, then (node, pid) and (node, local rank) joins,
    then rank -> node; a job with one node gives that node to every event.
    """
    agents = per_node_files(df)
    # slurmstepd writes into task 0's stream whichever task it is about: its label names no rank
    per_rank = pl.col("task").is_not_null() & ~pl.col("file").is_in(list(agents)) & (pl.col("source") != "slurm")
    df = df.with_columns(pl.when(per_rank).then(pl.coalesce("rank", "task")).otherwise(pl.col("rank")).alias("rank"))
    # srun exit lines that name one task name one rank (in per-rank files)
    single = pl.col("tasks").str.contains(r"^\d+$").fill_null(False) & (pl.col("kind") == SRUN_EXIT) & ~pl.col("file").is_in(list(agents))
    df = df.with_columns(
        pl.when(single).then(pl.coalesce("rank", pl.col("tasks").cast(pl.Int32, strict=False))).otherwise("rank").alias("rank")
    )
    df = _file_ranks(df)
    df = _message_ranks(df)
    df = _task_nodes(df, agents)
    df = _file_nodes(df)
    df = _worker_folders(df)
    df = _join(df, ["node", "pid"], "rank")
    df = _join(df, ["node", "local_rank"], "rank")
    df = _node_offsets(df)
    df = _agent_blocks(df, agents)
    df = _join(df, ["rank"], "node")
    df = _join(df, ["rank"], "local_rank")
    df = _join_unique_pid(df)
    nodes = df.get_column("node").drop_nulls().unique()
    if nodes.len() == 1:
        df = df.with_columns(pl.col("node").fill_null(nodes[0]))
    return _single_node_ranks(df, nodes.len())


def _task_nodes(df: pl.DataFrame, agents: set[str]) -> pl.DataFrame:
    """Give task-labelled lines the node of their task (from srun exit lines, or the task's own lines)."""
    known = srun_task_nodes(df)
    per_task = (
        df.filter(pl.col("task").is_not_null() & pl.col("node").is_not_null() & (pl.col("kind") != SRUN_EXIT))
        .group_by("file", "task")
        .agg(pl.col("node").mode().first().alias("node"))
    )
    # per-node files: the agent's own lines (NCCL, failure tables) name its node
    mapping = pl.concat([known, per_task.filter(pl.col("file").is_in(list(agents))).select(known.columns)]).unique(
        ["file", "task"], keep="first"
    )
    if mapping.is_empty():
        return df
    df = (
        df.join(mapping.rename({"node": "_tnode"}), on=["file", "task"], how="left")
        .with_columns(pl.when(pl.col("kind") == SRUN_EXIT).then("node").otherwise(pl.coalesce("node", "_tnode")).alias("node"))
        .drop("_tnode")
    )
    # per-rank files: task = rank, so the srun mapping also maps ranks to nodes
    ranks = known.filter(~pl.col("file").is_in(list(agents))).select(pl.col("task").alias("rank"), pl.col("node").alias("_rnode"))
    if ranks.is_empty():
        return df
    ranks = ranks.unique("rank", keep="first")
    multi = pl.col("node").str.contains(r"[\[,]").fill_null(False)
    return (
        df.join(ranks, on="rank", how="left")
        .with_columns(pl.when(pl.col("node").is_null() | multi).then(pl.coalesce("_rnode", "node")).otherwise("node").alias("node"))
        .drop("_rnode")
    )


#: Per-rank output files as launchers name them (srun --output=rank-%t.out, log_rank_3.txt, worker-7.log,
#: srun --output=%t.out).
_RANK_FILE = r"(?i)(?:(?:^|[/._-])(?:rank|proc|task|worker)[._-]?(\d{1,6})(?:\.[a-z]+)*|(?:^|/)(\d{1,6})\.(?:out|err))(?:\.gz)?$"
#: torchrun --log-dir: <log dir>/<run>_<id>/attempt_<n>/<local rank>/{stdout,stderr}.log, one folder per worker process.
_WORKER_FOLDER = r"^(.*/)?attempt_\d+/(\d{1,5})/[^/]+$"


def _worker_folders(df: pl.DataFrame) -> pl.DataFrame:
    """The files of one torchrun worker's folder are one process: the folder names its local rank,
    and a rank, node or pid that the lines of one of its files give (NCCL's start-up in stdout) is
    that of the others too (the traceback in stderr). Taken only where the folder's lines agree.
    Worked out once per file, not per line."""
    files = df.select("file").unique()
    folder = pl.col("file").str.extract(_WORKER_FOLDER, 0).str.replace(r"/[^/]+$", "")
    files = files.with_columns(
        folder.alias("_dir"), pl.col("file").str.extract(_WORKER_FOLDER, 2).cast(pl.Int32, strict=False).alias("_lr")
    )
    files = files.filter(pl.col("_dir").is_not_null())
    if files.is_empty():
        return df
    df = df.join(files, on="file", how="left")
    df = df.with_columns(
        pl.when(pl.col("_dir").is_not_null()).then(pl.coalesce("local_rank", "_lr")).otherwise("local_rank").alias("local_rank")
    )
    # what the folder's lines agree on: one value each (a line naming another rank would make two)
    agreed = (
        df.filter(pl.col("_dir").is_not_null())
        .group_by("_dir")
        .agg(
            *(
                pl.when(pl.col(c).drop_nulls().n_unique() == 1).then(pl.col(c).drop_nulls().first()).alias(f"_{c}")
                for c in ("rank", "node", "pid")
            )
        )
    )
    df = df.join(agreed, on="_dir", how="left")
    return df.with_columns(pl.coalesce(c, f"_{c}").alias(c) for c in ("rank", "node", "pid")).drop("_dir", "_lr", "_rank", "_node", "_pid")


def _file_ranks(df: pl.DataFrame) -> pl.DataFrame:
    """A file named for a rank (``rank-07.out``) holds that rank's output, unless its lines say otherwise.

    The name counts only when the file has no srun labels and every rank prefix
    inside it agrees with the name.
    """
    named = (
        df.select("file")
        .unique()
        .with_columns(
            pl.coalesce(pl.col("file").str.extract(_RANK_FILE, 1), pl.col("file").str.extract(_RANK_FILE, 2))
            .cast(pl.Int32, strict=False)
            .alias("_frank")
        )
    )
    named = named.filter(pl.col("_frank").is_not_null())
    if named.is_empty():
        return df
    agree = (
        df.join(named, on="file")
        .group_by("file")
        .agg(
            pl.col("task").is_not_null().any().alias("_lab"),
            ((pl.col("rank") != pl.col("_frank")) & (pl.col("source") != "nccl")).any().alias("_other"),
        )
        .filter(~pl.col("_lab") & ~pl.col("_other"))
        .join(named, on="file")
        .select("file", "_frank")
    )
    if agree.is_empty():
        return df
    slurm = pl.col("source") == "slurm"
    return (
        df.join(agree, on="file", how="left")
        .with_columns(pl.when(slurm).then("rank").otherwise(pl.coalesce("rank", "_frank")).alias("rank"))
        .drop("_frank")
    )


#: Phrasings in which a process names itself: (pattern, column it fills).
_SELF_NAMED = (
    (r"(?:Parameters|Parameter indices) which did not receive grad for rank (\d+)", "rank"),
    (r"Detected mismatch between collectives on ranks\. Rank (\d+) is running", "rank"),
    (r"in store based barrier on rank:? (\d+)", "rank"),
    (r"Command '\[.*?--local[_-]rank[= ]'?,? ?'?(\d+)", "local_rank"),  # torch.distributed.launch's CalledProcessError
    (r"\bprocess (\d+) terminated with (?:signal|exit code)", "local_rank"),  # mp.spawn's ProcessExitedException
)
#: mp.spawn prints this line, then the child's traceback: the traceback is that process's.
_SPAWN_HEADER = r"^-- Process (\d+) terminated with the following error:"


#: Words each of the _SELF_NAMED phrasings and _SPAWN_HEADER holds: messages without any are not searched.
_SELF_NAMED_WORDS = (
    "receive grad for rank",
    "between collectives on ranks",
    "barrier on rank",
    "Command '[",
    " terminated with ",
    "-- Process ",
)


#: Literals of the lines this module reads ranks from (the ingest prefilter keeps them).
TRIGGERS = _SELF_NAMED_WORDS

#: It claims no lines: it fills rank, node and local rank of the events of every kind.
KINDS: tuple[str, ...] = ()

EXAMPLES: tuple[Example, ...] = (
    ("Parameter indices which did not receive grad for rank 1: 4 7", {"kind": LINE, "rank": 1}),
    (
        "torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGKILL",
        {"kind": EXCEPTION, "local_rank": 3},
    ),
    (
        "-- Process 2 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 9, in run\n'
        "    step()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        {"kind": TRACEBACK, "local_rank": 2},
    ),
)


def _message_ranks(df: pl.DataFrame) -> pl.DataFrame:
    """Rank or local rank named by the failure text itself, where no prefix gave one."""
    msg = pl.col("message")
    if not df.select(msg.str.contains_any(list(_SELF_NAMED_WORDS)).any()).item():  # one pass; most logs have none
        return df
    for pattern, column in _SELF_NAMED:
        df = df.with_columns(pl.coalesce(column, msg.str.extract(pattern, 1).cast(pl.Int32, strict=False)).alias(column))
    header = msg.str.extract(_SPAWN_HEADER, 1).cast(pl.Int32, strict=False)
    if df.select(header.is_not_null().any()).item():
        spawned = header.forward_fill().over("file", order_by="line")
        after = pl.col("kind") == TRACEBACK
        df = df.with_columns(
            pl.when(after & pl.col("local_rank").is_null()).then(spawned).otherwise(pl.col("local_rank")).alias("local_rank")
        )
    return df


def _single_node_ranks(df: pl.DataFrame, n_nodes: int) -> pl.DataFrame:
    """On a job that shows one node and no global rank for its local ranks, local rank = rank.

    Skipped when any line pairs a local rank with a different global rank or
    srun labels are present (the file may be one node of many).
    """
    if n_nodes > 1 or df.get_column("task").drop_nulls().len():
        return df
    paired = df.filter(pl.col("rank").is_not_null() & pl.col("local_rank").is_not_null())
    if paired.height and (paired.get_column("rank") != paired.get_column("local_rank")).any():
        return df
    return df.with_columns(pl.coalesce("rank", "local_rank").alias("rank"))


def _file_nodes(df: pl.DataFrame) -> pl.DataFrame:
    """A file without srun labels whose lines name exactly one node is that node's output."""
    named = (
        df.filter(pl.col("node").is_not_null() & ~pl.col("node").str.contains(r"[\[,]"))
        .group_by("file")
        .agg(
            pl.col("node").n_unique().alias("_n"), pl.col("node").first().alias("_fnode"), pl.col("task").is_not_null().any().alias("_lab")
        )
    )
    unlabelled = df.group_by("file").agg(pl.col("task").is_not_null().any().alias("_anylab"))
    single = named.join(unlabelled, on="file").filter((pl.col("_n") == 1) & ~pl.col("_anylab")).select("file", "_fnode")
    if single.is_empty():
        return df
    return df.join(single, on="file", how="left").with_columns(pl.coalesce("node", "_fnode").alias("node")).drop("_fnode")


def _join(df: pl.DataFrame, keys: list[str], target: str) -> pl.DataFrame:
    """Fill ``target`` from rows that have ``keys`` and ``target``: the most frequent value per key."""
    have = pl.all_horizontal(pl.col(k).is_not_null() for k in keys) & pl.col(target).is_not_null()
    if target == "node":
        have = have & ~pl.col("node").str.contains(r"[\[,]")  # a host list is not one node
    table = df.filter(have).group_by(keys).agg(pl.col(target).mode().sort().first().alias("_fill"))
    if table.is_empty():
        return df
    return df.join(table, on=keys, how="left").with_columns(pl.coalesce(target, "_fill").alias(target)).drop("_fill")


def _node_offsets(df: pl.DataFrame) -> pl.DataFrame:
    """torchrun numbers a node's workers contiguously: rank = first rank of the node + local rank.

    Where every known (rank, local rank) pair of a node agrees on that offset,
    local ranks never named with their global rank (a quiet worker's
    ``[default3]:`` lines) get one too.
    """
    pairs = df.filter(pl.col("node").is_not_null() & pl.col("rank").is_not_null() & pl.col("local_rank").is_not_null())
    offsets = (
        pairs.group_by("node")
        .agg((pl.col("rank") - pl.col("local_rank")).unique().alias("_off"))
        .filter(pl.col("_off").list.len() == 1)
        .select("node", pl.col("_off").list.first().alias("_off"))
    )
    if offsets.is_empty():
        return df
    return (
        df.join(offsets, on="node", how="left")
        .with_columns(pl.coalesce("rank", (pl.col("local_rank") + pl.col("_off")).cast(pl.Int32)).alias("rank"))
        .drop("_off")
    )


def _agent_blocks(df: pl.DataFrame, agents: set[str]) -> pl.DataFrame:
    """srun starting one torchrun per node: node index = srun task, rank = task * nproc + local rank.

    Applied only when every line that shows both a global and a local rank
    agrees with that numbering (torchrun's static assignment); it names the
    workers of nodes where nothing else gave their global ranks.
    """
    if not agents:
        return df
    mine = df.filter(pl.col("file").is_in(list(agents)) & pl.col("task").is_not_null() & pl.col("local_rank").is_not_null())
    if mine.is_empty():
        return df
    nproc = int(mine.get_column("local_rank").max()) + 1  # type: ignore[arg-type]
    block = pl.col("task") * nproc + pl.col("local_rank")
    known = mine.filter(pl.col("rank").is_not_null())
    if known.is_empty() or not known.select((pl.col("rank") == block).all()).item():
        return df
    fill = pl.col("file").is_in(list(agents)) & pl.col("task").is_not_null() & pl.col("local_rank").is_not_null()
    return df.with_columns(pl.when(fill).then(pl.coalesce("rank", block.cast(pl.Int32))).otherwise(pl.col("rank")).alias("rank"))


def _join_unique_pid(df: pl.DataFrame) -> pl.DataFrame:
    """A pid that belongs to exactly one rank names that rank even where the node is unknown."""
    table = (
        df.filter(pl.col("pid").is_not_null() & pl.col("rank").is_not_null())
        .group_by("pid")
        .agg(pl.col("rank").unique().alias("_r"))
        .filter(pl.col("_r").list.len() == 1)
        .select("pid", pl.col("_r").list.first().alias("_prank"))
    )
    if table.is_empty():
        return df
    return df.join(table, on="pid", how="left").with_columns(pl.coalesce("rank", "_prank").alias("rank")).drop("_prank")


def rank_table(events: pl.DataFrame, world: int | None = None) -> pl.DataFrame:
    """One row per known rank: rank, node, local_rank, pid, task (the identity map).

    ``world`` adds ranks 0..world-1 that printed nothing attributable, so a
    silent rank still shows in the table.
    """
    schema = {"rank": pl.Int32(), "node": pl.String(), "local_rank": pl.Int32(), "pid": pl.Int64()}
    ranked = events.filter(pl.col("rank").is_not_null() & (pl.col("rank") >= 0))
    # ranks named only in an srun task range ("tasks 0-3") where tasks are ranks
    agents = per_node_files(events)
    ranges = srun_task_nodes(events).filter(~pl.col("file").is_in(list(agents)))
    ranged = ranges.select(pl.col("task").alias("rank"), "node").join(ranked.select("rank").unique(), on="rank", how="anti")
    ranked = pl.concat([ranked.select("rank", "node", "local_rank", "pid"), ranged], how="diagonal_relaxed")
    table = (
        ranked.group_by("rank")
        .agg(
            pl.col("node").filter(~pl.col("node").str.contains(r"[\[,]")).drop_nulls().mode().sort().first().alias("node"),
            pl.col("local_rank").drop_nulls().mode().sort().first().alias("local_rank"),
            pl.col("pid").drop_nulls().mode().sort().first().alias("pid"),
        )
        .select(list(schema))
        .cast(schema)  # type: ignore[arg-type]
    )
    if world:
        every = pl.DataFrame({"rank": pl.int_range(0, world, eager=True).cast(pl.Int32)})
        table = every.join(table, on="rank", how="full", coalesce=True)
    return table.sort("rank")
