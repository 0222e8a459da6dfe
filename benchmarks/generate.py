"""Large, realistic job logs for the benchmarks: 10 MB to several GB, 8 to 4096 ranks.

What a big NCCL_DEBUG=INFO job writes into one SLURM output file: per-rank
NCCL init chatter (version, bootstrap, channels, Init COMPLETE), training
progress and periodic warnings from every rank under `srun --label` and
torchrun's `--tee` prefixes, then a failure cascade at the end: one rank
raises, the others' watchdogs time out, torchrun tears down, srun reports.
Line formats follow docs/log-formats.md and real runs of torch 2.13.

The cascade is the same for every size with the same ranks and seed, so the
verdict on a 4 GB file can be compared with the verdict on a small one.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from pathlib import Path

NPROC = 8  # GPUs (torchrun workers) per node


def _node(rank: int) -> str:
    return f"gpu{rank // NPROC:04d}"


def _label(rank: int, width: int) -> str:
    """srun --label with one torchrun per node: the task id is the node index, padded."""
    return f"{rank // NPROC:>{width}}: [default{rank % NPROC}]:"


def init_lines(ranks: int, rng: random.Random) -> Iterator[str]:
    """NCCL_DEBUG=INFO start-up of every rank."""
    width = len(str(max(1, ranks // NPROC - 1)))
    for r in range(ranks):
        host, pid, lab = _node(r), 4000 + r, _label(r, width)
        dev = r % NPROC
        yield f"{lab}{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap : Using ib0:10.{r // 250}.{r % 250}.1<0>"
        yield f"{lab}{host}:{pid}:{pid} [{dev}] NCCL INFO NCCL version 2.21.5+cuda12.4"
        yield f"{lab}{host}:{pid}:{pid + 90} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.{r // 250}.{r % 250}.1<0>"
        for ch in range(4):
            yield f"{lab}{host}:{pid}:{pid + 90} [{dev}] NCCL INFO Channel {ch:02d}/32 :    {r} {(r + 1) % ranks}"
        yield (
            f"{lab}{host}:{pid}:{pid + 90} [{dev}] NCCL INFO comm 0x{rng.getrandbits(40):x} rank {r} nranks {ranks} "
            f"cudaDev {dev} nvmlDev {dev} busId {dev}b000 commId 0x{rng.getrandbits(40):x} - Init COMPLETE"
        )


def training_lines(ranks: int, rng: random.Random) -> Iterator[str]:
    """Endless steady-state output: progress, NCCL chatter and the odd warning."""
    width = len(str(max(1, ranks // NPROC - 1)))
    step = 0
    while True:
        step += 1
        for r in rng.sample(range(ranks), min(ranks, 16)):
            lab = _label(r, width)
            roll = rng.random()
            if roll < 0.55:
                yield f"{lab}step {step} rank {r} loss {rng.random() * 3:.4f} lr 3.0e-04 grad_norm {rng.random():.3f} tokens/s {rng.randint(90000, 130000)}"
            elif roll < 0.93:
                yield f"{lab}{_node(r)}:{4000 + r}:{4090 + r} [{r % NPROC}] NCCL INFO Channel {rng.randint(0, 31):02d}/0 : {r}[{r % NPROC}] -> {(r + 1) % ranks}[{(r + 1) % NPROC}] via P2P/IPC/read"
            elif roll < 0.99:
                yield f"{lab}[rank{r}]: step {step}: checkpoint shard {rng.randint(0, 999)} written in {rng.random() * 4:.2f}s"
            else:
                yield (
                    f"{lab}/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:624: UserWarning: "
                    "This DataLoader will create 16 worker processes in total. Our suggested max number of worker in current system is 12."
                )


def cascade_lines(ranks: int, culprit: int) -> Iterator[str]:
    """The end of the job: the culprit raises, every other rank times out, torchrun and srun report."""
    width = len(str(max(1, ranks // NPROC - 1)))
    lab = _label(culprit, width)
    yield f"{lab}[rank{culprit}]: Traceback (most recent call last):"
    yield f'{lab}[rank{culprit}]:   File "/home/user/train/train.py", line 212, in <module>'
    yield f"{lab}[rank{culprit}]:     main()"
    yield f'{lab}[rank{culprit}]:   File "/home/user/train/data.py", line 88, in collate'
    yield f'{lab}[rank{culprit}]:     raise ValueError(f"sample {{idx}} has {{n}} tokens, expected <= 8192")'
    yield f"{lab}[rank{culprit}]: ValueError: sample 918273 has 9001 tokens, expected <= 8192"
    for r in range(ranks):
        if r == culprit:
            continue
        yield (
            f"{_label(r, width)}[rank{r}]:[E1122 02:40:23.026531 {9000 + r} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=50331648, NumelOut=50331648, "
            "Timeout(ms)=600000) ran for 600049 milliseconds before timing out."
        )
    node_of_culprit = culprit // NPROC
    yield f"{node_of_culprit:>{width}}: E1122 02:40:31.118000 {3000 + node_of_culprit} torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: {culprit % NPROC} (pid: {4000 + culprit}) of binary: /opt/venv/bin/python3"
    yield f"srun: error: {_node(culprit)}: task {node_of_culprit}: Exited with exit code 1"


def write_job(path: Path, size_bytes: int, ranks: int = 64, seed: int = 7) -> Path:
    """Write a job log of about ``size_bytes`` bytes (at least the init and the cascade)."""
    rng = random.Random(seed)
    culprit = random.Random(seed + ranks).randrange(1, ranks)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", buffering=1 << 20) as out:
        out.write("\n".join(init_lines(ranks, rng)) + "\n")
        written = out.tell()
        batch: list[str] = []
        pending = 0  # bytes in batch, newlines included
        for line in training_lines(ranks, rng):
            if written + pending >= size_bytes:
                break
            batch.append(line)
            pending += len(line) + 1
            if len(batch) == 20000:
                out.write("\n".join(batch) + "\n")
                written += pending
                batch.clear()
                pending = 0
        if batch:
            out.write("\n".join(batch) + "\n")
        out.write("\n".join(cascade_lines(ranks, culprit)) + "\n")
    return path


def write_rank_dir(root: Path, ranks: int = 64, lines_per_rank: int = 90, seed: int = 7) -> Path:
    """A job's per-rank logs as torchrun ``--log-dir`` leaves them: every node's agent writes
    ``<log_dir>/<run id>_<random>/attempt_0/<local rank>/{stdout,stderr}.log`` (two files a rank).

    stdout holds the rank's NCCL start-up (NCCL_DEBUG=INFO: the one place its global rank is
    printed) and its progress; stderr a harmless warning the rank repeats, then the end: the
    culprit's traceback, which names no rank (its rank is known only from its folder), and the
    other ranks' watchdog timeouts. Same culprit as :func:`write_job` for the same ranks and seed.
    """
    rng = random.Random(seed)
    culprit = random.Random(seed + ranks).randrange(1, ranks)
    root.mkdir(parents=True, exist_ok=True)
    nodes = max(1, (ranks + NPROC - 1) // NPROC)
    for node in range(nodes):
        run = root / f"4242_{random.Random(seed * 1000 + node).getrandbits(32):08x}" / "attempt_0"
        for local in range(min(NPROC, ranks - node * NPROC)):
            r = node * NPROC + local
            host, pid = _node(r), 4000 + r
            out = [
                f"{host}:{pid}:{pid} [{local}] NCCL INFO Bootstrap : Using ib0:10.{r // 250}.{r % 250}.1<0>",
                f"{host}:{pid}:{pid} [{local}] NCCL INFO NCCL version 2.21.5+cuda12.4",
                f"{host}:{pid}:{pid + 90} [{local}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.{r // 250}.{r % 250}.1<0>",
                f"{host}:{pid}:{pid + 90} [{local}] NCCL INFO comm 0x{rng.getrandbits(40):x} rank {r} nranks {ranks} cudaDev {local} "
                f"nvmlDev {local} busId {local}b000 commId 0x5c1e7a11 - Init COMPLETE",
            ]
            for step in range(1, lines_per_rank - len(out) + 1):
                out.append(
                    f"step {step} loss {rng.random() * 3:.4f} lr 3.0e-04 grad_norm {rng.random():.3f} tokens/s {rng.randint(90000, 130000)}"
                )
            err = [
                "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:624: UserWarning: This DataLoader will create 16"
                " worker processes in total. Our suggested max number of worker in current system is 12."
            ] * 3
            if r == culprit:
                err += [
                    "Traceback (most recent call last):",
                    '  File "/home/user/train/train.py", line 212, in <module>',
                    "    main()",
                    '  File "/home/user/train/data.py", line 88, in collate',
                    '    raise ValueError(f"sample {idx} has {n} tokens, expected <= 8192")',
                    "ValueError: sample 918273 has 9001 tokens, expected <= 8192",
                ]
            else:
                err.append(
                    f"[rank{r}]:[E1122 02:40:23.026531 {9000 + r} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                    "operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=50331648, NumelOut=50331648, "
                    "Timeout(ms)=600000) ran for 600049 milliseconds before timing out."
                )
            folder = run / str(local)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "stdout.log").write_text("\n".join(out) + "\n")
            (folder / "stderr.log").write_text("\n".join(err) + "\n")
    return root


def parse_size(text: str) -> int:
    """'10MB', '1GB', '512KB' -> bytes (powers of 1000, as disks count); '1GiB', '16MiB': powers of 1024."""
    units = {"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--size", default="10MB", help="target size, e.g. 10MB, 1GB")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--per-rank", action="store_true", help="a folder of per-rank files (torchrun --log-dir) instead of one log")
    args = ap.parse_args()
    if args.per_rank:
        write_rank_dir(args.path, args.ranks, seed=args.seed)
    else:
        write_job(args.path, parse_size(args.size), args.ranks, args.seed)


if __name__ == "__main__":
    main()
