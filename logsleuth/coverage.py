"""`logsleuth rules coverage`: how much of what the software can print the rules map.

The message catalogue (``catalogue/<source>.toml``, one ``[[message]]`` per distinct
message of PyTorch, NCCL, Gloo, SLURM, CUDA, Open MPI and the DeepSpeed, Lightning, accelerate and Ray
launchers) records each message's format string, where it comes from and in which
versions, one realistic log line (``sample``), and its mapping: a cause with the role a
rule gives it, or ``harmless = true``. Every sample is run through the real pipeline
(:func:`logsleuth.rulecheck.texts_hits`: ingest, parse, match) and an entry is *mapped*
when the rule hits agree with the declared mapping:

- ``cause``/``role``: some hit has that role and names that cause (or a finer cause of
  that taxonomy id), and nothing outranks it: for a primary, no stronger (higher weight)
  primary hit, as the strongest hit of an event counts; for a consequence or context,
  no primary hit of another category;
- ``harmless``: no primary rule fires.

An entry without a mapping is unmapped: a message nobody has classified yet. Loading a
catalogue file never runs code (TOML only).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from .rulebook import ROLES, RuleSet
from .rulecheck import texts_hits

#: The catalogue shipped with logsleuth (a folder next to the package, or inside it when installed).
BUILTIN_CATALOGUE = Path(os.environ.get("LOGSLEUTH_CATALOGUE_DIR", Path(__file__).resolve().parent.parent / "catalogue"))
if not BUILTIN_CATALOGUE.is_dir():
    BUILTIN_CATALOGUE = Path(__file__).resolve().parent / "catalogue"

SOURCES = (
    "pytorch",
    "nccl",
    "gloo",
    "slurm",
    "cuda",
    "deepspeed",
    "lightning",
    "accelerate",
    "ray",
    "openmpi",
    "glibc",
    "vllm",
    "transformers",
    "megatron",
)
LEVELS = ("error", "warning", "info")
_REQUIRED = ("id", "source", "origin", "versions", "level", "template", "sample")
_FIELDS = frozenset({*_REQUIRED, "cause", "role", "harmless", "note"})
_ID = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)*$")


class CatalogueError(Exception):
    """A catalogue file is invalid; ``str()`` lists ``file: message`` problems."""


@dataclass(frozen=True)
class Message:
    """One message the software can print, and what it means."""

    id: str
    source: str
    origin: str
    versions: str
    level: str
    template: str
    sample: str
    cause: str = ""
    role: str = ""
    harmless: bool = False
    note: str = ""
    file: str = ""  # the catalogue file it came from

    @property
    def declared(self) -> str:
        """The mapping as text: ``cause (role)``, ``harmless`` or ``-``."""
        if self.harmless:
            return "harmless"
        return f"{self.cause} ({self.role})" if self.cause else "-"


def catalogue_files(folders: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
    """The ``*.toml`` files of the given folders or files (the built-in catalogue when none)."""
    paths = [Path(p) for p in folders] or [BUILTIN_CATALOGUE]
    return [f for p in paths for f in (sorted(p.glob("*.toml")) if p.is_dir() else [p])]


def load_catalogue(folders: Sequence[str | os.PathLike[str]] = (), rules: RuleSet | None = None) -> list[Message]:
    """Load and validate catalogue files; raise :class:`CatalogueError` listing every problem.

    With ``rules``, a declared cause must be a cause those rules know.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    messages: list[Message] = []
    problems: list[str] = []
    for path in catalogue_files(folders):
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        for n, entry in enumerate(data.get("message", [])):
            msg, errs = _message(entry, str(path))
            problems += [f"{path}: message {n} ({entry.get('id', '?')}): {e}" for e in errs]
            if msg is not None:
                messages.append(msg)
    seen: set[str] = set()
    for m in messages:
        if m.id in seen:
            problems.append(f"{m.file}: duplicate message id {m.id!r}")
        seen.add(m.id)
        if rules is not None and m.cause and m.cause not in rules.causes and rules.category(m.cause) != m.cause:
            problems.append(f"{m.file}: message {m.id}: unknown cause {m.cause!r}")
    if problems:
        raise CatalogueError("\n".join(problems))
    return messages


def _message(entry: dict[str, Any], file: str) -> tuple[Message | None, list[str]]:
    errs = [f"unknown field {k!r}" for k in entry if k not in _FIELDS]
    errs += [f"missing or empty {k!r}" for k in _REQUIRED if not isinstance(entry.get(k), str) or not entry[k].strip()]
    if errs:
        return None, errs
    if not _ID.match(entry["id"]):
        errs.append(f"id {entry['id']!r} is not lower-case words joined by - _ or .")
    if entry["source"] not in SOURCES:
        errs.append(f"source {entry['source']!r} is not one of {', '.join(SOURCES)}")
    if entry["level"] not in LEVELS:
        errs.append(f"level {entry['level']!r} is not one of {', '.join(LEVELS)}")
    cause, role, harmless = entry.get("cause", ""), entry.get("role", ""), entry.get("harmless", False)
    if not isinstance(harmless, bool):
        errs.append("harmless must be true or false")
    elif harmless and (cause or role):
        errs.append("a harmless message has no cause or role")
    if bool(cause) != bool(role):
        errs.append("cause and role go together")
    if role and role not in ROLES:
        errs.append(f"role {role!r} is not one of {', '.join(ROLES)}")
    if "\n" in entry["sample"].strip():
        errs.append("sample is one log line")
    if errs:
        return None, errs
    fields = {k: v for k, v in entry.items() if k in _FIELDS}
    return Message(**fields, file=file), []


def evaluate(messages: Sequence[Message], rules: RuleSet) -> pl.DataFrame:
    """One row per message: its declared mapping, the rule hits on its sample, ``mapped`` and ``reason``.

    All samples go through the pipeline in one run.
    """
    hits = texts_hits([m.sample for m in messages], rules)
    table = pl.DataFrame(
        {
            "i": pl.Series(range(len(messages)), dtype=pl.UInt32()),
            "id": [m.id for m in messages],
            "source": [m.source for m in messages],
            "level": [m.level for m in messages],
            "cause": [m.cause for m in messages],
            "category": [rules.category(m.cause) if m.cause else "" for m in messages],
            "role": [m.role for m in messages],
            "harmless": [m.harmless for m in messages],
        }
    )
    per = (
        hits.with_columns(
            (pl.col("rule") + " " + pl.col("cause") + " (" + pl.col("role") + ")").alias("hit"),
        )
        .group_by("text")
        .agg(
            pl.col("hit").unique().sort().alias("hits"),
            pl.struct("cause", "category", "role", "weight").alias("_h"),
        )
    )
    table = table.join(per, left_on="i", right_on="text", how="left")
    agree, reasons = [], []
    for row in table.iter_rows(named=True):  # a few hundred rows: the verdict logic reads best per row
        ok, why = _verdict(row)
        agree.append(ok)
        reasons.append(why)
    return table.with_columns(
        pl.Series("mapped", agree, dtype=pl.Boolean()),
        pl.Series("reason", reasons, dtype=pl.String()),
        pl.col("hits").fill_null(pl.lit([], dtype=pl.List(pl.String()))),
    ).select("id", "source", "level", "cause", "role", "harmless", "hits", "mapped", "reason")


def _verdict(row: dict[str, Any]) -> tuple[bool, str]:
    hits = row["_h"] or []
    primaries = [h for h in hits if h["role"] == "primary"]
    if row["harmless"]:
        if primaries:
            return False, "declared harmless, but primary " + ", ".join(sorted({h["cause"] for h in primaries})) + " fires"
        return True, ""
    if not row["cause"]:
        return False, "no mapping declared" + (f"; rules hit: {', '.join(row['hits'])}" if row["hits"] else "; no rule fires")
    want = (row["cause"], row["category"], row["role"])
    found = [h for h in hits if h["role"] == want[2] and want[0] in (h["cause"], h["category"])]
    if not found:
        seen = ", ".join(row["hits"]) if row["hits"] else "no rule fires"
        return False, f"declared {want[0]} ({want[2]}), but {seen}"
    if want[2] == "primary":
        # per event the strongest hit counts: a stronger primary of another category wins
        top = max(h["weight"] for h in primaries)
        other = sorted({h["cause"] for h in primaries if h["weight"] >= top and h["category"] != want[1]})
        if top > max(h["weight"] for h in found):
            other = other or sorted({h["cause"] for h in primaries if h["weight"] >= top})
    else:
        other = sorted({h["cause"] for h in primaries if h["category"] != want[1]})
    if other:
        return False, f"declared {want[0]} ({want[2]}), but primary {', '.join(other)} wins"
    return True, ""


def summary(result: pl.DataFrame) -> pl.DataFrame:
    """Per source (and ``all``): messages, error-level messages, mapped error-level ones and their share."""
    err = pl.col("level") == "error"
    aggs = [
        pl.len().alias("messages"),
        err.sum().alias("errors"),
        (err & pl.col("mapped")).sum().alias("mapped"),
        pl.col("mapped").sum().alias("mapped_all"),
    ]
    order = {s: n for n, s in enumerate(SOURCES)}
    per = result.group_by("source").agg(aggs).sort(pl.col("source").replace_strict(order, default=len(order)))
    total = result.select(aggs).with_columns(pl.lit("all").alias("source"))
    table = pl.concat([per, total.select(per.columns)])
    return table.with_columns(
        pl.when(pl.col("errors") > 0).then(pl.col("mapped") / pl.col("errors")).otherwise(1.0).alias("share"),
    )


def error_share(result: pl.DataFrame) -> float:
    """The share of error-level messages that are mapped (1.0 when there are none)."""
    errors = result.filter(pl.col("level") == "error")
    return 1.0 if errors.is_empty() else errors.get_column("mapped").mean()  # type: ignore[return-value]


def render_text(result: pl.DataFrame) -> str:
    """The per-source table and the unmapped messages, for a terminal."""
    lines = [f"{'source':<12}{'messages':>9}{'errors':>8}{'mapped':>8}{'share':>8}   (all levels mapped)"]
    for r in summary(result).iter_rows(named=True):
        lines.append(
            f"{r['source']:<12}{r['messages']:>9}{r['errors']:>8}{r['mapped']:>8}{r['share']:>8.1%}   ({r['mapped_all']}/{r['messages']})"
        )
    missing = result.filter(~pl.col("mapped"))
    if missing.height:
        lines += ["", f"unmapped or disagreeing ({missing.height}):"]
        for r in missing.sort("source", "level", "id").iter_rows(named=True):
            lines.append(f"  [{r['source']}/{r['level']}] {r['id']}: {r['reason']}")
    return "\n".join(lines)


def render_json(result: pl.DataFrame) -> dict[str, Any]:
    """The same as a JSON-ready dict: ``sources`` (per-source rows), ``share`` and ``unmapped``."""
    return {
        "share": error_share(result),
        "sources": summary(result).to_dicts(),
        "unmapped": result.filter(~pl.col("mapped")).select("id", "source", "level", "cause", "role", "hits", "reason").to_dicts(),
    }
