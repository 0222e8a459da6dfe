"""Many jobs at once: find the jobs under some folders, analyse them on all cores, store one verdict each.

A cluster team asks why last week's 3,000 jobs failed, not why one did. ``batch``
finds the jobs under its roots (:func:`discover`), analyses each exactly as
``logsleuth analyze`` would (:func:`run_jobs`: the unit every engine maps), and
appends one row per job to the Parquet store that ``logsleuth history`` reads.

Engines, all making the same rows from the same jobs:

- ``local``: a pool of worker processes on this machine (:func:`run_local`);
- a SLURM job array: :func:`emit_sbatch` writes the job list and a script whose
  array tasks each run one shard of it (``batch --manifest ... --shard i/K``);
- Ray: :func:`run_ray` maps the same chunks over a Ray cluster.

Every writer adds its own part files to the store (see ``history.write_part``), so
array tasks and Ray workers on shared storage need no lock. A job whose fingerprint
(its files' paths, sizes and modification times) and analysis version (logsleuth,
rules and model) are already stored is skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from . import __version__, classify, history, ingest, rulebook

#: A file name that carries a SLURM job id, with its array task: ``slurm-1234.out``,
#: ``train-1234_7.err``, ``job.1234.log`` (the %j / %A_%a of sbatch's --output).
_SLURM_NAME = re.compile(r"(?:^|[-_.])(\d+(?:_\d+)?)\.(?:out|err|log|txt)(?:\.gz)?$")
_SLURM_HINT = re.compile(r"(?i)slurm|job|sbatch|srun")
#: torchrun --log-dir writes <log_dir>/<run>/attempt_<n>/<local_rank>/{stdout,stderr}.log: the run is the job.
_ATTEMPT = re.compile(r"^attempt_\d+$")


@dataclass(frozen=True)
class Job:
    """One job's inputs. ``key`` tells jobs apart (the folder, and the SLURM id when its files
    name one); ``name`` is what the store's ``job`` column gets (the SLURM id, else the key);
    ``fingerprint`` changes when any of its files does."""

    key: str
    name: str
    files: tuple[str, ...]
    fingerprint: str


@dataclass(frozen=True)
class Options:
    """How each job is analysed: what ``logsleuth analyze`` would be given."""

    rules: tuple[str, ...] = ()
    model: str | None = None
    classifier: bool = True
    budget_s: float | None = 120.0
    redact: bool = True

    def version(self) -> str:
        """What a stored verdict was made with: logsleuth, rules and model. A job stored under the same
        version and fingerprint is not analysed again."""
        rules = rulebook.load(self.rules).digest
        model = classify.digest(self.model) if self.classifier else "off"
        return f"{__version__}+rules.{rules}+model.{model}"


@dataclass
class Found:
    """What :func:`discover` found: the jobs, and what it could not use."""

    jobs: list[Job]
    problems: list[str] = field(default_factory=list)
    ignored: int = 0  # files that no job took (they do not match --job-key)


def discover(roots: Sequence[str | os.PathLike[str]], job_key: str | None = None) -> Found:
    """The jobs under ``roots`` (folders, files or globs), in a stable order.

    Without ``job_key``, files are grouped as the launchers write them:

    1. a torchrun ``--log-dir`` run (``.../<run>/attempt_<n>/<rank>/*.log``) is one job: ``<run>``;
    2. in one folder, the files that name one SLURM job (``slurm-<id>.out`` and ``.err``,
       ``<name>-<id>_<task>.out`` for an array task) are that job's, when the folder names
       several jobs; a folder naming at most one job is one job, whatever its other files;
    3. any other folder's log files are one job (a job folder of per-rank logs).

    ``job_key`` overrides this: a glob relative to each root, with ``{id}`` where the job's
    name is (``slurm-{id}.*``, ``{id}/**``, ``runs/{id}/*.log``); files it does not match are
    left out and counted.
    """
    files, problems = _files(roots)
    if job_key is not None:
        grouped, ignored = _by_key(files, job_key)
    else:
        grouped, ignored = _by_layout(files), 0
    jobs = [Job(key, name, tuple(sorted(paths)), fingerprint(paths)) for key, (name, paths) in grouped.items()]
    return Found(sorted(jobs, key=lambda j: _natural(j.key)), problems, ignored)


def _files(roots: Sequence[str | os.PathLike[str]]) -> tuple[dict[str, str], list[str]]:
    """Every log file under the roots (absolute path -> the root it was found under), and what could not be found."""
    out: dict[str, str] = {}
    problems: list[str] = []
    for given in roots:
        text = os.fspath(given)
        for info in ingest.expand([text]):
            if info.problems:
                problems.extend(f"{info.file}: {p}" for p in info.problems)
                continue
            root = text if os.path.isdir(text) else os.path.dirname(info.file)
            out.setdefault(os.path.abspath(info.file), os.path.abspath(root))
    return out, problems


_Grouped = dict[str, tuple[str, list[str]]]  # key -> (name, files)


def _by_layout(files: dict[str, str]) -> _Grouped:
    grouped: _Grouped = {}
    by_folder: dict[str, list[str]] = {}
    for path, root in files.items():
        parts = Path(path).parts
        attempt = next((i for i, p in enumerate(parts) if _ATTEMPT.match(p)), 0)
        if attempt > 0:  # a torchrun --log-dir run: everything under <run>
            key = _where(root, os.path.join(*parts[:attempt]))
            grouped.setdefault(key, (key, []))[1].append(path)
        else:
            by_folder.setdefault(os.path.dirname(path), []).append(path)
    for folder, paths in by_folder.items():
        named: dict[str | None, list[str]] = {}
        for path in paths:
            named.setdefault(slurm_id(path), []).append(path)
        ids = [j for j in named if j is not None]
        where = _where(files[paths[0]], folder)
        if len(ids) <= 1:  # one job's folder (or no job's): all of it
            name = ids[0] if ids else where
            grouped[where] = (name, paths)
            continue
        for job, members in named.items():
            grouped[f"{where}/{job}" if job else where] = (job or where, members)
    return grouped


def _where(root: str, path: str) -> str:
    """A folder named from its root's own name down: unique across roots, short in messages."""
    rel = os.path.relpath(path, root)
    base = os.path.basename(root.rstrip(os.sep)) or root
    return base if rel == "." else f"{base}/{rel}"


def slurm_id(path: str) -> str | None:
    """The SLURM job id (with the array task, ``1234_7``) that a file name carries: any ``.out``/``.err``
    ending in ``-<id>`` (sbatch's ``--output=<name>-%j.out``), and ``.log``/``.txt`` when the name also
    says slurm, job, sbatch or srun (``resnet-50.log`` is no job 50)."""
    base = os.path.basename(path)
    m = _SLURM_NAME.search(base)
    if m is None or (len(m.group(1).partition("_")[0]) < 2 and not base.startswith("slurm-")):
        return None  # one digit: a job id only in sbatch's default name (a new cluster's first jobs)
    stem = base[:-3] if base.endswith(".gz") else base
    if not stem.endswith((".out", ".err")) and not _SLURM_HINT.search(base):
        return None
    return m.group(1)


def _by_key(files: dict[str, str], job_key: str) -> tuple[_Grouped, int]:
    pattern = key_pattern(job_key)
    grouped: _Grouped = {}
    ignored = 0
    for path, root in files.items():
        m = pattern.fullmatch(os.path.relpath(path, root).replace(os.sep, "/"))
        if m is None:
            ignored += 1
            continue
        job = m.group("id")
        grouped.setdefault(f"{_where(root, root)}/{job}", (job, []))[1].append(path)
    return grouped, ignored


def key_pattern(job_key: str) -> re.Pattern[str]:
    """``--job-key`` as a regex: a glob (``*``, ``?``, ``**``) over the path relative to a root, with
    one ``{id}`` that names the job. Raises ValueError when ``{id}`` is missing or repeated."""
    if job_key.count("{id}") != 1:
        raise ValueError(f"--job-key {job_key!r}: put {{id}} exactly once where the job's name is, e.g. 'slurm-{{id}}.*'")
    glob = {"{id}": r"(?P<id>[^/]+?)", "**/": r"(?:[^/]*/)*", "**": r".*", "*": r"[^/]*", "?": r"[^/]"}
    return re.compile("".join(glob.get(t, re.escape(t)) for t in re.split(r"(\{id\}|\*\*/|\*\*|\*|\?)", job_key)))


def fingerprint(paths: Iterable[str]) -> str:
    """A hash of the files' paths, sizes and modification times: a job whose files change is analysed again."""
    h = hashlib.sha256()
    for path in sorted(paths):
        try:
            st = os.stat(path)
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(errors="surrogateescape"))
        except OSError as exc:
            h.update(f"{path}\0{exc.errno}\n".encode(errors="surrogateescape"))
    return h.hexdigest()[:32]


def _natural(key: str) -> list[Any]:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", key)]


# -- what is already stored -----------------------------------------------------------------------


def stored(store: str | os.PathLike[str], version: str) -> tuple[set[str], list[str]]:
    """The fingerprints of jobs the store holds under ``version``, read in full (an epilog's verdict under
    its short budget may not be), from rows this user or root wrote (another user's file could
    otherwise hide a job from the batch), and the store's problems."""
    if not Path(store).is_dir():
        return set(), []
    loaded = history.load(store, columns=["rules_version", "fingerprint", "partial"])
    mine = loaded.table.filter(
        (pl.col("rules_version") == version)
        & pl.col("fingerprint").is_not_null()
        & ~pl.col("partial").fill_null(False)
        & pl.col(history.WRITER).is_in([0, os.geteuid()])
    )
    return set(mine.get_column("fingerprint").to_list()), loaded.problems


def pending(jobs: Sequence[Job], done: set[str]) -> list[Job]:
    """The jobs not yet stored (by fingerprint)."""
    return [j for j in jobs if j.fingerprint not in done]


def shard(jobs: Sequence[Job], index: int, count: int) -> list[Job]:
    """Task ``index`` of ``count``'s share: every count-th job, so shards take similar mixes of jobs."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: the index must be from 0 to {count - 1}")
    return list(jobs[index::count])


# -- one chunk of jobs: what every engine runs ----------------------------------------------------


def run_jobs(jobs: Sequence[Job], options: Options, version: str) -> pl.DataFrame:
    """Analyse each job as ``logsleuth analyze`` would and return its history rows. Never raises:
    a job that cannot be read or analysed is a row with its problems."""
    from .api import analyze

    frames = []
    for job in jobs:
        report = analyze(
            list(job.files),
            rules=list(options.rules),
            budget_s=options.budget_s,
            redact=options.redact,
            model=options.model,
            classifier=options.classifier,
        )
        frames.append(history.record(report, job=job.name, fingerprint=job.fingerprint, rules_version=version))
    return pl.concat(frames) if frames else pl.DataFrame(schema=history.SCHEMA)


def died(job: Job, version: str, why: str) -> pl.DataFrame:
    """The row of a job whose analysis process died (out of memory, a crash): kept, with why."""
    from .api import unfinished

    inputs = [ingest.InputInfo(file=f, problems=[why]) for f in job.files]
    report = unfinished(
        inputs,
        note=why,
        summary="logsleuth could not finish analysing this job: " + why,
        fix=["Analyse the job alone (`logsleuth analyze FILES`) to see what stops it."],
    )
    return history.record(report, job=job.name, fingerprint=job.fingerprint, rules_version=version)


# -- writing parts --------------------------------------------------------------------------------


class PartWriter:
    """Collects rows and writes them to the store in parts of up to ``rows`` rows (or every ``every_s``
    seconds), so an interrupted batch loses at most the jobs in flight."""

    def __init__(self, store: str | os.PathLike[str], *, tag: str = "", rows: int = 500, every_s: float = 30.0) -> None:
        self.store = store
        self.rows = rows
        self.every_s = every_s
        self.tag = tag
        self.parts: list[str] = []
        self.written = 0
        self._pending: list[pl.DataFrame] = []
        self._count = 0
        self._since = time.monotonic()

    def add(self, frame: pl.DataFrame) -> None:
        self._pending.append(frame)
        self._count += frame.height
        if self._count >= self.rows or time.monotonic() - self._since >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Write what is pending (an OSError, e.g. a full disk, is the caller's to report). A user other than
        root writes parts no larger than a reader believes of another user's file (history.FOREIGN_LIMITS),
        so root's `history` over a shared store reads them."""
        self._since = time.monotonic()
        if not self._pending:
            return
        frame = pl.concat(self._pending)
        most = frame.height if os.geteuid() == 0 else history.FOREIGN_LIMITS.rows
        for start in range(0, frame.height, most):
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
            name = f"batch-{stamp}-{socket.gethostname()}-{os.getpid()}{self.tag}-{len(self.parts):05d}"
            self.parts.append(str(history.write_part(self.store, frame.slice(start, most), name)))
        self.written += frame.height
        self._pending, self._count = [], 0


# -- what a run did --------------------------------------------------------------------------------


class Tally:
    """Counts of a batch run, fed with each chunk's rows."""

    def __init__(self) -> None:
        self.analysed = 0
        self.causes: dict[str, int] = {}
        self.with_problems = 0

    def add(self, rows: pl.DataFrame) -> None:
        self.analysed += rows.height
        for cause, n in rows.group_by("cause").len().iter_rows():  # a few causes per chunk
            self.causes[cause] = self.causes.get(cause, 0) + n
        self.with_problems += rows.filter(pl.col("problems").list.len() > 0).height

    def summary(self, *, store: str, found: int, skipped: int, seconds: float) -> dict[str, Any]:
        """The run as ``--format json`` prints it."""
        return {
            "store": store,
            "jobs": found,
            "skipped": skipped,
            "analysed": self.analysed,
            "with_problems": self.with_problems,
            "seconds": round(seconds, 3),
            "jobs_per_s": round(self.analysed / seconds, 2) if seconds > 0 else None,
            "causes": dict(sorted(self.causes.items(), key=lambda kv: (-kv[1], kv[0]))),
        }


def render_summary(summary: dict[str, Any]) -> str:
    """The run in a few lines: what was done, the causes found, where to look next."""
    rate = f" ({summary['jobs_per_s']} jobs/s)" if summary.get("jobs_per_s") else ""
    lines = [
        f"{summary['analysed']} jobs analysed, {summary['skipped']} already stored,"
        f" in {summary['seconds']:.1f} s{rate}: verdicts in {summary['store']}"
    ]
    width = max((len(c) for c in summary["causes"]), default=0)
    lines += [f"  {cause:<{width}}  {n}" for cause, n in summary["causes"].items()]
    if summary["with_problems"]:
        lines.append(f"{summary['with_problems']} jobs had inputs that could not be read in full (their rows say which)")
    lines.append(f"next: logsleuth history {summary['store']}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def progress_bar(total: int, *, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr with jobs/s and the time left; yields the function that advances it."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("analysing jobs"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("jobs", total=total, rate="")
        started = time.monotonic()

        def advance(n: int) -> None:
            done = bar.tasks[0].completed + n
            spent = time.monotonic() - started
            bar.update(task, advance=n, rate=f"{done / spent:.1f} jobs/s" if spent > 0 else "")

        yield advance


# -- engines --------------------------------------------------------------------------------------

#: Called with each finished chunk's rows, so the caller can count and show progress.
Progress = Callable[[pl.DataFrame], None]


def chunks(jobs: Sequence[Job], workers: int, most: int = 16) -> list[list[Job]]:
    """Jobs in chunks: big enough that a task's overhead is small, small enough to balance the workers."""
    size = max(1, min(most, len(jobs) // max(1, workers * 8)))
    return [list(jobs[i : i + size]) for i in range(0, len(jobs), size)]


def run_local(
    jobs: Sequence[Job],
    options: Options,
    version: str,
    writer: PartWriter,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
) -> None:
    """Analyse ``jobs`` on ``workers`` processes (default: every core this process may use), writing
    rows as chunks finish. A chunk whose process dies is re-run one job at a time; a job that kills
    its process twice is stored with that problem. KeyboardInterrupt flushes what finished, then propagates."""
    workers = workers or available_cores()
    todo: list[list[Job]] = chunks(jobs, workers)
    tries: dict[str, int] = {}
    try:
        while todo:
            todo = _pool_round(todo, options, version, writer, workers, progress, tries)
    finally:
        writer.flush()


def available_cores() -> int:
    """The cores this process may run on (a SLURM allocation or cgroup may give fewer than the machine has)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _pool_round(
    todo: list[list[Job]],
    options: Options,
    version: str,
    writer: PartWriter,
    workers: int,
    progress: Progress | None,
    tries: dict[str, int],
) -> list[list[Job]]:
    """Run chunks until done or the pool breaks; returns the chunks left to run again (one job each)."""
    import multiprocessing

    # spawned, not forked: polars' threads do not survive a fork, and spawned workers are this
    # process's children, so an interrupt can stop them (a forkserver's would run on, orphaned)
    context = multiprocessing.get_context("spawn")
    again: list[list[Job]] = []
    # a fresh worker now and then: memory a long batch leaves behind in one process is given back
    recycle: dict[str, Any] = {"max_tasks_per_child": 200} if sys.version_info >= (3, 11) else {}
    with _one_thread_polars():  # workers start on the first submits, and inherit this
        pool = ProcessPoolExecutor(min(workers, len(todo)), mp_context=context, initializer=_ignore_interrupts, **recycle)
        try:
            queue = iter(todo)
            running: dict[Future[pl.DataFrame], list[Job]] = {}
            window = 2 * workers  # bounded in flight: memory does not grow with the number of jobs
            for chunk in _take(queue, window):
                running[pool.submit(run_jobs, chunk, options, version)] = chunk
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    chunk = running.pop(fut)
                    try:
                        rows = fut.result()
                    except BrokenProcessPool:
                        again.extend(_retry(chunk, version, writer, progress, tries))
                        continue
                    writer.add(rows)
                    if progress:
                        progress(rows)
                if again:  # the pool is broken: everything still running must be run again
                    for chunk in running.values():
                        again.extend([j] for j in chunk)
                    again.extend([j] for chunk in queue for j in chunk)
                    break
                for chunk in _take(queue, window - len(running)):
                    running[pool.submit(run_jobs, chunk, options, version)] = chunk
        except BaseException:  # an interrupt: the workers (which ignore Ctrl-C) finish their chunk, nothing more
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return again


def _ignore_interrupts() -> None:
    """Ctrl-C (and scancel's SIGTERM) are the parent's to handle: it lets the workers finish their chunk
    and stores what finished (see :func:`stop_on_sigterm`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (scancel, a SLURM time limit) stops a batch as Ctrl-C does: what finished is stored."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _retry(chunk: list[Job], version: str, writer: PartWriter, progress: Progress | None, tries: dict[str, int]) -> list[list[Job]]:
    out = []
    for job in chunk:
        tries[job.key] = tries.get(job.key, 0) + 1
        if len(chunk) == 1 and tries[job.key] >= 2:
            rows = died(job, version, "its analysis process died twice (out of memory, or a crash)")
            writer.add(rows)
            if progress:
                progress(rows)
        else:
            out.append([job])
    return out


def _take(queue: Iterator[list[Job]], n: int) -> list[list[Job]]:
    out = []
    for _ in range(max(0, n)):
        nxt = next(queue, None)
        if nxt is None:
            break
        out.append(nxt)
    return out


class _one_thread_polars:
    """Workers get one polars thread each (set before they import polars): a process per core
    already uses every core, and more threads only contend."""

    def __enter__(self) -> None:
        self._old = os.environ.get("POLARS_MAX_THREADS")
        os.environ["POLARS_MAX_THREADS"] = "1"

    def __exit__(self, *exc: object) -> None:
        if self._old is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
        else:
            os.environ["POLARS_MAX_THREADS"] = self._old


def run_ray(
    jobs: Sequence[Job],
    options: Options,
    version: str,
    writer: PartWriter,
    *,
    address: str | None = None,
    progress: Progress | None = None,
) -> None:
    """Analyse ``jobs`` as Ray tasks on the cluster at ``address`` (None: start a local one); rows
    come back to this process, which writes them. The workers must see the log files at the same paths."""
    import importlib
    import logging

    try:
        ray: Any = importlib.import_module("ray")  # optional, and untyped: used through Any
    except ImportError:
        raise RuntimeError("--engine ray needs Ray: pip install 'logsleuth[ray]'") from None
    # A driver left connected outlives the batch: when its cluster stops, Ray ends the whole process
    # (the core worker exits once the GCS stays unreachable), so disconnect unless the caller had connected.
    connected_before = bool(ray.is_initialized())
    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, logging_level=logging.ERROR)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        task = ray.remote(num_cpus=1, max_retries=1)(run_jobs)
        queue = iter(chunks(jobs, cpus))
        running = {task.remote(c, options, version): c for c in _take(queue, 2 * cpus)}
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                chunk = running.pop(ref)
                try:
                    rows = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    rows = pl.concat([died(j, version, f"its Ray task failed ({type(exc).__name__})") for j in chunk])
                writer.add(rows)
                if progress:
                    progress(rows)
            for c in _take(queue, 2 * cpus - len(running)):
                running[task.remote(c, options, version)] = c
    finally:
        writer.flush()
        if not connected_before:
            ray.shutdown()


# -- a SLURM job array ----------------------------------------------------------------------------


def write_manifest(path: str | os.PathLike[str], jobs: Sequence[Job]) -> None:
    """The job list an array task reads back (JSON lines: key, files, fingerprint)."""
    with open(path, "w", encoding="utf-8") as fh:
        for job in jobs:
            fh.write(json.dumps(asdict(job)) + "\n")


def read_manifest(path: str | os.PathLike[str]) -> list[Job]:
    """The jobs :func:`write_manifest` wrote; raises ValueError on a line that is not one."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            try:
                d = json.loads(line)
                out.append(Job(str(d["key"]), str(d["name"]), tuple(str(f) for f in d["files"]), str(d["fingerprint"])))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a job line ({type(exc).__name__})") from None
    return out


def emit_sbatch(
    folder: str | os.PathLike[str],
    jobs: Sequence[Job],
    *,
    store: str | os.PathLike[str],
    tasks: int,
    options: Options,
    cpus: int = 2,
    sbatch_options: Sequence[str] = (),
) -> Path:
    """Write ``jobs.jsonl`` and ``batch.sbatch`` into ``folder``: a job array of ``tasks`` tasks, each
    analysing its shard with ``cpus`` cores and writing its own parts into ``store``. Returns the script."""
    import shlex

    out = Path(folder).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    manifest = out / "jobs.jsonl"
    write_manifest(manifest, jobs)
    tasks = max(1, min(tasks, len(jobs)))
    args = [sys.executable, "-m", "logsleuth", "batch", "--manifest", str(manifest), "--out", str(Path(store).resolve())]
    args += ["--workers", "${SLURM_CPUS_PER_TASK:-1}", "--shard", f"${{SLURM_ARRAY_TASK_ID}}/{tasks}", "--format", "json"]
    for r in options.rules:
        args += ["--rules", str(Path(r).resolve())]
    if options.model is not None:
        args += ["--model", str(Path(options.model).resolve())]
    if not options.classifier:
        args.append("--no-model")
    if options.budget_s is not None:
        args += ["--budget", str(options.budget_s)]
    if not options.redact:
        args.append("--no-redact")
    # the ${...} words are the shell's to expand: quoted with double quotes, everything else with shlex
    command = " ".join(f'"{a}"' if a.startswith("$") or a.startswith("${") or "${" in a else shlex.quote(a) for a in args)
    lines = [
        "#!/bin/bash",
        f"# logsleuth batch: {len(jobs)} jobs in {tasks} array tasks; written by logsleuth {__version__}.",
        "# Submit with: sbatch " + shlex.quote(str(out / "batch.sbatch")),
        "#SBATCH --job-name=logsleuth-batch",
        f"#SBATCH --array=0-{tasks - 1}",
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --output={out}/logs/%A_%a.out",
        *(f"#SBATCH {o}" for o in sbatch_options),
        "set -euo pipefail",
        f"exec {command}",
        "",
    ]
    script = out / "batch.sbatch"
    script.write_text("\n".join(lines), encoding="utf-8")
    script.chmod(0o755)
    return script
