#!/usr/bin/env python3
"""A small DDP training job (MLP on random data, gloo, CPU) with fault injection.

Used by corpus/tools/inject.py to produce real failure logs. Every fault below
really happens in this process (no fake log lines are printed): the log lines
come from Python, PyTorch, gloo, torchrun and SLURM.

Rank/world come from the usual torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT). With --slurm-env they are derived from SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID (the common "srun -n N python train.py" pattern); the
master address/port then come from MASTER_ADDR/MASTER_PORT or default to the
first node of the job and 29500.

Faults (--fault NAME, on --fault-rank R, at --fault-step S):
  value_error | key_error | assertion | index_error | shape_bug   user-code exceptions
  segfault | segfault_fh | abort | sigkill | silent_exit1           signals / odd exits
  hang        rank R sleeps forever before its backward (others hit the gloo timeout)
  hang_init   rank R sleeps forever before init_process_group
  exit_early  rank R returns with exit code 0 in the middle of training
  mismatch_shape | mismatch_op | mismatch_dtype  rank R issues a different collective
  unused_params   rank R skips a layer (DDP without find_unused_parameters)
  model_differs   rank R builds a model with a different width
  host_oom    rank R allocates host memory until it is killed
  perm_denied | perm_denied_log   checkpoint (torch.save) / log file into --ckpt-dir
  disk_full | disk_full_log       same, the directory is a tiny full filesystem
  shm         DataLoader workers passing big batches through a tiny /dev/shm
  backend_nccl | backend_mpi | backend_bogus   init_process_group with that backend
  set_device  torch.cuda.set_device(local_rank) on this CPU-only machine
  cuda_to     model.to(f"cuda:{local_rank}") on this CPU-only machine
  import_error   rank R imports a module that is not installed
  harmless    clean run that logs a caught exception, warnings and a retry
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import signal
import socket
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fault", default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-sleep", type=float, default=0.05, help="seconds of 'work' per step")
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--timeout", type=float, default=30.0, help="init_process_group timeout (s)")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--init-method", default="env://", help="env://, file:///path, tcp://host:port")
    p.add_argument("--slurm-env", action="store_true", help="derive RANK etc. from SLURM_* variables")
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--ckpt-every", type=int, default=0, help="save a checkpoint every K steps on rank 0 (0: never)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    return p.parse_args(argv)


def slurm_env():
    """Map SLURM task variables to the torch.distributed ones (only those not set)."""
    m = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID"}
    for k, v in m.items():
        if k not in os.environ and v in os.environ:
            os.environ[k] = os.environ[v]
    if "MASTER_ADDR" not in os.environ:
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "localhost")
        os.environ["MASTER_ADDR"] = nodelist.split(",")[0].split("[")[0] + (
            nodelist.split("[")[1].split("-")[0].split(",")[0].rstrip("]") if "[" in nodelist else "")
    os.environ.setdefault("MASTER_PORT", "29500")


def env_rank():
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


class MLP(nn.Module):
    def __init__(self, width: int, extra: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, width)
        self.head = nn.Linear(width, 1)
        self.aux = nn.Linear(width, 1) if extra else None

    def forward(self, x, skip_fc2: bool = False):
        h = torch.relu(self.fc1(x))
        if not skip_fc2:
            h = torch.relu(self.fc2(h))
        return self.head(h)


class RandomDataset(torch.utils.data.Dataset):
    """Random regression data; with big=True each sample is large (for /dev/shm tests)."""

    def __init__(self, n: int, big: bool = False):
        self.n = n
        self.big = big

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(16, generator=g)
        if self.big:
            x = torch.randn(16, 256 * 1024, generator=g)  # 16 MiB per sample
        return x, torch.randn(1, generator=g)


def load_batch(step: int, rank: int, args, records: dict):
    """'Data pipeline' code: where the user-code faults live."""
    if args.fault in ("value_error", "key_error", "assertion", "index_error") and rank == args.fault_rank \
            and step == args.fault_step:
        sample_id = 1000 * rank + step
        if args.fault == "value_error":
            label = "n/a"
            raise ValueError(f"could not convert label {label!r} of sample {sample_id} to float")
        if args.fault == "key_error":
            return records[f"shard_{rank + 7}"]
        if args.fault == "assertion":
            seq_len = 513
            assert seq_len <= 512, f"sample {sample_id} has length {seq_len} > max_len 512"
        if args.fault == "index_error":
            offsets = [0, 16, 32]
            return offsets[step]
    g = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(args.batch, 16, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.1
    if args.fault == "shape_bug" and rank == args.fault_rank and step == args.fault_step:
        x = torch.randn(args.batch, 15, generator=g)  # a malformed batch
    return x, y


def allocate_until_dead(rank):
    hog = []
    total = 0
    while True:
        chunk = bytearray(64 * 2**20)
        for i in range(0, len(chunk), 4096):
            chunk[i] = 1
        hog.append(chunk)
        total += 64
        if total % 512 == 0:
            print(f"rank {rank}: caching dataset in memory: {total / 1024:.1f} GiB", flush=True)


def crash(kind):
    sys.stdout.flush()
    sys.stderr.flush()
    if kind in ("segfault", "segfault_fh"):
        ctypes.string_at(0)  # dereference NULL: a real SIGSEGV
    elif kind == "abort":
        os.abort()
    elif kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "silent_exit1":
        os._exit(1)


def save_checkpoint(model, opt, step, args, rank):
    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, f"ckpt_step{step}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path)
    print(f"rank {rank}: saved checkpoint {path}", flush=True)


def write_metrics(step, loss, args, rank):
    path = os.path.join(args.ckpt_dir, f"metrics_rank{rank}.log")
    with open(path, "a") as f:
        f.write(f"step {step} loss {loss:.4f}\n" * 20000)


def main(argv=None):
    args = parse_args(argv)
    if args.fault == "segfault_fh":
        import faulthandler
        faulthandler.enable()
    if args.slurm_env:
        slurm_env()
    host = socket.gethostname()
    pre_rank = env_rank()

    if args.fault == "import_error" and pre_rank == args.fault_rank:
        import fused_adam_kernels  # noqa: F401  (not installed on this "node")

    if args.fault == "hang_init" and pre_rank == args.fault_rank:
        print(f"rank {pre_rank}: waiting for dataset lock ...", flush=True)
        time.sleep(10**6)

    if args.fault == "set_device":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)

    backend = args.backend
    if args.fault == "backend_nccl":
        backend = "nccl"
    elif args.fault == "backend_mpi":
        backend = "mpi"
    elif args.fault == "backend_bogus":
        backend = "glooo"

    print(f"[{host}] pid {os.getpid()} initializing process group (backend={backend}, "
          f"init={args.init_method}, timeout={args.timeout:g}s)", flush=True)
    kw = {}
    if not args.init_method.startswith("env://"):
        kw = {"rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}
    dist.init_process_group(backend=backend, init_method=args.init_method,
                            timeout=datetime.timedelta(seconds=args.timeout), **kw)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[{host}] rank {rank}/{world} ready (local_rank {os.environ.get('LOCAL_RANK', '?')})", flush=True)

    if args.fault.startswith("mismatch_"):
        # a few rounds of "dataset statistics" syncing before the model is built; rank R
        # sends a different collective in round --fault-step.  (Done before DDP because
        # DDP construction itself crashes with TORCH_DISTRIBUTED_DEBUG=DETAIL on gloo/CPU
        # in torch 2.13.)
        for rnd in range(1, args.fault_step + 1):
            t = torch.ones(8)
            op = dist.ReduceOp.SUM
            if rank == args.fault_rank and rnd == args.fault_step:
                if args.fault == "mismatch_shape":
                    t = torch.ones(12)
                elif args.fault == "mismatch_dtype":
                    t = torch.ones(8, dtype=torch.float64)
                elif args.fault == "mismatch_op":
                    op = dist.ReduceOp.MAX
            dist.all_reduce(t, op=op)
            if rank == 0:
                print(f"synced dataset statistics (round {rnd}): {t.sum().item():.0f}", flush=True)

    torch.manual_seed(0)
    width = args.hidden
    if args.fault == "model_differs" and rank == args.fault_rank:
        width = args.hidden * 2
    model = MLP(width)
    if args.fault == "cuda_to":
        model = model.to(f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    records = {f"shard_{r}": r for r in range(world)}

    loader_iter = None
    if args.fault == "shm":
        ds = RandomDataset(64, big=True)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
        loader_iter = iter(loader)

    if args.fault == "harmless":
        warnings.warn("The epoch parameter in `scheduler.step()` was not necessary and is being deprecated",
                      UserWarning, stacklevel=1)
        if rank == 0:
            for attempt in (1, 2):
                try:
                    if attempt == 1:
                        raise ConnectionError("metrics server 10.0.0.5:8125 not reachable")
                    print("metrics: connected on attempt 2", flush=True)
                except ConnectionError:
                    import traceback
                    print("metrics: connection failed, retrying in 1s (attempt 1/3)", flush=True)
                    traceback.print_exc()
                    time.sleep(1)

    t0 = time.time()
    for step in range(1, args.steps + 1):
        if loader_iter is not None:
            xb, _ = next(loader_iter)
            x = xb.mean(dim=2)
            y = x.sum(dim=1, keepdim=True) * 0.1
        else:
            x, y = load_batch(step, rank, args, records)
        hit = rank == args.fault_rank and step == args.fault_step
        if hit and args.fault in ("segfault", "segfault_fh", "abort", "sigkill", "silent_exit1"):
            crash(args.fault)
        if hit and args.fault == "host_oom":
            allocate_until_dead(rank)
        if hit and args.fault == "hang":
            time.sleep(10**6)
        if hit and args.fault == "exit_early":
            print(f"rank {rank}: no more data in shard, stopping", flush=True)
            sys.exit(0)
        skip = args.fault == "unused_params" and rank == args.fault_rank and step >= args.fault_step
        out = ddp(x, skip_fc2=skip)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_sleep)
        if rank == 0 and (step % args.log_every == 0 or step == 1):
            print(f"step {step} loss {loss.item():.4f} ({(time.time() - t0) / step:.3f}s/step)", flush=True)
        if args.fault in ("perm_denied", "disk_full") and hit:
            save_checkpoint(model, opt, step, args, rank)
        elif args.fault in ("perm_denied_log", "disk_full_log") and hit:
            write_metrics(step, loss.item(), args, rank)
        elif args.ckpt_every and rank == 0 and step % args.ckpt_every == 0:
            save_checkpoint(model, opt, step, args, rank)

    dist.barrier()
    if rank == 0:
        print(f"training done: {args.steps} steps in {time.time() - t0:.1f}s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
