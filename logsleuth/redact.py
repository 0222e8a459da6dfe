"""Secrets out of every text that leaves the process.

Logs carry tokens (HF_TOKEN, WANDB_API_KEY, AWS keys, bearer tokens, passwords
in URLs or on command lines, private keys). Reports, annotations and exports
show the line with the secret replaced by ``[REDACTED]``, so the evidence stays
readable: what precedes the secret (the key name, the flag, the URL) stays.

Each rule is written once and runs in two engines: polars (Rust ``regex``) over
the event table, and Python ``re`` over single strings. So the patterns use
only syntax both understand (no look-around, no backreferences), and redacting
twice changes nothing. The rules are joined into one alternation (plus a second
pass for lines of a private key), so a text is scanned twice, not once per rule;
where two rules could match, the one that starts first wins, and of those
starting at the same place, the one listed first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import polars as pl

from .report.model import collect_text, map_text

MASK = "[REDACTED]"


class Rule(NamedTuple):
    """``before`` and ``after`` are kept, ``secret`` becomes MASK. No capturing groups inside."""

    before: str
    secret: str
    after: str = ""


#: Words that, at the end of a name, say its value is a secret: HF_TOKEN, WANDB_API_KEY,
#: AWS_SECRET_ACCESS_KEY, db_password, clientSecret, AccountKey. TOKENIZERS_PARALLELISM,
#: max_tokens or sort_key do not end in one, so they stay.
_SECRET_WORD = (
    r"(?:token|secret|password|passwd|passphrase|credentials?"
    r"|(?:api|access|private|secret|account|shared[_-]?access|subscription|encryption|signing|master|auth|session|kaggle)[_-]?key)"
)
#: The end of a name that holds a secret: a secret word (case-insensitive), _PASS or _PWD
#: (upper case only: forward_pass and $PWD are not secrets), or a few lower-case database ones.
#: The match starts at that end, not at the start of the name: the name stays all the same,
#: and Python's ``re`` does not try every letter of every word as its start.
_SECRET_NAME = (
    rf"(?:(?i:{_SECRET_WORD})|_(?:PASS|PWD)|\bSSHPASS"
    r"|(?i:\b(?:db|database|mysql|mariadb|pg|postgres|redis|mongo|smtp|mail|ftp|ldap|admin|root)_(?:pass|pwd)))"
)
#: The value after NAME= or NAME: (unquoted), not one starting with < or [ (eos_token: <|im_end|>,
#: pad_token: [PAD]) nor with -- (a PEM block, a flag).
_VALUE = r"(?:[^\s\"',;<\[-]|-[^\s\"',;<\[-])[^\s\"',;]*"
_PEM_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_B64 = r"[A-Za-z0-9+/]"

_RULES: tuple[Rule, ...] = (
    # --- private keys: PEM / OpenSSH / PGP blocks, also inside JSON ("private_key": "-----BEGIN ...\n...")
    Rule(_PEM_BEGIN, r"[\s\S]*?", _PEM_END),
    Rule(_PEM_BEGIN, r"(?:\\[nr]|[A-Za-z0-9+/=])+"),  # cut off before its END line
    # (a block printed line by line: _KEY_LINE, below)
    # --- NAME=value, NAME: value, "name": "value", export NAME='value', --name=value, YAML, JSON
    Rule(rf"{_SECRET_NAME}[\"']?[ \t]*[=:][ \t]*\"", r"[^\"<\[\n][^\"\n]*", '"'),
    Rule(rf"{_SECRET_NAME}[\"']?[ \t]*[=:][ \t]*'", r"[^'<\[\n][^'\n]*", "'"),
    Rule(rf"{_SECRET_NAME}[\"']?[ \t]*[=:][ \t]*[\"']?", _VALUE),
    # AWS secret access key after a space or in a table: aws_secret_access_key  wJalr...
    Rule(r"(?i:secret[ _-]?access[ _-]?key)[\"']?[ \t|]+[\"']?", rf"{_B64}{{40,}}"),
    # ODBC/ADO connection strings: ...;Uid=sa;Pwd=secret;
    Rule(r"(?i:;[ \t]*pwd[ \t]*=[ \t]*)", r"[^;\s\"']+"),
    # kaggle.json: {"username": "...", "key": "<32 hex>"}
    Rule(r"[\"']key[\"'][ \t]*:[ \t]*[\"']", r"[0-9a-f]{32}\b"),
    # --- command lines
    # flags with a space: --password x, --hf-token x, -api-key x, --password "my pass"
    Rule(rf"(?:^|\s)--?(?i:[A-Za-z0-9_-]*{_SECRET_WORD})[ \t]+\"", r"[^\"\n]+", '"'),
    Rule(rf"(?:^|\s)--?(?i:[A-Za-z0-9_-]*{_SECRET_WORD})[ \t]+'", r"[^'\n]+", "'"),
    Rule(rf"(?:^|\s)--?(?i:[A-Za-z0-9_-]*{_SECRET_WORD})[ \t]+", r"[^\s\"'-][^\s\"']*"),
    # -pSECRET / -p SECRET, only after the commands whose -p is a password (mkdir -p, ssh -p are not)
    Rule(
        r"(?:^|[\s;&|(/])(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mariadb|mariadb-dump|sshpass|docker\s+login)"
        r"\b[^\n;&|\[]*?\s-p\s*",
        r"[^\s\"'-][^\s\"']*|\"[^\"\n]*\"|'[^'\n]*'",
    ),
    Rule(r"\bcurl\b[^\n;&|\[]*?\s(?:-u|--user)\s*[\"']?[^\s:\"'@]+:", r"[^\s\"']+"),  # curl -u user:pass
    # wandb login <40 hex>, wandb.login(key="...")
    Rule(r"(?i:\bwandb[ \t]+login[ \t]+(?:--relogin[ \t]+)?)", r"[0-9a-f]{40}\b"),
    Rule(r"\bwandb\.login\([^)\n\[]*?\bkey\s*=\s*[\"']", r"[^\"'\n]+"),
    # netrc: machine host login user password xyz, or a "password xyz" line of its own
    Rule(r"(?i:\bmachine\s+\S+\s+(?:login\s+\S+\s+)?password\s+)", r"\S+"),
    Rule(r"(?m:^)(?:\[[^\]\s]*\]:?|[0-9]+:)?[ \t]*(?i:password)[ \t]+", r"[^\s\[]+", r"[ \t]*(?m:$)"),
    # --- HTTP
    Rule(r"(?i:authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:(?:bearer|basic|token|digest)[ \t]+)?)", r"[^\s\"',;]+"),
    Rule(r"(?i:\bbearer[ \t]+)", r"[A-Za-z0-9._~+/=-]{8,}"),
    Rule(r"(?i:\b(?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?)", r"[^\s\"'][^\r\n\"']*"),  # Cookie:, Set-Cookie:
    # --- URLs: scheme://user:pass@host (user may be empty: redis://:pass@host), secret query values,
    # webhooks whose path is the secret
    Rule(r"://[^\s:/@]*:", r"[^\s@/]+", "@"),
    Rule(
        r"[?&](?i:sig|signature|token|access_token|refresh_token|id_token|auth|auth_token|key|api_key|apikey|api-key"
        r"|client_secret|secret|password|x-amz-signature|x-amz-security-token|x-goog-signature)=",
        r"[^&\s\"'#<>]+",
    ),
    Rule(r"hooks\.slack\.com/(?:services|workflows|triggers)/", r"[A-Za-z0-9_/-]+"),
    Rule(r"\bdiscord(?:app)?\.com/api/webhooks/", r"[0-9]+/[A-Za-z0-9_-]+"),
    # --- well-known token shapes, wherever they stand
    Rule("", r"\bhf_[A-Za-z0-9]{20,}\b|\bapi_org_[A-Za-z0-9]{20,}\b"),  # Hugging Face
    Rule("", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),  # AWS access key id
    Rule("", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"),  # GitHub
    Rule("", r"\bgl(?:pat|dt|rt|ptt|cbt|soat|oas)-[A-Za-z0-9_.-]{20,}"),  # GitLab
    Rule("", r"\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-[0-9]+-[A-Za-z0-9-]{10,}"),  # Slack
    Rule("", r"\bsk-[A-Za-z0-9_-]{20,}"),  # OpenAI, Anthropic (sk-ant-...), DeepSeek
    Rule("", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}|\bwhsec_[A-Za-z0-9]{20,}"),  # Stripe
    Rule("", r"\bAIza[0-9A-Za-z_-]{35,}|\bya29\.[A-Za-z0-9_-]{20,}|\bGOCSPX-[A-Za-z0-9_-]{20,}"),  # Google
    Rule("", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    Rule("", r"\bnvapi-[A-Za-z0-9_-]{20,}"),  # NVIDIA NGC / build.nvidia.com
    Rule("", r"\bnpm_[A-Za-z0-9]{36}\b"),  # npm
    Rule("", r"\bpypi-Ag[A-Za-z0-9_-]{50,}"),  # PyPI / TestPyPI
    Rule("", r"\bdckr_(?:pat|oat)_[A-Za-z0-9_-]{20,}"),  # Docker Hub
    Rule("", r"[A-Za-z0-9_~.-]{3}[78]Q~[A-Za-z0-9_~.-]{31,}"),  # Azure AD client secret
    Rule("", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43,}"),  # SendGrid
    Rule("", r"\b(?:AC|SK)[0-9a-f]{32}\b"),  # Twilio account / API key SID
    Rule("", r"\bdo[opr]_v1_[0-9a-f]{64}\b"),  # DigitalOcean
    Rule("", r"\bdapi[0-9a-f]{32}(?:-[0-9]+)?\b"),  # Databricks
    Rule("", r"\br8_[A-Za-z0-9]{30,}\b"),  # Replicate
    Rule("", r"\bgsk_[A-Za-z0-9]{40,}\b"),  # Groq
    Rule("", r"\btskey-[A-Za-z0-9-]{16,}"),  # Tailscale
    Rule("", r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b"),  # Shopify
    Rule("", r"\blsv2_(?:pt|sk)_[0-9a-f]{32}_[0-9a-f]{10}\b"),  # LangSmith
)


#: One line of a key block printed on its own (cat id_rsa, a secret dumped line by line): 49-91
#: base64 characters alone at the end of a line, after a rank prefix at most, with an upper-case
#: letter among the first 16 (so not a hex digest) and not starting with / (so not a path).
#: Its own pass: its counted repetitions inside the big alternation make Rust's DFA many times slower.
_KEY_LINE = Rule(r"(?m:^)|[\s:\]|>]", rf"(?:[A-Z]|[a-z0-9+][a-z0-9+/]{{0,14}}[A-Z]){_B64}{{48,75}}={{0,2}}", r"[ \t]*(?m:$)")


def _compile(rules: Sequence[Rule]) -> tuple[str, str]:
    """One alternation of all rules and its replacement (``${n}`` groups, polars syntax).

    Each rule's ``before`` and ``after`` become numbered groups; the replacement puts every
    ``before`` group, then MASK, then every ``after`` group. Groups of the rules that did not
    match are empty in both engines, so only the matching rule's parts come back. After a
    ``before``, the secret may also be MASK itself: a second pass then keeps exactly what the
    first one made (``-p [REDACTED]:`` does not lose its colon).
    """
    branches: list[str] = []
    befores: list[str] = []
    afters: list[str] = []
    group = 0
    for rule in rules:
        parts: list[str] = []
        for text, kind in ((rule.before, befores), (rule.secret, None), (rule.after, afters)):
            if re.compile(text).groups:
                raise ValueError(f"capturing group in redaction rule part {text!r}")
            if kind is None:
                parts.append(f"(?:{re.escape(MASK)}|{text})" if rule.before else f"(?:{text})")
            elif text:
                group += 1
                kind.append(f"${{{group}}}")
                parts.append(f"({text})")
        branches.append("".join(parts))
    return "|".join(branches), "".join(befores) + MASK + "".join(afters)


def _ascii_word_boundary(pattern: str, spelling: str) -> str:
    r"""Each ``\b`` in ``spelling``: the ASCII word boundary, ``(?-u:\b)`` in Rust, ``(?a:\b)`` in Python.

    Both engines then agree, and Rust's fast DFA keeps working on lines with non-ASCII text
    (progress bars, emoji), where a Unicode ``\b`` sends it to a slower engine: about seven
    times slower on real logs.
    """
    return re.sub(r"\\\\|\\b", lambda m: spelling if m[0] == r"\b" else m[0], pattern)


def _ascii_ignorecase(pattern: str) -> str:
    """Spell each letter inside ``(?i:...)`` as a class, ``token`` as ``[tT][oO][kK][eE][nN]``.

    Python's ``re`` is about six times slower with the flag (it cannot skip ahead to a known
    letter), and Rust's ``(?i)`` also folds letters outside ASCII (K for the Kelvin sign):
    spelled out, both engines fold the same letters, quickly. Classes are copied as they are.
    """
    out: list[str] = []
    opened: list[bool] = []  # per open group: is it a (?i:...)
    depth = i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":  # a class (the rules have no "]" first in one)
            end = i + 1
            while pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            out.append(pattern[i : end + 1])
            i = end + 1
            continue
        if pattern.startswith("(?i:", i):
            opened.append(True)
            depth += 1
            out.append("(?:")
            i += 4
            continue
        if c == "(":
            opened.append(False)
        elif c == ")" and opened.pop():
            depth -= 1
        out.append(f"[{c.lower()}{c.upper()}]" if depth and c.isascii() and c.isalpha() else c)
        i += 1
    return "".join(out)


#: (pattern, replacement) per pass, for polars (Rust ``regex``), and the same for Python ``re``.
PASSES = tuple(
    (_ascii_word_boundary(_ascii_ignorecase(pattern), r"(?-u:\b)"), replacement)
    for pattern, replacement in (_compile(_RULES), _compile([_KEY_LINE]))
)
_PY_PASSES = tuple(
    (re.compile(_ascii_word_boundary(_ascii_ignorecase(pattern), r"(?a:\b)")), re.sub(r"\$\{(\d+)\}", r"\\g<\1>", replacement))
    for pattern, replacement in (_compile(_RULES), _compile([_KEY_LINE]))
)

T = TypeVar("T")


def redact(text: str) -> str:
    """Replace secrets in one string."""
    for pattern, replacement in _PY_PASSES:
        text = pattern.sub(replacement, text)
    return text


def redact_expr(expr: pl.Expr) -> pl.Expr:
    """The same replacements as a vectorised polars expression."""
    for pattern, replacement in PASSES:
        expr = expr.str.replace_all(pattern, replacement)
    return expr


def redact_frame(df: pl.DataFrame, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """Redact the text columns of an event table: ``columns``, or by default every string column
    (message, raw and detail, but also reason, file paths, node names: all of it leaves the process).

    Each distinct text of all the columns is redacted once, in one pass, and only changed texts
    are replaced: big jobs repeat the same lines from every rank, and the patterns cost more than
    the lookup (a pass per column compiled them again for each of the table's 39 text columns).
    """
    names = [c for c, t in df.schema.items() if t == pl.String] if columns is None else [c for c in columns if c in df.columns]
    if not names:
        return df
    texts = pl.concat_list(pl.col(c).drop_nulls().unique().implode() for c in names).explode().drop_nulls().unique()
    distinct = df.select(texts.alias("t")).to_series()
    clean = distinct.to_frame().select(redact_expr(pl.col("t"))).to_series()
    changed = distinct != clean
    if not changed.any():
        return df
    old, new = distinct.filter(changed), clean.filter(changed)
    touched = df.select(pl.col(c).is_in(old.implode()).any() for c in names).row(0)
    return df.with_columns(pl.col(c).replace(old, new) for c, hit in zip(names, touched, strict=True) if hit)


#: Distinct strings from which redact_all runs the patterns vectorised (Rust regex) rather than one by one.
_VECTOR_FROM = 64


def redact_all(value: T) -> T:
    """Redact every string inside a report (dataclasses, lists, dicts), returning a copy (or the
    value itself when no string in it changes).

    The event table is already clean; this catches what does not come from it,
    such as an internal-error note that quotes a log line, or a path. Each distinct string is
    redacted once, and a big report's (a rank table of thousands of ranks) all in one vectorised
    pass: the polars engine makes the same replacements as the Python one.
    """
    texts: set[str] = set()
    collect_text(value, texts)
    if len(texts) < _VECTOR_FROM:
        changed = {t: r for t in texts if (r := redact(t)) != t}
    else:
        distinct = pl.Series("t", sorted(texts), dtype=pl.String())
        clean = distinct.to_frame().select(redact_expr(pl.col("t"))).to_series()
        differs = distinct != clean
        changed = dict(zip(distinct.filter(differs).to_list(), clean.filter(differs).to_list(), strict=True))
    return map_text(value, lambda t: changed.get(t, t)) if changed else value
