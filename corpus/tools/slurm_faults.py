#!/usr/bin/env python3
"""slurm_faults.py -- real runs for the labels with the fewest real cases: SLURM time limits,
cancellations and node failures, file:// init problems, peer failures whose culprit's log is
not kept, and failures nothing explains.

Reuses inject.py's isolation (imported, unchanged): jobs run as user ``user`` in
/home/user/jobs/exp<NNNNN>/ (a neutral name: crc32 of the scenario name), torchrun jobs in
UTS+mount namespaces named node01 (and node02 for the second agent of a 2-node job) with
/opt/venv as the Python, each non-SLURM run in its own memory cgroup, SLURM jobs under the
node01 slurmd of slurm_setup.sh, scrub() as the last guard.  The job script is ddp_job.py
(job="ddp") or fault_job.py (job="fault": ddp_job.py plus the faults exit3 / hang_all),
copied into the job directory as train.py.

Kinds of run:
  sbatch     a batch script (``body``: {TRAIN} = python train.py ARGS --slurm-env,
             {TORCHRUN} = torchrun --master-port P --nproc-per-node N [tr_extra] train.py ARGS)
             submitted with sbatch as ``user``; every *.out / *.err the job wrote is kept
  torchrun   one torchrun in a node01 namespace (console torchrun.log, or console.log plus
             logs/ with --log-dir)
  torchrun2  two torchrun agents posing as node01 and node02 (static rendezvous), each in its
             own directory nodeXX/ (its "local disk"); ``keep`` says which files are kept

Actions done to the running job (``action``, once ``trigger`` is met: ("steps", K) = the logs
show K "step " lines, ("time", S) = S seconds after the start; then ``delay`` seconds):
  scancel | scancel_term (scancel --signal=TERM) | scancel_step (scancel JOBID.0)
  nodedown          scontrol update nodename=node01 state=down, wait for the job to end,
                    then state=resume (the node is idle again before the next scenario)
  nodedown_requeue  the same for a --requeue job: the logs are taken while the requeued job
                    waits (PENDING), then the job is scancelled and the node resumed
  kill9             SIGKILL to every process of the run (the user's kill -9)
  sigint            SIGINT to the job user's processes of the run (Ctrl-C in the terminal)

Node-failure scenarios run one at a time after all others, with nothing else on the node.

Usage (as root; SLURM up: corpus/tools/slurm_setup.sh):
    slurm_faults.py --list
    slurm_faults.py NAME [NAME ...] [--out DIR] [-j 3]
    slurm_faults.py --all
Cases go to incoming/fc-run-2026-11-25-2/<label>--run-layout-<name>/ unless --out is given.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import fnmatch
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inject  # noqa: E402
from inject import JOB_USER, ROOT, TOOLS, Runner, Scenario, say, scrub, sh_quote, toml_str  # noqa: E402

BATCH = "fc-run-2026-11-25-2"
DEFAULT_OUT = ROOT / "incoming" / BATCH
NODE = "node01"
LONG = ["--steps", "100000", "--step-sleep", "0.2", "--log-every", "50"]
MID = ["--steps", "100000", "--step-sleep", "0.2", "--log-every", "10"]
NODE_LOCK = threading.Lock()


@dataclass
class Fault:
    name: str
    label: str
    kind: str                          # sbatch | torchrun | torchrun2
    fault: str = "none"
    fault_rank: int | None = None
    fault_node: str | None = "node01"
    fault_step: int = 5
    job: str = "ddp"                   # ddp | fault
    nproc: int = 2                     # sbatch: --ntasks (1 when body uses {TORCHRUN}); torchrun: per node
    args: list = field(default_factory=list)
    sbatch: list = field(default_factory=list)
    body: str = "srun --label {TRAIN}"
    tr_extra: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    action: str = ""
    trigger: tuple = ("steps", 2)
    delay: float = 2.0
    keep: list | None = None           # fnmatch patterns (relative paths) of files kept; None: all
    special: str = ""                  # stale_initfile | shared_initfile | readonly_initdir
    log_supports: bool = True
    notes: str = ""
    timeout: int = 240
    category: str = ""

    @property
    def case_id(self):
        return f"{self.label}--run-layout-{self.name}"

    @property
    def exclusive(self):
        return self.action.startswith("nodedown")


FAULTS: list[Fault] = []


def add(*xs):
    FAULTS.extend(xs)


F = Fault
TR = "{TORCHRUN}"

# ---- slurm_time_limit -----------------------------------------------------------------------
add(F("tl-sbatch-torchrun-nosrun-4rank", "slurm_time_limit", "sbatch", nproc=4, args=LONG,
      sbatch=["--time=1", "--cpus-per-task=4"], body=TR,
      notes="torchrun started directly in the batch script (no srun), sbatch --time=1: SLURM signals the "
            "batch step at the time limit and torchrun shuts its 4 workers down"),
    F("tl-pertask-srun-4task", "slurm_time_limit", "sbatch", nproc=4, args=LONG, sbatch=["--time=1"],
      body="srun --output=slurm-%j-%t.out {TRAIN}",
      notes="sbatch --time=1; srun --output=slurm-%j-%t.out -n 4: one file per task plus the batch "
            "script's slurm-<jobid>.out; killed at the time limit"),
    F("tl-split-err-srun-torchrun-2rank", "slurm_time_limit", "sbatch", nproc=2, args=LONG,
      sbatch=["--time=00:00:30", "--cpus-per-task=2", "--output=train-%j.out", "--error=train-%j.err"],
      body="srun " + TR, tr_extra=["--tee", "3"],
      notes="sbatch --time=00:00:30 (SLURM rounds it up to 1 minute), stdout and stderr in separate files "
            "(--output=train-%j.out --error=train-%j.err), torchrun --tee 3 under srun; what torchrun copies "
            "to its stdout is block-buffered when that is a file, so the training lines may never reach "
            "train-<jobid>.out before the step is killed"),
    F("tl-usr1-trap-srun-2task", "slurm_time_limit", "sbatch", nproc=2, args=LONG,
      sbatch=["--time=2", "--signal=B:USR1@60"],
      body=("trap 'echo \"$(date +%FT%T) batch script got SIGUSR1: time limit is near, training "
            "should checkpoint now\"' USR1\nsrun --label {TRAIN} &\nwait\necho \"wait returned $?\"\nwait\n"),
      timeout=300,
      notes="sbatch --time=2 --signal=B:USR1@60: the batch script traps USR1 (sent about 60 s before the "
            "limit), prints a line and keeps waiting for srun (started in the background); SLURM kills the "
            "job at the time limit"),
    F("tl-pernode-two-steps-srun-4task", "slurm_time_limit", "sbatch", nproc=4, args=LONG,
      sbatch=["--time=1"],
      body=("srun --ntasks=1 python -c 'import torch; print(\"preprocessing done, torch\", torch.__version__)'\n"
            "srun --output=%N-%j.out {TRAIN}"),
      notes="two steps: a short preprocessing step (srun -n 1) that ends, then the training step with "
            "srun --output=%N-%j.out (one file per node); sbatch --time=1 cancels the training step"))

# ---- slurm_cancelled ------------------------------------------------------------------------
add(F("cancel-sbatch-torchrun-nosrun-2rank", "slurm_cancelled", "sbatch", nproc=2, args=MID,
      sbatch=["--cpus-per-task=2"], body=TR, action="scancel",
      notes="torchrun started directly in the batch script (no srun); the user runs `scancel JOBID` "
            "while it trains"),
    F("cancel-term-pertask-srun-4task", "slurm_cancelled", "sbatch", nproc=4, args=MID,
      body="srun --output=slurm-%j-%t.out {TRAIN}\necho \"srun exited with status $?\"",
      action="scancel_term",
      notes="the user runs `scancel --signal=TERM JOBID` (signals the job's steps, not the batch shell); "
            "per-task output files (srun --output=slurm-%j-%t.out)"),
    F("cancel-step-srun-2task", "slurm_cancelled", "sbatch", nproc=2, args=MID,
      body="srun --label {TRAIN}\necho \"training step exited with status $?\"",
      action="scancel_step",
      notes="the user cancels only the training step (`scancel JOBID.0`); the batch script then ends"),
    F("cancel-pernode-srun-torchrun-4rank", "slurm_cancelled", "sbatch", nproc=4, args=MID,
      sbatch=["--cpus-per-task=4"], body="srun --output=%N-%j.out " + TR, tr_extra=["--tee", "3"],
      action="scancel", trigger=("time", 40), delay=0,
      notes="torchrun --tee 3 under srun --output=%N-%j.out (one file per node); the user runs "
            "`scancel JOBID` 40 s after the job started (torchrun's --tee copy of the workers' output "
      "is block-buffered when written to a file, so the per-node file may show little before the cancel)"))

# ---- slurm_node_failure ------------------------------------------------------------------------
add(F("nodefail-norequeue-srun-4task", "slurm_node_failure", "sbatch", nproc=4, args=MID,
      sbatch=["--no-requeue"], action="nodedown",
      notes="while the job trains the node is set DOWN (`scontrol update nodename=node01 state=down "
            "reason=...`), as slurmctld does when a node stops responding; --no-requeue; slurmd still answered, so slurmctld (ReturnToService=2) put the node back in service (idle) at once"),
    F("nodefail-requeue-append-srun-2task", "slurm_node_failure", "sbatch", nproc=2, args=MID,
      sbatch=["--requeue", "--open-mode=append"], action="nodedown_requeue",
      notes="--requeue --open-mode=append job; the node is set DOWN while it trains, SLURM requeues the "
            "job; the log is taken while the requeued job waits (PENDING), then the job is scancelled "
            "(the cancel of the pending job adds nothing to the log)"),
    F("nodefail-srun-torchrun-2rank", "slurm_node_failure", "sbatch", nproc=2, args=MID,
      sbatch=["--no-requeue", "--cpus-per-task=2"], body="srun --output=torchrun-%j.out " + TR,
      action="nodedown",
      notes="torchrun under srun --output=torchrun-%j.out; the node is set DOWN while it trains; "
            "--no-requeue; slurmd still answered, so slurmctld (ReturnToService=2) put the node back in service (idle) at once"))

# ---- file_init_error / permission_denied ----------------------------------------------------------
add(F("fileinit-stale-torchrun-2rank", "file_init_error", "torchrun", nproc=2, special="stale_initfile",
      args=["--init-method", "file://{JOBDIR}/ddp_init", "--steps", "60", "--step-sleep", "0.2",
            "--log-every", "10"], timeout=150,
      notes="init_method=file://<jobdir>/ddp_init; an earlier torchrun of the same job was killed with "
            "kill -9 during training and left the init file behind (its console is earlier-run.log); "
            "the same command is started again"),
    F("fileinit-stale-after-segfault-torchrun-tee-4rank", "file_init_error", "torchrun", nproc=4,
      special="stale_initfile_segv", tr_extra=["--tee", "3"],
      args=["--init-method", "file://{JOBDIR}/ddp_init", "--steps", "60", "--step-sleep", "0.2",
            "--log-every", "10"], timeout=150,
      notes="init_method=file://<jobdir>/ddp_init; an earlier run crashed (SIGSEGV in one rank, torchrun "
            "stopped the others) and left the init file behind; only the console of the new run (same "
            "command) is kept"),
    F("fileinit-missing-dir-torchrun-4rank", "file_init_error", "torchrun", nproc=4,
      args=["--init-method", "file:///shared/nfs/run42/ddp_init"], action="sigint", trigger=("time", 45),
      delay=0, timeout=120,
      notes="init_method=file:///shared/nfs/run42/ddp_init where /shared is not mounted on this node: "
            "init_process_group waits without a message; after 45 s the user presses Ctrl-C (SIGINT)"),
    F("fileinit-shared-two-jobs-srun-2task", "file_init_error", "sbatch", nproc=2, special="shared_initfile",
      args=["--init-method", "file:///home/user/jobs/shared_init", "--steps", "300", "--step-sleep", "0.1",
            "--log-every", "20"], timeout=200,
      notes="two sbatch jobs of the same user (2 tasks each) use the same init file "
            "file:///home/user/jobs/shared_init; the second is submitted while the first trains; both "
            "jobs' outputs are kept"),
    F("fileinit-readonly-dir-srun-2task", "permission_denied", "sbatch", nproc=2, special="readonly_initdir",
      args=["--init-method", "file://{JOBDIR}/rdzv/ddp_init"], timeout=120,
      notes="init_method=file://<jobdir>/rdzv/ddp_init where rdzv/ is owned by root (mode 755): FileStore "
            "cannot create the init file (taxonomy: a permission problem on an init file is permission_denied)"))

# ---- peer_failure: the culprit's node's log is not kept ----------------------------------------
PEER_NOTE = ("2-node job, one torchrun agent per node (static rendezvous), each writing to its own "
             "node-local directory; only node01's output is kept (the user was given node01's log, as when "
             "each node's console goes to that node's local disk); ")
add(F("peer-node02-valueerror-logdir-4rank", "peer_failure", "torchrun2", fault="value_error", nproc=2,
      fault_rank=3, fault_node="node02", tr_extra=["--log-dir", "logs", "--redirects", "3", "--tee", "3"],
      keep=["node01.log", "logs/*"],
      notes=PEER_NOTE + "left out: node02.log and node02's logs/ (rank 3's ValueError in the data code is "
                        "there); node01's ranks 0 and 1 fail in all_reduce on the closed connection"),
    F("peer-node02-sigkill-2rank", "peer_failure", "torchrun2", fault="sigkill", nproc=1, fault_rank=1,
      fault_node="node02", keep=["node01.log"],
      notes=PEER_NOTE + "left out: node02.log (rank 1 on node02 was SIGKILLed, exitcode -9 is in node02's "
                        "agent output only); node01's rank 0 fails on the lost connection"),
    F("peer-node02-segfault-tee-4rank", "peer_failure", "torchrun2", fault="segfault", nproc=2, fault_rank=2,
      fault_node="node02", tr_extra=["--tee", "3"], keep=["node01.log"],
      notes=PEER_NOTE + "left out: node02.log (rank 2 on node02 died of SIGSEGV); node01's ranks 0 and 1 "
                        "fail in all_reduce"))

# ---- unknown -------------------------------------------------------------------------------------
add(F("unknown-exit3-pertask-srun-4task", "unknown", "sbatch", job="fault", fault="exit3", nproc=4,
      fault_rank=2, fault_step=12, args=["--steps", "40", "--step-sleep", "0.1"],
      body="srun --output=slurm-%j-%t.out {TRAIN}",
      notes="task 2 calls os._exit(3) at step 12 without printing anything; srun --output=slurm-%j-%t.out"),
    F("unknown-exit3-logdir-2rank", "unknown", "torchrun", job="fault", fault="exit3", nproc=2, fault_rank=1,
      fault_step=8, args=["--steps", "40", "--step-sleep", "0.1"],
      tr_extra=["--log-dir", "logs", "--redirects", "3", "--tee", "3"],
      notes="torchrun --log-dir logs --redirects 3 --tee 3; rank 1 calls os._exit(3) at step 8 without "
            "printing anything"),
    F("unknown-hang-kill9-torchrun-4rank", "unknown", "torchrun", job="fault", fault="hang_all", nproc=4,
      fault_step=12, args=["--steps", "100", "--step-sleep", "0.1"], action="kill9", trigger=("steps", 3),
      delay=30, timeout=120,
      notes="every rank stops at step 12 before any collective (nothing times out, nothing is printed); "
            "30 s later the user kills the whole job with kill -9 (SIGKILL to every process)"),
    F("unknown-exit3-rank0-2node", "unknown", "torchrun2", job="fault", fault="exit3", nproc=2, fault_rank=0,
      fault_step=10, args=["--steps", "40", "--step-sleep", "0.1"], keep=["node01.log", "node02.log"],
      notes="2-node torchrun (two agents, static rendezvous); rank 0 on node01 calls os._exit(3) at step 10 "
            "without printing anything; both nodes' consoles kept"))


# --------------------------------------------------------------------------------------------


class FaultRunner(Runner):
    def __init__(self, fo: Fault):
        self.fo = fo
        launcher = {"sbatch": "srun", "torchrun": "torchrun", "torchrun2": "torchrun2"}[fo.kind]
        sc = Scenario(f"sf-{fo.name}", fo.label, launcher, fault=fo.fault, nproc=fo.nproc,
                      fault_rank=fo.fault_rank, fault_node=fo.fault_node, fault_step=fo.fault_step,
                      env=dict(fo.env), timeout=fo.timeout)
        super().__init__(sc)
        # a neutral job directory: its path shows in tracebacks and init_method URLs, and must
        # not give the scenario's name (label, fault, culprit) away
        self.jobdir = inject.JOB_BASE / f"exp{zlib.crc32(fo.name.encode()) % 100000:05d}"
        self.snap: dict | None = None

    def prepare_jobdir(self):
        super().prepare_jobdir()
        if self.fo.job == "fault":
            shutil.copy(TOOLS / "ddp_job.py", self.jobdir / "ddp_job.py")
            shutil.copy(TOOLS / "fault_job.py", self.jobdir / "train.py")
        if self.fo.kind == "torchrun2":
            for h in ("node01", "node02"):
                d = self.jobdir / h
                d.mkdir()
                shutil.copy(self.jobdir / "train.py", d / "train.py")
                if self.fo.job == "fault":
                    shutil.copy(TOOLS / "ddp_job.py", d / "ddp_job.py")
            for p in ("train.py", "ddp_job.py"):
                (self.jobdir / p).unlink(missing_ok=True)
        subprocess.run(["chown", "-R", f"{JOB_USER}:{JOB_USER}", str(self.jobdir)], check=True)

    def train_args(self, slurm: bool) -> list[str]:
        fo = self.fo
        a = ["--fault", fo.fault]
        if fo.fault_rank is not None:
            a += ["--fault-rank", str(fo.fault_rank)]
        a += ["--fault-step", str(fo.fault_step)]
        a += [x.replace("{JOBDIR}", str(self.jobdir)) for x in fo.args]
        if slurm:
            a += ["--slurm-env"]
        return a

    def tr_cmd(self, nodes_args=None) -> str:
        fo = self.fo
        cmd = ["torchrun"] + (nodes_args or ["--master-port", str(self.port)]) + \
              ["--nproc-per-node", str(fo.nproc)] + fo.tr_extra + ["train.py"] + self.train_args(False)
        return " ".join(sh_quote(x) for x in cmd)

    # -- logs ---------------------------------------------------------------------------
    def log_files(self) -> list[Path]:
        out = []
        for p in sorted(self.jobdir.rglob("*")):
            if p.is_file() and ".logsleuth." not in p.name and p.suffix in (".out", ".err", ".log"):
                out.append(p)
        return out

    def steps_seen(self) -> int:
        n = 0
        for p in self.log_files():
            try:
                n += len(re.findall(r"\bstep \d+", p.read_text(errors="replace")))
            except OSError:
                pass
        return n

    def triggered(self, t0: float) -> bool:
        kind, v = self.fo.trigger
        if kind == "time":
            return time.time() - t0 >= v
        return self.steps_seen() >= v

    # -- non-SLURM ------------------------------------------------------------------------
    def user_pids(self) -> list[int]:
        uid = pwd.getpwnam(JOB_USER).pw_uid
        pids = []
        try:
            for s in (self.cg / "cgroup.procs").read_text().split():
                try:
                    st = Path(f"/proc/{s}/status").read_text()
                except OSError:
                    continue
                m = re.search(r"^Uid:\s+(\d+)", st, re.M)
                if m and int(m.group(1)) == uid:
                    pids.append(int(s))
        except (OSError, TypeError):
            pass
        return pids

    def drive_local(self, procs):
        fo = self.fo
        t0 = time.time()
        deadline = t0 + fo.timeout
        acted = not fo.action
        while time.time() < deadline and any(p.poll() is None for p in procs):
            if not acted and self.triggered(t0):
                time.sleep(fo.delay)
                if fo.action == "kill9":
                    self.kill_cgroup(self.cg)
                elif fo.action == "sigint":
                    for pid in self.user_pids():
                        try:
                            os.kill(pid, signal.SIGINT)
                        except ProcessLookupError:
                            pass
                acted = True
            time.sleep(0.5)
        self.wait_procs(procs, max(5, deadline - time.time()))

    def run_local(self, earlier: str | None = None) -> dict:
        fo = self.fo
        self.make_cgroup(None)
        if fo.kind == "torchrun":
            name = earlier or ("console.log" if "--log-dir" in fo.tr_extra else "torchrun.log")
            log = self.jobdir / name
            p = self.run_proc(self.ns_wrap("node01", self.tr_cmd()), log, fo.timeout)
            self.drive_local([p])
            logs = {name: log}
            if "--log-dir" in fo.tr_extra and not earlier:
                for q in sorted((self.jobdir / "logs").rglob("*")):
                    if q.is_file():
                        logs[str(q.relative_to(self.jobdir))] = q
            return logs
        procs, logs = [], {}
        for i, host in enumerate(("node01", "node02")):
            cmd = "cd " + host + " && exec " + self.tr_cmd(
                ["--nnodes", "2", "--node-rank", str(i), "--master-addr", "node01", "--master-port", str(self.port)])
            log = self.jobdir / f"{host}.log"
            procs.append(self.run_proc(self.ns_wrap(host, cmd), log, fo.timeout))
            logs[f"{host}.log"] = log
            time.sleep(0.5)
        self.drive_local(procs)
        for host in ("node01", "node02"):
            d = self.jobdir / host / "logs"
            if d.exists():
                for q in sorted(d.rglob("*")):
                    if q.is_file():
                        logs[f"{host}:{q.relative_to(self.jobdir / host)}"] = q
        return logs

    def pre_stale(self, segv: bool):
        """An earlier run of the same command that dies and leaves the init file behind."""
        fo = self.fo
        saved = (fo.action, fo.trigger, fo.delay, fo.fault, fo.fault_rank, fo.fault_step)
        if segv:
            fo.fault, fo.fault_rank, fo.fault_step, fo.action = "segfault", 1, 15, ""
        else:
            fo.action, fo.trigger, fo.delay = "kill9", ("steps", 3), 1.0
        try:
            self.run_local(earlier="earlier-run.log")
        finally:
            fo.action, fo.trigger, fo.delay, fo.fault, fo.fault_rank, fo.fault_step = saved
            if self.cg:
                self.kill_cgroup(self.cg)
                try:
                    self.cg.rmdir()
                except OSError:
                    pass
                self.cg = None
        left = (self.jobdir / "ddp_init").exists()
        self.extra_notes.append(f"init file left behind by the earlier run: {'yes' if left else 'NO'}")
        if segv:
            (self.jobdir / "earlier-run.log").rename(self.jobdir / "earlier-run.txt")

    # -- SLURM ------------------------------------------------------------------------------
    def sbatch_text(self, extra_args=None) -> str:
        fo = self.fo
        torch_body = TR in fo.body
        lines = ["#!/bin/bash", "#SBATCH --job-name=train", f"#SBATCH --ntasks={1 if torch_body else fo.nproc}"]
        if not any(x.startswith("--time") for x in fo.sbatch):
            lines.append("#SBATCH --time=10")
        lines += [f"#SBATCH {x}" for x in fo.sbatch]
        lines += ["", "export OMP_NUM_THREADS=1", f"export MASTER_PORT={self.port}"]
        for k, v in fo.env.items():
            lines.append(f"export {k}={sh_quote(v)}")
        train = "python train.py " + " ".join(sh_quote(x) for x in self.train_args(True) + (extra_args or []))
        body = fo.body.replace("{TRAIN}", train).replace(TR, self.tr_cmd())
        lines += ["", "echo \"job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: $SLURM_NTASKS task(s)\"", body, ""]
        return "\n".join(lines)

    def submit(self, fname: str, text: str) -> str:
        script = self.jobdir / fname
        script.write_text(text)
        shutil.chown(script, JOB_USER, JOB_USER)
        r = subprocess.run(["runuser", "-u", JOB_USER, "--", "env", "-i"]
                           + [f"{k}={v}" for k, v in self.job_env().items()]
                           + ["sbatch", "--parsable", script.name], cwd=self.jobdir,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    @staticmethod
    def state(jobid: str) -> str:
        return subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True,
                              text=True).stdout.strip()

    def as_user(self, *cmd):
        subprocess.run(["runuser", "-u", JOB_USER, "--"] + list(cmd))

    def node_resume(self):
        st = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if st != "idle":
            subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"])
        for _ in range(60):
            st = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True).stdout.strip()
            if st == "idle":
                return
            time.sleep(1)
        self.extra_notes.append(f"(node state after resume: {st})")

    def run_sbatch(self) -> dict:
        fo = self.fo
        shared = Path("/home/user/jobs/shared_init")
        if fo.special == "shared_initfile":
            shared.unlink(missing_ok=True)
            self.cleanups.append(lambda: shared.unlink(missing_ok=True))
        if fo.special == "readonly_initdir":
            d = self.jobdir / "rdzv"
            d.mkdir()
            os.chown(d, 0, 0)
            d.chmod(0o755)
        jobs = [self.submit("job.sbatch", self.sbatch_text())]
        self.jobid = jobs[0]
        t0 = time.time()
        deadline = t0 + fo.timeout
        acted = not fo.action
        second = fo.special != "shared_initfile"
        down = False
        while time.time() < deadline:
            states = [self.state(j) for j in jobs]
            if not any(states) and second:
                break
            if not second and self.steps_seen() >= 2:
                time.sleep(3)
                jobs.append(self.submit("job2.sbatch", self.sbatch_text()))
                second = True
            if not acted and states[0] == "RUNNING" and self.triggered(t0):
                time.sleep(fo.delay)
                j = jobs[0]
                if fo.action == "scancel":
                    self.as_user("scancel", j)
                elif fo.action == "scancel_term":
                    self.as_user("scancel", "--signal=TERM", j)
                elif fo.action == "scancel_step":
                    self.as_user("scancel", f"{j}.0")
                elif fo.action.startswith("nodedown"):
                    subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=down", "reason=node check"],
                                   check=True)
                    down = True
                acted = True
            if down and fo.action == "nodedown_requeue" and states[0] == "PENDING":
                time.sleep(5)
                self.snap = {p.name: p.read_bytes() for p in self.log_files()}
                info = subprocess.run(["scontrol", "show", "job", jobs[0]], capture_output=True, text=True).stdout
                m = re.search(r"JobState=(\S+) Reason=(\S+).*?Restarts=(\d+)", info, re.S)
                if m:
                    self.extra_notes.append(f"logs taken while SLURM showed JobState={m.group(1)} "
                                            f"Reason={m.group(2)} Restarts={m.group(3)}")
                subprocess.run(["scancel", jobs[0]])
                self.node_resume()
                down = False
            time.sleep(1)
        else:
            for j in jobs:
                subprocess.run(["scancel", j])
            self.extra_notes.append(f"slurm_faults.py scancelled the job(s) after the {fo.timeout}s hard timeout")
            for _ in range(60):
                if not any(self.state(j) for j in jobs):
                    break
                time.sleep(1)
        if down:
            self.node_resume()
        for j in jobs:
            info = subprocess.run(["scontrol", "show", "job", j], capture_output=True, text=True).stdout
            m = re.search(r"JobState=(\S+) Reason=(\S+).*?ExitCode=(\S+)", info, re.S)
            if m:
                self.extra_notes.append(f"SLURM job {jobs.index(j) + 1} of {len(jobs)}: "
                                        f"JobState={m.group(1)} Reason={m.group(2)} ExitCode={m.group(3)}")
        time.sleep(0.5)
        return {p.name: p for p in self.log_files()}

    # -- run ---------------------------------------------------------------------------------
    def run(self) -> dict:
        fo = self.fo
        inject.ACTIVE.add(self)
        self.prepare_jobdir()
        try:
            if fo.kind == "sbatch":
                if fo.exclusive:
                    with NODE_LOCK:
                        for _ in range(600):
                            if not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
                                break
                            time.sleep(1)
                        return self.run_sbatch()
                return self.run_sbatch()
            if fo.special.startswith("stale_initfile"):
                self.pre_stale(segv=fo.special.endswith("segv"))
            logs = self.run_local()
            if (self.jobdir / "earlier-run.log").exists():
                logs["earlier-run.log"] = self.jobdir / "earlier-run.log"
            return logs
        finally:
            self.teardown()


# --------------------------------------------------------------------------------------------


def write_case(fo: Fault, logs: dict, snap: dict | None, notes_extra: list[str], elapsed: float, vers: str,
               out_root: Path):
    out = out_root / fo.case_id
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    subs = 0
    kept = []
    for name, path in logs.items():
        rel = name
        if fo.kind == "torchrun2" and ":" in name:
            host, rel = name.split(":", 1)
            if host != "node01":
                rel = f"{host}-{rel}"
        if fo.keep is not None and not any(fnmatch.fnmatch(rel, k) for k in fo.keep):
            continue
        raw = snap[name] if snap is not None and name in snap else Path(path).read_bytes()
        if snap is not None and name not in snap:
            continue
        data, k = scrub(raw.decode("utf-8", errors="surrogateescape"))
        subs += k
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data.encode("utf-8", errors="surrogateescape"))
        kept.append(rel)
    notes = fo.notes
    if notes_extra:
        notes += "; " + "; ".join(notes_extra)
    if subs:
        notes += f"; scrub() replaced {subs} occurrence(s) of the build host name / venv path"
    notes += f"; run took {elapsed:.0f}s"
    lines = [f"label = {toml_str(fo.label)}", f"category = {toml_str(fo.category or fo.label)}",
             f"group = {toml_str('layout:' + fo.name)}", f"log_supports = {'true' if fo.log_supports else 'false'}", ""]
    if fo.fault_rank is not None or fo.fault_node:
        lines.append("[first_failure]")
        if fo.fault_rank is not None:
            lines.append(f"rank = {fo.fault_rank}")
        if fo.fault_node:
            lines.append(f"node = {toml_str(fo.fault_node)}")
        lines.append("")
    lines += ["[provenance]", 'kind = "run-here"', f"batch = {toml_str(BATCH)}",
              f"script = {toml_str('corpus/tools/slurm_faults.py ' + fo.name)}", f"versions = {toml_str(vers)}",
              f"notes = {toml_str(notes)}", ""]
    (out / "case.toml").write_text("\n".join(lines))
    return kept


def run_one(fo: Fault, out_root: Path, vers: dict):
    t0 = time.time()
    r = FaultRunner(fo)
    try:
        logs = r.run()
    except Exception as e:  # noqa: BLE001
        return fo.name, f"ERROR {type(e).__name__}: {e}", time.time() - t0
    elapsed = time.time() - t0
    key = fo.kind == "sbatch"
    if key not in vers:
        vers[key] = inject.versions(key)
    kept = write_case(fo, logs, r.snap, r.extra_notes, elapsed, vers[key], out_root)
    shutil.rmtree(r.jobdir, ignore_errors=True)
    return fo.name, f"ok ({len(kept)} files)", elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("-j", "--jobs", type=int, default=3)
    a = ap.parse_args(argv)
    if a.list:
        for fo in FAULTS:
            print(f"{fo.name:48s} {fo.label:20s} {fo.kind:9s} n={fo.nproc} {fo.action}")
        print(f"{len(FAULTS)} scenarios")
        return 0
    chosen = list(FAULTS) if a.all else [fo for fo in FAULTS if any(fnmatch.fnmatch(fo.name, n) for n in a.names)]
    if not chosen:
        ap.error("no scenario matches; see --list")
    if os.geteuid() != 0:
        ap.error("run as root (namespaces, mounts, cgroups, runuser, scontrol)")
    inject.ensure_runtime()
    if any(fo.kind == "sbatch" for fo in chosen):
        if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
            ap.error("SLURM is not up: run corpus/tools/slurm_setup.sh first")

    def on_signal(signum, frame):
        say(f"slurm_faults.py: signal {signum}: cleaning up")
        for r in list(inject.ACTIVE):
            r.abort()
        subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"], stderr=subprocess.DEVNULL)
        os._exit(130)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    vers: dict = {}
    results = []
    normal = [fo for fo in chosen if not fo.exclusive]
    excl = [fo for fo in chosen if fo.exclusive]
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for f in cf.as_completed([ex.submit(run_one, fo, a.out, vers) for fo in normal]):
            name, status, el = f.result()
            results.append((name, status))
            say(f"[{len(results)}/{len(chosen)}] {name}: {status} ({el:.0f}s)")
    for fo in excl:
        name, status, el = run_one(fo, a.out, vers)
        results.append((name, status))
        say(f"[{len(results)}/{len(chosen)}] {name}: {status} ({el:.0f}s)")
    bad = [r for r in results if not r[1].startswith("ok")]
    say(f"done: {len(results) - len(bad)} ok, {len(bad)} failed, {time.time() - t0:.0f}s total")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
