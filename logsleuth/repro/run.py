"""Run a Plan on this machine: start the ranks, watch them, kill them, then diagnose.

The ranks are ordinary processes started torchrun-style (env://: MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), never through a shell. One loop
reads every rank's stdout and stderr into a single log, labelled ``N: `` per
rank as ``srun --label`` does, so the analyzer reads it like a job's output.
Like torchrun, the first rank to fail starts a short grace period after which
the others are killed; a hard deadline kills everything, and a report still
comes back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import logsleuth
from logsleuth.report.model import Verdict

from .plan import RESULT_MARK, Found, Plan, PlanError, bandwidth

LOG_NAME = "repro.log"
#: Seconds the other ranks get to print their own errors after the first one fails.
GRACE_S = 5.0
#: Fraction of the available memory one local run may plan to use.
_MEMORY_SHARE = 0.5
#: Memory a rank uses besides its buffers: the interpreter, torch, the checker's working chunks.
_PER_PROCESS = 512 << 20


@dataclass
class RankRun:
    """One process: how it ended and what it reported."""

    rank: int
    pid: int
    exit_code: int | None = None
    status: str = "running"  # ok | failed | killed | no result
    result: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "exit_code": self.exit_code, "status": self.status, "result": self.result}


@dataclass
class Result:
    """A reproduction: pass or fail, correct or not, how fast, and the analyzer's verdict on its output."""

    plan: Plan
    ok: bool
    wrong: int | None
    iterations: int
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    verdict: Verdict
    ranks: list[RankRun]
    timed_out: bool
    elapsed_s: float
    log: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def backend(self) -> str | None:
        """The backend the ranks really used (``auto`` resolves in each process)."""
        return next((r.result["backend"] for r in self.ranks if r.result), None)

    def to_dict(self) -> dict[str, Any]:
        from .emit import nccl_tests

        p = self.plan
        return {
            "ok": self.ok,
            "wrong": self.wrong,
            "iterations": self.iterations,
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "verdict": self.verdict.to_dict(),
            "plan": {
                "op": p.op,
                "numel": p.numel,
                "dtype": p.dtype,
                "bytes": p.size_bytes(),
                "nproc": p.nproc,
                "world_size": p.world,
                "backend": p.backend,
                "backend_used": self.backend,
                "warmup": p.warmup,
                "timeout_s": p.timeout_s,
                "env": dict(p.env),
                "origin": dict(p.origin),
                "nodes": list(p.nodes),
            },
            "from_logs": _logged(p.found),
            "nccl_tests": nccl_tests(p, world=p.world),
            "ranks": [r.to_dict() for r in self.ranks],
            "timed_out": self.timed_out,
            "elapsed_s": round(self.elapsed_s, 3),
            "log": self.log,
            "notes": list(self.notes),
        }


def _logged(found: Found | None) -> dict[str, Any] | None:
    """What the logs said about the job, for comparing it with the reproduction."""
    if found is None:
        return None
    return {
        "suspect": found.suspect,
        "cause": found.cause,
        "world_size": found.world,
        "nodes": list(found.nodes),
        "interfaces": list(found.interfaces),
        "job_timeout_ms": found.job_timeout_ms,
    }


def check_torch() -> None:
    """Fail early, with the fix, where torch is missing: the ranks need it."""
    if importlib.util.find_spec("torch") is None:
        raise PlanError(
            "the reproducer needs PyTorch: `pip install torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu` (the CPU build; or your CUDA build), "
            "then `pip install 'logsleuth[repro]'`"
        )


def adapt_to_host(plan: Plan) -> tuple[Plan, list[str]]:
    """Fit a plan to this machine and say why: a remote MASTER_ADDR, interfaces this host lacks, memory it lacks.

    Every rank of a local run is on this machine, so they rendezvous here: on
    127.0.0.1 unless the user's own ``--env MASTER_ADDR`` names this machine (a
    plan never holds a MASTER_ADDR read in a log).
    """
    notes: list[str] = []
    env = dict(plan.env)
    addr = env.get("MASTER_ADDR")
    if addr and not _is_local_address(addr):
        notes.append(f"MASTER_ADDR={addr} is not this machine; the local run uses 127.0.0.1 (an emitted script uses {addr})")
        env["MASTER_ADDR"] = "127.0.0.1"
    known = {name for _, name in socket.if_nameindex()}
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = env.get(name, "")
        if not value or value.startswith("^"):  # NCCL's ^ excludes interfaces: nothing is required
            continue
        # NCCL matches by prefix unless the list starts with =; gloo wants the exact name
        exact = name.startswith("GLOO") or value.startswith("=")
        wanted = [w for w in value.lstrip("=").split(",") if w]
        missing = [w for w in wanted if not any(k == w or (not exact and k.startswith(w)) for k in known)]
        if missing:
            notes.append(f"{name}={env[name]}: this machine has no interface {', '.join(missing)} (it has {', '.join(sorted(known))})")
    need = _memory_needed(plan)
    have = _memory_available()
    if have and need > have * _MEMORY_SHARE:
        raise PlanError(
            f"this run would need about {need / 2**30:.1f} GiB of memory ({plan.nproc} processes of {plan.describe()}), "
            f"more than half of the {have / 2**30:.1f} GiB available; pass a smaller --numel or --nproc"
        )
    return replace(plan, env=env), notes


def _is_local_address(addr: str) -> bool:
    """Can a socket bind to ``addr`` here? (True for this host's names and addresses.)"""
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    for family, kind, proto, _, sockaddr in infos:
        with contextlib.suppress(OSError), socket.socket(family, kind, proto) as s:
            s.bind((sockaddr[0], 0))
            return True
    return False


def _memory_needed(plan: Plan) -> int:
    """Bytes all ranks use: their input and output buffers, plus the interpreter, torch and the checker's chunks."""
    return (plan.size_bytes(1) + plan.size_bytes() + _PER_PROCESS) * plan.nproc


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def free_port() -> int:
    """A TCP port nobody listens on right now (the run binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def package_root() -> str:
    """The folder that holds the ``logsleuth`` package: a checkout's root, or site-packages when installed."""
    return str(Path(logsleuth.__file__).resolve().parent.parent)


def child_env(plan: Plan, rank: int, port: int) -> dict[str, str]:
    """The environment of rank ``rank``: this process's, the plan's variables, and torchrun's env:// set."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")}
    env.update(plan.env)
    env.update(
        {
            "MASTER_ADDR": plan.env.get("MASTER_ADDR", "127.0.0.1"),
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(plan.world),
            "LOCAL_WORLD_SIZE": str(plan.nproc),
            "PYTHONPATH": os.pathsep.join(p for p in (package_root(), os.environ.get("PYTHONPATH", "")) if p),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def spawn(plan: Plan, log_path: Path, *, grace_s: float = GRACE_S) -> tuple[list[RankRun], bool, list[str]]:
    """Start ``plan.nproc`` ranks, write their output to ``log_path``; (ranks, hard timeout hit, notes)."""
    port = int(plan.env.get("MASTER_PORT") or free_port())
    argv = [sys.executable, "-m", "logsleuth.repro.worker", *plan.worker_args()]
    width = len(str(plan.nproc - 1))
    procs: list[subprocess.Popen[bytes]] = []
    notes: list[str] = []
    with log_path.open("w", encoding="utf-8") as log, _killing(procs):
        for rank in range(plan.nproc):
            procs.append(
                subprocess.Popen(
                    argv,
                    env=child_env(plan, rank, port),
                    cwd=log_path.parent,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,  # its own process group: a kill reaches anything it started
                )
            )
        ranks = [RankRun(rank=i, pid=p.pid) for i, p in enumerate(procs)]
        timed_out = _watch(procs, ranks, log, width, plan.timeout_s, grace_s, notes)
    return ranks, timed_out, notes


@contextlib.contextmanager
def _killing(procs: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    """Whatever happens (an error, Ctrl-C), no rank outlives the run."""
    try:
        yield
    finally:
        for proc in procs:
            _kill(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _watch(
    procs: list[subprocess.Popen[bytes]],
    ranks: list[RankRun],
    log: IO[str],
    width: int,
    timeout_s: float,
    grace_s: float,
    notes: list[str],
) -> bool:
    """Copy output line by line until every stream ends; kill after the first failure's grace or the deadline."""
    deadline = time.monotonic() + timeout_s
    sel = selectors.DefaultSelector()
    partial: dict[int, bytes] = {}
    for rank, proc in enumerate(procs):
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ, (rank, stream is proc.stdout))
            partial[stream.fileno()] = b""
    kill_at: float | None = None
    killed_at: float | None = None
    first: int | None = None  # the rank that failed first
    timed_out = False
    while sel.get_map() and not (killed_at and time.monotonic() > killed_at + 2):
        for key, _ in sel.select(timeout=0.1):
            rank, is_stdout = key.data
            fd = key.fileobj.fileno()  # type: ignore[union-attr]
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            buf = partial[fd] + chunk if chunk else partial[fd] + b"\n" if partial[fd] else b""
            *lines, partial[fd] = buf.split(b"\n")
            for raw in lines:
                _take_line(raw.decode("utf-8", "replace").rstrip("\r"), rank, is_stdout, ranks, log, width)
            if not chunk:
                sel.unregister(key.fileobj)
        now = time.monotonic()
        for rank, proc in enumerate(procs):
            code = proc.poll()
            if code is not None and ranks[rank].status == "running":
                ranks[rank].exit_code = code
                ranks[rank].status = "ok" if code == 0 else "failed"
                if code != 0 and kill_at is None:
                    kill_at, first = min(deadline, now + grace_s), rank
        if killed_at is None and (now >= deadline or (kill_at is not None and now >= kill_at)):
            timed_out = now >= deadline
            why = f"the hard timeout of {timeout_s:g}s" if timed_out else f"rank {first} failed (grace {grace_s:g}s)"
            alive = [r for r, p in zip(ranks, procs, strict=True) if p.poll() is None]
            for r in alive:
                _kill(procs[r.rank])
                r.status = "killed"
            if alive:
                notes.append(f"killed rank(s) {', '.join(str(r.rank) for r in alive)} after {why}")
            killed_at = now
    sel.close()
    for r, proc in zip(ranks, procs, strict=True):
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = proc.wait(timeout=5)
            r.exit_code = code if r.exit_code is None else r.exit_code
        if r.status == "running":
            r.status = "ok" if r.exit_code == 0 else "failed"
        if r.status == "ok" and r.result is None:
            r.status = "no result"
    return timed_out


def _take_line(text: str, rank: int, is_stdout: bool, ranks: list[RankRun], log: IO[str], width: int) -> None:
    """A worker's result line is kept as data; every other line goes to the log, stamped and labelled."""
    if is_stdout and text.startswith(RESULT_MARK):
        with contextlib.suppress(ValueError):
            data = json.loads(text[len(RESULT_MARK) :])
            if isinstance(data, dict) and isinstance(data.get("wrong"), int) and isinstance(data.get("time_us"), int | float):
                ranks[rank].result = data
                return
    stamp = datetime.now().isoformat(sep=" ", timespec="microseconds")
    log.write(f"{stamp} {rank:>{width}}: {text}\n")
    log.flush()


def reproduce(
    plan: Plan,
    *,
    logs: Path | None = None,
    rules: Sequence[str | os.PathLike[str]] | None = None,
    grace_s: float = GRACE_S,
) -> Result:
    """Run ``plan`` here, then have the analyzer read what the ranks printed.

    ``logs``: a folder to keep the captured output in (``repro.log``); by default
    it goes to a temporary folder that is removed, and evidence names the file
    by its bare name. ``rules``: extra rules for the analysis, as for analyze().
    """
    from logsleuth.api import analyze

    check_torch()
    plan, notes = adapt_to_host(plan)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        folder = logs if logs is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="logsleuth-repro-")))
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PlanError(f"--logs {folder}: cannot create this folder ({exc.strerror or exc})") from None
        log_path = folder / LOG_NAME
        ranks, timed_out, run_notes = spawn(plan, log_path, grace_s=grace_s)
        elapsed = time.monotonic() - started
        report = analyze([str(log_path)], rules=rules)
        if not report.readable and not timed_out and all(r.status == "ok" for r in ranks):
            # every rank exited 0 and printed nothing: here the runner saw the whole run end well
            report.verdict = replace(
                report.verdict,
                cause="none",
                category="none",
                confidence=1.0,
                title="No failure",
                summary="Every rank finished with exit code 0 and printed nothing: no failure.",
            )
        if logs is None:
            for ev in report.verdict.evidence:
                ev.file = LOG_NAME
    if timed_out and report.verdict.category in ("none", "unknown"):
        run_notes.append(
            f"no rank reported the hang itself before the hard timeout; a --pg-timeout below --timeout ({plan.timeout_s:g}s) "
            "lets PyTorch say where it hung"
        )
    return summarize(
        plan,
        ranks,
        report.verdict,
        timed_out=timed_out,
        elapsed_s=elapsed,
        log=str(log_path) if logs else None,
        notes=[*plan.notes, *notes, *run_notes],
    )


def summarize(
    plan: Plan,
    ranks: list[RankRun],
    verdict: Verdict,
    *,
    timed_out: bool,
    elapsed_s: float,
    log: str | None,
    notes: list[str],
) -> Result:
    """Fold the ranks' results into one: ok only when every rank finished and nothing was wrong.

    The time is the mean over ranks of each rank's time per iteration, as
    nccl-tests reports it by default.
    """
    results = [r.result for r in ranks if r.result]
    complete = len(results) == len(ranks) and all(r.status == "ok" for r in ranks)
    wrong = sum(int(r.get("wrong", 0)) for r in results) if results else None
    time_us = statistics.fmean(float(r["time_us"]) for r in results) if complete else None
    algbw, busbw = bandwidth(plan.op, plan.size_bytes(), plan.world, time_us) if time_us else (None, None)
    return Result(
        plan=plan,
        ok=complete and not timed_out and wrong == 0,
        wrong=wrong,
        iterations=plan.iters if complete else 0,
        time_us=time_us,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        verdict=verdict,
        ranks=ranks,
        timed_out=timed_out,
        elapsed_s=elapsed_s,
        log=log,
        notes=notes,
    )
