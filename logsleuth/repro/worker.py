"""One rank of `logsleuth repro`: run the collective, time it, check it, print one result line.

Started by logsleuth's own spawner, by srun or by torchrun: the rank comes from
RANK (torchrun, logsleuth) or SLURM_PROCID (srun), and so do the world size and
local rank. Failures are left to raise: their traceback on stderr is exactly
what the analyzer reads afterwards, as it would read the job's.

Every rank's input is known in closed form, ``x_r[i] = (5r + 3i) mod 11``, so
the correct output of each collective is known element by element without
another collective, and a ``wrong`` count means what nccl-tests' #wrong means.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

from logsleuth.repro.plan import BACKENDS, DTYPES, OPS, RESULT_MARK

_MOD, _A, _B = 11, 5, 3
#: Elements generated or checked at a time, so checking never needs much more memory than the buffers.
_CHUNK = 1 << 22
_TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}

Expected = Callable[[torch.Tensor], torch.Tensor]


def _value(rank: int, index: torch.Tensor) -> torch.Tensor:
    """Rank ``rank``'s input at positions ``index`` (int64)."""
    return (_A * rank + _B * index) % _MOD


def _rank_sum(world: int, index: torch.Tensor) -> torch.Tensor:
    """Sum over all ranks of their input at ``index``: whole periods of 11 ranks add up to 0+1+...+10."""
    full, rest = divmod(world, _MOD)
    total = torch.full_like(index, full * (_MOD * (_MOD - 1) // 2))
    for r in range(rest):
        total += _value(r, index)
    return total


def _fill(buf: torch.Tensor, values: Expected) -> None:
    flat = buf.view(-1)
    for start in range(0, flat.numel(), _CHUNK):
        stop = min(start + _CHUNK, flat.numel())
        flat[start:stop] = values(torch.arange(start, stop, device=buf.device)).to(buf.dtype)


def _count_wrong(out: torch.Tensor, values: Expected, tolerance: float) -> int:
    """Elements of ``out`` that differ from the expected values (relative ``tolerance`` for sums in floating point)."""
    flat, wrong = out.view(-1), 0
    for start in range(0, flat.numel(), _CHUNK):
        stop = min(start + _CHUNK, flat.numel())
        want = values(torch.arange(start, stop, device=out.device))
        got = flat[start:stop]
        if got.is_floating_point():
            ref = want.to(torch.float64)
            bad = (got.to(torch.float64) - ref).abs() > tolerance * ref.abs()
        else:
            bad = got != want.to(got.dtype)  # integer sums wrap in the dtype, as the collective's do
        wrong += int(bad.sum().item())
    return wrong


class Collective:
    """Buffers, one call of the collective, and its expected output, for one rank."""

    def __init__(self, op: str, numel: int, dtype: torch.dtype, rank: int, world: int, device: torch.device) -> None:
        self.op, self.rank, self.world = op, rank, world
        chunk = numel // world if op in ("reduce_scatter", "all_to_all") else numel
        out_numel = {"all_gather": numel * world, "reduce_scatter": chunk, "all_to_all": numel}.get(op, 0)  # the others work in place
        self.input = torch.empty(0 if op == "barrier" else numel, dtype=dtype, device=device)
        self.output = torch.empty(out_numel, dtype=dtype, device=device)
        # barrier moves no data: nothing to expect, nothing can be wrong
        self.expected: Expected | None = {
            "all_reduce": lambda i: _rank_sum(world, i),
            "broadcast": lambda i: _value(0, i),
            "all_gather": lambda i: _value_per_rank(i // numel, i % numel),
            "reduce_scatter": lambda i: _rank_sum(world, rank * chunk + i),
            "all_to_all": lambda i: _value_per_rank(i // chunk, rank * chunk + i % chunk),
        }.get(op)
        # NCCL's barrier must know the device; gloo's takes none
        self.device_ids = [device.index] if device.type == "cuda" else None
        sums = op in ("all_reduce", "reduce_scatter")
        self.tolerance = (world - 1) * torch.finfo(dtype).eps if sums and dtype.is_floating_point else 0.0
        self.reset()

    def reset(self) -> None:
        """Put this rank's input back (all_reduce and broadcast overwrite it in place)."""
        _fill(self.input, lambda i: _value(self.rank, i))

    def __call__(self) -> None:
        op = self.op
        if op == "all_reduce":
            dist.all_reduce(self.input)
        elif op == "broadcast":
            dist.broadcast(self.input, src=0)
        elif op == "all_gather":
            getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(self.output, self.input)
        elif op == "reduce_scatter":
            getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(self.output, self.input)
        elif op == "all_to_all":
            dist.all_to_all_single(self.output, self.input)
        else:
            dist.barrier(device_ids=self.device_ids)

    def wrong(self) -> int:
        """Wrong elements in the result of the last call."""
        if self.expected is None:
            return 0
        result = self.input if self.op in ("all_reduce", "broadcast") else self.output
        return _count_wrong(result, self.expected, self.tolerance)


def _value_per_rank(ranks: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return (_A * ranks + _B * index) % _MOD


def _env_int(*names: str, default: int | None = None) -> int:
    for name in names:
        if os.environ.get(name, "").strip():
            return int(os.environ[name])
    if default is None:
        raise SystemExit(f"logsleuth repro worker: none of {', '.join(names)} is set; start it with torchrun, srun or logsleuth repro")
    return default


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m logsleuth.repro.worker", description="One rank of logsleuth repro.")
    p.add_argument("--op", choices=OPS, required=True)
    p.add_argument("--numel", type=int, required=True)
    p.add_argument("--dtype", choices=list(DTYPES), required=True)
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=30.0, help="the process group's timeout, seconds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one rank; the result line goes to stdout, everything else PyTorch prints goes where it goes."""
    args = _parse(argv)
    rank = _env_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", default=0)
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # one GPU per local rank, before the communicator exists
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    work = Collective(args.op, args.numel, _TORCH_DTYPES[args.dtype], rank, world, device)
    for _ in range(args.warmup):
        work()
    elapsed_s = _timed(work, args.iters, device)
    work.reset()
    work()
    _sync(device)
    result = {
        "rank": rank,
        "local_rank": local_rank,
        "host": socket.gethostname().split(".")[0],
        "backend": backend,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None,  # type: ignore[no-untyped-call]
        "world": world,
        "iterations": args.iters,
        "time_us": elapsed_s / args.iters * 1e6,
        "wrong": work.wrong(),
    }
    # One write(2) per line: ranks share the launcher's stdout pipe, and print() under
    # PYTHONUNBUFFERED writes text and newline separately, so lines would interleave.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (RESULT_MARK + json.dumps(result) + "\n").encode())
    dist.destroy_process_group()
    return 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(work: Collective, iters: int, device: torch.device) -> float:
    """Seconds for ``iters`` calls: CUDA events on a GPU (kernels are asynchronous), the wall clock on the CPU."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        torch.cuda.synchronize(device)
        start.record()
        for _ in range(iters):
            work()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    began = time.perf_counter()
    for _ in range(iters):
        work()
    return time.perf_counter() - began


if __name__ == "__main__":
    sys.exit(main())
