#!/usr/bin/env python3
"""Two extra faults on top of ddp_job.py, for corpus/tools/slurm_faults.py (which copies this
file as ``train.py`` next to ddp_job.py).  Every other --fault is passed to ddp_job unchanged.

  exit3     rank R calls os._exit(3) at step S, printing nothing first
  hang_all  every rank stops (sleeps) at step S, before any collective of that step: nothing
            times out and nothing is printed (until someone kills the job)
"""
from __future__ import annotations

import os
import sys
import time

import ddp_job

_load_batch = ddp_job.load_batch


def load_batch(step, rank, args, records):
    if args.fault == "exit3" and rank == args.fault_rank and step == args.fault_step:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)
    if args.fault == "hang_all" and step == args.fault_step:
        time.sleep(10**6)
    return _load_batch(step, rank, args, records)


ddp_job.load_batch = load_batch

if __name__ == "__main__":
    ddp_job.main()
