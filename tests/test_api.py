"""logsleuth.analyze(): the JSON contract, bad inputs, and never raising."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import logsleuth
from logsleuth import pipeline
from logsleuth.taxonomy import TAXONOMY

from .data_torchrun import TORCHRUN_VALUEERROR


def test_report_json_has_every_contract_field(write) -> None:
    report = logsleuth.analyze([write("job.log", TORCHRUN_VALUEERROR)])
    data = json.loads(report.to_json())
    assert data["schema_version"] == "1"
    v = data["verdict"]
    assert set(v) >= {"cause", "category", "confidence", "first_failure", "evidence", "summary", "fix"}
    assert set(v["first_failure"]) == {"rank", "node", "time"}
    assert all(set(e) >= {"file", "line", "rank", "node", "text"} for e in v["evidence"])
    assert v["category"] in TAXONOMY and 0.0 <= v["confidence"] <= 1.0
    assert data["candidates"][0]["cause"] == v["cause"] and data["candidates"][0]["category"] == v["category"]
    assert all(set(i) == {"file", "bytes", "lines", "problems"} for i in data["inputs"])


def test_cascade_names_the_rank_that_raised_not_its_victims(write) -> None:
    path = write("job.log", TORCHRUN_VALUEERROR)
    v = logsleuth.analyze([path]).verdict
    assert (v.category, v.first_failure.rank, v.first_failure.node) == ("user_code_error", 1, "node01")
    assert v.evidence[0].line == 12 and v.evidence[0].file == str(path)
    assert v.first_failure.time == "2026-11-22T03:59:47"


def test_evidence_file_is_the_path_as_given(write, monkeypatch) -> None:
    path = write("logs/job.log", TORCHRUN_VALUEERROR)
    monkeypatch.chdir(path.parent.parent)
    report = logsleuth.analyze(["logs/job.log"])
    assert report.verdict.evidence[0].file == "logs/job.log"
    assert report.inputs[0].file == "logs/job.log"


def test_clean_run_is_none_and_unrecognised_failure_is_unknown(write) -> None:
    clean = logsleuth.analyze([write("ok.log", "step 1 loss 0.5\nstep 2 loss 0.4\ntraining finished\n")])
    assert clean.verdict.category == "none"
    odd = logsleuth.analyze(
        [write("odd.log", 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nzorblax.Frobnicated: quux\n')]
    )
    assert odd.verdict.category == "unknown" and odd.verdict.evidence[0].line == 3


def test_unreadable_inputs_are_listed_and_the_rest_analysed(write) -> None:
    good = write("job.log", TORCHRUN_VALUEERROR)
    report = logsleuth.analyze([str(good), "/nonexistent/x.log", str(write("empty.log", b""))])
    probs = {Path(i.file).name: i.problems for i in report.inputs}
    assert probs["x.log"] == ["no such file or directory"] and probs["empty.log"] == ["empty file (0 bytes)"]
    assert report.verdict.category == "user_code_error"


def test_analyze_never_raises(monkeypatch, write) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(pipeline.match, "match", boom)
    report = logsleuth.analyze([write("job.log", TORCHRUN_VALUEERROR)])
    assert report.verdict.category == "unknown"
    assert report.notes[0].startswith("internal error") and "simulated bug" in report.notes[0]
    assert report.inputs[0].lines > 0
    assert report.candidates[0].cause == "unknown"


def test_secrets_never_reach_the_report(write) -> None:
    log = "export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCD\n" + TORCHRUN_VALUEERROR.replace(
        "ValueError: bad sample 17 on purpose", "ValueError: login failed for https://bob:hunter2secret@hub.example/x"
    )
    text = logsleuth.analyze([write("job.log", log)]).to_json()
    assert "hunter2secret" not in text and "hf_abcdefghij" not in text
    assert "https://bob:[REDACTED]@hub.example/x" in text


def test_analysis_path_never_imports_torch(write) -> None:
    path = write("job.log", TORCHRUN_VALUEERROR)
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any 'import torch' now fails
        "import logsleuth\n"
        f"r = logsleuth.analyze([{str(path)!r}])\n"
        "assert r.verdict.category == 'user_code_error', r.to_json()\n"
        "assert not r.notes, r.notes\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("budget", [0.0, 5.0])
def test_budget_always_returns_a_report(write, budget: float) -> None:
    report = logsleuth.analyze([write("job.log", TORCHRUN_VALUEERROR)], budget_s=budget)
    assert report.verdict.category in TAXONOMY
