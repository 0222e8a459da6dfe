"""Real reproductions on the CPU with gloo: a healthy run passes, injected faults fail with the matching verdict.

Every run here starts real processes; they are small (a few thousand elements,
2-3 ranks) and bounded by a hard timeout far above what they need, while the
process group's own timeout is short, so a fault shows up in seconds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cli import app
from logsleuth.repro.plan import make_plan
from logsleuth.repro.run import Result, reproduce

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

runner = CliRunner()
#: Far above what a run needs even on a loaded 2-core machine; a fault must end long before it.
HARD = 120.0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _all_ended(result: Result) -> bool:
    """No rank outlives the run."""
    return all(_gone(r.pid) for r in result.ranks)


@pytest.fixture
def occupied_port() -> Iterator[int]:
    """A port some other process listens on (and never answers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_healthy_all_reduce_passes_with_no_wrong_elements_and_bandwidth(tmp_path: Path) -> None:
    args = ["repro", "--nproc", "3", "--numel", "6000", "--iters", "5", "--warmup", "1", "--timeout", str(HARD), "--format", "json"]
    result = runner.invoke(app, [*args, "--logs", str(tmp_path)])
    data = json.loads(result.stdout)
    assert result.exit_code == 0, data
    assert data["ok"] is True and data["wrong"] == 0 and data["iterations"] == 5
    assert data["time_us"] > 0 and data["algbw_gbps"] > 0
    assert data["busbw_gbps"] == pytest.approx(data["algbw_gbps"] * 2 * 2 / 3)
    assert data["verdict"]["category"] == "none"
    assert set(data["verdict"]) >= {"cause", "category", "confidence", "first_failure", "evidence", "summary", "fix"}
    assert [r["status"] for r in data["ranks"]] == ["ok", "ok", "ok"]
    assert data["plan"]["backend_used"] == "gloo"
    assert (tmp_path / "repro.log").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["repro.log"]


def test_occupied_master_port_fails_as_port_in_use_and_the_waiting_ranks_are_killed(occupied_port: int) -> None:
    plan = make_plan(None, nproc=2, numel=64, timeout_s=HARD, pg_timeout_s=HARD / 2, env={"MASTER_PORT": str(occupied_port)})
    result = reproduce(plan, grace_s=2.0)
    assert not result.ok and not result.timed_out
    assert result.verdict.category == "port_in_use" and result.verdict.first_failure.rank == 0
    assert [r.status for r in result.ranks] == ["failed", "killed"]
    assert any("killed rank(s) 1 after rank 0 failed" in n for n in result.notes)
    assert result.elapsed_s < HARD / 2  # the grace kill, not the process group's timeout, ended it
    assert _all_ended(result)


def test_world_size_larger_than_the_processes_started_fails_as_rendezvous_timeout() -> None:
    plan = make_plan(None, nproc=2, world_size=3, numel=64, timeout_s=HARD, pg_timeout_s=3)
    result = reproduce(plan)
    assert not result.ok and not result.timed_out
    assert result.verdict.category == "rendezvous_timeout"
    assert "rendezvous" in result.verdict.summary
    assert _all_ended(result)


def test_hard_timeout_kills_every_rank_and_still_reports() -> None:
    # the process group would wait a minute for the missing rank; the hard limit ends it first
    plan = make_plan(None, nproc=2, world_size=3, numel=64, timeout_s=4, pg_timeout_s=60)
    result = reproduce(plan)
    assert result.timed_out and not result.ok and result.elapsed_s < 4 + 10
    assert [r.status for r in result.ranks] == ["killed", "killed"]
    assert result.time_us is None and result.wrong is None and result.iterations == 0
    assert any("hard timeout of 4s" in n for n in result.notes)
    assert _all_ended(result)


def test_interface_from_the_logs_that_does_not_exist_fails_fast_as_wrong_interface(tmp_path: Path) -> None:
    log = tmp_path / "slurm-9.out"
    log.write_text(
        "+ export GLOO_SOCKET_IFNAME=nosuchif1 MASTER_ADDR=192.0.2.10\n"
        "0: [rank0]:[E1122 02:40:23.026531 140 ProcessGroupGloo.cpp:100] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkGloo(SeqNum=3, OpType=BROADCAST, NumelIn=512, NumelOut=512, Timeout(ms)=60000) ran for 60001 milliseconds before timing out.\n"
    )
    result = runner.invoke(app, ["repro", str(log), "--nproc", "2", "--timeout", str(HARD), "--format", "json"])
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    assert (data["plan"]["op"], data["plan"]["numel"], data["plan"]["backend"]) == ("broadcast", 512, "gloo")
    assert data["plan"]["env"] == {"GLOO_SOCKET_IFNAME": "nosuchif1"}  # the logged MASTER_ADDR is dropped
    assert data["verdict"]["category"] == "nccl_wrong_interface" and "nosuchif1" in data["verdict"]["summary"]
    evidence = data["verdict"]["evidence"][0]
    assert evidence["file"] == "repro.log" and "Unable to find address for: nosuchif1" in evidence["text"]
    assert not data["timed_out"] and data["elapsed_s"] < HARD
    assert any(n.startswith("dropped MASTER_ADDR=192.0.2.10 from the logs: names an endpoint") for n in data["notes"])
    assert any("no interface nosuchif1" in n for n in data["notes"])
    assert all(_gone(r["pid"]) for r in data["ranks"])


def test_emitted_torchrun_script_runs_the_same_test(tmp_path: Path) -> None:
    path = tmp_path / "repro.sh"
    made = runner.invoke(
        app, ["repro", "--op", "reduce_scatter", "--numel", "300", "--nproc", "2", "--iters", "3", "--emit", "torchrun", "-o", str(path)]
    )
    assert made.exit_code == 0
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "TORCHRUN": str(Path(sys.executable).with_name("torchrun")),
        "MASTER_ADDR": "127.0.0.1",
        "PYTHONPATH": root,
    }
    text = path.read_text().replace("29500", str(_free_port()))
    path.write_text(text)
    done = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=HARD, cwd=tmp_path)
    lines = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("logsleuth-repro-result ")]
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(r["rank"] for r in lines) == [0, 1] and all(r["wrong"] == 0 for r in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repro.sh"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
