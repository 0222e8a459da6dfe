"""First contact: a batch is scored as `analyze` answers it, once, and the ledger keeps the misses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cli import app
from logsleuth.learn import firstcontact as fc

_OOM = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 132.00 MiB. GPU 3 has a total capacity of 79.10 GiB\n"
_CLEAN = "epoch 1 | step 10 | loss 1.9\nepoch 1 | step 20 | loss 1.7\ntraining done\n"


def _case(batch: Path, name: str, label: str, log: str, rank: int | None = None) -> None:
    folder = batch / name
    folder.mkdir(parents=True)
    (folder / "train.log").write_text(log)
    ff = f"\n[first_failure]\nrank = {rank}\n" if rank is not None else ""
    (folder / "case.toml").write_text(
        f'label = "{label}"\ncategory = "{label}"\ngroup = "public:x/y#{name}"\nlog_supports = true\n{ff}\n'
        f'[provenance]\nkind = "public"\nbatch = "fc-test"\n'
    )


@pytest.mark.parametrize(
    ("label", "predicted", "top3", "outcome"),
    [
        ("cuda_oom", "cuda_oom", ["cuda_oom"], "right"),
        ("cuda_oom", "none", ["none"], "false_all_clear"),
        ("none", "user_code_error", ["user_code_error"], "false_alarm"),
        ("cuda_oom", "cuda_error", ["cuda_error", "cuda_oom"], "top3"),
        ("cuda_oom", "unknown", ["unknown"], "unknown"),
        ("cuda_oom", "disk_full", ["disk_full"], "wrong"),
    ],
)
def test_an_answer_is_classed_worst_first(label: str, predicted: str, top3: list[str], outcome: str) -> None:
    assert fc.classify_outcome(label, predicted, top3) == outcome


def test_a_batch_is_scored_once_and_its_misses_reach_the_ledger(tmp_path: Path) -> None:
    batch = tmp_path / "fc-test"
    _case(batch, "cuda_oom--public-a", "cuda_oom", _OOM, rank=3)
    _case(batch, "cuda_oom--public-b", "cuda_oom", _CLEAN)  # the log shows no failure: a false all-clear
    ledger = tmp_path / "ledger.jsonl"
    result = CliRunner().invoke(app, ["eval", "--first-contact", "fc-test", str(batch), "--ledger", str(ledger), "-f", "json"])
    assert result.exit_code == 0, result.output
    entry = fc.read_ledger(ledger)[0]
    assert (entry["n"], entry["top1"], entry["first_failure_rank"]) == (2, 0.5, 1.0)
    assert entry["outcomes"]["false_all_clear"] == 1
    assert [m["case"] for m in entry["misses"]] == ["cuda_oom--public-b"]
    rows = [json.loads(line) for line in (tmp_path / "ledger-fc-test.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["right", "false_all_clear"]
    assert "cuda_oom--public-b" in (tmp_path / "LEDGER.md").read_text()
    again = CliRunner().invoke(app, ["eval", "--first-contact", "fc-test", str(batch), "--ledger", str(ledger)])
    assert again.exit_code == 2
    assert len(fc.read_ledger(ledger)) == 1
