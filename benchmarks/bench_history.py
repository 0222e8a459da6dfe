"""Does `logsleuth history` answer on a fleet's year of verdicts in seconds? (issue 16.3)

Generates a store of ``--rows`` verdicts (default 10 million) as a cluster's epilogs and
`logsleuth history --compact` leave it: a year of failures of 2,000 nodes, a few of them bad
and failing again and again, 22 causes in a realistic mix (one of them new in the last days), 400 users (a few run most jobs),
jobs with their ranks, inputs and summaries; most verdicts in the files ``compact`` writes, the
newest ``--singles`` as the one-row files the epilog writes between compactions (given to their
users when this runs as root, so they are read as other users' files, page headers checked).
Then, each as a fresh process the way a user runs it:

- ``logsleuth history STORE`` (terminal), ``--format json``, ``--since 30d``, ``--node``:
  wall seconds (median of ``--repeat``) and peak RSS;
- ``logsleuth history STORE --compact`` on a copy: merging the one-row files (what cron does);
  with ``--from-scratch`` also the same verdicts never compacted (a few files of 2 million rows
  and the one-row files), and ``history`` after each.

``--code DIR`` runs another checkout's logsleuth on the same store (an older commit, to compare).
Generation is vectorised (numpy and polars); stores are kept in ``benchmarks/data/`` (ignored by
git) and reused.

    python benchmarks/bench_history.py --rows 10000000 --singles 5000 --from-scratch
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from logsleuth import history  # noqa: E402
from logsleuth.history import TABLE_SCHEMA, WRITER  # noqa: E402

DATA = HERE / "data"
#: (cause, its taxonomy category, share of verdicts, what the summary says). Clean runs
#: (``none``) are there because some sites run the epilog with ``--always``.
CAUSES: list[tuple[str, str, float, str]] = [
    ("user_code_error", "user_code_error", 0.20, "ValueError raised by the training script"),
    ("cuda_oom", "cuda_oom", 0.13, "CUDA out of memory: tried to allocate 2.00 GiB"),
    ("slurm_time_limit", "slurm_time_limit", 0.11, "cancelled by SLURM at its time limit"),
    ("none", "none", 0.09, "no failure: the job ran to completion"),
    ("slurm_cancelled", "slurm_cancelled", 0.07, "cancelled by its user"),
    ("collective_timeout", "collective_timeout", 0.06, "ALLREDUCE ran for 600000 ms before the watchdog fired"),
    ("import_error", "import_error", 0.05, "ModuleNotFoundError: No module named 'apex'"),
    ("nccl_ib_error", "nccl_ib_error", 0.045, "NET/IB: completion with error (transport retry counter exceeded)"),
    ("host_oom", "host_oom", 0.04, "killed by the OOM killer (cgroup limit)"),
    ("dataloader_shm", "shm_exhausted", 0.035, "DataLoader worker killed by a bus error: /dev/shm too small"),
    ("gpu_hardware_fault", "gpu_hardware_fault", 0.03, "Xid 79: GPU has fallen off the bus"),
    ("crash_signal", "crash_signal", 0.03, "segmentation fault (signal 11)"),
    ("checkpoint_not_writable", "permission_denied", 0.025, "PermissionError: [Errno 13] on the checkpoint folder"),
    ("disk_full", "disk_full", 0.02, "OSError: [Errno 28] No space left on device"),
    ("cuda_error", "cuda_error", 0.02, "CUDA error: an illegal memory access was encountered"),
    ("unknown", "unknown", 0.02, "the job failed; nothing supports a verdict"),
    ("slurm_preempted", "slurm_node_failure", 0.015, "preempted and requeued by SLURM"),
    ("host_memory_error", "gpu_hardware_fault", 0.01, "uncorrectable ECC error in host memory"),
    ("master_unreachable", "master_unreachable", 0.01, "connect to MASTER_ADDR:29500 refused"),
    ("port_in_use", "port_in_use", 0.01, "EADDRINUSE: the rendezvous port is taken"),
    ("ddp_usage_error", "ddp_usage_error", 0.01, "DDP: expected to have finished reduction in the prior iteration"),
    ("nccl_wrong_interface", "nccl_wrong_interface", 0.0, "NCCL bound docker0: no route to the peers"),  # see NEW
]
#: A cause first seen in the last days (an image update broke NCCL's interface choice): ``history`` marks it new.
NEW, NEW_DAYS, NEW_SHARE = "nccl_wrong_interface", 5, 0.02
#: The nodes that keep failing, and with what: a share of those causes' verdicts lands on them.
BAD_NODES = {"gpu0412": "gpu_hardware_fault", "gpu1207": "nccl_ib_error", "gpu1730": "host_memory_error", "gpu0088": "nccl_ib_error"}
BAD_SHARE = 0.1
NODES, USERS, FIRST_UID = 2000, 400, 20000


def verdicts(n: int, *, end: datetime, days: int = 365, seed: int = 16) -> pl.DataFrame:
    """``n`` verdicts over the ``days`` before ``end``, oldest first, in :data:`TABLE_SCHEMA` (each with its writer)."""
    rng = np.random.default_rng(seed)
    causes = pl.DataFrame(
        {
            "k": np.arange(len(CAUSES), dtype=np.int32),
            "cause": [c[0] for c in CAUSES],
            "category": [c[1] for c in CAUSES],
            "what": [c[3] for c in CAUSES],
        }
    )
    weights = np.array([c[2] for c in CAUSES])
    k = rng.choice(len(CAUSES), size=n, p=weights / weights.sum()).astype(np.int32)
    node = rng.integers(1, NODES + 1, size=n)
    for bad, cause in BAD_NODES.items():  # bad nodes take a share of their cause's verdicts
        hit = (k == [c[0] for c in CAUSES].index(cause)) & (rng.random(n) < BAD_SHARE)
        node[hit] = int(bad[3:])
    width = rng.choice([1, 2, 4], size=n, p=[0.7, 0.2, 0.1])  # nodes implicated: the first failure's, and failed ranks'
    others = rng.integers(1, NODES, size=(n, 3))  # the other nodes of the job, anywhere in the cluster
    seconds = np.sort(rng.random(n)) * days * 86400
    k[(seconds > (days - NEW_DAYS) * 86400) & (rng.random(n) < NEW_SHARE)] = [c[0] for c in CAUSES].index(NEW)
    start = int((end - timedelta(days=days)).timestamp() * 1e6)
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    raw[:, 15] |= 1  # numpy's bytes drop trailing zeros
    uid = FIRST_UID + np.minimum(rng.zipf(1.3, size=n) - 1, USERS - 1)
    frame = pl.DataFrame(
        {
            "i": np.arange(n, dtype=np.int64),
            "k": k,
            "node": node,
            **{f"o{j}": others[:, j - 1] for j in (1, 2, 3)},
            "width": width,
            "us": (start + seconds * 1e6).astype(np.int64),
            "lag": rng.integers(5_000_000, 600_000_000, size=n),
            "rank": rng.integers(0, 8, size=n) + 8 * (rng.integers(0, 4, size=n)),
            "conf": np.round(rng.uniform(0.45, 0.99, size=n), 3),
            "partial": rng.random(n) < 0.03,
            "printed": rng.random(n) < 0.6,
            "raw": pl.Series(raw.view("S16").ravel(), dtype=pl.Binary),
            WRITER: uid.astype(np.int64),
        }
    ).join(causes, on="k", how="left", maintain_order="left")
    clean = pl.col("category") == "none"
    number = [pl.col("node")] + [(pl.col("node") - 1 + pl.col(f"o{j}")) % NODES + 1 for j in (1, 2, 3)]
    name = [pl.format("gpu{}", k.cast(pl.String).str.zfill(4)) for k in number]
    job = (7_000_000 + pl.col("i")).cast(pl.String)
    user = pl.format("u{}", pl.col(WRITER))
    first_node = pl.when(clean).then(None).otherwise(name[0])
    nodes = pl.when(clean).then(pl.lit([], pl.List(pl.String))).otherwise(pl.concat_list(name).list.head(pl.col("width")))
    ranks = pl.concat_list([pl.col("rank") + 8 * j for j in range(4)]).cast(pl.List(pl.Int32))
    out = frame.select(
        id=pl.col("raw").bin.encode("hex"),
        time=pl.from_epoch("us", "us").dt.replace_time_zone("UTC"),
        analyzed=pl.from_epoch(pl.col("us") + pl.col("lag"), "us").dt.replace_time_zone("UTC"),
        job=job,
        cause="cause",
        category="category",
        confidence=pl.when(clean).then(0.9).otherwise("conf"),
        first_rank=pl.when(clean).then(None).otherwise(pl.col("rank")).cast(pl.Int32),
        first_node=first_node,
        nodes=nodes,
        ranks=pl.when(clean).then(pl.lit([], pl.List(pl.Int32))).otherwise(ranks.list.head(pl.col("width"))),
        inputs=pl.when(pl.col("printed"))
        .then(pl.concat_list(pl.format("/scratch/{}/slurm-{}.out", user, job)))
        .otherwise(
            pl.concat_list(pl.format("/scratch/{}/slurm-{}.out", user, job), pl.format("/scratch/{}/logs/{}/rank-0.log", user, job))
        ),
        summary=pl.when(clean).then("what").otherwise(pl.format("{} (rank {} on {})", "what", "rank", name[0])),
        host=pl.when(clean).then(name[0]).otherwise(first_node),
        logsleuth_version=pl.when(pl.col("i") < n // 2).then(pl.lit("0.9.2")).otherwise(pl.lit("0.10.0")),
        rules_version=pl.when(pl.col("i") < n // 3).then(pl.lit("r-3f9a1c")).otherwise(pl.lit("r-77b0e2")),
        fingerprint=pl.lit(None, pl.String),
        partial="partial",
        problems=pl.when(pl.col("partial"))
        .then(pl.concat_list(pl.format("/scratch/{}/slurm-{}.out: reading stopped at the time budget", user, job)))
        .otherwise(pl.lit([], pl.List(pl.String))),
        writer_uid=WRITER,
    )
    return out.cast(TABLE_SCHEMA)  # type: ignore[arg-type]


def write_store(folder: Path, rows: int, singles: int, end: datetime, *, compacted: bool = True) -> None:
    """A store as epilogs and ``compact`` leave it: all but the newest ``singles`` verdicts in a few big
    files of root's (each row's writer stored) that ``compact`` then cuts by time (unless not
    ``compacted``), and the newest as one-row files written as ``append`` writes them, each given to
    its writer when this runs as root (so they are read as other users' files)."""
    folder.mkdir(parents=True)
    table = verdicts(rows, end=end)
    old = table.head(rows - singles)
    for i, start in enumerate(range(0, old.height, 2_000_000)):  # what compact starts from: a few big files
        old.slice(start, 2_000_000).write_parquet(folder / f"raw-{i:04d}.parquet")
    del old
    if compacted:
        started = time.perf_counter()
        merged, problems = history.compact(folder)
        assert not problems, problems
        print(f"compact merged {merged} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    # rebuilt, not a slice: a slice keeps the whole table's string buffers, and writing one row took 0.2 s
    new = pl.DataFrame(table.tail(singles).to_dicts(), schema=TABLE_SCHEMA)
    del table
    root = os.geteuid() == 0
    for row in new.iter_slices(1):  # one file per verdict, as the epilog writes: a loop per file is what it is
        path = history.write_row(folder, row, host=row.item(0, "host"))
        if root:
            os.chown(path, row.item(0, WRITER), row.item(0, WRITER))


def store_for(rows: int, singles: int, *, compacted: bool = True) -> Path:
    """The generated store for these sizes, made once (its newest verdict: when it was made)."""
    folder = DATA / f"history-{rows}-{singles}{'' if compacted else '-raw'}"
    if not folder.is_dir():
        started = time.perf_counter()
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_store(tmp, rows, singles, datetime.now(timezone.utc), compacted=compacted)
        tmp.rename(folder)
        print(f"generated {folder} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return folder


def copy_store(store: Path, to: Path) -> Path:
    """A copy of the store with its files' owners (root may give them back), for runs that change it."""
    shutil.copytree(store, to)
    if os.geteuid() == 0:
        for f in store.glob("*.parquet"):
            st = f.stat()
            os.chown(to / f.name, st.st_uid, st.st_gid)
    return to


def timed(args: list[str], code: Path) -> tuple[float, float, str, str]:
    """(wall seconds, peak RSS MB, stdout, stderr) of ``logsleuth ARGS`` as a fresh process, as a user runs it
    (bytecode compiled, as pip leaves an install), with logsleuth from ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as tf:
        started = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", tf.name, sys.executable, "-m", "logsleuth", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=code,  # python -m puts the working folder first on the path
            timeout=3600,
        )
        wall = time.perf_counter() - started
        rss = float(tf.read().strip().splitlines()[-1]) / 1024
    if proc.returncode != 0:
        raise RuntimeError(f"logsleuth {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, rss, proc.stdout, proc.stderr


def _files(store: Path) -> str:
    files = list(store.glob("*.parquet"))
    return f"{len(files):,} files, {sum(f.stat().st_size for f in files) / (1 << 20):,.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--singles", type=int, default=5000, help="how many of them are one-row files (the epilog's)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-compact", action="store_true", help="skip measuring --compact (it copies the store)")
    ap.add_argument("--from-scratch", action="store_true", help="also: --compact of the same verdicts never compacted")
    ap.add_argument("--code", type=Path, default=ROOT, help="the logsleuth checkout to run (e.g. an older one, to compare)")
    args = ap.parse_args()
    compileall.compile_dir(args.code / "logsleuth", quiet=1)
    store = store_for(args.rows, args.singles)
    print(f"store: {args.rows:,} verdicts, {args.singles:,} of them in one-row files of other users; {_files(store)}")
    print(f"logsleuth from {args.code}")
    node = next(iter(BAD_NODES))
    runs = {
        "history (terminal)": ["history", str(store), "--no-color"],
        "history --format json": ["history", str(store), "--format", "json"],
        "history --since 30d -f json": ["history", str(store), "--since", "30d", "-f", "json"],
        f"history --node {node} -f json": ["history", str(store), "--node", node, "-f", "json"],
    }
    print(f"{'command':<34} {'median s':>9} {'runs s':>22} {'peak MB':>8}")
    for what, cmd in runs.items():
        got = [timed(cmd, args.code) for _ in range(args.repeat)]
        walls = [g[0] for g in got]
        print(f"{what:<34} {statistics.median(walls):>9.2f} {' '.join(f'{w:.2f}' for w in walls):>22} {max(g[1] for g in got):>8.0f}")
        if "json" in cmd and "--node" not in cmd and "--since" not in cmd:
            data = json.loads(got[-1][2])
            assert data["verdicts"] == args.rows and data["nodes"][0]["node"] in BAD_NODES, data["nodes"][0]
    DATA.mkdir(exist_ok=True)
    compactions = [] if args.no_compact else [("history --compact (cron)", store)]
    if args.from_scratch:
        compactions.append(("history --compact (from scratch)", store_for(args.rows, args.singles, compacted=False)))
    for what, source in compactions:
        with tempfile.TemporaryDirectory(dir=DATA) as tmp:
            copy = copy_store(source, Path(tmp) / "store")
            before = _files(copy)
            wall, rss, out, err = timed(["history", str(copy), "--compact", "--format", "json"], args.code)
            assert json.loads(out)["verdicts"] == args.rows, err
            print(f"{what:<34} {wall:>9.2f} {'(once)':>22} {rss:>8.0f}  {before} -> {_files(copy)}")
            wall, rss, _, _ = timed(["history", str(copy), "--format", "json"], args.code)
            print(f"{'  then history -f json':<34} {wall:>9.2f} {'(once)':>22} {rss:>8.0f}")


if __name__ == "__main__":
    main()
