"""SLURM host lists and task ranges, both ways: ``node[01-04,07]`` <-> names, ``0-3,5`` <-> ids.

srun prints ``srun: error: node[01-02]: tasks 0-7: Killed`` and SLURM_JOB_NODELIST
holds the same expressions. The format is small (Slurm's src/common/hostlist.c):
comma-separated items at the top level, each a prefix with bracket groups of
numbers and ranges; zero padding is kept (``[08-10]`` gives node08 node09
node10); several bracket groups multiply (``rack[1-2]-n[1-2]``). An in-house
reader keeps logsleuth free of GPL dependencies (python-hostlist is GPL).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Refuse to expand expressions naming more hosts or ids than this (a typo like
#: ``[0-99999999]`` must not eat the memory of an epilog).
MAX_ITEMS = 1 << 20

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """An expression that is not a host list or range list."""


def expand_ranges(text: str) -> list[int]:
    """``"0-3,5"`` -> ``[0, 1, 2, 3, 5]`` (order kept, brackets allowed: ``"[0-3]"``)."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    out: list[int] = []
    for part in body.split(","):
        for lo, hi, _width in _bounds(part):
            if len(out) + hi - lo + 1 > MAX_ITEMS:
                raise HostlistError(f"{text!r} names more than {MAX_ITEMS} ids")
            out.extend(range(lo, hi + 1))
    return out


def expand_hostlist(text: str) -> list[str]:
    """``"node[01-02,07],gpu3"`` -> ``["node01", "node02", "node07", "gpu3"]``."""
    out: list[str] = []
    for item in _top_level_items(text):
        names = [""]
        for literal, group in _pieces(item):
            if group is None:
                names = [n + literal for n in names]
                continue
            numbers = [f"{i:0{w}d}" for part in group.split(",") for lo, hi, w in _bounds(part) for i in range(lo, hi + 1)]
            if len(names) * len(numbers) > MAX_ITEMS:
                raise HostlistError(f"{text!r} names more than {MAX_ITEMS} hosts")
            names = [n + literal + num for n in names for num in numbers]
        out.extend(names)
    return out


def collect_ranges(ids: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``"0-3,5"`` (sorted, duplicates dropped): srun's task list form."""
    nums = sorted(set(ids))
    spans: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        spans.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(spans)


def collect_hostlist(hosts: Iterable[str]) -> str:
    """``["node01", "node02", "node07"]`` -> ``"node[01-02,07]"``: the inverse of expand_hostlist.

    Hosts are grouped by their text before the trailing number and by the
    number's width, so zero padding survives the round trip.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for host in dict.fromkeys(hosts):
        m = re.match(r"^(.*?)(\d+)$", host)
        if not m:
            plain.append(host)
            continue
        prefix, digits = m.group(1), m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    parts = list(plain)
    for (prefix, width), nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        spans = []
        for span in collect_ranges(nums).split(","):
            lo, _, hi = span.partition("-")
            spans.append(f"{int(lo):0{width}d}" + (f"-{int(hi):0{width}d}" if hi else ""))
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(parts)


def _bounds(part: str) -> list[tuple[int, int, int]]:
    """One ``lo[-hi]`` item -> [(lo, hi, zero-pad width)]."""
    m = _RANGE.match(part.strip())
    if not m:
        raise HostlistError(f"not a number or range: {part!r}")
    lo_text, hi_text = m.group(1), m.group(2)
    lo, hi = int(lo_text), int(hi_text) if hi_text is not None else int(lo_text)
    if hi < lo:
        raise HostlistError(f"range runs backwards: {part!r}")
    width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
    return [(lo, hi, width)]


def _top_level_items(text: str) -> list[str]:
    """Split on commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unclosed '[' in {text!r}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _pieces(item: str) -> list[tuple[str, str | None]]:
    """``"rack[1-2]-n[3]"`` -> [("rack", "1-2"), ("-n", "3")]; a trailing literal has group None."""
    out: list[tuple[str, str | None]] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", item):
        out.append((item[pos : m.start()], m.group(1)))
        pos = m.end()
    if pos < len(item) or not out:
        out.append((item[pos:], None))
    return out
