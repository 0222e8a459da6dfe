"""What the reproducer runs: taken from logs, overridden by flags, and only safe environment passes."""

from __future__ import annotations

import pytest

from logsleuth.repro.plan import (
    PlanError,
    bandwidth,
    env_problem,
    expand_nodes,
    find,
    make_plan,
    op_name,
    parse_env,
    size_bytes,
)
from logsleuth.repro.run import adapt_to_host
from tests.conftest import events_of

WATCHDOG_JOB = """\
+ export NCCL_SOCKET_IFNAME=^docker0,lo NCCL_IB_HCA=mlx5_0:1
+ export MASTER_ADDR=gpu-a01 MASTER_PORT=29511
+ export NCCL_DEBUG_FILE=/tmp/nccl.%h.log NCCL_NET_PLUGIN=libevil.so
+ export GLOO_SOCKET_IFNAME=$(reboot)
+ export CUDA_VISIBLE_DEVICES=4,5
0: gpu-a01:4242:4242 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1
0: gpu-a01:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
0: gpu-a01:4242:4300 [0] NCCL INFO comm 0x55d4 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9 - Init COMPLETE
1: gpu-a01:4243:4301 [1] NCCL INFO comm 0x55d5 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x9 - Init COMPLETE
2: gpu-a02:5242:5300 [0] NCCL INFO comm 0x55d6 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9 - Init COMPLETE
3: gpu-a02:5243:5301 [1] NCCL INFO comm 0x55d7 rank 3 nranks 4 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x9 - Init COMPLETE
2: [rank2]:[E1122 02:40:23.026531 5242 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=_REDUCE_SCATTER_BASE, NumelIn=4194304, NumelOut=1048576, Timeout(ms)=600000) ran for 600059 milliseconds before timing out.
0: [rank0]:[E1122 02:40:23.026531 4242 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=_REDUCE_SCATTER_BASE, NumelIn=4194304, NumelOut=1048576, Timeout(ms)=600000) ran for 600059 milliseconds before timing out.
"""


@pytest.fixture(scope="module")
def found():
    return find(events_of(WATCHDOG_JOB, "slurm-7.out"))


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ("all_reduce", "all_reduce"),
        ("allreduce", "all_reduce"),
        ("ALLREDUCE", "all_reduce"),
        ("_ALLGATHER_BASE", "all_gather"),
        ("all-to-all", "all_to_all"),
        ("gather_scatter", None),
    ],
)
def test_op_names_from_flags_and_optypes_normalise(text: str, op: str | None) -> None:
    assert op_name(text) == op


def test_suspect_collective_is_the_lowest_seqnum_watchdog_with_its_numel(found) -> None:
    assert found.op == "reduce_scatter"
    assert found.numel == 4194304
    assert found.suspect is not None and "SeqNum=7" in found.suspect and "slurm-7.out:" in found.suspect
    assert found.job_timeout_ms == 600000


def test_world_and_processes_per_node_come_from_nccl_ranks_and_nodes(found) -> None:
    assert found.world == 4
    assert found.nodes == ("gpu-a01", "gpu-a02")
    assert found.nproc == 2
    assert found.backend == "nccl"
    assert found.interfaces == ("eth0",)


def test_logged_environment_is_carried_only_when_safe(found) -> None:
    # tuning settings only: the rendezvous endpoint is never taken from a log (issue 18)
    assert found.env == {
        "NCCL_SOCKET_IFNAME": "^docker0,lo",
        "NCCL_IB_HCA": "mlx5_0:1",
        "NCCL_IB_DISABLE": "1",
    }
    notes = " ".join(found.notes)
    assert "NCCL_DEBUG_FILE" in notes and "NCCL_NET_PLUGIN" in notes and "GLOO_SOCKET_IFNAME" in notes
    assert "dropped MASTER_ADDR=gpu-a01 from the logs: names an endpoint" in notes and "dropped MASTER_PORT=29511" in notes
    assert "CUDA_VISIBLE_DEVICES" in notes
    assert "reboot" not in notes


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("nccl_debug", "INFO"),
        ("LD_PRELOAD", "x.so"),
        ("PATH", "/tmp"),
        ("NCCL_DEBUG_FILE", "/tmp/x"),
        ("NCCL_NET_PLUGIN", "evil"),
        ("CUDA_INJECTION64_PATH", "/tmp/x.so"),
        ("TORCH_EXTENSIONS_DIR", "/tmp"),
        ("NCCL_DEBUG", "INFO\nrm -rf ~"),
        ("NCCL_DEBUG", "$(reboot)"),
        ("NCCL_DEBUG", "a b"),
        ("NCCL_DEBUG", "x;y"),
        ("NCCL_DEBUG", "'q'"),
        ("NCCL_DEBUG", ""),
        ("MASTER_PORT", "99999"),
        ("MASTER_PORT", "http"),
    ],
)
def test_unsafe_environment_is_refused(name: str, value: str) -> None:
    assert env_problem(name, value) is not None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NCCL_SOCKET_IFNAME", "^docker0,lo"),
        ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"),
        ("GLOO_SOCKET_IFNAME", "eth0"),
        ("MASTER_PORT", "29500"),
    ],
)
def test_ordinary_nccl_and_gloo_settings_are_accepted(name: str, value: str) -> None:
    assert env_problem(name, value) is None


def test_env_flag_without_equals_or_with_bad_value_is_a_usage_error() -> None:
    with pytest.raises(PlanError, match="NAME=VALUE"):
        parse_env(["NCCL_DEBUG"])
    with pytest.raises(PlanError, match="LD_PRELOAD"):
        parse_env(["LD_PRELOAD=/tmp/x.so"])


def test_flags_win_over_the_logs_and_say_so(found) -> None:
    plan = make_plan(found, op="all_reduce", numel=1000, env={"NCCL_DEBUG": "WARN"})
    assert (plan.op, plan.numel, plan.dtype, plan.nproc) == ("all_reduce", 1000, "float32", 2)
    assert plan.origin["op"] == "flag" and plan.origin["nproc"] == "logs" and "dtype" not in plan.origin
    assert plan.env["NCCL_DEBUG"] == "WARN" and plan.env["NCCL_IB_HCA"] == "mlx5_0:1"
    assert plan.backend == "auto"  # NCCL in the logs: NCCL where there are GPUs, gloo elsewhere


def test_plan_from_flags_alone_uses_defaults() -> None:
    plan = make_plan(None, op="broadcast", nproc=3)
    assert (plan.op, plan.numel, plan.nproc, plan.world, plan.iters, plan.backend) == ("broadcast", 1 << 20, 3, 3, 20, "auto")
    assert plan.nodes == () and plan.env == {}


def test_uneven_numel_is_rounded_to_a_multiple_of_the_world_for_splitting_ops() -> None:
    plan = make_plan(None, op="all_to_all", numel=1000, nproc=3)
    assert plan.numel == 999
    assert any("999" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"op": "allgatherv"}, "--op"),
        ({"dtype": "complex64"}, "--dtype"),
        ({"backend": "mpi"}, "--backend"),
        ({"nproc": 0}, "--nproc"),
        ({"nproc": 100000}, "--nproc"),
        ({"iters": 0}, "--iters"),
        ({"warmup": -1}, "--warmup"),
        ({"timeout_s": 0.5}, "--timeout"),
        ({"nodes": "node[3-1]"}, "--nodes"),
        ({"nodes": "a;b"}, "--nodes"),
    ],
)
def test_bad_flags_are_refused_with_the_flag_named(flags: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        make_plan(None, **flags)  # type: ignore[arg-type]


def test_suspect_nodes_are_the_verdicts_plus_a_partner_so_the_test_crosses_nodes(found) -> None:
    found_one = type(found)(**{**found.__dict__, "implicated": ("gpu-a02",), "notes": []})
    plan = make_plan(found_one)
    assert plan.nodes == ("gpu-a02", "gpu-a01")
    assert any("joins it" in n for n in plan.notes)


def test_node_lists_expand_like_slurm_hostlists() -> None:
    assert expand_nodes("node[01-03,07],gpu-2") == ("node01", "node02", "node03", "node07", "gpu-2")


def test_bus_bandwidth_uses_the_nccl_tests_factors() -> None:
    # 1 GB in one second is 1 GB/s algorithm bandwidth, whatever the op
    for op, factor in [("all_reduce", 1.5), ("all_gather", 0.75), ("reduce_scatter", 0.75), ("all_to_all", 0.75), ("broadcast", 1.0)]:
        algbw, busbw = bandwidth(op, 10**9, 4, 1e6)
        assert algbw == pytest.approx(1.0) and busbw == pytest.approx(factor), op
    assert bandwidth("barrier", 0, 4, 10.0) == (None, None)


def test_all_gather_size_is_the_gathered_output_like_nccl_tests() -> None:
    assert size_bytes("all_gather", 1000, "bfloat16", 8) == 16000
    assert size_bytes("all_reduce", 1000, "float64", 8) == 8000
    assert size_bytes("barrier", 1000, "float32", 8) == 0


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"NCCL_SOCKET_IFNAME": "l"}, False),  # NCCL matches a prefix: lo
        ({"NCCL_SOCKET_IFNAME": "=l"}, True),  # = asks for the exact name
        ({"NCCL_SOCKET_IFNAME": "^nosuch0"}, False),  # ^ only excludes
        ({"GLOO_SOCKET_IFNAME": "l"}, True),  # gloo wants the exact name
        ({"GLOO_SOCKET_IFNAME": "lo"}, False),
    ],
)
def test_interfaces_this_machine_lacks_are_pointed_out_before_the_run(env: dict[str, str], missing: bool) -> None:
    _, notes = adapt_to_host(make_plan(None, env=env))
    assert any("has no interface" in n for n in notes) is missing


def test_a_run_that_cannot_fit_in_memory_is_refused_before_it_starts() -> None:
    with pytest.raises(PlanError, match="smaller --numel"):
        adapt_to_host(make_plan(None, op="all_gather", numel=10**11, nproc=8))


def test_a_remote_master_addr_is_replaced_by_loopback_for_the_local_run() -> None:
    plan, notes = adapt_to_host(make_plan(None, env={"MASTER_ADDR": "192.0.2.10", "NCCL_DEBUG": "INFO"}))
    assert plan.env == {"MASTER_ADDR": "127.0.0.1", "NCCL_DEBUG": "INFO"}
    assert any("192.0.2.10 is not this machine" in n for n in notes)


def test_a_desync_report_gives_op_shape_and_dtype_of_the_first_rank() -> None:
    found = find(
        events_of(
            "[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=23, OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=BFloat16, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)), but Rank 1 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=23, OpType=BROADCAST, TensorShape=[20, 10], TensorDtypes=BFloat16).\n"
        )
    )
    assert (found.op, found.numel, found.dtype) == ("all_reduce", 200, "bfloat16")


def test_point_to_point_work_is_reproduced_by_the_nearest_collective_and_said_so() -> None:
    found = find(
        events_of(
            "[rank1]:[E1122 02:40:23.026531 140 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=4, OpType=SEND, NumelIn=4096, NumelOut=4096, Timeout(ms)=1000) ran for 1001 milliseconds before timing out.\n"
        )
    )
    assert (found.op, found.numel) == ("all_to_all", 4096)
    assert any("OpType SEND" in n for n in found.notes)


def test_missing_torch_is_reported_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from logsleuth.repro.run import check_torch

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PlanError, match=r"pip install torch==2\.13\.0"):
        check_torch()
