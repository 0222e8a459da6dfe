"""Jobs are units (issue 15.2): a folder of several SLURM jobs' logs gives one report per job."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import logsleuth
from logsleuth.cli import app
from logsleuth.jobs import job_of_name

_CANCELLED = (
    "0: step 50 loss 0.1285 (0.206s/step)\n"
    "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
    "0: slurmstepd-node01: error: *** STEP 91.0 ON node01 CANCELLED AT 2026-11-22T04:53:08 ***\n"
    "slurmstepd-node01: error: *** JOB 91 ON node01 CANCELLED AT 2026-11-22T04:53:08 ***\n"
)
_KEYERROR = (
    "1: [rank1]: Traceback (most recent call last):\n"
    '1: [rank1]:   File "/home/user/train.py", line 3, in <module>\n'
    "1: [rank1]: KeyError: 'labels'\n"
    "srun: error: node02: task 1: Exited with exit code 1\n"
)


def _two_jobs(tmp_path: Path) -> Path:
    (tmp_path / "slurm-91.out").write_text(_CANCELLED)
    (tmp_path / "slurm-93.out").write_text(_KEYERROR)
    return tmp_path


def test_sbatch_output_names_carry_their_job_id() -> None:
    assert job_of_name("logs/slurm-1234.out") == "1234"
    assert job_of_name("slurm-77_3.err") == "77"
    assert job_of_name("train-job-4410.log.gz") == "4410"
    assert job_of_name("rank0.log") is None
    assert job_of_name("train_2024.log") is None  # a number without a SLURM-looking name


def test_a_folder_of_two_jobs_gives_one_report_per_job(tmp_path: Path) -> None:
    reports = logsleuth.analyze_jobs(_two_jobs(tmp_path))
    assert [(r.job, r.verdict.category) for r in reports] == [("91", "slurm_cancelled"), ("93", "user_code_error")]
    assert [len(r.inputs) for r in reports] == [1, 1]


def test_a_job_named_only_in_its_lines_is_told_apart(tmp_path: Path) -> None:
    (tmp_path / "earlier.out").write_text(_CANCELLED)
    (tmp_path / "slurm-93.out").write_text(_KEYERROR)
    assert [r.job for r in logsleuth.analyze_jobs(tmp_path)] == ["91", "93"]


def test_analyze_keeps_one_report_and_says_the_inputs_hold_several_jobs(tmp_path: Path) -> None:
    report = logsleuth.analyze(_two_jobs(tmp_path))
    assert report.job is None
    assert any("2 jobs (job 91 and job 93)" in n for n in report.notes)


def test_one_job_gives_one_report_with_its_id(tmp_path: Path) -> None:
    (tmp_path / "slurm-93.out").write_text(_KEYERROR)
    (tmp_path / "rank1.log").write_text("step 1 loss 0.3\n")
    [report] = logsleuth.analyze_jobs(tmp_path)
    assert report.job == "93" and len(report.inputs) == 2


def test_cli_prints_a_json_list_and_a_summary_line_and_merge_forces_one(tmp_path: Path) -> None:
    folder = str(_two_jobs(tmp_path))
    runner = CliRunner()
    listed = json.loads(runner.invoke(app, ["analyze", folder, "-f", "json"]).stdout)
    assert [(r["job"], r["verdict"]["category"]) for r in listed] == [("91", "slurm_cancelled"), ("93", "user_code_error")]
    merged = json.loads(runner.invoke(app, ["analyze", folder, "-f", "json", "--merge"]).stdout)
    assert isinstance(merged, dict) and merged["job"] is None
    text = runner.invoke(app, ["analyze", folder, "--no-color"]).stdout
    assert "2 jobs: job 91 slurm_cancelled; job 93 user_code_error" in text


def test_fail_on_fails_when_any_job_matches(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", str(_two_jobs(tmp_path)), "--fail-on", "user_code_error", "-f", "json"])
    assert result.exit_code == 1
