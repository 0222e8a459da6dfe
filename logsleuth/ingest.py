"""Inputs to line tables: files, globs, directories, .gz and stdin.

Only lines that can matter reach the parsers: a keyword prefilter (Aho-Corasick
over the raw text, in polars) keeps error-ish and structural lines, plus the
tail of every file so the last words of each writer are known. Everything else
is counted, not kept, so memory stays bounded by what is interesting.

Bad input never raises: every problem becomes a message in the input's
``problems`` list and the remaining inputs are still read.
"""

from __future__ import annotations

import codecs
import collections
import functools
import glob
import gzip
import io
import itertools
import os
import re
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO, TypeVar

import polars as pl

#: Suffixes a directory walk picks up (each also with .gz).
LOG_SUFFIXES = (".out", ".err", ".log", ".txt")
#: Bytes read per block; a block is split into lines by polars' CSV reader.
BLOCK_BYTES = 16 << 20
#: Longer lines are cut to this many characters (the rest is counted, not kept).
MAX_LINE_CHARS = 64 << 10
#: Lines at the end of each input kept whatever they say.
TAIL_LINES = 256
#: Share of control bytes in the first 64 KiB above which an input is binary.
BINARY_RATIO = 0.10

#: Blocks decoded ahead of the one being collected (memory: about this many blocks).
READ_AHEAD = 3

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
            base = name[:-3] if name.endswith(".gz") else name
            if base.endswith(LOG_SUFFIXES) or _is_slurm_default(base) or _BATCH_OUTPUT.search(base):
                yield os.path.join(dirpath, name)


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
    inputs not finished say so in their problems.
    """
    keep = _Keeper(tuple(dict.fromkeys(k for k in keywords if k)))
    todo = [info for info in inputs if not info.problems]
    workers = workers or min(4, (os.cpu_count() or 1) + 1)  # one more than cores: a worker waiting on the GIL leaves a core idle
    frames: list[pl.DataFrame] = []
    if todo:
        with ThreadPoolExecutor(max_workers=workers) as pool:

            def read(info: InputInfo) -> pl.DataFrame:
                return _read_one(info, keep, deadline, stdin, pool)

            if len(todo) == 1:
                frames.append(read(todo[0]))
            else:
                # Files in parallel; each file's own blocks also go to the pool.
                with ThreadPoolExecutor(max_workers=workers) as files:
                    frames.extend(files.map(read, todo))
    lines = pl.concat(frames) if frames else pl.DataFrame(schema=LINE_SCHEMA)
    return Ingested(lines=lines, inputs=inputs)


def ingest_text(text: str, keywords: Sequence[str], name: str = "<text>", *, tail: bool = True) -> Ingested:
    """Ingest a string as if it were a file; rule examples and tests use it.

    ``tail=False`` keeps only prefiltered lines, as in a file far longer than the
    tail: rule checks use it so a rule cannot rely on the tail to see its line.
    """
    info = InputInfo(file=name, bytes=len(text.encode()))
    keep = _Keeper(tuple(dict.fromkeys(k for k in keywords if k)))
    frame = _read_stream(info, io.BytesIO(text.encode()), keep, None, None, tail=tail)
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
) -> pl.DataFrame:
    """Open one input, sniff it, and stream it; any failure becomes a problem."""
    try:
        if info.file == _STDIN:
            return _read_stream(info, stdin or sys.stdin.buffer, keep, deadline, pool)
        path = Path(info.file)
        st = path.stat()
        info.bytes = st.st_size
        info.mtime = st.st_mtime
        if not path.is_file():
            info.problems.append("not a regular file; skipped")
            return _no_lines()
        if st.st_size == 0:
            info.problems.append("empty file (0 bytes)")
            return _no_lines()
        with path.open("rb") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=fh) as gz:
                    return _read_stream(info, gz, keep, deadline, pool, compressed=True)  # type: ignore[arg-type]
            return _read_stream(info, fh, keep, deadline, pool)
    except PermissionError:
        info.problems.append("permission denied: cannot read this file")
    except OSError as exc:
        info.problems.append(f"cannot read: {exc.strerror or exc}")
    return _no_lines()


def _no_lines() -> pl.DataFrame:
    return pl.DataFrame(schema=LINE_SCHEMA)


def _read_stream(
    info: InputInfo,
    stream: IO[bytes],
    keep: _Keeper,
    deadline: float | None,
    pool: ThreadPoolExecutor | None,
    *,
    compressed: bool = False,
    tail: bool = True,
) -> pl.DataFrame:
    """Split a byte stream into blocks of whole lines and filter each block."""
    blocks = _blocks(stream, info, deadline, compressed=compressed)
    first = next(blocks, None)
    if first is None:
        if not info.problems:
            info.problems.append("empty input (no bytes)")
        return _no_lines()
    ratio = _control_ratio(first[: 64 << 10])
    if ratio > BINARY_RATIO:
        info.problems.append(f"binary file ({ratio:.0%} control bytes in the first 64 KiB); skipped")
        for _ in blocks:  # drain so byte counts for stdin stay honest
            pass
        return _no_lines()

    def work(block: bytes) -> tuple[pl.DataFrame, pl.DataFrame, int, int, int]:
        return _filter_block(block, info.file, keep)

    items = itertools.chain([first], blocks)
    results = _bounded_map(pool, work, items) if pool is not None else map(work, items)
    kept: list[pl.DataFrame] = []
    last = _no_lines()
    n_bad = n_long = 0
    for frame, block_tail, n_lines, bad, long in results:
        # blocks number their lines from 1; the lines of the blocks before shift them
        kept.append(_shifted(frame, info.lines))
        last = pl.concat([last, _shifted(block_tail, info.lines)]).tail(TAIL_LINES)
        info.lines += n_lines
        n_bad += bad
        n_long += long
    if n_long:
        info.problems.append(f"{n_long} line(s) longer than {MAX_LINE_CHARS // 1024} Ki characters were cut to that length")
    if n_bad:
        info.problems.append(f"{n_bad} line(s) had invalid UTF-8 (replaced with U+FFFD)")
    out = pl.concat([*kept, last] if tail else kept).unique(subset=["line"], keep="first").sort("line")
    return _clean(out)


def _shifted(frame: pl.DataFrame, lines_before: int) -> pl.DataFrame:
    return frame.with_columns(pl.col("line") + lines_before) if lines_before else frame


def _bounded_map(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """Like ``pool.map`` but reads at most a few items ahead, so memory stays bounded."""
    ahead: collections.deque[Future[R]] = collections.deque()
    for item in items:
        ahead.append(pool.submit(fn, item))
        if len(ahead) > READ_AHEAD:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()


def _control_ratio(sample: bytes) -> float:
    if not sample:
        return 0.0
    return (len(sample) - len(sample.translate(None, _CONTROL))) / len(sample)


def _blocks(
    stream: IO[bytes],
    info: InputInfo,
    deadline: float | None,
    *,
    compressed: bool,
) -> Iterator[bytes]:
    """Yield blocks of whole lines.

    A line longer than the cut length is kept only up to it; the rest is skipped
    as it streams by, so one giant line cannot exhaust memory.
    """
    carry = b""
    skipping = False  # inside a cut line: drop bytes until its newline
    read_total = 0
    limit = MAX_LINE_CHARS * 4 + 4  # bytes: enough for MAX_LINE_CHARS of any UTF-8
    decoder: codecs.IncrementalDecoder | None = None
    cr_only = False
    while True:
        if deadline is not None and time.monotonic() > deadline:
            info.problems.append(f"time budget ran out after {read_total} bytes; the rest of this input was not read")
            break
        chunk, problem = _read_block(stream, compressed)
        if problem:
            info.problems.append(problem.format(read_total + len(chunk)))
        if not chunk:
            break
        first = not read_total
        if first:  # the first block: how the text is encoded and how its lines end
            encoding, skip = sniff_encoding(chunk[:4096])
            if encoding is not None:
                decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
                info.problems.append(f"text encoded as {encoding.upper()}; read as such")
            read_total += skip
            chunk = chunk[skip:]
        read_total += len(chunk)
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
        if whole:
            yield whole
    if info.file == _STDIN:
        info.bytes = read_total
    if carry:
        yield carry + b"\n"


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


def _read_block(stream: IO[bytes], compressed: bool) -> tuple[bytes, str | None]:
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


def _filter_block(data: bytes, name: str, keep: _Keeper) -> tuple[pl.DataFrame, pl.DataFrame, int, int, int]:
    """Split a block into lines: (kept lines, last lines, line count, bad UTF-8 lines, long lines).

    Lines are numbered from 1 within the block (the CSV reader gives one row per newline).
    """
    if b"\x1f" in data:  # the CSV reader's separator must not occur in the text
        data = data.replace(b"\x1f", b" ")
    ascii_only = data.isascii()  # most logs: valid UTF-8 for sure, and characters are bytes
    table = pl.read_csv(
        data,
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
        return _no_lines(), _no_lines(), 0, 0, 0
    text = table.get_column("raw").fill_null("")
    n = len(text)
    # a line has at least as many bytes as characters; in ASCII exactly as many, and no bad bytes
    long = text.filter(text.str.len_bytes() > MAX_LINE_CHARS)
    n_long = len(long) if ascii_only else int((long.str.len_chars() > MAX_LINE_CHARS).sum())
    n_bad = 0 if ascii_only else int(text.str.contains("\ufffd", literal=True).sum())
    # number only the rows that are kept (few), not every row of the block
    kept = keep.mask(text).arg_true()
    last = pl.int_range(max(0, n - TAIL_LINES), n, dtype=pl.UInt32(), eager=True)
    return _numbered(text, kept, name), _numbered(text, last, name), n, n_bad, n_long


def _numbered(text: pl.Series, rows: pl.Series, name: str) -> pl.DataFrame:
    """The given rows of a block as (file, line from 1, raw)."""
    return pl.DataFrame(
        {
            "file": pl.repeat(name, len(rows), dtype=pl.String(), eager=True),
            "line": (rows.cast(pl.UInt32) + 1).cast(pl.UInt32),
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
