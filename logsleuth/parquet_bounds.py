"""What a Parquet file may decode to, read from its footer and page headers without decoding it.

The history store (:mod:`logsleuth.history`) takes files from other users, so what a
file may allocate when decoded is bounded before any decoder sees it. Just enough of
Thrift's compact protocol is read here: the footer's row groups and column chunks (and
the ``time`` column's statistics: where a file's verdicts lie in time), and, for a file
that is not trusted, the page headers of the columns that will be decoded (what a
decoder allocates by: a footer can understate them).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


class Malformed(ValueError):
    """Not a Parquet file this reader will decode."""


# Only the fields a spec names are kept (None: an integer; True: that it is there; bytes: a
# binary; a dict: a struct; a one-element list: a list of such structs, or [bytes] of binaries);
# the rest is skipped without building anything.
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
            raise Malformed("bad varint")


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _varint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


def _count(buf: bytes, pos: int, n: int) -> int:
    if n > len(buf) - pos:  # every element takes at least one byte
        raise Malformed("collection larger than the file")
    return n


def _skip(buf: bytes, pos: int, kind: int, depth: int) -> int:
    if depth > _DEPTH:
        raise Malformed("metadata nested too deep")
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
    raise Malformed(f"unknown metadata type {kind}")


def _struct(buf: bytes, pos: int, spec: _Spec, depth: int = 0) -> tuple[dict[int, Any], int]:
    if depth > _DEPTH:
        raise Malformed("metadata nested too deep")
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
                raise Malformed(f"field {field_id} is not an integer")
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
                raise Malformed(f"field {field_id} is not a struct")
            out[field_id], pos = _struct(buf, pos, want, depth + 1)
        elif want is bytes:
            if kind != 8:
                raise Malformed(f"field {field_id} is not binary")
            n, pos = _varint(buf, pos)
            out[field_id], pos = buf[pos : pos + n], pos + n
        else:
            head = buf[pos]
            elem = want[0]
            if kind != 9 or head & 0x0F != (8 if elem is bytes else 12):
                raise Malformed(f"field {field_id} is not a list of {'binaries' if elem is bytes else 'structs'}")
            n, pos = (head >> 4, pos + 1) if head >> 4 != 15 else _varint(buf, pos + 1)
            items: list[Any] = []
            for _ in range(_count(buf, pos, n)):
                if elem is bytes:
                    size, pos = _varint(buf, pos)
                    items.append(buf[pos : pos + size])
                    pos += size
                else:
                    item, pos = _struct(buf, pos, elem, depth + 1)
                    items.append(item)
            out[field_id] = items
    return out, pos + 1


_COLUMN_META: _Spec = {5: None, 6: None, 7: None, 9: None, 11: None}  # values, sizes, page offsets
_CHUNK: _Spec = {1: True, 3: _COLUMN_META, 4: None, 5: None, 6: None, 7: None, 8: True, 9: True}
_FOOTER: _Spec = {3: None, 4: [{1: [_CHUNK], 3: None}], 8: True, 9: True}


def _footer(meta: _Spec, schema: bool) -> _Spec:
    """The footer's spec with more of each chunk's metadata kept, and (``schema``) the schema's names."""
    chunk = {**_CHUNK, 3: {**_COLUMN_META, **meta}}
    return {**_FOOTER, 4: [{1: [chunk], 3: None}], **({2: [{4: bytes, 5: None}]} if schema else {})}


_STATISTICS: _Spec = {1: bytes, 2: bytes, 3: None, 5: bytes, 6: bytes}  # (deprecated) max, min, null count, max, min
#: a file to decode in part: which column each chunk is (by the path it declares, and by its place in the schema)
_FOOTER_COLUMNS = _footer({3: [bytes]}, schema=True)
#: a trusted file: where its verdicts lie in time (its time column's type and statistics)
_FOOTER_SPAN = _footer({1: None, 3: [bytes], 12: _STATISTICS}, schema=False)
_FOOTER_BOTH = _footer({1: None, 3: [bytes], 12: _STATISTICS}, schema=True)
_PAGE: _Spec = {1: None, 2: None, 3: None, 5: {1: None, 2: None}, 8: {1: None, 4: None}}
_DELTA_BYTE_ARRAY = 7  # values built from the previous value's prefix: may grow past the page
_INT64 = 2  # the physical type of a time column
TIME = b"time"


@dataclass(frozen=True)
class Shape:
    """Rows, bounds on what the checked columns decode to, and where the rows lie in time."""

    rows: int
    plain: int  # uncompressed bytes + 16 per value: what ordinary data decodes to
    worst: int  # what it may decode to when every dictionary value is repeated in every row
    #: the least and greatest ``time`` (int64, microseconds) by the statistics; None when a row group has none
    span: tuple[int, int] | None = None
    nulls: int | None = None  # rows without a time, by the statistics (None: not known)


def _int(d: dict[int, Any], key: int, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or v < 0:
        raise Malformed(f"missing or negative metadata field {key}")
    return v


def inspect(
    data: bytes, *, pages: bool = True, size: int | None = None, columns: Collection[str] | None = None, span: bool = True
) -> Shape:
    """Rows, and bounds on what the values decode to, from the footer and (with ``pages``) the page headers.

    The page headers are what a decoder allocates by, so a footer that understates
    them does not help; a column chunk's pages must fill its byte range exactly.
    Reading them costs about as much again as the footer: a file of root's or the
    reader's own is bounded by its footer alone, and then ``data`` may be just the
    file's end from its footer on (``size``: the whole file's). With ``columns``,
    only those top-level columns count (only they will be decoded): a chunk counts
    when its place in the schema or the path it declares names one of them, so a
    file cannot show the check one chunk and the decoder another. ``span``: read where the rows lie
    in time from the statistics (of use for a trusted file only; they cost a little).
    """
    try:
        return _shape(data, pages, len(data) if size is None else size, columns, span)
    except (IndexError, RecursionError):
        raise Malformed("truncated metadata") from None


def footer_start(n: int, tail: bytes) -> int:
    """Where the footer of a file of ``n`` bytes begins, from its last 8 bytes."""
    if n < 12 or len(tail) < 8 or tail[-4:] != b"PAR1":
        raise Malformed("no Parquet magic")
    footer = n - 8 - int.from_bytes(tail[-8:-4], "little")
    if footer < 4:
        raise Malformed("footer out of bounds")
    return footer


def _shape(data: bytes, pages: bool, n: int, columns: Collection[str] | None, span: bool) -> Shape:
    base = n - len(data)  # the file offset of data[0]: 0 unless only the footer was read
    if base and pages:
        raise Malformed("page headers need the whole file")
    if not base and data[:4] != b"PAR1":
        raise Malformed("no Parquet magic")
    footer = footer_start(n, data[-8:])
    if footer < base:
        raise Malformed("footer out of bounds")
    want = None if columns is None else {c.encode() for c in columns}
    spec = (_FOOTER_BOTH if span else _FOOTER_COLUMNS) if want is not None else (_FOOTER_SPAN if span else _FOOTER)
    meta, end = _struct(data, footer - base, spec)
    if end + base > n - 8 or 8 in meta or 9 in meta:
        raise Malformed("footer out of bounds, or encrypted")
    leaves = None if want is None else _leaves(meta.get(2, []))
    rows, plain, worst = 0, 0, 0
    low: int | None = None
    high: int | None = None
    spanned, nulls = True, 0
    for group in meta.get(4, []):
        rows += _int(group, 3)
        chunks = group.get(1, [])
        if leaves is not None and len(chunks) != len(leaves):
            raise Malformed("column chunks do not match the schema")
        for i, chunk in enumerate(chunks):
            if any(k in chunk for k in (1, 8, 9)):
                raise Malformed("column data in another file, or encrypted")
            for off, length in ((4, 5), (6, 7)):  # offset and column indexes: inside the file
                if off in chunk and _int(chunk, off) + _int(chunk, length, 0) > n:
                    raise Malformed("index out of bounds")
            md = chunk.get(3)
            if md is None:
                raise Malformed("column chunk without metadata")
            start = _int(md, 11) if 11 in md else _int(md, 9)  # where a reader starts: the dictionary page, if any
            stop = start + _int(md, 7)
            if start < 4 or stop > footer:
                raise Malformed("column chunk out of bounds")
            path = md.get(3) or [b""]
            if path[0] == TIME and md.get(1) == _INT64:
                stats = md.get(12, {})
                least, most = stats.get(6, stats.get(2)), stats.get(5, stats.get(1))
                if isinstance(least, bytes) and isinstance(most, bytes) and len(least) == len(most) == 8:
                    a, b = int.from_bytes(least, "little", signed=True), int.from_bytes(most, "little", signed=True)
                    low, high = (a, b) if low is None or high is None else (min(low, a), max(high, b))
                else:
                    spanned = False
                nulls = nulls + stats[3] if isinstance(stats.get(3), int) and nulls >= 0 else -1
            if want is not None and path[0] not in want and (leaves is None or leaves[i] not in want):
                continue
            values, unpacked, dictionary, growing = 0, 0, 0, False
            pos = start - base if pages else stop
            while pos < stop:
                page, pos = _struct(data, pos, _PAGE)
                usize = _int(page, 2)
                pos += _int(page, 3)
                if pos > stop:
                    raise Malformed("page out of bounds")
                unpacked += usize
                if _int(page, 1) == 2:  # a dictionary page
                    dictionary = max(dictionary, usize)
                    continue
                header = page.get(5) or page.get(8)
                if header is None:
                    raise Malformed("data page without a header")
                values += _int(header, 1)
                growing |= header.get(2 if 5 in page else 4) == _DELTA_BYTE_ARRAY
            values = max(values, _int(md, 5))
            unpacked = max(unpacked, _int(md, 6))
            plain += unpacked + 16 * values
            worst += 16 * values + unpacked + values * max(dictionary, unpacked if growing else 0)
    if rows != _int(meta, 3):
        raise Malformed("row groups do not add up to the file's rows")
    if not span:
        return Shape(rows, plain, worst)
    where = (low, high) if spanned and low is not None and high is not None else None
    return Shape(rows, plain, worst, where, nulls if nulls >= 0 else None)


def _leaves(schema: list[dict[int, Any]]) -> list[bytes]:
    """The top-level column each leaf of the schema belongs to, in the order of the column chunks."""
    if not schema:
        return []
    leaves: list[bytes] = []
    i = 1
    for _ in range(_int(schema[0], 5, 0)):  # the root's children, each followed by its descendants
        if i >= len(schema):
            raise Malformed("schema shorter than it says")
        name, pending = schema[i].get(4, b""), _int(schema[i], 5, 0)
        i += 1
        if not pending:
            leaves.append(name)
        while pending:
            if i >= len(schema):
                raise Malformed("schema shorter than it says")
            children = _int(schema[i], 5, 0)
            pending += children - 1
            if not children:
                leaves.append(name)
            i += 1
    if i != len(schema):
        raise Malformed("schema longer than it says")
    return leaves
