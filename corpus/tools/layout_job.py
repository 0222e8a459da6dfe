#!/usr/bin/env python3
"""A small DDP training job for corpus/tools/layouts.py: the same MLP/random-data job as
ddp_job.py (which it imports: layouts.py copies both into the job directory, this one as
``train.py``), started the ways users start jobs:

  --launcher env          RANK/WORLD_SIZE/... from the environment (torchrun, srun --slurm-env)
  --launcher spawn        torch.multiprocessing.spawn(worker, nprocs=--nprocs) from plain python
  --launcher accelerate   a HuggingFace Accelerate loop (run under `accelerate launch`)
  --launcher lightning    a Lightning Trainer(accelerator="cpu", devices=--nprocs, strategy="ddp")
  --launcher deepspeed    a DeepSpeed engine loop (run under the `deepspeed` launcher; CPU accelerator, gloo)

Faults (--fault NAME on --fault-rank R at --fault-step S); every one really happens:
  value_error | key_error | assertion | index_error   user-code exceptions (ddp_job.load_batch)
  segfault     ctypes.string_at(0): a real SIGSEGV
  hang         rank R sleeps forever before its backward (peers hit the 30 s gloo timeout)
  host_oom     rank R allocates host memory until the kernel kills it (memory cgroup)
  import_error rank R imports a module that is not installed
  env_slurm    (env) the script takes its rank from SLURM_PROCID, which torchrun does not set
  no_master    (spawn) the script never sets MASTER_ADDR/MASTER_PORT before init_process_group
  harmless     clean run: a caught exception with its traceback, warnings, a retry
Progress output (--progress): none | tqdm (tqdm bar on rank 0) | cr (rank 0 prints
"\\r"-terminated progress lines, no newline, like a hand-made progress bar).
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import socket
import sys
import time
import traceback
import warnings

import ddp_job
import torch
import torch.distributed as dist
import torch.nn as nn


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default="env", choices=["env", "spawn", "accelerate", "lightning", "deepspeed"])
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help="passed by the deepspeed launcher (ignored: LOCAL_RANK is in the environment too)")
    p.add_argument("--nprocs", type=int, default=2, help="spawn / lightning: processes")
    p.add_argument("--port", type=int, default=29500, help="spawn: MASTER_PORT the script sets")
    p.add_argument("--fault", default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--slurm-env", action="store_true")
    p.add_argument("--progress", default="none", choices=["none", "tqdm", "cr"])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--record", action="store_true",
                   help="env: wrap the entry point in torch.distributed.elastic's @record (writes error.json)")
    return p.parse_args(argv)


def crash_segfault():
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.string_at(0)


def harmless_noise(rank):
    warnings.warn("The epoch parameter in `scheduler.step()` was not necessary and is being deprecated",
                  UserWarning, stacklevel=1)
    if rank == 0:
        for attempt in (1, 2):
            try:
                if attempt == 1:
                    raise ConnectionError("metrics server 10.0.0.5:8125 not reachable")
                print("metrics: connected on attempt 2", flush=True)
            except ConnectionError:
                print("metrics: connection failed, retrying in 1s (attempt 1/3)", flush=True)
                traceback.print_exc()
                time.sleep(1)


def before_step(args, rank, step):
    """Faults that strike inside the training loop, before forward."""
    if rank != args.fault_rank or step != args.fault_step:
        return
    if args.fault == "segfault":
        crash_segfault()
    elif args.fault == "host_oom":
        ddp_job.allocate_until_dead(rank)
    elif args.fault == "hang":
        time.sleep(10**6)


class Progress:
    def __init__(self, args, rank):
        self.args, self.rank = args, rank
        self.bar = None
        if rank == 0 and args.progress == "tqdm":
            from tqdm import tqdm
            self.bar = tqdm(total=args.steps, desc="train", unit="step")
        self.t0 = time.time()

    def update(self, step, loss):
        if self.rank != 0:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}")
        elif self.args.progress == "cr":
            pct = 100 * step // self.args.steps
            print(f"\rtrain [{'#' * (pct // 5):<20}] {pct:3d}% step {step}/{self.args.steps} loss {loss:.4f}",
                  end="", flush=True)
        elif step % self.args.log_every == 0 or step == 1:
            print(f"step {step} loss {loss:.4f} ({(time.time() - self.t0) / step:.3f}s/step)", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.rank == 0 and self.args.progress == "cr":
            print(flush=True)


def train_ddp(args, rank, world):
    """The DDP loop shared by the env and spawn launchers (process group already up)."""
    host = socket.gethostname()
    print(f"[{host}] rank {rank}/{world} ready", flush=True)
    torch.manual_seed(0)
    model = ddp_job.MLP(args.hidden)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    records = {f"shard_{r}": r for r in range(world)}
    if args.fault == "harmless":
        harmless_noise(rank)
    prog = Progress(args, rank)
    for step in range(1, args.steps + 1):
        x, y = ddp_job.load_batch(step, rank, args, records)
        before_step(args, rank, step)
        out = ddp(x)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_sleep)
        prog.update(step, loss.item())
    prog.close()
    dist.barrier()
    if rank == 0:
        print(f"training done: {args.steps} steps", flush=True)
    dist.destroy_process_group()


# ---- launcher: env (torchrun, srun) ------------------------------------------------------

def main_env(args):
    if args.slurm_env:
        ddp_job.slurm_env()
    if args.fault == "env_slurm":
        # written for `srun python train.py`, now started by torchrun
        rank = int(os.environ["SLURM_PROCID"])
        world = int(os.environ["SLURM_NTASKS"])
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    pre_rank = int(os.environ.get("RANK", "0"))
    if args.fault == "import_error" and pre_rank == args.fault_rank:
        import fused_adam_kernels  # noqa: F401
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    train_ddp(args, dist.get_rank(), dist.get_world_size())


# ---- launcher: torch.multiprocessing.spawn -----------------------------------------------

def spawn_worker(rank, world, args):
    if args.fault == "import_error" and rank == args.fault_rank:
        import fused_adam_kernels  # noqa: F401
    print(f"worker {rank}: pid {os.getpid()} initializing process group", flush=True)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    train_ddp(args, rank, world)


def main_spawn(args):
    import torch.multiprocessing as mp
    if args.fault != "no_master":
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = str(args.port)
    print(f"spawning {args.nprocs} workers", flush=True)
    mp.spawn(spawn_worker, args=(args.nprocs, args), nprocs=args.nprocs, join=True)
    print("all workers finished", flush=True)


# ---- launcher: accelerate -----------------------------------------------------------------

def main_accelerate(args):
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs
    acc = Accelerator(cpu=True, kwargs_handlers=[
        InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=args.timeout))])
    rank = acc.process_index
    acc.print(f"accelerate: {acc.state.distributed_type}, {acc.num_processes} processes")
    if args.fault == "import_error" and rank == args.fault_rank:
        import fused_adam_kernels  # noqa: F401
    torch.manual_seed(0)
    model = ddp_job.MLP(args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = acc.prepare(model, opt)
    records = {f"shard_{r}": r for r in range(acc.num_processes)}
    if args.fault == "harmless":
        harmless_noise(rank)
    prog = Progress(args, rank)
    for step in range(1, args.steps + 1):
        x, y = ddp_job.load_batch(step, rank, args, records)
        before_step(args, rank, step)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        acc.backward(loss)
        opt.step()
        time.sleep(args.step_sleep)
        prog.update(step, loss.item())
    prog.close()
    acc.wait_for_everyone()
    acc.print(f"training done: {args.steps} steps")
    acc.end_training()


# ---- launcher: lightning -------------------------------------------------------------------

def main_lightning(args):
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    class RegressionData(torch.utils.data.Dataset):
        def __len__(self):
            return args.steps * args.batch * args.nprocs

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            x = torch.randn(16, generator=g)
            return x, x.sum(dim=0, keepdim=True) * 0.1

    class LitMLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = ddp_job.MLP(args.hidden)
            self.records = {}

        def training_step(self, batch, batch_idx):
            rank, step = self.global_rank, self.global_step + 1
            if rank == args.fault_rank and step == args.fault_step:
                if args.fault == "value_error":
                    raise ValueError(f"could not convert label 'n/a' of sample {1000 * rank + step} to float")
                if args.fault == "key_error":
                    return self.records[f"shard_{rank + 7}"]
                before_step(args, rank, step)
            time.sleep(args.step_sleep)
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss, prog_bar=True)
            return loss

        def on_train_start(self):
            if args.fault == "harmless":
                harmless_noise(self.global_rank)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    callbacks = []
    if args.progress == "tqdm":
        from lightning.pytorch.callbacks import TQDMProgressBar
        callbacks.append(TQDMProgressBar(refresh_rate=1))
    trainer = L.Trainer(accelerator="cpu", devices=args.nprocs,
                        strategy=DDPStrategy(timeout=datetime.timedelta(seconds=args.timeout)),
                        max_epochs=1, log_every_n_steps=5, enable_checkpointing=False, logger=False,
                        callbacks=callbacks)
    loader = torch.utils.data.DataLoader(RegressionData(), batch_size=args.batch)
    trainer.fit(LitMLP(), loader)
    if trainer.global_rank == 0:
        print(f"training done: {trainer.global_step} steps", flush=True)


# ---- launcher: deepspeed -------------------------------------------------------------------

def main_deepspeed(args):
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[{socket.gethostname()}] rank {rank}/{world} ready", flush=True)
    if args.fault == "import_error" and rank == args.fault_rank:
        import fused_adam_kernels  # noqa: F401
    torch.manual_seed(0)
    model = ddp_job.MLP(args.hidden)
    cfg = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "steps_per_print": args.log_every}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    records = {f"shard_{r}": r for r in range(world)}
    if args.fault == "harmless":
        harmless_noise(rank)
    prog = Progress(args, rank)
    for step in range(1, args.steps + 1):
        x, y = ddp_job.load_batch(step, rank, args, records)
        before_step(args, rank, step)
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        time.sleep(args.step_sleep)
        prog.update(step, loss.item())
    prog.close()
    dist.barrier()
    if rank == 0:
        print(f"training done: {args.steps} steps", flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.record and args.launcher == "env":
        from torch.distributed.elastic.multiprocessing.errors import record
        return record(main_env)(args)
    {"env": main_env, "spawn": main_spawn, "accelerate": main_accelerate,
     "lightning": main_lightning, "deepspeed": main_deepspeed}[args.launcher](args)


if __name__ == "__main__":
    main()
