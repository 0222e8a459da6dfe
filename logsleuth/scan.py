"""The prefilter over raw bytes: which lines of a block hold a keyword, found before any line is decoded.

A block of a big log is searched as it was read, in one pass: Hyperscan (Intel's multi-literal
matcher, SIMD, the GIL released) reports where the keywords end, and only the lines around those
offsets are ever cut out, numbered and decoded (typically well under 1 % of them). Line numbers come
from counting newlines between those lines (StringZilla's SIMD count where it is installed).

Every candidate line is still tested with the keywords on its decoded text (ingest does it, with the
same test as for small blocks), so this is only ever a faster way to the same lines: a keyword's
bytes occur in a line exactly when its text occurs in the decoded line (UTF-8 is self-synchronising;
a block that is not valid UTF-8 is left to the line-by-line path).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

#: A block as ingest hands it over: the bytes read, or a buffer read into again and again.
Bytes: TypeAlias = bytes | bytearray

#: Blocks at least this big are searched here; smaller ones (a small log) line by line, which needs no
#: matcher to be compiled (Hyperscan's import and compile take about 20 ms).
FAST_FROM_BYTES = 4 << 20
#: More keyword matches than one per this many bytes: the block is mostly kept lines (a log of one
#: error repeated), which the line-by-line path handles better than one Python call per match.
DENSE_BYTES_PER_MATCH = 1024

_NEWLINE = b"\n"


def _bytes_count(data: Bytes, needle: bytes, start: int, end: int) -> int:
    return data.count(needle, start, end)


@functools.lru_cache(maxsize=1)
def _counter() -> Callable[[Bytes, bytes, int, int], int]:
    """``count(data, needle, start, end)``: StringZilla's SIMD count (four times faster than
    bytes.count on newlines), else bytes.count."""
    try:
        from stringzilla import count
    except ImportError:  # pragma: no cover - a dependency, but not needed for correctness
        return _bytes_count
    return count  # type: ignore[no-any-return]


def count_newlines(data: Bytes, start: int = 0, end: int | None = None) -> int:
    """Newlines in ``data[start:end]``."""
    return int(_counter()(data, _NEWLINE, start, len(data) if end is None else end))


@dataclass
class Candidates:
    """Lines of a block that hold a keyword match: [start, stop) byte spans without their newline,
    their 0-based line numbers in the block, and the block's line count."""

    starts: list[int]
    stops: list[int]
    numbers: list[int]
    lines: int


@dataclass
class Matches:
    """What a scan found: the end offsets of keyword matches (unsorted), whether the CSV reader's
    separator occurs (its lines must then be tested on their text) and whether any byte is not ASCII."""

    ends: list[int]
    separator: bool
    ascii: bool


class Scanner:
    """One compiled set of literal keywords; ``scan`` may run in several threads at once."""

    def __init__(self, hs: Any, keywords: Sequence[bytes]) -> None:
        self._hs = hs
        self.db = hs.Database(mode=hs.HS_MODE_BLOCK)
        # every byte written as \xNN: the keywords are literals, whatever characters they hold;
        # then the CSV reader's separator, and any byte that is not ASCII (reported once)
        expressions = ["".join(f"\\x{b:02x}" for b in k).encode() for k in keywords]
        self.keywords = len(expressions)
        expressions += [rb"\x1f", rb"[\x80-\xff]"]
        flags = [0] * (self.keywords + 1) + [hs.HS_FLAG_SINGLEMATCH]
        self.db.compile(expressions=expressions, ids=list(range(len(expressions))), elements=len(expressions), flags=flags)
        #: a keyword with a carriage return or the separator in it may match bytes that its line's
        #: text does not hold (the reader drops one and replaces the other): its lines are tested
        self.exact = not any(b"\r" in k or b"\x1f" in k for k in keywords)
        self._local = threading.local()

    def _scratch(self) -> Any:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self.db)
        return scratch

    def scan(self, data: Bytes | memoryview, limit: int) -> Matches | None:
        """Every match in ``data``; None past ``limit`` keyword matches (the scan stops there)."""
        found: list[int] = []
        add = found.append
        keywords = self.keywords
        odd: list[int] = []  # [separator matches..., ] and -1 for a byte that is not ASCII

        def on_match(pattern: int, _start: int, end: int, _flags: int, _ctx: object) -> bool:
            if pattern < keywords:
                add(end)
                return len(found) > limit
            if pattern == keywords:  # the separator: its line is a candidate, tested on its text
                add(end)
                odd.append(end)
            else:
                odd.append(-1)
            return False

        try:
            self.db.scan(data, match_event_handler=on_match, scratch=self._scratch())
        except self._hs.ScanTerminated:
            return None
        if len(found) > limit:
            return None
        return Matches(found, any(e >= 0 for e in odd), -1 not in odd)


@functools.lru_cache(maxsize=4)
def scanner(keywords: tuple[str, ...]) -> Scanner | None:
    """The scanner for these keywords; None without Hyperscan."""
    try:
        import hyperscan
    except ImportError:  # pragma: no cover - a dependency; the line-by-line path still works
        return None
    return Scanner(hyperscan, [k.encode() for k in keywords if k and "\n" not in k])


def candidates(data: Bytes, size: int, ends: list[int]) -> Candidates:
    """The lines of ``data[:size]`` (whole lines) that the match ``ends`` fall in, numbered."""
    count = _counter()
    find, rfind = data.find, data.rfind
    starts: list[int] = []
    stops: list[int] = []
    numbers: list[int] = []
    n = pos = 0
    stop = -1
    for end in sorted(ends):
        if end <= stop:  # another match in the line already taken
            continue
        if end > size:  # in the partial line after the block
            break
        start = rfind(_NEWLINE, 0, end) + 1  # a keyword holds no newline: this one is before the match
        n += count(data, _NEWLINE, pos, start)
        pos = start
        stop = find(_NEWLINE, end - 1)
        starts.append(start)
        stops.append(stop)
        numbers.append(n)
    return Candidates(starts, stops, numbers, n + count(data, _NEWLINE, pos, size))


def tail_start(data: Bytes, size: int, lines: int) -> int:
    """Offset of the last ``lines`` lines of ``data[:size]`` (which ends with a newline)."""
    at = size - 1
    rfind = data.rfind
    for _ in range(lines):
        at = rfind(_NEWLINE, 0, at)
        if at < 0:
            return 0
    return at + 1


def long_lines(data: Bytes, size: int, limit: int, ascii_only: bool) -> int:
    """Lines of ``data[:size]`` longer than ``limit`` characters (a trailing carriage return not counted).

    Such a line holds a whole aligned window of ``limit // 2`` bytes without a newline, so only
    the lines around those windows are measured: a few hundred ``find`` calls per 16 MiB.
    """
    step = max(1, limit // 2)
    find, rfind = data.find, data.rfind
    n = 0
    seen_stop = -1
    for at in range(0, size, step):
        if at <= seen_stop or find(_NEWLINE, at, min(size, at + step)) >= 0:
            continue
        start = rfind(_NEWLINE, 0, at) + 1
        stop = find(_NEWLINE, at, size)
        stop = size if stop < 0 else stop
        seen_stop = stop
        line = data[start:stop]
        if line.endswith(b"\r"):
            line = line[:-1]
        chars = len(line) if ascii_only else len(line.decode("utf-8", "replace"))
        n += chars > limit
    return n


def lines_with(data: Bytes, size: int, needle: bytes) -> int:
    """How many lines of ``data[:size]`` contain ``needle`` (which holds no newline)."""
    n = 0
    at = data.find(needle, 0, size)
    while at >= 0:
        n += 1
        stop = data.find(_NEWLINE, at, size)
        if stop < 0:
            break
        at = data.find(needle, stop, size)
    return n
