"""A simulated distributed training job and the real line formats its software writes.

casegen.py's scenarios describe *what* happens (a rank runs out of GPU memory, the
others time out); this module decides *how it reads*: which launcher and
PyTorch/NCCL/SLURM release wrote each line, which prefixes stack on it, which
files it lands in, how ranks interleave, and what harmless noise surrounds it.
Every format here is taken from the sources listed in docs/log-formats.md and
docs/message-catalogue.md (strings verified in the PyTorch wheels, the
NCCL and SLURM release tags); version boundaries follow those notes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: PyTorch releases a job may run, with the NCCL that shipped with its CUDA wheels
#: and the Python it was typically used with.
ERAS: dict[str, dict[str, object]] = {
    "1.10": {"torch": "1.10.2", "nccl": ["2.10.3"], "py": ["3.8", "3.9"], "year": 2022},
    "1.13": {"torch": "1.13.1", "nccl": ["2.14.3"], "py": ["3.8", "3.9", "3.10"], "year": 2023},
    "2.1": {"torch": "2.1.2", "nccl": ["2.18.1", "2.18.6"], "py": ["3.10", "3.11"], "year": 2023},
    "2.4": {"torch": "2.4.1", "nccl": ["2.20.5"], "py": ["3.10", "3.11"], "year": 2024},
    "2.6": {"torch": "2.6.0", "nccl": ["2.21.5"], "py": ["3.11", "3.12"], "year": 2025},
    "2.9": {"torch": "2.9.1", "nccl": ["2.27.5", "2.27.7"], "py": ["3.12"], "year": 2025},
}
ERA_ORDER = list(ERAS)

SLURM_VERSIONS = ["20.11", "22.05", "23.02", "23.11", "24.11", "25.05"]

LAUNCHERS = ("torchrun", "srun", "srun-torchrun", "deepspeed", "accelerate", "lightning", "spawn")

_HOST_STYLES = (
    lambda i: f"node{i + 1:02d}",
    lambda i: f"gpu-a100-{17 + i:03d}",
    lambda i: f"dgx{i + 3:02d}",
    lambda i: f"compute-2-{14 + i}",
    lambda i: f"worker-{i}",
    lambda i: f"ip-10-0-{3 + i}-{12 + 7 * i}",
    lambda i: f"hpc-g{i + 101}",
    lambda i: f"trainer-{i}",
)
_USERS = ("alice", "bkim", "mlops", "rsingh", "jdoe", "svc-train", "researcher", "u1042")
_PROJECTS = ("llm-pretrain", "vision", "asr", "diffusion", "recsys", "seg3d", "nmt", "rlhf")
_SCRIPTS = ("train.py", "pretrain.py", "main.py", "run_train.py", "finetune.py", "train_ddp.py", "launch_train.py")


def era_at_least(era: str, floor: str) -> bool:
    """Whether PyTorch release ``era`` is ``floor`` or newer."""
    return ERA_ORDER.index(era) >= ERA_ORDER.index(floor)


def nccl_tuple(version: str) -> tuple[int, int, int]:
    a, b, c = (int(x) for x in version.split(".")[:3])
    return a, b, c


@dataclass
class Proc:
    """One training process (a rank)."""

    rank: int
    local: int
    node: str
    node_index: int
    pid: int
    tid: int


@dataclass
class Block:
    """Lines written together by one writer, at one moment."""

    t: float
    who: str  # "rank:<n>", "agent:<node index>", "slurm", "console"
    lines: list[str]
    role: str  # preamble | noise | cause | victim | summary | scary
    spread: float = 0.0  # seconds between lines; > 0 lets concurrent blocks interleave
    seq: int = 0


@dataclass
class Job:
    """A whole job: its shape, the software that ran it, and every block it wrote."""

    rng: random.Random
    era: str
    nccl: str
    py: str
    launcher: str
    nodes: list[str]
    gpus: int
    slurm: str | None
    job_id: int
    start: datetime
    user: str
    project: str
    script: str
    site: str
    tee: bool
    label: bool
    nccl_debug: bool
    layout: str
    master_port: int
    framework_noise: str
    blocks: list[Block] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    drop_roles: set[str] = field(default_factory=set)
    fqdn: bool = False
    consts: dict[str, object] = field(default_factory=dict)

    def const(self, key: str, options: tuple[object, ...]) -> object:
        """One choice per job: a source line number or a wording that a release prints the same way every time."""
        if key not in self.consts:
            self.consts[key] = self.rng.choice(options)
        return self.consts[key]

    # -- shape -----------------------------------------------------------------

    @property
    def world(self) -> int:
        return len(self.procs)

    @property
    def master(self) -> str:
        return self.nodes[0]

    @property
    def torch_version(self) -> str:
        return str(ERAS[self.era]["torch"])

    def at_least(self, floor: str) -> bool:
        return era_at_least(self.era, floor)

    def nccl_at_least(self, version: str) -> bool:
        return nccl_tuple(self.nccl) >= nccl_tuple(version)

    def proc(self, rank: int) -> Proc:
        return self.procs[rank]

    def others(self, rank: int) -> list[Proc]:
        return [p for p in self.procs if p.rank != rank]

    def pick(self, *, not_zero: bool = False) -> Proc:
        pool = self.procs[1:] if not_zero and self.world > 1 else self.procs
        return self.rng.choice(pool)

    def ip(self, node_index: int, net: str = "10.0") -> str:
        return f"{net}.{node_index // 200}.{11 + node_index % 200}"

    # -- writing ---------------------------------------------------------------

    def out(self, who: Proc | str, lines: list[str] | str, t: float, role: str = "noise", spread: float = 0.0) -> None:
        """Queue ``lines`` written by ``who`` at ``t`` seconds into the job."""
        key = f"rank:{who.rank}" if isinstance(who, Proc) else who
        body = lines.splitlines() if isinstance(lines, str) else list(lines)
        self.blocks.append(Block(t, key, body, role, spread, len(self.blocks)))

    def ts(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    def render(self) -> dict[str, str]:
        """Every file the job left behind: name -> text."""
        files: dict[str, list[tuple[float, int, int, str]]] = {}
        for b in self.blocks:
            if b.role in self.drop_roles:
                continue
            for name, prefix in self._targets(b.who):
                rows = files.setdefault(name, [])
                for i, line in enumerate(b.lines):
                    jitter = self.rng.uniform(0.6, 1.4) if b.spread else 1.0
                    t = b.t + i * b.spread * jitter
                    rows.append((t, b.seq if not b.spread else 0, i if not b.spread else b.seq, prefix + line if line else line))
        out: dict[str, str] = {}
        for name, rows in files.items():
            rows.sort(key=lambda r: (r[0], r[1], r[2]))
            text = "\n".join(r[3] for r in rows).strip("\n")
            if text:
                out[name] = text + "\n"
        return out

    def _targets(self, who: str) -> list[tuple[str, str]]:
        """Files a writer's lines land in, each with the prefix stacked on them there."""
        kind, _, arg = who.partition(":")
        slurm_file = f"slurm-{self.job_id}.out"
        width = len(str(max(self.world, len(self.nodes)) - 1))
        if kind == "slurm":
            return [(slurm_file, "")] if self.slurm else []
        if kind == "console":
            return [(self._console_file(0), "")]
        if kind == "agent":
            ni = int(arg)
            if self.layout == "slurm":
                lab = f"{ni:>{len(str(len(self.nodes) - 1))}}: " if self.label else ""
                return [(slurm_file, lab)]
            return [(self._console_file(ni), self._pdsh(ni))]
        p = self.procs[int(arg)]
        if self.layout == "per-rank":
            return [(f"logs/rank{p.rank}.log", "")]
        tee = f"[default{p.local}]:" if self.tee and self.launcher in ("torchrun", "srun-torchrun", "accelerate") else ""
        if self.layout == "slurm":
            if self.launcher == "srun":
                lab = f"{p.rank:>{width}}: " if self.label else ""
            else:
                lab = f"{p.node_index:>{len(str(len(self.nodes) - 1))}}: " if self.label else ""
            return [(slurm_file, lab + tee)]
        return [(self._console_file(p.node_index), self._pdsh(p.node_index) + tee)]

    def _console_file(self, node_index: int) -> str:
        if self.layout == "per-node" and len(self.nodes) > 1:
            return f"logs/{self.nodes[node_index]}.out"
        return {"deepspeed": "deepspeed.log", "spawn": "train.log"}.get(self.launcher, "train.log")

    def _pdsh(self, node_index: int) -> str:
        return f"{self.nodes[node_index]}: " if self.launcher == "deepspeed" and len(self.nodes) > 1 else ""

    # -- paths and frames ----------------------------------------------------------

    @property
    def site_packages(self) -> str:
        return self.site.format(py=self.py)

    @property
    def workdir(self) -> str:
        return f"/home/{self.user}/{self.project}"

    @property
    def python_bin(self) -> str:
        return self.site_packages.split("/lib/")[0] + "/bin/python"


def make_job(rng: random.Random, **force: object) -> Job:
    """A random job; any attribute can be forced (e.g. ``era="2.1"``, ``nodes=2``)."""
    era = str(force.get("era") or rng.choice(ERA_ORDER))
    launcher = str(force.get("launcher") or rng.choice(LAUNCHERS))
    if launcher == "spawn" and int(str(force.get("nodes", 1))) > 1:  # mp.spawn runs on one node
        launcher = "torchrun"
    if launcher == "spawn":
        n_nodes = 1
    else:
        n_nodes = int(force.get("nodes") or rng.choice((1, 1, 2, 2, 4)))
    gpus = int(force.get("gpus") or (1 if launcher == "srun" and n_nodes > 2 else rng.choice((2, 4, 8))))
    style = rng.choice(_HOST_STYLES)
    nodes = [style(i) for i in range(n_nodes)]
    slurm_default = launcher in ("srun", "srun-torchrun") or (n_nodes > 1 and rng.random() < 0.5) or rng.random() < 0.3
    use_slurm = bool(force.get("slurm", slurm_default))
    if launcher == "srun":
        use_slurm = True
    layout = str(force.get("layout") or "")
    if not layout:
        if launcher in ("srun", "srun-torchrun"):
            layout = rng.choice(("slurm", "slurm", "slurm", "per-rank"))
        elif use_slurm:
            layout = rng.choice(("slurm", "per-node")) if launcher != "spawn" else "slurm"
        else:
            layout = rng.choice(("console", "console", "per-rank", "per-node"))
    if layout == "slurm":
        use_slurm = True
    if launcher == "torchrun" and layout == "slurm":
        launcher = "srun-torchrun"
    site = rng.choice(
        (
            "/opt/conda/lib/python{py}/site-packages",
            "/usr/local/lib/python{py}/dist-packages",
            "/home/{user}/.venv/lib/python{py}/site-packages",
            "/opt/conda/envs/train/lib/python{py}/site-packages",
        )
    )
    user = rng.choice(_USERS)
    start_year = int(ERAS[era]["year"])  # type: ignore[call-overload]
    start = datetime(start_year, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59))
    job = Job(
        rng=rng,
        era=era,
        nccl=str(force.get("nccl") or rng.choice(ERAS[era]["nccl"])),  # type: ignore[arg-type]
        py=rng.choice(ERAS[era]["py"]),  # type: ignore[arg-type]
        launcher=launcher,
        nodes=nodes,
        gpus=gpus,
        slurm=str(force.get("slurm_version") or rng.choice(SLURM_VERSIONS)) if use_slurm else None,
        job_id=rng.randint(10_000, 9_999_999),
        start=start,
        user=user,
        project=rng.choice(_PROJECTS),
        script=rng.choice(_SCRIPTS),
        site=site.replace("{user}", user),
        tee=rng.random() < 0.55,
        label=rng.random() < 0.6,
        nccl_debug=bool(force.get("nccl_debug", rng.random() < 0.45)),
        layout=layout,
        master_port=rng.choice((29500, 29500, 12355, 23456, 29400, 6000 + rng.randint(0, 3000))),
        framework_noise=rng.choice(("plain", "hf", "lightning", "tqdm", "json")),
        fqdn=rng.random() < 0.5,
    )
    if launcher == "lightning":
        job.framework_noise = "lightning"
    pid = rng.randint(1200, 390_000)
    for ni, node in enumerate(nodes):
        for local in range(gpus):
            pid += rng.randint(1, 4)
            job.procs.append(Proc(ni * gpus + local, local, node, ni, pid, pid + rng.randint(30, 900)))
    return job


# -- glog / logging headers ------------------------------------------------------------


def glog(job: Job, t: float, level: str, src: str, pid: int, *, ns: bool = True) -> str:
    """PyTorch's C++/Python glog header: ``E0612 10:33:11.123000 140 file.py:833] ``."""
    d = job.ts(t)
    frac = f"{d.microsecond:06d}" + (f"{job.rng.randint(0, 999):03d}" if ns else "")
    return f"{level}{d.month}{d.day:02d} {d:%H:%M:%S}.{frac} {pid} {src}] "


def cpp_log(job: Job, p: Proc, t: float, level: str, src: str) -> str:
    """c10 log prefix of a rank: ``[E ProcessGroupNCCL.cpp:737] `` (<= 2.1) or the 2.2+ rank+glog form."""
    if not job.at_least("2.4"):
        return f"[{level} {src}] "
    d = job.ts(t)
    return f"[rank{p.rank}]:[{level}{d.month}{d.day:02d} {d:%H:%M:%S}.{d.microsecond:06d}{job.rng.randint(0, 999):03d} {src}] "


def pg_tag(job: Job, p: Proc) -> str:
    """The process-group tag ProcessGroupNCCL puts before its messages."""
    if job.at_least("2.6"):
        return f"[PG ID 0 PG GUID 0(default_pg) Rank {p.rank}]"
    if job.at_least("2.4"):
        return f"[PG 0 (default_pg) Rank {p.rank}]"
    return f"[Rank {p.rank}]"


def agent_log(job: Job, t: float, level: str, logger_src: str, msg: str, pid: int) -> str:
    """A torchelastic agent log line in the format of the job's PyTorch release."""
    name = {"E": "ERROR", "W": "WARNING", "I": "INFO"}[level]
    mod = "torch.distributed.elastic." + logger_src.split(":")[0].replace("/", ".").removesuffix(".py")
    if not job.at_least("2.1"):
        return f"{name}:{mod}:{msg}"
    if job.era == "2.1":
        d = job.ts(t)
        return f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}] {mod}: [{name}] {msg}"
    return glog(job, t, level, "torch/distributed/elastic/" + logger_src, pid, ns=False) + msg


def dist_exc(job: Job, kind: str) -> str:
    """The exception class PyTorch raised for a distributed error of ``kind`` in this release."""
    if kind == "backend":
        return "torch.distributed.DistBackendError" if job.at_least("2.1") else "RuntimeError"
    if kind in ("network", "store"):
        if job.at_least("2.4"):
            return "torch.distributed.DistNetworkError" if kind == "network" else "torch.distributed.DistStoreError"
        return "RuntimeError"
    return "RuntimeError"


# -- tracebacks ----------------------------------------------------------------------

Frame = tuple[str, int, str, str]


def traceback_lines(job: Job, frames: list[Frame], exc: str, *, cause: list[str] | None = None, carets: bool | None = None) -> list[str]:
    """A CPython traceback; ``cause`` is an earlier chained traceback printed above it."""
    out: list[str] = []
    if cause:
        out += cause + ["", "During handling of the above exception, another exception occurred:", ""]
    out.append("Traceback (most recent call last):")
    show_carets = (job.py in ("3.11", "3.12")) if carets is None else carets
    for path, line, func, code in frames:
        out.append(f'  File "{path}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
            if show_carets and job.rng.random() < 0.35 and "(" in code:
                start = len(code) - len(code.lstrip())
                out.append("    " + " " * start + "^" * max(3, len(code.strip())))
    out += exc.splitlines()
    return out


def excepthook(job: Job, p: Proc, lines: list[str], *, after_init: bool = True) -> list[str]:
    """PyTorch >= 2.2 prefixes every line of an uncaught traceback with ``[rankN]: `` once init ran."""
    if after_init and job.at_least("2.4") and job.launcher != "spawn":
        return [f"[rank{p.rank}]: {line}" for line in lines]
    return lines


def sp(job: Job, rel: str) -> str:
    return f"{job.site_packages}/{rel}"


def user_frames(job: Job, *, depth: int = 2) -> list[Frame]:
    """The training script's own frames (the outermost ones)."""
    fn = job.rng.choice(("train", "train_one_epoch", "run", "fit", "train_step"))
    frames: list[Frame] = [
        (f"{job.workdir}/{job.script}", job.rng.randint(180, 620), "<module>", "main()"),
        (f"{job.workdir}/{job.script}", job.rng.randint(60, 170), "main", f"{fn}(args, model, loader, optimizer)"),
    ]
    if depth > 2:
        frames.append((f"{job.workdir}/{job.script}", job.rng.randint(20, 59), fn, "loss = step(model, batch)"))
    return frames


def framework_frames(job: Job) -> list[Frame]:
    """Frames of the wrapper framework the job ran under (Lightning, accelerate, HF Trainer, DeepSpeed)."""
    r = job.rng
    if job.launcher == "lightning" or job.framework_noise == "lightning":
        pkg = r.choice(("pytorch_lightning", "lightning/pytorch"))
        return [
            (sp(job, f"{pkg}/trainer/trainer.py"), r.choice((538, 544, 579)), "fit", "call._call_and_handle_interrupt("),
            (sp(job, f"{pkg}/trainer/call.py"), r.choice((43, 44, 47)), "_call_and_handle_interrupt", "return trainer_fn(*args, **kwargs)"),
            (sp(job, f"{pkg}/trainer/trainer.py"), r.choice((574, 580, 981)), "_fit_impl", "self._run(model, ckpt_path=ckpt_path)"),
            (sp(job, f"{pkg}/trainer/trainer.py"), r.choice((1025, 1030)), "_run_stage", "self.fit_loop.run()"),
        ]
    if job.framework_noise == "hf":
        return [
            (sp(job, "transformers/trainer.py"), r.choice((1537, 1859, 2123)), "train", "return inner_training_loop("),
            (sp(job, "transformers/trainer.py"), r.choice((1929, 2198, 2481)), "_inner_training_loop", "tr_loss_step = self.training_step(model, inputs)"),
        ]
    if job.launcher == "accelerate":
        return [(sp(job, "accelerate/accelerator.py"), r.choice((1905, 2011, 2246)), "backward", "loss.backward(**kwargs)")]
    if job.launcher == "deepspeed":
        return [
            (sp(job, "deepspeed/utils/nvtx.py"), 15, "wrapped_fn", "ret_val = func(*args, **kwargs)"),
            (sp(job, "deepspeed/runtime/engine.py"), r.choice((1842, 1976, 2087)), "forward", "loss = self.module(*inputs, **kwargs)"),
        ]
    return []


def ddp_forward_frames(job: Job) -> list[Frame]:
    r = job.rng
    return [
        (sp(job, "torch/nn/modules/module.py"), r.choice((1102, 1194, 1501, 1511, 1736)), "_call_impl", "return forward_call(*args, **kwargs)"),
        (sp(job, "torch/nn/parallel/distributed.py"), r.choice((886, 1156, 1519, 1643)), "forward", "output = self._run_ddp_forward(*inputs, **kwargs)"),
    ]


def init_frames(job: Job, *, to_store: bool = True) -> list[Frame]:
    """init_process_group down to where the store is created (release-specific lines)."""
    r = job.rng
    frames: list[Frame] = [(f"{job.workdir}/{job.script}", r.randint(30, 90), "setup", "dist.init_process_group(backend=\"nccl\")")]
    if job.at_least("2.4"):
        frames.append((sp(job, "torch/distributed/c10d_logger.py"), r.choice((79, 83, 81)), "wrapper", "return func(*args, **kwargs)"))
    frames.append(
        (sp(job, "torch/distributed/distributed_c10d.py"), r.choice((602, 754, 900, 1148, 1520, 1710)), "init_process_group", "store, rank, world_size = next(rendezvous_iterator)")
    )
    if to_store:
        frames.append((sp(job, "torch/distributed/rendezvous.py"), r.choice((245, 246, 258, 269)), "_env_rendezvous_handler", "store = _create_c10d_store(master_addr, master_port, rank, world_size, timeout, use_libuv)" if job.at_least("2.4") else "store = _create_c10d_store(master_addr, master_port, rank, world_size, timeout)"))
        frames.append((sp(job, "torch/distributed/rendezvous.py"), r.choice((176, 185, 189)), "_create_c10d_store", "return TCPStore("))
    return frames


# -- launcher summaries --------------------------------------------------------------------


def child_failed_table(job: Job, t: float, failures: list[tuple[Proc, int, str]], root: tuple[Proc, int, str]) -> list[str]:
    """torchrun's ChildFailedError block: ``failures`` and the root cause, each (proc, exitcode, traceback text)."""
    stamp = job.ts(t)
    sig_names = {-9: "SIGKILL", -6: "SIGABRT", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS", -4: "SIGILL"}

    def entry(idx: int, p: Proc, code: int, tb: str) -> list[str]:
        host = f"{p.node}.cluster.example" if job.fqdn else p.node
        sig = f" ({sig_names[code]})" if code < 0 and job.at_least("2.9") else ""
        exit_line = f"  exitcode  : {code} (pid: {p.pid}){sig}" if code != 0 else f"  exitcode  : {code} (pid: {p.pid})"
        if code > 0:
            exit_line = f"  exitcode  : {code} (pid: {p.pid})"
        if not tb:
            tb = (
                f"Signal {-code} ({sig_names.get(code, 'SIG?')}) received by PID {p.pid}"
                if code < 0
                else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
            )
        return [
            f"[{idx}]:",
            f"  time      : {stamp:%Y-%m-%d_%H:%M:%S}",
            f"  host      : {host}",
            f"  rank      : {p.rank} (local_rank: {p.local})",
            exit_line,
            "  error_file: <N/A>",
            f"  traceback : {tb}",
        ]

    border = "=" * 60
    lines = [
        "Traceback (most recent call last):",
        f'  File "{job.python_bin.replace("/python", "/torchrun")}", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{sp(job, "torch/distributed/elastic/multiprocessing/errors/__init__.py")}", line {job.rng.choice((346, 355, 357))}, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{sp(job, "torch/distributed/run.py")}", line {job.rng.choice((794, 806, 812, 892))}, in main',
        "    run(args)",
        f'  File "{sp(job, "torch/distributed/run.py")}", line {job.rng.choice((785, 797, 803, 883))}, in run',
        "    elastic_launch(",
        f'  File "{sp(job, "torch/distributed/launcher/api.py")}", line {job.rng.choice((134, 138, 139))}, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{sp(job, "torch/distributed/launcher/api.py")}", line {job.rng.choice((250, 264, 270))}, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        border,
        f"{job.script} FAILED",
        "-" * 60,
        "Failures:",
    ]
    others = [f for f in failures if f[0].rank != root[0].rank]
    if others:
        for i, (p, code, tb) in enumerate(others, 1):
            lines += entry(i, p, code, tb)
    else:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += ["-" * 60, "Root Cause (first observed failure):"]
    lines += entry(0, *root)
    lines.append(border)
    return lines


def torchrun_banner(job: Job, t: float, node_index: int) -> list[str]:
    """What torchrun prints when it starts more than one worker per node."""
    stars = "*" * 41
    msg = (
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being "
        "overloaded, please further tune the variable for optimal performance in your application as needed. "
    )
    if job.at_least("2.4"):
        head = glog(job, t, "W", "torch/distributed/run.py:793", 3000 + node_index, ns=False)
        return [head, head + stars, head + msg, head + stars]
    return ["WARNING:torch.distributed.run:", stars, msg, stars]


def agent_failed(job: Job, t: float, p: Proc, code: int) -> str:
    return agent_log(
        job, t, "E", "multiprocessing/api.py:" + str(job.const("api-failed", (719, 826, 833, 869, 874, 900))),
        f"failed (exitcode: {code}) local_rank: {p.local} (pid: {p.pid}) of binary: {job.python_bin}", 2900 + p.node_index
    )


def agent_sigterm(job: Job, t: float, p: Proc) -> str:
    return agent_log(job, t, "W", "multiprocessing/api.py:" + str(job.const("api-sigterm", (699, 897, 905))), f"Sending process {p.pid} closing signal SIGTERM", 2900 + p.node_index)


# -- SLURM ---------------------------------------------------------------------------------------


def slurmstepd(job: Job, node: str) -> str:
    return f"slurmstepd-{node}" if job.rng.random() < 0.5 else "slurmstepd"


def srun_exit(job: Job, node_index: int, tasks: list[int], what: str) -> str:
    """``srun: error: node01: tasks 0-3: Terminated`` (task ranges in SLURM's compact form)."""
    tasks = sorted(tasks)
    if len(tasks) == 1:
        return f"srun: error: {job.nodes[node_index]}: task {tasks[0]}: {what}"
    ranges: list[str] = []
    start = prev = tasks[0]
    for x in tasks[1:] + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        ranges.append(f"{start}-{prev}" if prev != start else f"{start}")
        if x is not None:
            start = prev = x
    return f"srun: error: {job.nodes[node_index]}: tasks {','.join(ranges)}: {what}"


def slurm_task_ids(job: Job, procs: list[Proc]) -> dict[int, list[int]]:
    """srun task ids per node index: ranks under srun, node indexes under srun+torchrun."""
    per: dict[int, list[int]] = {}
    for p in procs:
        task = p.rank if job.launcher == "srun" else p.node_index
        if task not in per.setdefault(p.node_index, []):
            per[p.node_index].append(task)
    return per


# -- NCCL -----------------------------------------------------------------------------------------


def nccl_info(job: Job, p: Proc, msg: str) -> str:
    dev = p.local if job.rng.random() < 0.7 else 0
    return f"{p.node}:{p.pid}:{p.tid} [{dev}] NCCL INFO {msg}"


def nccl_warn(job: Job, p: Proc, t: float, where: str, msg: str, func: str = "") -> list[str]:
    """A WARN line in the form of the job's NCCL release (leading blank line, timestamp >= 2.26, func >= 2.30)."""
    stamp = f"[{job.ts(t):%Y-%m-%d %H:%M:%S}] " if job.nccl_at_least("2.26.0") else ""
    fn = f" ({func})" if func and job.nccl_at_least("2.30.0") else ""
    if not job.nccl_at_least("2.5.0"):
        return ["", f"{where} NCCL WARN {msg}"]
    return ["", f"{stamp}{p.node}:{p.pid}:{p.tid} [{p.local}] {where}{fn} NCCL WARN {msg}"]


def nccl_init_lines(job: Job, p: Proc, *, net: str = "IB", iface: str = "ib0", addr: str | None = None) -> list[str]:
    """NCCL_DEBUG=INFO start-up lines of one rank."""
    ip = addr or job.ip(p.node_index, "10.1" if iface.startswith("ib") else "10.0")
    lines = []
    if p.rank == 0:
        lines.append(nccl_info(job, p, f"NCCL version {job.nccl}+cuda{job.const('cuda', ('11.8', '12.1', '12.2', '12.4'))}"))
    lines.append(nccl_info(job, p, f"Bootstrap : Using {iface}:{ip}<0>"))
    lines.append(nccl_info(job, p, "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation" if job.nccl_at_least("2.12.0") else "NET/Plugin : No plugin found (libnccl-net.so)."))
    if net == "IB":
        lines.append(nccl_info(job, p, f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB {iface}:{ip}<0>"))
        lines.append(nccl_info(job, p, "Using network IB"))
    else:
        if job.rng.random() < 0.5:
            lines.append(nccl_info(job, p, "NET/IB : No device found."))
        lines.append(nccl_info(job, p, f"NET/Socket : Using [0]{iface}:{ip}<0>"))
        lines.append(nccl_info(job, p, "Using network Socket"))
    comm = f"0x{job.rng.randint(0x5500000000, 0x56ffffffff):x}"
    bus = job.rng.choice(("1b000", "4d000", "9b000", "c3000", "e1000"))
    if job.nccl_at_least("2.21.0"):
        lines.append(nccl_info(job, p, f"ncclCommInitRank comm {comm} rank {p.rank} nranks {job.world} cudaDev {p.local} nvmlDev {p.local} busId {bus} commId 0x{job.rng.getrandbits(60):x} - Init COMPLETE"))
    elif job.nccl_at_least("2.16.0"):
        lines.append(nccl_info(job, p, f"comm {comm} rank {p.rank} nranks {job.world} cudaDev {p.local} busId {bus} commId 0x{job.rng.getrandbits(60):x} - Init COMPLETE"))
    else:
        lines.append(nccl_info(job, p, f"comm {comm} rank {p.rank} nranks {job.world} cudaDev {p.local} busId {bus} - Init COMPLETE"))
    return lines


def nccl_error_text(job: Job, kind: str, last: str | None = None) -> str:
    """ProcessGroupNCCL's 'NCCL error in:' exception text for an ncclResult kind."""
    loc = job.rng.choice(("../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", "/opt/pytorch/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp"))
    line = job.rng.choice((1191, 1269, 1331, 1727, 2006, 3141))
    short = {
        "system": "unhandled system error",
        "internal": "internal error",
        "usage": "invalid usage",
        "cuda": "unhandled cuda error",
        "remote": "remote process exited or there was a network error",
        "argument": "invalid argument",
    }[kind]
    if job.nccl_at_least("2.18.0"):
        short += {
            "system": " (run with NCCL_DEBUG=INFO for details)",
            "cuda": " (run with NCCL_DEBUG=INFO for details)",
            "internal": " - please report this issue to the NCCL developers",
            "usage": " (run with NCCL_DEBUG=WARN for details)",
            "argument": " (run with NCCL_DEBUG=WARN for details)",
        }.get(kind, "")
    text = f"NCCL error in: {loc}:{line}, {short}, NCCL version {job.nccl}"
    if job.at_least("1.13"):
        long = {
            "system": "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
            "internal": "ncclInternalError: Internal check failed.",
            "usage": "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
            "cuda": "ncclUnhandledCudaError: Call to CUDA function failed.",
            "remote": "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
            "argument": "ncclInvalidArgument: Invalid value for an argument.",
        }[kind]
        text += "\n" + long
        if last is not None:
            text += "\nLast error:\n" + last
    return text


# -- noise ----------------------------------------------------------------------------------------


def progress_line(job: Job, step: int, total: int, epoch: int) -> str:
    r = job.rng
    loss = max(0.05, 3.2 * (0.9997**step) + r.uniform(-0.08, 0.08))
    style = job.framework_noise
    if style == "hf":
        return f"{{'loss': {loss:.4f}, 'grad_norm': {r.uniform(0.3, 4):.4f}, 'learning_rate': {3e-4 * (1 - step / (total * 3)):.3e}, 'epoch': {epoch + step / total:.2f}}}"
    if style == "lightning":
        pct = int(100 * step / total)
        bar = "█" * (pct // 10) + " " * (10 - pct // 10)
        return f"Epoch {epoch}:  {pct:>2d}%|{bar}| {step}/{total} [{step // 60:02d}:{step % 60:02d}<{(total - step) // 60:02d}:{(total - step) % 60:02d}, {r.uniform(1.5, 9):.2f}it/s, v_num=0, train_loss={loss:.3f}]"
    if style == "tqdm":
        pct = int(100 * step / total)
        return f"{pct:>3d}%|{'#' * (pct // 10):<10}| {step}/{total} [{step // 60:02d}:{step % 60:02d}<{(total - step) // 30:02d}:{step % 59:02d}, {r.uniform(1.5, 9):.2f}it/s]"
    if style == "json":
        return f'{{"step": {step}, "epoch": {epoch}, "loss": {loss:.4f}, "lr": {3e-4:.1e}, "tokens_per_s": {r.randint(20000, 90000)}}}'
    return f"epoch {epoch} step {step:>6d}/{total} | loss {loss:.4f} | lr {3e-4 * (1 - step / (total * 3)):.2e} | {r.uniform(80, 400):.1f} samples/s"


def benign_warnings(job: Job) -> list[list[str]]:
    """Harmless warnings real runs print (each a block), from the catalogue's 'unknown / none' list."""
    r = job.rng
    warns: list[list[str]] = [
        [f"{sp(job, 'torch/_utils.py')}:{r.choice((776, 831))}: UserWarning: TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only storage class. This should only matter to you if you are using storages directly.  To access UntypedStorage directly, use tensor.untyped_storage() instead of tensor.storage()", "  return self.fget.__get__(instance, owner)()"],
        [f"{sp(job, 'torch/cuda/amp/grad_scaler.py')}:{r.choice((120, 126))}: FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.", "  warnings.warn("],
        [f"{sp(job, 'torch/utils/data/dataloader.py')}:{r.choice((557, 558, 617))}: UserWarning: This DataLoader will create 16 worker processes in total. Our suggested max number of worker in current system is 8, which is smaller than what this DataLoader is going to create. Please be aware that excessive worker creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential slowness/freeze if necessary.", "  warnings.warn(_create_warning_msg("],
        [f"{sp(job, 'torch/nn/modules/conv.py')}:{r.choice((456, 459))}: UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered internally at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:919.)", "  return F.conv2d(input, weight, bias, self.stride,"],
        [f"{sp(job, 'torch/autograd/graph.py')}:{r.choice((744, 768, 825))}: UserWarning: Grad strides do not match bucket view strides. This may indicate grad was not created according to the gradient layout contract, or that the param's strides changed since DDP was constructed.  This is not an error, but may impair performance.", "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"],
        ["wandb: WARNING Serializing object of type dict that is 124520 bytes", "wandb: WARNING Step cannot be set when using syncing with tensorboard. Please log your step values as a metric such as 'global_step'"],
        [f"{sp(job, 'torch/distributed/distributed_c10d.py')}:{r.choice((2566, 4807))}: UserWarning: No device id is provided via `init_process_group` or `barrier `. Using the current device set by the user. ", "  warnings.warn(  # warn only once"],
    ]
    if job.at_least("2.1"):
        warns.append(["[W reducer.cpp:1346] Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters in the forward pass. This flag results in an extra traversal of the autograd graph every iteration,  which can adversely affect performance. If your model indeed never has any unused parameters in the forward pass, consider turning this flag off. Note that this warning may be a false positive if your model has flow control causing later iterations to have unused parameters. (function operator())"])
    return warns


def framework_preamble(job: Job, p: Proc) -> list[str]:
    """Start-up lines the wrapper framework prints on rank ``p``."""
    r = job.rng
    if job.launcher == "lightning" or job.framework_noise == "lightning":
        lines = [f"Initializing distributed: GLOBAL_RANK: {p.rank}, MEMBER: {p.rank + 1}/{job.world}"]
        if p.rank == 0:
            lines = [
                "GPU available: True (cuda), used: True",
                "TPU available: False, using: 0 TPU cores",
                "HPU available: False, using: 0 HPUs",
                f"[rank: 0] Seed set to {r.choice((42, 1234, 0, 7))}",
            ] + lines + [
                "-" * 100,
                "distributed_backend=nccl",
                f"All distributed processes registered. Starting with {job.world} processes",
                "-" * 100,
                "",
            ]
        lines.append(f"LOCAL_RANK: {p.local} - CUDA_VISIBLE_DEVICES: [{','.join(str(i) for i in range(job.gpus))}]")
        return lines
    if job.launcher == "deepspeed":
        d = job.ts(r.uniform(4, 9))
        stamp = f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}]"
        return [
            f"{stamp} [INFO] [comm.py:{r.choice((637, 652, 658))}:init_distributed] cdb=None",
            *([f"{stamp} [INFO] [comm.py:{r.choice((668, 683))}:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl"] if p.rank == 0 else []),
        ]
    if job.framework_noise == "hf" and p.rank == 0:
        return [
            f"{r.choice(('11/03/2023', '03/14/2024', '07/22/2024'))} 10:12:0{r.randint(0, 9)} - WARNING - __main__ - Process rank: {p.rank}, device: cuda:{p.local}, n_gpu: 1, distributed training: True, 16-bits training: True",
        ]
    return []


def deepspeed_preamble(job: Job, t: float) -> list[str]:
    r = job.rng
    d = job.ts(t)
    stamp = f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}]"
    hosts = {n: list(range(job.gpus)) for n in (job.nodes if len(job.nodes) > 1 else ["localhost"])}
    return [
        f"{stamp} [INFO] [real_accelerator.py:{r.choice((158, 191, 203))}:get_accelerator] Setting ds_accelerator to cuda (auto detect)",
        f"{stamp} [INFO] [runner.py:{r.choice((555, 568, 607))}:main] cmd = {job.python_bin} -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMF19 --master_addr=127.0.0.1 --master_port={job.master_port} --enable_each_rank_log=None {job.script} --deepspeed ds_config.json",
        f"{stamp} [INFO] [launch.py:{r.choice((138, 145, 146))}:main] WORLD INFO DICT: {hosts}",
        f"{stamp} [INFO] [launch.py:{r.choice((151, 152))}:main] nnodes={len(job.nodes)}, num_local_procs={job.gpus}, node_rank=0",
        f"{stamp} [INFO] [launch.py:{r.choice((163, 164))}:main] dist_world_size={job.world}",
        f"{stamp} [INFO] [launch.py:{r.choice((165, 166))}:main] Setting CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(job.gpus))}",
    ]


def accelerate_preamble() -> list[str]:
    return [
        "The following values were not passed to `accelerate launch` and had defaults used instead:",
        "\t`--num_machines` was set to a value of `1`",
        "\t`--mixed_precision` was set to a value of `'no'`",
        "\t`--dynamo_backend` was set to a value of `'no'`",
        "To avoid this warning pass in values for each of the problematic parameters or run `accelerate config`.",
    ]
