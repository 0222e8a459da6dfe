"""A history of verdicts: append one per analysis, then see what keeps failing, and where.

The store is a folder of Parquet files: one per verdict from the epilog and ``analyze --store``,
parts of many from ``batch``, and the files ``compact`` merges them into. Each is written under
a hidden temporary name and renamed into place, so many writers (epilogs on every node, also
over NFS) append at the same time without a lock, and a reader never sees half a file. Reading
takes every ``*.parquet`` in the folder as one table.

Scale (a fleet's year: ten million verdicts). Reading decodes only the columns asked for; a big
file (root's or the reader's, over :data:`BIG_FILE_BYTES`) is decoded lazily from the descriptor
it was checked on, streamed, never held as bytes, and :func:`summarize` is a few streaming
group-bys whose memory does not grow with the store. ``compact`` cuts the store by time into
files of at most :data:`MERGE_ROWS` verdicts, each holding a stretch of time no other holds,
and stores in each the summary of its rows, which a reader uses instead of the rows when the file
lies wholly before the last two weeks and wholly inside (or outside) ``--since``. Many small
files still read slowly (each is checked before it is decoded, about half a millisecond), so
``compact`` should run often (cron); it rewrites only what changed.

Trust. A shared store (the epilog's, mode 1733) takes files from every job's
user, so a file is what its owner claims, and the reader (often root, from
cron) must not hang on it, run out of memory on it, or believe more than that:

- Only regular files are read: each is checked with ``lstat`` and opened with
  ``O_NOFOLLOW | O_NONBLOCK`` (its ``fstat`` must be the same file), so a FIFO,
  device, folder or symbolic link named ``*.parquet`` is skipped with a problem
  note, never opened or followed. A file is read once, from that descriptor
  (a big one is decoded through ``/proc/self/fd``: the checked file, whatever
  has its name since).
- What a file may decode to is bounded before it is decoded: its Parquet
  footer and page headers give its rows, values and uncompressed bytes, and a
  file over :data:`FOREIGN_LIMITS` (another user's file; ``append`` writes one
  row of a few KiB) or :data:`OWN_LIMITS` (root's or the reader's, bounded by
  its footer alone) is skipped with a note. Only the columns that will be
  decoded count (a column chunk counts when its place in the schema or the path
  it declares names one). Other users' files may take at most
  :data:`FOREIGN_PER_WRITER` bytes per user and :data:`FOREIGN_TOTAL` together
  (read plus decoded); the rest wait, with a note, for a compaction.
- Each row carries ``writer_uid``: the uid that owns the file it came from.
  A file owned by root or by the reader (a compacted file, or one's own) is
  believed about its rows' ``writer_uid`` and about the summary ``compact``
  stored in it; any other file's rows are its owner's, whatever it says, and
  its stored summary is never read. Two rows count as one verdict only when
  their id and their writer agree, so no one can hide another's verdict by
  copying its id. A copy has its verdict's time, so only rows that can have one
  are compared: every row of a small file, and the rows of a big file at a time
  another file has (or without one); a file of root's or the reader's is
  believed to hold each verdict once (``compact`` writes it so). ``compact``
  stores ``writer_uid`` in the files it writes, so merging keeps who wrote each row.
- ``compact`` never waits for ``.compact.lock`` longer than
  :data:`LOCK_TIMEOUT_S`, never follows a link planted under that name and
  replaces a lock file it does not own; it merges only files it may remove
  (all of them as root).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import io
import itertools
import operator
import os
import re
import socket
import stat
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from . import __version__, rulebook
from .files import READ_UNTRUSTED, write_atomic
from .parquet_bounds import _FOOTER, Malformed, Shape, _struct, footer_start, inspect
from .parquet_bounds import inspect as _inspect
from .report.model import Report

__all__ = ["_FOOTER", "_inspect", "_struct"]  # what tests reach for: the Parquet footer walker (parquet_bounds)

#: One row per verdict. ``nodes`` and ``ranks`` are those the verdict implicates:
#: the first failure's, then those of every rank that failed in its own right.
SCHEMA: dict[str, pl.DataType] = {
    "id": pl.String(),  # unique per verdict
    "time": pl.Datetime("us", "UTC"),  # when the job failed (its first failure's stamp), else when it was analysed
    "analyzed": pl.Datetime("us", "UTC"),
    "job": pl.String(),
    "cause": pl.String(),
    "category": pl.String(),
    "confidence": pl.Float64(),
    "first_rank": pl.Int32(),
    "first_node": pl.String(),
    "nodes": pl.List(pl.String()),
    "ranks": pl.List(pl.Int32()),
    "inputs": pl.List(pl.String()),
    "summary": pl.String(),
    "host": pl.String(),
    "logsleuth_version": pl.String(),
    "rules_version": pl.String(),  # digest of the rules and model that gave the verdict (see rulebook.analysis_version)
    "fingerprint": pl.String(),  # `batch`: the job's input files (names, sizes, mtimes), to skip it next time
    "partial": pl.Boolean(),  # some input was not read to its end
    "problems": pl.List(pl.String()),  # what could not be read, per input
}
_IMPLICATED = ("culprit", "failed")


def _not_node_faults() -> list[str]:
    """Categories of jobs the scheduler stopped (``scheduler_ended`` in rules/causes.toml): the node
    they stopped on says nothing about the node."""
    return sorted(rulebook.load().scheduler_ended)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def record(
    report: Report,
    *,
    job: str | None = None,
    when: datetime | None = None,
    fingerprint: str | None = None,
    rules_version: str | None = None,
) -> pl.DataFrame:
    """The history row of one report."""
    v = report.verdict
    ff = v.first_failure
    culprits = [r for r in report.ranks if r.status in _IMPLICATED]
    nodes = list(dict.fromkeys(n for n in [ff.node, *(r.node for r in culprits)] if n))
    ranks = list(dict.fromkeys(r for r in [ff.rank, *(r.rank for r in culprits)] if r is not None))
    analyzed = when or datetime.now(timezone.utc)
    row: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "time": failure_time(ff.time) or analyzed,
        "analyzed": analyzed,
        "job": job,
        "cause": v.cause,
        "category": v.category,
        "confidence": v.confidence,
        "first_rank": ff.rank,
        "first_node": ff.node,
        "nodes": nodes,
        "ranks": ranks,
        "inputs": [i.file for i in report.inputs],
        "summary": v.summary,
        "host": socket.gethostname(),
        "logsleuth_version": __version__,
        "rules_version": rules_version,
        "fingerprint": fingerprint,
        "partial": report.partial,
        "problems": [f"{i.file}: {p}" for i in report.inputs for p in i.problems],
    }
    return pl.DataFrame([row], schema=SCHEMA)


def append(
    store: str | os.PathLike[str],
    report: Report,
    *,
    job: str | None = None,
    when: datetime | None = None,
    fingerprint: str | None = None,
    rules_version: str | None = None,
) -> Path:
    """Add one verdict to the store (created if missing); returns the file written."""
    return write_row(store, record(report, job=job, when=when, fingerprint=fingerprint, rules_version=rules_version))


def write_row(store: str | os.PathLike[str], row: pl.DataFrame, *, host: str | None = None) -> Path:
    """Add one verdict (a row of :func:`record`) to the store as a file of its own, named after its time,
    job, host and id. Without statistics: of one row they say nothing, and every reader walks its
    footer before decoding it (a fifth less to walk)."""
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = row.item(0, "time").strftime("%Y%m%dT%H%M%S%f")
    job, where = row.item(0, "job"), _UNSAFE.sub("_", host or socket.gethostname())
    name = f"{stamp}-{_UNSAFE.sub('_', job or 'nojob')}-{where}-{_UNSAFE.sub('_', row.item(0, 'id') or 'noid')}.parquet"
    return _write_atomic(row.select(SCHEMA.keys()), folder / name, statistics=False)


def write_part(store: str | os.PathLike[str], frame: pl.DataFrame, name: str) -> Path:
    """Add many verdicts (rows of :data:`SCHEMA`) as one file ``name`` of the store: `batch` writes its
    results in parts, so many writers (array tasks, Ray tasks) append at once without a lock."""
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    return _write_atomic(frame.select(SCHEMA.keys()), folder / f"{_UNSAFE.sub('_', name)}.parquet")


def failure_time(stamp: str | None) -> datetime | None:
    """The first failure's ISO stamp as an aware datetime (UTC when it has no zone), or None.

    A verdict is filed under the job's own failure time, so a week of history is the
    week the jobs failed, not the week someone ran the analysis."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)


#: The column a reader adds to every row: the uid whose claim the row is (see Trust, above).
WRITER = "writer_uid"
#: The table :func:`load` returns: each verdict's columns, and who wrote it.
TABLE_SCHEMA: dict[str, pl.DataType] = {**SCHEMA, WRITER: pl.Int64()}


def node_jobs(table: pl.DataFrame | pl.LazyFrame, node: str) -> pl.DataFrame:
    """The verdicts that implicate ``node``, newest first: the jobs behind a node's record (and who wrote each).
    From a lazy frame of :func:`scan`, the other columns are decoded only for the rows that match."""
    lf = table.lazy()
    writer = [WRITER] if WRITER in lf.collect_schema().names() else []
    return (
        lf.filter(pl.col("nodes").list.contains(node) | (pl.col("first_node") == node))
        .select("time", "job", "category", "cause", "first_rank", "first_node", "confidence", "summary", *writer)
        .collect()
        .sort("time", descending=True, maintain_order=True)
    )


def _write_atomic(frame: pl.DataFrame, path: Path, *, metadata: dict[str, str] | None = None, statistics: bool = True) -> Path:
    """Write to a hidden file, then rename (files.write_atomic): readers never see half a file,
    and nothing planted under the temporary name is written through. A write that fails (a full
    disk) is an OSError whichever engine wrote, so callers handle one kind of error. ``metadata``:
    key-value pairs for the file's footer."""
    try:
        write_atomic(path, lambda fh: frame.write_parquet(fh, metadata=metadata, statistics=statistics), create_mode=0o644)
    except pl.exceptions.PolarsError as exc:
        raise OSError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return path


@dataclass
class Loaded:
    """The verdicts of a store, and the files that could not be read."""

    table: pl.DataFrame
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Limits:
    """What one store file may hold, checked from its footer and page headers before it is decoded."""

    file_bytes: int  # its size on disk
    rows: int
    decoded: int  # the bytes its values may decode to (for another user's file: at the worst its encodings allow)


#: Another user's file. ``append`` writes one row: about 6 KiB on disk that decode to a few KiB.
FOREIGN_LIMITS = Limits(file_bytes=1 << 20, rows=256, decoded=16 << 20)
#: A file owned by root or by the reader (a compacted store): bounds against accidents, not attacks. A store
#: compacted by an older logsleuth is one file; 10 million verdicts make one of 530 MB that decodes to 5.2 GiB.
OWN_LIMITS = Limits(file_bytes=16 << 30, rows=100_000_000, decoded=64 << 30)
#: What the files of other users may take (bytes read + bytes they may decode to), per user and together;
#: past it, the rest wait for a compaction (one user's many files cannot crowd out the others').
FOREIGN_PER_WRITER = 128 << 20
FOREIGN_TOTAL = 1 << 30
#: Problems listed one by one; the rest are counted (a store full of junk must not flood the output).
MAX_PROBLEMS = 50
#: The longest ``compact`` waits for another compaction's lock before it gives up with an OSError.
LOCK_TIMEOUT_S = 30.0
#: ``compact`` writes files of at most this many verdicts and, but for the newest stretch of time, at least
#: half as many, so a store holds at most about 2 x verdicts / MERGE_ROWS files after a compaction (plus
#: what was appended since), and a compaction holds at most about this many verdicts in memory at once.
MERGE_ROWS = 1_000_000
#: A file of root's or the reader's larger than this is decoded lazily from its descriptor (only the
#: columns asked for, streamed), never read into memory; smaller files are read once and decoded together.
BIG_FILE_BYTES = 4 << 20
_BATCH_BYTES = 256 << 20  # small files are decoded this many bytes of them at a time
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: The columns :func:`summarize` needs; ``scan(store, columns=SUMMARY_COLUMNS)`` decodes only these.
SUMMARY_COLUMNS = ("time", "category", "cause", "nodes")
#: The columns :func:`node_jobs` needs.
NODE_COLUMNS = ("time", "job", "category", "cause", "first_rank", "first_node", "nodes", "confidence", "summary")
_ORDER, _ROW = "_src", "_row"  # a row's file (its place in name order) and its place in that file
_T = TypeVar("_T")


@dataclass
class Part:
    """One big file of a scanned store: its rows, not yet decoded, where they lie in time, and the
    summary of its rows that ``compact`` stored in it (None: none, or it holds a verdict seen twice)."""

    path: str
    frame: pl.LazyFrame
    span: tuple[int, int] | None  # least and greatest time, microseconds (from the footer's statistics)
    stored: dict[str, str] | None = None


@dataclass
class Scanned:
    """The verdicts of a store, as a lazy frame over its files, and what could not be read.

    The big files are read from descriptors that stay open until the ``with`` of :func:`scan` ends."""

    problems: list[str]
    small: pl.DataFrame  # the rows of the small files, decoded
    parts: list[Part]  # the big files

    def frame(self) -> pl.LazyFrame:
        """All the verdicts (one verdict seen twice counts once), each with its writer."""
        return pl.concat([self.small.lazy(), *(p.frame for p in self.parts)], how="vertical")

    def newest(self) -> datetime | None:
        """The time of the newest verdict (of a big file: by its statistics, when it has them)."""
        times = [self.small.get_column("time").max()]
        for p in self.parts:
            if p.span is None:
                times.append(p.frame.select(pl.col("time").max()).collect().item())
            else:
                times.append(pl.Series([p.span[1]], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")).item())
        return max((t for t in times if isinstance(t, datetime)), default=None)

    def run(self, query: Callable[[Scanned], _T]) -> _T:
        """``query(self)``. A big file that fails to decode (a damaged file of root's: its footer was
        fine) is left out with a note and the query run again, as a damaged small file would be."""
        while True:
            try:
                return query(self)
            except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError) as exc:
                bad = [i for i, p in enumerate(self.parts) if not _decodes(p.frame)]
                if not bad:
                    raise exc from None
                for i in reversed(bad):
                    self.problems.append(f"{self.parts.pop(i).path}: unreadable (it fails to decode); skipped")
                self.problems[:] = _capped(self.problems)


def _decodes(lf: pl.LazyFrame) -> bool:
    try:
        lf.select(pl.all().null_count()).collect(engine="streaming")  # every value decoded, none kept
    except (Exception, pl.exceptions.PanicException):
        return False
    return True


def load(store: str | os.PathLike[str], *, columns: Collection[str] | None = None) -> Loaded:
    """Every verdict in the store (only ``columns`` of it, and the writer), each with its writer's uid;
    a damaged or refused file is reported, not fatal."""
    with scan(store, columns=columns) as got:
        table = got.run(lambda s: s.frame().collect())
    return Loaded(table.rechunk(), got.problems)


@contextlib.contextmanager
def scan(store: str | os.PathLike[str], *, columns: Collection[str] | None = None) -> Iterator[Scanned]:
    """The store's verdicts as a lazy frame: only ``columns`` (and ``writer_uid``) are ever decoded, and
    big files only as the frame is collected, streamed. Use it inside the ``with``."""
    folder = Path(store)
    names = [n for n in TABLE_SCHEMA if columns is None or n in columns or n == WRITER]
    if not folder.is_dir():
        empty = pl.DataFrame(schema={n: TABLE_SCHEMA[n] for n in names})
        yield Scanned([f"{folder}: not a folder (no history yet?)"], empty, [])
        return
    with contextlib.ExitStack() as opened:
        sources, problems = _sources(folder, removable=False, columns=_decoded(names), opened=opened)
        got = _assemble(sources, names)
        got.problems[:] = _capped(problems + got.problems)
        yield got


def _decoded(names: list[str]) -> frozenset[str]:
    """The columns decoded to give ``names``: also a verdict's id, time and writer, to count it once."""
    return frozenset(names) | {"id", "time", WRITER}


def _capped(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problems"]


@dataclass
class _Source:
    """One store file, checked from a descriptor that was checked to be a regular file, and read once:
    into ``data`` when small, else decoded later from that descriptor (``fd``, kept open)."""

    path: str
    owner: int
    trusted: bool  # owned by root or the reader: believed about its rows' writer_uid
    shape: Shape
    data: bytes | None = None
    fd: int | None = None
    order: int = 0  # its place among the files, by name
    schema: dict[str, pl.DataType] = field(default_factory=dict)  # a big file's columns
    failed: bool = False  # it did not decode after all

    @property
    def rows(self) -> int:
        return self.shape.rows

    @property
    def big(self) -> bool:
        return self.fd is not None


def _sources(
    folder: Path, *, removable: bool, columns: frozenset[str] | None, opened: contextlib.ExitStack
) -> tuple[list[_Source], list[str]]:
    """The folder's files that may be read, checked (``columns``: the columns that will be decoded, for the
    page headers of other users' files), and problems; with ``removable``, only the files this process may
    remove (what ``compact`` merges). Descriptors of big files are closed when ``opened`` closes."""
    me = os.geteuid()
    problems: list[str] = []
    found: list[tuple[str, os.stat_result]] = []
    try:
        folder_st = os.stat(folder)
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".parquet") and not e.name.startswith("."))
    except OSError as exc:  # a shared store (mode 1733) may not be listed by its users
        return [], [f"{folder}: cannot be listed ({exc.strerror})"]
    for name in names:
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # merged and removed by a compaction meanwhile
            continue
        except OSError as exc:
            problems.append(f"{path}: cannot be read ({exc.strerror}); skipped")
            continue
        if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block, a device could do anything
            problems.append(f"{path}: not a regular file ({_kind(st.st_mode)}); skipped")
            continue
        if removable and not _may_remove(st, folder_st, me):
            continue
        found.append((path, st))
    sources: list[_Source] = []
    spent: dict[int, int] = {}
    waiting = 0
    for path, st in found:
        got = _take(path, st, me, columns, opened)
        if isinstance(got, str):
            problems.append(got)
            continue
        if got is None:
            continue
        source, cost = got
        if not source.trusted:
            mine = spent.get(source.owner, 0) + cost
            if mine > FOREIGN_PER_WRITER or sum(spent.values()) + cost > FOREIGN_TOTAL:
                waiting += 1
                continue
            spent[source.owner] = mine
        source.order = len(sources)
        sources.append(source)
    if waiting:
        problems.append(
            f"{waiting} files of other users not read: over {_size(FOREIGN_PER_WRITER)} for one user"
            f" or {_size(FOREIGN_TOTAL)} for all (run `logsleuth history --compact` as root)"
        )
    return sources, problems


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a file"


def _may_remove(st: os.stat_result, folder_st: os.stat_result, me: int) -> bool:
    """Whether this process may remove the file (POSIX: in a sticky folder, only its owner, the folder's or root)."""
    return me in (0, st.st_uid, folder_st.st_uid) or not folder_st.st_mode & stat.S_ISVTX


def _take(
    path: str, st: os.stat_result, me: int, columns: frozenset[str] | None, opened: contextlib.ExitStack
) -> tuple[_Source, int] | str | None:
    """The checked file and what it may cost (bytes read + what they may decode to), a problem, or None
    when it has gone. Another user's file is read whole and its page headers checked; a big file of
    root's or the reader's is bounded by its footer alone and stays open, to be decoded from there."""
    trusted = st.st_uid in (0, me)
    limits = OWN_LIMITS if trusted else FOREIGN_LIMITS
    whose = "a file of root or the reader" if trusted else f"another user's file (uid {st.st_uid})"
    if st.st_size > limits.file_bytes:
        return f"{path}: {_size(st.st_size)}, over the limit of {_size(limits.file_bytes)} for {whose}; skipped"
    try:
        fd = os.open(path, READ_UNTRUSTED)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: replaced by a link since the lstat
        return f"{path}: cannot be read ({exc.strerror}); skipped"
    keep = False
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino, now.st_uid) != (st.st_dev, st.st_ino, st.st_uid):
            return f"{path}: replaced while being read; skipped"
        big = trusted and now.st_size > BIG_FILE_BYTES
        if big:
            if now.st_size > limits.file_bytes:
                return f"{path}: grew past the limit of {_size(limits.file_bytes)} for {whose}; skipped"
            data = _footer(fd, now.st_size)
        else:
            chunks, size = [], 0
            while chunk := os.read(fd, min(now.st_size + 1, limits.file_bytes + 1 - size)):  # one read, as a rule
                chunks.append(chunk)
                size += len(chunk)
                if size > limits.file_bytes:
                    return f"{path}: grew past the limit of {_size(limits.file_bytes)} for {whose}; skipped"
            data = b"".join(chunks)
        shape = inspect(data, pages=not trusted, size=now.st_size if big else None, columns=None if trusted else columns, span=trusted)
        if big and not _readable_by_name(fd):
            return f"{path}: cannot be read from its descriptor here; skipped"
        keep = big
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror}); skipped"
    except Malformed as exc:
        return f"{path}: unreadable (not a valid Parquet file: {exc}); skipped"
    finally:
        if keep:
            opened.callback(os.close, fd)
        else:
            os.close(fd)
    decoded = shape.plain if trusted else shape.worst
    if shape.rows > limits.rows:
        return f"{path}: {shape.rows} rows, over the limit of {limits.rows} for {whose}; skipped"
    if decoded > limits.decoded:
        return f"{path}: may decode to {_size(decoded)}, over the limit of {_size(limits.decoded)} for {whose}; skipped"
    if big:
        return _Source(path, st.st_uid, trusted, shape, fd=fd), decoded
    return _Source(path, st.st_uid, trusted, shape, data=data), decoded + len(data)


def _footer(fd: int, size: int) -> bytes:
    """The file's end from its footer on (what :func:`inspect` needs of a trusted file), read from ``fd``."""
    tail = _pread(fd, min(size, 8), size - min(size, 8))
    start = footer_start(size, tail)
    if size - start > 256 << 20:
        raise Malformed("footer larger than 256 MiB")
    return _pread(fd, size - start, start)


def _pread(fd: int, n: int, offset: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, offset + got)
        if not chunk:
            raise Malformed("shorter than its size")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _fd_path(fd: int) -> str:
    """A name that opens the file behind ``fd`` itself, whatever has been renamed or put in its place since."""
    return f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else f"/dev/fd/{fd}"


def _readable_by_name(fd: int) -> bool:
    try:
        st, now = os.stat(_fd_path(fd)), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover


# -- decoding, and counting a verdict seen twice once ----------------------------------------------


def _assemble(sources: list[_Source], names: list[str]) -> Scanned:
    """The store's rows from these files: small files decoded now, big ones as lazy scans.

    A verdict seen twice (a compaction between writing its merged file and removing the files it
    merged; a file copied) counts once: two rows are one verdict when their id and writer agree.
    A copy has its verdict's time too, so only rows that can have one are compared: every row of a
    small file, and a big file's rows whose time is one of the small files' rows, or lies where two
    big files overlap in time, or is missing. After a compaction big files do not overlap, so a
    store of millions of verdicts compares a few thousand ids, not millions."""
    problems: list[str] = []
    want = [n for n in TABLE_SCHEMA if n in _decoded(names)]
    small = _decode_small([s for s in sources if not s.big], want, problems)
    big: list[_Source] = []
    for s in sources:
        if s.big:
            try:
                s.schema = dict(pl.read_parquet_schema(_fd_path(s.fd or 0)))
            except (Exception, pl.exceptions.PanicException):
                problems.append(f"{s.path}: unreadable (its schema); skipped")
                continue
            big.append(s)
    candidates = [small.select(pl.lit(True).alias("_small"), _ORDER, pl.int_range(pl.len(), dtype=pl.UInt32).alias(_ROW), "id", WRITER)]
    times = small.get_column("time").drop_nulls().unique().sort()
    zone = _overlaps([s.shape.span or (_MIN, _MAX) for s in big])
    for s in list(big):
        which = _candidates(s, times, zone)
        if which is None:
            continue
        try:
            rows = _lazy(s, ["id", "time", WRITER], row_index=True).filter(which).select(_ROW, "id", WRITER).collect()
        except (Exception, pl.exceptions.PanicException):
            problems.append(f"{s.path}: unreadable (it fails to decode); skipped")
            big.remove(s)
            continue
        candidates.append(rows.select(pl.lit(False).alias("_small"), pl.lit(s.order, pl.UInt32).alias(_ORDER), _ROW, "id", WRITER))
    # of two copies the big file's stays (it keeps its stored summary), else the first by name
    seen = pl.concat(candidates).sort("_small", _ORDER, _ROW)
    twice = seen.filter(~(pl.col("id").is_null() | pl.struct("id", WRITER).is_first_distinct()))
    drops: dict[int, pl.Series] = {o: g.get_column(_ROW) for (o,), g in twice.partition_by(_ORDER, as_dict=True).items()}
    small_drop = twice.filter(pl.col(_ORDER).is_in([s.order for s in sources if not s.big])).get_column(_ROW)
    if small_drop.len():
        small = small.with_row_index(_ROW).filter(~pl.col(_ROW).is_in(small_drop.implode())).drop(_ROW)
    parts = []
    for s in big:
        drop = drops.get(s.order)
        stored = None if drop is not None else _stored(s)
        parts.append(Part(s.path, _lazy(s, names, drop=drop), s.shape.span, stored))
    return Scanned(problems, small.select(names), parts)


def _stored(s: _Source) -> dict[str, str] | None:
    """The summary ``compact`` stored in a big file of root's or the reader's, if it holds one for all its rows."""
    try:
        meta = pl.read_parquet_metadata(_fd_path(s.fd or 0))
    except (Exception, pl.exceptions.PanicException):
        return None
    if meta.get(f"{_STORED}.rows") != str(s.rows) or not all(f"{_STORED}.{k}" in meta for k in _PARTIALS):
        return None
    return {k: meta[f"{_STORED}.{k}"] for k in _PARTIALS}


_MIN, _MAX = -(1 << 63), (1 << 63) - 1


def _overlaps(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Where two or more of the closed intervals ``spans`` overlap, as closed intervals."""
    events = sorted([(a, 0) for a, _ in spans] + [(z, 1) for _, z in spans])  # at one instant, starts first
    out, depth, start = [], 0, 0
    for x, end in events:
        if not end:
            depth += 1
            if depth == 2:
                start = x
        else:
            if depth == 2:
                out.append((start, x))
            depth -= 1
    return out


def _moment(us: int) -> pl.Expr:
    """A time (microseconds since 1970, UTC) as a literal to compare the ``time`` column with (any int64:
    a forged time may lie beyond what Python's datetime holds)."""
    return pl.lit(us, dtype=pl.Int64).cast(pl.Datetime("us", "UTC"))


def _candidates(s: _Source, times: pl.Series, zone: list[tuple[int, int]]) -> pl.Expr | None:
    """Which rows of big file ``s`` may be a copy of a row elsewhere (see :func:`_assemble`), or None."""
    t = pl.col("time")
    low, high = s.shape.span or (_MIN, _MAX)
    parts: list[pl.Expr] = []
    if times.len():
        us = times.dt.epoch("us")
        inside = times.filter((us >= low) & (us <= high))
        if inside.len():  # the bounds let the reader skip row groups; the list picks the rows
            edges = inside.dt.epoch("us")
            low_us, high_us = int(edges.min()), int(edges.max())
            parts.append(t.is_between(_moment(low_us), _moment(high_us)) & t.is_in(inside.implode()))
    overlap = [(max(a, low), min(z, high)) for a, z in zone if a <= high and z >= low]
    if len(overlap) > 32:  # many: their hull (comparing more rows than needed is only slower)
        overlap = [(overlap[0][0], overlap[-1][1])]
    for a, z in overlap:
        parts.append(t.is_not_null() if (a, z) == (_MIN, _MAX) else t.is_between(_moment(a), _moment(z)))
    if s.shape.nulls != 0:  # rows without a time (or not known): compared too
        parts.append(t.is_null())
    return functools.reduce(operator.or_, parts) if parts else None


def _lazy(s: _Source, names: list[str], *, row_index: bool = False, drop: pl.Series | None = None) -> pl.LazyFrame:
    """A big file's rows as a lazy scan of its descriptor: ``names`` in :data:`TABLE_SCHEMA`'s types
    (a column it lacks is null), the writer (what it stores: a trusted file), without rows ``drop``."""
    have = s.schema
    cols = []
    for n in names:
        if n == WRITER:
            said = pl.col(WRITER).cast(pl.Int64) if WRITER in have else pl.lit(None, pl.Int64)
            cols.append(pl.coalesce(said, pl.lit(s.owner, pl.Int64)).alias(WRITER))
        elif n not in have:
            cols.append(pl.lit(None, dtype=TABLE_SCHEMA[n]).alias(n))
        elif n == "confidence":  # not a finite number (a forged row): null, so JSON output stays JSON
            c = pl.col(n).cast(pl.Float64)
            cols.append(pl.when(c.is_finite()).then(c).alias(n))
        else:
            cols.append(pl.col(n) if have[n] == TABLE_SCHEMA[n] else pl.col(n).cast(TABLE_SCHEMA[n]))
    index = row_index or (drop is not None and drop.len() > 0)
    lf = pl.scan_parquet(_fd_path(s.fd or 0), row_index_name=_ROW if index else None)
    if drop is not None and drop.len():
        lf = lf.filter(~pl.col(_ROW).is_in(drop.implode()))
    return lf.select(*([_ROW] if row_index else []), *cols)


def _decode_small(sources: list[_Source], names: list[str], problems: list[str]) -> pl.DataFrame:
    """The rows of small files (read into memory), ``names`` and each row's file (``_src``), decoded
    a batch of files at a time; a file that fails to decode is reported and left out."""
    frames, batch, size = [], [], 0
    for s in sources:
        batch.append(s)
        size += len(s.data or b"")
        if size >= _BATCH_BYTES:
            frames.append(_decode(batch, names, problems))
            batch, size = [], 0
    if batch:
        frames.append(_decode(batch, names, problems))
    schema = {**{n: TABLE_SCHEMA[n] for n in names}, _ORDER: pl.UInt32()}
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _decode(sources: list[_Source], names: list[str], problems: list[str]) -> pl.DataFrame:
    """The rows of these files, ``names`` with their writers; the files' bytes are let go."""
    try:  # all at once (fast); any file that does not fit the schema: one by one
        table = (
            pl.scan_parquet([s.data or b"" for s in sources], schema=TABLE_SCHEMA, missing_columns="insert", extra_columns="ignore")
            .select(names)
            .collect()
        )
        if table.height != sum(s.rows for s in sources):
            raise ValueError("row counts differ from the footers'")
        whose = pl.DataFrame(
            {
                "owner": [s.owner for s in sources],
                "trusted": [s.trusted for s in sources],
                _ORDER: [s.order for s in sources],
                "n": [s.rows for s in sources],
            },
            schema={"owner": pl.Int64(), "trusted": pl.Boolean(), _ORDER: pl.UInt32(), "n": pl.Int64()},
        )
        whose = whose.filter(pl.col("n") > 0).select(pl.col("owner", "trusted", _ORDER).repeat_by("n")).explode("owner", "trusted", _ORDER)
        out = _claims(_conform(table, names), whose.get_column("owner"), whose.get_column("trusted"))
        out = out.with_columns(whose.get_column(_ORDER))
    except (Exception, pl.exceptions.PanicException):  # a panic in the decoder, on a crafted file, too
        frames = []
        for s in sources:
            try:
                have = pl.read_parquet_schema(io.BytesIO(s.data or b""))
                frame = _conform(pl.read_parquet(io.BytesIO(s.data or b""), columns=[n for n in names if n in have]), names)
                owner = pl.repeat(s.owner, frame.height, dtype=pl.Int64, eager=True)
                frame = _claims(frame, owner, pl.repeat(s.trusted, frame.height, eager=True))
                frames.append(frame.with_columns(pl.lit(s.order, pl.UInt32).alias(_ORDER)))
            except (Exception, pl.exceptions.PanicException) as exc:
                problems.append(f"{s.path}: unreadable ({type(exc).__name__}); skipped")
                s.failed = True
        schema = {**{n: TABLE_SCHEMA[n] for n in names}, _ORDER: pl.UInt32()}
        out = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
    for s in sources:
        s.data = None
    return out


def _claims(table: pl.DataFrame, owner: pl.Series, trusted: pl.Series) -> pl.DataFrame:
    """Each row's writer: what the file says when its owner is trusted (root or the reader), else the owner."""
    said = pl.col(WRITER)
    return (
        table.with_columns(_owner=owner.alias("_owner"), _trusted=trusted.alias("_trusted"))
        .with_columns(pl.when(pl.col("_trusted") & said.is_not_null()).then(said).otherwise(pl.col("_owner")).cast(pl.Int64).alias(WRITER))
        .drop("_owner", "_trusted")
    )


def _conform(df: pl.DataFrame, names: list[str] | None = None) -> pl.DataFrame:
    """Fill columns an older file lacks, so every file reads as one table; a confidence that is
    not a finite number (a forged row) becomes null, so JSON output stays JSON."""
    names = list(TABLE_SCHEMA) if names is None else names
    out = df.select((pl.col(n).cast(TABLE_SCHEMA[n]) if n in df.columns else pl.lit(None, dtype=TABLE_SCHEMA[n]).alias(n)) for n in names)
    if "confidence" in names:
        out = out.with_columns(pl.when(pl.col("confidence").is_finite()).then(pl.col("confidence")).alias("confidence"))
    return out


# -- compaction ---------------------------------------------------------------------------------------


def compact(store: str | os.PathLike[str], *, lock_timeout: float | None = None, part_rows: int | None = None) -> tuple[int, list[str]]:
    """Merge the store's files so that reading stays fast; returns (files merged, problems).

    Files of at most ``part_rows`` verdicts (default :data:`MERGE_ROWS`) come out, each holding
    a stretch of time no other holds: the small files (what epilogs and ``batch`` append) are
    merged with the merged files whose stretch of time they fall in, and cut by time into files
    of between half and all of ``part_rows``. A merged file already that full and overlapping
    nothing new is left as it is, so a compaction rewrites what changed, not the whole store,
    and the store stays at about 2 x verdicts / ``part_rows`` files. Memory: one output file's
    verdicts, and up to ``part_rows`` verdicts of small files, at a time.

    Safe while epilogs keep appending: only the files listed at the start are merged, the merged
    files are renamed into place before they are removed, and readers count the verdicts they
    meet twice in between once. The merged files keep each row's ``writer_uid``. A lock file keeps
    two compactions apart (waiting at most ``lock_timeout``, default :data:`LOCK_TIMEOUT_S`, then an
    OSError); unreadable and refused files are left where they are, and so are files this process
    may not remove (another user's, in a sticky folder).
    """
    folder = Path(store)
    limit = max(2, part_rows or MERGE_ROWS)
    merged, kept = 0, []
    with _compaction_lock(folder, LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout):
        while True:  # more small files than one round takes: another round, from a fresh listing
            n, problems, more, unremoved = _compact_round(folder, limit)
            merged += n
            kept += unremoved
            if not more or not n:
                return merged, _capped(kept + problems)


def _compact_round(folder: Path, limit: int) -> tuple[int, list[str], bool, list[str]]:
    """One compaction: (files merged, problems, whether small files were left for another round,
    files merged but not removed)."""
    with contextlib.ExitStack() as opened:
        sources, problems = _sources(folder, removable=True, columns=None, opened=opened)
        settled: list[_Source] = []
        merging: list[_Source] = []
        more, taken = False, 0
        for s in sources:
            if _settled(s, limit):
                settled.append(s)
                continue
            if not s.big:
                if taken >= limit:  # the rest wait for the next round: memory stays bounded
                    more = True
                    continue
                taken += s.rows
            merging.append(s)
        names = list(TABLE_SCHEMA)
        rows = [_decode_small([s for s in merging if not s.big], names, problems)]
        times = [rows[0].get_column("time")]
        for s in [*settled, *merging]:
            if s.big:
                try:
                    s.schema = dict(pl.read_parquet_schema(_fd_path(s.fd or 0)))
                except (Exception, pl.exceptions.PanicException):
                    problems.append(f"{s.path}: unreadable (its schema); skipped")
                    s.failed = True
        for s in merging:
            if s.big and not s.failed:
                _add_times(s, times, problems)
        merging = [s for s in merging if not s.failed]
        stay, pulled = _pulled([s for s in settled if not s.failed], pl.concat(times).drop_nulls().sort())
        rows.append(_decode_small([s for s in pulled if not s.big], names, problems))
        times.append(rows[-1].get_column("time"))
        for s in pulled:
            if s.big:
                _add_times(s, times, problems)  # one that fails is left where it is, its stretch of time its own
        merged = sorted([s for s in [*merging, *pulled] if not s.failed], key=lambda s: s.order)
        if len(merged) < 2:
            return 0, problems, False, []
        walls = [s.shape.span or (_MIN, _MAX) for s in [*stay, *(s for s in pulled if s.failed)]]
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        small = pl.concat(rows)
        for i, which in enumerate(_ranges(pl.concat(times), walls, limit)):
            part = _part(small, [s for s in merged if s.big], which)
            if part.height:
                part = part.sort("time")
                _write_atomic(part, folder / f"{stamp}-compacted-{i:04d}-{uuid.uuid4().hex}.parquet", metadata=_store_summary(part))
    unremoved = []
    for s in merged:
        try:
            Path(s.path).unlink(missing_ok=True)
        except OSError as exc:  # its verdicts are in the merged files too, and count once
            unremoved.append(f"{s.path}: merged but not removed ({exc.strerror})")
    return len(merged), problems, more, unremoved


def _settled(s: _Source, limit: int) -> bool:
    """A merged file that need not be merged again: trusted, between half and all of ``limit`` rows,
    all with a time, by statistics that say which stretch of time it holds."""
    return s.trusted and limit // 2 <= s.rows <= limit and s.shape.span is not None and s.shape.nulls == 0


def _add_times(s: _Source, times: list[pl.Series], problems: list[str]) -> None:
    """Add a big file's times to ``times`` (8 bytes a verdict); one that fails to decode is marked so."""
    try:
        times.append(_lazy(s, ["time"]).collect(engine="streaming").get_column("time"))
    except (Exception, pl.exceptions.PanicException):
        problems.append(f"{s.path}: unreadable (it fails to decode); skipped")
        s.failed = True


def _pulled(settled: list[_Source], new: pl.Series) -> tuple[list[_Source], list[_Source]]:
    """(the settled files left as they are, those to merge again): a settled file is merged again when a
    new verdict falls in its stretch of time, or when it overlaps another settled file."""
    spans = sorted(((s.shape.span or (_MIN, _MAX)), s.order, s) for s in settled)
    groups: list[list[tuple[tuple[int, int], int, _Source]]] = []
    for item in spans:
        if groups and item[0][0] <= max(g[0][1] for g in groups[-1]):
            groups[-1].append(item)
        else:
            groups.append([item])
    us = new.dt.epoch("us")
    stay: list[_Source] = []
    pulled: list[_Source] = []
    for group in groups:
        low, high = group[0][0][0], max(g[0][1] for g in group)
        hit = len(group) > 1 or bool(us.len() and int(us.search_sorted(high, side="right")) > int(us.search_sorted(low, side="left")))
        (pulled if hit else stay).extend(g[2] for g in group)
    return stay, pulled


def _ranges(times: pl.Series, kept: list[tuple[int, int]], limit: int) -> list[tuple[int, int] | None]:
    """Half-open [low, high) stretches (microseconds; _MIN and _MAX: open ends) of at most about ``limit``
    of ``times`` each, together holding every one of them, none crossing the edge of a file that stays
    (``kept``); None: the verdicts without a time.

    The time axis is cut at the edges of the kept files; each piece's verdicts are cut evenly into
    ceil(n / limit) ranges (so each holds at least half of ``limit`` when there are that many),
    never between two verdicts of the same instant (copies of a verdict share it)."""
    us = times.drop_nulls().dt.epoch("us").sort()
    out: list[tuple[int, int] | None] = [None] if times.null_count() else []
    edges = sorted({_MIN, _MAX, *(x for a, z in kept for x in (a, min(z, _MAX - 1) + 1))})
    for low, high in itertools.pairwise(edges):
        piece = us.filter((us >= low) & (us < high)) if high != _MAX else us.filter(us >= low)
        n = piece.len()
        if not n:
            continue
        k = -(-n // limit)
        cuts = [low, *(int(piece[(n * j) // k]) for j in range(1, k)), high]
        out.extend((a, z) for a, z in itertools.pairwise(cuts) if a < z)
    return out


def _part(small: pl.DataFrame, big: list[_Source], which: tuple[int, int] | None) -> pl.DataFrame:
    """The verdicts of one output file: those of ``small`` and of the files ``big`` in range ``which``
    (None: without a time), each once (id and writer; copies share their time, so their range)."""
    t = pl.col("time")
    if which is None:
        where = t.is_null()
    else:
        low, high = which
        where = t.is_not_null()
        if low != _MIN:
            where &= t >= _moment(low)
        if high != _MAX:
            where &= t < _moment(high)
    names = list(TABLE_SCHEMA)
    frames = [small.filter(where).select(names)]
    frames += [_lazy(s, names).filter(where).collect(engine="streaming") for s in big]
    rows = pl.concat(frames, rechunk=False)  # which copy of a verdict stays does not matter: they are the same
    once = rows.select(pl.col("id").is_null() | pl.struct("id", WRITER).is_first_distinct()).to_series()
    return rows if once.all() else rows.filter(once)  # copied only when a verdict is there twice


@contextlib.contextmanager
def _compaction_lock(folder: Path, timeout: float) -> Iterator[None]:
    """Hold ``.compact.lock`` (a file of this user's, mode 0600) for the duration, waiting at most ``timeout`` seconds.

    In a shared store anyone may have put something under that name first: a link
    (root would create or open its target), a FIFO (opening blocks), or a file of
    their own that they hold locked. Such a thing is removed, never opened; the
    lock is then created anew, never through a link."""
    import fcntl

    path = folder / ".compact.lock"
    me = os.geteuid()
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if not _own_file(st, me):
            try:
                os.unlink(path)
            except OSError as exc:
                raise OSError(exc.errno, f"{path} is not this user's file and cannot be removed ({exc.strerror})") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not _own_file(st, me):
            raise OSError(errno.EPERM, f"{path} was replaced by another user's file; try again")
        if stat.S_IMODE(st.st_mode) != 0o600:  # one left by an older version: others could open it and hold it
            os.fchmod(fd, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OSError(errno.EWOULDBLOCK, f"{path} is held by another compaction (waited {timeout:g} s)") from None
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        yield
    finally:
        os.close(fd)


def _own_file(st: os.stat_result, me: int) -> bool:
    """A regular file of this user's with no other name (a hard link to a file elsewhere is not one to chmod)."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == me and st.st_nlink == 1


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``7d``, ``12h``, ``30m`` or an ISO date/time (UTC when no zone) -> an aware datetime."""
    now = now or datetime.now(timezone.utc)
    m = re.fullmatch(r"(\d+)\s*([dhm])", text.strip())
    if m:
        unit = {"d": "days", "h": "hours", "m": "minutes"}[m.group(2)]
        return now - timedelta(**{unit: int(m.group(1))})
    when = datetime.fromisoformat(text.strip())
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


_TRUNC = {"day": "1d", "week": "1w", "month": "1mo"}
WEEK = timedelta(days=7)


#: The partial aggregates a summary is combined from, and their columns: per cause (over all verdicts:
#: ``count`` in the window, ``ever``: the first of all); per node and cause (failures, exploded); who
#: wrote a node's failures; failures per day. ``compact`` stores them in each file it writes.
_PARTIALS: dict[str, dict[str, pl.DataType]] = {
    "causes": {
        "category": pl.String(),
        "cause": pl.String(),
        "count": pl.Int64(),
        "first": pl.Datetime("us", "UTC"),
        "last": pl.Datetime("us", "UTC"),
        "ever": pl.Datetime("us", "UTC"),
        "this_week": pl.Int64(),
        "last_week": pl.Int64(),
    },
    "nodes": {
        "node": pl.String(),
        "category": pl.String(),
        "cause": pl.String(),
        "n": pl.Int64(),
        "first": pl.Datetime("us", "UTC"),
        "last": pl.Datetime("us", "UTC"),
    },
    "writers": {"node": pl.String(), "writer": pl.Int64()},
    "days": {"day": pl.Date(), "category": pl.String(), "n": pl.Int64()},
}
_STORED = "logsleuth.summary.v1"  # the footer key-value metadata that holds them, base64 Arrow IPC each


def summarize(
    table: pl.DataFrame | pl.LazyFrame | Scanned,
    *,
    by: str = "day",
    top: int = 10,
    since: datetime | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Causes over time, the nodes implicated again and again (most often first), and this week's
    causes against last week's, from the verdicts of ``table`` (a store of :func:`scan` is read lazily).

    Each node says how many writers (uids, see Trust above) its failures come from. Clean runs
    (category ``none``) are counted but take no part in the rest; cancelled and timed-out jobs count
    as failures but implicate no node. ``since``: only verdicts from then on, except for the week
    against the week before, where a cause is new when no verdict in the whole table named it before
    this week. This week is the 7 days up to the newest verdict, or up to ``now`` (default: the clock)
    when that is earlier: a summary is the same whenever it is made, and a verdict dated in the
    future does not move the weeks.

    It is a few group-bys run as one streaming query, so memory does not grow with the table. Of a
    scanned store, a file ``compact`` wrote adds the summary it stored (its rows are not read) when
    it lies wholly before the two weeks and wholly inside or outside ``since``: a year of ten million
    verdicts reads the rows of the last weeks only."""
    clock = now or datetime.now(timezone.utc)
    newest = table.newest() if isinstance(table, Scanned) else table.lazy().select(pl.col("time").max()).collect().item()
    now = min(clock, newest) if isinstance(newest, datetime) else clock
    stored: list[dict[str, pl.DataFrame]] = []
    if isinstance(table, Scanned):
        rows = [table.small.lazy()]
        for part in table.parts:
            got = _stored_partials(part, since, now)
            if got is None:
                rows.append(part.frame)
            else:
                stored.append(got)
        lf = pl.concat(rows, how="vertical")
    else:
        lf = table.lazy()
    return _summary(_combine([_partials(lf, since=since, now=now), *stored]), by=by, top=top, now=now)


def _partials(lf: pl.LazyFrame, *, since: datetime | None, now: datetime) -> dict[str, pl.DataFrame]:
    """The partial aggregates of the verdicts of ``lf`` (see :data:`_PARTIALS`), by one streaming query."""
    have = lf.collect_schema().names()
    t = pl.col("time")
    window = pl.lit(True) if since is None else (t >= since).fill_null(False)
    base = lf.select(
        "time",
        "category",
        "cause",
        "nodes",
        (pl.col(WRITER) if WRITER in have else pl.lit(None, pl.Int64)).alias("writer"),
        window.alias("_in"),
    )
    failures = base.filter(pl.col("_in") & (pl.col("category") != "none"))
    exploded = failures.select("time", "category", "cause", "writer", node="nodes").explode("node", empty_as_null=False).drop_nulls("node")
    queries = {
        "causes": base.select(
            "category",
            "cause",
            "_in",
            pl.when("_in").then(t).alias("_t"),
            t,
            (t >= now - WEEK).fill_null(False).alias("_this"),
            ((t >= now - 2 * WEEK) & (t < now - WEEK)).fill_null(False).alias("_last"),
        )
        .group_by("category", "cause")
        .agg(
            count=pl.col("_in").sum(),
            first=pl.col("_t").min(),
            last=pl.col("_t").max(),
            ever=t.min(),
            this_week=pl.col("_this").sum(),
            last_week=pl.col("_last").sum(),
        ),
        "nodes": exploded.group_by("node", "category", "cause").agg(n=pl.len(), first=t.min(), last=t.max()),
        "writers": exploded.filter(~pl.col("category").is_in(_not_node_faults())).select("node", "writer").drop_nulls().unique(),
        "days": failures.drop_nulls("time").group_by(t.dt.date().alias("day"), "category").agg(n=pl.len()),
    }
    got = pl.collect_all(list(queries.values()), engine="streaming")
    return {k: frame.select(pl.col(c).cast(d) for c, d in _PARTIALS[k].items()) for k, frame in zip(queries, got, strict=True)}


def _combine(partials: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Partial aggregates of several sets of verdicts as those of all of them."""
    every = {k: pl.concat([p[k] for p in partials if k in p], how="vertical", rechunk=False) for k in _PARTIALS}
    return {
        "causes": every["causes"]
        .group_by("category", "cause")
        .agg(
            pl.col("count").sum(),
            pl.col("first").min(),
            pl.col("last").max(),
            pl.col("ever").min(),
            pl.col("this_week").sum(),
            pl.col("last_week").sum(),
        ),
        "nodes": every["nodes"].group_by("node", "category", "cause").agg(pl.col("n").sum(), pl.col("first").min(), pl.col("last").max()),
        "writers": every["writers"],  # repeats across the parts: made distinct for the nodes listed only
        "days": every["days"].group_by("day", "category").agg(pl.col("n").sum()),
    }


def _stored_partials(part: Part, since: datetime | None, now: datetime) -> dict[str, pl.DataFrame] | None:
    """The summary a file of ``compact`` holds, when it can stand for the file's rows: the file lies
    wholly before the two weeks compared, and wholly inside ``since`` (or wholly before it: then it
    only says when each cause was first seen). None: its rows are to be read."""
    if part.stored is None or part.span is None:
        return None
    low, high = part.span
    if high >= _micros(now - 2 * WEEK):
        return None
    before = since is not None and _micros(since) > high
    if since is not None and not before and _micros(since) > low:
        return None
    try:
        got = {k: pl.read_ipc(io.BytesIO(base64.b64decode(v))) for k, v in part.stored.items()}
        got["causes"] = got["causes"].with_columns(ever=pl.col("first"), this_week=pl.lit(0, pl.Int64), last_week=pl.lit(0, pl.Int64))
        got = {k: frame.select(pl.col(c).cast(d) for c, d in _PARTIALS[k].items()) for k, frame in got.items()}
    except (Exception, pl.exceptions.PanicException):  # damaged or of another version: the rows say it
        return None
    if before:  # none of its verdicts counts, but they say which causes are old
        causes = got["causes"].with_columns(count=pl.lit(0, pl.Int64), first=None, last=None)
        return {"causes": causes.select(pl.col(c).cast(d) for c, d in _PARTIALS["causes"].items())}
    return got


def _micros(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def _store_summary(frame: pl.DataFrame) -> dict[str, str]:
    """What ``compact`` stores in a file it writes: the partial aggregates of all its verdicts."""
    got = _partials(frame.lazy(), since=None, now=datetime.now(timezone.utc))
    got["causes"] = got["causes"].select("category", "cause", "count", "first", "last")
    out = {f"{_STORED}.rows": str(frame.height)}
    for k, part in got.items():
        buf = io.BytesIO()
        part.write_ipc(buf, compression="zstd")
        out[f"{_STORED}.{k}"] = base64.b64encode(buf.getvalue()).decode("ascii")
    return out


def _summary(parts: dict[str, pl.DataFrame], *, by: str, top: int, now: datetime) -> dict[str, Any]:
    """The summary from the combined partial aggregates (small frames)."""
    causes, days = parts["causes"], parts["days"]
    failed = pl.col("category").is_not_null() & (pl.col("category") != "none")
    totals = causes.select(
        verdicts=pl.col("count").sum(),
        failures=pl.col("count").filter(failed).sum(),
        first=pl.col("first").min(),
        last=pl.col("last").max(),
    ).row(0, named=True)
    verdicts, n_fail = totals["verdicts"] or 0, totals["failures"] or 0
    nodes = (
        parts["nodes"]
        .filter(~pl.col("category").is_in(_not_node_faults()))
        .group_by("node", "category")
        .agg(pl.col("n").sum(), pl.col("first").min(), pl.col("last").max())
        .group_by("node")
        .agg(
            failures=pl.col("n").sum(),
            first_seen=pl.col("first").min(),
            last_seen=pl.col("last").max(),
            causes=pl.struct("category", "n").sort_by("n", "category", descending=[True, False]),
        )
        .sort(["failures", "last_seen", "node"], descending=[True, True, False])
        .head(top)
    )
    writers = (
        parts["writers"].filter(pl.col("node").is_in(nodes.get_column("node").implode())).unique().group_by("node").agg(writers=pl.len())
    )
    nodes = nodes.join(writers, on="node", how="left", maintain_order="left")
    cause_nodes = parts["nodes"].group_by("category", "cause").agg(nodes=pl.len())
    listed = (
        causes.filter(failed & (pl.col("count") > 0))
        .join(cause_nodes, on=["category", "cause"], how="left", nulls_equal=True)
        .sort(["count", "last", "cause"], descending=[True, True, False])
    )
    timeline = (
        days.with_columns(period=pl.col("day").dt.truncate(_TRUNC[by]))
        .group_by("period", "category")
        .agg(n=pl.col("n").sum())
        .group_by("period")
        .agg(total=pl.col("n").sum(), causes=pl.struct("category", "n").sort_by("n", "category", descending=[True, False]))
        .sort("period")
    )
    recent = (
        causes.filter(failed & ((pl.col("this_week") > 0) | (pl.col("last_week") > 0)))
        .with_columns(new=pl.col("ever") >= now - WEEK)
        .sort(["new", "this_week", "last_week", "cause"], descending=[True, True, True, False])
    )
    return {
        "verdicts": verdicts,
        "failures": n_fail,
        "clean": verdicts - n_fail,
        "first": _iso(totals["first"]),
        "last": _iso(totals["last"]),
        "by": by,
        "nodes": [
            {
                "node": r["node"],
                "failures": r["failures"],
                "share": round(r["failures"] / n_fail, 4) if n_fail else 0.0,
                "causes": {c["category"]: c["n"] for c in r["causes"]},
                "writers": r["writers"] or 0,  # how many users' claims these failures are
                "first_seen": _iso(r["first_seen"]),
                "last_seen": _iso(r["last_seen"]),
            }
            for r in nodes.iter_rows(named=True)
        ],
        "causes": [
            {
                "cause": r["cause"],
                "category": r["category"],
                "count": r["count"],
                "share": round(r["count"] / n_fail, 4) if n_fail else 0.0,
                "nodes": r["nodes"] or 0,
                "last_seen": _iso(r["last"]),
            }
            for r in listed.iter_rows(named=True)
        ],
        "timeline": [
            {"period": r["period"].isoformat(), "total": r["total"], "causes": {c["category"]: c["n"] for c in r["causes"]}}
            for r in timeline.iter_rows(named=True)
        ],
        "this_week": {
            "from": _iso(now - WEEK),
            "to": _iso(now),
            "failures": int(recent.get_column("this_week").sum()),
            "last_week": int(recent.get_column("last_week").sum()),
            "causes": [
                {
                    "cause": r["cause"],
                    "category": r["category"],
                    "this_week": r["this_week"],
                    "last_week": r["last_week"],
                    "new": r["new"],  # no verdict before this week named it
                    "first_seen": _iso(r["ever"]),
                }
                for r in recent.iter_rows(named=True)
            ],
        },
    }


def _iso(value: object) -> str | None:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else None


def render_terminal(summary: dict[str, Any], *, store: str, color: bool = True, width: int | None = None) -> str:
    """The summary for a person: recurring nodes first, then this week against the last, the causes, and causes over time."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width or 100, highlight=False)
    s = summary
    span = f" from {s['first']} to {s['last']}" if s["first"] else ""
    console.print(
        f"[bold]logsleuth history[/] {escape(store)}: {s['verdicts']} verdicts{span}; {s['failures']} failures, {s['clean']} clean runs"
    )
    if not s["failures"]:
        return buf.getvalue()

    def causes(counts: dict[str, int], limit: int = 3) -> str:
        items = list(counts.items())
        text = ", ".join(f"{c} {n}" for c, n in items[:limit])
        return escape(text + (f", +{len(items) - limit} more" if len(items) > limit else ""))

    nodes = Table(title="Nodes implicated most often", title_justify="left", header_style="bold", box=None, pad_edge=False)
    for col in ("node", "failures", "share", "causes", "last seen"):
        nodes.add_column(col, justify="right" if col in ("failures", "share") else "left")
    for i, n in enumerate(s["nodes"]):
        style = "bold red" if i == 0 and n["failures"] > 1 else ""
        nodes.add_row(escape(n["node"]), str(n["failures"]), f"{n['share']:.0%}", causes(n["causes"]), n["last_seen"] or "", style=style)
    if s["nodes"]:
        console.print(nodes)
    week = s.get("this_week")
    if week and week["causes"]:
        console.print(
            f"[bold]This week against the week before[/] (the 7 days to {week['to']}):"
            f" {week['failures']} failures, {week['last_week']} the week before"
        )
        recent = Table(header_style="bold", box=None, pad_edge=False)
        for col in ("cause", "category", "this week", "week before", ""):
            recent.add_column(col, justify="right" if col in ("this week", "week before") else "left")
        for c in week["causes"]:
            recent.add_row(
                escape(c["cause"]),
                escape(c["category"]),
                str(c["this_week"]),
                str(c["last_week"]),
                "new" if c["new"] else "",
                style="bold" if c["new"] else "",
            )
        console.print(recent)
    table = Table(title="Causes", title_justify="left", header_style="bold", box=None, pad_edge=False)
    for col in ("cause", "category", "count", "share", "nodes", "last seen"):
        table.add_column(col, justify="right" if col in ("count", "share", "nodes") else "left")
    for c in s["causes"]:
        table.add_row(
            escape(c["cause"]), escape(c["category"]), str(c["count"]), f"{c['share']:.0%}", str(c["nodes"]), c["last_seen"] or ""
        )
    console.print(table)
    over = Table(title=f"Failures per {s['by']}", title_justify="left", header_style="bold", box=None, pad_edge=False)
    for col in (s["by"], "failures", "causes"):
        over.add_column(col, justify="right" if col == "failures" else "left")
    for t in s["timeline"]:
        over.add_row(t["period"], str(t["total"]), causes(t["causes"]))
    console.print(over)
    return buf.getvalue()
