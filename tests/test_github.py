"""--format github: workflow annotations with GitHub's escaping, and the step summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cli import app
from logsleuth.report.model import CandidateOut, Evidence, FirstFailure, Report, Verdict
from logsleuth.report.render import github

from .conftest import ROOT

runner = CliRunner()
RAISE_JOB = ROOT / "tests" / "fixtures" / "slurm-raise" / "slurm-23.out"


def _report(category: str = "user_code_error", evidence: list[Evidence] | None = None) -> Report:
    verdict = Verdict(
        cause=category,
        category=category,
        confidence=0.5,
        first_failure=FirstFailure(rank=1, node="gpu07"),
        evidence=evidence or [],
        summary="Rank 1 failed: 100% sure.\nSecond line",
        fix=["Fix it, then retry: now"],
        title="Exception",
    )
    return Report(verdict, [CandidateOut(category, category, 0.5)], [])


def test_property_values_escape_colon_comma_percent_and_newlines_the_message_only_percent_and_newlines() -> None:
    ev = [Evidence(file="logs/a,b:c%d.log", line=7, rank=1, node="gpu07", text="x: 50%, done\r\nnext")]
    line = github(_report(evidence=ev)).splitlines()[0]
    props, message = line[len("::error ") :].split("::", 1)
    assert props == "file=logs/a%2Cb%3Ac%25d.log,line=7,title=logsleuth%3A Exception on rank 1%2C node gpu07"
    assert message.startswith("Rank 1 failed: 100%25 sure.%0ASecond line%0A")
    assert "x: 50%25, done%0D%0Anext" in message and "Fix it, then retry: now" in message
    assert "\n" not in line and "\r" not in line


def test_one_error_on_the_first_evidence_line_and_a_notice_on_each_other() -> None:
    ev = [Evidence("a.log", 3, 1, "n1", "first"), Evidence("b.log", 9, 2, None, "second"), Evidence("-", 4, None, None, "stdin")]
    lines = github(_report(evidence=ev)).splitlines()
    assert [ln.split(" ", 1)[0] for ln in lines] == ["::error", "::notice", "::notice"]
    assert lines[1] == "::notice file=b.log,line=9,title=logsleuth evidence (rank 2)::second"
    assert lines[2] == "::notice title=logsleuth evidence::stdin"  # stdin has no file to point at


@pytest.mark.parametrize(("category", "level"), [("none", "::notice "), ("unknown", "::warning "), ("cuda_oom", "::error ")])
def test_level_follows_the_verdict(category: str, level: str) -> None:
    out = github(_report(category))
    assert out.startswith(level) and out.count("\n") == 1
    assert "file=" not in out  # no evidence: an annotation on the run, not on a file


def test_paths_inside_the_workspace_become_relative(tmp_path: Path) -> None:
    ev = [Evidence(str(tmp_path / "logs" / "rank0.log"), 5, 0, None, "boom")]
    assert github(_report(evidence=ev), workspace=str(tmp_path)).startswith("::error file=logs/rank0.log,line=5,")
    assert github(_report(evidence=ev), workspace="/elsewhere").startswith(f"::error file={tmp_path}/logs/rank0.log,")


def test_cli_github_prints_annotations_and_appends_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(ROOT))
    for _ in range(2):
        result = runner.invoke(app, ["analyze", str(RAISE_JOB), "--format", "github"])
        assert result.exit_code == 0
    assert result.stdout.startswith("::error file=tests/fixtures/slurm-raise/slurm-23.out,line=9,")
    text = summary.read_text()
    assert text.startswith("earlier step\n### logsleuth: Exception in the training script")
    assert text.count("### logsleuth:") == 2 and "`user_code_error`" in text


def test_other_formats_leave_the_step_summary_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert runner.invoke(app, ["analyze", str(RAISE_JOB), "--format", "json"]).exit_code == 0
    assert not summary.exists()


def test_fail_on_fails_the_step_after_annotating(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(RAISE_JOB), "--format", "github", "--fail-on", "any"])
    assert result.exit_code == 1 and result.stdout.startswith("::error ")


def test_an_unwritable_step_summary_is_reported_and_the_annotations_still_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "no" / "such" / "summary.md"))
    result = runner.invoke(app, ["analyze", str(RAISE_JOB), "--format", "github"])
    assert result.exit_code == 0 and result.stdout.startswith("::error ")
    assert "cannot append to $GITHUB_STEP_SUMMARY" in result.stderr
