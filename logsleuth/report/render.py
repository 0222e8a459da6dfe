"""Renderers: terminal (rich), markdown, json and github. Each takes a Report, returns text."""

from __future__ import annotations

import io
import json
import os
import re

from .model import Evidence, Report, map_text

FORMATS = ("terminal", "json", "markdown", "github")
_STATUS_ORDER = {"culprit": 0, "failed": 1, "hung": 2, "victim": 3, "finished": 4, "unknown": 5}


#: What a log or a file name may carry that would act on the reader's terminal instead of being
#: read: escape sequences (colour, cursor moves, OSC titles and links), backspace and carriage
#: return (which overwrite what was shown), other C0/C1 controls, and Unicode direction overrides.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, hyperlinks
    r"|\x1b[@-_]?"  # other escapes, or a lone ESC
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str) -> str:
    """``text`` without control characters: a log line is shown, never obeyed. Tabs become spaces."""
    return _CONTROL.sub("", text.replace("\t", " "))


def render(report: Report, fmt: str, *, color: bool = True, width: int | None = None, workspace: str | None = None) -> str:
    """Render a report in one of FORMATS (``workspace``: the GitHub checkout, for relative annotation paths).

    JSON keeps every character (its escaping is exact); the formats a person or GitHub
    reads get the report with control characters removed (markdown() does it itself: the
    epilog and the step summary call it directly)."""
    if fmt == "json":
        return report.to_json() + "\n"
    if fmt == "markdown":
        return markdown(report)
    report = map_text(report, printable)
    if fmt == "github":
        return github(report, workspace=workspace)
    if fmt == "terminal":
        return terminal(report, color=color, width=width)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render_many(reports: list[Report], fmt: str, *, color: bool = True, width: int | None = None, workspace: str | None = None) -> str:
    """Render the reports of several jobs: JSON gives a list, the others one report after another
    and a closing line naming every job's verdict. One report renders exactly as :func:`render`."""
    if len(reports) == 1:
        return render(reports[0], fmt, color=color, width=width, workspace=workspace)
    if fmt == "json":
        return json.dumps([r.to_dict() for r in reports], indent=2, ensure_ascii=False, default=str) + "\n"
    parts = []
    for r in reports:
        head = f"job {r.job}" if r.job is not None else "files naming no job"
        body = render(r, fmt, color=color, width=width, workspace=workspace)
        parts.append(body if fmt == "github" else (f"## {head}\n\n{body}" if fmt == "markdown" else f"{head}\n{body}"))
    summary = f"{len(reports)} jobs: " + "; ".join(
        f"{'job ' + r.job if r.job is not None else 'files naming no job'} {r.verdict.category}" for r in reports
    )
    return "".join(parts) + ("" if fmt == "github" else ("\n" + summary + "\n"))


def _where(rank: int | None, node: str | None) -> str:
    parts = []
    if rank is not None:
        parts.append(f"rank {rank}")
    if node:
        parts.append(f"node {node}")
    return ", ".join(parts) if parts else "rank unknown"


def _rank_summary(report: Report, limit: int = 12) -> list[tuple[str, str]]:
    """Compact per-status rank lists, e.g. ('victim', '0,1,3-7')."""
    groups: dict[str, list[int]] = {}
    for r in report.ranks:
        groups.setdefault(r.status, []).append(r.rank)
    out = []
    for status in sorted(groups, key=lambda s: _STATUS_ORDER.get(s, 9)):
        out.append((status, _ranges(sorted(groups[status]), limit)))
    return out


def _ranges(nums: list[int], limit: int) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (at most ``limit`` spans)."""
    spans: list[str] = []
    start = prev = nums[0] if nums else 0
    for n in nums[1:]:
        if n != prev + 1:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            start = n
        prev = n
    if nums:
        spans.append(str(start) if start == prev else f"{start}-{prev}")
    text = ",".join(spans[:limit])
    return text + (f",… ({len(nums)} ranks)" if len(spans) > limit else "")


def _terminal_width() -> int:
    """The real terminal's width ($COLUMNS first), 100 when output is not a terminal."""
    import shutil

    return max(60, shutil.get_terminal_size((100, 24)).columns)


def terminal(report: Report, *, color: bool = True, width: int | None = None) -> str:
    """A verdict a person reads in a terminal: cause, where, proof, fix."""
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width or _terminal_width(), highlight=False)
    v = report.verdict
    style = {"none": "green", "unknown": "yellow"}.get(v.category, "bold red")
    head = f"[{style}]{escape(v.title or v.cause)}[/]  [dim]({escape(v.cause)} → {escape(v.category)}, confidence {v.confidence:.0%})[/]"
    lines = [head, "", escape(v.summary)]
    ff = v.first_failure
    if v.category not in ("none",) and (ff.rank is not None or ff.node):
        when = f" at {ff.time}" if ff.time else ""
        lines += ["", f"[bold]First failure:[/] {escape(_where(ff.rank, ff.node))}{escape(when)}"]
    console.print(Panel("\n".join(lines), title="logsleuth verdict", expand=True))
    if v.evidence:
        console.print("[bold]Evidence[/]")
        for e in v.evidence:
            who = f" [dim]({escape(_where(e.rank, e.node))})[/]" if (e.rank is not None or e.node) else ""
            console.print(f"  [cyan]{escape(e.file)}:{e.line}[/]{who}")
            console.print(f"    {escape(e.text.strip()[:300])}", soft_wrap=True)
            if e.frame:
                console.print(f"    [dim]raised at[/] {escape(e.frame)}", soft_wrap=True)
    if v.fix:
        console.print("[bold]Fix[/]")
        for i, step in enumerate(v.fix, 1):
            console.print(f"  {i}. {escape(step)}")
    rows = _rank_summary(report)
    if rows:
        table = Table(title="Ranks", show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("status")
        table.add_column("ranks")
        for status, ranks in rows:
            table.add_row(status, ranks)
        console.print(table)
    for line in _cascade_lines(report):
        console.print(escape(line))
    others = report.candidates[1:4]
    if others:
        console.print("[bold]Other candidates[/]  " + ", ".join(f"{escape(c.cause)} ({c.confidence:.0%})" for c in others))
    problems = [(i.file, p) for i in report.inputs for p in i.problems]
    if problems:
        console.print("[bold yellow]Input problems[/]")
        for name, p in problems:
            console.print(f"  {escape(name)}: {escape(p)}")
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/]")
    return buf.getvalue()


def _cascade_lines(report: Report, limit: int = 4) -> list[str]:
    """The stalled collective and the suspect nodes, a line each (compact for thousands of ranks)."""
    out = []
    hang = report.hang
    if hang and (hang.get("hung") or hang.get("timed_out")):
        what = f"{hang['op']} SeqNum {hang['seq']}" if hang.get("op") and hang.get("seq") is not None else "a collective"
        line = f"Stalled: {what} timed out on {len(hang['timed_out'])} rank(s)"
        if hang.get("hung"):
            line += f"; never reached by rank(s) {_ranges(sorted(hang['hung']), 8)}"
        if hang.get("first_fired"):
            line += f"; first watchdog: rank(s) {_ranges(sorted(hang['first_fired']), 4)}"
        out.append(line)
    # on a one-node job the first failure's node says nothing the verdict does not
    nodes = {r.node for r in report.ranks if r.node}
    suspects = [s for s in report.suspect_nodes if len(nodes) > 1 or any(not r.startswith("first failure") for r in s.reasons)]
    for s in suspects[:limit]:
        out.append(f"Suspect node {s.node}: " + "; ".join(s.reasons)[:200])
    if len(suspects) > limit:
        out.append(f"… and {len(suspects) - limit} more suspect node(s)")
    return out


#: Characters that would make Markdown of log text: emphasis, code, links and images, HTML,
#: table cells, strikethrough, entities. Each is backslash-escaped (CommonMark allows it for
#: any ASCII punctuation), so the text reads as written.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&#!])")
#: `@name` pings a GitHub user from a comment or step summary; a zero-width space stops it.
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")


def _md(text: str) -> str:
    """Log-derived text as literal Markdown, on one line."""
    return _MENTION.sub("@\u200b", _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " ")))


def _md_code(text: str) -> str:
    """An inline code span that no backtick in ``text`` can close early."""
    text = text.replace("\n", " ")
    ticks = "`" * (max((len(m) for m in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _md_block(text: str, indent: str = "  ") -> list[str]:
    """A fenced code block no line of ``text`` can close early."""
    fence = "`" * max(3, max((len(m) for m in re.findall("`+", text)), default=0) + 1)
    return [indent + fence, *(indent + line for line in text.splitlines() or [""]), indent + fence]


def markdown(report: Report, *, heading: str = "##") -> str:
    """GitHub-flavoured Markdown (also what CI step summaries get); log text is escaped, never rendered."""
    report = map_text(report, printable)
    v = report.verdict
    ff = v.first_failure
    out = [f"{heading} logsleuth: {_md(v.title or v.cause)}", ""]
    out.append(f"**Cause:** {_md_code(v.cause)} (category {_md_code(v.category)}), confidence {v.confidence:.0%}  ")
    if v.category != "none":
        when = f" at {ff.time}" if ff.time else ""
        out.append(f"**First failure:** {_md(_where(ff.rank, ff.node) + when)}  ")
    out += ["", _md(v.summary), ""]
    if v.evidence:
        out += ["**Evidence**", ""]
        for e in v.evidence:
            who = f" ({_md(_where(e.rank, e.node))})" if (e.rank is not None or e.node) else ""
            out.append(f"- {_md_code(f'{e.file}:{e.line}')}{who}")
            out += _md_block(e.text.strip()[:500])
            if e.frame:
                out.append(f"  raised at {_md_code(e.frame)}")
        out.append("")
    if v.fix:
        # fix steps are authored Markdown (rule and cause files), not log text
        out += ["**Fix**", ""] + [f"{i}. {step}" for i, step in enumerate(v.fix, 1)] + [""]
    rows = _rank_summary(report)
    if rows:
        out += ["| status | ranks |", "|---|---|"] + [f"| {s} | {_md(r)} |" for s, r in rows] + [""]
    cascade = _cascade_lines(report)
    if cascade:
        out += [f"- {_md(line)}" for line in cascade] + [""]
    if len(report.candidates) > 1:
        out += ["<details><summary>Other candidates</summary>", ""]
        out += [f"- {_md_code(c.cause)} ({_md(c.category)}), {c.confidence:.0%}" for c in report.candidates[1:]]
        out += ["", "</details>", ""]
    problems = [(i.file, p) for i in report.inputs for p in i.problems]
    if problems:
        out += ["**Input problems**", ""] + [f"- {_md_code(n)}: {_md(p)}" for n, p in problems] + [""]
    return "\n".join(out)


def _gh_data(text: str) -> str:
    """Escape a workflow-command message: only %, CR and LF (GitHub's rule for data)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    """Escape a workflow-command property value: also ':' and ',', which delimit properties."""
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def _gh_command(level: str, message: str, *, title: str, evidence: Evidence | None, workspace: str | None) -> str:
    props = []
    if evidence is not None and evidence.file != "-":
        path = evidence.file
        if workspace and os.path.isabs(path) and os.path.commonpath([workspace, path]) == os.path.normpath(workspace):
            path = os.path.relpath(path, workspace)  # annotations link to files relative to the checkout
        props += [f"file={_gh_prop(path)}", f"line={evidence.line}"]
    props.append(f"title={_gh_prop(title)}")
    return f"::{level} {','.join(props)}::{_gh_data(message)}"


def github(report: Report, *, workspace: str | None = None) -> str:
    """GitHub Actions workflow commands: the verdict as one annotation on its first evidence line.

    One ``::error`` (``::warning`` for an unknown cause, ``::notice`` for a clean
    run) carries the summary, the proof and the fix; each further evidence line
    gets a ``::notice``, so the run page shows where to look without spending
    GitHub's per-step cap on errors. An annotation does not fail the step:
    ``--fail-on`` does.
    """
    v = report.verdict
    level = {"none": "notice", "unknown": "warning"}.get(v.category, "error")
    ff = v.first_failure
    where = f" on {_where(ff.rank, ff.node)}" if v.category != "none" and (ff.rank is not None or ff.node) else ""
    title = f"logsleuth: {v.title or v.cause}{where}"
    first = v.evidence[0] if v.evidence else None
    body = [v.summary, f"cause: {v.cause} (category {v.category}), confidence {v.confidence:.0%}"]
    if first is not None:
        body += ["", first.text.strip()[:500]] + ([f"raised at {first.frame}"] if first.frame else [])
    if v.fix:
        body += ["", "Fix:"] + [f"{i}. {step}" for i, step in enumerate(v.fix, 1)]
    lines = [_gh_command(level, "\n".join(body), title=title, evidence=first, workspace=workspace)]
    for e in v.evidence[1:]:
        who = f" ({_where(e.rank, e.node)})" if (e.rank is not None or e.node) else ""
        lines.append(_gh_command("notice", e.text.strip()[:500], title=f"logsleuth evidence{who}", evidence=e, workspace=workspace))
    return "\n".join(lines) + "\n"


def step_summary(report: Report) -> str:
    """The Markdown appended to $GITHUB_STEP_SUMMARY: headings start at ### as GitHub suggests."""
    return markdown(report, heading="###")
