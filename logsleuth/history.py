"""A history of verdicts: append one per analysis, then see what keeps failing, and where.

The store is a folder of Parquet files, one per verdict. Each is written under
a hidden temporary name and renamed into place, so epilogs on many nodes can
append at the same time (also over NFS) without a lock, and a reader never sees
half a file. Reading takes every ``*.parquet`` in the folder as one table.
Many small files read slowly, so ``compact`` merges them now and then; each
verdict carries an id, so a reader never counts one twice while that happens.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from . import __version__
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
}
_IMPLICATED = ("culprit", "failed")
#: Jobs stopped from outside: the node they stopped on says nothing about the node.
NOT_NODE_FAULTS = ("slurm_cancelled", "slurm_time_limit")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def record(report: Report, *, job: str | None = None, when: datetime | None = None) -> pl.DataFrame:
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
    }
    return pl.DataFrame([row], schema=SCHEMA)


def append(store: str | os.PathLike[str], report: Report, *, job: str | None = None, when: datetime | None = None) -> Path:
    """Add one verdict to the store (created if missing); returns the file written."""
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    frame = record(report, job=job, when=when)
    stamp = frame.item(0, "time").strftime("%Y%m%dT%H%M%S%f")
    host = _UNSAFE.sub("_", socket.gethostname())
    return _write_atomic(frame, folder / f"{stamp}-{_UNSAFE.sub('_', job or 'nojob')}-{host}-{frame.item(0, 'id')}.parquet")


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


def node_jobs(table: pl.DataFrame, node: str) -> pl.DataFrame:
    """The verdicts that implicate ``node``, newest first: the jobs behind a node's record."""
    return (
        table.filter(pl.col("nodes").list.contains(node) | (pl.col("first_node") == node))
        .sort("time", descending=True)
        .select("time", "job", "category", "cause", "first_rank", "first_node", "confidence", "summary")
    )


def _write_atomic(frame: pl.DataFrame, path: Path) -> Path:
    """Write to a hidden file, then rename: readers never see half a file. A write that fails
    (a full disk) is an OSError whichever engine wrote, so callers handle one kind of error."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        frame.write_parquet(tmp)
        os.replace(tmp, path)
    except pl.exceptions.PolarsError as exc:
        raise OSError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


@dataclass
class Loaded:
    """The verdicts of a store, and the files that could not be read."""

    table: pl.DataFrame
    problems: list[str] = field(default_factory=list)


def load(store: str | os.PathLike[str]) -> Loaded:
    """Every verdict in the store; a damaged file is reported, not fatal."""
    folder = Path(store)
    if not folder.is_dir():
        return Loaded(pl.DataFrame(schema=SCHEMA), [f"{folder}: not a folder (no history yet?)"])
    table, problems, _ = _read(sorted(str(p) for p in folder.glob("*.parquet")))
    return Loaded(table, problems)


def _read(files: list[str]) -> tuple[pl.DataFrame, list[str], list[str]]:
    """(the verdicts in these files, problems, the files that were read)."""
    if not files:
        return pl.DataFrame(schema=SCHEMA), [], []
    problems: list[str] = []
    try:
        table, read = _conform(pl.scan_parquet(files).collect()), files
    except Exception:  # one bad file (or an older schema): read them one by one
        frames, read = [], []
        for f in files:
            try:
                frames.append(_conform(pl.read_parquet(f)))
                read.append(f)
            except Exception as exc:
                problems.append(f"{f}: unreadable ({type(exc).__name__}); skipped")
        table = pl.concat(frames) if frames else pl.DataFrame(schema=SCHEMA)
    # one chunk per file would make every later step crawl (5000 verdicts: 1.2 s to summarise, 8 ms rechunked);
    # a verdict seen twice (a compaction in progress) counts once
    table = table.rechunk().filter(pl.col("id").is_null() | pl.col("id").is_first_distinct())
    return table, problems, read


def compact(store: str | os.PathLike[str]) -> tuple[int, list[str]]:
    """Merge the store's files into one, so that reading stays fast; returns (files merged, problems).

    Safe while epilogs keep appending: only the files listed at the start are
    merged, the merged file is renamed into place before they are removed, and
    readers count the verdicts they meet twice in between once. A lock file
    keeps two compactions apart; unreadable files are left where they are.
    """
    import fcntl

    folder = Path(store)
    with open(folder / ".compact.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table, problems, read = _read(sorted(str(p) for p in folder.glob("*.parquet")))
        if len(read) < 2:
            return 0, problems
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        _write_atomic(table.sort("time"), folder / f"{stamp}-compacted-{uuid.uuid4().hex}.parquet")
        for f in read:
            Path(f).unlink(missing_ok=True)
        return len(read), problems


def _conform(df: pl.DataFrame) -> pl.DataFrame:
    """Fill columns an older file lacks, so every file reads as one table."""
    return df.select((pl.col(n).cast(t) if n in df.columns else pl.lit(None, dtype=t).alias(n)) for n, t in SCHEMA.items())


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

    Clean runs (category ``none``) are counted but take no part in the rest;
    cancelled and timed-out jobs count as failures but implicate no node.
    """
    failures = table.filter(pl.col("category") != "none")
    n_fail = failures.height
    nodes = (
        failures.filter(~pl.col("category").is_in(NOT_NODE_FAULTS))
        .select("time", "category", node=pl.col("nodes"))
        .explode("node", empty_as_null=False)
        .drop_nulls("node")
        .group_by("node", "category")
        .agg(n=pl.len(), first=pl.col("time").min(), last=pl.col("time").max())
        .group_by("node")
        .agg(
            failures=pl.col("n").sum(),
            first_seen=pl.col("first").min(),
            last_seen=pl.col("last").max(),
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
