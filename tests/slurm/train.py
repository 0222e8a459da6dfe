"""A tiny DDP job (gloo on the CPU) that trains a few steps, then fails as it is told.

The SLURM integration test submits it, and tests/fixtures/make_fixtures.sh made
the logs under tests/fixtures/ with it. Rank and world size come from torchrun
(RANK, WORLD_SIZE) or from srun (SLURM_PROCID, SLURM_NTASKS).

  --fail raise     rank --fail-rank raises a ValueError at step 2
  --fail fetch     rank --fail-rank rejects its shard, naming the URL with its
                   token (the log then holds secrets, on the evidence line too)
  --fail forever   train until SLURM stops the job (time limit, scancel)
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--fail", choices=["none", "raise", "fetch", "forever"], default="none")
parser.add_argument("--fail-rank", type=int, default=1)
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--hf-token", default=os.environ.get("HF_TOKEN", ""))
args = parser.parse_args()

rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29500")
dist.init_process_group("gloo", rank=rank, world_size=world)
if rank == 0:
    print(f"config: {vars(args)}", flush=True)

torch.manual_seed(rank)
model = DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
while args.fail == "forever" or step < args.steps:
    if rank == args.fail_rank and step == 2:
        if args.fail == "raise":
            raise ValueError(f"bad batch at step {step}: label out of range")
        if args.fail == "fetch":
            url = f"https://data.invalid/shard-{rank}.tar?access_token={args.hf_token}"
            raise ValueError(f"shard {url} failed its checksum")
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(1.0 if args.fail == "forever" else 0.1)
    step += 1
dist.destroy_process_group()
