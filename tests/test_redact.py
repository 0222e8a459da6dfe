"""Secrets never leave logsleuth: not in any report format, annotation, summary, export or store."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import analyze
from logsleuth.cli import app
from logsleuth.redact import MASK, redact, redact_all, redact_expr
from logsleuth.report.model import CandidateOut, FirstFailure, Report, Verdict

from .conftest import ROOT

runner = CliRunner()
#: A real torchrun run whose rank 1 names a URL with its (fake) Hugging Face token on
#: the line that proves the failure; rank 0 printed the token in its config too.
SECRET_JOB = ROOT / "tests" / "fixtures" / "torchrun-secret" / "train.log"
TOKEN = "hf_FakeTokenForTestsOnly0123456789abcd"

CASES = [
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "HF_TOKEN=[REDACTED]"),
    ("export WANDB_API_KEY='0123456789abcdef0123456789abcdef01234567'", "export WANDB_API_KEY='[REDACTED]'"),
    ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=[REDACTED]"),
    ("key AKIAIOSFODNN7EXAMPLE in use", "key [REDACTED] in use"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[REDACTED]"),
    ("Authorization: Bearer abcdefghijklmnop.qrstuv", "Authorization: Bearer [REDACTED]"),
    ("sent bearer eyJhbGciOiJIUzI1NiJ9abc to the hub", "sent bearer [REDACTED] to the hub"),
    ("git clone https://alice:s3cr3t-pass@github.com/org/repo.git", "git clone https://alice:[REDACTED]@github.com/org/repo.git"),
    ("python train.py --password hunter2 --lr 0.1", "python train.py --password [REDACTED] --lr 0.1"),
    ("python train.py --hf-token=abc123 --db_password xyz", "python train.py --hf-token=[REDACTED] --db_password [REDACTED]"),
    ('{"api_key": "abcd1234", "user": "bob"}', '{"api_key": "[REDACTED]", "user": "bob"}'),
    ("{'hf_token': 'xyz', 'clientSecret': 'qq'}", "{'hf_token': '[REDACTED]', 'clientSecret': '[REDACTED]'}"),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", "wandb login [REDACTED]"),
    ("pushed with ghp_abcdefghijklmnopqrstuvwxyz0123456789AB", "pushed with [REDACTED]"),
]
#: Lines that look a little like secrets and must stay as they are.
KEPT = [
    "TOKENIZERS_PARALLELISM=false",
    "generate(max_tokens=512, num_tokens: 12)",
    "python train.py --tokenizer gpt2 --token-file /run/secrets/hf --max-tokens 4096",
    "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    "AuthType=auth/munge",
]


@pytest.mark.parametrize(("text", "want"), CASES, ids=[c[0][:30] for c in CASES])
def test_secret_is_masked_and_the_rest_of_the_line_kept(text: str, want: str) -> None:
    assert redact(text) == want


@pytest.mark.parametrize("text", KEPT)
def test_lookalikes_are_not_masked(text: str) -> None:
    assert redact(text) == text


def test_polars_and_python_engines_agree_and_redacting_twice_changes_nothing() -> None:
    texts = [t for t, _ in CASES] + KEPT
    vectorised = pl.DataFrame({"t": texts}).select(redact_expr(pl.col("t"))).to_series().to_list()
    assert vectorised == [redact(t) for t in texts]
    assert [redact(v) for v in vectorised] == vectorised


def test_redact_all_reaches_notes_and_nested_fields() -> None:
    verdict = Verdict("unknown", "unknown", 0.0, FirstFailure(), [], f"failed with token={TOKEN}", [f"rotate {TOKEN}"])
    report = Report(verdict, [CandidateOut("unknown", "unknown", 0.0)], [], notes=[f"internal error: bad line HF_TOKEN={TOKEN}"])
    clean = redact_all(report)
    assert TOKEN not in json.dumps(clean.to_dict()) and clean.notes == ["internal error: bad line HF_TOKEN=[REDACTED]"]
    assert TOKEN in report.notes[0]  # the original is left alone


def test_the_fixture_really_holds_the_secret_on_its_evidence_line() -> None:
    report = analyze([SECRET_JOB], redact=False)
    assert TOKEN in report.verdict.evidence[0].text


@pytest.mark.parametrize("fmt", ["terminal", "json", "markdown", "github"])
def test_every_report_format_masks_the_secret_but_keeps_the_line(fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = runner.invoke(app, ["analyze", str(SECRET_JOB), "--format", fmt, "--no-color"]).stdout
    assert TOKEN not in out and MASK in out
    assert "shard-1.tar?access_token=[REDACTED] failed its checksum" in out
    if fmt == "github":
        assert TOKEN not in summary.read_text() and MASK in summary.read_text()
    unmasked = runner.invoke(app, ["analyze", str(SECRET_JOB), "--format", fmt, "--no-redact", "--no-color"]).stdout
    assert TOKEN in unmasked


def test_report_written_with_output_is_masked(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    assert runner.invoke(app, ["analyze", str(SECRET_JOB), "-f", "markdown", "-o", str(out)]).exit_code == 0
    assert TOKEN not in out.read_text() and MASK in out.read_text()


@pytest.mark.parametrize("suffix", [None, ".jsonl", ".json", ".csv", ".parquet"])
def test_events_output_and_exports_are_masked(suffix: str | None, tmp_path: Path) -> None:
    if suffix is None:
        text = runner.invoke(app, ["events", str(SECRET_JOB), "--limit", "500"], env={"COLUMNS": "1000"}).stdout
    else:
        path = tmp_path / f"events{suffix}"
        assert runner.invoke(app, ["events", str(SECRET_JOB), "-o", str(path)]).exit_code == 0
        text = pl.read_parquet(path).write_csv() if suffix == ".parquet" else path.read_text()
    assert TOKEN not in text
    assert text.count(MASK) >= 2  # the config line and the evidence line


def test_history_store_is_masked(tmp_path: Path) -> None:
    assert runner.invoke(app, ["analyze", str(SECRET_JOB), "--store", str(tmp_path / "store")]).exit_code == 0
    stored = pl.read_parquet(next((tmp_path / "store").glob("*.parquet")))
    assert TOKEN not in str(stored.to_dicts()) and MASK in stored.item(0, "summary")
