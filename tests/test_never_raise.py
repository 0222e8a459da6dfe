"""Never raise, never lie with exit codes (issue 18.6): the library returns a report for any
argument, and the CLI ends with a documented status and one line of explanation, never a
traceback, and never 1 (which scripts read as "--fail-on matched")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import logsleuth
from logsleuth.cli import EXIT_INTERNAL, EXIT_USAGE, app

runner = CliRunner()
CRASH = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nRuntimeError: boom\n'


def test_a_tree_deeper_than_the_recursion_limit_is_read(tmp_path: Path) -> None:
    where = tmp_path
    for _ in range(sys.getrecursionlimit() // 4 + 50):  # deep enough to break a recursive walk of path parts
        where = where / "d"
    where.mkdir(parents=True)
    (where / "rank0.log").write_text(CRASH)
    report = logsleuth.analyze(tmp_path)
    assert [i.lines for i in report.inputs] == [3]
    assert not any(n.startswith("internal error") for n in report.notes)


def test_a_rule_file_of_the_wrong_shape_is_named_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(CRASH)
    rules = tmp_path / "mine.toml"
    rules.write_text('cause = "user_code_error"\npatterns = ["boom"]\n')
    report = logsleuth.analyze(tmp_path / "a.log", rules=[rules])
    assert report.notes[0].startswith("invalid rules: ") and "mine.toml" in report.notes[0]
    result = runner.invoke(app, ["analyze", str(tmp_path / "a.log"), "--rules", str(rules)])
    assert result.exit_code == EXIT_USAGE and "[[rule]]" in result.stderr and "Traceback" not in result.output


def test_rules_that_are_not_an_array_of_tables_are_a_usage_error(tmp_path: Path) -> None:
    rules = tmp_path / "mine.toml"
    rules.write_text('rule = "SIG001"\n')
    result = runner.invoke(app, ["rules", "check", str(rules)])
    assert result.exit_code != 0 and "[[rule]]" in result.output + result.stderr


class _Panic(BaseException):
    """What pyo3 raises when Rust code panics: a BaseException, not an Exception."""


def test_a_panic_inside_the_analysis_still_gives_a_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logsleuth import reason

    def panics(*args: object, **kwargs: object) -> None:
        raise _Panic("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(reason, "reason", panics)
    (tmp_path / "a.log").write_text(CRASH)
    report = logsleuth.analyze(tmp_path / "a.log")
    assert report.verdict.cause == "unknown" and "_Panic" in report.notes[0]


def _cli_crash(tmp_path: Path, raise_line: str) -> subprocess.CompletedProcess[str]:
    """Run the console entry point with a command broken from inside, as a user would meet it."""
    (tmp_path / "a.log").write_text(CRASH)
    code = (
        "import sys, logsleuth.cli as cli, logsleuth.api as api\n"
        "class Panic(BaseException): pass\n"
        "def broken(*a, **k):\n"
        f"    {raise_line}\n"
        "api.analyze_jobs = broken\n"
        f"sys.argv = ['logsleuth', 'analyze', {str(tmp_path / 'a.log')!r}]\n"
        "cli.main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOGSLEUTH_DEBUG"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("raise_line", ["raise ZeroDivisionError('a bug')", "raise Panic('rust panicked')"])
def test_a_crash_of_the_cli_exits_4_with_one_line_and_no_traceback(tmp_path: Path, raise_line: str) -> None:
    done = _cli_crash(tmp_path, raise_line)
    assert done.returncode == EXIT_INTERNAL
    assert "Traceback" not in done.stderr and done.stderr.startswith("logsleuth: internal error at ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_store_on_a_full_disk_is_a_usage_error_after_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(self: pl.DataFrame, *args: object, **kwargs: object) -> None:
        raise pl.exceptions.ComputeError("parquet: underlying IO error: No space left on device (os error 28)")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    (tmp_path / "a.log").write_text(CRASH)
    result = runner.invoke(app, ["analyze", str(tmp_path / "a.log"), "--store", str(tmp_path / "store")])
    assert result.exit_code == EXIT_USAGE
    assert "No space left on device" in result.stderr and "Traceback" not in result.output
    assert "boom" in result.stdout  # the verdict was printed before the store failed
