#!/usr/bin/env python3
"""synth.py -- realistic multi-rank, multi-node training-job output with an injected failure cascade.

For what a CPU machine cannot run: NCCL on GPUs, many nodes, hundreds of ranks,
gigabytes of output. One rank (or node) fails in a chosen way and every other
rank prints what real victims print: NCCL watchdog timeouts with SeqNum/OpType/
NumelIn, remote-error aborts, the launcher's teardown and failure tables, srun's
exit lines. Line formats are the real ones (docs/log-formats.md; NCCL
src/debug.cc, init.cc, bootstrap.cc and net_socket.cc at the versions named;
ProcessGroupNCCL.cpp strings as printed by PyTorch 2.6-2.7; torchrun's
elastic/multiprocessing; SLURM's srun/slurmstepd).

Library (the CLI is a thin layer over it):

    spec = JobSpec(ranks=64, nodes=8, layout="srun", failure="hang", seed=3)
    for name, line in lines(spec): ...            # every output line, in write order
    paths = write(spec, "out/")                    # the job's files
    case = write_case(spec, "corpus/")             # the files + case.toml (corpus/README.md)
    truth(spec)                                    # label, category, first failure

CLI:

    synth.py --ranks 64 --nodes 8 --layout srun --failure hang --seed 3 --out DIR [--case]
    synth.py --list

Layouts: ``srun`` (one slurm-<job>.out, ``srun --label``, one task per rank),
``srun-torchrun`` (one slurm-<job>.out, srun starts one ``torchrun --tee 3`` per
node), ``torchrun`` (one file per node, no labels), ``per-rank`` (srun
``--output=rank-%t.out``: one file per rank plus slurm-<job>.out).
``size`` pads the training phase until the output reaches that many bytes.
Everything is decided by ``seed``: the same spec always gives the same bytes.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path

from logsleuth.hostlist import collect_ranges

#: failure -> (label, what happens); the label is a taxonomy id (docs/taxonomy.md).
FAILURES: dict[str, tuple[str, str]] = {
    "none": ("none", "a clean run: training finishes"),
    "exception": ("user_code_error", "the culprit rank raises a ValueError in user code; peers see NCCL remote errors"),
    "segfault": ("crash_signal", "the culprit rank dies of SIGSEGV without a word; peers see NCCL remote errors"),
    "oom": ("host_oom", "the cgroup OOM killer kills the culprit rank; peers see NCCL remote errors"),
    "sigkill": ("crash_signal", "the culprit rank is SIGKILLed with no memory evidence; peers see NCCL remote errors"),
    "hang": ("collective_timeout", "the culprit rank stops before a collective; the others' watchdogs time out on it"),
    "mismatch": ("collective_mismatch", "the culprit rank issues another collective than the others at one SeqNum; all time out"),
    "nccl_version": ("version_mismatch", "one node runs another NCCL release; NCCL refuses to initialise"),
    "docker0": ("nccl_wrong_interface", "the culprit rank's NCCL binds docker0 (172.17.0.1); its peer cannot connect"),
}
LAYOUTS = ("srun", "srun-torchrun", "torchrun", "per-rank")
_OPS = ("ALLREDUCE", "ALLREDUCE", "ALLGATHER", "_REDUCE_SCATTER_BASE", "BROADCAST")
_SITE = "/opt/conda/lib/python3.11/site-packages"


@dataclass(frozen=True)
class JobSpec:
    """Everything that shapes one synthetic job; defaults give a small 16-rank job."""

    ranks: int = 16
    nodes: int = 2
    layout: str = "srun"
    failure: str = "exception"
    culprit: int | None = None  # the faulty rank; default drawn from the seed
    odd_node: int | None = None  # node index for nccl_version; default the culprit's node
    seed: int = 0
    steps: int = 20  # training steps logged before the failure
    size: int | None = None  # pad the training phase until the output has this many bytes
    noise: float = 0.05  # share of harmless warnings among progress lines
    interleave: float = 0.0  # chance that a line swaps places with the one before it in its file
    nccl_version: str = "2.26.2"
    odd_nccl_version: str = "2.27.3"
    cuda: str = "12.6"
    driver: int = 12080
    timeout_ms: int = 600000
    clock_skew: float = 0.0  # each node's clock is off by up to this many seconds (NTP gone wrong)
    peer_symptom: str = "remote-error"  # how peers of a dead rank notice: remote-error | timeout (NCCL never saw the death)
    job_id: int = 4242
    host_prefix: str = "gpu"
    start: str = "2026-03-14T09:26:53"

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.nodes < 1 or self.ranks % self.nodes:
            raise ValueError(f"ranks ({self.ranks}) must be a positive multiple of nodes ({self.nodes})")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
        if self.failure not in FAILURES:
            raise ValueError(f"failure must be one of {', '.join(FAILURES)}")
        if self.culprit is not None and not 0 <= self.culprit < self.ranks:
            raise ValueError(f"culprit must be a rank in 0..{self.ranks - 1}")
        if self.peer_symptom not in ("remote-error", "timeout"):
            raise ValueError("peer_symptom must be remote-error or timeout")
        if self.failure in ("hang", "mismatch", "docker0") and self.ranks < 2:
            raise ValueError(f"{self.failure} needs at least 2 ranks")


@dataclass(frozen=True)
class Truth:
    """What really happened: the labels a corpus case records."""

    label: str
    category: str
    rank: int | None
    node: str | None
    clock_skew_s: dict[str, float] = field(default_factory=dict)  # host -> how far its clock is off


@dataclass
class _Rec:
    """One line before layout: who wrote it, through which channel, and its text."""

    t: datetime
    rank: int | None  # a worker's global rank; None for launcher/SLURM lines
    node: int | None  # node index (launcher lines, slurmstepd)
    channel: str  # worker | agent | srun | stepd
    text: str


class _Job:
    """The simulated job: hosts, pids, addresses and a clock, all drawn from the seed."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.per_node = spec.ranks // spec.nodes
        width = max(3, len(str(spec.nodes)))
        self.hosts = [f"{spec.host_prefix}{i + 1:0{width}d}" for i in range(spec.nodes)]
        self.ips = [f"10.{16 + i // 250}.{i % 250}.{self.rng.randrange(2, 250)}" for i in range(spec.nodes)]
        self.pids = [self.rng.randrange(20000, 4000000) for _ in range(spec.ranks)]
        self.agent_pids = [self.rng.randrange(20000, 4000000) for _ in range(spec.nodes)]
        self.culprit = spec.culprit if spec.culprit is not None else self.rng.randrange(spec.ranks)
        self.odd = spec.odd_node if spec.odd_node is not None else self.node(self.culprit)
        self.t = datetime.fromisoformat(spec.start)
        self.comm_id = f"0x{self.rng.getrandbits(64):016x}"
        self.skew = [
            timedelta(seconds=self.rng.uniform(-spec.clock_skew, spec.clock_skew)) if i else timedelta(0) for i in range(spec.nodes)
        ]
        self.seq = 0
        self.out_bytes = 0  # updated by the renderer: how much has been written so far

    def node(self, rank: int) -> int:
        return rank // self.per_node

    def local(self, rank: int) -> int:
        return rank % self.per_node

    def tick(self, seconds: float) -> datetime:
        self.t += timedelta(seconds=seconds * (0.8 + 0.4 * self.rng.random()))
        return self.t

    def nccl_of(self, rank: int) -> str:
        odd = self.spec.failure == "nccl_version" and self.node(rank) == self.odd
        return self.spec.odd_nccl_version if odd else self.spec.nccl_version

    # -- line formats -------------------------------------------------------------------------

    def clock(self, t: datetime, node: int) -> datetime:
        """What ``node``'s own clock says at true time ``t`` (node 0 keeps true time)."""
        return t + self.skew[node]

    def nccl(self, rank: int, msg: str, *, warn: str | None = None, t: datetime | None = None) -> str:
        """``host:pid:tid [dev] NCCL INFO msg``; WARN lines carry ``file:line`` and, from 2.26, a stamp."""
        host, pid, dev = self.hosts[self.node(rank)], self.pids[rank], self.local(rank)
        tid = pid if warn is None else pid + 1 + self.rng.randrange(400)
        if warn is None:
            return f"{host}:{pid}:{tid} [{dev}] NCCL INFO {msg}"
        stamp = f"[{self.clock(t or self.t, self.node(rank)):%Y-%m-%d %H:%M:%S}] " if _ver(self.nccl_of(rank)) >= (2, 26) else ""
        return f"{stamp}{host}:{pid}:{tid} [{dev}] {warn} NCCL WARN {msg}"

    def c10(self, rank: int, level: str, where: str, msg: str, t: datetime | None = None) -> str:
        """PyTorch's C++ log line (c10 glog style, nanoseconds, no pid) with its ``[rankN]:`` prefix."""
        t = self.clock(t or self.t, self.node(rank))
        return f"[rank{rank}]:[{level}{t.month}{t:%d %H:%M:%S}.{t.microsecond:06d}{self.rng.randrange(1000):03d} {where}] {msg}"

    def glog(self, level: str, node: int, where: str, msg: str, t: datetime | None = None) -> str:
        """torchrun's Python logging header: ``W0314 09:27:00.123000 4242 torch/.../api.py:1028] msg``."""
        t = self.clock(t or self.t, node)
        return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {self.agent_pids[node]} {where}] {msg}"


def _ver(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2])


def _code(version: str) -> int:
    major, minor, patch = (int(p) for p in version.split("."))
    return major * 10000 + minor * 100 + patch


def truth(spec: JobSpec) -> Truth:
    """The ground truth of a spec (what a corpus case's case.toml says)."""
    job = _Job(spec)
    label = FAILURES[spec.failure][0]
    skew = {h: d.total_seconds() for h, d in zip(job.hosts, job.skew, strict=True) if d}
    if spec.failure == "none":
        return Truth(label, label, None, None, skew)
    if spec.failure == "nccl_version":
        return Truth(label, label, None, job.hosts[job.odd], skew)
    return Truth(label, label, job.culprit, job.hosts[job.node(job.culprit)], skew)


# -- the story, in time order -----------------------------------------------------------------


def _story(job: _Job) -> Iterator[_Rec]:
    """All lines of the job as records, in the order they happen."""
    yield from _init(job)
    if job.spec.failure in ("nccl_version", "docker0"):
        yield from _init_failure(job)
        return
    yield from _training(job)
    yield from _failure(job)


def _init(job: _Job) -> Iterator[_Rec]:
    s, rng = job.spec, job.rng
    for n in range(s.nodes) if s.layout in ("srun-torchrun", "torchrun") else ():
        t = job.tick(0.01)
        banner = "*" * 41
        for msg in (
            "",
            banner,
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being "
            "overloaded, please further tune the variable for optimal performance in your application as needed.",
            banner,
        ):
            yield _Rec(t, None, n, "agent", job.glog("W", n, f"{_SITE}/torch/distributed/run.py:792", msg, t))
    job.tick(4.0)
    for r in rng.sample(range(s.ranks), s.ranks):
        t = job.tick(0.002)
        node = job.node(r)
        version = job.nccl_of(r)
        odd_if = s.failure == "docker0" and r == job.culprit
        iface, ip = ("docker0", "172.17.0.1") if odd_if else ("eth0", job.ips[node])
        if r == 0 or _ver(version) >= (2, 22):  # before 2.22 only a communicator's rank 0 shows its version
            yield _Rec(t, r, node, "worker", job.nccl(r, f"NCCL version {version}+cuda{s.cuda}"))
        yield _Rec(t, r, node, "worker", job.nccl(r, f"cudaDriverVersion {s.driver}"))
        yield _Rec(t, r, node, "worker", job.nccl(r, f"Bootstrap : Using {iface}:{ip}<0>"))
        yield _Rec(t, r, node, "worker", job.nccl(r, "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."))
        yield _Rec(t, r, node, "worker", job.nccl(r, "NET/IB : No device found."))
        yield _Rec(t, r, node, "worker", job.nccl(r, f"NET/Socket : Using [0]{iface}:{ip}<0>"))
        yield _Rec(t, r, node, "worker", job.nccl(r, "Using network Socket"))
    if s.failure in ("nccl_version", "docker0"):
        return
    job.tick(1.5)
    for r in rng.sample(range(s.ranks), s.ranks):
        t = job.tick(0.001)
        bus = f"{0x18 + 0x10 * job.local(r):x}000"
        msg = (
            f"ncclCommInitRank comm 0x{rng.getrandbits(44):x} rank {r} nranks {s.ranks} cudaDev {job.local(r)} "
            f"nvmlDev {job.local(r)} busId {bus} commId {job.comm_id} - Init COMPLETE"
        )
        yield _Rec(t, r, job.node(r), "worker", job.nccl(r, msg))
    for r in rng.sample(range(s.ranks), s.ranks):
        t = job.tick(0.001)
        msg = (
            f"[PG ID 0 PG GUID 0 Rank {r}]  using GPU {job.local(r)} to perform barrier as devices used by this process are "
            "currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect. Specify device_ids "
            "in barrier() to force use of a particular device, or call init_process_group() with a device_id."
        )
        yield _Rec(t, r, job.node(r), "worker", job.c10(r, "W", "ProcessGroupNCCL.cpp:4561", msg, t))
    job.seq = 1


def _training(job: _Job) -> Iterator[_Rec]:
    """Progress lines from rank 0 (and harmless warnings), until ``steps`` or the size target."""
    s, rng = job.spec, job.rng
    step = 0
    loss = 10.5
    while step < s.steps or (s.size is not None and job.out_bytes < s.size):
        step += 1
        t = job.tick(1.2)
        job.seq += 2  # gradients all-reduce and a loss all-reduce per step
        loss = max(1.2, loss * (0.985 + 0.01 * rng.random()))
        text = (
            f"{job.clock(t, 0):%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - train - INFO - step {step} | loss {loss:.4f} | "
            f"lr {min(3e-4, 3e-4 * step / 200):.2e} | grad_norm {0.5 + rng.random():.3f} | tok/s {int(150000 + 20000 * rng.random())}"
        )
        yield _Rec(t, 0, 0, "worker", text)
        if rng.random() < s.noise:
            r = rng.randrange(s.ranks)
            yield _Rec(
                t,
                r,
                job.node(r),
                "worker",
                f"{_SITE}/torch/utils/checkpoint.py:87: UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
            )
            yield _Rec(t, r, job.node(r), "worker", "  warnings.warn(")


def _traceback(rank: int, frames: list[tuple[str, int, str, str]], exc: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return [f"[rank{rank}]: {x}" for x in [*out, *exc.split("\n")]]


_TRAIN_FRAMES = [
    ("/home/user/train.py", 312, "<module>", "main()"),
    ("/home/user/train.py", 287, "main", "loss = train_step(model, batch, optimizer)"),
]
_REDUCE_FRAMES = [
    *_TRAIN_FRAMES,
    ("/home/user/train.py", 201, "train_step", "dist.all_reduce(loss_t)"),
    (f"{_SITE}/torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"),
    (f"{_SITE}/torch/distributed/distributed_c10d.py", 2806, "all_reduce", "work.wait()"),
]


def _remote_error(job: _Job, r: int, peer: int) -> Iterator[_Rec]:
    """A victim of a dead peer: the watchdog sees ncclRemoteError and takes the process down."""
    t = job.tick(0.003)
    peer_ip = job.ips[job.node(peer)]
    yield _Rec(t, r, job.node(r), "worker", "")
    yield _Rec(
        t,
        r,
        job.node(r),
        "worker",
        job.nccl(
            r,
            f"socketProgressOpt: Call to recv from {peer_ip}<{40000 + peer}> failed : Connection reset by peer",
            warn="misc/socket.cc:70",
            t=t,
        ),
    )
    prefix = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    what = (
        f"{prefix} Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
        f"network error, NCCL version {job.nccl_of(r)}"
    )
    for where, msg in (
        (
            "ProcessGroupNCCL.cpp:1896",
            f"{prefix} Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version {job.nccl_of(r)}",
        ),
        (
            "ProcessGroupNCCL.cpp:681",
            f"[Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        ),
        ("ProcessGroupNCCL.cpp:695", f"[Rank {r}] To avoid data inconsistency, we are taking the entire process down."),
    ):
        yield _Rec(t, r, job.node(r), "worker", job.c10(r, "E", where, msg, t))
    for text in (
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {what}",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        f"socketProgressOpt: Call to recv from {peer_ip}<{40000 + peer}> failed : Connection reset by peer",
        "Exception raised from checkForNCCLErrorsInternal at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2363 (most recent call first):",
    ):
        yield _Rec(t, r, job.node(r), "worker", text)


def _failure(job: _Job) -> Iterator[_Rec]:
    s, rng, c = job.spec, job.rng, job.culprit
    if s.failure == "none":
        t = job.tick(2.0)
        yield _Rec(
            t, 0, 0, "worker", f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - train - INFO - training finished: {s.steps} steps"
        )
        return
    t = job.tick(1.0)
    others = [r for r in range(s.ranks) if r != c]
    if s.failure == "exception":
        exc = f"ValueError: could not convert label 'n/a' of sample {rng.randrange(10**6)} to float"
        frames = [*_TRAIN_FRAMES, ("/home/user/data.py", 88, "__getitem__", "y = float(row['label'])")]
        for text in _traceback(c, frames, exc):
            yield _Rec(t, c, job.node(c), "worker", text)
    if s.failure in ("exception", "segfault", "oom", "sigkill") and s.peer_symptom == "remote-error":
        job.tick(0.05)
        for r in rng.sample(others, len(others)):
            yield from _remote_error(job, r, c)
        yield from _ends(job, dead={c: s.failure, **dict.fromkeys(others, "abort")})
        return
    died = s.failure in ("exception", "segfault", "oom", "sigkill")
    if died and s.layout in ("torchrun", "srun-torchrun"):
        # torchrun notices the death and stops the others before NCCL does: they print nothing
        yield from _ends(job, dead={c: s.failure})
        return
    reported: set[int] = set()
    if died:  # srun reports the death when it happens, long before the others time out
        yield from _death_report(job, c, s.failure)
        reported.add(c)
    # hang / mismatch, or a death the peers never noticed: the others enter SeqNum S and wait for the culprit
    seq = job.seq + 1
    op, numel = rng.choice(_OPS), rng.choice([1, 2048, 4194304, 262144000])
    odd_op = rng.choice([o for o in _OPS if o != op])
    wait_ms = s.timeout_ms
    job.t += timedelta(milliseconds=wait_ms)
    timed_out = list(range(s.ranks)) if s.failure == "mismatch" else others
    fired = rng.choice(timed_out)
    for r in sorted(timed_out, key=lambda x: (x != fired, rng.random())):
        t = job.tick(0.002)
        this_op = odd_op if (s.failure == "mismatch" and r == c) else op
        work = f"WorkNCCL(SeqNum={seq}, OpType={this_op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={s.timeout_ms})"
        prefix = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
        for where, msg in (
            (
                "ProcessGroupNCCL.cpp:632",
                f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {wait_ms + rng.randrange(1, 90)} milliseconds before timing out.",
            ),
            (
                "ProcessGroupNCCL.cpp:2271",
                f"{prefix}  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}",
            ),
            (
                "ProcessGroupNCCL.cpp:670",
                "Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
            ),
        ):
            yield _Rec(t, r, job.node(r), "worker", job.c10(r, "E", where, msg, t))
        if r == fired:
            yield _Rec(
                t,
                r,
                job.node(r),
                "worker",
                job.c10(r, "E", "ProcessGroupNCCL.cpp:2106", f"{prefix} First PG on this rank to signal dumping.", t),
            )
    if s.failure == "hang":
        t = job.tick(1.0)
        enq = seq - 1
        msg = (
            f"[PG ID 0 PG GUID 0(default_pg) Rank {c}] Received a dump signal due to a collective timeout from  rank {fired} and we will "
            f"try our best to dump the debug info. Last enqueued NCCL work: {enq}, last completed NCCL work: {enq}.This is most likely "
            "caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for "
            "all ranks or the scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or "
            "other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc. "
        )
        yield _Rec(t, c, job.node(c), "worker", job.c10(c, "E", "ProcessGroupNCCL.cpp:1595", msg, t))
    job.tick(1.0)
    for r in timed_out:
        t = job.tick(0.001)
        prefix = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
        yield _Rec(
            t,
            r,
            job.node(r),
            "worker",
            job.c10(
                r, "E", "ProcessGroupNCCL.cpp:695", f"[Rank {r}] To avoid data inconsistency, we are taking the entire process down.", t
            ),
        )
        yield _Rec(t, r, job.node(r), "worker", "terminate called after throwing an instance of 'c10::DistBackendError'")
        yield _Rec(
            t,
            r,
            job.node(r),
            "worker",
            f"  what():  {prefix} Process group watchdog thread terminated with exception: [Rank {r}] Watchdog caught collective operation timeout",
        )
    yield from _ends(job, dead=dict.fromkeys(timed_out, "abort"), hung=[c] if s.failure == "hang" else [], reported=reported)


def _init_failure(job: _Job) -> Iterator[_Rec]:
    """NCCL refuses to start: mismatched versions, or a peer bound to docker0."""
    s, rng, c = job.spec, job.rng, job.culprit
    job.tick(2.0)
    failing: dict[int, str] = {}
    for r in rng.sample(range(s.ranks), s.ranks):
        t = job.tick(0.002)
        if s.failure == "nccl_version":
            mine = job.nccl_of(r)
            peer = next(i for i in range(s.ranks) if job.nccl_of(i) != mine)
            last = f"Mismatched NCCL version detected : rank {peer} version {_code(job.nccl_of(peer))} rank {r} version {_code(mine)}"
            kind = "invalid usage (run with NCCL_DEBUG=WARN for details)"
            nccl_err = "ncclInvalidUsage: This usually reflects invalid usage of NCCL library."
            warn_at = "init.cc:714"
        elif r == (c - 1) % s.ranks:
            last = f"socketStartConnect: Connect to 172.17.0.1<{rng.randrange(30000, 60000)}> failed : Connection refused"
            kind = "unhandled system error (run with NCCL_DEBUG=INFO for details)"
            nccl_err = "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "
            warn_at = "misc/socket.cc:484"
        else:
            continue
        yield _Rec(t, r, job.node(r), "worker", "")
        yield _Rec(t, r, job.node(r), "worker", job.nccl(r, last, warn=warn_at, t=t))
        exc = (
            f"torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, {kind}, "
            f"NCCL version {job.nccl_of(r)}\n{nccl_err}\nLast error:\n{last}"
        )
        frames = [
            ("/home/user/train.py", 312, "<module>", "main()"),
            ("/home/user/train.py", 143, "main", "dist.barrier()"),
            (f"{_SITE}/torch/distributed/distributed_c10d.py", 4634, "barrier", "work = group.barrier(opts=opts)"),
        ]
        for text in _traceback(r, frames, exc):
            yield _Rec(t, r, job.node(r), "worker", text)
        failing[r] = "exit1"
    yield from _ends(job, dead=failing, hung=[])


_SRUN_WHAT = {
    "exception": "Exited with exit code 1",
    "exit1": "Exited with exit code 1",
    "segfault": "Segmentation fault (core dumped)",
    "oom": "Out Of Memory",
    "sigkill": "Killed",
    "abort": "Aborted (core dumped)",
}


def _death_report(job: _Job, rank: int, how: str) -> Iterator[_Rec]:
    """What SLURM prints when a task dies: the cgroup's OOM report, then srun's exit line."""
    s = job.spec
    if how == "oom" and s.layout != "torchrun":
        t = job.tick(0.1)
        msg = f"slurmstepd-{job.hosts[job.node(rank)]}: error: Detected 1 oom_kill event in StepId={s.job_id}.0. Some of the step tasks have been OOM Killed."
        yield _Rec(t, None, job.node(rank), "stepd", msg)
    if s.layout in ("srun", "per-rank"):
        t = job.tick(0.05)
        yield _Rec(t, None, None, "srun", f"srun: error: {job.hosts[job.node(rank)]}: task {rank}: {_SRUN_WHAT[how]}")


def _ends(job: _Job, dead: dict[int, str], hung: list[int] | None = None, reported: set[int] | None = None) -> Iterator[_Rec]:
    """How the launcher reports the end: srun exit lines, or torchrun teardown and failure tables.

    ``reported``: ranks whose death was already reported when it happened.
    """
    s, rng = job.spec, job.rng
    hung = hung or []
    reported = set(reported or ())
    job.tick(0.5)
    c = job.culprit
    if c in dead and dead[c] != "abort" and c not in reported:  # the task that ended first, on its own line
        if s.layout in ("srun", "per-rank"):
            reported.add(c)
        yield from _death_report(job, c, dead[c])
    if s.layout == "srun-torchrun" or s.layout == "torchrun":
        yield from _torchrun_ends(job, dead, hung)
        return
    what = _SRUN_WHAT
    # everyone else goes down with the step: its own error, a watchdog abort, or srun's SIGKILL
    groups: dict[tuple[int, str], list[int]] = {}
    for r in range(s.ranks):
        if r not in reported:
            groups.setdefault((job.node(r), what[dead[r]] if r in dead else "Killed"), []).append(r)
    for node, how in sorted(groups, key=lambda k: (k[1] == "Killed", rng.random())):
        t = job.tick(0.02)
        members = groups[(node, how)]
        word = "tasks" if len(members) > 1 else "task"
        yield _Rec(t, None, None, "srun", f"srun: error: {job.hosts[node]}: {word} {collect_ranges(members)}: {how}")


def _torchrun_ends(job: _Job, dead: dict[int, str], hung: list[int]) -> Iterator[_Rec]:
    """Each node's agent: the first failed worker, SIGTERM to the rest, and the ChildFailedError table."""
    s = job.spec
    code = {"exception": "1", "exit1": "1", "segfault": "-11", "oom": "-9", "sigkill": "-9", "abort": "-6"}
    for n in range(s.nodes):
        ranks = [r for r in range(s.ranks) if job.node(r) == n]
        failed = [r for r in ranks if r in dead]
        first = min(failed, key=lambda r: (dead[r] == "abort", r)) if failed else None
        survivors = [r for r in ranks if r != first]
        t = job.tick(0.3)
        where = f"{_SITE}/torch/distributed/elastic/multiprocessing/api.py"
        for r in survivors:
            yield _Rec(t, None, n, "agent", job.glog("W", n, f"{where}:900", f"Sending process {job.pids[r]} closing signal SIGTERM", t))
        t = job.tick(0.2)
        head = first if first is not None else survivors[0]
        head_code = code[dead[head]] if head in dead else "-15"
        yield _Rec(
            t,
            None,
            n,
            "agent",
            job.glog(
                "E",
                n,
                f"{where}:874",
                f"failed (exitcode: {head_code}) local_rank: {job.local(head)} (pid: {job.pids[head]}) of binary: /opt/conda/bin/python3.11",
                t,
            ),
        )
        entries = [head] + [r for r in survivors if r != head]
        table = ["Traceback (most recent call last):", '  File "/opt/conda/bin/torchrun", line 8, in <module>', "    sys.exit(main())"]
        table += ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED", "-" * 60, "Failures:"]
        stamp, host = f"{job.clock(t, n):%Y-%m-%d_%H:%M:%S}", f"{job.hosts[n]}.cluster.internal"
        others = entries[1:]
        if not others:
            table.append("  <NO_OTHER_FAILURES>")
        for i, r in enumerate(others, 1):
            table += _cfe_entry(job, i, r, code[dead[r]] if dead.get(r) == "abort" and r not in hung else "-15", stamp, host)
        table += ["-" * 60, "Root Cause (first observed failure):", *_cfe_entry(job, 0, head, head_code, stamp, host), "=" * 60]
        for text in table:
            yield _Rec(t, None, n, "agent", text)
    if s.layout == "srun-torchrun":
        for n in range(s.nodes):
            t = job.tick(0.01)
            yield _Rec(t, None, None, "srun", f"srun: error: {job.hosts[n]}: task {n}: Exited with exit code 1")


def _cfe_entry(job: _Job, idx: int, rank: int, exitcode: str, stamp: str, host: str) -> list[str]:
    """One entry of torchrun's ChildFailedError table (errors/__init__.py _FAILURE_FORMAT_TEMPLATE)."""
    sig = {"-11": "SIGSEGV", "-9": "SIGKILL", "-6": "SIGABRT", "-15": "SIGTERM"}.get(exitcode)
    pid = job.pids[rank]
    tb = (
        f"Signal {exitcode.lstrip('-')} ({sig}) received by PID {pid}"
        if sig
        else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    )
    return [
        f"[{idx}]:",
        f"  time      : {stamp}",
        f"  host      : {host}",
        f"  rank      : {rank} (local_rank: {job.local(rank)})",
        f"  exitcode  : {exitcode} (pid: {pid})" + (f"  ({sig})" if sig else " "),
        "  error_file: <N/A>",
        f"  traceback : {tb}",
    ]


# -- layout: records -> (file, line) ------------------------------------------------------------


def _render(job: _Job, rec: _Rec) -> tuple[str, str]:
    s = job.spec
    slurm = f"slurm-{s.job_id}.out"
    width = len(str(s.ranks - 1))
    if rec.channel == "srun":
        return slurm if s.layout != "torchrun" else f"{job.hosts[0]}.log", rec.text
    if s.layout == "srun":
        if rec.channel == "stepd":  # slurmstepd writes into task 0's stream whichever task it is about
            return slurm, f"{0:>{width}}: {rec.text}"
        return slurm, f"{rec.rank:>{width}}: {rec.text}"
    if s.layout == "per-rank":
        if rec.channel == "stepd":
            return slurm, rec.text
        return f"rank-{rec.rank:0{max(2, width)}d}.out", rec.text
    node = rec.node if rec.rank is None else job.node(rec.rank)
    if node is None:
        raise ValueError(f"a {rec.channel} line without a node: {rec.text!r}")
    if s.layout == "srun-torchrun":
        nwidth = len(str(s.nodes - 1))
        if rec.channel == "agent" or rec.rank is None:
            return slurm, f"{node:>{nwidth}}: {rec.text}"
        return slurm, f"{node:>{nwidth}}: [default{job.local(rec.rank)}]:{rec.text}"
    return f"{job.hosts[node]}.log", rec.text


def lines(spec: JobSpec) -> Iterator[tuple[str, str]]:
    """Every line of the job's output as (file name, line), in the order they are written.

    ``interleave`` lets a line trade places with the previous one of the same
    file when another process wrote it, as buffered output from several
    processes does; one writer's own lines never change order.
    """
    job = _Job(spec)
    pending: dict[str, tuple[tuple[object, ...], str]] = {}
    for rec in _story(job):
        name, text = _render(job, rec)
        writer = (rec.channel, rec.rank, rec.node)
        job.out_bytes += len(text) + 1
        held = pending.get(name)
        if held is None:
            pending[name] = (writer, text)
            continue
        if spec.interleave and held[0] != writer and job.rng.random() < spec.interleave:
            yield name, text
            continue
        yield name, held[1]
        pending[name] = (writer, text)
    for name, (_, text) in pending.items():
        yield name, text


def write(spec: JobSpec, out_dir: str | Path) -> list[Path]:
    """Write the job's files into ``out_dir``; returns their paths (sorted)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    handles: dict[str, object] = {}
    try:
        for name, text in lines(spec):
            fh = handles.get(name)
            if fh is None:
                fh = handles[name] = (out / name).open("w", encoding="utf-8")
            fh.write(text + "\n")  # type: ignore[attr-defined]
    finally:
        for fh in handles.values():
            fh.close()  # type: ignore[attr-defined]
    return sorted(out / n for n in handles)


def command(spec: JobSpec) -> str:
    """The CLI call that regenerates ``spec`` (recorded as provenance.generator)."""
    default = JobSpec()
    parts = ["corpus/tools/synth.py"]
    for f in fields(JobSpec):
        value = getattr(spec, f.name)
        if value != getattr(default, f.name) or f.name in ("ranks", "nodes", "layout", "failure", "seed"):
            parts.append(f"--{f.name.replace('_', '-')} {value}")
    return " ".join(parts)


def write_case(spec: JobSpec, corpus_dir: str | Path, slug: str | None = None) -> Path:
    """Write the job as a corpus case (corpus/README.md): its files plus case.toml."""
    tr = truth(spec)
    name = slug or f"{spec.failure.replace('_', '-')}-{spec.layout}-{spec.ranks}r{spec.nodes}n-s{spec.seed}"
    case = Path(corpus_dir) / f"{tr.label}--synthetic-{name}"
    write(spec, case)
    ff = []
    if tr.rank is not None:
        ff.append(f"rank = {tr.rank}")
    if tr.node is not None:
        ff.append(f'node = "{tr.node}"')
    toml = [
        f'label = "{tr.label}"',
        f'category = "{tr.category}"',
        f'group = "synth:{spec.failure}"',
        "",
        *(["[first_failure]", *ff, ""] if ff else []),
        "[provenance]",
        'kind = "synthetic"',
        f'generator = "{command(spec)}"',
        f'versions = "NCCL {spec.nccl_version}+cuda{spec.cuda} (PyTorch 2.7 formats), SLURM srun/slurmstepd"',
        f'notes = "{FAILURES[spec.failure][1]}; {spec.ranks} ranks on {spec.nodes} node(s), layout {spec.layout}"',
    ]
    (case / "case.toml").write_text("\n".join(toml) + "\n", encoding="utf-8")
    return case


def _parse(argv: list[str] | None) -> tuple[JobSpec, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="synth.py", description=__doc__.split("\n\n")[0])
    defaults = asdict(JobSpec())
    for f in fields(JobSpec):
        kind = int if f.type in ("int", "int | None") else float if f.type == "float" else str
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=defaults[f.name])
    p.add_argument("--out", help="folder for the job's files (with --case: the corpus folder)")
    p.add_argument("--case", action="store_true", help="write a corpus case with case.toml")
    p.add_argument("--list", action="store_true", help="list failures and layouts")
    ns = p.parse_args(argv)
    values = {f.name: getattr(ns, f.name) for f in fields(JobSpec)}
    return replace(JobSpec(), **values) if not ns.list else JobSpec(), ns


def main(argv: list[str] | None = None) -> int:
    try:
        spec, ns = _parse(argv)
    except ValueError as exc:
        print(f"synth.py: {exc}", file=sys.stderr)
        return 2
    if ns.list:
        for name, (label, what) in FAILURES.items():
            print(f"{name:14} {label:22} {what}")
        print("layouts:", ", ".join(LAYOUTS))
        return 0
    if not ns.out:
        print("synth.py: --out is required", file=sys.stderr)
        return 2
    if ns.case:
        print(write_case(spec, ns.out))
    else:
        for path in write(spec, ns.out):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
