"""The CLI: formats, exit codes, events export, rules and explain; never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth.cli import EXIT_FAIL_ON, EXIT_INTERNAL, EXIT_NO_INPUT, EXIT_USAGE, app
from logsleuth.taxonomy import NON_CAUSES, TAXONOMY

from .data_torchrun import TORCHRUN_VALUEERROR

runner = CliRunner()


@pytest.fixture
def job(write) -> Path:
    return write("job.log", TORCHRUN_VALUEERROR)


def test_json_format_prints_exactly_one_json_object(job: Path) -> None:
    result = runner.invoke(app, ["analyze", str(job), "--format", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["verdict"]["category"] == "user_code_error"


def test_terminal_and_markdown_name_cause_rank_evidence_and_fix(job: Path) -> None:
    term = runner.invoke(app, ["analyze", str(job), "--no-color"]).stdout
    assert "Exception in the training script" in term and "rank 1" in term and f"{job}:12" in term and "Fix" in term
    md = runner.invoke(app, ["analyze", str(job), "--format", "markdown"]).stdout
    assert md.startswith("## logsleuth: Exception in the training script") and f"`{job}:12`" in md


def test_output_file(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(job), "-f", "json", "-o", str(out)])
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text())["verdict"]["first_failure"]["rank"] == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--fail-on", "user_code_error"], EXIT_FAIL_ON),
        (["--fail-on", "any"], EXIT_FAIL_ON),
        (["--fail-on", "host_oom,disk_full"], 0),
        (["--format", "yaml"], EXIT_USAGE),
    ],
)
def test_exit_codes(job: Path, args: list[str], code: int) -> None:
    assert runner.invoke(app, ["analyze", str(job), *args]).exit_code == code


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda w: w("b.out", bytes(range(256)) * 64), "binary file"),
        (lambda w: w("e.out", b""), "empty file"),
        (lambda w: w("d/readme.md", "x").parent, "directory contains no log files"),
        (lambda w: Path("/nonexistent/slurm-1.out"), "no such file or directory"),
    ],
)
def test_no_readable_input_exits_3_with_a_clear_message_and_no_traceback(write, make, message: str) -> None:
    path = make(write)
    proc = subprocess.run([sys.executable, "-m", "logsleuth", "analyze", str(path)], capture_output=True, text=True)
    assert proc.returncode == EXIT_NO_INPUT
    assert message in proc.stderr and "no readable input" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_stdin(job: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "logsleuth", "analyze", "-", "-f", "json"], input=job.read_bytes(), capture_output=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["verdict"]["evidence"][0]["file"] == "-"


def test_events_filters_and_exports(job: Path, tmp_path: Path) -> None:
    shown = runner.invoke(app, ["events", str(job), "--kind", "child_failed", "--rank", "1"])
    assert shown.exit_code == 0 and shown.stdout.count("child_failed") == 1
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"ev{suffix}"
        assert runner.invoke(app, ["events", str(job), "-o", str(out)]).exit_code == 0
        table = {".parquet": pl.read_parquet, ".csv": pl.read_csv, ".jsonl": pl.read_ndjson}[suffix](out)
        assert {"file", "line", "rank", "node", "time", "source", "level", "kind", "message"} <= set(table.columns)
        assert table.height > 5
    assert runner.invoke(app, ["events", str(job), "-o", str(tmp_path / "x.xlsx")]).exit_code == EXIT_USAGE


def test_explain_works_for_every_taxonomy_id_and_for_rule_ids() -> None:
    for cid in set(TAXONOMY) - NON_CAUSES:
        result = runner.invoke(app, ["explain", cid])
        assert result.exit_code == 0 and "Fix:" in result.stdout, cid
    rule = runner.invoke(app, ["explain", "NET001"])
    assert rule.exit_code == 0 and "port_in_use" in rule.stdout
    assert runner.invoke(app, ["explain", "no_such_cause"]).exit_code == EXIT_USAGE


def test_rules_list_and_check() -> None:
    listed = runner.invoke(app, ["rules", "list"])
    assert listed.exit_code == 0 and "NET001" in listed.stdout
    checked = runner.invoke(app, ["rules", "check"])
    assert checked.exit_code == 0 and checked.stdout.startswith("ok:")


def test_rules_check_reports_file_and_line_and_fails(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text(
        '[[rule]]\nid = "ZZZ009"\nname = "bad"\ncause = "disk_full"\nkeywords = ["quota"]\npatterns = ["quota exceeded"]\nmatch = ["nothing here about it"]\n'
    )
    result = runner.invoke(app, ["rules", "check", str(tmp_path)])
    assert result.exit_code != 0 and f"{tmp_path / 'r.toml'}:2: rule ZZZ009" in result.stdout


def test_invalid_user_rules_are_a_usage_error_not_a_traceback(job: Path, tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text("[[rule]\n")
    result = runner.invoke(app, ["analyze", str(job), "--rules", str(tmp_path)])
    assert result.exit_code == EXIT_USAGE and "r.toml" in result.stderr


def test_exit_0_whatever_the_verdict_without_fail_on(job: Path, write) -> None:
    assert runner.invoke(app, ["analyze", str(job)]).exit_code == 0
    assert runner.invoke(app, ["analyze", str(write("ok.log", "step 1 loss 0.5\ntraining finished\n"))]).exit_code == 0


def test_fail_on_any_ignores_a_clean_run(write) -> None:
    clean = write("ok.log", "step 1 loss 0.5\ntraining finished\n")
    assert runner.invoke(app, ["analyze", str(clean), "--fail-on", "any"]).exit_code == 0


def test_exit_4_when_the_analysis_itself_fails_and_a_report_is_still_printed(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logsleuth import reason

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug in logsleuth")

    monkeypatch.setattr(reason, "reason", broken)
    result = runner.invoke(app, ["analyze", str(job), "--format", "json", "--fail-on", "any"])
    assert result.exit_code == EXIT_INTERNAL
    assert json.loads(result.stdout)["verdict"]["category"] == "unknown"
    assert "internal error" in result.stderr and "ZeroDivisionError" in result.stderr


def test_an_output_that_cannot_be_written_is_a_usage_error(job: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(job), "-o", str(tmp_path / "no" / "such" / "report.json")])
    assert result.exit_code == EXIT_USAGE and "--output" in result.stderr and "Traceback" not in result.output


def test_a_store_that_cannot_be_a_folder_is_a_usage_error(job: Path, write) -> None:
    not_a_folder = write("store", "a file")
    result = runner.invoke(app, ["analyze", str(job), "--store", str(not_a_folder)])
    assert result.exit_code == EXIT_USAGE and "--store" in result.stderr and result.stdout == ""


def test_history_exit_codes(tmp_path: Path) -> None:
    assert runner.invoke(app, ["history", str(tmp_path / "missing")]).exit_code == EXIT_NO_INPUT
    assert runner.invoke(app, ["history", str(tmp_path), "--since", "last tuesday"]).exit_code == EXIT_USAGE
    assert runner.invoke(app, ["history", str(tmp_path), "--format", "yaml"]).exit_code == EXIT_USAGE
    assert runner.invoke(app, ["history", str(tmp_path)]).exit_code == 0  # an empty store is not an error


def test_timings_go_to_stderr_and_leave_the_report_alone(job: Path) -> None:
    result = runner.invoke(app, ["analyze", str(job), "--format", "json", "--timings"])
    assert result.exit_code == 0
    json.loads(result.stdout)
    line = next(x for x in result.stderr.splitlines() if x.startswith("logsleuth: timings "))
    stages = json.loads(line.removeprefix("logsleuth: timings "))
    for name in ("ingest", "read", "prefilter", "decode", "parse", "match", "reason", "classify", "report"):
        assert stages[name]["s"] >= 0 and stages[name]["cpu_s"] >= 0
