"""Log text and file names are shown, never obeyed (issue 18.7): no escape sequence reaches
the terminal, and no Markdown or HTML in a log renders in a PR comment or step summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import logsleuth
from logsleuth.cli import app
from logsleuth.report.render import render

runner = CliRunner()

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m back\x08\x08space \u202eevil\u202c done\r"


def _job(tmp_path: Path, message: str, name: str = "rank0.log") -> Path:
    path = tmp_path / name
    path.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/home/user/train.py", line 7, in <module>\n'
        f"[rank0]: ValueError: {message}\n"
    )
    return path


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "github"])
def test_control_characters_from_a_log_never_reach_a_reader(tmp_path: Path, fmt: str) -> None:
    report = logsleuth.analyze(_job(tmp_path, HOSTILE, name="rank0\x1b[8m.log"))
    shown = render(report, fmt, color=False, width=120)
    assert not any(c in shown for c in "\x1b\x07\x08\r\u202e\u202c")
    assert "back" in shown and "evil" in shown  # the text itself stays readable


def test_json_keeps_the_log_text_exactly(tmp_path: Path) -> None:
    report = logsleuth.analyze(_job(tmp_path, "bad \u202evalue\u202c"))
    assert "bad \u202evalue\u202c" in json.loads(render(report, "json"))["verdict"]["summary"]


def test_markdown_in_a_log_is_escaped_not_rendered(tmp_path: Path) -> None:
    message = "<img src=x onerror=alert(1)> see [here](https://evil.invalid) ![t](https://evil.invalid/p.png) @octocat **bold** | cell"
    report = logsleuth.analyze(_job(tmp_path, message))
    md = render(report, "markdown")
    summary = next(line for line in md.splitlines() if "onerror" in line)
    for special in "<[]*|!":  # each one escaped, so no tag, link, image, emphasis or cell can form
        assert re.search(rf"(?<!\\){re.escape(special)}", summary) is None, special
    assert "@\u200boctocat" in summary  # nobody is pinged (code blocks, where mentions do not work, keep it)


def test_backticks_in_evidence_cannot_close_its_code_block(tmp_path: Path) -> None:
    report = logsleuth.analyze(_job(tmp_path, "```\n# Injected heading"))
    md = render(report, "markdown").splitlines()
    start = next(i for i, line in enumerate(md) if line.strip().startswith("````"))
    fence = md[start].strip()
    end = next(i for i in range(start + 1, len(md)) if md[i].strip() == fence)
    assert any("```" in line for line in md[start + 1 : end])  # the log's backticks stay inside


def test_every_github_line_is_one_workflow_command(tmp_path: Path) -> None:
    report = logsleuth.analyze(_job(tmp_path, "x\n::error::forged annotation\r\n::add-mask::y"))
    out = render(report, "github")
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in out.splitlines())


def test_events_printed_to_the_terminal_lose_their_control_characters(tmp_path: Path) -> None:
    result = runner.invoke(app, ["events", str(_job(tmp_path, HOSTILE))])
    assert result.exit_code == 0 and "\x1b" not in result.stdout and "\x08" not in result.stdout
