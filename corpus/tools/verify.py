#!/usr/bin/env python3
"""verify.py -- check that each run-here case really shows the failure it is labelled with.

inject.py runs real jobs on a shared, sometimes overloaded machine; a run can fail for
another reason than the injected one (e.g. a spurious timeout). This checks each case's
logs for the evidence its scenario must produce (a regex per scenario-name prefix) and
that clean runs finished. Exit status 1 lists the cases to regenerate with inject.py.

    python corpus/tools/verify.py [corpus/<case> ...]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]

# scenario-name prefix -> regex that must occur in the logs of that case
EXPECT = [
    ("valueerror", r"ValueError: could not convert label"),
    ("keyerror", r"KeyError: 'shard_"),
    ("assert", r"AssertionError: sample \d+ has length"),
    ("indexerror", r"IndexError: list index out of range"),
    ("shapebug", r"mat1 and mat2 shapes cannot be multiplied"),
    ("segfault", r"SIGSEGV|Segmentation fault"),
    ("detail-ddp-segfault", r"SIGSEGV|Segmentation fault"),
    ("abort", r"SIGABRT|Aborted"),
    ("sigkill", r"SIGKILL|Killed"),
    ("silent-exit1", r"exitcode\s*: 1 |task \d+: Exited with exit code 1"),
    ("hang-before-init", r"wait timeout after|waiting for clients"),
    ("hang", r"Timed out waiting \d+ms for (recv|send) operation"),
    ("exit-early", r"Connection closed by peer|Connection reset by peer"),
    ("mismatch-shape-detail", r"Detected mismatch between collectives"),
    ("mismatch-dtype-detail", r"Detected mismatch between collectives"),
    ("mismatch-shape", r"collective mismatch in your code"),
    ("mismatch-dtype", r"collective mismatch in your code"),
    ("unused-params", r"Expected to have finished reduction in the prior iteration"),
    ("model-differs", r"appears not to match sizes of the same param"),
    ("oom-srun", r"oom-kill event|Out Of Memory"),
    ("oom-torchrun", r"SIGKILL"),
    ("perm-", r"Permission denied"),
    ("diskfull-ckpt", r"unexpected pos|No space left|iostream error"),
    ("diskfull-log", r"No space left on device"),
    ("shm-", r"shared memory|/dev/shm|Bus error"),
    ("backend-nccl", r"doesn't have NCCL built in"),
    ("backend-mpi", r"doesn't have MPI built in"),
    ("backend-typo", r"Unknown backend type"),
    ("set-device", r"_cuda_setDevice|CUDA"),
    ("cuda-to", r"Torch not compiled with CUDA enabled"),
    ("import", r"ModuleNotFoundError: No module named"),
    ("gloo-ifname", r"Unable to find address for: nonexistent0"),
    ("port-in-use", r"EADDRINUSE|[Aa]ddress already in use"),
    ("master-", r"failed to connect|timed out after \d+ms while trying to connect|Connection refused|unreachable"),
    ("badhost", r"Name or service not known|gai error"),
    ("missing-env", r"environment variable RANK expected, but not set"),
    ("missing-master-port", r"MASTER_PORT expected, but not set"),
    ("rank-ge-world", r"rank < size"),
    ("world-too-big", r"waiting for clients|wait timeout"),
    ("nnodes2", r"RendezvousTimeoutError|waiting for clients|Timed out"),
    ("file-init-unreachable", r"No such file or directory|shared/nfs"),
    ("file-init-stale", r"file://"),
    ("timelimit", r"DUE TO TIME LIMIT"),
    ("cancel", r"CANCELLED AT \S+ \*\*\*"),
    ("example-user-exception-cascade", r"ValueError: could not convert label"),
    ("example-port-in-use", r"EADDRINUSE"),
    ("example-slurm-time-limit", r"DUE TO TIME LIMIT"),
]
DONE = r"training done: \d+ steps"
# clean runs must not show these
BAD_IN_CLEAN = r"ChildFailedError|srun: error|CANCELLED|Segmentation fault"


def case_dirs(args):
    if args:
        return [Path(a) for a in args]
    dirs = [p for p in (ROOT / "corpus").iterdir() if (p / "case.toml").exists() and "--run-" in p.name]
    dirs += [p for p in (ROOT / "examples").iterdir() if (p / "case.toml").exists()]
    return sorted(dirs)


def check(d: Path) -> str | None:
    meta = tomllib.loads((d / "case.toml").read_text())
    script = meta["provenance"]["script"]
    name = script.split()[-1]
    text = "\n".join(p.read_text(errors="replace") for p in sorted(d.iterdir())
                     if p.is_file() and p.name not in ("case.toml", "make.sh"))
    if "hard timeout" in meta["provenance"].get("notes", "") and not name.startswith("file-init-"):
        return "hit inject.py's hard timeout"
    if meta["label"] == "none":
        if not re.search(DONE, text):
            return "clean run did not finish"
        if re.search(BAD_IN_CLEAN, text):
            return "clean run shows a failure line"
        return None
    for prefix, rx in EXPECT:
        if name.startswith(prefix):
            if not re.search(rx, text):
                return f"missing /{rx}/"
            if re.search(DONE, text) and meta["label"] not in ("env_misconfigured",):
                return "the job finished although a fault was injected"
            return None
    return "no expectation for this scenario"


def main(argv):
    bad = 0
    dirs = case_dirs(argv)
    for d in dirs:
        why = check(d)
        if why:
            bad += 1
            print(f"{d.name}: {why}")
    print(f"{len(dirs) - bad}/{len(dirs)} cases verified")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
