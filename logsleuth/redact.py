"""Secrets out of every text that leaves the process.

Logs carry tokens (HF_TOKEN, WANDB_API_KEY, AWS keys, bearer tokens, passwords
in URLs or on command lines). Reports, annotations and exports show the line
with the secret replaced by ``[REDACTED]``, so the evidence stays readable.

Each rule is written once and runs in two engines: polars (Rust ``regex``) over
the event table, and Python ``re`` over single strings. So the patterns use
only syntax both understand (no look-around), and redacting twice changes
nothing.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TypeVar

import polars as pl

MASK = "[REDACTED]"

#: Words that, at the end of a name, say its value is a secret: HF_TOKEN, WANDB_API_KEY,
#: AWS_SECRET_ACCESS_KEY, db_password, clientSecret. TOKENIZERS_PARALLELISM or max_tokens
#: do not end in one, so they stay.
_SECRET_NAME = r"(?:token|secret|password|passwd|passphrase|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)"

#: (pattern, replacement); what precedes the secret is kept, so the key name stays visible.
_RULES: tuple[tuple[str, str], ...] = (
    # NAME=value, NAME: value, "name": "value", export NAME='value', --name=value
    (rf"(?i)([A-Za-z0-9_.-]*{_SECRET_NAME}[\"']?\s*[=:]\s*[\"']?)([^\s\"',;]+)", rf"${{1}}{MASK}"),
    # command-line flags with a space: --password x, --hf-token x, -api-key x
    (rf"(?i)((?:^|\s)--?[A-Za-z0-9_-]*{_SECRET_NAME}\s+)([^\s\"'-][^\s\"']*)", rf"${{1}}{MASK}"),
    # credentials in URLs: scheme://user:pass@host
    (r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)", rf"${{1}}{MASK}${{3}}"),
    # Authorization: Bearer xxx / Basic xxx, and a bare "Bearer xxx"
    (r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer\s+|basic\s+|token\s+|digest\s+)?)([^\s\"',;]+)", rf"${{1}}{MASK}"),
    (r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{8,})", rf"${{1}}{MASK}"),
    # wandb login <40 hex>
    (r"(?i)(\bwandb\s+login\s+(?:--relogin\s+)?)([0-9a-f]{40})\b", rf"${{1}}{MASK}"),
    # well-known token shapes, wherever they stand
    (r"\bhf_[A-Za-z0-9]{20,}\b", MASK),  # Hugging Face
    (r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", MASK),  # AWS access key id
    (r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b", MASK),  # GitHub
    (r"\bglpat-[A-Za-z0-9_-]{20,}\b", MASK),  # GitLab
    (r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b", MASK),  # Slack
    (r"\bsk-[A-Za-z0-9_-]{20,}\b", MASK),  # OpenAI-style
    (r"\bAIza[0-9A-Za-z_-]{35}\b", MASK),  # Google API key
    (r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", MASK),  # JWT
)

_PY = tuple((re.compile(p), r.replace("${", "\\g<").replace("}", ">")) for p, r in _RULES)

T = TypeVar("T")


def redact(text: str) -> str:
    """Replace secrets in one string."""
    for pattern, repl in _PY:
        text = pattern.sub(repl, text)
    return text


def redact_expr(expr: pl.Expr) -> pl.Expr:
    """The same replacements as a vectorised polars expression."""
    for pattern, repl in _RULES:
        expr = expr.str.replace_all(pattern, repl)
    return expr


def redact_frame(df: pl.DataFrame, columns: tuple[str, ...] = ("message", "raw", "detail")) -> pl.DataFrame:
    """Redact the text columns of an event table.

    Each distinct text is redacted once and only changed texts are replaced:
    big jobs repeat the same lines from every rank, and the fourteen patterns
    cost more than the lookup.
    """
    changes = []
    for c in (c for c in columns if c in df.columns):
        distinct = df.get_column(c).drop_nulls().unique()
        clean = distinct.to_frame().select(redact_expr(pl.col(c))).to_series()
        changed = distinct != clean
        if changed.any():
            changes.append(pl.col(c).replace(distinct.filter(changed), clean.filter(changed)))
    return df.with_columns(changes) if changes else df


def redact_all(value: T) -> T:
    """Redact every string inside a report (dataclasses, lists, dicts), returning a copy.

    The event table is already clean; this catches what does not come from it,
    such as an internal-error note that quotes a log line, or a path.
    """
    if isinstance(value, str):
        return redact(value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [redact_all(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: redact_all(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value
