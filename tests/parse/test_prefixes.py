"""Every prefix style peels to the right rank, local rank, task, level and time."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from logsleuth.parse.prefixes import peel

CASES = [
    # (raw line, expected msg, task, rank, local_rank, level)
    (" 3: [default1]:[rank5]: Traceback (most recent call last):", "Traceback (most recent call last):", 3, 5, 1, None),
    ("12: step 7 loss 0.1", "step 7 loss 0.1", 12, None, None, None),
    ("[default0]:hello from local rank 0", "hello from local rank 0", None, None, 0, None),
    ("[rank3]: RuntimeError: boom", "RuntimeError: boom", None, 3, None, None),
    # torchrun --role rank --tee 3 writes the *local* rank; stacked with PyTorch's global one
    ("[rank1]:[rank9]: ValueError: x", "ValueError: x", None, 9, 1, None),
    ("[1,3]<stderr>:RuntimeError: x", "RuntimeError: x", None, 3, None, None),
    # horovodrun's own launcher (gloo mode), with its time.asctime() stamp
    ("Wed Mar  5 09:14:02 2025[2]<stderr>:Segmentation fault (core dumped)", "Segmentation fault (core dumped)", None, 2, None, None),
    ("[0]<stdout>:epoch 1 done", "epoch 1 done", None, 0, None, None),
    ("[rank: 2] Epoch 0", "Epoch 0", None, 2, None, None),
    # vLLM: its worker tag (the worker's rank) and its logger's header, re-logging a worker's traceback
    (
        "(VllmWorker rank=1 pid=4410) ERROR 05-20 09:14:02 [multiproc_executor.py:470] Traceback (most recent call last):",
        "Traceback (most recent call last):",
        None,
        1,
        None,
        "error",
    ),
    (
        "(EngineCore_DP0 pid=701301) INFO 05-20 09:14:03 [core.py:718] Waiting for init message",
        "Waiting for init message",
        None,
        None,
        None,
        "info",
    ),
    (
        "[rank0]:[E502 11:59:03.123 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout",
        "[Rank 0] Watchdog caught collective operation timeout",
        None,
        0,
        None,
        "error",
    ),
    (
        "E1122 02:40:23.026000 4227 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 4229) of binary: /usr/bin/python",
        "failed (exitcode: 1) local_rank: 1 (pid: 4229) of binary: /usr/bin/python",
        None,
        None,
        None,
        "error",
    ),
    (
        "[rank0]:[E ProcessGroupNCCL.cpp:683] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught",
        "[PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught",
        None,
        0,
        None,
        "error",
    ),
    (
        "[W socket.cpp:401] [c10d] The server socket has failed to bind",
        "[c10d] The server socket has failed to bind",
        None,
        None,
        None,
        "warning",
    ),
    ("WARNING:torch.distributed.run:", "", None, None, None, "warning"),
    (
        "  0: slurmstepd-node01: error: Detected 1 oom-kill event(s) in StepId=8.0.",
        "slurmstepd-node01: error: Detected 1 oom-kill event(s) in StepId=8.0.",
        0,
        None,
        None,
        None,
    ),
    ("2024-05-01T10:00:00.123Z [default0]:hello", "hello", None, None, 0, None),
    ("RuntimeError: boom", "RuntimeError: boom", None, None, None, None),
    # Ray's worker and actor lines (the process and its node)
    ("(WorkerDict pid=2441, ip=10.0.0.5) RuntimeError: x", "RuntimeError: x", None, None, None, None),
    ("(pid=9468) [rank1]: ValueError: x", "ValueError: x", None, 1, None, None),
    # the Hugging Face test harness (accelerate test) labels its child's streams
    ("stderr: [E ProcessGroupNCCL.cpp:461] To avoid data inconsistency", "To avoid data inconsistency", None, None, None, "error"),
    ("stdout: [rank1]: ValueError: x", "ValueError: x", None, 1, None, None),
    # torchrun --tee with an empty --role (torchx launches it so): "[{role}{local_rank}]:" is "[4]:"
    ('[4]:  File "/w/train.py", line 9, in main', ' File "/w/train.py", line 9, in main', None, None, 4, None),
    ("[0]:Traceback (most recent call last):", "Traceback (most recent call last):", None, None, 0, None),
    ("[1]:[rank9]: ValueError: x", "ValueError: x", None, 9, 1, None),
    # ... but a bare "[1]:" is an entry number of torchrun's failure table
    ("[1]:", "[1]:", None, None, None, None),
]


@pytest.mark.parametrize(("raw", "msg", "task", "rank", "local_rank", "level"), CASES)
def test_prefix_styles_peel_to_message_and_identity(raw, msg, task, rank, local_rank, level) -> None:
    got = peel(pl.DataFrame({"file": ["f"], "line": [1], "raw": [raw]}), {"f": 2026}).row(0, named=True)
    assert (got["msg"], got["task"], got["rank"], got["local_rank"], got["level"]) == (msg, task, rank, local_rank, level)


def test_glog_month_is_not_zero_padded() -> None:
    # c10's logger writes E502 for May 2 and E1122 for Nov 22
    lines = ["[rank0]:[E502 11:59:03.123 ProcessGroupNCCL.cpp:607] x", "E1122 02:40:23.026000 4227 torch/x.py:1] y"]
    got = peel(pl.DataFrame({"file": ["f", "f"], "line": [1, 2], "raw": lines}), {"f": 2025})
    assert got["time"].to_list() == [datetime(2025, 5, 2, 11, 59, 3, 123000), datetime(2025, 11, 22, 2, 40, 23, 26000)]


def test_streams_separate_writers_but_not_lines_of_one_writer() -> None:
    lines = ["[rank0]: a", "[rank1]: b", "[rank0]: c", "plain"]
    got = peel(pl.DataFrame({"file": ["f"] * 4, "line": [1, 2, 3, 4], "raw": lines}), {"f": 2026})
    streams = got["stream"].to_list()
    assert streams[0] == streams[2] and len({streams[0], streams[1], streams[3]}) == 3


def test_pdsh_host_prefixes_peel_to_the_node_and_the_rest_still_peels() -> None:
    # DeepSpeed's multi-node launcher runs pdsh, which puts "host: " before every remote line
    lines = [
        "worker-0: [rank3]: RuntimeError: boom",
        "10.0.0.5: [default1]:[rank9]: ValueError: x",
        "gpu-a100-017.cluster.local: step 7 loss 0.1",
        "S3UploadFailedError: upload failed",  # an exception type with a digit is not a host
    ]
    got = peel(pl.DataFrame({"file": ["f"] * 4, "line": [1, 2, 3, 4], "raw": lines}), {"f": 2026})
    assert got["host"].to_list() == ["worker-0", "10.0.0.5", "gpu-a100-017", None]
    assert got["msg"].to_list() == ["RuntimeError: boom", "ValueError: x", "step 7 loss 0.1", "S3UploadFailedError: upload failed"]
    assert got["rank"].to_list() == [3, 9, None, None]
    assert len(set(got["stream"].to_list())) == 4  # hosts are separate writers


def test_the_same_host_prefix_twice_peels_as_one_and_a_different_second_name_stays() -> None:
    # DeepSpeed's runner over pdsh over ssh can print the remote host twice; a host before an
    # interface name ("mlx5: gpu-d03: ...", a driver's own prefix) is one prefix, the rest is the message
    lines = [
        "10.0.87.143: 10.0.87.143: node1:149:298 [5] NCCL INFO group.cc:210 -> 2",
        "10.0.87.143: 10.0.87.143: Traceback (most recent call last):",
        "mlx5: gpu-d03: got completion with error:",
    ]
    got = peel(pl.DataFrame({"file": ["f"] * 3, "line": [1, 2, 3], "raw": lines}), {"f": 2026})
    assert got["host"].to_list() == ["10.0.87.143", "10.0.87.143", "mlx5"]
    assert got["msg"].to_list() == [
        "node1:149:298 [5] NCCL INFO group.cc:210 -> 2",
        "Traceback (most recent call last):",
        "gpu-d03: got completion with error:",
    ]


def test_a_logger_name_in_a_file_that_is_not_pdsh_output_is_not_a_host() -> None:
    lines = ["boto3: retrying the upload", "[rank1]: RuntimeError: x", "srun: error: node01: task 1: Exited with exit code 1"]
    got = peel(pl.DataFrame({"file": ["f"] * 3, "line": [1, 2, 3], "raw": lines}), {"f": 2026})
    assert got["host"].null_count() == 3 and got["msg"][0] == "boto3: retrying the upload"


def test_torchx_replica_prefixes_peel_to_the_node_and_the_tee_header_to_the_local_rank() -> None:
    # torchx log/run puts "{role}/{replica} " before every line of a replica (log_tee_helpers.py)
    lines = [
        "trainer/0 [1]:[W socket.cpp:558] [c10d] The client socket has failed to connect to 0.0.0.5:40323",
        "trainer/1 [0]:Traceback (most recent call last):",
        "trainer/0 [1]:",
        "trainer/0 ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
    ]
    got = peel(pl.DataFrame({"file": ["f"] * 4, "line": [1, 2, 3, 4], "raw": lines}), {"f": 2026})
    assert got["host"].to_list() == ["trainer/0", "trainer/1", "trainer/0", "trainer/0"]
    assert got["local_rank"].to_list() == [1, 0, None, None]
    assert got["msg"].to_list()[1:] == ["Traceback (most recent call last):", "[1]:", "failed (exitcode: 1) local_rank: 0"]


def test_a_role_and_number_in_a_file_that_is_not_torchx_output_is_kept() -> None:
    lines = ["train/0 loss 0.3", "RuntimeError: x", "epoch 3 done"]
    got = peel(pl.DataFrame({"file": ["f"] * 3, "line": [1, 2, 3], "raw": lines}), {"f": 2026})
    assert got["host"].null_count() == 3 and got["msg"][0] == "train/0 loss 0.3"
