#!/usr/bin/env python3
"""layouts.py -- real failure runs in the output layouts users have (issue 13, point 5).

Reuses inject.py's isolation (imported, unchanged): jobs run as user ``user`` in
/home/user/jobs/layout-<name>/, torchrun/python jobs in UTS+mount namespaces with hostname
node01 and /opt/venv as the Python, each run in its own memory cgroup, SLURM jobs under the
node01 slurmd of slurm_setup.sh, and scrub() as the last guard.  What is new here is how
the jobs are launched and where their output lands:

  logdir        torchrun --log-dir logs --redirects 3 --tee 3: the console (console.log) plus
                logs/<run_id>_<rand>/attempt_0/<local_rank>/{stdout,stderr}.log (+ error.json
                with @record), all kept as the job wrote them
  torchrun      plain torchrun console (torchrun.log)
  spawn         python train.py, which calls torch.multiprocessing.spawn (console train.log)
  accelerate    accelerate launch --multi_gpu --num_processes N (CPU: MULTI_CPU) (console.log)
  lightning     python train.py with a Lightning Trainer(devices=N, strategy=ddp) (console.log)
  deepspeed     deepspeed --num_gpus N train.py (no GPU: DeepSpeed's CPU accelerator, gloo) (console.log);
                the first DeepSpeed run as `user` JIT-compiles DeepSpeed's shm comm op into
                /home/user/.cache/torch_extensions (its build lines are in that run's log), later
                runs load it from there
  srun-pertask  sbatch; srun --output=slurm-%j-%t.out python train.py: one file per task, plus
                the batch script's slurm-<jobid>.out
  srun-pernode  sbatch; srun --output=%N-%j.out: one file per node (node01-<jobid>.out), plus
                slurm-<jobid>.out

Post-processing (``post``), recorded in the case's notes:
  utf16         the console log converted with ``iconv -f UTF-8 -t UTF-16`` (UTF-16 LE with
                BOM, as PowerShell's ``>`` / Tee-Object writes it); line breaks kept (LF)
  utf16crlf     LF -> CRLF first (PowerShell writes CRLF), then the same iconv

The job script is ddp_job.py (job="ddp") or layout_job.py (job="layout", which imports
ddp_job.py); both are copied into the job directory (the one run as train.py).

Usage (as root; SLURM scenarios need slurm_setup.sh first):
    layouts.py --list
    layouts.py NAME [NAME ...] [--out DIR] [-j 2]
    layouts.py --all [--out DIR]
Cases go to incoming/fc-run-2026-11-25/<label>--run-layout-<name>/ unless --out is given.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inject  # noqa: E402
from inject import JOB_USER, ROOT, RUNTIME, TOOLS, Runner, Scenario, say, scrub, sh_quote, toml_str  # noqa: E402

BATCH = "fc-run-2026-11-25"
DEFAULT_OUT = ROOT / "incoming" / BATCH
LOGDIR_ARGS = ["--log-dir", "logs", "--redirects", "3", "--tee", "3"]


@dataclass
class Layout:
    name: str                       # case id = f"{label}--run-layout-{name}"
    label: str
    layout: str                     # see the module docstring
    fault: str = "none"
    job: str = "ddp"                # ddp | layout
    nproc: int = 2
    fault_rank: int | None = 1
    fault_node: str | None = "node01"
    fault_step: int = 5
    args: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    special: str = ""               # inject.Runner specials (port_taken) or memlimit:SIZE
    sbatch: list = field(default_factory=list)
    srun_opts: list = field(default_factory=list)
    tr_extra: list = field(default_factory=list)   # extra torchrun args
    post: str = ""                  # utf16 | utf16crlf
    notes: str = ""
    timeout: int = 150
    category: str = ""

    @property
    def case_id(self):
        return f"{self.label}--run-layout-{self.name}"


LAYOUTS: list[Layout] = []


def add(*xs):
    LAYOUTS.extend(xs)


CLEAN = {"fault_rank": None, "fault_node": None}

# ---- 1. torchrun --log-dir DIR --redirects 3 --tee 3 ----------------------------------------
add(Layout("logdir-valueerror-4rank", "user_code_error", "logdir", "value_error", nproc=4, fault_rank=2,
           notes="ValueError in the data code of local rank 2; peers fail in all_reduce"),
    Layout("logdir-record-keyerror-2rank", "user_code_error", "logdir", "key_error", job="layout", nproc=2,
           fault_rank=1, args=["--record"],
           notes="KeyError in user code on rank 1; the entry point is wrapped in "
                 "torch.distributed.elastic's @record, so the rank also writes error.json"),
    Layout("logdir-oom-cgroup-2rank", "host_oom", "logdir", "host_oom", nproc=2, fault_rank=1,
           special="memlimit:1400M",
           notes="torchrun in a memory cgroup limited to 1400M (a container limit); rank 1 caches data "
                 "in RAM until the kernel OOM-kills it (SIGKILL)"),
    Layout("logdir-port-in-use-2rank", "port_in_use", "logdir", nproc=2, fault_rank=None,
           special="port_taken", notes="another process already listens on torchrun's --master-port"),
    Layout("logdir-hang-2rank", "collective_timeout", "logdir", "hang", nproc=2, fault_rank=1,
           notes="rank 1 stops (sleeps) before its backward; rank 0 times out in gloo's all_reduce "
                 "after the 30 s process-group timeout; the straggler prints nothing"),
    Layout("logdir-import-4rank", "import_error", "logdir", "import_error", nproc=4, fault_rank=3,
           notes="local rank 3 imports a module that is not installed (ModuleNotFoundError)"),
    Layout("logdir-segfault-2rank", "crash_signal", "logdir", "segfault", nproc=2, fault_rank=1,
           notes="rank 1 dereferences a NULL pointer (ctypes.string_at(0)): SIGSEGV"),
    Layout("logdir-env-slurm-procid-2rank", "env_misconfigured", "logdir", "env_slurm", job="layout", nproc=2,
           fault_rank=None,
           notes="a script written for `srun python train.py` takes its rank from SLURM_PROCID; started "
                 "by torchrun that variable is not set, and every rank fails (KeyError: 'SLURM_PROCID')"),
    Layout("logdir-harmless-2rank", "none", "logdir", "harmless", nproc=2,
           notes="clean run that logs a caught ConnectionError traceback, a retry and a UserWarning; exit 0",
           **CLEAN))

# ---- 2. torch.multiprocessing.spawn ---------------------------------------------------------
add(Layout("spawn-valueerror-4proc", "user_code_error", "spawn", "value_error", job="layout", nproc=4,
           fault_rank=2, notes="mp.spawn(nprocs=4): ValueError in the data code of process 2 "
                               "(ProcessRaisedException in the parent)"),
    Layout("spawn-segfault-2proc", "crash_signal", "spawn", "segfault", job="layout", nproc=2, fault_rank=1,
           notes="mp.spawn: process 1 dereferences NULL (SIGSEGV; ProcessExitedException in the parent)"),
    Layout("spawn-no-master-addr-2proc", "env_misconfigured", "spawn", "no_master", job="layout", nproc=2,
           fault_rank=None,
           notes="mp.spawn worker calls init_process_group(rank=, world_size=) with the default env:// "
                 "init, but the script never sets MASTER_ADDR/MASTER_PORT"),
    Layout("spawn-oom-cgroup-2proc", "host_oom", "spawn", "host_oom", job="layout", nproc=2, fault_rank=1,
           special="memlimit:1400M",
           notes="mp.spawn in a memory cgroup limited to 1400M; process 1 caches data in RAM until "
                 "the kernel OOM-kills it (SIGKILL)"),
    Layout("spawn-hang-2proc", "collective_timeout", "spawn", "hang", job="layout", nproc=2, fault_rank=1,
           notes="mp.spawn: process 1 stops before its backward; process 0 hits the 30 s gloo timeout"),
    Layout("spawn-import-2proc", "import_error", "spawn", "import_error", job="layout", nproc=2, fault_rank=1,
           notes="mp.spawn: process 1 imports a module that is not installed before init_process_group"),
    Layout("spawn-harmless-2proc", "none", "spawn", "harmless", job="layout", nproc=2,
           notes="clean mp.spawn run that logs a caught ConnectionError traceback, a retry and a "
                 "UserWarning; exit 0", **CLEAN))

# ---- 3. SLURM per-task / per-node output files ----------------------------------------------
add(Layout("srun-pertask-valueerror-4task", "user_code_error", "srun-pertask", "value_error", nproc=4,
           fault_rank=2, notes="srun --output=slurm-%j-%t.out -n 4: ValueError in the data code of task 2"),
    Layout("srun-pertask-oom-4task", "host_oom", "srun-pertask", "host_oom", nproc=4, fault_rank=1,
           sbatch=["--mem=2500M"],
           notes="srun --output=slurm-%j-%t.out, sbatch --mem=2500M: task 1 caches data in RAM until the "
                 "job's cgroup OOM-kills it"),
    Layout("srun-pertask-cr-progress-indexerror-2task", "user_code_error", "srun-pertask", "index_error",
           job="layout", nproc=2, fault_rank=1, fault_step=12, args=["--progress", "cr", "--steps", "30"],
           notes="srun --output=slurm-%j-%t.out; rank 0 prints a hand-made progress bar with '\\r' and no "
                 "newline, so its file has carriage-return-only line breaks before the failure; "
                 "IndexError in user code on task 1 at step 12"),
    Layout("srun-pertask-hang-4task", "collective_timeout", "srun-pertask", "hang", nproc=4, fault_rank=3,
           srun_opts=["--kill-on-bad-exit=1"],
           notes="srun --output=slurm-%j-%t.out --kill-on-bad-exit=1: task 3 stops (sleeps) before its backward; "
                 "the others time out in gloo's all_reduce after 30 s; the straggler's own file shows no error"),
    Layout("srun-pernode-segfault-4task", "crash_signal", "srun-pernode", "segfault", nproc=4, fault_rank=3,
           notes="srun --output=%N-%j.out (one file per node): task 3 dereferences NULL (SIGSEGV)"),
    Layout("srun-pernode-import-4task", "import_error", "srun-pernode", "import_error", nproc=4,
           fault_rank=1, notes="srun --output=%N-%j.out: task 1 imports a module that is not installed"))

# ---- 4. accelerate launch / Lightning ---------------------------------------------------------
add(Layout("accelerate-keyerror-2proc", "user_code_error", "accelerate", "key_error", job="layout", nproc=2,
           fault_rank=1, notes="accelerate launch --multi_gpu --num_processes 2 on CPU (MULTI_CPU, gloo): "
                               "KeyError in user code on process 1"),
    Layout("accelerate-segfault-2proc", "crash_signal", "accelerate", "segfault", job="layout", nproc=2,
           fault_rank=1, notes="accelerate launch on CPU: process 1 dereferences NULL (SIGSEGV)"),
    Layout("lightning-valueerror-2proc", "user_code_error", "lightning", "value_error", job="layout", nproc=2,
           fault_rank=1, fault_step=8, args=["--progress", "tqdm", "--steps", "30"],
           notes="Lightning Trainer(accelerator='cpu', devices=2, strategy=DDPStrategy) started with plain "
                 "python (Lightning launches the second process itself), TQDM progress bar; ValueError in "
                 "training_step on global rank 1 at step 8"),
    Layout("lightning-hang-2proc", "collective_timeout", "lightning", "hang", job="layout", nproc=2,
           fault_rank=1, args=["--progress", "tqdm", "--steps", "30"],
           notes="Lightning DDP on CPU (DDPStrategy timeout 30 s): rank 1 stops in training_step; rank 0 "
                 "times out in gloo's all_reduce of the gradients"),
    Layout("lightning-clean-2proc", "none", "lightning", "harmless", job="layout", nproc=2,
           args=["--progress", "tqdm", "--steps", "20"],
           notes="clean Lightning DDP run on CPU with TQDM bar, Lightning's warnings and a caught, logged "
                 "ConnectionError traceback; exit 0", **CLEAN),
    Layout("deepspeed-valueerror-2proc", "user_code_error", "deepspeed", "value_error", job="layout", nproc=2,
           fault_rank=1, timeout=480,
           notes="deepspeed --num_gpus 2 on a machine without GPU (DeepSpeed's CPU accelerator, gloo): ValueError "
                 "in the data code of rank 1; run first (empty /home/user/.cache), so both ranks first JIT-build "
                 "DeepSpeed's shm comm op (about 2 min, seen only as a gap in the timestamps and the "
                 "'built successfully' lines)"),
    Layout("deepspeed-segfault-2proc", "crash_signal", "deepspeed", "segfault", job="layout", nproc=2,
           fault_rank=1, timeout=480,
           notes="deepspeed --num_gpus 2 on CPU (CPU accelerator, gloo): rank 1 dereferences NULL (SIGSEGV); "
                 "the shm comm op was already built by an earlier DeepSpeed run of the same user"))

# ---- 5. encodings / line breaks -------------------------------------------------------------
add(Layout("torchrun-tqdm-valueerror-2rank", "user_code_error", "torchrun", "value_error", job="layout",
           nproc=2, fault_rank=1, fault_step=25, args=["--progress", "tqdm", "--steps", "40"],
           notes="plain torchrun console; rank 0 draws a tqdm bar (carriage-return-only updates) until rank 1 "
                 "raises a ValueError at step 25"),
    Layout("torchrun-utf16-assert-4rank", "user_code_error", "torchrun", "assertion", nproc=4, fault_rank=1,
           tr_extra=["--tee", "3"], post="utf16",
           notes="torchrun --tee 3 console of a real run (failed assert in user code on rank 1), converted "
                 "afterwards with `iconv -f UTF-8 -t UTF-16` into UTF-16 LE with BOM, as PowerShell's `>` / "
                 "Tee-Object would save it (LF line breaks kept)"),
    Layout("spawn-utf16crlf-segfault-2proc", "crash_signal", "spawn", "segfault", job="layout", nproc=2,
           fault_rank=1, post="utf16crlf",
           notes="mp.spawn console of a real run (SIGSEGV in process 1), converted afterwards to CRLF line "
                 "breaks and then with `iconv -f UTF-8 -t UTF-16` into UTF-16 LE with BOM, as PowerShell's "
                 "Tee-Object writes it"),
    Layout("logdir-utf16-oom-cgroup-2rank", "host_oom", "logdir", "host_oom", nproc=2, fault_rank=0,
           special="memlimit:1400M", post="utf16",
           notes="torchrun --log-dir/--redirects 3/--tee 3 in a 1400M memory cgroup, rank 0 OOM-killed; the "
                 "console log (only) converted afterwards with `iconv -f UTF-8 -t UTF-16` (UTF-16 LE with "
                 "BOM, PowerShell-style); the per-rank files stay UTF-8"))


# --------------------------------------------------------------------------------------------


def ensure_extra_runtime():
    """/opt/venv/bin/accelerate and deepspeed with an /opt/venv shebang (like inject.py's torchrun)."""
    acc = RUNTIME / "bin" / "accelerate"
    acc.write_text("#!/opt/venv/bin/python\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                   "from accelerate.commands.accelerate_cli import main\nif __name__ == '__main__':\n"
                   "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                   "    sys.exit(main())\n")
    acc.chmod(0o755)
    ds = RUNTIME / "bin" / "deepspeed"   # what pip writes for deepspeed's bin/deepspeed script
    ds.write_text("#!/opt/venv/bin/python\n\nfrom deepspeed.launcher.runner import main\n\nif __name__ == '__main__':\n"
                  "    main()\n")
    ds.chmod(0o755)


class LayoutRunner(Runner):
    def __init__(self, lo: Layout):
        self.lo = lo
        launcher = {"logdir": "torchrun", "torchrun": "torchrun", "srun-pertask": "srun",
                    "srun-pernode": "srun"}.get(lo.layout, "python")
        tr_args = []
        if lo.layout == "logdir":
            tr_args = LOGDIR_ARGS + lo.tr_extra
        elif lo.tr_extra:
            tr_args = list(lo.tr_extra)
        sc = Scenario(f"layout-{lo.name}", lo.label, launcher, fault=lo.fault, nproc=lo.nproc,
                      fault_rank=lo.fault_rank, fault_node=lo.fault_node, fault_step=lo.fault_step,
                      args=list(lo.args), env=dict(lo.env), tr_args=tr_args, sbatch=list(lo.sbatch),
                      srun_opts=list(lo.srun_opts), special=lo.special, timeout=lo.timeout)
        super().__init__(sc)

    # -- job script and its arguments ------------------------------------------------------
    def prepare_jobdir(self):
        super().prepare_jobdir()     # ddp_job.py -> train.py
        if self.lo.job == "layout":
            shutil.copy(TOOLS / "ddp_job.py", self.jobdir / "ddp_job.py")
            shutil.copy(TOOLS / "layout_job.py", self.jobdir / "train.py")
            subprocess.run(["chown", "-R", f"{JOB_USER}:{JOB_USER}", str(self.jobdir)], check=True)

    def job_args(self) -> list[str]:
        lo = self.lo
        if lo.job == "ddp":
            return super().job_args()
        launcher = {"spawn": "spawn", "accelerate": "accelerate", "lightning": "lightning",
                    "deepspeed": "deepspeed"}.get(lo.layout, "env")
        a = ["--launcher", launcher, "--fault", lo.fault]
        if lo.fault_rank is not None:
            a += ["--fault-rank", str(lo.fault_rank)]
        a += ["--fault-step", str(lo.fault_step)]
        if launcher in ("spawn", "lightning"):
            a += ["--nprocs", str(lo.nproc)]
        if launcher == "spawn":
            a += ["--port", str(self.port)]
        a += lo.args
        if lo.layout.startswith("srun"):
            a += ["--slurm-env"]
        return a

    def sbatch_script(self) -> str:
        lo, sc = self.lo, self.sc
        out = "slurm-%j-%t.out" if lo.layout == "srun-pertask" else "%N-%j.out"
        lines = ["#!/bin/bash", "#SBATCH --job-name=train", f"#SBATCH --ntasks={sc.nproc}"]
        if not any(x.startswith("--time") for x in sc.sbatch):
            lines.append("#SBATCH --time=10")
        lines += [f"#SBATCH {x}" for x in sc.sbatch]
        lines += ["", "export OMP_NUM_THREADS=1", f"export MASTER_PORT={self.port}"]
        for k, v in sc.env.items():
            lines.append(f"export {k}={sh_quote(v)}")
        body = " ".join(["srun", f"--output={out}"] + sc.srun_opts + ["python train.py"]
                        + [sh_quote(x) for x in self.job_args()])
        lines += ["", "echo \"job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: $SLURM_NTASKS task(s)\"", body, ""]
        return "\n".join(lines)

    # -- launching -------------------------------------------------------------------------
    def command(self) -> str:
        lo = self.lo
        args = " ".join(sh_quote(x) for x in self.job_args())
        if lo.layout == "accelerate":
            return (f"accelerate launch --multi_gpu --num_processes {lo.nproc} --main_process_port {self.port} "
                    f"train.py {args}")
        if lo.layout == "deepspeed":
            return f"deepspeed --num_gpus {lo.nproc} --master_port {self.port} train.py {args}"
        return f"python train.py {args}"

    def run_console(self, console: str, cmd: str) -> Path:
        sc = self.sc
        limit = sc.special.split(":", 1)[1] if sc.special.startswith("memlimit:") else None
        self.make_cgroup(limit)
        log = self.jobdir / console
        p = self.run_proc(self.ns_wrap("node01", cmd), log, sc.timeout)
        self.wait_procs([p], sc.timeout)
        return log

    def run(self) -> dict:
        lo = self.lo
        inject.ACTIVE.add(self)
        self.prepare_jobdir()
        try:
            self.setup_special()
            if lo.layout in ("logdir", "torchrun"):
                console = "console.log" if lo.layout == "logdir" else "torchrun.log"
                cmd = " ".join(sh_quote(x) for x in self.torchrun_cmd())
                logs = {console: self.run_console(console, cmd)}
                if lo.layout == "logdir":
                    for p in sorted((self.jobdir / "logs").rglob("*")):
                        if p.is_file():
                            logs[str(p.relative_to(self.jobdir))] = p
                return logs
            if lo.layout in ("spawn", "lightning", "accelerate", "deepspeed"):
                console = "train.log" if lo.layout == "spawn" else "console.log"
                return {console: self.run_console(console, self.command())}
            if lo.layout.startswith("srun"):
                logs = self.run_srun()
                for p in sorted(self.jobdir.glob("*.out")):
                    logs.setdefault(p.name, p)
                return logs
            raise ValueError(lo.layout)
        finally:
            self.teardown()


# --------------------------------------------------------------------------------------------
# writing the case


def to_utf16(data: bytes, crlf: bool) -> bytes:
    if crlf:
        data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    r = subprocess.run(["iconv", "-f", "UTF-8", "-t", "UTF-16"], input=data, capture_output=True, check=True)
    out = r.stdout
    if not out.startswith(b"\xff\xfe"):
        raise RuntimeError("iconv -t UTF-16 did not write UTF-16 LE with BOM here")
    return out


def write_case(lo: Layout, logs: dict, notes_extra: list[str], elapsed: float, vers: str, out_root: Path,
               first_console: str):
    out = out_root / lo.case_id
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    subs = 0
    for name, path in logs.items():
        data = Path(path).read_bytes().decode("utf-8", errors="surrogateescape")
        data, k = scrub(data)
        subs += k
        raw = data.encode("utf-8", errors="surrogateescape")
        if lo.post and name == first_console:
            raw = to_utf16(raw, crlf=lo.post == "utf16crlf")
        dest = out / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(raw)
    notes = lo.notes
    if notes_extra:
        notes += "; " + "; ".join(notes_extra)
    if subs:
        notes += f"; scrub() replaced {subs} occurrence(s) of the build host name / venv path"
    notes += f"; run took {elapsed:.0f}s"
    lines = [f"label = {toml_str(lo.label)}", f"category = {toml_str(lo.category or lo.label)}",
             f"group = {toml_str('layout:' + lo.name)}", "log_supports = true", ""]
    if lo.fault_rank is not None or (lo.fault_node and lo.label != "none"):
        lines.append("[first_failure]")
        if lo.fault_rank is not None:
            lines.append(f"rank = {lo.fault_rank}")
        if lo.fault_node and lo.label != "none":
            lines.append(f"node = {toml_str(lo.fault_node)}")
        lines.append("")
    lines += ["[provenance]", 'kind = "run-here"', f"batch = {toml_str(BATCH)}",
              f"script = {toml_str('corpus/tools/layouts.py ' + lo.name)}", f"versions = {toml_str(vers)}",
              f"notes = {toml_str(notes)}", ""]
    (out / "case.toml").write_text("\n".join(lines))


def versions(lo: Layout) -> str:
    v = inject.versions(lo.layout.startswith("srun"))
    extra = {"accelerate": "accelerate", "lightning": "lightning", "deepspeed": "deepspeed"}.get(lo.layout)
    if extra:
        o = subprocess.run([str(RUNTIME / "bin" / "python"), "-c", f"import {extra};print({extra}.__version__)"],
                           capture_output=True, text=True).stdout.strip().splitlines()
        v += f", {extra} {o[-1] if o else 'unknown'}"   # (deepspeed prints a warning line first)
    if lo.post:
        v += ", " + subprocess.run(["iconv", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return v


def run_one(lo: Layout, out_root: Path):
    t0 = time.time()
    r = LayoutRunner(lo)
    try:
        logs = r.run()
    except Exception as e:  # noqa: BLE001
        return lo.name, f"ERROR {type(e).__name__}: {e}", time.time() - t0
    elapsed = time.time() - t0
    console = next(iter(logs))
    write_case(lo, logs, r.extra_notes, elapsed, versions(lo), out_root, console)
    shutil.rmtree(r.jobdir, ignore_errors=True)
    return lo.name, "ok", elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where cases go (default {DEFAULT_OUT})")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    if a.list:
        for lo in LAYOUTS:
            print(f"{lo.name:45s} {lo.label:20s} {lo.layout:13s} n={lo.nproc} fault={lo.fault} {lo.post}")
        print(f"{len(LAYOUTS)} scenarios")
        return 0
    chosen = list(LAYOUTS) if a.all else [lo for lo in LAYOUTS if any(fnmatch.fnmatch(lo.name, n) for n in a.names)]
    if not chosen:
        ap.error("no scenario matches; see --list")
    if os.geteuid() != 0:
        ap.error("run as root (namespaces, mounts, cgroups, runuser)")
    inject.ensure_runtime()
    ensure_extra_runtime()
    if any(lo.layout.startswith("srun") for lo in chosen):
        if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
            ap.error("SLURM is not up: run corpus/tools/slurm_setup.sh first")

    def on_signal(signum, frame):
        say(f"layouts.py: signal {signum}: cleaning up {len(inject.ACTIVE)} running scenario(s)")
        for r in list(inject.ACTIVE):
            r.abort()
        os._exit(130)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    results = []
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = [ex.submit(run_one, lo, a.out) for lo in chosen]
        for f in cf.as_completed(futs):
            name, status, el = f.result()
            results.append((name, status))
            say(f"[{len(results)}/{len(chosen)}] {name}: {status} ({el:.0f}s)")
    bad = [r for r in results if r[1] != "ok"]
    say(f"done: {len(results) - len(bad)} ok, {len(bad)} failed, {time.time() - t0:.0f}s total")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
