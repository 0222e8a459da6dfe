"""The terminal view of a reproduction: a short table, then the verdict when it failed."""

from __future__ import annotations

import io

from .run import Result


def _fmt(value: float | None, unit: str, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f} {unit}"


def terminal(result: Result, *, color: bool = True, width: int | None = None) -> str:
    """What ran, pass or fail, wrong elements, time and bandwidth; the verdict and its proof on failure."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width or 100, highlight=False)
    p = result.plan
    used = f" (used: {result.backend})" if result.backend and result.backend != p.backend else ""
    console.print(f"[bold]logsleuth repro[/]: {escape(p.describe())}{escape(used)}")
    found = p.found
    if found and found.suspect:
        timeout = f", job timeout {found.job_timeout_ms / 1000:g}s" if found.job_timeout_ms else ""
        console.print(f"[dim]suspect collective: {escape(found.suspect)}{timeout}[/]")
    if found and found.interfaces:
        console.print(f"[dim]interfaces the job used: {escape(', '.join(found.interfaces))}[/]")
    status = "[green]PASS[/]" if result.ok else "[bold red]FAIL[/]" + (" (hard timeout)" if result.timed_out else "")
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("result", status)
    table.add_row("wrong", "-" if result.wrong is None else f"{result.wrong:,}")
    table.add_row("time", _fmt(result.time_us, "us / iteration", 1))
    table.add_row("algbw", _fmt(result.algbw_gbps, "GB/s", 3))
    table.add_row("busbw", _fmt(result.busbw_gbps, "GB/s", 3))
    v = result.verdict
    table.add_row("verdict", f"{escape(v.cause)} ({escape(v.category)}): {escape(v.summary)}")
    table.add_row("ranks", ", ".join(f"{r.rank} {r.status}" for r in result.ranks))
    console.print(table)
    if not result.ok:
        for e in v.evidence[:3]:
            console.print(f"  [cyan]{escape(e.file)}:{e.line}[/]  {escape(e.text.strip())}")
        if v.fix:
            console.print(f"[bold]Fix:[/] {escape(v.fix[0])}")
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/]")
    if result.log:
        console.print(f"[dim]output of the ranks: {escape(result.log)}[/]")
    return buf.getvalue()
