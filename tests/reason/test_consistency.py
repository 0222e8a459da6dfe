"""Disagreements between nodes: versions, interfaces, NCCL settings, world size.

Lines are NCCL's own formats (src/init.cc, bootstrap.cc, transport/net_socket.cc,
misc/param.cc, misc/socket.cc) under ``NCCL_DEBUG=INFO``.
"""

from __future__ import annotations

from pathlib import Path

import logsleuth
from logsleuth.reason import consistency
from tests.conftest import events_of


def nccl_job(version: dict[str, str], iface: dict[str, str], env: dict[str, str] | None = None) -> str:
    lines = []
    for i, (host, ver) in enumerate(version.items()):
        pid = 4000 + i
        name, addr = iface[host].split(":")
        lines += [
            f"{host}:{pid}:{pid} [0] NCCL INFO NCCL version {ver}+cuda12.4",
            f"{host}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 12040",
            f"{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using {name}:{addr}<0>",
            f"{host}:{pid}:{pid} [0] NCCL INFO NET/Socket : Using [0]{name}:{addr}<0>",
        ]
        if env and host in env:
            lines.append(f"{host}:{pid}:{pid} [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to {env[host]}")
        lines.append(
            f"{host}:{pid}:{pid} [0] NCCL INFO ncclCommInitRank comm 0x55d4{i:04x} rank {i} nranks 4 cudaDev 0 nvmlDev 0 busId 1000 "
            f"commId 0x7f3a9b - Init COMPLETE"
        )
    return "\n".join(lines) + "\n"


HOSTS = ("gpu01", "gpu02", "gpu03", "gpu04")


def test_the_node_on_another_nccl_release_is_named() -> None:
    job = nccl_job(
        dict(zip(HOSTS, ["2.21.5", "2.21.5", "2.20.3", "2.21.5"], strict=True)), {h: f"eth0:10.0.0.{i}" for i, h in enumerate(HOSTS)}
    )
    (f,) = [f for f in consistency.check(events_of(job)) if f.what == "NCCL version"]
    assert (f.cause, f.nodes, f.ranks) == ("version_mismatch", ["gpu03"], [2])
    assert "2.20.3 on gpu03 differs from 2.21.5" in f.summary


def test_docker0_in_a_multi_node_job_is_suspect_on_its_own() -> None:
    ifaces = {h: f"eth0:10.0.0.{i}" for i, h in enumerate(HOSTS)} | {"gpu04": "docker0:172.17.0.1"}
    job = nccl_job(dict.fromkeys(HOSTS, "2.21.5"), ifaces)
    job += (
        "\ngpu01:4000:4100 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<43211> failed : Connection refused\n"
    )
    (f,) = consistency.check(events_of(job))
    assert (f.cause, f.nodes, f.ranks, f.corroborated) == ("nccl_wrong_interface", ["gpu04"], [3], True)
    assert "docker0" in f.summary and "name that address" in f.summary


def test_loopback_is_fine_on_a_single_node() -> None:
    job = nccl_job({"gpu01": "2.21.5"}, {"gpu01": "lo:127.0.0.1"})
    assert consistency.check(events_of(job)) == []


def test_an_nccl_setting_missing_on_one_node_is_named() -> None:
    env = {"gpu01": "ib0", "gpu02": "ib0", "gpu03": "ib0"}
    job = nccl_job(dict.fromkeys(HOSTS, "2.21.5"), {h: f"ib0:10.0.0.{i}" for i, h in enumerate(HOSTS)}, env)
    (f,) = consistency.check(events_of(job))
    assert (f.cause, f.nodes) == ("nccl_wrong_interface", ["gpu04"])
    assert f.what == "NCCL_SOCKET_IFNAME" and "(unset)" in f.summary


def test_nccls_own_version_check_names_the_odd_ranks() -> None:
    # NCCL >= 2.23, init.cc: each rank names the first peer whose version differs from its own
    warn = "[2026-03-14 09:27:01] gpu0{n}:{pid}:{tid} [0] init.cc:714 NCCL WARN Mismatched NCCL version detected : rank {peer} version {pv} rank {me} version {mv}"
    lines = [warn.format(n=1, pid=10, tid=11, peer=3, pv=22703, me=r, mv=22602) for r in (0, 1, 2)]
    lines.append(warn.format(n=2, pid=20, tid=21, peer=0, pv=22602, me=3, mv=22703))
    lines += [
        f"gpu0{1 if r < 3 else 2}:{10 if r < 3 else 20}:{10 if r < 3 else 20} [0] NCCL INFO cudaDriverVersion 12080" for r in range(4)
    ]
    found = [f for f in consistency.check(events_of("\n".join(lines) + "\n")) if f.what.startswith("NCCL version (NCCL")]
    assert len(found) == 1 and found[0].ranks == [3] and found[0].corroborated


def test_two_processes_of_one_communicator_on_one_gpu_are_named() -> None:
    ev = events_of(
        """
        node01:2870757:2870757 [0] NCCL INFO comm 0x560c6a8aafd0 rank 0 nranks 2 cudaDev 0 busId 86000 - Abort COMPLETE
        node01:2870756:2870756 [0] NCCL INFO comm 0x55592676f080 rank 1 nranks 2 cudaDev 0 busId 86000 - Abort COMPLETE
        """
    )
    assert ev.select("comm_rank", "nranks", "device", "bus_id").rows() == [(0, 2, 0, "86000"), (1, 2, 0, "86000")]
    (f,) = [f for f in consistency.check(ev) if f.cause == "device_misassignment"]
    assert f.nodes == ["node01"] and f.ranks == [0, 1] and "busId 86000" in f.summary and len(f.eids) == 2


def test_one_gpu_per_process_and_one_process_with_several_communicators_are_fine() -> None:
    ev = events_of(
        """
        node01:51:51 [0] NCCL INFO ncclCommInitRank comm 0x55d4 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x7f3a - Init COMPLETE
        node01:52:52 [1] NCCL INFO ncclCommInitRank comm 0x55d5 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x7f3a - Init COMPLETE
        node01:51:51 [0] NCCL INFO ncclCommSplit comm 0x66d4 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x55d4 color 1 key 0 commId 0x9a1 - Init COMPLETE
        node01:51:51 [0] NCCL INFO comm 0x55d4 rank 0 nranks 2 cudaDev 0 busId 1b000 - Destroy COMPLETE
        """
    )
    assert not [f for f in consistency.check(ev) if f.cause == "device_misassignment"]


def test_a_restarted_process_on_the_same_gpu_is_not_a_shared_gpu() -> None:
    # torchrun restarted the workers: new processes took the old ranks (and, on this node, rank 2 took rank 0's GPU)
    ev = events_of(
        """
        node01:100:100 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE
        node02:200:200 [0] NCCL INFO comm 0x2 rank 2 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE
        node01:100:100 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 1b000 - Abort COMPLETE
        node02:300:300 [0] NCCL INFO comm 0x3 rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE
        node01:400:400 [0] NCCL INFO comm 0x4 rank 2 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE
        """
    )
    assert not [f for f in consistency.check(ev) if f.cause == "device_misassignment"]


def test_nodes_launched_with_different_master_addresses_never_meet(tmp_path: Path) -> None:
    (tmp_path / "node01.log").write_text(
        "$ NNODES=2 RANK=0 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 llamafactory-cli train sft.yaml\n"
        "[2024-09-27 11:34:58,949] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda (auto detect)\n"
    )
    (tmp_path / "node02.log").write_text(
        "$ NNODES=2 RANK=1 MASTER_ADDR=10.0.0.2 MASTER_PORT=29500 llamafactory-cli train sft.yaml\n"
        "09/27/2024 11:34:41 - INFO - llamafactory.cli - Initializing distributed tasks at: 10.0.0.2:29500\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "env_misconfigured"
    assert "MASTER_ADDR" in report.verdict.summary


def test_a_master_named_by_host_on_one_node_and_by_address_on_another_is_no_disagreement(tmp_path: Path) -> None:
    (tmp_path / "node01.log").write_text("export MASTER_ADDR=node01\nstep 1 loss 0.52\n")
    (tmp_path / "node02.log").write_text("export MASTER_ADDR=10.0.0.1\nstep 1 loss 0.52\n")
    assert logsleuth.analyze([str(tmp_path)]).verdict.category == "none"
