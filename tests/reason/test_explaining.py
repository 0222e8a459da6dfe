"""Causes that explain other causes: a GPU fault explains CUDA errors, differing NCCL
versions explain a garbled bootstrap address, and glog lines take their year from the log."""

from __future__ import annotations

import os
from pathlib import Path

import logsleuth

_WATCHDOG = (
    "{r}: [rank{r}]:[E624 18:12:41.569112941 ProcessGroupNCCL.cpp:607] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=122532, OpType=ALLGATHER, NumelIn=98, NumelOut=98, "
    "Timeout(ms)=1800000) ran for 1800462 milliseconds before timing out."
)


def test_a_step_cancel_after_the_watchdogs_fired_is_not_the_cause_even_in_an_old_copied_log(tmp_path: Path) -> None:
    log = tmp_path / "slurm-8172086.out"
    log.write_text(
        "\n".join(
            [
                _WATCHDOG.format(r=1),
                _WATCHDOG.format(r=0),
                "srun: error: dgx03: task 0: Aborted (core dumped)",
                "srun: error: dgx03: task 1: Aborted (core dumped)",
                "slurmstepd: error: *** STEP 8172086.0 ON dgx03 CANCELLED AT 2025-06-24T18:12:47 ***",
            ]
        )
        + "\n"
    )
    os.utime(log, (1_800_000_000, 1_800_000_000))  # copied in 2027: the glog lines still belong to 2025
    report = logsleuth.analyze([str(log)])
    assert report.verdict.category == "collective_timeout"
    assert report.verdict.first_failure.time is not None and report.verdict.first_failure.time.startswith("2025-06-24T18:12:41")


def test_an_nvidia_xid_explains_the_cuda_error_a_rank_raised_first(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 9, in <module>\n'
        "[rank0]:     loss.backward()\n"
        "[rank0]: RuntimeError: CUDA error: unspecified launch failure\n"
    )
    (tmp_path / "dmesg.log").write_text(
        "[Fri Sep 26 08:27:14 2025] NVRM: Xid (PCI:0000:86:00): 94, pid=2031, name=python, Contained: SM (0x1).\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "gpu_hardware_fault"
    assert report.verdict.first_failure.rank == 0  # the kernel names a PCI address; the rank comes from the CUDA error
    assert [c.category for c in report.candidates][:2] == ["gpu_hardware_fault", "cuda_error"]


def test_a_gpu_the_driver_says_needs_a_reset_explains_a_device_cuda_calls_busy_or_unavailable(tmp_path: Path) -> None:
    # the test's file sorts first and nothing carries a timestamp CUDA's line could be ordered by
    (tmp_path / "a-nccl-tests.log").write_text("Test CUDA failure common.cu:1007\n'CUDA-capable device(s) is/are busy or unavailable'\n")
    (tmp_path / "dmesg.log").write_text(
        "[Sun Jan 11 09:52:01 2026] NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054;"
        " hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000062; status=0x00000062\n"
        "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED]"
        " (0x00000062) returned from status @ kernel_channel.c:2874\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "gpu_hardware_fault"
    assert [c.category for c in report.candidates][:2] == ["gpu_hardware_fault", "device_misassignment"]


def test_nodes_on_different_nccl_versions_explain_a_socket_family_error(tmp_path: Path) -> None:
    (tmp_path / "worker-0.out").write_text(
        "worker-0:28168:29020 [0] NCCL INFO NCCL version 2.20.5+cuda12.2\n"
        "worker-0:28168:29020 [0] misc/socket.cc:484 NCCL WARN ncclSocketInit: connecting to address  with family 0 is neither AF_INET(2) nor AF_INET6(10)\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3141, internal error\n"
    )
    (tmp_path / "worker-1.out").write_text("worker-1:28172:28233 [0] NCCL INFO NCCL version 2.19.3+cuda12.2\n")
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "version_mismatch"
    assert "nccl_wrong_interface" in [c.category for c in report.candidates]


def test_the_same_socket_family_error_with_one_nccl_version_is_the_interface(tmp_path: Path) -> None:
    (tmp_path / "worker-0.out").write_text(
        "worker-0:28168:29020 [0] NCCL INFO NCCL version 2.20.5+cuda12.2\n"
        "worker-0:28168:29020 [0] misc/socket.cc:484 NCCL WARN ncclSocketInit: connecting to address  with family 0 is neither AF_INET(2) nor AF_INET6(10)\n"
    )
    (tmp_path / "worker-1.out").write_text("worker-1:28172:28233 [0] NCCL INFO NCCL version 2.20.5+cuda12.2\n")
    assert logsleuth.analyze([str(tmp_path)]).verdict.category == "nccl_wrong_interface"


def test_two_ranks_on_one_gpu_explain_the_tracebacks_no_rule_knows(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "node01:2870757:2870757 [0] NCCL INFO comm 0x560c6a8aafd0 rank 0 nranks 2 cudaDev 0 busId 86000 - Abort COMPLETE\n"
        "node01:2870756:2870756 [0] NCCL INFO comm 0x55592676f080 rank 1 nranks 2 cudaDev 0 busId 86000 - Abort COMPLETE\n"
        "Traceback (most recent call last):\n"
        '  File "/home/user/multinode.py", line 113, in <module>\n'
        "    self.model = DDP(self.model, device_ids=[self.local_rank])\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "device_misassignment"
    assert report.verdict.first_failure.node == "node01"


def test_a_gloo_peer_on_the_debian_host_name_loopback_is_the_interface_not_the_store(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:769] connect [127.0.1.1]:25472: Connection refused\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "nccl_wrong_interface"


def test_nccl_on_loopback_in_a_two_node_job_is_the_interface(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "node01:4000:4000 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node02:4100:4100 [0] NCCL INFO Bootstrap : Using lo:127.0.1.1<0>\n"
        "[rank1]: RuntimeError: Connection refused\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "nccl_wrong_interface"


def test_a_refused_store_on_127_0_0_1_in_a_single_node_job_stays_master_unreachable(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "node01:4000:4000 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>\n"
        "node01:4001:4001 [1] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>\n"
        "[rank1]: torch.distributed.DistNetworkError: The client socket has failed to connect to [127.0.0.1]:29500"
        " (errno: 111 - Connection refused).\n"
    )
    report = logsleuth.analyze([str(tmp_path)])
    assert report.verdict.category == "master_unreachable"


def test_mp_spawn_reporting_a_child_killed_by_a_signal_is_that_death_not_a_launcher_summary(tmp_path: Path) -> None:
    # the child printed nothing: ProcessExitedException's "terminated with signal" is the only record of its death
    log = tmp_path / "train.log"
    log.write_text(
        "[node01] rank 1/2 ready\nstep 1 loss 0.1372 (0.385s/step)\n"
        "W1125 00:16:55.265000 30906 torch/multiprocessing/spawn.py:165] Terminating process 30939 via signal SIGTERM\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 192, in join\n'
        "    raise ProcessExitedException(\n"
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV\n"
    )
    report = logsleuth.analyze([str(log)])
    assert report.verdict.category == "crash_signal"
    assert report.verdict.first_failure.rank == 1
