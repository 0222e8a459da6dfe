"""What a new user hit in the first hour (issue 15): no all-clear from unread input, a bare path
is a path, typos in options are usage errors, and the terminal follows its real width."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import logsleuth
from logsleuth.cli import app
from logsleuth.report.render import render

_FAILED = "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"t.py\", line 3, in <module>\n[rank1]: KeyError: 'labels'\n"


def test_a_single_path_string_is_analysed_as_one_path(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1.out"
    log.write_text(_FAILED)
    assert logsleuth.analyze(str(log)).verdict.category == "user_code_error"
    assert logsleuth.analyze(log).verdict.category == "user_code_error"


def test_a_missing_input_never_reads_as_a_run_that_completed(tmp_path: Path) -> None:
    report = logsleuth.analyze([str(tmp_path / "missing.out")])
    assert report.verdict.category == "unknown"
    assert "could be read" in report.verdict.summary
    assert "completion" not in report.verdict.summary


def test_a_budget_that_runs_out_before_the_failure_gives_a_partial_unknown_not_none(tmp_path: Path) -> None:
    log = tmp_path / "slurm-2.out"
    with log.open("w") as fh:
        for block in range(40):
            fh.write("".join(f"epoch 1 | step {block * 20000 + s} | loss 1.23 | lr 3.0e-04\n" for s in range(20000)))
        fh.write(_FAILED)
    report = logsleuth.analyze([str(log)], budget_s=0.0)
    assert report.partial
    assert report.verdict.category != "none"
    assert json.loads(report.to_json())["partial"] is True


@pytest.mark.parametrize(
    "teardown",
    [
        "[2023-09-10 11:45:59,501] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 6294",  # DeepSpeed's launcher
        "Killing subprocess 2701979",  # torch.distributed.launch before torchrun
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 484376 closing signal SIGTERM",  # torchrun
    ],
)
def test_a_launcher_stopping_its_workers_is_a_failure_not_an_all_clear(tmp_path: Path, teardown: str) -> None:
    # a launcher stops running workers only when one failed or it was signalled; a job that ends well has none left
    log = tmp_path / "paste.log"
    log.write_text(f"Loading checkpoint shards:   0%|          | 0/7 [00:00<?, ?it/s]\n{teardown}\n")
    report = logsleuth.analyze(log)
    assert report.verdict.category == "unknown"
    assert any(teardown in e.text for e in report.verdict.evidence)


@pytest.mark.parametrize(
    "banner",
    [
        "W0826 18:36:00.171000 780964 torch/distributed/run.py:774] *****************************************\n"
        "W0826 18:36:00.171000 780964 torch/distributed/run.py:774] Setting OMP_NUM_THREADS environment variable for each process"
        " to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance"
        " in your application as needed.\n",
        "Warning: Permanently added 'algo-2,10.0.0.2' (ECDSA) to the list of known hosts.\n",
        "WARNING: Logging before InitGoogleLogging() is written to STDERR\n",
        "To avoid this warning pass in values for each of the problematic parameters or run `accelerate config`.\n",
    ],
)
def test_a_paste_of_start_up_banners_alone_is_not_a_run_that_completed(tmp_path: Path, banner: str) -> None:
    # every job prints these as it starts: they show the job starting, not at work, so "no failure" means nothing
    log = tmp_path / "paste.log"
    log.write_text(banner)
    report = logsleuth.analyze(log)
    assert report.verdict.category == "unknown"
    assert "at work" in report.verdict.summary


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "D:\\envs\\t\\lib\\site-packages\\torch\\cuda\\nccl.py:15: UserWarning: PyTorch is not compiled with NCCL support\n"
            "  warnings.warn('PyTorch is not compiled with NCCL support')\n",
            id="a Python warning a user asks about",
        ),
        pytest.param(
            "Epoch 10/10\n70/70 [==============================] - 7s 102ms/step - loss: 0.0907 - accuracy: 0.9739\n"
            "2020-06-08 05:30:15.889706: W tensorflow/core/kernels/data/generator_dataset_op.cc:103] Error occurred when"
            " finalizing GeneratorDataset iterator: Cancelled: Operation was cancelled\n",
            id="a last line whose own absl marker says warning",
        ),
        pytest.param(
            "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2\nInitializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2\n"
            "tensor(0.5245, device='cuda:1', grad_fn=<MseLossBackward0>)\ntensor(0.5649, device='cuda:2', grad_fn=<MseLossBackward0>)\n",
            id="printed loss tensors: the job at work",
        ),
        pytest.param(
            "   134217728      33554432     float     sum      -1   2666.0   50.35   94.40      0   2660.4   50.45   94.59      0\n"
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 84.8558\n",
            id="nccl-tests' summary after its last size",
        ),
        pytest.param(
            "(head, rank=0, pid=36870) [node01:0]:The average bandwidth of all_reduce with a 4.0GB payload (5 trials, 16 ranks):\n"
            "(head, rank=0, pid=36870) [node01:0]: algbw: 11.135 GBps (89.1 Gbps)\n"
            "(head, rank=0, pid=36870) [node01:0]: busbw: 20.878 GBps (167.0 Gbps)\n",
            id="a collective benchmark's measured bandwidth",
        ),
        pytest.param(
            "node02:146:146 [0] NCCL INFO comm 0x1a374220 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId a000 commId 0x6fbf - Init COMPLETE\n"
            "vLLM NCCL is successful!\nvLLM NCCL with cuda graph is successful!\n"
            "node02:146:205 [0] NCCL INFO [Service thread] Connection closed by localRank 0\n",
            id="vLLM's distributed sanity check passing",
        ),
    ],
)
def test_a_clean_run_with_alarming_looking_lines_reads_none(tmp_path: Path, text: str) -> None:
    log = tmp_path / "paste.log"
    log.write_text(text)
    assert logsleuth.analyze(log).verdict.category == "none"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param(
            '  File "/home/user/run/main.py", line 372, in main\n'
            "    train_result = trainer.train(resume_from_checkpoint=checkpoint)\n"
            '  File "/opt/venv/lib/python3.9/site-packages/accelerate/accelerator.py", line 1985, in backward\n'
            "    loss.backward(**kwargs)\n",
            "main.py",
            id="a traceback cut before its exception, which the classifier alone does not name",
        ),
        pytest.param(
            # srun --label prints "201: " for an empty line and a paste trims the space: no output that went on
            "201:\n201: Traceback (most recent call last):\n"
            '201:   File "/home/user/pretrain_gpt.py", line 124, in <module>\n'
            "202:\n202: node02:41368:41368 [2] init.cc:1234 NCCL WARN Frobnication failed\n249:\n",
            "201: Traceback",
            id="empty srun-labelled lines after an error",
        ),
        pytest.param(
            # dmlc-core (DGL, MXNet, TVM, XGBoost) prints "Stack trace:" and "[bt] (N)" frames under its error
            "dgl._ffi.base.DGLError: [02:00:36] /opt/dgl/src/rpc/rpc.cc:484: Check failed: l_id < local_data_shape[0] : \n"
            "Stack trace:\n"
            "  [bt] (0) /opt/venv/lib/python3.11/site-packages/dgl/libdgl.so(+0x8a4b80) [0x7f63c1aa4b80]\n"
            "  [bt] (1) /opt/venv/lib/python3.11/site-packages/dgl/libdgl.so(DGLFuncCall+0x48) [0x7f63c1916108]\n",
            "Check failed",
            id="an error followed only by its native backtrace",
        ),
        pytest.param(
            # bash reports a job that SIGTERM ended with strsignal's text on a line of its own
            "2021-09-02 21:49:27.319 | INFO     | yolox.core.launch:_distributed_worker:116 - Rank 1 initialization finished.\n"
            "[W ProcessGroupNCCL.cpp:1569] Rank 1 using best-guess GPU 1 to perform barrier as devices used by this process are"
            " currently unknown.\nTerminated\n",
            "Terminated",
            id="a shell's Terminated after the job's last line",
        ),
        pytest.param(
            # Open MPI's fatal error handler: the process aborts, whatever the error class says
            "[node01:07356] *** An error occurred in MPI_Allgather\n[node01:07356] *** reported by process [1740308481,1]\n"
            "[node01:07356] *** on communicator MPI_COMM_WORLD\n[node01:07356] *** MPI_ERR_OTHER: known error not in list\n"
            "[node01:07356] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n"
            "[node01:07356] ***    and potentially your MPI job)\n[1700554343.440970] [node02\n",
            "MPI_ERRORS_ARE_FATAL",
            id="MPI's fatal error handler aborting, the paste cut after it",
        ),
        pytest.param(
            "srun: job 8812 queued and waiting for resources\nsrun: job 8812 has been allocated resources\n"
            "slurmstepd: error: spank: x11.so: Frobnicating the display failed\n",
            "Frobnicating",
            id="a slurmstepd error that ends the paste",
        ),
    ],
)
def test_a_paste_that_ends_in_an_unexplained_failure_reads_unknown_with_its_lines(tmp_path: Path, text: str, shown: str) -> None:
    log = tmp_path / "paste.log"
    log.write_text(text)
    report = logsleuth.analyze(log)
    assert report.verdict.category == "unknown"
    assert any(shown in e.text for e in report.verdict.evidence)


def test_an_exception_message_that_runs_on_with_the_word_loss_is_not_progress_after_it(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text(
        '  File "/opt/conda/lib/python3.8/site-packages/torch/nn/parallel/distributed.py", line 1139, in forward\n'
        "    if torch.is_grad_enabled() and self.reducer._rebuild_buckets():\n"
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error"
        " indicates that your module has parameters that were not used in producing loss.\n"
        "making sure all `forward` function outputs participate in calculating loss. \n"
    )
    report = logsleuth.analyze(log)
    assert report.verdict.category == "ddp_usage_error"
    assert not any("handled" in n for n in report.notes)


def test_code_lines_of_another_ranks_unfolded_traceback_are_not_progress_after_an_error(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text(
        '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 947, in _optimizer_step\n'
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 has a total capacity of 79.32 GiB\n"
        "    self._optimizer_step(sub_group_id)\n"
        '  File "/opt/venv/lib/python3.10/site-packages/torch/optim/optimizer.py", line 385, in wrapper\n'
        "    self.optimizer.step()\n"
        "    out = func(*args, **kwargs)\n"
    )
    report = logsleuth.analyze(log)
    assert report.verdict.category == "cuda_oom"
    assert not any("handled" in n for n in report.notes)


def test_a_report_read_to_the_end_is_not_partial(tmp_path: Path) -> None:
    log = tmp_path / "slurm-3.out"
    log.write_text(_FAILED)
    assert logsleuth.analyze([str(log)]).partial is False


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{log}", "--fail-on", "cuda_oon"],
        ["events", "{log}", "--level", "eror"],
        ["events", "{log}", "--source", "ncc"],
    ],
)
def test_a_typo_in_an_option_value_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    log = tmp_path / "slurm-4.out"
    log.write_text(_FAILED)
    result = CliRunner().invoke(app, [a.format(log=log) for a in args])
    assert result.exit_code == 2


def test_fail_on_accepts_taxonomy_ids_finer_causes_and_any(tmp_path: Path) -> None:
    log = tmp_path / "slurm-5.out"
    log.write_text(_FAILED)
    for spec in ("user_code_error", "any", "cuda_oom,dataloader_shm"):
        assert CliRunner().invoke(app, ["analyze", str(log), "--fail-on", spec]).exit_code in (0, 1)


def test_the_terminal_report_follows_the_terminal_width(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "slurm-6.out"
    log.write_text(_FAILED)
    report = logsleuth.analyze([str(log)])
    monkeypatch.setenv("COLUMNS", "80")
    assert max(map(len, render(report, "terminal", color=False).splitlines())) <= 80
    monkeypatch.setenv("COLUMNS", "140")
    assert max(map(len, render(report, "terminal", color=False).splitlines())) > 100


def test_a_log_that_ends_while_a_connection_is_retried_is_not_a_run_that_completed(tmp_path: Path) -> None:
    log = tmp_path / "node1.log"
    log.write_text(
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [::ffff:10.0.0.9]:29500 (errno: 110 - Connection timed out).\n"
    )
    assert logsleuth.analyze(log).verdict.category != "none"
    log.write_text(
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [::ffff:10.0.0.9]:29500 (errno: 110 - Connection timed out).\n"
        "epoch 1 | step 10 | loss 1.9\ntraining done\n"
    )
    assert logsleuth.analyze(log).verdict.category == "none"  # it connected in the end and trained


_IB_PEER = """\
node02:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.12<0>
node01:123:123 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0>
node01:123:456 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.12<46322> with error 12, opcode 0, len 0, vendor err 129 (Send)
node01:124:457 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB: Got completion from peer 10.0.0.12<57516> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=0 vendor_err=129 req_type=Send localGid ::ffff:10.0.0.11 remoteGids::ffff:10.0.0.12 hca mlx5_0
node03:125:458 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.12<46324> with error 12, opcode 0, len 0, vendor err 129 (Send)
"""


def test_the_peer_every_infiniband_error_points_at_is_a_suspect_node(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    log.write_text(_IB_PEER)
    report = logsleuth.analyze(log)
    assert report.verdict.cause == "nccl_ib_error"
    peer = next(s for s in report.suspect_nodes if s.node == "node02")  # node02 printed no error itself
    assert "10.0.0.12" in peer.reasons[0] and "3 error line(s)" in peer.reasons[0]


def test_an_address_no_node_announced_is_shown_as_the_address(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    log.write_text("\n".join(line for line in _IB_PEER.splitlines() if "Using" not in line) + "\n")
    assert "10.0.0.12" in [s.node for s in logsleuth.analyze(log).suspect_nodes]


def test_a_rank_whose_progress_stopped_first_is_the_hung_one_before_a_time_limit(tmp_path: Path) -> None:
    lines = []
    for step in range(80, 101):
        for rank in range(4):
            if rank == 2 and step > 90:  # rank 2 hangs after step 90; the others run on until they block
                continue
            lines.append(f"[rank{rank}]: step {step} | loss 1.{step:03d} | lr 3.0e-04")
    lines.append("slurmstepd: error: *** JOB 77 ON node01 CANCELLED AT 2026-11-20T10:00:00 DUE TO TIME LIMIT ***")
    log = tmp_path / "slurm-77.out"
    log.write_text("\n".join(lines) + "\n")
    report = logsleuth.analyze(log)
    assert report.verdict.category == "slurm_time_limit"
    assert {r.rank: r.status for r in report.ranks}.get(2) == "hung"
    assert any("rank(s) 2 (step 90)" in n for n in report.notes)


def test_ranks_a_step_apart_are_not_a_hang(tmp_path: Path) -> None:
    lines = [f"[rank{rank}]: step {step} | loss 0.5" for step in range(1, 11) for rank in range(4) if not (rank == 3 and step == 10)]
    lines.append("slurmstepd: error: *** JOB 78 ON node01 CANCELLED AT 2026-11-20T10:00:00 DUE TO TIME LIMIT ***")
    log = tmp_path / "slurm-78.out"
    log.write_text("\n".join(lines) + "\n")
    report = logsleuth.analyze(log)
    assert "hung" not in {r.status for r in report.ranks} and not any("progress stopped first" in n for n in report.notes)


def test_one_culprit_everywhere_and_a_rank_no_line_places_stays_on_no_node() -> None:
    """Rank 5 fails; only ranks 0, 1 and 4 are tied to a node. The verdict, the rank table and the
    suspects agree on rank 5, and rank 5 is not guessed onto gpu-c02 (or any node)."""
    report = logsleuth.analyze(Path(__file__).parent / "data" / "unnamed-node.log")
    ff = report.verdict.first_failure
    culprits = [r for r in report.ranks if r.status == "culprit"]
    assert (ff.rank, ff.node) == (5, None) and [(r.rank, r.node) for r in culprits] == [(5, None)]
    assert {r.rank: r.node for r in report.ranks} == {0: "gpu-c01", 1: "gpu-c01", 2: None, 3: None, 4: "gpu-c02", 5: None, 6: None, 7: None}
    assert "gpu-c02" not in [s.node for s in report.suspect_nodes]


@pytest.mark.parametrize("say", ["initializing ddp", "Initializing distributed"], ids=["lightning-1.x", "lightning-1.6+"])
def test_a_log_that_ends_while_processes_are_still_joining_is_a_rendezvous_hang(tmp_path: Path, say: str) -> None:
    log = tmp_path / "slurm-5.out"
    log.write_text("GPU available: True, used: True\n" + "".join(f"{say}: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in (1, 2, 0, 3)))
    report = logsleuth.analyze(log)
    assert report.verdict.cause == "rendezvous_timeout" and "only 4 of 8 processes joined" in report.verdict.summary


def test_every_member_joined_in_its_own_file_is_no_hang(tmp_path: Path) -> None:
    for r in range(2):  # one file per rank, each naming only its own rank; the copy on the console is no collision
        (tmp_path / f"rank{r}.log").write_text(
            f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/2\nEpoch 0: 100%|██| 10/10 [00:01<00:00]\n"
        )
    (tmp_path / "console.log").write_text(
        "".join(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/2\n" for r in range(2)) + "done\n"
    )
    assert logsleuth.analyze(tmp_path).verdict.category == "none"


def test_a_global_rank_that_joins_twice_in_one_output_is_a_misconfigured_world(tmp_path: Path) -> None:
    log = tmp_path / "slurm-6.out"
    lines = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in (1, 1, 2, 2, 0, 0, 3, 3))
    log.write_text(lines + "RuntimeError: Connection reset by peer\n")
    report = logsleuth.analyze(log)
    assert "env_misconfigured" in [c.cause for c in report.candidates]


def test_duplicate_global_ranks_in_a_log_that_ends_joining_are_the_verdict(tmp_path: Path) -> None:
    log = tmp_path / "slurm-7.out"
    log.write_text("".join(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in (1, 1, 0, 0)))
    report = logsleuth.analyze(log)
    assert report.verdict.cause == "env_misconfigured"
    assert "never" in report.verdict.summary


@pytest.mark.parametrize(
    "say",
    [
        "Distributed init: rank 0/2 (file:///shared/run7/init)",
        "[2025-01-04 10:11:12,000] [INFO] [comm.py:702:mpi_discovery] Discovered MPI settings of world_rank=0, local_rank=0,"
        " world_size=2, master_addr=10.0.0.4, master_port=29500",
    ],
    ids=["script-init-line", "deepspeed-mpi-discovery"],
)
def test_every_process_started_as_rank_0_is_a_misconfigured_world(tmp_path: Path, say: str) -> None:
    log = tmp_path / "mpirun.out"
    log.write_text(f"{say}\n{say}\n")
    report = logsleuth.analyze(log)
    assert report.verdict.cause == "env_misconfigured"


def test_every_rank_announced_twice_is_a_restart_not_a_collision(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    attempt = "".join(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/2\n" for r in range(2)) + "Epoch 0: 100%|██| 10/10\n"
    log.write_text(attempt + attempt + "done\n")
    assert logsleuth.analyze(log).verdict.category == "none"
