"""Inputs to line tables: files, globs, directories, .gz and stdin.

Only lines that can matter reach the parsers: a keyword prefilter keeps error-ish
and structural lines, plus the tail of every file so the last words of each writer
are known. Everything else is counted, not kept, and so are kept lines past a cap per
message shape and per input, so memory stays bounded whatever the input. Under a
deadline the end of a large file is read first and a read that hangs is given up.

A big file is searched as raw bytes, block by block, and only the lines around keyword
matches are ever decoded (scan.py); small files are read whole and filtered many at a
time; a small log or an odd block is split into lines first (polars' CSV reader) and
tested there. All three keep the same lines.

Bad input never raises: every problem becomes a message in the input's
``problems`` list and the remaining inputs are still read.
"""

from __future__ import annotations

import bisect
import codecs
import collections
import functools
import glob
import gzip
import io
import itertools
import os
import queue
import re
import stat
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO, Protocol, TypeVar

import polars as pl

from . import scan, stages

#: Suffixes a directory walk picks up (each also with .gz).
LOG_SUFFIXES = (".out", ".err", ".log", ".txt")
#: Bytes read per block; a block is split into lines by polars' CSV reader.
BLOCK_BYTES = 16 << 20
#: Longer lines are cut to this many characters (the rest is counted, not kept).
MAX_LINE_CHARS = 64 << 10
#: Lines at the end of each input kept whatever they say.
TAIL_LINES = 256
#: ... but at most this many in all when there are many inputs (a job's thousands of per-rank files),
#: shared among them, and at least TAIL_MIN each: what the reasoning reads in a tail that no keyword
#: kept is an input's last words (its last line, the last step it reached), not its history.
TAIL_BUDGET = 32_768
TAIL_MIN = 4
#: Plain files up to this size are read whole and filtered together, many to a batch of about
#: BLOCK_BYTES: a job's per-rank files cost a read each, not a pipeline each.
SMALL_FILE_BYTES = 4 << 20
#: Share of control bytes in the first 64 KiB above which an input is binary.
BINARY_RATIO = 0.10

#: Blocks decoded ahead of the one being collected (memory: about this many blocks).
READ_AHEAD = 3
#: Under a time budget, the last bytes of a large file are read before the rest: the failure
#: is nearly always at the end, and a budget that runs out must not miss it.
TAIL_FIRST_BYTES = 1 << 20
#: Kept lines of one shape (digits and hex folded) per input; more are counted, not kept. A
#: log of one error repeated millions of times would otherwise fill memory; 20,000 still holds
#: one line per rank of the largest jobs.
MAX_SAME_SHAPE = 20_000
#: Kept lines per input, whatever their shape; more are counted, not kept (the tail still is).
MAX_KEPT_LINES = 400_000

T = TypeVar("T")
R = TypeVar("R")
_ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-B]"
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 27))
_STDIN = "-"


@dataclass
class InputInfo:
    """One input as the report shows it: what was read and what went wrong."""

    file: str
    bytes: int = 0
    lines: int = 0
    problems: list[str] = field(default_factory=list)
    mtime: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "bytes": self.bytes, "lines": self.lines, "problems": list(self.problems)}


@dataclass
class Ingested:
    """Kept lines of every input (columns file, line, raw) and the per-input record."""

    lines: pl.DataFrame
    inputs: list[InputInfo]


LINE_SCHEMA = {"file": pl.String(), "line": pl.UInt32(), "raw": pl.String()}


def expand(paths: Sequence[str | os.PathLike[str]]) -> list[InputInfo]:
    """Turn what the user typed into a list of inputs, each named as given.

    Globs are expanded, directories walked for log files; a path that names
    nothing becomes an input with a problem, so it still shows in the report.
    """
    out: list[InputInfo] = []
    seen: set[str] = set()

    def add(name: str, problem: str | None = None) -> None:
        if name in seen:
            return
        seen.add(name)
        info = InputInfo(file=name)
        if problem:
            info.problems.append(problem)
        out.append(info)

    for given in paths:
        text = os.fspath(given)
        if text == _STDIN:
            add(_STDIN)
        elif os.path.isdir(text):
            found = sorted(_walk_logs(text))
            if not found:
                add(text, "directory contains no log files (*.out, *.err, *.log, *.txt, slurm-*, PBS/SGE *.o123/*.e123, or .gz of those)")
            for name in found:
                add(name)
        elif os.path.lexists(text):
            add(text)
        elif glob.has_magic(text):
            matches = sorted(m for m in glob.glob(text, recursive=True) if not os.path.isdir(m))
            if not matches:
                add(text, "no file matches this pattern")
            for name in matches:
                add(name)
        else:
            add(text, "no such file or directory")
    return out


def _walk_logs(root: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if is_log_name(name):
                yield os.path.join(dirpath, name)


def is_log_name(name: str) -> bool:
    """Whether a file found in a folder is read as a log (by its name: see :func:`expand`)."""
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(_OWN_REPORTS):  # the epilog's reports next to slurm-<id>.out are not logs
        return False
    return base.endswith(LOG_SUFFIXES) or _is_slurm_default(base) or bool(_BATCH_OUTPUT.search(base))


_OWN_REPORTS = (".logsleuth.json", ".logsleuth.md")


#: PBS/Torque and Grid Engine name a job's output <name>.o<job id> and <name>.e<job id>.
_BATCH_OUTPUT = re.compile(r"\.[oe]\d+(?:\.\d+|\[\d*\])?$")


def _is_slurm_default(name: str) -> bool:
    """slurm-1234.out is covered by suffix; this also accepts e.g. slurm-1234_7 (arrays)."""
    return name.startswith("slurm-")


def ingest(
    inputs: list[InputInfo],
    keywords: Sequence[str],
    *,
    deadline: float | None = None,
    stdin: BinaryIO | None = None,
    workers: int | None = None,
) -> Ingested:
    """Read every input and keep the lines that contain one of ``keywords``.

    ``deadline`` is a ``time.monotonic()`` value: reading stops there and the
    inputs not finished say so in their problems. Each input also keeps its last
    :func:`tail_lines` lines.
    """
    keep = _Keeper(tuple(dict.fromkeys(k for k in keywords if k)))
    todo = [info for info in inputs if not info.problems]
    tail = tail_lines(len(todo))
    workers = workers or min(4, (os.cpu_count() or 1) + 1)  # one more than cores: a worker waiting on the GIL leaves a core idle
    frames: list[pl.DataFrame] = []
    if todo:
        with ThreadPoolExecutor(max_workers=workers) as pool:

            def read(info: InputInfo) -> pl.DataFrame:
                return _read_one(info, keep, deadline, stdin, pool, tail)

            if len(todo) > 1:  # small plain files together, many to a batch; the others one by one
                batched, todo = _read_small(todo, keep, deadline, pool, tail)
                frames.extend(batched)
            if len(todo) == 1:
                frames.append(read(todo[0]))
            elif todo:
                # Files in parallel; each file's own blocks also go to the pool.
                with ThreadPoolExecutor(max_workers=workers) as files:
                    frames.extend(files.map(read, todo))
    lines = pl.concat(frames) if frames else pl.DataFrame(schema=LINE_SCHEMA)
    return Ingested(lines=lines, inputs=inputs)


def tail_lines(inputs: int) -> int:
    """Lines kept at the end of each of ``inputs`` inputs whatever they say: TAIL_LINES, fewer when
    TAIL_BUDGET would be exceeded, never fewer than TAIL_MIN."""
    return min(TAIL_LINES, max(TAIL_MIN, TAIL_BUDGET // max(1, inputs)))


def ingest_text(text: str, keywords: Sequence[str], name: str = "<text>", *, tail: bool = True) -> Ingested:
    """Ingest a string as if it were a file; rule examples and tests use it.

    ``tail=False`` keeps only prefiltered lines, as in a file far longer than the
    tail: rule checks use it so a rule cannot rely on the tail to see its line.
    """
    info = InputInfo(file=name, bytes=len(text.encode()))
    keep = _Keeper(tuple(dict.fromkeys(k for k in keywords if k)))
    frame = _read_stream(info, io.BytesIO(text.encode()), keep, _ReadState(None), None, tail=tail)
    return Ingested(lines=frame, inputs=[info])


class _Keeper:
    """The prefilter: which raw lines are worth parsing.

    The keywords become one alternation of escaped literals for polars' Rust
    regex engine, which runs it about a third faster than ``contains_any``'s
    Aho-Corasick on a few hundred literals (benchmarks/README.md); a small block
    (a small log) uses Aho-Corasick, which needs no compiling. A keyword that
    contains another is dropped: the shorter one already keeps its lines.
    """

    def __init__(self, keywords: tuple[str, ...]) -> None:
        self.keywords, self.pattern = _minimal_pattern(keywords)

    def mask(self, text: pl.Series) -> pl.Series:
        if not self.keywords:
            return pl.Series(values=[True] * len(text), dtype=pl.Boolean)
        if text.len() < _REGEX_FROM_LINES:  # compiling the alternation (~10 ms) costs more than it saves here
            return text.str.contains_any(self.keywords).fill_null(False)
        return text.str.contains(self.pattern).fill_null(False)

    def scanner(self) -> scan.Scanner | None:
        """The byte-level matcher of these keywords (compiled on first use), or None."""
        return scan.scanner(tuple(self.keywords)) if self.keywords else None


#: Blocks of at least this many lines (about 2 MB of log) are filtered with the regex alternation.
_REGEX_FROM_LINES = 20_000


@functools.lru_cache(maxsize=4)
def _minimal_pattern(keywords: tuple[str, ...]) -> tuple[list[str], str]:
    """Drop keywords that contain another (one Aho-Corasick pass over the keywords), join the rest."""
    unique = sorted(set(keywords))
    if not unique:
        return [], ""
    k = pl.col("k")
    others = k.str.extract_many(unique, overlapping=True).list.set_difference(pl.concat_list(k)).list.len()
    kept = pl.DataFrame({"k": unique}, schema={"k": pl.String}).filter(others == 0).get_column("k").to_list()
    return kept, "|".join(_rust_escape(k) for k in kept)


def _rust_escape(literal: str) -> str:
    """Escape a literal for Rust's regex syntax (the set regex_syntax::escape escapes)."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$#&-~" else c for c in literal)


def _read_one(
    info: InputInfo,
    keep: _Keeper,
    deadline: float | None,
    stdin: BinaryIO | None,
    pool: ThreadPoolExecutor,
    tail: int = TAIL_LINES,
) -> pl.DataFrame:
    """Open one input, sniff it, and stream it; any failure becomes a problem.

    Under a deadline every read runs in a thread that is given up at the deadline (a hung
    file system or a silent stdin), and a stream a read may still be stuck in is never
    closed here: closing it would wait for that read."""
    state = _ReadState(deadline)
    state.tail_lines = tail
    try:
        if info.file == _STDIN:
            return _read_stream(info, stdin or sys.stdin.buffer, keep, state, pool)
        path = Path(info.file)
        st = _in_time(state.call(path.stat))
        info.bytes = st.st_size
        info.mtime = st.st_mtime
        if not stat.S_ISREG(st.st_mode):
            info.problems.append("not a regular file; skipped")
            return _no_lines()
        if st.st_size == 0:
            info.problems.append("empty file (0 bytes)")
            return _no_lines()
        fh = _in_time(state.call(lambda: path.open("rb"), opens=True))
        state.owned = fh
        try:
            magic = _in_time(state.call(lambda: fh.read(2)))
            fh.seek(0)
            if magic == b"\x1f\x8b":
                gz = gzip.GzipFile(fileobj=fh)
                return _read_stream(info, gz, keep, state, pool, compressed=True)
            end = _tail_first(fh, st.st_size, state) if deadline is not None and st.st_size > 2 * TAIL_FIRST_BYTES else None
            if state.stopped:
                raise _GaveUp
            if end is None:
                return _read_stream(info, fh, keep, state, pool)
            start, tail_bytes = end
            return _read_stream(info, _Bounded(fh, start), keep, state, pool, end=(start, tail_bytes))
        finally:
            if not state.abandoned:
                fh.close()
    except _GaveUp:
        info.problems.append(state.gave_up())
    except PermissionError:
        info.problems.append("permission denied: cannot read this file")
    except OSError as exc:
        info.problems.append(f"cannot read: {exc.strerror or exc}")
    return _no_lines()


@dataclass
class _Small:
    """A small plain file read whole, as the batch takes it."""

    info: InputInfo
    data: bytes  # whole lines: a last line without a newline gets one, as _blocks gives it
    lines: int
    bad: int  # lines with U+FFFD (valid UTF-8: only one written as such)
    long: int


_NOT_SMALL = object()


def _slurp(path: str) -> object:
    """(stat, bytes) of a small regular file, or _NOT_SMALL; OSError as raised. Opened without
    waiting (a FIFO is not read here) and checked on the descriptor read, not on the name."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= SMALL_FILE_BYTES:
            return _NOT_SMALL
        parts = [os.read(fd, st.st_size + 1)]
        while parts[-1] and sum(map(len, parts)) <= SMALL_FILE_BYTES:  # a short read: read on to the end
            parts.append(os.read(fd, SMALL_FILE_BYTES + 1))
    finally:
        os.close(fd)
    data = b"".join(parts) if len(parts) > 2 else parts[0]
    return (st, data) if 0 < len(data) <= SMALL_FILE_BYTES else _NOT_SMALL


#: First bytes of a file that another encoding than UTF-8 may begin with (sniff_encoding decides).
_ODD_START = (b"\x00", b"\xef\xbb\xbf", b"\xfe", b"\xff", b"\x1f\x8b")


def _small_file(info: InputInfo, st: os.stat_result, data: bytes) -> _Small | None:
    """The file as the batch takes it, or None for what only the one-by-one path reads right:
    gzip, another encoding or a byte-order mark, binary, lines ended by carriage returns alone,
    bytes that are not UTF-8."""
    head = data[:4096]
    if data.startswith(_ODD_START) or (b"\x00" in head and sniff_encoding(head) != (None, 0)):
        return None
    if _control_ratio(data[: 64 << 10]) > BINARY_RATIO or (b"\n" not in data and data.count(b"\r") > 1):
        return None
    ascii_only = data.isascii()
    if not ascii_only:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not data.endswith(b"\n"):
        data += b"\n"
    info.bytes, info.mtime = st.st_size, st.st_mtime
    bad = 0 if ascii_only else scan.lines_with(data, len(data), "\ufffd".encode())
    long = scan.long_lines(data, len(data), MAX_LINE_CHARS, ascii_only) if len(data) > MAX_LINE_CHARS else 0
    return _Small(info, data, scan.count_newlines(data), bad, long)


def _read_small(
    todo: list[InputInfo], keep: _Keeper, deadline: float | None, pool: ThreadPoolExecutor, tail: int
) -> tuple[list[pl.DataFrame], list[InputInfo]]:
    """Read the small plain files of ``todo`` whole and filter them in batches: (their lines, the
    inputs left for the one-by-one path). Under a deadline each read is given up at it, as there."""
    left: list[InputInfo] = []
    timer = stages.current()

    def files() -> Iterator[list[_Small]]:
        batch: list[_Small] = []
        size = 0
        wall, cpu = time.perf_counter(), time.thread_time()
        for info in todo:
            if info.file == _STDIN:
                left.append(info)
                continue
            state = _ReadState(deadline) if deadline is not None else None
            try:
                got = _slurp(info.file) if state is None else state.call(functools.partial(_slurp, info.file))
            except OSError:  # the one-by-one path says what is wrong with it
                left.append(info)
                continue
            if got is None and state is not None and state.abandoned:  # hung: said so; the rest time out one by one
                info.problems.append(state.gave_up())
                continue
            small = None if got is None or got is _NOT_SMALL else _small_file(info, *got)  # type: ignore[misc]
            if small is None:
                left.append(info)
                continue
            batch.append(small)
            size += len(small.data)
            if size >= BLOCK_BYTES:
                timer.add("read", time.perf_counter() - wall, time.thread_time() - cpu)
                yield batch
                batch, size = [], 0
                wall, cpu = time.perf_counter(), time.thread_time()
        timer.add("read", time.perf_counter() - wall, time.thread_time() - cpu)
        if batch:
            yield batch

    frames = list(_bounded_map(pool, lambda batch: _filter_batch(batch, keep, tail), files()))
    return frames, left


def _filter_batch(batch: list[_Small], keep: _Keeper, tail: int) -> pl.DataFrame:
    """Kept and last lines of small files, filtered as one block (each file's lines numbered from 1)."""
    data = b"".join(f.data for f in batch)
    firsts = list(itertools.accumulate((f.lines for f in batch), initial=0))  # lines of the batch before each file
    kept, _, n, _, _ = _filter_block(data, "", keep, 0)
    if n != firsts[-1]:  # pragma: no cover - both count newlines
        raise AssertionError(f"{n} lines in a batch of {firsts[-1]}")
    timer = stages.current()
    with timer.part("decode"):
        # each file's last lines: the whole file when it is short, else cut from its end
        spans: list[bytes] = []
        numbers: list[int] = []
        for f, end in zip(batch, firsts[1:], strict=True):
            t = min(tail, f.lines)
            start = 0 if t == f.lines else scan.tail_start(f.data, len(f.data), t)
            spans.append(f.data[start:] if start else f.data)
            numbers.extend(range(end - t + 1, end + 1))
        text = b"".join(spans).decode("utf-8").split("\n")
        text.pop()  # after the last newline
        last = pl.DataFrame(
            {"line": pl.Series(numbers, dtype=pl.UInt32()), "raw": pl.Series(text, dtype=pl.String()).str.strip_suffix("\r")}
        )
        starts = pl.Series("start", firsts[:-1], dtype=pl.UInt32())
        names = pl.Series("file", [f.info.file for f in batch], dtype=pl.String())

        def per_file(frame: pl.DataFrame) -> pl.DataFrame:
            """Batch lines (from 1) -> (file, its own line from 1, raw)."""
            index = starts.search_sorted(frame.get_column("line") - 1, side="right").cast(pl.Int64) - 1
            return frame.select(
                names.gather(index).alias("file"), (pl.col("line") - starts.gather(index)).cast(pl.UInt32).alias("line"), "raw"
            )

        kept, last = per_file(kept.select("line", "raw")), per_file(last)
    with timer.part("cap"):
        for f in batch:
            f.info.lines = f.lines
            if f.long:
                f.info.problems.append(f"{f.long} line(s) longer than {MAX_LINE_CHARS // 1024} Ki characters were cut to that length")
            if f.bad:
                f.info.problems.append(f"{f.bad} line(s) had invalid UTF-8 (replaced with U+FFFD)")
        # a file of one line repeated: the repeat cap, as for a file read alone (its last lines stay)
        crowded = kept.group_by("file").len().filter(pl.col("len") > min(MAX_SAME_SHAPE, MAX_KEPT_LINES)).get_column("file")
        for name in crowded.to_list():
            info = next(f.info for f in batch if f.info.file == name)
            cap = _RepeatCap()
            capped = cap.keep(kept.filter(pl.col("file") == name).with_columns(_RepeatCap.SHAPE))
            kept = pl.concat([kept.filter(pl.col("file") != name), capped])
            if cap.dropped:
                info.problems.append(
                    f"{cap.dropped} matching line(s) were counted, not kept: more than {MAX_SAME_SHAPE} of one message shape"
                    f" or {MAX_KEPT_LINES} in all (the first of each shape and the last {tail} lines are analysed)"
                )
    with timer.part("clean"):
        return _clean(pl.concat([kept, last]).unique(subset=["file", "line"], keep="first").sort("file", "line"))


class _GaveUp(Exception):
    """A read that did not happen before the deadline: the input stops there."""


def _in_time(value: R | None) -> R:
    """What a :meth:`_ReadState.call` returned, or _GaveUp when it came too late."""
    if value is None:
        raise _GaveUp
    return value


class _ReadState:
    """One input's reading under a deadline: reads that may block run in a daemon thread and
    are given up when the deadline passes. The thread then closes ``owned`` (the open file)
    when its read returns, so a given-up read leaks nothing once the file system answers."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.abandoned = False  # a read was given up: its stream must not be touched again
        self.stopped = False  # reading stopped early (budget or a given-up read)
        self.read_total = 0  # bytes of the stream read so far
        self.tail_len = 0  # bytes of the file's end read first
        self.tail_lines = TAIL_LINES  # lines at the end kept whatever they say
        self.encoding: str | None = None  # not UTF-8 (a byte-order mark said so)
        self.owned: IO[bytes] | None = None
        self._lock = threading.Lock()

    def gave_up(self) -> str:
        """The input problem for a read that did not happen in time."""
        if self.abandoned:
            return (
                "time budget ran out while waiting for a read (a slow or hung file system, or silent input)"
                f" after {self.read_total} bytes; the rest was not read"
            )
        rest = f"the rest of this input before its last {self.tail_len} bytes (read first)" if self.tail_len else "the rest of this input"
        return f"time budget ran out after {self.read_total} bytes; {rest} was not read"

    def call(self, fn: Callable[[], R], *, opens: bool = False) -> R | None:
        """``fn()``, or None when the deadline passes first. ``opens``: ``fn`` returns a file,
        which the thread closes itself if the wait for it was given up."""
        if self.deadline is None:
            return fn()
        if time.monotonic() >= self.deadline:
            self.stopped = True
            return None
        box: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()

        def run() -> None:
            try:
                value: object = fn()
                box.put((True, value))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
                value = None
                box.put((False, exc))
            with self._lock:
                if self.abandoned:
                    for late in (value if opens else None, self.owned):
                        if isinstance(late, io.IOBase):
                            late.close()

        threading.Thread(target=run, daemon=True, name="logsleuth-read").start()
        try:
            ok, value = box.get(timeout=max(0.0, self.deadline - time.monotonic()))
        except queue.Empty:
            with self._lock:
                if box.empty():  # still reading: give it up
                    self.abandoned = self.stopped = True
                    return None
            ok, value = box.get()
        if not ok:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]


class _Reads(Protocol):
    """What reading needs of a stream: a file, gzip, stdin or the head of a file."""

    def read(self, size: int = -1, /) -> bytes: ...


class _Bounded:
    """A binary stream cut at ``limit`` bytes: the head of a file whose tail was read first."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self.raw, self.left = raw, limit

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.raw.read(size) if size else b""
        self.left -= len(data)
        return data

    def readinto(self, buf: bytearray) -> int:
        view = memoryview(buf)[: self.left]
        n = self.raw.readinto(view) if len(view) else 0  # type: ignore[attr-defined]
        self.left -= n
        return n

    def seekable(self) -> bool:
        return self.raw.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_CUR) -> int:
        """Only relative steps, as _blocks takes them."""
        if whence != io.SEEK_CUR:
            raise ValueError("only relative seeks")
        self.left -= offset
        return self.raw.seek(offset, io.SEEK_CUR)


def _tail_first(fh: IO[bytes], size: int, state: _ReadState) -> tuple[int, bytes] | None:
    """The last whole lines of a file (from the first newline in its last TAIL_FIRST_BYTES)
    and the offset where they start; None when that read was given up or found no newline."""

    def read() -> bytes:
        fh.seek(size - TAIL_FIRST_BYTES)
        data = fh.read(TAIL_FIRST_BYTES)
        fh.seek(0)
        return data

    data = state.call(read)
    if data is None:
        return None
    nl = data.find(b"\n")
    if nl < 0:
        return None
    return size - len(data) + nl + 1, data[nl + 1 :]


def _no_lines() -> pl.DataFrame:
    return pl.DataFrame(schema=LINE_SCHEMA)


def _read_stream(
    info: InputInfo,
    stream: _Reads,
    keep: _Keeper,
    state: _ReadState,
    pool: ThreadPoolExecutor | None,
    *,
    compressed: bool = False,
    tail: bool = True,
    end: tuple[int, bytes] | None = None,
) -> pl.DataFrame:
    """Split a byte stream into blocks of whole lines and filter each block.

    ``end``: (offset, bytes) of the file's last lines, read first; ``stream`` then stops at
    the offset, and the end is filtered after it, numbered exactly when the head was read
    to the end and from an estimate when the budget cut it."""
    state.tail_len = len(end[1]) if end else 0
    tail_lines = state.tail_lines
    buffers = _Buffers(READ_AHEAD + 3)  # blocks in the workers, waiting, and being read
    blocks = _blocks(stream, info, state, compressed=compressed, buffers=buffers)
    first = next(blocks, None)
    if first is None and not end:
        if not info.problems:
            info.problems.append("empty input (no bytes)")
        return _no_lines()
    ratio = _control_ratio((first[0][: first[1]] if first is not None else end[1] if end else b"")[: 64 << 10])
    if ratio > BINARY_RATIO:
        info.problems.append(f"binary file ({ratio:.0%} control bytes in the first 64 KiB); skipped")
        for buf, _ in blocks:  # drain so byte counts for stdin stay honest
            buffers.give(buf)
        return _no_lines()

    timer = stages.current()

    def work(block: tuple[scan.Bytes, int]) -> tuple[pl.DataFrame, list[tuple[int, int]], pl.DataFrame, int, int, int]:
        try:
            kept, last, n_lines, bad, long = _filter_block(block[0], info.file, keep, tail_lines, size=block[1])
        finally:
            buffers.give(block[0])
        with timer.part("cap"):  # shapes and their counts in the workers: the cap runs in one thread
            kept = kept.with_columns(_RepeatCap.SHAPE)
            return kept, _RepeatCap.counts(kept), last, n_lines, bad, long

    items = itertools.chain([first] if first is not None else [], blocks)
    results = _bounded_map(pool, work, items) if pool is not None else map(work, items)
    kept: list[tuple[pl.DataFrame, int]] = []  # each block's kept lines, numbered within the block, and the lines before it
    tails: list[tuple[pl.DataFrame, int]] = []  # the last blocks' last lines, as many as make up the tail
    n_bad = n_long = 0
    cap = _RepeatCap()

    def add(frame: pl.DataFrame, counts: list[tuple[int, int]], block_tail: pl.DataFrame, before: int) -> None:
        with timer.part("cap"):
            kept.append((cap.keep(frame, counts), before))
            tails.append((block_tail, before))
            while len(tails) > 1 and sum(t.height for t, _ in tails[1:]) >= tail_lines:
                tails.pop(0)

    for frame, counts, block_tail, n_lines, bad, long in results:
        add(frame, counts, block_tail, info.lines)
        info.lines += n_lines
        n_bad += bad
        n_long += long
    if end and state.encoding is None:
        start, tail_bytes = end
        before = info.lines
        if state.stopped:  # the middle was not read: number the end from the bytes per line seen so far
            before += round((start - state.read_total) * info.lines / state.read_total) if state.read_total and info.lines else 0
            info.problems.append(
                f"its last {len(tail_bytes)} bytes were read first, so the end of the file is analysed;"
                f" their line numbers are estimated (from about line {before + 1})"
            )
        frame, counts, block_tail, n_lines, bad, long = work((tail_bytes, len(tail_bytes)))
        add(frame, counts, block_tail, before)
        info.lines += n_lines
        n_bad += bad
        n_long += long
    if n_long:
        info.problems.append(f"{n_long} line(s) longer than {MAX_LINE_CHARS // 1024} Ki characters were cut to that length")
    if n_bad:
        info.problems.append(f"{n_bad} line(s) had invalid UTF-8 (replaced with U+FFFD)")
    if cap.dropped:
        info.problems.append(
            f"{cap.dropped} matching line(s) were counted, not kept: more than {MAX_SAME_SHAPE} of one message shape"
            f" or {MAX_KEPT_LINES} in all (the first of each shape and the last {tail_lines} lines are analysed)"
        )
    with timer.part("clean"):
        # blocks number their lines from 1: the lines of the blocks before shift them, all at once
        parts = [*kept, *tails] if tail else kept
        if not parts:
            return _no_lines()
        shifted = [f.lazy().with_columns((pl.col("line") + before).cast(pl.UInt32)) if before else f.lazy() for f, before in parts]
        lines = pl.concat(shifted).collect()
        n_kept = sum(f.height for f, _ in kept)
        out = pl.concat([lines.head(n_kept), lines.slice(n_kept).tail(tail_lines)]).unique(subset=["line"], keep="first").sort("line")
        return _clean(out)


class _RepeatCap:
    """Bounds the lines kept from one input: at most MAX_SAME_SHAPE of each shape (the line
    with digits and hex numbers folded, so ranks, steps and addresses do not make lines
    differ) and MAX_KEPT_LINES in all. Counts are carried across blocks in a dict (shapes are few)."""

    #: A line's shape: a hash of its first 256 characters without digits (an Aho-Corasick pass,
    #: several times faster than a regex; counting hashes is faster than counting strings).
    SHAPE = pl.col("raw").str.slice(0, 256).str.replace_many(list("0123456789"), [""] * 10).hash().alias("shape")

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # lines of each shape met so far (kept or not)
        self.kept = 0
        self.dropped = 0

    @staticmethod
    def counts(frame: pl.DataFrame) -> list[tuple[int, int]]:
        """(shape, lines) of a frame with its ``shape`` column (a block's: a few dozen shapes)."""
        if frame.height <= 64:
            return [(h, 1) for h in frame.get_column("shape").to_list()]
        return frame.group_by("shape").agg(pl.len()).rows()

    def keep(self, frame: pl.DataFrame, counts: list[tuple[int, int]] | None = None) -> pl.DataFrame:
        """``frame`` (lines in order, with their ``shape`` column) less the lines over the caps, without ``shape``.

        The shapes of a block are counted once; only when one of them reaches its cap are the
        rows of the shapes that cross it ranked (a shape already full is dropped by a lookup)."""
        columns = [c for c in frame.columns if c != "shape"]
        room = MAX_KEPT_LINES - self.kept
        if frame.is_empty() or room <= 0:
            self.dropped += frame.height
            return frame.head(0).select(columns)
        seen = self.seen
        before: dict[int, int] = {}
        for shape, n in self.counts(frame) if counts is None else counts:
            if shape not in before:
                before[shape] = seen.get(shape, 0)
            seen[shape] = seen.get(shape, 0) + n
        over = {h: b for h, b in before.items() if seen[h] > MAX_SAME_SHAPE}
        out = frame
        if over:
            start = pl.col("shape").replace_strict(over, default=None, return_dtype=pl.Int64)
            rank = start + pl.int_range(pl.len(), dtype=pl.Int64).over("shape")
            out = out.filter(start.is_null() | (rank < MAX_SAME_SHAPE))
        out = out.head(room).select(columns)
        self.kept += out.height
        self.dropped += frame.height - out.height
        return out


def _bounded_map(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """Like ``pool.map`` but reads at most a few items ahead, so memory stays bounded."""
    ahead: collections.deque[Future[R]] = collections.deque()
    for item in items:
        ahead.append(pool.submit(fn, item))
        if len(ahead) > READ_AHEAD:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()


class _Buffers:
    """Block buffers used again and again: a big file is read into them (readinto) instead of
    into a new 16 MiB object per block, whose pages the kernel would map afresh each time (a
    quarter of a second of page faults per GiB). A buffer is taken by the reader and given
    back by the worker that filtered its block; the reader waits when all are out."""

    def __init__(self, count: int) -> None:
        self._free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
        self._left = count
        self._ours: set[int] = set()

    def take(self) -> bytearray:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            if self._left <= 0:
                return self._free.get()
        self._left -= 1
        buf = bytearray(BLOCK_BYTES)
        self._ours.add(id(buf))
        return buf

    def give(self, buf: object) -> None:
        if id(buf) in self._ours:
            self._free.put(buf)  # type: ignore[arg-type]


def _read_into(stream: _Reads, buf: bytearray) -> tuple[int, str | None]:
    """Read up to len(buf) bytes into ``buf``: (bytes read, problem as in _read_block)."""
    try:
        return stream.readinto(buf), None  # type: ignore[attr-defined]
    except OSError as exc:
        return 0, f"read error after {{}} bytes: {exc.strerror or exc}; the rest was not read"


def _control_ratio(sample: scan.Bytes) -> float:
    if not sample:
        return 0.0
    return (len(sample) - len(sample.translate(None, _CONTROL))) / len(sample)


def _blocks(
    stream: _Reads,
    info: InputInfo,
    state: _ReadState,
    *,
    compressed: bool,
    buffers: _Buffers | None = None,
) -> Iterator[tuple[scan.Bytes, int]]:
    """Yield blocks of whole lines: (buffer, size), the lines being ``buffer[:size]`` (a file is read
    in place: the start of a line a read ends inside is read again with the next block, not copied).

    A line longer than the cut length is kept only up to it; the rest is skipped
    as it streams by, so one giant line cannot exhaust memory.
    """
    carry = b""
    skipping = False  # inside a cut line: drop bytes until its newline
    limit = MAX_LINE_CHARS * 4 + 4  # bytes: enough for MAX_LINE_CHARS of any UTF-8
    decoder: codecs.IncrementalDecoder | None = None
    cr_only = False
    # plain text read to whole lines so far: the next block goes into a buffer used again (buffers)
    steady = False
    into = buffers is not None and not compressed and hasattr(stream, "readinto")
    while True:
        if steady and into and buffers is not None:
            buf = buffers.take()
            with stages.current().part("read"):
                read = state.call(lambda: _read_into(stream, buf))  # noqa: B023 - called at once
            if read is None:
                info.problems.append(state.gave_up())  # the buffer stays with the read given up
                break
            n, problem = read  # a problem comes with no bytes: said below, where the chunk is empty
            nl = buf.rfind(b"\n", 0, n)
            rest = n - nl - 1
            if n and nl >= 0 and rest <= limit and (not rest or _rewind(stream, rest)):
                state.read_total += n - rest
                yield buf, nl + 1
                continue
            chunk = bytes(buf[:n])  # a line longer than a block goes on: read it as below
            buffers.give(buf)
            steady = False
        else:
            with stages.current().part("read"):
                got = state.call(lambda: _read_block(stream, compressed))  # None at the deadline, or for a read given up
            if got is None:
                info.problems.append(state.gave_up())
                break
            chunk, problem = got
        if problem:
            info.problems.append(problem.format(state.read_total + len(chunk)))
        if not chunk:
            break
        first = not state.read_total
        if first:  # the first block: how the text is encoded and how its lines end
            encoding, skip = sniff_encoding(chunk[:4096])
            if encoding is not None:
                state.encoding = encoding
                decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
                info.problems.append(f"text encoded as {encoding.upper()}; read as such")
            state.read_total += skip
            chunk = chunk[skip:]
        state.read_total += len(chunk)
        if decoder is not None:
            chunk = decoder.decode(chunk).encode("utf-8")
        if first and b"\n" not in chunk and chunk.count(b"\r") > 1:
            cr_only = True
            info.problems.append("lines end in carriage returns only; read as line breaks")
        if cr_only:
            chunk = chunk.replace(b"\r", b"\n")
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk = chunk[nl:]  # the newline ends the cut line held in carry
            skipping = False
        nl = chunk.rfind(b"\n")
        rest = len(chunk) - nl - 1  # bytes of a line the chunk ends inside
        if nl >= 0 and not carry and 0 < rest <= limit and decoder is None and not cr_only and not compressed and _rewind(stream, rest):
            # the next read starts at that line again: the chunk is yielded as it was read, not copied
            state.read_total -= rest
            steady = True
            yield chunk, nl + 1
            continue
        if nl < 0:  # no line ends in this chunk: it all continues the carried line
            whole, carry = b"", carry + chunk
        else:  # one copy of the chunk at most (none when it ends on a newline and nothing is carried)
            body = chunk if nl + 1 == len(chunk) else memoryview(chunk)[: nl + 1]
            whole = carry + body if carry else bytes(body)
            carry = chunk[nl + 1 :]
        if len(carry) > limit:
            redraw = carry.rfind(b"\r", 0, len(carry) - 1)
            if 0 < redraw and len(carry) - redraw <= limit:
                carry = carry[redraw:]  # a progress bar redrawn with carriage returns: keep what was drawn last
            else:
                carry = carry[:limit]
                skipping = True
        steady = not carry and not skipping and decoder is None and not cr_only
        if whole:
            yield whole, len(whole)
    if info.file == _STDIN:
        info.bytes = state.read_total
    if carry and not state.abandoned:
        yield carry + b"\n", len(carry) + 1


def _rewind(stream: _Reads, n: int) -> bool:
    """Step a seekable stream back ``n`` bytes (False where it cannot)."""
    try:
        seekable = getattr(stream, "seekable", None)
        if seekable is None or not seekable():
            return False
        stream.seek(-n, io.SEEK_CUR)  # type: ignore[attr-defined]
    except (OSError, ValueError):
        return False
    return True


#: Byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, None),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def sniff_encoding(head: bytes) -> tuple[str | None, int]:
    """(encoding to decode with, or None for UTF-8; bytes of byte-order mark to skip).

    PowerShell's ``>`` and ``Tee-Object`` and some Windows tools write logs as UTF-16
    with a byte-order mark; without one, ASCII text in UTF-16 shows as every other
    byte NUL.
    """
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding, len(bom)
    sample = head[:1024] if len(head) % 2 == 0 else head[: min(1024, len(head) - 1)]
    if len(sample) >= 16:
        even, odd = sample[0::2], sample[1::2]
        if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le", 0
        if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be", 0
    return None, 0


def _read_block(stream: _Reads, compressed: bool) -> tuple[bytes, str | None]:
    """Read up to BLOCK_BYTES; on a broken stream return what came before the break.

    A gzip stream is read in small steps so that a truncated or corrupt file
    still yields everything up to the damage.
    """
    if not compressed:
        try:
            return stream.read(BLOCK_BYTES), None
        except OSError as exc:
            return b"", f"read error after {{}} bytes: {exc.strerror or exc}; the rest was not read"
    parts: list[bytes] = []
    size = 0
    while size < BLOCK_BYTES:
        try:
            part = stream.read1(1 << 16)  # type: ignore[attr-defined]
        except EOFError:
            return b"".join(parts), "truncated gzip: the compressed data ends early; the first {} bytes were read"
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            return b"".join(parts), f"corrupt gzip after {{}} bytes ({exc}); the rest was not read"
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts), None


def _filter_block(
    data: scan.Bytes, name: str, keep: _Keeper, tail: int = -1, *, size: int = -1
) -> tuple[pl.DataFrame, pl.DataFrame, int, int, int]:
    """Split a block into lines: (kept lines, last ``tail`` lines, line count, bad UTF-8 lines, long lines).

    Lines are numbered from 1 within the block. A big block is searched as bytes (scan.py) and
    only the lines a keyword occurs in, and the last lines, are cut out and decoded; a small one,
    one that is not valid UTF-8 and one where most lines match are split into lines first.
    ``size``: the block is ``data[:size]`` (what follows is the start of the next block).
    """
    tail = TAIL_LINES if tail < 0 else tail
    size = len(data) if size < 0 else size
    if size >= scan.FAST_FROM_BYTES:
        fast = _filter_bytes(data, size, name, keep, tail)
        if fast is not None:
            return fast
    return _filter_lines(data if size == len(data) and isinstance(data, bytes) else bytes(memoryview(data)[:size]), name, keep, tail)


def _filter_bytes(
    data: scan.Bytes, size: int, name: str, keep: _Keeper, tail: int
) -> tuple[pl.DataFrame, pl.DataFrame, int, int, int] | None:
    """The byte-level prefilter; None when the block is better split into lines (see _filter_block)."""
    scanner = keep.scanner()
    if scanner is None:
        return None
    timer = stages.current()
    with timer.part("prefilter"):
        got = scanner.scan(memoryview(data)[:size], max(1000, size // scan.DENSE_BYTES_PER_MATCH))
        if got is None:
            return None
        ascii_only, odd = got.ascii, got.separator
        n_bad = 0
        if not ascii_only:
            try:
                codecs.utf_8_decode(memoryview(data)[:size], "strict", True)
            except UnicodeDecodeError:  # bad bytes: the line-by-line path counts the lines they spoil
                return None
            n_bad = scan.lines_with(data, size, "\ufffd".encode())  # a U+FFFD in the text counts as before
        found = scan.candidates(data, size, got.ends)
        n = found.lines
        begin = scan.tail_start(data, size, tail) if tail else size
        n_long = scan.long_lines(data, size, MAX_LINE_CHARS, ascii_only)
    with timer.part("decode"):
        n_tail = min(tail, n)
        first_tail = n - n_tail  # 0-based number of the first tail line
        head = bisect.bisect_left(found.numbers, first_tail)  # candidates before the tail
        pieces = [data[a:b] for a, b in zip(found.starts[:head], found.stops[:head], strict=True)]
        compact = b"\n".join([*pieces, data[begin:size]]) if pieces else data[begin:size]
        if odd:
            compact = compact.replace(b"\x1f", b" ")  # as the line-by-line path reads it
        lines = compact.decode("utf-8").split("\n")  # valid UTF-8, whole lines: one more item after the last newline
        lines.pop()
        text = pl.Series("raw", lines, dtype=pl.String()).str.strip_suffix("\r")  # one, as the CSV reader drops it
        line = pl.Series("line", found.numbers[:head], dtype=pl.UInt32()).append(pl.int_range(first_tail, n, dtype=pl.UInt32(), eager=True))
        if odd or not scanner.exact:  # a line's bytes and its text may differ: test the text, as for small blocks
            kept = keep.mask(text).arg_true()
        else:  # a keyword's bytes are in the line exactly when its text is
            kept = pl.Series([*range(head), *(head + k - first_tail for k in found.numbers[head:])], dtype=pl.UInt32())
        last = pl.int_range(head, head + n_tail, dtype=pl.UInt32(), eager=True)
        return _numbered(text, kept, name, line), _numbered(text, last, name, line), n, n_bad, n_long


def _split_lines(data: bytes, ascii_only: bool) -> pl.Series:
    """The lines of ``data`` (whole lines) as text, one row per newline, as the prefilter reads them:
    the CSV reader's separator replaced by a space, one carriage return before the newline dropped,
    bad UTF-8 replaced."""
    if b"\x1f" in data:  # the CSV reader's separator must not occur in the text
        data = data.replace(b"\x1f", b" ")
    skip = data.startswith(codecs.BOM_UTF8)  # the reader would drop a byte-order mark that begins a line of the middle
    table = pl.read_csv(
        b"\n" + data if skip else data,
        has_header=False,
        separator="\x1f",
        quote_char=None,
        encoding="utf8" if ascii_only else "utf8-lossy",  # the strict reader is twice as fast
        infer_schema=False,
        truncate_ragged_lines=True,
        new_columns=["raw"],
        raise_if_empty=False,
    )
    if table.width == 0:
        return pl.Series("raw", [], dtype=pl.String())
    text = table.get_column("raw").fill_null("")
    return text.slice(1) if skip else text


def _filter_lines(data: bytes, name: str, keep: _Keeper, tail: int) -> tuple[pl.DataFrame, pl.DataFrame, int, int, int]:
    """The prefilter on a block split into lines first."""
    timer = stages.current()
    with timer.part("decode"):
        ascii_only = data.isascii()  # most logs: valid UTF-8 for sure, and characters are bytes
        text = _split_lines(data, ascii_only)
    if text.len() == 0:
        return _no_lines(), _no_lines(), 0, 0, 0
    with timer.part("prefilter"):
        n = len(text)
        # a line has at least as many bytes as characters; in ASCII exactly as many, and no bad bytes
        long = text.filter(text.str.len_bytes() > MAX_LINE_CHARS)
        n_long = len(long) if ascii_only else int((long.str.len_chars() > MAX_LINE_CHARS).sum())
        n_bad = 0 if ascii_only else int(text.str.contains("\ufffd", literal=True).sum())
        # number only the rows that are kept (few), not every row of the block
        kept = keep.mask(text).arg_true()
        last = pl.int_range(max(0, n - tail), n, dtype=pl.UInt32(), eager=True)
        return _numbered(text, kept, name), _numbered(text, last, name), n, n_bad, n_long


def _numbered(text: pl.Series, rows: pl.Series, name: str, line: pl.Series | None = None) -> pl.DataFrame:
    """The given rows of a block as (file, line from 1, raw); ``line``: each row's 0-based line
    number in the block, where the rows are not all of its lines."""
    number = rows.cast(pl.UInt32) if line is None else line.gather(rows)
    return pl.DataFrame(
        {
            "file": pl.repeat(name, len(rows), dtype=pl.String(), eager=True),
            "line": (number + 1).cast(pl.UInt32),
            "raw": text.gather(rows),
        }
    )


def _clean(lines: pl.DataFrame) -> pl.DataFrame:
    """Remove what is not text: ANSI colour codes, NUL bytes, stray carriage returns; cut huge lines."""
    return lines.with_columns(
        pl.col("raw")
        .str.replace_all(_ANSI, "")
        .str.replace_all("\x00", "", literal=True)
        .str.strip_chars_end("\r")
        .str.replace(r"^.*\r", "")  # a line redrawn with carriage returns (a progress bar): what was drawn last
        .str.slice(0, MAX_LINE_CHARS)
    )


def deadline_from_budget(budget_s: float | None) -> float | None:
    """A monotonic deadline for a budget in seconds (None: no limit)."""
    return None if budget_s is None else time.monotonic() + budget_s
