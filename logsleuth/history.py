"""A history of verdicts: append one per analysis, then see what keeps failing, and where.

The store is a folder of Parquet files, one per verdict. Each is written under
a hidden temporary name and renamed into place, so epilogs on many nodes can
append at the same time (also over NFS) without a lock, and a reader never sees
half a file. Reading takes every ``*.parquet`` in the folder as one table.
Many small files read slowly, so ``compact`` merges them now and then; each
verdict carries an id, so a reader never counts one twice while that happens.

Trust. A shared store (the epilog's, mode 1733) takes files from every job's
user, so a file is what its owner claims, and the reader (often root, from
cron) must not hang on it, run out of memory on it, or believe more than that:

- Only regular files are read: each is checked with ``lstat`` and opened with
  ``O_NOFOLLOW | O_NONBLOCK`` (its ``fstat`` must be the same file), so a FIFO,
  device, folder or symbolic link named ``*.parquet`` is skipped with a problem
  note, never opened or followed. A file is read once, from that descriptor.
- What a file may decode to is bounded before it is decoded: its Parquet
  footer and page headers give its rows, values and uncompressed bytes, and a
  file over :data:`FOREIGN_LIMITS` (another user's file; ``append`` writes one
  row of a few KiB) or :data:`OWN_LIMITS` (root's or the reader's) is skipped
  with a note. Other users' files may take at most :data:`FOREIGN_PER_WRITER`
  bytes per user and :data:`FOREIGN_TOTAL` together (read plus decoded); the
  rest wait, with a note, for a compaction.
- Each row carries ``writer_uid``: the uid that owns the file it came from.
  A file owned by root or by the reader (a compacted file, or one's own) is
  believed about its rows' ``writer_uid``; any other file's rows are its
  owner's, whatever it says. Two rows count as one verdict only when both
  their id and their writer agree, so no one can hide another's verdict by
  copying its id. ``compact`` stores ``writer_uid`` in the merged file, so
  merging keeps who wrote each row.
- ``compact`` never waits for ``.compact.lock`` longer than
  :data:`LOCK_TIMEOUT_S`, never follows a link planted under that name and
  replaces a lock file it does not own; it merges only files it may remove
  (all of them as root).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from . import __version__
from .files import READ_UNTRUSTED, write_atomic
from .report.model import Report

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
#: Jobs stopped from outside: the node they stopped on says nothing about the node.
NOT_NODE_FAULTS = ("slurm_cancelled", "slurm_time_limit")
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
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    frame = record(report, job=job, when=when, fingerprint=fingerprint, rules_version=rules_version)
    stamp = frame.item(0, "time").strftime("%Y%m%dT%H%M%S%f")
    host = _UNSAFE.sub("_", socket.gethostname())
    return _write_atomic(frame, folder / f"{stamp}-{_UNSAFE.sub('_', job or 'nojob')}-{host}-{frame.item(0, 'id')}.parquet")


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


def node_jobs(table: pl.DataFrame, node: str) -> pl.DataFrame:
    """The verdicts that implicate ``node``, newest first: the jobs behind a node's record (and who wrote each)."""
    return (
        table.filter(pl.col("nodes").list.contains(node) | (pl.col("first_node") == node))
        .sort("time", descending=True)
        .select(
            "time",
            "job",
            "category",
            "cause",
            "first_rank",
            "first_node",
            "confidence",
            "summary",
            *([WRITER] if WRITER in table.columns else []),
        )
    )


def _write_atomic(frame: pl.DataFrame, path: Path) -> Path:
    """Write to a hidden file, then rename (files.write_atomic): readers never see half a file,
    and nothing planted under the temporary name is written through. A write that fails (a full
    disk) is an OSError whichever engine wrote, so callers handle one kind of error."""
    try:
        write_atomic(path, frame.write_parquet, create_mode=0o644)
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
#: A file owned by root or by the reader (a compacted store): bounds against accidents, not attacks.
OWN_LIMITS = Limits(file_bytes=1 << 30, rows=10_000_000, decoded=8 << 30)
#: What the files of other users may take (bytes read + bytes they may decode to), per user and together;
#: past it, the rest wait for a compaction (one user's many files cannot crowd out the others').
FOREIGN_PER_WRITER = 128 << 20
FOREIGN_TOTAL = 1 << 30
#: Problems listed one by one; the rest are counted (a store full of junk must not flood the output).
MAX_PROBLEMS = 50
#: The longest ``compact`` waits for another compaction's lock before it gives up with an OSError.
LOCK_TIMEOUT_S = 30.0
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def load(store: str | os.PathLike[str]) -> Loaded:
    """Every verdict in the store, each with its writer's uid; a damaged or refused file is reported, not fatal."""
    folder = Path(store)
    if not folder.is_dir():
        return Loaded(pl.DataFrame(schema=TABLE_SCHEMA), [f"{folder}: not a folder (no history yet?)"])
    table, problems, _ = _read(folder)
    return Loaded(table, _capped(problems))


def _capped(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problems"]


@dataclass
class _Source:
    """One store file, read once from a descriptor that was checked to be a regular file."""

    path: str
    owner: int
    trusted: bool  # owned by root or the reader: believed about its rows' writer_uid
    data: bytes
    rows: int


def _read(folder: Path, *, removable: bool = False) -> tuple[pl.DataFrame, list[str], list[str]]:
    """(the verdicts in the folder's files, problems, the files that were read);
    with ``removable``, only the files this process may remove (what ``compact`` merges)."""
    sources, problems = _sources(folder, removable=removable)
    table, more, read = _decode(sources)
    # one chunk per file would make every later step crawl (5000 verdicts: 1.2 s to summarise, 8 ms rechunked);
    # a verdict seen twice (a compaction in progress) counts once: the same id from the same writer
    table = table.rechunk().filter(pl.col("id").is_null() | pl.struct("id", WRITER).is_first_distinct())
    return table, problems + more, [s.path for s in read]


def _sources(folder: Path, *, removable: bool) -> tuple[list[_Source], list[str]]:
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
        got = _take(path, st, me)
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


def _take(path: str, st: os.stat_result, me: int) -> tuple[_Source, int] | str | None:
    """The file's bytes and what they may decode to, a problem, or None when it has gone."""
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
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino, now.st_uid) != (st.st_dev, st.st_ino, st.st_uid):
            return f"{path}: replaced while being read; skipped"
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, limits.file_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limits.file_bytes:
                return f"{path}: grew past the limit of {_size(limits.file_bytes)} for {whose}; skipped"
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror}); skipped"
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        shape = _inspect(data, pages=not trusted)
    except _Malformed as exc:
        return f"{path}: unreadable (not a valid Parquet file: {exc}); skipped"
    decoded = shape.plain if trusted else shape.worst
    if shape.rows > limits.rows:
        return f"{path}: {shape.rows} rows, over the limit of {limits.rows} for {whose}; skipped"
    if decoded > limits.decoded:
        return f"{path}: may decode to {_size(decoded)}, over the limit of {_size(limits.decoded)} for {whose}; skipped"
    return _Source(path, st.st_uid, trusted, data, shape.rows), decoded + len(data)


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover


def _decode(sources: list[_Source]) -> tuple[pl.DataFrame, list[str], list[_Source]]:
    """(the rows of these files with their writers, problems, the files that were read)."""
    if not sources:
        return pl.DataFrame(schema=TABLE_SCHEMA), [], []
    problems: list[str] = []
    try:  # all at once (fast); any file that does not fit the schema: one by one
        table = pl.scan_parquet([s.data for s in sources], schema=TABLE_SCHEMA, missing_columns="insert", extra_columns="ignore").collect()
        if table.height != sum(s.rows for s in sources):
            raise ValueError("row counts differ from the footers'")
        whose = pl.DataFrame(
            {"owner": [s.owner for s in sources], "trusted": [s.trusted for s in sources], "n": [s.rows for s in sources]},
            schema={"owner": pl.Int64(), "trusted": pl.Boolean(), "n": pl.Int64()},
        )
        whose = whose.filter(pl.col("n") > 0).select(pl.col("owner", "trusted").repeat_by("n")).explode("owner", "trusted")
        return _claims(_conform(table), whose.get_column("owner"), whose.get_column("trusted")), [], sources
    except (Exception, pl.exceptions.PanicException):  # a panic in the decoder, on a crafted file, too
        frames, read = [], []
        for s in sources:
            try:
                frame = _conform(pl.read_parquet(io.BytesIO(s.data)))
                frames.append(
                    _claims(
                        frame, pl.repeat(s.owner, frame.height, dtype=pl.Int64, eager=True), pl.repeat(s.trusted, frame.height, eager=True)
                    )
                )
                read.append(s)
            except (Exception, pl.exceptions.PanicException) as exc:
                problems.append(f"{s.path}: unreadable ({type(exc).__name__}); skipped")
        return (pl.concat(frames) if frames else pl.DataFrame(schema=TABLE_SCHEMA)), problems, read


def _claims(table: pl.DataFrame, owner: pl.Series, trusted: pl.Series) -> pl.DataFrame:
    """Each row's writer: what the file says when its owner is trusted (root or the reader), else the owner."""
    said = pl.col(WRITER)
    return (
        table.with_columns(_owner=owner.alias("_owner"), _trusted=trusted.alias("_trusted"))
        .with_columns(pl.when(pl.col("_trusted") & said.is_not_null()).then(said).otherwise(pl.col("_owner")).cast(pl.Int64).alias(WRITER))
        .drop("_owner", "_trusted")
    )


def compact(store: str | os.PathLike[str], *, lock_timeout: float | None = None) -> tuple[int, list[str]]:
    """Merge the store's files into one, so that reading stays fast; returns (files merged, problems).

    Safe while epilogs keep appending: only the files listed at the start are
    merged, the merged file is renamed into place before they are removed, and
    readers count the verdicts they meet twice in between once. The merged file
    keeps each row's ``writer_uid``. A lock file keeps two compactions apart
    (waiting at most ``lock_timeout``, default :data:`LOCK_TIMEOUT_S`, then an
    OSError); unreadable and refused files are left where they are, and so are
    files this process may not remove (another user's, in a sticky folder).
    """
    folder = Path(store)
    with _compaction_lock(folder, LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout):
        table, problems, read = _read(folder, removable=True)
        if len(read) < 2:
            return 0, _capped(problems)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        _write_atomic(table.sort("time"), folder / f"{stamp}-compacted-{uuid.uuid4().hex}.parquet")
        for f in read:
            try:
                Path(f).unlink(missing_ok=True)
            except OSError as exc:  # its verdicts are in the merged file too, and count once
                problems.append(f"{f}: merged but not removed ({exc.strerror})")
        return len(read), _capped(problems)


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


def _conform(df: pl.DataFrame) -> pl.DataFrame:
    """Fill columns an older file lacks, so every file reads as one table; a confidence that is
    not a finite number (a forged row) becomes null, so JSON output stays JSON."""
    out = df.select((pl.col(n).cast(t) if n in df.columns else pl.lit(None, dtype=t).alias(n)) for n, t in TABLE_SCHEMA.items())
    return out.with_columns(pl.when(pl.col("confidence").is_finite()).then(pl.col("confidence")).alias("confidence"))


# -- what a Parquet file may decode to, from its footer and page headers (no decoding) -----------------


class _Malformed(ValueError):
    """Not a Parquet file this reader will decode."""


# Just enough of Thrift's compact protocol to read a Parquet footer and page headers. Only the
# fields a spec names are kept (None: an integer; True: that it is there; a dict: a struct;
# a one-element list: a list of such structs); the rest is skipped without building anything.
_Spec = dict[int, Any]
_DEPTH = 16
_WIDTHS = {1: 1, 2: 1, 3: 1, 7: 8, 13: 16}  # element types of a fixed size in a list (bools take a byte there)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7
        if shift > 63:
            raise _Malformed("bad varint")


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _varint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


def _count(buf: bytes, pos: int, n: int) -> int:
    if n > len(buf) - pos:  # every element takes at least one byte
        raise _Malformed("collection larger than the file")
    return n


def _skip(buf: bytes, pos: int, kind: int, depth: int) -> int:
    if depth > _DEPTH:
        raise _Malformed("metadata nested too deep")
    if kind in (1, 2):  # a bool in a field header: no bytes
        return pos
    if kind == 3:
        return pos + 1
    if kind in (4, 5, 6):
        while buf[pos] & 0x80:
            pos += 1
        return pos + 1
    if kind == 7:
        return pos + 8
    if kind == 8:
        n, pos = _varint(buf, pos)
        return pos + n
    if kind in (9, 10):
        head = buf[pos]
        n, pos = (head >> 4, pos + 1) if head >> 4 != 15 else _varint(buf, pos + 1)
        elem = head & 0x0F
        width = _WIDTHS.get(elem)
        if width:
            return pos + width * _count(buf, pos, n)
        if elem in (4, 5, 6):
            for _ in range(_count(buf, pos, n)):
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            return pos
        for _ in range(_count(buf, pos, n)):
            pos = _skip(buf, pos, elem, depth + 1)
        return pos
    if kind == 11:
        n, pos = _varint(buf, pos)
        if not n:
            return pos
        kv = buf[pos]
        pos += 1
        for _ in range(_count(buf, pos, n)):
            for elem in (kv >> 4, kv & 0x0F):
                pos = pos + 1 if elem in (1, 2) else _skip(buf, pos, elem, depth + 1)
        return pos
    if kind == 12:
        while head := buf[pos]:
            pos += 1
            if not head >> 4:  # a long-form field id
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            kind = head & 0x0F
            if kind in (4, 5, 6):  # most fields: inline, a call each would double the time
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            elif kind == 8:
                n, pos = _varint(buf, pos)
                pos += n
            elif kind > 2:
                pos = _skip(buf, pos, kind, depth + 1)
        return pos + 1
    if kind == 13:
        return pos + 16
    raise _Malformed(f"unknown metadata type {kind}")


def _struct(buf: bytes, pos: int, spec: _Spec, depth: int = 0) -> tuple[dict[int, Any], int]:
    if depth > _DEPTH:
        raise _Malformed("metadata nested too deep")
    out: dict[int, Any] = {}
    field_id = 0
    while head := buf[pos]:
        pos += 1
        kind = head & 0x0F
        if head >> 4:
            field_id += head >> 4
        else:
            field_id, pos = _zigzag(buf, pos)
        want = spec.get(field_id, False)
        if want is False:
            if kind in (4, 5, 6):
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            else:
                pos = _skip(buf, pos, kind, depth + 1)
        elif want is None:
            if kind not in (3, 4, 5, 6):
                raise _Malformed(f"field {field_id} is not an integer")
            if kind == 3:
                out[field_id], pos = buf[pos], pos + 1
                continue
            n = buf[pos]  # most are one byte: inline, a call each would cost a third of the time
            n, pos = (n, pos + 1) if n < 0x80 else _varint(buf, pos)
            out[field_id] = (n >> 1) ^ -(n & 1)
        elif want is True:
            out[field_id] = True
            pos = _skip(buf, pos, kind, depth + 1)
        elif isinstance(want, dict):
            if kind != 12:
                raise _Malformed(f"field {field_id} is not a struct")
            out[field_id], pos = _struct(buf, pos, want, depth + 1)
        else:
            head = buf[pos]
            if kind != 9 or head & 0x0F != 12:
                raise _Malformed(f"field {field_id} is not a list of structs")
            n, pos = (head >> 4, pos + 1) if head >> 4 != 15 else _varint(buf, pos + 1)
            items = []
            for _ in range(_count(buf, pos, n)):
                item, pos = _struct(buf, pos, want[0], depth + 1)
                items.append(item)
            out[field_id] = items
    return out, pos + 1


_COLUMN_META: _Spec = {5: None, 6: None, 7: None, 9: None, 11: None}  # values, sizes, page offsets
_CHUNK: _Spec = {1: True, 3: _COLUMN_META, 4: None, 5: None, 6: None, 7: None, 8: True, 9: True}
_FOOTER: _Spec = {3: None, 4: [{1: [_CHUNK], 3: None}], 8: True, 9: True}
_PAGE: _Spec = {1: None, 2: None, 3: None, 5: {1: None, 2: None}, 8: {1: None, 4: None}}
_DELTA_BYTE_ARRAY = 7  # values built from the previous value's prefix: may grow past the page


@dataclass
class _Shape:
    rows: int
    plain: int  # uncompressed bytes + 16 per value: what ordinary data decodes to
    worst: int  # what it may decode to when every dictionary value is repeated in every row


def _int(d: dict[int, Any], key: int, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or v < 0:
        raise _Malformed(f"missing or negative metadata field {key}")
    return v


def _inspect(data: bytes, *, pages: bool = True) -> _Shape:
    """Rows, and bounds on what the values decode to, from the footer and (with ``pages``) every page header.

    The page headers are what a decoder allocates by, so a footer that understates
    them does not help; a column chunk's pages must fill its byte range exactly.
    Reading them costs about as much again as the footer: a file of root's or the
    reader's own is bounded by its footer alone."""
    try:
        return _shape(data, pages)
    except (IndexError, RecursionError):
        raise _Malformed("truncated metadata") from None


def _shape(data: bytes, pages: bool) -> _Shape:
    n = len(data)
    if n < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise _Malformed("no Parquet magic")
    footer = n - 8 - int.from_bytes(data[-8:-4], "little")
    if footer < 4:
        raise _Malformed("footer out of bounds")
    meta, end = _struct(data, footer, _FOOTER)
    if end > n - 8 or 8 in meta or 9 in meta:
        raise _Malformed("footer out of bounds, or encrypted")
    rows, plain, worst = 0, 0, 0
    for group in meta.get(4, []):
        rows += _int(group, 3)
        for chunk in group.get(1, []):
            if any(k in chunk for k in (1, 8, 9)):
                raise _Malformed("column data in another file, or encrypted")
            for off, length in ((4, 5), (6, 7)):  # offset and column indexes: inside the file
                if off in chunk and _int(chunk, off) + _int(chunk, length, 0) > n:
                    raise _Malformed("index out of bounds")
            md = chunk.get(3)
            if md is None:
                raise _Malformed("column chunk without metadata")
            start = _int(md, 11) if 11 in md else _int(md, 9)  # where a reader starts: the dictionary page, if any
            stop = start + _int(md, 7)
            if start < 4 or stop > footer:
                raise _Malformed("column chunk out of bounds")
            values, unpacked, dictionary, growing = 0, 0, 0, False
            pos = start if pages else stop
            while pos < stop:
                page, pos = _struct(data, pos, _PAGE)
                usize = _int(page, 2)
                pos += _int(page, 3)
                if pos > stop:
                    raise _Malformed("page out of bounds")
                unpacked += usize
                if _int(page, 1) == 2:  # a dictionary page
                    dictionary = max(dictionary, usize)
                    continue
                header = page.get(5) or page.get(8)
                if header is None:
                    raise _Malformed("data page without a header")
                values += _int(header, 1)
                growing |= header.get(2 if 5 in page else 4) == _DELTA_BYTE_ARRAY
            values = max(values, _int(md, 5))
            unpacked = max(unpacked, _int(md, 6))
            plain += unpacked + 16 * values
            worst += 16 * values + unpacked + values * max(dictionary, unpacked if growing else 0)
    if rows != _int(meta, 3):
        raise _Malformed("row groups do not add up to the file's rows")
    return _Shape(rows, plain, worst)


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


def summarize(table: pl.DataFrame, *, by: str = "day", top: int = 10) -> dict[str, Any]:
    """Causes over time and the nodes implicated again and again, most often first.

    Each node says how many writers (uids, see Trust above) its failures come from. Clean runs (category ``none``) are counted but take no part in the rest;
    cancelled and timed-out jobs count as failures but implicate no node.
    """
    failures = table.filter(pl.col("category") != "none")
    n_fail = failures.height
    writer = pl.col(WRITER) if WRITER in table.columns else pl.lit(None, dtype=pl.Int64)
    nodes = (
        failures.filter(~pl.col("category").is_in(NOT_NODE_FAULTS))
        .select("time", "category", node=pl.col("nodes"), writer=writer)
        .explode("node", empty_as_null=False)
        .drop_nulls("node")
        .group_by("node", "category")
        .agg(n=pl.len(), first=pl.col("time").min(), last=pl.col("time").max(), writers=pl.col("writer").drop_nulls().unique())
        .group_by("node")
        .agg(
            failures=pl.col("n").sum(),
            first_seen=pl.col("first").min(),
            last_seen=pl.col("last").max(),
            writers=pl.col("writers").explode().drop_nulls().n_unique(),
            causes=pl.struct("category", "n").sort_by("n", "category", descending=[True, False]),
        )
        .sort(["failures", "last_seen", "node"], descending=[True, True, False])
    )
    causes = (
        failures.group_by("category", "cause")
        .agg(
            count=pl.len(),
            last_seen=pl.col("time").max(),
            nodes=pl.col("nodes").explode(empty_as_null=False).drop_nulls().n_unique(),
        )
        .sort(["count", "last_seen", "cause"], descending=[True, True, False])
    )
    timeline = (
        failures.with_columns(period=pl.col("time").dt.truncate(_TRUNC[by]).dt.date())
        .group_by("period", "category")
        .agg(n=pl.len())
        .group_by("period")
        .agg(total=pl.col("n").sum(), causes=pl.struct("category", "n").sort_by("n", "category", descending=[True, False]))
        .sort("period")
    )
    span = table.select(first=pl.col("time").min(), last=pl.col("time").max()).row(0, named=True) if table.height else {}
    return {
        "verdicts": table.height,
        "failures": n_fail,
        "clean": table.height - n_fail,
        "first": _iso(span.get("first")),
        "last": _iso(span.get("last")),
        "by": by,
        "nodes": [
            {
                "node": r["node"],
                "failures": r["failures"],
                "share": round(r["failures"] / n_fail, 4) if n_fail else 0.0,
                "causes": {c["category"]: c["n"] for c in r["causes"]},
                "writers": r["writers"],  # how many users' claims these failures are
                "first_seen": _iso(r["first_seen"]),
                "last_seen": _iso(r["last_seen"]),
            }
            for r in nodes.head(top).iter_rows(named=True)
        ],
        "causes": [
            {
                "cause": r["cause"],
                "category": r["category"],
                "count": r["count"],
                "share": round(r["count"] / n_fail, 4) if n_fail else 0.0,
                "nodes": r["nodes"],
                "last_seen": _iso(r["last_seen"]),
            }
            for r in causes.iter_rows(named=True)
        ],
        "timeline": [
            {"period": r["period"].isoformat(), "total": r["total"], "causes": {c["category"]: c["n"] for c in r["causes"]}}
            for r in timeline.iter_rows(named=True)
        ],
    }


def _iso(value: object) -> str | None:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else None


def render_terminal(summary: dict[str, Any], *, store: str, color: bool = True, width: int | None = None) -> str:
    """The summary for a person: recurring nodes first, then causes, then causes over time."""
    import io

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
