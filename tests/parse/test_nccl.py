"""NCCL lines: old and new WARN formats, versions, interfaces, the (host, pid) -> rank map."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from tests.conftest import events_of


def test_new_and_old_warn_formats() -> None:
    ev = events_of(
        """

        [2024-06-01 10:00:00] gpu-3:3468:3905 [4] transport/net_ib.cc:1615 (ncclIbTest) NCCL WARN NET/IB : Got completion from peer 10.0.0.7<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)
        kp-worker-0.cluster:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<54862> with status=12
        kp-worker-0:3468:3905 [4] NCCL INFO transport/net.cc:1302 -> 6
        """
    )
    rows = ev.select("kind", "node", "pid", "time", "level", "detail").rows()
    assert rows == [
        ("nccl_warn", "gpu-3", 3468, datetime(2024, 6, 1, 10), "warning", "transport/net_ib.cc:1615 (ncclIbTest)"),
        ("nccl_warn", "kp-worker-0", 3468, None, "warning", "ib_plugin.c:1615"),
        ("nccl_unwind", "kp-worker-0", 3468, None, "error", "transport/net.cc:1302"),
    ]
    assert ev["message"][0].startswith("NET/IB : Got completion")


def test_a_warn_pasted_without_its_host_pid_and_device_prefix_is_still_nccl_s() -> None:
    ev = events_of(
        """
        graph/topo.h:230 NCCL WARN Could not find NET with id 0
        [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so)
        NCCL WARN Cuda failure 'out of memory'
        """
    )
    rows = ev.select("kind", "source", "level", "node", "detail", "message").rows()
    assert rows == [
        ("nccl_warn", "nccl", "warning", None, "graph/topo.h:230", "Could not find NET with id 0"),
        ("nccl_info", "nccl", "info", None, None, "NET/Plugin : No plugin found (libnccl-net.so)"),
        ("nccl_warn", "nccl", "warning", None, None, "Cuda failure 'out of memory'"),
    ]


def test_init_complete_maps_host_and_pid_to_rank_for_other_lines() -> None:
    ev = events_of(
        """
        node07:51:51 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
        node07:51:60 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.7<0>
        node07:51:60 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.7<0>
        node07:51:60 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
        node07:51:60 [0] NCCL INFO comm 0x55d4c8 rank 36 nranks 64 cudaDev 4 nvmlDev 4 busId 9b000 commId 0x1f - Init COMPLETE
        """
    )
    assert ev["rank"].to_list() == [36] * 5
    assert ev.filter(pl.col("kind") == "nccl_version")["version"].to_list() == ["2.21.5"]
    assert ev.filter(pl.col("kind") == "nccl_net")["interface"].to_list() == ["eth0", "eth0"]
    assert ev.filter(pl.col("kind") == "nccl_env").row(0, named=True)["detail"] == "NCCL_SOCKET_IFNAME=eth0"
    assert ev.filter(pl.col("kind") == "nccl_init")["nranks"].to_list() == [64]


def test_bracket_number_is_the_cuda_device_not_the_rank() -> None:
    ev = events_of("node07:51:60 [3] NCCL INFO Channel 00/02 : 0 1")
    assert ev.is_empty() or ev["rank"].to_list() == [None]


def test_a_bare_version_line_of_nccl_debug_version_is_a_version_event() -> None:
    ev = events_of("NCCL version 2.18.1+cuda12.1\n")
    row = ev.row(0, named=True)
    assert (row["kind"], row["source"], row["version"]) == ("nccl_version", "nccl", "2.18.1")


def test_nodes_that_print_different_bare_nccl_versions_explain_their_watchdog_timeouts(tmp_path) -> None:
    import logsleuth

    watchdog = (
        "[rank{r}]:[E1125 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"
    )
    (tmp_path / "node01.out").write_text("NCCL version 2.18.1+cuda12.1\n" + watchdog.format(r=0))
    (tmp_path / "node02.out").write_text("NCCL version 2.19.3+cuda12.3\n" + watchdog.format(r=1))
    assert logsleuth.analyze([str(tmp_path)]).verdict.category == "version_mismatch"
