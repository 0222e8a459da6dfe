"""Stalled collectives: the ranks that never arrived, who fired first, and desyncs.

Lines are the exact formats of ProcessGroupNCCL.cpp (PyTorch 2.6+: "failure
detected by watchdog at work sequence id", the heartbeat monitor's "Received a
dump signal due to a collective timeout from  rank N", with its double space)
under ``srun --label``, one task per rank.
"""

from __future__ import annotations

import logsleuth

WD = (
    "{r:2d}: [rank{r}]:[E808 04:21:41.{us:09d} ProcessGroupNCCL.cpp:655] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600{r:03d} milliseconds before timing out."
)
STATUS = (
    "{r:2d}: [rank{r}]:[E808 04:21:41.{us:09d} ProcessGroupNCCL.cpp:2299] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure detected by "
    "watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {done}"
)
FIRST = "{r:2d}: [rank{r}]:[E808 04:21:41.{us:09d} ProcessGroupNCCL.cpp:2147] [PG ID 0 PG GUID 0(default_pg) Rank {r}] First PG on this rank to signal dumping."
NOTIFIED = (
    "{r:2d}: [rank{r}]:[E808 04:21:42.{us:09d} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Received a dump signal due "
    "to a collective timeout from  rank {src} and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last completed "
    "NCCL work: {enq}.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of "
    "collectives is not same for all ranks or the scheduled collective, for some reason, didn't run."
)


def frontier_job() -> str:
    """16 ranks on 2 nodes: node frontier07200 (ranks 0-7) stopped issuing collectives at 166."""
    lines = [f"{r:2d}: rank {r} step 4000 loss 2.31" for r in range(16)]
    for r in range(8, 16):
        lines.append(WD.format(r=r, us=160918398 + r, seq=167, op="ALLREDUCE", n=1))
        lines.append(STATUS.format(r=r, us=161005534 + r, seq=167, done=166))
    lines.append(FIRST.format(r=10, us=161045406))
    lines += [NOTIFIED.format(r=r, us=r, src=10, enq=166) for r in (0, 2)]
    lines += [
        "srun: error: frontier07210: tasks 8-12,14-15: Aborted (core dumped)",
        "srun: error: frontier07210: task 13: Aborted (core dumped)",
        "srun: error: frontier07200: tasks 0-7: Killed",
    ]
    return "\n".join(lines) + "\n"


def test_ranks_behind_on_seqnum_are_hung_and_the_first_of_them_is_the_first_failure(write) -> None:
    report = logsleuth.analyze([write("slurm-8080.out", frontier_job())])
    v = report.verdict
    assert v.category == "collective_timeout"
    assert (v.first_failure.rank, v.first_failure.node) == (0, "frontier07200")
    hang = report.hang
    assert hang is not None
    assert (hang["seq"], hang["op"], hang["pg"]) == (167, "ALLREDUCE", "0")
    assert hang["hung"] == list(range(8)) and hang["timed_out"] == list(range(8, 16))
    assert hang["first_fired"] == [10] and hang["behind"] == {"0": 166, "2": 166}
    status = {r.rank: r.status for r in report.ranks}
    assert status[0] == "culprit" and all(status[r] == "hung" for r in range(1, 8))
    assert all(status[r] == "victim" for r in range(8, 16))
    assert "never reached it" in v.summary and "SeqNum 166" in v.summary
    assert [s.node for s in report.suspect_nodes][0] == "frontier07200"


def test_the_watchdogs_abort_of_a_victim_is_not_a_crash(write) -> None:
    # "Aborted (core dumped)" of ranks 8-15 is their watchdog taking the process down
    report = logsleuth.analyze([write("slurm-8080.out", frontier_job())])
    assert "crash_signal" not in [c.cause for c in report.candidates]


def test_different_ops_at_one_seqnum_are_a_desync_naming_the_odd_rank(write) -> None:
    lines = [WD.format(r=r, us=r, seq=12, op="ALLREDUCE", n=4096) for r in range(3)]
    lines.append(WD.format(r=3, us=3, seq=12, op="BROADCAST", n=4096))
    report = logsleuth.analyze([write("slurm-1.out", "\n".join(lines) + "\n")])
    v = report.verdict
    assert v.category == "collective_mismatch" and v.first_failure.rank == 3
    assert report.hang is not None and "BROADCAST on rank(s) 3" in (report.hang["mismatch"] or "")


def test_everyone_timing_out_names_no_hung_rank_but_the_first_watchdog(write) -> None:
    lines = [WD.format(r=r, us=900 - r, seq=808, op="ALLREDUCE", n=9801523) for r in (1, 0, 2, 3)]
    report = logsleuth.analyze([write("train.log", "\n".join(lines) + "\n")])
    v = report.verdict
    assert v.category == "collective_timeout"
    assert report.hang is not None and report.hang["hung"] == [] and report.hang["timed_out"] == [0, 1, 2, 3]
    assert v.first_failure.rank == 1  # the first line, and all stamps share the second


def test_monitored_barrier_names_the_rank_that_did_not_arrive(write) -> None:
    # gloo's monitored_barrier (ProcessGroupGloo.cpp) on rank 0; rank 1 printed only its start-up line
    log = (
        "0: [rank0]: Traceback (most recent call last):\n"
        '0: [rank0]:   File "/home/user/train.py", line 88, in <module>\n'
        "0: [rank0]:     dist.monitored_barrier(timeout=timedelta(seconds=1800))\n"
        "0: [rank0]: RuntimeError: Rank 1 failed to pass monitoredBarrier in 1800000 ms\n"
        "1: loading shard 1 of 2\n"
        "srun: error: node01: task 0: Exited with exit code 1\n"
    )
    report = logsleuth.analyze([write("slurm-7.out", log)])
    assert report.verdict.first_failure.rank == 1
    assert report.hang is not None and report.hang["hung"] == [1]
    assert {r.rank: r.status for r in report.ranks} == {0: "victim", 1: "culprit"}


def test_silent_ranks_outnumbering_the_timed_out_are_not_all_called_hung(write) -> None:
    # 8 ranks initialised; only ranks 0 and 1 printed their timeout (a log cut short, or the other
    # nodes' files not given): without other evidence the 6 silent ranks are not named hung
    init = (
        "gpu0{n}:{pid}:{pid} [0] NCCL INFO ncclCommInitRank comm 0x55d4a3c0 rank {r} nranks 8 cudaDev 0 nvmlDev 0 busId 1000 "
        "commId 0x7f3a9b - Init COMPLETE"
    )
    lines = [init.format(n=r // 4 + 1, pid=1000 + r, r=r) for r in range(8)]
    lines += [WD.format(r=r, us=r, seq=9, op="ALLREDUCE", n=1) for r in (0, 1)]
    report = logsleuth.analyze([write("slurm-3.out", "\n".join(lines) + "\n")])
    assert report.hang is not None and report.hang["hung"] == [] and report.hang["timed_out"] == [0, 1]
    assert report.verdict.category == "collective_timeout"


def test_a_rank_waiting_in_the_store_for_a_new_group_while_the_others_wait_in_a_collective_is_a_mismatch(tmp_path) -> None:
    barrier = (
        "[rank{r}]:[E305 11:02:07.512000000 ProcessGroupGloo.cpp:143] Rank {r} successfully reached monitoredBarrier,"
        " but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank."
    )
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4301, in new_group',
        "[rank0]:     pg, pg_store = _new_process_group_helper(",
        "[rank0]: torch.distributed.DistStoreError: wait timeout after 600000ms, keys: //worker/attempt_0/default_pg/0//5//cuda//pg_wrapper:5/0/1",
        *(barrier.format(r=r) for r in (1, 2)),
    ]
    for r in (1, 2):
        lines += [
            f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/home/user/proj/train.py", line 210, in <module>',
            f'[rank{r}]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2421, in broadcast',
            f"[rank{r}]:     work = group.broadcast([tensor], opts)",
            f"[rank{r}]: RuntimeError: Rank {r} successfully reached monitoredBarrier, but received errors while waiting for send/recv"
            " from rank 0. Please check rank 0 logs for faulty rank.",
            f"[rank{r}]:  Original exception: ",
            f"[rank{r}]: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] Timed out waiting 600000ms for send operation to complete",
        ]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    report = logsleuth.analyze(log)
    assert report.verdict.cause == "collective_mismatch"
    assert report.verdict.first_failure.rank == 0


def test_ranks_one_seqnum_apart_are_stuck_in_one_collective_not_a_desync(write) -> None:
    # rank 0 (the root) finished broadcast 1 and waits in allgather 2; rank 1 never finished receiving 1
    lines = [WD.format(r=1, us=1, seq=1, op="BROADCAST", n=5056), WD.format(r=0, us=2, seq=2, op="ALLGATHER", n=1)]
    report = logsleuth.analyze([write("train.log", "\n".join(lines) + "\n")])
    assert report.verdict.category == "collective_timeout"
    assert report.hang is not None and report.hang["mismatch"] is None


def test_ranks_far_apart_on_seqnum_are_still_a_desync(write) -> None:
    lines = [WD.format(r=r, us=r, seq=40, op="ALLREDUCE", n=4096) for r in range(3)]
    lines.append(WD.format(r=3, us=3, seq=44, op="ALLREDUCE", n=4096))
    report = logsleuth.analyze([write("slurm-2.out", "\n".join(lines) + "\n")])
    assert report.hang is not None and "different collectives" in (report.hang["mismatch"] or "")
