"""rank <-> node <-> pid <-> local rank, joined from every source of a job's output."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import logsleuth
from logsleuth.api import events_for
from logsleuth.parse.identity import per_node_files, srun_task_nodes
from logsleuth.reason import rank_table
from tests.conftest import events_of

# srun --label, one task per rank on two nodes (labels right-aligned as srun pads them)
SRUN_PER_RANK = """\
0: [rank0]: Traceback (most recent call last):
0: [rank0]:   File "/home/user/train.py", line 20, in <module>
0: [rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:36000
3: [rank3]: Traceback (most recent call last):
3: [rank3]:   File "/home/user/train.py", line 9, in <module>
3: [rank3]: ValueError: bad sample 17
srun: error: node02: task 3: Exited with exit code 1
srun: error: node01: tasks 0-1: Exited with exit code 1
srun: error: node02: task 2: Terminated
"""

# srun --label starting one torchrun per node (task = node index), torchrun --tee 3
SRUN_PER_NODE = """\
0: [default0]:step 1 loss 0.1372
1: [default1]:[rank3]: Traceback (most recent call last):
1: [default1]:[rank3]:   File "/home/user/train.py", line 9, in <module>
1: [default1]:[rank3]: ValueError: bad sample 17
1: W1122 04:09:03.406000 1458 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 200 closing signal SIGTERM
1: E1122 04:09:03.500000 1458 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 201) of binary: /opt/venv/bin/python3
1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
1: ============================================================
1: train.py FAILED
1: ------------------------------------------------------------
1: Failures:
1:   <NO_OTHER_FAILURES>
1: ------------------------------------------------------------
1: Root Cause (first observed failure):
1: [0]:
1:   time      : 2026-11-22_04:09:03
1:   host      : node02.cluster.example
1:   rank      : 3 (local_rank: 1)
1:   exitcode  : 1 (pid: 201)
1:   error_file: <N/A>
1:   traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
1: ============================================================
srun: error: node01: task 0: Terminated
srun: error: node02: task 1: Exited with exit code 1
"""

NCCL = """\
node03:4242:4242 [0] NCCL INFO comm 0x55d4a3c0 rank 5 nranks 8 cudaDev 0 nvmlDev 0 busId 1000 commId 0x7f3a9b - Init COMPLETE
node03:4242:4310 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.9<35443> failed : Connection refused
[rank5]: Traceback (most recent call last):
[rank5]:   File "/home/user/train.py", line 9, in <module>
[rank5]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error
"""


def ranks_nodes(text: str) -> dict[int, str]:
    table = rank_table(events_of(text))
    return {int(r): n for r, n in table.select("rank", "node").iter_rows()}


def test_srun_task_is_the_rank_when_srun_starts_one_task_per_rank() -> None:
    ev = events_of(SRUN_PER_RANK)
    assert per_node_files(ev) == set()
    assert ranks_nodes(SRUN_PER_RANK) == {0: "node01", 1: "node01", 2: "node02", 3: "node02"}
    exit3 = ev.filter(pl.col("raw").str.contains("task 3:")).row(0, named=True)
    assert exit3["rank"] == 3


def test_srun_task_is_the_node_when_srun_starts_one_torchrun_per_node() -> None:
    ev = events_of(SRUN_PER_NODE)
    assert per_node_files(ev) == {"job.log"}
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (tb["rank"], tb["local_rank"], tb["task"], tb["node"]) == (3, 1, 1, "node02")
    # torchrun's line about local rank 1 (no global rank on it) is joined through (node, local rank)
    agent = ev.filter(pl.col("kind") == "agent_worker_failed").row(0, named=True)
    assert (agent["rank"], agent["node"]) == (3, "node02")
    # the task id never becomes a rank in this layout
    assert 1 not in ev.filter(pl.col("kind") == "line").get_column("rank").drop_nulls().to_list()
    # node 0's worker is numbered from torchrun's blocks: task 0, local rank 0
    step = ev.filter(pl.col("raw").str.contains("step 1")).row(0, named=True)
    assert (step["node"], step["local_rank"], step["rank"]) == ("node01", 0, 0)


def test_srun_exit_lines_map_tasks_to_nodes() -> None:
    ev = events_of(SRUN_PER_RANK)
    got = {(t, n) for _, t, n in srun_task_nodes(ev).iter_rows()}
    assert got == {(3, "node02"), (0, "node01"), (1, "node01"), (2, "node02")}


def test_nccl_host_pid_names_the_rank_of_its_other_lines_and_hosts_are_short() -> None:
    ev = events_of(NCCL)
    warn = ev.filter(pl.col("kind") == "nccl_warn").row(0, named=True)
    assert (warn["rank"], warn["node"]) == (5, "node03")
    assert ranks_nodes(NCCL) == {5: "node03"}


def test_torchrun_fqdn_is_cut_to_the_short_name_nccl_uses() -> None:
    assert ranks_nodes(SRUN_PER_NODE)[3] == "node02"


def test_world_size_adds_ranks_that_printed_nothing() -> None:
    table = rank_table(events_of(NCCL), world=8)
    assert table.height == 8 and table.filter(pl.col("node").is_not_null()).get_column("rank").to_list() == [5]


# mp.spawn (torch/multiprocessing/spawn.py) reports a child's traceback under this header
SPAWN = """\
Traceback (most recent call last):
  File "train_net.py", line 120, in <module>
    launch(main, args.num_gpus)
torch.multiprocessing.spawn.ProcessRaisedException:

-- Process 7 terminated with the following error:
Traceback (most recent call last):
  File "/opt/conda/lib/python3.7/site-packages/torch/multiprocessing/spawn.py", line 19, in _wrap
    fn(i, *args)
RuntimeError: CUDA error: device-side assert triggered
"""

# torch.distributed.launch (PyTorch 1.x) names the dead worker only in its command line
LAUNCH = """\
Traceback (most recent call last):
  File "/opt/conda/lib/python3.7/site-packages/torch/distributed/launch.py", line 259, in main
    cmd=cmd)
subprocess.CalledProcessError: Command '['/opt/conda/bin/python3', '-u', 'train.py', '--local_rank=7', '--epochs', '180']' died with <Signals.SIGSEGV: 11>.
"""


def test_spawn_headers_and_launch_commands_name_the_local_rank() -> None:
    spawned = events_of(SPAWN).filter(pl.col("kind") == "traceback").sort("line")
    assert spawned.get_column("local_rank").to_list() == [None, 7]
    assert spawned.get_column("rank").to_list() == [None, 7]  # one node, nothing says otherwise
    launched = events_of(LAUNCH).filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (launched["local_rank"], launched["rank"]) == (7, 7)


def test_messages_that_name_their_own_rank_give_it() -> None:
    ev = events_of(
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 4330, for key: store_based_barrier_key:522 "
        "(world_size=2048, worker_count=1792, timeout=0:30:00)\n"
    )
    assert ev.get_column("rank").to_list() == [4330]


def test_srun_per_node_torchrun_numbers_quiet_workers_by_node_block() -> None:
    # nothing names node 0's workers; node 1's table (rank 3 = local rank 1) fixes 2 workers per node
    text = SRUN_PER_NODE.replace("0: [default0]:step 1 loss 0.1372", "0: [default1]:loading shard 1\n1: [default0]:loading shard 2")
    ev = events_of(text)
    shard = {r["message"]: r["rank"] for r in ev.filter(pl.col("message").str.starts_with("loading")).iter_rows(named=True)}
    assert shard == {"loading shard 1": 1, "loading shard 2": 2}


def test_block_numbering_is_not_guessed_when_the_known_ranks_contradict_it() -> None:
    # local ranks up to 3 mean 4 workers per node, but rank 3 is local rank 1 on node 1: no block numbering
    text = SRUN_PER_NODE.replace("0: [default0]:step 1 loss 0.1372", "0: [default3]:loading shard 3")
    ev = events_of(text)
    assert ev.filter(pl.col("message") == "loading shard 3").get_column("rank").to_list() == [None]


def _worker(root: Path, run: str, local: int, stdout: list[str], stderr: list[str]) -> None:
    folder = root / run / "attempt_0" / str(local)
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text("\n".join(stdout) + "\n")
    (folder / "stderr.log").write_text("\n".join(stderr) + "\n")


def test_a_torchrun_worker_folder_gives_its_traceback_the_rank_its_stdout_names(tmp_path: Path) -> None:
    """torchrun --log-dir: the culprit's stderr.log names no rank; its stdout.log's NCCL start-up
    does, and the folder makes them one process (issue 17: lost from 64 ranks upward)."""
    tb = ["Traceback (most recent call last):", '  File "/home/u/train.py", line 9, in <module>', "ValueError: bad sample 17"]
    for node in range(9):  # 72 ranks on 9 nodes
        for local in range(8):
            r = node * 8 + local
            init = f"gpu{node:04d}:{4000 + r}:{4000 + r} [{local}] NCCL INFO comm 0xab rank {r} nranks 72 cudaDev {local} - Init COMPLETE"
            err = (
                tb
                if r == 67
                else [
                    f"[rank{r}]:[E1122 02:40:23.026531 {9000 + r} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout"
                ]
            )
            _worker(tmp_path, f"4242_{node:08x}", local, [init, "step 1 loss 0.5"], err)
    report = logsleuth.analyze(tmp_path)
    assert report.verdict.first_failure.rank == 67 and report.verdict.first_failure.node == "gpu0008"


def test_a_worker_folder_names_the_local_rank_and_one_node_makes_it_the_rank(tmp_path: Path) -> None:
    tb = ["Traceback (most recent call last):", '  File "/home/u/train.py", line 9, in <module>', "ValueError: bad sample 17"]
    for local in range(4):
        _worker(tmp_path, "4242_0a1b2c3d", local, ["step 1 loss 0.5"], tb if local == 2 else ["step 1 done"])
    events = events_for([str(tmp_path)])[0]
    tbs = events.filter(pl.col("kind") == "traceback")
    assert tbs.get_column("local_rank").to_list() == [2]
    assert logsleuth.analyze(tmp_path).verdict.first_failure.rank == 2


def test_srun_percent_t_output_files_are_ranks(tmp_path: Path) -> None:
    (tmp_path / "0.out").write_text("step 1 loss 0.5\n")
    (tmp_path / "5.out").write_text('Traceback (most recent call last):\n  File "/t.py", line 1, in <module>\nValueError: bad\n')
    assert logsleuth.analyze(tmp_path).verdict.first_failure.rank == 5
