"""Run the torchrun fault scenarios of this folder (see README.md) on a CPU machine.

Usage: python make_cascades.py DDP_JOB OUT_DIR NAME [NAME ...]
DDP_JOB is corpus/tools/ddp_job.py; each case lands in OUT_DIR/NAME/.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
#: name -> (fault, nproc per node, faulty rank, torchrun prefix option, nodes)
SCENARIOS = {
    "valueerror-tee-4": ("value_error", 4, 2, "tee", 1),
    "segfault-4": ("segfault", 4, 1, "", 1),
    "sigkill-tee-4": ("sigkill", 4, 3, "tee", 1),
    "sigkill-rank0-4": ("sigkill", 4, 0, "", 1),
    "hang-4": ("hang", 4, 1, "", 1),
    "exit-early-2": ("exit_early", 2, 1, "", 1),
    "silent-exit1-4": ("silent_exit1", 4, 2, "", 1),
    "abort-2": ("abort", 2, 1, "", 1),
    "hang-2node": ("hang", 2, 3, "", 2),
    "valueerror-2node-tee": ("value_error", 2, 2, "tee", 2),
    "segfault-2node": ("segfault", 2, 1, "", 2),
}
PREFIX = {"": "", "tee": "--tee 3"}


def agent(node: str, cmd: str, out: Path) -> subprocess.Popen[bytes]:
    """One torchrun agent in its own UTS namespace whose hostname is ``node``."""
    with out.open("w") as sink:
        return subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", f"hostname {node}; exec {cmd}"], stdout=sink, stderr=subprocess.STDOUT, cwd=out.parent
        )


def run(ddp_job: Path, root: Path, name: str) -> None:
    fault, nproc, rank, prefix, nnodes = SCENARIOS[name]
    job = root / name
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    shutil.copy(ddp_job, job / "train.py")
    args = f"train.py --fault {fault} --fault-rank {rank} --fault-step 3 --steps 8 --timeout 10"
    if nnodes == 1:
        procs = [agent("node01", f"{TORCHRUN} --standalone --nproc-per-node {nproc} {PREFIX[prefix]} {args}", job / "torchrun.log")]
    else:
        port = random.randint(30000, 45000)
        procs = [
            agent(
                f"node{i + 1:02d}",
                f"{TORCHRUN} --nnodes {nnodes} --node-rank {i} --master-addr 127.0.0.1 --master-port {port} "
                f"--nproc-per-node {nproc} {PREFIX[prefix]} {args}",
                job / f"node{i + 1:02d}.log",
            )
            for i in range(nnodes)
        ]
    started = time.time()
    for p in procs:
        p.wait(timeout=180)
    print(f"{name}: {time.time() - started:.0f}s, exit codes {[p.returncode for p in procs]}")


if __name__ == "__main__":
    for case in sys.argv[3:]:
        run(Path(sys.argv[1]), Path(sys.argv[2]), case)
