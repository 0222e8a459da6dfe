#!/usr/bin/env python3
"""inject.py -- run fault scenarios for real and store each run as a corpus case.

Every scenario launches corpus/tools/ddp_job.py (copied into the job directory as
``train.py``) under a real launcher -- torchrun, two torchrun agents posing as two
nodes, plain ``python``, or a real SLURM (sbatch + srun) -- with one fault injected,
and writes the logs exactly as the job produced them into
``corpus/<label>--run-<scenario>/`` (or ``examples/<name>/``) with a ``case.toml``
(format: corpus/README.md).

Usage (as root; SLURM scenarios need corpus/tools/slurm_setup.sh first):
    inject.py --list                      list the scenarios
    inject.py NAME [NAME ...]             run these scenarios (shell globs allowed)
    inject.py --all [-j 3]                run every scenario (and the examples)
    inject.py --all --skip-slurm          only the non-SLURM ones

How the jobs are isolated, so that nothing of the build machine leaks into the logs:
  * each job runs as the unprivileged user ``user`` in /home/user/jobs/<scenario>/;
  * each torchrun/python job runs in fresh UTS + mount namespaces (``unshare``) whose
    hostname is node01 (or node02 for the second agent of a 2-node job), with
    /etc/hosts bind-mounted from a file naming node01/node02;
  * SLURM jobs run under slurmd, which slurm_setup.sh starts with hostname node01;
  * the Python used by the jobs is /opt/venv (a venv of Debian's /usr/bin/python3.11
    whose site-packages is a read-only bind mount of this tool's venv's site-packages, and
    whose bin/torchrun has an /opt/venv shebang), so tracebacks show /opt/venv/...;
  * each run is put into its own memory cgroup (v1); on the hard timeout every
    process in it is SIGKILLed; host_oom scenarios set the cgroup's limit.
  * as a last guard, ``scrub()`` replaces the build machine's hostname and the real
    venv path if they still appear in a log (counted in the case's notes; a
    documented, scripted substitution -- nothing else in a log is ever changed).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import fnmatch
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent.parent
CORPUS = ROOT / "corpus"
JOB_USER = "user"
JOB_BASE = Path("/home/user/jobs")
RUNTIME = Path("/opt/venv")
HOSTS_FILE = Path("/var/lib/logsleuth/hosts")
CGROUP_MEM = Path("/sys/fs/cgroup/memory/logsleuth")
REAL_HOST = socket.gethostname()
REAL_VENV = Path(os.environ.get("LOGSLEUTH_VENV", sys.prefix))  # the venv that has torch

_port_lock = threading.Lock()
_used_ports: set[int] = set()
_print_lock = threading.Lock()
ACTIVE: set = set()          # Runners in progress (for cleanup on SIGINT/SIGTERM)


def say(*a):
    with _print_lock:
        print(*a, flush=True)


def free_port() -> int:
    """A port not used by another scenario of this run and not bound now."""
    with _port_lock:
        while True:
            p = random.randint(20000, 45000)
            if p in _used_ports:
                continue
            s = socket.socket()
            try:
                s.bind(("", p))
            except OSError:
                continue
            finally:
                s.close()
            _used_ports.add(p)
            return p


# --------------------------------------------------------------------------------------
# scenarios


@dataclass
class Scenario:
    name: str                      # unique; case id = f"{label}--run-{name}"
    label: str                     # taxonomy id
    launcher: str                  # torchrun | torchrun2 | python | srun | srun-torchrun
    fault: str = "none"            # ddp_job.py --fault
    nproc: int = 2                 # ranks (torchrun: per node; srun: tasks)
    fault_rank: int | None = 1     # ground truth: the rank where the fault was injected
    fault_node: str | None = "node01"
    fault_step: int = 5
    args: list = field(default_factory=list)     # extra ddp_job.py args
    env: dict = field(default_factory=dict)      # extra job environment
    prefix: str = ""               # torchrun output: "" | tee | role | template
    tr_args: list = field(default_factory=list)  # extra torchrun args
    sbatch: list = field(default_factory=list)   # extra #SBATCH lines
    srun_opts: list = field(default_factory=list)  # extra srun options
    special: str = ""              # a setup hook name, see Runner.setup_*
    notes: str = ""
    timeout: int = 150
    dest: str = ""                 # "" -> corpus/<case-id>; else a folder relative to ROOT
    group: str = ""

    @property
    def case_id(self):
        return f"{self.label}--run-{self.name}"

    @property
    def out_dir(self) -> Path:
        return ROOT / self.dest if self.dest else CORPUS / self.case_id

    @property
    def slurm(self):
        return self.launcher.startswith("srun")


S = Scenario
SCENARIOS: list[Scenario] = []


def add(*scs):
    SCENARIOS.extend(scs)


def tr_variants(base: str, label: str, fault: str, specs, notes: str, **kw):
    """specs: list of (suffix, launcher, nproc, fault_rank, prefix, extra-kw dict)."""
    for suffix, launcher, nproc, rank, prefix, extra in specs:
        d = dict(kw)
        d.update(extra)
        add(S(f"{base}-{suffix}", label, launcher, fault=fault, nproc=nproc, fault_rank=rank,
              prefix=prefix, notes=notes, group=d.pop("group", f"inject:{fault}"), **d))


def build_scenarios():
    # ---- user_code_error -------------------------------------------------------------
    tr_variants("valueerror", "user_code_error", "value_error", [
        ("torchrun-4rank", "torchrun", 4, 2, "", {}),
        ("torchrun-tee-2rank", "torchrun", 2, 1, "tee", {}),
        ("srun-4task", "srun", 4, 3, "", {}),
        ("torchrun-2node", "torchrun2", 2, 3, "", {"fault_node": "node02"}),
        ("srun-torchrun-4rank", "srun-torchrun", 4, 1, "tee", {}),
    ], "ValueError raised in the data-loading code of one rank; the others fail in the next all_reduce")
    tr_variants("keyerror", "user_code_error", "key_error", [
        ("torchrun-role-4rank", "torchrun", 4, 1, "role", {}),
        ("srun-torchrun-4rank", "srun-torchrun", 4, 2, "", {}),
        ("torchrun-8rank", "torchrun", 8, 5, "", {"timeout": 240}),
        ("torchrun-template-4rank", "torchrun", 4, 3, "template", {}),
    ], "KeyError in user code (a missing shard key) on one rank; peers see the connection closed")
    tr_variants("assert", "user_code_error", "assertion", [
        ("torchrun-template-4rank", "torchrun", 4, 3, "template", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-2node-tee", "torchrun2", 2, 1, "tee", {}),
    ], "a failed assert on a sample length in user code on one rank")
    tr_variants("indexerror", "user_code_error", "index_error", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("srun-4task", "srun", 4, 2, "", {}),
        ("torchrun-role-2rank-rank0", "torchrun", 2, 0, "role", {}),
    ], "IndexError in user code on one rank")
    tr_variants("shapebug", "user_code_error", "shape_bug", [
        ("torchrun-4rank", "torchrun", 4, 1, "", {}),
        ("srun-4task", "srun", 4, 2, "", {}),
        ("torchrun-tee-2rank-rank0", "torchrun", 2, 0, "tee", {}),
    ], "a malformed batch (15 features instead of 16) makes the model's matmul raise a RuntimeError on one rank")

    # ---- crash_signal / unknown ----------------------------------------------------
    add(S("detail-ddp-segfault-torchrun-tee-2rank", "crash_signal", "torchrun", nproc=2, fault_rank=None,
          prefix="tee", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, group="inject:detail_segfault",
          notes="no fault injected: with TORCH_DISTRIBUTED_DEBUG=DETAIL, constructing DDP over gloo on CPU "
                "segfaults on every rank (torch 2.13.0+cpu)"),
        S("detail-ddp-segfault-srun-2task", "crash_signal", "srun", nproc=2, fault_rank=None,
          env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "PYTHONFAULTHANDLER": "1"}, group="inject:detail_segfault",
          notes="no fault injected: TORCH_DISTRIBUTED_DEBUG=DETAIL makes DDP construction segfault on every "
                "rank (torch 2.13.0+cpu); PYTHONFAULTHANDLER=1 prints the Python stacks"))
    tr_variants("segfault", "crash_signal", "segfault", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {}),
        ("srun-4task", "srun", 4, 3, "", {}),
        ("srun-torchrun-2rank", "srun-torchrun", 2, 1, "", {}),
    ], "one rank dereferences a NULL pointer (ctypes.string_at(0)): a real SIGSEGV")
    tr_variants("segfault-faulthandler", "crash_signal", "segfault_fh", [
        ("torchrun-4rank", "torchrun", 4, 1, "", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
    ], "SIGSEGV with faulthandler enabled (prints 'Fatal Python error: Segmentation fault')")
    tr_variants("abort", "crash_signal", "abort", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-role-4rank", "torchrun", 4, 3, "role", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
        ("torchrun-2node", "torchrun2", 2, 2, "", {"fault_node": "node02"}),
    ], "one rank calls os.abort(): SIGABRT")
    tr_variants("sigkill", "crash_signal", "sigkill", [
        ("torchrun-4rank", "torchrun", 4, 1, "", {}),
        ("srun-4task", "srun", 4, 2, "", {}),
        ("torchrun-template-2rank", "torchrun", 2, 1, "template", {}),
    ], "one rank is SIGKILLed (by itself) with no memory pressure: no evidence of an OOM")
    tr_variants("silent-exit1", "unknown", "silent_exit1", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {}),
    ], "one rank calls os._exit(1) without printing anything: nothing explains the failure")

    # ---- collective_timeout / peer_failure / rendezvous ----------------------------------
    tr_variants("hang", "collective_timeout", "hang", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {}),
        ("srun-4task", "srun", 4, 1, "", {"srun_opts": ["--kill-on-bad-exit=1"]}),
        ("torchrun-2node", "torchrun2", 2, 3, "", {"fault_node": "node02"}),
    ], "one rank stops (sleeps) before its backward; the others time out in gloo's all_reduce after "
       "the 30 s process-group timeout; the straggler itself prints nothing")
    tr_variants("exit-early", "peer_failure", "exit_early", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 3, "tee", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
    ], "one rank leaves the training loop and exits 0 (no error); the others fail on the closed connection")
    tr_variants("hang-before-init", "rendezvous_timeout", "hang_init", [
        ("torchrun-4rank", "torchrun", 4, 3, "", {}),
        ("srun-2task", "srun", 2, 1, "", {"srun_opts": ["--kill-on-bad-exit=1"]}),
        ("torchrun-tee-2rank", "torchrun", 2, 1, "tee", {}),
    ], "one rank never reaches init_process_group; the others time out waiting for it in the store")

    # ---- collective_mismatch ------------------------------------------------------------
    detail = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    tr_variants("mismatch-shape-detail", "collective_mismatch", "mismatch_shape", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {"env": detail}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {"env": detail}),
        ("srun-4task", "srun", 4, 3, "", {"env": detail}),
    ], "in a statistics all_reduce before DDP is built, one rank sends 12 elements while the others send 8, TORCH_DISTRIBUTED_DEBUG=DETAIL")
    tr_variants("mismatch-dtype-detail", "collective_mismatch", "mismatch_dtype", [
        ("torchrun-4rank", "torchrun", 4, 1, "", {"env": detail}),
    ], "one rank all_reduces float64, the others float32, TORCH_DISTRIBUTED_DEBUG=DETAIL")
    tr_variants("mismatch-shape", "collective_mismatch", "mismatch_shape", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
    ], "one rank all_reduces a tensor of 12 elements while the others use 8; no debug mode: gloo's "
       "size check fires (on the receiving rank)")
    tr_variants("mismatch-dtype", "collective_mismatch", "mismatch_dtype", [
        ("torchrun-tee-2rank", "torchrun", 2, 1, "tee", {}),
    ], "one rank all_reduces float64, the other float32; no debug mode")

    # ---- ddp_usage_error -----------------------------------------------------------------
    tr_variants("unused-params", "ddp_usage_error", "unused_params", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
    ], "from step 5 on, one rank skips a layer in forward; DDP without find_unused_parameters")
    tr_variants("model-differs", "ddp_usage_error", "model_differs", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-role-4rank", "torchrun", 4, 3, "role", {}),
        ("srun-4task", "srun", 4, 2, "", {}),
    ], "one rank builds the model with a different hidden width before wrapping it in DDP")

    # ---- host_oom -----------------------------------------------------------------------
    add(S("oom-srun-2task", "host_oom", "srun", fault="host_oom", nproc=2, fault_rank=1,
          sbatch=["--mem=1500M"], group="inject:host_oom",
          notes="one rank caches data in RAM until the job's cgroup (--mem=1500M) OOM-kills it"),
        S("oom-srun-4task", "host_oom", "srun", fault="host_oom", nproc=4, fault_rank=2,
          sbatch=["--mem=2500M"], group="inject:host_oom",
          notes="one rank caches data in RAM until the job's cgroup (--mem=2500M) OOM-kills it"),
        S("oom-srun-torchrun-4rank", "host_oom", "srun-torchrun", fault="host_oom", nproc=4, fault_rank=1,
          sbatch=["--mem=3G"], group="inject:host_oom",
          notes="torchrun inside an sbatch job with --mem=3G; one rank allocates until OOM-killed"),
        S("oom-torchrun-cgroup-2rank", "host_oom", "torchrun", fault="host_oom", nproc=2, fault_rank=1,
          special="memlimit:1400M", group="inject:host_oom",
          notes="torchrun in a memory cgroup limited to 1400M (like a container limit); one rank "
                "allocates until the kernel OOM-kills it; only exitcode -9 shows in the log"),
        S("oom-torchrun-tee-cgroup-4rank", "host_oom", "torchrun", fault="host_oom", nproc=4, fault_rank=3,
          prefix="tee", special="memlimit:2200M", group="inject:host_oom",
          notes="torchrun --tee 3 in a memory cgroup limited to 2200M; one rank allocates until killed"))

    # ---- permission_denied / disk_full ----------------------------------------------------
    tr_variants("perm-ckpt", "permission_denied", "perm_denied", [
        ("torchrun-2rank-rank0", "torchrun", 2, 0, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
        ("srun-torchrun-4rank", "srun-torchrun", 4, 0, "", {}),
    ], "torch.save of a checkpoint into a directory owned by root (the job runs as an unprivileged user)",
        special="readonly_ckpt")
    tr_variants("perm-log", "permission_denied", "perm_denied_log", [
        ("torchrun-4rank", "torchrun", 4, 3, "", {}),
        ("srun-4task", "srun", 4, 1, "", {}),
    ], "opening a per-rank metrics log for writing in a directory owned by root", special="readonly_ckpt")
    tr_variants("diskfull-ckpt", "disk_full", "disk_full", [
        ("torchrun-2rank-rank0", "torchrun", 2, 0, "", {}),
        ("srun-2task", "srun", 2, 1, "", {}),
        ("torchrun-role-4rank", "torchrun", 4, 0, "role", {}),
    ], "torch.save of a checkpoint into a 1 MiB tmpfs that is almost full", special="tiny_fs",
        args=["--hidden", "256"])
    tr_variants("diskfull-log", "disk_full", "disk_full_log", [
        ("torchrun-tee-4rank", "torchrun", 4, 1, "tee", {}),
        ("srun-torchrun-2rank", "srun-torchrun", 2, 1, "", {}),
    ], "appending to a metrics log on a 1 MiB tmpfs that is almost full", special="tiny_fs")

    # ---- shm_exhausted -------------------------------------------------------------------
    tr_variants("shm-dataloader", "shm_exhausted", "shm", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
        ("torchrun-tee-2rank", "torchrun", 2, 0, "tee", {}),
    ], "DataLoader workers pass 64 MiB batches through a /dev/shm tmpfs of 8 MiB (mount namespace)",
        special="tiny_shm")

    # ---- backend_unavailable / device / import -----------------------------------------------
    tr_variants("backend-nccl", "backend_unavailable", "backend_nccl", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
        ("srun-2task", "srun", 2, 0, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 0, "tee", {}),
    ], "init_process_group(backend='nccl') with a CPU-only torch build (all ranks fail alike)")
    tr_variants("backend-mpi", "backend_unavailable", "backend_mpi", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
    ], "init_process_group(backend='mpi') with a torch built without MPI")
    tr_variants("backend-typo", "backend_unavailable", "backend_bogus", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
    ], "init_process_group(backend='glooo'): an unknown backend name")
    tr_variants("set-device", "device_misassignment", "set_device", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
        ("srun-2task", "srun", 2, 0, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 0, "tee", {}),
    ], "torch.cuda.set_device(local_rank) on a machine without a usable GPU (CPU-only torch)")
    tr_variants("cuda-to", "device_misassignment", "cuda_to", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
        ("srun-4task", "srun", 4, 0, "", {}),
    ], "model.to(f'cuda:{local_rank}') on a machine without a usable GPU (CPU-only torch)")
    tr_variants("import", "import_error", "import_error", [
        ("torchrun-2rank", "torchrun", 2, 1, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 2, "tee", {}),
        ("srun-4task", "srun", 4, 3, "", {}),
        ("torchrun-2node", "torchrun2", 2, 2, "", {"fault_node": "node02"}),
    ], "one rank (one node's environment) lacks a module the script imports")

    # ---- network / rendezvous setup ----------------------------------------------------------
    tr_variants("gloo-ifname", "nccl_wrong_interface", "none", [
        ("torchrun-2rank", "torchrun", 2, 0, "", {}),
        ("srun-2task", "srun", 2, 0, "", {}),
        ("torchrun-tee-4rank", "torchrun", 4, 0, "tee", {}),
    ], "GLOO_SOCKET_IFNAME=nonexistent0: an interface that does not exist on the node",
        env={"GLOO_SOCKET_IFNAME": "nonexistent0"})
    add(S("port-in-use-torchrun-2rank", "port_in_use", "torchrun", nproc=2, fault_rank=None,
          special="port_taken", group="inject:port_in_use",
          notes="another process already listens on the --master-port given to torchrun"),
        S("port-in-use-torchrun-tee-4rank", "port_in_use", "torchrun", nproc=4, fault_rank=None,
          prefix="tee", special="port_taken", group="inject:port_in_use",
          notes="another process already listens on the --master-port given to torchrun --tee 3"),
        S("port-in-use-srun-2task", "port_in_use", "srun", nproc=2, fault_rank=0,
          special="port_taken", group="inject:port_in_use", srun_opts=["--kill-on-bad-exit=1"],
          notes="MASTER_PORT is already bound on the node when rank 0 creates the TCPStore "
                "(srun --kill-on-bad-exit=1: rank 1, connected to the squatting process, would wait forever)"),
        S("port-in-use-srun-torchrun-4rank", "port_in_use", "srun-torchrun", nproc=4, fault_rank=None,
          special="port_taken", group="inject:port_in_use",
          notes="torchrun under srun with a --master-port already in use on the node"))
    add(S("master-refused-torchrun-node02", "master_unreachable", "torchrun", nproc=2, fault_rank=None,
          fault_node="node02", special="node02_only", group="inject:master_unreachable",
          tr_args=["--nnodes", "2", "--node-rank", "1", "--master-addr", "node01",
                   "--rdzv-conf", "timeout=30"],
          notes="the node02 agent of a 2-node job starts, but nothing listens at node01:MASTER_PORT "
                "(master never started)"),
        S("master-refused-srun-2task", "master_unreachable", "srun", nproc=2, fault_rank=None,
          env={"MASTER_ADDR": "127.0.0.1"}, special="rank0_elsewhere", group="inject:master_unreachable",
          notes="both tasks think they are not the master (RANK offset): they connect to a port on "
                "which nothing listens"),
        S("master-blackhole-torchrun-node02", "master_unreachable", "torchrun", nproc=2, fault_rank=None,
          fault_node="node02", special="node02_only", group="inject:master_unreachable",
          tr_args=["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.255.255.1",
                   "--rdzv-conf", "timeout=30"],
          notes="MASTER_ADDR is an address this node has no route to"),
        S("master-refused-c10d-torchrun-node02", "master_unreachable", "torchrun", nproc=2, fault_rank=None,
          fault_node="node02", special="node02_only", group="inject:master_unreachable",
          tr_args=["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-id", "job42",
                   "--rdzv-endpoint", "node01:{PORT}", "--rdzv-conf", "read_timeout=30"],
          notes="c10d rendezvous endpoint node01:PORT where nothing listens (node02 agent alone)"))
    add(S("badhost-srun-2task", "hostname_resolution", "srun", nproc=2, fault_rank=None,
          env={"MASTER_ADDR": "no-such-host.invalid"}, group="inject:hostname_resolution",
          notes="MASTER_ADDR=no-such-host.invalid does not resolve"),
        S("badhost-torchrun-node02", "hostname_resolution", "torchrun", nproc=2, fault_rank=None,
          fault_node="node02", special="node02_only", group="inject:hostname_resolution",
          tr_args=["--nnodes", "2", "--node-rank", "1", "--master-addr", "no-such-host.invalid",
                   "--rdzv-conf", "timeout=30"],
          notes="node02's torchrun is given --master-addr no-such-host.invalid"),
        S("badhost-c10d-torchrun-2rank", "hostname_resolution", "torchrun", nproc=2, fault_rank=None,
          group="inject:hostname_resolution",
          tr_args=["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-id", "job42",
                   "--rdzv-endpoint", "node-07.cluster.invalid:{PORT}", "--rdzv-conf", "read_timeout=30"],
          notes="c10d rendezvous endpoint with a host name that does not resolve"))
    add(S("missing-env-python", "env_misconfigured", "python", nproc=1, fault_rank=0,
          group="inject:env_misconfigured",
          notes="train.py started with plain python: no RANK/WORLD_SIZE/MASTER_ADDR in the environment"),
        S("missing-env-srun-2task", "env_misconfigured", "srun", nproc=2, fault_rank=0,
          special="no_slurm_env", group="inject:env_misconfigured",
          notes="srun -n 2 python train.py without mapping SLURM_PROCID etc. to RANK/WORLD_SIZE"),
        S("rank-ge-world-srun-4task", "env_misconfigured", "srun", nproc=4, fault_rank=2,
          env={"WORLD_SIZE": "2"}, group="inject:env_misconfigured",
          notes="sbatch exports WORLD_SIZE=2 while srun starts 4 tasks: ranks 2 and 3 are >= world size"),
        S("missing-master-port-srun-2task", "env_misconfigured", "srun", nproc=2, fault_rank=0,
          special="no_master_port", group="inject:env_misconfigured",
          notes="RANK/WORLD_SIZE/MASTER_ADDR exported from SLURM variables but MASTER_PORT forgotten"))
    add(S("world-too-big-srun-2task", "rendezvous_timeout", "srun", nproc=2, fault_rank=None,
          env={"WORLD_SIZE": "4"}, group="inject:rendezvous_timeout",
          notes="sbatch exports WORLD_SIZE=4 but srun starts only 2 tasks: the store waits for 4"),
        S("nnodes2-one-agent-torchrun", "rendezvous_timeout", "torchrun", nproc=2, fault_rank=None,
          fault_node="node02", group="inject:rendezvous_timeout",
          tr_args=["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-id", "job42",
                   "--rdzv-endpoint", "node01:{PORT}", "--rdzv-conf", "join_timeout=30"],
          notes="torchrun --nnodes 2 (c10d, join_timeout=30) but the second node's agent never starts"),
        S("nnodes2-static-one-agent-torchrun", "rendezvous_timeout", "torchrun", nproc=2, fault_rank=None,
          fault_node="node02", group="inject:rendezvous_timeout",
          tr_args=["--nnodes", "2", "--node-rank", "0", "--master-addr", "node01",
                   "--rdzv-conf", "timeout=30"],
          notes="static rendezvous --nnodes 2 --node-rank 0, the node-rank 1 agent never starts"))
    add(S("file-init-unreachable-srun-2task", "file_init_error", "srun", nproc=2, fault_rank=None,
          args=["--init-method", "file:///shared/nfs/job42/initfile"], group="inject:file_init_error",
          timeout=60, notes="file:// init method on a path whose directory does not exist on the node: "
                            "init_process_group waits forever without a message (the user cancels it)"),
        S("file-init-stale-srun-2task", "file_init_error", "srun", nproc=2, fault_rank=None,
          special="stale_initfile", group="inject:file_init_error", timeout=90,
          srun_opts=["--kill-on-bad-exit=1"],
          notes="file:// init file left behind by an earlier run that was killed is reused by the next run"),
        S("file-init-stale-srun-4task", "file_init_error", "srun", nproc=4, fault_rank=None,
          special="stale_initfile", group="inject:file_init_error", timeout=90,
          srun_opts=["--kill-on-bad-exit=1"],
          notes="file:// init file left behind by an earlier 4-task run that was killed is reused"))

    # ---- SLURM ------------------------------------------------------------------------------
    long = ["--steps", "100000", "--step-sleep", "0.2", "--log-every", "50"]
    add(S("timelimit-srun-2task", "slurm_time_limit", "srun", nproc=2, fault_rank=None, args=long,
          sbatch=["--time=1"], timeout=240, group="inject:slurm_time_limit",
          notes="sbatch --time=1 with a job that trains for longer"),
        S("timelimit-srun-torchrun-4rank", "slurm_time_limit", "srun-torchrun", nproc=4, fault_rank=None,
          args=long, sbatch=["--time=1"], timeout=240, prefix="tee", group="inject:slurm_time_limit",
          notes="torchrun --tee 3 under srun, sbatch --time=1, killed at the time limit"),
        S("cancel-srun-4task", "slurm_cancelled", "srun", nproc=4, fault_rank=None, args=long,
          special="scancel", group="inject:slurm_cancelled", notes="the user scancels the running job"),
        S("cancel-srun-torchrun-2rank", "slurm_cancelled", "srun-torchrun", nproc=2, fault_rank=None,
          args=long, special="scancel", group="inject:slurm_cancelled",
          notes="the user scancels a running job (torchrun under srun)"))

    # ---- clean runs --------------------------------------------------------------------------
    clean = {"fault_rank": None, "fault_node": None, "group": "inject:none"}
    add(S("clean-torchrun-2rank", "none", "torchrun", nproc=2, notes="a clean run", **clean),
        S("clean-torchrun-tee-4rank", "none", "torchrun", nproc=4, prefix="tee", notes="a clean run", **clean),
        S("clean-torchrun-role-8rank", "none", "torchrun", nproc=8, prefix="role", timeout=240,
          notes="a clean run, 8 ranks, --role rank --tee 3", **clean),
        S("clean-torchrun-template-4rank", "none", "torchrun", nproc=4, prefix="template",
          notes="a clean run with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", **clean),
        S("clean-torchrun-2node", "none", "torchrun2", nproc=2, notes="a clean 2-node run", **clean),
        S("clean-srun-4task", "none", "srun", nproc=4, notes="a clean sbatch/srun run", **clean),
        S("clean-srun-torchrun-4rank", "none", "srun-torchrun", nproc=4, prefix="tee",
          notes="a clean run of torchrun under srun", **clean),
        S("harmless-torchrun-2rank", "none", "torchrun", fault="harmless", nproc=2,
          notes="clean run that logs a caught ConnectionError traceback, a retry and a UserWarning", **clean),
        S("harmless-srun-4task", "none", "srun", fault="harmless", nproc=4,
          notes="clean run that logs a caught ConnectionError traceback, a retry and a UserWarning", **clean),
        S("harmless-torchrun-tee-2rank", "none", "torchrun", fault="harmless", nproc=2, prefix="tee",
          env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}, args=["--ckpt-every", "10"],
          notes="clean run with TORCH_DISTRIBUTED_DEBUG=INFO chatter, a caught traceback and checkpoints",
          **clean),
        S("mismatch-op-undetected-torchrun-2rank", "none", "torchrun", fault="mismatch_op", nproc=2,
          notes="one rank all_reduces with MAX and the other with SUM, without the debug mode: gloo does "
                "not notice and the job completes (a silent bug, but no failure in the logs)",
          **{**clean, "group": "inject:mismatch_op"}),
        S("harmless-srun-torchrun-2rank", "none", "srun-torchrun", fault="harmless", nproc=2,
          args=["--ckpt-every", "10"], notes="clean run, caught traceback, checkpoints", **clean))

    # ---- README examples ---------------------------------------------------------------------
    add(S("example-user-exception-cascade", "user_code_error", "torchrun", fault="value_error", nproc=4,
          fault_rank=2, dest="examples/user-exception-cascade", group="example:user_code_error",
          notes="ValueError in the data code of rank 2 of a 4-rank torchrun job; ranks 0, 1, 3 then fail "
                "in all_reduce with 'Connection closed by peer' / 'Connection reset by peer'"),
        S("example-port-in-use", "port_in_use", "torchrun", nproc=2, fault_rank=None,
          special="port_taken", dest="examples/port-in-use", group="example:port_in_use",
          notes="torchrun --master-port P while another process already listens on P"),
        S("example-slurm-time-limit", "slurm_time_limit", "srun", nproc=4, fault_rank=None,
          args=long, sbatch=["--time=1"], timeout=240, dest="examples/slurm-time-limit",
          group="example:slurm_time_limit",
          notes="sbatch --time=1, srun --label -n 4 python train.py: SLURM kills the job at its time limit"))


build_scenarios()


# --------------------------------------------------------------------------------------
# environment preparation


def ensure_runtime():
    """/opt/venv: a venv of the system python3.11 whose site-packages is a (read-only) bind
    mount of the tool venv's site-packages."""
    py = RUNTIME / "bin" / "python"
    site = RUNTIME / "lib" / "python3.11" / "site-packages"
    real_site = REAL_VENV / "lib" / "python3.11" / "site-packages"
    if not py.exists():
        if RUNTIME.is_symlink():
            RUNTIME.unlink()
        elif RUNTIME.exists():
            shutil.rmtree(RUNTIME)
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(RUNTIME)], check=True)
    # site-packages: a bind mount (not a symlink: torch's log formatter resolves symlinks
    # and would then print the real path instead of the usual "torch/distributed/...")
    if site.is_symlink():
        site.unlink()
    site.mkdir(parents=True, exist_ok=True)
    mounted = any(line.split()[4] == str(site) for line in open("/proc/self/mountinfo"))
    if not mounted:  # (os.path.ismount misses bind mounts within one filesystem)
        subprocess.run(["mount", "--bind", "-o", "ro", str(real_site), str(site)], check=True)
    tr = RUNTIME / "bin" / "torchrun"
    tr.write_text("#!/opt/venv/bin/python\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                  "from torch.distributed.run import main\nif __name__ == '__main__':\n"
                  "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                  "    sys.exit(main())\n")
    tr.chmod(0o755)
    try:
        pwd.getpwnam(JOB_USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", JOB_USER], check=True)
    JOB_BASE.mkdir(parents=True, exist_ok=True)
    shutil.chown(JOB_BASE, JOB_USER, JOB_USER)
    (RUNTIME / "LOGSLEUTH_README").write_text(
        "made by logsleuth corpus/tools/inject.py: lib/python3.11/site-packages is a read-only bind mount\n"
        f"of {real_site}; undo with: umount {site}\n")
    HOSTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    HOSTS_FILE.write_text("127.0.0.1 localhost\n127.0.1.1 node01\n127.0.1.2 node02\n"
                          "::1 localhost ip6-localhost ip6-loopback\n")
    try:
        CGROUP_MEM.mkdir(exist_ok=True)
    except OSError:
        pass


def versions(slurm: bool) -> str:
    out = subprocess.run([str(RUNTIME / "bin" / "python"), "-c",
                          "import torch,platform;print(torch.__version__, platform.python_version())"],
                         capture_output=True, text=True).stdout.split()
    v = f"torch {out[0]}, python {out[1]}, gloo (CPU), Debian 12" if out else "unknown"
    if slurm:
        s = subprocess.run(["sinfo", "-V"], capture_output=True, text=True).stdout.strip()
        v += f", {s}"
    return v


# --------------------------------------------------------------------------------------
# running one scenario


class Runner:
    def __init__(self, sc: Scenario):
        self.sc = sc
        self.jobdir = JOB_BASE / sc.name
        self.port = free_port()
        self.cleanups: list = []
        self.extra_notes: list[str] = []
        self.cg: Path | None = None
        self.ckpt_dir = "checkpoints"
        self.jobid: str | None = None

    def abort(self):
        """Emergency cleanup (inject.py interrupted): kill the job, undo mounts."""
        if self.jobid:
            subprocess.run(["scancel", self.jobid], stderr=subprocess.DEVNULL)
        if self.cg:
            self.kill_cgroup(self.cg)
        for c in reversed(self.cleanups):
            try:
                c()
            except Exception:
                pass

    # -- helpers ------------------------------------------------------------------------
    def job_args(self) -> list[str]:
        sc = self.sc
        a = ["--fault", sc.fault]
        if sc.fault_rank is not None:
            a += ["--fault-rank", str(sc.fault_rank)]
        a += ["--fault-step", str(sc.fault_step)]
        if sc.fault in ("perm_denied", "perm_denied_log", "disk_full", "disk_full_log"):
            a += ["--ckpt-dir", self.ckpt_dir]
        a += sc.args
        if sc.slurm and sc.launcher == "srun" and sc.special not in ("no_slurm_env", "no_master_port", "rank0_elsewhere"):
            a += ["--slurm-env"]
        return a

    def torchrun_cmd(self, nnodes_args=None) -> list[str]:
        sc = self.sc
        cmd = ["torchrun"]
        if sc.tr_args:
            cmd += [x.replace("{PORT}", str(self.port)) for x in sc.tr_args]
            if not any(x.startswith("--rdzv-endpoint") for x in sc.tr_args) and "--master-port" not in sc.tr_args:
                cmd += ["--master-port", str(self.port)]
        elif nnodes_args:
            cmd += nnodes_args
        else:
            cmd += ["--master-port", str(self.port)]
        cmd += ["--nproc-per-node", str(sc.nproc)]
        if sc.prefix in ("tee", "template"):
            cmd += ["--tee", "3"]
        elif sc.prefix == "role":
            cmd += ["--role", "rank", "--tee", "3"]
        return cmd + ["train.py"] + self.job_args()

    def job_env(self) -> dict:
        env = {"HOME": f"/home/{JOB_USER}", "USER": JOB_USER, "LOGNAME": JOB_USER,
               "PATH": f"{RUNTIME}/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "SHELL": "/bin/bash"}
        if self.sc.prefix == "template":
            env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]: "
        env.update(self.sc.env)
        return env

    def prepare_jobdir(self):
        if self.jobdir.exists():
            subprocess.run(["umount", "-q", str(self.jobdir / self.ckpt_dir)], stderr=subprocess.DEVNULL)
            shutil.rmtree(self.jobdir)
        self.jobdir.mkdir(parents=True)
        shutil.copy(TOOLS / "ddp_job.py", self.jobdir / "train.py")
        subprocess.run(["chown", "-R", f"{JOB_USER}:{JOB_USER}", str(self.jobdir)], check=True)

    def make_cgroup(self, limit: str | None):
        try:
            cg = CGROUP_MEM / self.sc.name
            if cg.exists():
                self.kill_cgroup(cg)
                cg.rmdir()
            cg.mkdir()
            if limit:
                (cg / "memory.limit_in_bytes").write_text(limit)
            self.cg = cg
        except OSError as e:
            self.cg = None
            if limit:
                raise RuntimeError(f"cannot create memory cgroup: {e}") from e

    @staticmethod
    def kill_cgroup(cg: Path):
        for _ in range(20):
            try:
                pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def ns_wrap(self, hostname: str, inner: str, shm_mb: int | None = None) -> list[str]:
        """A root shell that enters new UTS+mount namespaces, names the host, then runs
        `inner` (a shell command line) as the job user with a clean environment."""
        envs = " ".join(f"{k}={sh_quote(v)}" for k, v in self.job_env().items())
        shm = f"mount -t tmpfs -o size={shm_mb}m tmpfs /dev/shm && " if shm_mb else ""
        cg = f"echo $$ > {self.cg}/cgroup.procs && " if self.cg else ""
        script = (f"{cg}exec unshare --uts --mount -- /bin/sh -c "
                  + sh_quote(f"hostname {hostname} && mount --bind {HOSTS_FILE} /etc/hosts && {shm}"
                             f"cd {self.jobdir} && exec runuser -u {JOB_USER} -- env -i {envs} "
                             f"/bin/sh -c {sh_quote(inner)}"))
        return ["/bin/sh", "-c", script]

    def run_proc(self, argv, logfile: Path, timeout: int) -> subprocess.Popen:
        f = open(logfile, "wb")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        p._logf = f  # type: ignore[attr-defined]
        return p

    def wait_procs(self, procs, timeout):
        deadline = time.time() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                self.extra_notes.append(f"inject.py killed the run after its {timeout}s hard timeout")
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if self.cg:
                    self.kill_cgroup(self.cg)
                p.wait()
        if self.cg:
            self.kill_cgroup(self.cg)  # stragglers (e.g. a rank torchrun could not stop)
        for p in procs:
            p._logf.close()

    # -- special setups ----------------------------------------------------------------
    def setup_special(self):
        sp = self.sc.special
        if sp == "port_taken":
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", self.port))
            s.listen(5)
            self.cleanups.append(s.close)
        elif sp == "readonly_ckpt":
            d = self.jobdir / self.ckpt_dir
            d.mkdir()
            os.chown(d, 0, 0)
            d.chmod(0o755)
        elif sp == "tiny_fs":
            d = self.jobdir / self.ckpt_dir
            d.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(d)], check=True)
            self.cleanups.append(lambda: subprocess.run(["umount", "-l", str(d)]))
            with open(d / "ckpt_step0.pt", "wb") as f:     # an old checkpoint fills most of it
                f.write(os.urandom(1024 * 1024 - 64 * 1024))
            subprocess.run(["chown", "-R", f"{JOB_USER}:{JOB_USER}", str(d)], check=True)
        elif sp == "stale_initfile":
            # an earlier run of the same job that died: leaves its init file behind
            pre = Runner(Scenario(self.sc.name + "-pre", "x", "srun", nproc=self.sc.nproc, fault_rank=None,
                                  special="scancel9",
                                  args=["--init-method", self.init_file(), "--steps", "100000",
                                        "--step-sleep", "0.2", "--log-every", "50"]))
            pre.jobdir = self.jobdir
            pre.port = self.port
            pre.run_srun(keep_dir=True, outname="earlier-run")
            self.extra_notes.append("an earlier run of the same job, killed with scancel --signal=KILL, left "
                                    "the init file behind; its log is earlier-run.out")

    def init_file(self):
        return f"file://{self.jobdir}/ddp_init"

    # -- launchers ---------------------------------------------------------------------
    def run(self):
        sc = self.sc
        ACTIVE.add(self)
        self.prepare_jobdir()
        try:
            self.setup_special()
            if sc.launcher == "torchrun":
                return self.run_torchrun()
            if sc.launcher == "torchrun2":
                return self.run_torchrun2()
            if sc.launcher == "python":
                return self.run_python()
            if sc.slurm:
                return self.run_srun()
            raise ValueError(sc.launcher)
        finally:
            self.teardown()

    def teardown(self):
        """Undo the job's setup (special cleanups in reverse order) and kill what is left in its cgroup."""
        ACTIVE.discard(self)
        for c in reversed(self.cleanups):
            try:
                c()
            except Exception:
                pass
        if self.cg:
            self.kill_cgroup(self.cg)
            try:
                self.cg.rmdir()
            except OSError:
                pass

    def run_torchrun(self):
        sc = self.sc
        limit = None
        shm = None
        if sc.special.startswith("memlimit:"):
            limit = sc.special.split(":", 1)[1]
        if sc.special == "tiny_shm":
            shm = 8
        self.make_cgroup(limit)
        host = "node02" if sc.special == "node02_only" else "node01"
        cmd = " ".join(sh_quote(x) for x in self.torchrun_cmd())
        log = self.jobdir / "torchrun.log"
        p = self.run_proc(self.ns_wrap(host, cmd, shm), log, sc.timeout)
        self.wait_procs([p], sc.timeout)
        return {"torchrun.log": log}

    def run_torchrun2(self):
        sc = self.sc
        self.make_cgroup(None)
        procs, logs = [], {}
        for i, host in enumerate(("node01", "node02")):
            cmd = " ".join(sh_quote(x) for x in self.torchrun_cmd(
                ["--nnodes", "2", "--node-rank", str(i), "--master-addr", "node01", "--master-port", str(self.port)]))
            log = self.jobdir / f"{host}.log"
            procs.append(self.run_proc(self.ns_wrap(host, cmd), log, sc.timeout))
            logs[f"{host}.log"] = log
            time.sleep(0.5)
        self.wait_procs(procs, sc.timeout)
        return logs

    def run_python(self):
        sc = self.sc
        self.make_cgroup(None)
        log = self.jobdir / "train.log"
        cmd = "python train.py " + " ".join(sh_quote(x) for x in self.job_args())
        p = self.run_proc(self.ns_wrap("node01", cmd), log, sc.timeout)
        self.wait_procs([p], sc.timeout)
        return {"train.log": log}

    def sbatch_script(self) -> str:
        sc = self.sc
        lines = ["#!/bin/bash", "#SBATCH --job-name=train", f"#SBATCH --ntasks={sc.nproc if sc.launcher == 'srun' else 1}"]
        if sc.launcher == "srun-torchrun":
            lines.append(f"#SBATCH --cpus-per-task={sc.nproc}")
        if not any(x.startswith("--time") for x in sc.sbatch):
            lines.append("#SBATCH --time=10")
        lines += [f"#SBATCH {x}" for x in sc.sbatch]
        lines += ["", "export OMP_NUM_THREADS=1"]
        for k, v in sc.env.items():
            lines.append(f"export {k}={sh_quote(v)}")
        if sc.special == "no_master_port":
            lines.append("export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)")
        elif sc.special == "rank0_elsewhere":
            lines.append(f"export MASTER_PORT={self.port}")
        elif sc.launcher == "srun":
            lines.append(f"export MASTER_PORT={self.port}")
        args = self.job_args()
        if sc.special == "stale_initfile":
            args += ["--init-method", self.init_file()]
        if sc.special == "rank0_elsewhere":
            lines.append("# ranks computed with an offset: this job believes it runs on the 2nd node")
            lines.append("export NODE_RANK=1")
            body = ("srun --label bash -c 'RANK=$((SLURM_PROCID + 2)) WORLD_SIZE=4 LOCAL_RANK=$SLURM_LOCALID "
                    "exec python train.py " + " ".join(sh_quote(x) for x in self.job_args()) + "'")
        elif sc.special == "no_master_port":
            body = ("srun --label bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
                    "exec python train.py " + " ".join(sh_quote(x) for x in self.job_args()) + "'")
        elif sc.launcher == "srun":
            body = " ".join(["srun --label"] + sc.srun_opts + ["python train.py"] + [sh_quote(x) for x in args])
        else:
            body = " ".join(["srun --label"] + sc.srun_opts + [sh_quote(x) for x in self.torchrun_cmd()])
        lines += ["", "echo \"job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: $SLURM_NTASKS task(s)\"", body, ""]
        return "\n".join(lines)

    def run_srun(self, keep_dir=False, outname=None):
        sc = self.sc
        script = self.jobdir / ("job.sbatch" if not outname else f"{outname}.sbatch")
        script.write_text(self.sbatch_script())
        shutil.chown(script, JOB_USER, JOB_USER)
        env = self.job_env()
        r = subprocess.run(["runuser", "-u", JOB_USER, "--", "env", "-i"] + [f"{k}={v}" for k, v in env.items()]
                           + ["sbatch", "--parsable", script.name], cwd=self.jobdir,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
        jobid = r.stdout.strip().split(";")[0]
        self.jobid = jobid
        out = self.jobdir / f"slurm-{jobid}.out"
        deadline = time.time() + sc.timeout
        cancelled = False
        state = ""
        while time.time() < deadline:
            q = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True, text=True)
            state = q.stdout.strip()
            if not state:
                break
            if sc.special in ("scancel", "scancel9") and not cancelled and out.exists() and \
                    out.read_text(errors="replace").count("step ") >= 2:
                time.sleep(2)
                sig = ["--signal=KILL", "--full"] if sc.special == "scancel9" else []
                subprocess.run(["runuser", "-u", JOB_USER, "--", "scancel"] + sig + [jobid])
                cancelled = True
            time.sleep(1)
        else:
            subprocess.run(["scancel", jobid])
            self.extra_notes.append(f"inject.py scancelled the job after its {sc.timeout}s hard timeout")
            for _ in range(60):
                if not subprocess.run(["squeue", "-h", "-j", jobid], capture_output=True, text=True).stdout.strip():
                    break
                time.sleep(1)
        info = subprocess.run(["scontrol", "show", "job", jobid], capture_output=True, text=True).stdout
        m = re.search(r"JobState=(\S+) Reason=(\S+).*?ExitCode=(\S+)", info, re.S)
        if m:
            self.extra_notes.append(f"SLURM: JobState={m.group(1)} ExitCode={m.group(3)}"
                                    if not outname else f"earlier run: JobState={m.group(1)}")
        time.sleep(0.5)
        if outname:
            if out.exists():
                out.rename(self.jobdir / f"{outname}.out")
            return {}
        return {out.name: out}


def sh_quote(s: str) -> str:
    import shlex
    return shlex.quote(str(s))


# --------------------------------------------------------------------------------------
# writing the case


def scrub(text: str) -> tuple[str, int]:
    """Documented substitution of what the build machine might leak (normally nothing)."""
    n = 0
    for pat, rep in ((re.escape(str(REAL_VENV)), str(RUNTIME)),
                     (r"(?<![\w.-])" + re.escape(REAL_HOST) + r"(?![\w-])", "node01")):
        if REAL_HOST in ("node01", "node02") and rep == "node01":
            continue
        text, k = re.subn(pat, rep, text)
        n += k
    return text, n


def toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def write_case(sc: Scenario, logs: dict, notes_extra: list[str], elapsed: float, vers: str):
    out = sc.out_dir
    if out.exists():
        for p in out.iterdir():
            if p.name in ("make.sh",):
                continue
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)
    subs = 0
    for name, path in logs.items():
        data = Path(path).read_bytes().decode("utf-8", errors="surrogateescape")
        data, k = scrub(data)
        subs += k
        (out / name).write_bytes(data.encode("utf-8", errors="surrogateescape"))
    extra = sorted(Path(next(iter(logs.values()))).parent.glob("earlier-run.out")) if logs else []
    for p in extra:
        data, k = scrub(p.read_text(errors="surrogateescape"))
        subs += k
        (out / p.name).write_text(data, errors="surrogateescape")
    notes = sc.notes
    if notes_extra:
        notes += "; " + "; ".join(notes_extra)
    if subs:
        notes += f"; scrub() replaced {subs} occurrence(s) of the build host name / venv path"
    notes += f"; run took {elapsed:.0f}s"
    cmd = f"corpus/tools/inject.py {sc.name}"
    lines = [f"label = {toml_str(sc.label)}", f"category = {toml_str(sc.label)}",
             f"group = {toml_str(sc.group or 'inject:' + sc.fault)}", ""]
    if sc.fault_rank is not None or (sc.fault_node and sc.label != "none"):
        lines.append("[first_failure]")
        if sc.fault_rank is not None:
            lines.append(f"rank = {sc.fault_rank}")
        if sc.fault_node and sc.label != "none":
            lines.append(f"node = {toml_str(sc.fault_node)}")
        lines.append("")
    lines += ["[provenance]", 'kind = "run-here"', f"script = {toml_str(cmd)}", f"versions = {toml_str(vers)}",
              f"notes = {toml_str(notes)}", ""]
    (out / "case.toml").write_text("\n".join(lines))
    if sc.dest:
        mk = out / "make.sh"
        mk.write_text("#!/bin/sh\n# Regenerates this example from a real run (as root; SLURM examples need\n"
                      "# corpus/tools/slurm_setup.sh first).\nset -e\ncd \"$(dirname \"$0\")/../..\"\n"
                      f"exec \"${{PYTHON:-python3}}\" corpus/tools/inject.py {sc.name}\n")
        mk.chmod(0o755)


def run_one(sc: Scenario, vers_cache: dict) -> tuple[str, str, float]:
    t0 = time.time()
    r = Runner(sc)
    try:
        logs = r.run()
    except Exception as e:  # noqa: BLE001
        return sc.name, f"ERROR {type(e).__name__}: {e}", time.time() - t0
    elapsed = time.time() - t0
    key = "slurm" if sc.slurm else "local"
    if key not in vers_cache:
        vers_cache[key] = versions(sc.slurm)
    write_case(sc, logs, r.extra_notes, elapsed, vers_cache[key])
    shutil.rmtree(r.jobdir, ignore_errors=True)
    return sc.name, "ok", elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="scenario names or globs")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--skip-slurm", action="store_true")
    ap.add_argument("--only-slurm", action="store_true")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="scenarios run at once (default 2)")
    a = ap.parse_args(argv)
    if a.list:
        for sc in SCENARIOS:
            print(f"{sc.name:45s} {sc.label:22s} {sc.launcher:14s} n={sc.nproc} fault={sc.fault}")
        print(f"{len(SCENARIOS)} scenarios")
        return 0
    if a.all:
        chosen = list(SCENARIOS)
    else:
        chosen = [sc for sc in SCENARIOS if any(fnmatch.fnmatch(sc.name, n) for n in a.names)]
        if not chosen:
            ap.error("no scenario matches; see --list")
    if a.skip_slurm:
        chosen = [sc for sc in chosen if not sc.slurm]
    if a.only_slurm:
        chosen = [sc for sc in chosen if sc.slurm]
    if os.geteuid() != 0:
        ap.error("run as root (namespaces, mounts, cgroups, runuser)")
    ensure_runtime()
    if any(sc.slurm for sc in chosen):
        if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
            ap.error("SLURM is not up: run corpus/tools/slurm_setup.sh first")
    def on_signal(signum, frame):
        say(f"inject.py: signal {signum}: cleaning up {len(ACTIVE)} running scenario(s)")
        for r in list(ACTIVE):
            r.abort()
        os._exit(130)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # the slow ones (time limits, 8 ranks) first so they overlap with the rest
    chosen.sort(key=lambda sc: -sc.timeout)
    t0 = time.time()
    vers_cache: dict = {}
    results = []
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = {ex.submit(run_one, sc, vers_cache): sc for sc in chosen}
        for f in cf.as_completed(futs):
            name, status, el = f.result()
            results.append((name, status))
            say(f"[{len(results)}/{len(chosen)}] {name}: {status} ({el:.0f}s)")
    bad = [r for r in results if r[1] != "ok"]
    say(f"done: {len(results) - len(bad)} ok, {len(bad)} failed, {time.time() - t0:.0f}s total")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
