"""Secrets out of every text that leaves the process.

Logs carry tokens (HF_TOKEN, WANDB_API_KEY, AWS keys, bearer tokens, passwords
in URLs or on command lines). Reports, annotations and exports show the line
with the secret replaced by ``[REDACTED]``, so the evidence stays readable.
"""

from __future__ import annotations

import re

import polars as pl

MASK = "[REDACTED]"

#: (pattern, replacement); the secret is always the last group so the key name stays visible.
_RULES: tuple[tuple[str, str], ...] = (
    # KEY=value / KEY: value for names that say they are secret
    (
        r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*)(\s*[=:]\s*[\"']?)([^\s\"',;]{4,})",
        rf"${{1}}${{2}}{MASK}",
    ),
    # command-line flags: --password x, --token=x, --api-key x
    (r"(?i)(--(?:password|passwd|token|api[-_]key|secret)(?:=|\s+))([^\s\"']+)", rf"${{1}}{MASK}"),
    # credentials in URLs: scheme://user:pass@host
    (r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)", rf"${{1}}{MASK}${{3}}"),
    # Authorization: Bearer xxx
    (r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{8,})", rf"${{1}}{MASK}"),
    # well-known token shapes
    (r"\bhf_[A-Za-z0-9]{20,}\b", MASK),
    (r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", MASK),
    (r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", MASK),
    (r"\bxox[abpr]-[A-Za-z0-9-]{10,}\b", MASK),
    (r"\bsk-[A-Za-z0-9_-]{20,}\b", MASK),
)

_PY = tuple((re.compile(p), r.replace("${", "\\g<").replace("}", ">")) for p, r in _RULES)


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
    """Redact the text columns of an event table."""
    return df.with_columns(redact_expr(pl.col(c)).alias(c) for c in columns if c in df.columns)
