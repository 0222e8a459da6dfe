"""Rule and cause files: load, validate, and explain them.

Rules are data (TOML, one file per area in rules/). A rule names a cause, its
patterns, where they apply, how much a hit weighs and what role it plays, the
explanation and fix a person reads, and examples that must and must not match.
Causes (rules/causes.toml) hold the per-cause explanation and fix, give
finer causes their taxonomy parent, say how causes relate (``symptom_of``,
``waits``, ``scheduler_ended``: what the reasoner reads across ranks) and
hold the texts of the verdicts that name no cause (``unknown``, ``none`` and
their readings). Loading a file never runs code.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from .files import READ_UNTRUSTED, write_text_atomic
from .taxonomy import TAXONOMY

#: The rules shipped with logsleuth (a folder next to the package, or inside it when installed).
BUILTIN_RULES = Path(os.environ.get("LOGSLEUTH_RULES_DIR", Path(__file__).resolve().parent.parent / "rules"))
if not BUILTIN_RULES.is_dir():
    BUILTIN_RULES = Path(__file__).resolve().parent / "rules"

ROLES = ("primary", "consequence", "context")
SCOPE_COLUMNS = ("kind", "source", "level", "exc_type", "detail")
_ID = re.compile(r"^[A-Z]{2,4}\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class RuleError(Exception):
    """A rule or cause file is invalid; ``str()`` is ``file:line: message``."""


@dataclass(frozen=True)
class Reading:
    """One way a verdict that names no cause reads (``unknown`` when nothing but set-up lines
    were seen, ``none`` without a line that shows the job ending): its title, summary and fix."""

    name: str
    title: str
    summary: str
    fix: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cause:
    """A cause a verdict can name: a taxonomy id or a finer id with its parent.

    The relations (taxonomy causes only; a finer cause shares its parent's, as the reasoner reads
    categories): ``symptom_of`` names the causes that explain this one when both are seen (a
    disagreement between nodes, a faulty GPU, a file:// init file), ``waits`` marks what ranks
    report while waiting for others (a timeout: the rank that never came is the culprit), and
    ``scheduler_ended`` a job the scheduler ended (no node's fault; after a failure, its clean-up).
    ``summary``, ``located`` and ``readings`` are the texts of the causes no rule names
    (``unknown``, ``none``)."""

    id: str
    parent: str
    title: str
    explanation: str
    fix: tuple[str, ...]
    references: tuple[str, ...] = ()
    symptom_of: tuple[str, ...] = ()
    waits: bool = False
    scheduler_ended: bool = False
    summary: str = ""
    located: str = ""  # the summary when the first failing rank or node is known: {where} names it
    readings: tuple[Reading, ...] = ()


@dataclass(frozen=True)
class Rule:
    """One declarative rule (see rules/README.md for every field)."""

    id: str
    name: str
    cause: str
    patterns: tuple[str, ...]
    keywords: tuple[str, ...]
    role: str = "primary"
    weight: float = 0.8
    exclude: tuple[str, ...] = ()
    scope: Mapping[str, tuple[str, ...] | str] = field(default_factory=dict)
    summary: str = ""
    explanation: str = ""
    fix: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    examples_match: tuple[str, ...] = ()
    examples_no_match: tuple[str, ...] = ()
    origin: str = ""  # file:line where the rule is defined
    engine: str = "polars"  # "polars" (linear time) or "python" (regex module, with a timeout)
    deferred: bool = False  # how a process ended: yields to another failure of the same rank

    @property
    def pattern(self) -> str:
        """All patterns as one alternation."""
        return "|".join(f"(?:{p})" for p in self.patterns)


@dataclass
class RuleSet:
    """Rules and causes after loading (later folders override earlier ones by id)."""

    rules: list[Rule]
    causes: dict[str, Cause]
    sources: list[str] = field(default_factory=list)

    @property
    def keywords(self) -> list[str]:
        return sorted({k for r in self.rules for k in r.keywords})

    def cause(self, cause_id: str) -> Cause:
        """The cause record; a bare taxonomy id without a record gets a minimal one."""
        if cause_id in self.causes:
            return self.causes[cause_id]
        return Cause(cause_id, cause_id if cause_id in TAXONOMY else "unknown", cause_id.replace("_", " "), TAXONOMY.get(cause_id, ""), ())

    def category(self, cause_id: str) -> str:
        """The taxonomy id a cause rolls up to."""
        seen = set()
        while cause_id not in TAXONOMY and cause_id not in seen:
            seen.add(cause_id)
            cause_id = self.cause(cause_id).parent
        return cause_id if cause_id in TAXONOMY else "unknown"

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}

    def symptoms(self, of: str) -> frozenset[str]:
        """The causes that ``of`` explains when both are seen (they name it in ``symptom_of``)."""
        return frozenset(c.id for c in self.causes.values() if of in c.symptom_of)

    @functools.cached_property
    def waiting(self) -> frozenset[str]:
        """Causes that ranks report while waiting for others (collective and rendezvous timeouts)."""
        return frozenset(c.id for c in self.causes.values() if c.waits)

    @functools.cached_property
    def scheduler_ended(self) -> frozenset[str]:
        """Causes that say the scheduler ended the job (a cancellation, a time limit): no node's fault."""
        return frozenset(c.id for c in self.causes.values() if c.scheduler_ended)

    @functools.cached_property
    def ended_from_outside(self) -> frozenset[str]:
        """Causes that say how a job was ended from outside (a timeout, the scheduler), not why it
        stopped making progress."""
        return self.waiting | self.scheduler_ended

    def reading(self, cause_id: str, name: str | None = None) -> Reading:
        """A cause's title, summary and fix, or those of its reading ``name`` (the cause's own
        when it has no such reading)."""
        cause = self.cause(cause_id)
        own = Reading("", cause.title, cause.summary, cause.fix)
        return next((r for r in cause.readings if r.name == name), own) if name else own

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of what the rules say, not where they live: a stored verdict made under
        the same digest (and model) need not be made again."""
        said = sorted(repr(replace(r, origin="")) for r in self.rules) + sorted(repr(c) for c in self.causes.values())
        return hashlib.sha256("\n".join(said).encode()).hexdigest()[:16]


def load(extra: Sequence[str | os.PathLike[str]] = (), *, builtin: bool = True) -> RuleSet:
    """Load the built-in rules and then each extra folder or file (overriding by id).

    Loads are remembered for as long as no rule file changes (name, size,
    mtime): the CLI validates ``--rules`` before analysing, and the analysis
    then loads the same files again for free.
    """
    folders = ([BUILTIN_RULES] if builtin else []) + [Path(p) for p in extra]
    files = [path for folder in folders for path in _rule_files(folder)]
    key = tuple((str(p), *_stamp(p)) for p in files)
    if key not in _LOADED:
        _LOADED.clear()  # one entry is enough: the same rules are loaded again and again
        _LOADED[key] = _load(folders)
    return _LOADED[key]


_LOADED: dict[tuple[tuple[object, ...], ...], RuleSet] = {}


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _load(folders: list[Path]) -> RuleSet:
    """Every file's causes and rules; a file's problems are all collected before one RuleError
    names them (one per line), so a rule author fixes them in one round."""
    causes: dict[str, Cause] = {}
    rules: dict[str, Rule] = {}
    problems: list[str] = []
    files = {folder: _rule_files(folder) for folder in folders}
    parsed = _parsed([path for paths in files.values() for path in paths])
    for folder, paths in files.items():
        here: dict[str, Path] = {}  # a later folder's rule replaces one by id; within a folder an id is unique
        for path in paths:
            data = parsed[str(path)]
            for cause in _causes(path, data, problems, causes):
                causes[cause.id] = cause
            for rule in _rules(path, data, problems, trusted=folder == BUILTIN_RULES):
                if rule.id in here:
                    line = _line_of(_lines(path), f'id = "{rule.id}"')
                    problems.append(f"{path}:{line}: rule {rule.id}: id already used in {here[rule.id]}")
                here[rule.id] = path
                rules[rule.id] = rule
    ruleset = RuleSet(rules=list(rules.values()), causes=causes, sources=[str(f) for f in folders])
    problems += relation_problems(ruleset)
    if problems:
        raise RuleError("\n".join(problems))
    return ruleset


def _rule_files(folder: Path) -> list[Path]:
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        raise RuleError(f"{folder}: no such rules folder")
    files = sorted(folder.glob("*.toml"))
    # causes first, so rule files can be checked against them
    return sorted(files, key=lambda p: p.name != "causes.toml")


def cache_dir() -> Path | None:
    """Where parsed rule files are kept between runs: $LOGSLEUTH_CACHE_DIR ("off" disables),
    else $XDG_CACHE_HOME/logsleuth, else ~/.cache/logsleuth.

    The cache is the reading user's own: when that folder exists and belongs to
    someone else (a cache folder shared by a site, a home that is not this
    user's), a ``uid-<uid>`` folder inside it; None when it cannot be looked at."""
    chosen = os.environ.get("LOGSLEUTH_CACHE_DIR")
    if chosen == "off":
        return None
    base = (
        Path(chosen) if chosen else Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")) / "logsleuth"
    )
    try:
        st = base.stat()
    except FileNotFoundError:
        return base  # created (mode 0700) on the first write
    except OSError:
        return None
    if st.st_uid == os.geteuid():
        return base
    return base / f"uid-{os.geteuid()}"


def _parsed(files: list[Path]) -> dict[str, dict[str, Any]]:
    """The TOML of each file, parsed, by path.

    Parsing the built-in rules' TOML in Python costs about 20 ms on every run (a
    tenth of analysing a small log), so the parsed files are kept as JSON (data,
    never code) under :func:`cache_dir`, valid while every file keeps its size
    and modification time. A cache that cannot be read or written is ignored:
    the files are parsed as before.
    """
    import stat

    key = [[str(p), *_stamp(p)] for p in files]
    where = cache_dir()
    cached = where / "rules.json" if where is not None else None
    if cached is not None:
        # believed only when it is a regular file of this user's that no one else may write (another
        # user's cache could rewrite a fix text); opened without following a link or blocking on a FIFO
        try:
            fd = os.open(cached, READ_UNTRUSTED)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022 and st.st_size <= _CACHE_MAX:
                    with os.fdopen(os.dup(fd), "rb") as fh:
                        saved = json.loads(fh.read(_CACHE_MAX + 1).decode("utf-8"))
                    data = saved["data"]
                    if saved["version"] == _CACHE_VERSION and saved["key"] == key and all(isinstance(data.get(k), dict) for k, *_ in key):
                        return dict(data)
            except (OSError, ValueError, LookupError, TypeError, AttributeError):
                pass
            finally:
                os.close(fd)
    data = {str(p): _read_toml(p) for p in files}
    if cached is not None:
        _write_cache(cached, {"version": _CACHE_VERSION, "key": key, "data": data})
    return data


#: Bumped when the cache's layout changes.
_CACHE_VERSION = 1
#: A cache file larger than this is not read (the built-in rules' is about 0.5 MiB).
_CACHE_MAX = 64 << 20


def _write_cache(path: Path, value: dict[str, Any]) -> None:
    """Write atomically (concurrent epilogs share one home), mode 0600, in a folder of this
    user's (made 0700 when missing); any failure, or a folder that is someone else's, leaves no cache."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):  # a TOML date or time has no JSON form: such files stay uncached
        return
    with contextlib.suppress(OSError):
        folder = path.parent
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        if folder.stat().st_uid != os.geteuid():  # planted by someone else, or a race with cache_dir()
            return
        write_text_atomic(path, text, mode=0o600)


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # imported here: a run served by the cache never parses TOML
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: {exc}") from None
    except OSError as exc:
        raise RuleError(f"{path}: cannot read: {exc.strerror}") from None


def _line_of(lines: list[str], needle: str) -> int:
    """1-based line where ``needle`` first appears (for file:line messages)."""
    return next((no for no, text in enumerate(lines, 1) if needle in text), 1)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def _prose(value: Any) -> str:
    """Unwrap a TOML multi-line string: single newlines become spaces, blank lines stay."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", str(value or "").strip())


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


#: What a [cause.<id>] table may hold.
_CAUSE_KEYS = {
    "parent",
    "title",
    "explanation",
    "fix",
    "references",
    "symptom_of",
    "waits",
    "scheduler_ended",
    "summary",
    "located",
    "readings",
}
#: Relations and texts a later file's table keeps from the earlier one when it does not give them
#: (overriding a cause's fix must not drop what the reasoner knows about it).
_KEPT_ON_OVERRIDE = ("symptom_of", "waits", "scheduler_ended", "summary", "located", "readings")
_RELATIONS = ("symptom_of", "waits", "scheduler_ended")


def _causes(path: Path, data: Mapping[str, Any], problems: list[str], earlier: Mapping[str, Cause] | None = None) -> Iterable[Cause]:
    lines = _lines(path)
    table = data.get("cause") or {}
    if not isinstance(table, dict):
        problems.append(f"{path}:{_line_of(lines, 'cause')}: 'cause' at the top of a file must be tables [cause.<id>]; rules use [[rule]]")
        return
    for cid, body in table.items():
        where = f"{path}:{_line_of(lines, f'[cause.{cid}]')}"
        if not isinstance(body, dict):
            problems.append(f"{where}: cause.{cid} must be a table")
            continue
        unknown = sorted(set(body) - _CAUSE_KEYS)
        if unknown:
            problems.append(f"{where}: cause {cid!r}: unknown key(s) {', '.join(unknown)}")
            continue
        parent = body.get("parent", cid)
        if parent not in TAXONOMY:
            problems.append(f"{where}: cause {cid!r}: parent {parent!r} is not a taxonomy id")
            continue
        if cid not in TAXONOMY and parent == cid:
            problems.append(f"{where}: finer cause {cid!r} must name its taxonomy parent")
            continue
        if parent != cid and any(k in body for k in _RELATIONS):
            problems.append(f"{where}: finer cause {cid!r} shares its parent's relations; give them on [cause.{parent}]")
            continue
        bad = [k for k in ("waits", "scheduler_ended") if k in body and not isinstance(body[k], bool)]
        if bad or not isinstance(body.get("symptom_of", []), list):
            problems.append(f"{where}: cause {cid!r}: symptom_of must be a list of cause ids, waits and scheduler_ended true or false")
            continue
        readings = _readings(where, cid, body.get("readings"), problems)
        if readings is None:
            continue
        cause = Cause(
            id=cid,
            parent=parent,
            title=str(body.get("title", cid)),
            explanation=_prose(body.get("explanation")),
            fix=_tuple(body.get("fix")),
            references=_tuple(body.get("references")),
            symptom_of=_tuple(body.get("symptom_of")),
            waits=bool(body.get("waits", False)),
            scheduler_ended=bool(body.get("scheduler_ended", False)),
            summary=_prose(body.get("summary")),
            located=_prose(body.get("located")),
            readings=readings,
        )
        before = (earlier or {}).get(cid)
        if before is not None:
            cause = replace(cause, **{k: getattr(before, k) for k in _KEPT_ON_OVERRIDE if k not in body})
        yield cause


def _readings(where: str, cid: str, value: Any, problems: list[str]) -> tuple[Reading, ...] | None:
    """[cause.<id>.readings.<name>] tables (title, summary, fix), or None after a problem."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        problems.append(f"{where}: cause {cid!r}: readings must be tables [cause.{cid}.readings.<name>]")
        return None
    out = []
    for name, body in value.items():
        unknown = sorted(set(body) - {"title", "summary", "fix"})
        if unknown:
            problems.append(f"{where}: cause {cid!r}: reading {name!r}: unknown key(s) {', '.join(unknown)}")
            return None
        out.append(Reading(str(name), str(body.get("title", name)), _prose(body.get("summary")), _tuple(body.get("fix"))))
    return tuple(out)


def relation_problems(rules: RuleSet) -> list[str]:
    """Every cause a relation names is known (a taxonomy id or a cause of the files)."""
    known = set(TAXONOMY) | set(rules.causes)
    return [
        f"cause {c.id!r}: symptom_of names {other!r}, which is neither a taxonomy id nor in causes.toml"
        for c in rules.causes.values()
        for other in c.symptom_of
        if other not in known
    ]


_RULE_KEYS = {
    "id",
    "name",
    "cause",
    "patterns",
    "keywords",
    "role",
    "weight",
    "exclude",
    "scope",
    "summary",
    "explanation",
    "fix",
    "references",
    "match",
    "no_match",
    "deferred",
}


#: Constructs polars' linear-time engine lacks: look-around and back-references.
_NEEDS_BACKTRACKING = re.compile(r"\(\?<?[=!]|\\[1-9]|\\k<|\(\?P=")


def _rules(path: Path, data: Mapping[str, Any], problems: list[str], *, trusted: bool) -> Iterable[Rule]:
    """Rules of one file; a rule with a problem is left out and its problems recorded.

    ``trusted`` (the built-in rules, which the test suite compiles) skips compiling
    every pattern at load, which would cost start-up time on every run; users' rules
    are compiled here so errors name file:line."""
    lines = _lines(path)
    bodies = data.get("rule") or []
    if not isinstance(bodies, list) or not all(isinstance(b, dict) for b in bodies):
        problems.append(f"{path}:{_line_of(lines, 'rule')}: 'rule' must be an array of tables, written [[rule]]")
        return
    for body in bodies:
        rid = str(body.get("id", "?"))
        needle = 'id = "' + rid + '"'
        where = f"{path}:{_line_of(lines, needle)}"
        patterns = _tuple(body.get("patterns"))
        all_patterns = (*patterns, *_tuple(body.get("exclude")))
        found = _rule_problems(body)
        if trusted:
            engine = "python" if any(_NEEDS_BACKTRACKING.search(p) for p in all_patterns) else "polars"
        else:
            engine, broken = _compiled(all_patterns)
            found += broken
        if found:
            problems.extend(f"{where}: rule {rid}: {p}" for p in found)
            continue
        scope = body.get("scope") or {}
        role = body.get("role", "primary")
        weight = body.get("weight", 0.8)
        deferred = body.get("deferred", False)
        yield Rule(
            id=rid,
            name=str(body["name"]),
            cause=str(body["cause"]),
            patterns=patterns,
            keywords=_tuple(body["keywords"]),
            role=role,
            weight=float(weight),
            exclude=_tuple(body.get("exclude")),
            scope={k: (v if isinstance(v, str) else _tuple(v)) for k, v in scope.items()},
            summary=str(body.get("summary", "")).strip(),
            explanation=_prose(body.get("explanation")),
            fix=_tuple(body.get("fix")),
            references=_tuple(body.get("references")),
            examples_match=_tuple(body.get("match")),
            examples_no_match=_tuple(body.get("no_match")),
            origin=where,
            engine=engine,
            deferred=deferred,
        )


def _rule_problems(body: Mapping[str, Any]) -> list[str]:
    """Everything wrong with one rule table's fields (empty when they are well formed)."""
    out: list[str] = []
    unknown = set(body) - _RULE_KEYS
    if unknown:
        out.append(f"unknown field(s) {', '.join(sorted(unknown))}")
    out += [f"missing required field {key!r}" for key in ("id", "name", "cause", "patterns", "keywords") if not body.get(key)]
    if body.get("role", "primary") not in ROLES:
        out.append(f"role must be one of {', '.join(ROLES)}")
    weight = body.get("weight", 0.8)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
        out.append("weight must be a number in (0, 1]")
    if not isinstance(body.get("deferred", False), bool):
        out.append("deferred must be true or false")
    bad = set(body.get("scope") or {}) - set(SCOPE_COLUMNS)
    if bad:
        out.append(f"scope on unknown column(s) {', '.join(sorted(bad))}")
    return out


def _compiled(patterns: Sequence[str]) -> tuple[str, list[str]]:
    """Compile each pattern once: the engine that runs them all ('polars', the linear-time one,
    unless some pattern needs the regex package) and the patterns neither engine takes."""
    engine, broken = "polars", []
    for pattern in patterns:
        problem = _compile_problem(pattern)
        if problem is None:
            continue
        if _python_problem(pattern) is None:
            engine = "python"
        else:
            broken.append(f"pattern does not compile: {pattern!r}\n    " + problem.replace("\n", "\n    "))
    return engine, broken


def compile_problems(rule: Rule) -> list[str]:
    """Why a loaded rule's patterns do not compile (empty when they do); `rules check` uses it."""
    engine, broken = _compiled((*rule.patterns, *rule.exclude))
    if broken:
        return [f"{rule.origin}: rule {rule.id}: {b}" for b in broken]
    if engine != rule.engine:
        return [f"{rule.origin}: rule {rule.id}: runs on the {rule.engine} engine but needs {engine}"]
    return []


def _compile_problem(pattern: str) -> str | None:
    """Why polars' (Rust, linear-time) regex engine rejects a pattern, or None."""
    try:
        pl.select(pl.lit("").str.contains(pattern))
    except Exception as exc:  # polars raises ComputeError with the engine's message
        return str(exc).split("\n\nThis error occurred")[0].strip()  # the engine's message, not polars' expression
    return None


def _python_problem(pattern: str) -> str | None:
    import regex

    try:
        regex.compile(pattern)
    except regex.error as exc:
        return str(exc)
    return None


def validate(rules: RuleSet) -> list[str]:
    """Cross-file checks: every rule's cause is known, ids and names are well formed and unique."""
    problems: list[str] = []
    names: dict[str, str] = {}
    for rule in rules.rules:
        if not _ID.match(rule.id):
            problems.append(f"{rule.origin}: rule id {rule.id!r} must look like ABC123")
        if not _NAME.match(rule.name):
            problems.append(f"{rule.origin}: rule {rule.id}: name {rule.name!r} must be kebab-case")
        if rule.name in names and names[rule.name] != rule.id:
            problems.append(f"{rule.origin}: rule {rule.id}: name {rule.name!r} is also used by {names[rule.name]}")
        names[rule.name] = rule.id
        if rule.cause not in TAXONOMY and rule.cause not in rules.causes:
            problems.append(f"{rule.origin}: rule {rule.id}: cause {rule.cause!r} is neither a taxonomy id nor in causes.toml")
        if not rule.examples_match:
            problems.append(f"{rule.origin}: rule {rule.id}: needs at least one 'match' example")
        if not (rule.explanation or rules.cause(rule.cause).explanation):
            problems.append(f"{rule.origin}: rule {rule.id}: no explanation (on the rule or its cause)")
        if not (rule.fix or rules.cause(rule.cause).fix):
            problems.append(f"{rule.origin}: rule {rule.id}: no fix (on the rule or its cause)")
    return problems
