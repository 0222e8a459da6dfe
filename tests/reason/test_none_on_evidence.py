"""`none` only on evidence: a failure no rule explains is `unknown` with its lines, and an
exception the process survived is a note, not the verdict (issue 13, point 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

import logsleuth

_PROGRESS = "\n".join(f"epoch 1 | step {s} | loss {2.0 - s / 100:.3f} | lr 3.0e-04" for s in range(10, 60, 10))


def _verdict(tmp_path: Path, text: str, name: str = "train.log") -> logsleuth.Report:
    (tmp_path / name).write_text(text + "\n", encoding="utf-8")
    return logsleuth.analyze([str(tmp_path / name)])


def test_nccl_error_returns_that_no_rule_explains_read_as_unknown_not_as_a_clean_run(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "gpu-a01:2081:2081 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                "gpu-a01:2081:2133 [0] NCCL INFO misc/socket.cc:484 -> 2",
                "gpu-a01:2081:2133 [0] NCCL INFO bootstrap.cc:76 -> 2",
                "gpu-a01:2081:2133 [0] NCCL INFO init.cc:1234 -> 2",
            ]
        ),
    )
    assert report.verdict.category == "unknown"
    assert any("-> 2" in e.text for e in report.verdict.evidence)


@pytest.mark.parametrize(
    "line",
    [
        "Process finished with exit code 1",
        "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 2.",
        "job exited with code 139",
        "exit status 1",
    ],
)
def test_a_non_zero_exit_status_is_a_failure(tmp_path: Path, line: str) -> None:
    report = _verdict(tmp_path, f"{_PROGRESS}\n{line}")
    assert report.verdict.category != "none"


def test_an_exit_status_of_zero_is_not_a_failure(tmp_path: Path) -> None:
    report = _verdict(tmp_path, f"{_PROGRESS}\ntraining done\nProcess finished with exit code 0")
    assert report.verdict.category == "none"


def test_an_allocator_abort_is_a_failure(tmp_path: Path) -> None:
    report = _verdict(tmp_path, f"{_PROGRESS}\nmemory allocation of 34359738368 bytes failed")
    assert report.verdict.category != "none"
    assert any("memory allocation of" in e.text for e in report.verdict.evidence)


def test_a_log_cut_right_after_an_error_line_is_not_an_all_clear(tmp_path: Path) -> None:
    report = _verdict(tmp_path, f"{_PROGRESS}\nERROR: could not open shard 17 of the training set")
    assert report.verdict.category != "none"


def test_a_traceback_the_process_survived_is_a_note_and_the_run_reads_clean(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                _PROGRESS,
                "Traceback (most recent call last):",
                '  File "/home/user/proj/data.py", line 88, in __getitem__',
                "    img = Image.open(path)",
                "OSError: image file is truncated (5 bytes not processed)",
                "skipping sample 20391",
                *(f"epoch 1 | step {s} | loss 1.2 | lr 3.0e-04" for s in range(60, 90, 10)),
                "Training complete.",
            ]
        ),
    )
    assert report.verdict.category == "none"
    assert any("handled" in n for n in report.notes)


def test_a_ranked_traceback_followed_by_progress_of_the_same_rank_is_handled(tmp_path: Path) -> None:
    lines = [f"[rank{r}]: epoch 1 step 10 loss 1.5" for r in (0, 1)]
    lines += [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/home/user/proj/train.py", line 40, in log_metrics',
        "[rank1]:     wandb.log(metrics)",
        "[rank1]: ConnectionError: wandb upload timed out",
    ]
    lines += [f"[rank{r}]: epoch 1 step 20 loss 1.4" for r in (0, 1)]
    report = _verdict(tmp_path, "\n".join(lines))
    assert report.verdict.category == "none"


def test_an_unranked_traceback_in_a_multi_rank_log_is_not_taken_for_a_handled_one(tmp_path: Path) -> None:
    lines = [f"[rank{r}]: epoch 1 step 10 loss 1.5" for r in (0, 1)]
    lines += [
        "Traceback (most recent call last):",
        '  File "/home/user/proj/train.py", line 61, in <module>',
        "    batch = next(it)",
        "KeyError: 'labels'",
    ]
    lines += ["[rank0]: epoch 1 step 20 loss 1.4"]
    report = _verdict(tmp_path, "\n".join(lines))
    assert report.verdict.category != "none"


def test_a_traceback_is_not_handled_when_the_same_rank_then_dies(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                _PROGRESS,
                "Traceback (most recent call last):",
                '  File "/home/user/proj/train.py", line 61, in <module>',
                "    batch = next(it)",
                "KeyError: 'labels'",
            ]
        ),
    )
    assert report.verdict.category == "user_code_error"


def test_an_exception_line_pasted_with_its_message_continuation_is_not_a_handled_exception(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "RuntimeError: CUDA error: invalid device ordinal\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    )
    assert report.verdict.category == "device_misassignment"


def test_a_weak_rule_on_a_failed_job_is_not_turned_into_an_all_clear_by_the_classifier(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "C:\\Python39\\lib\\site-packages\\torch\\distributed\\distributed_c10d.py:613: UserWarning: Attempted to get default "
        "timeout for nccl backend, but NCCL support is not compiled\n"
        '  warnings.warn("Attempted to get default timeout for nccl backend, but NCCL support is not compiled")',
    )
    assert report.verdict.category == "backend_unavailable"


def test_a_traceback_cut_before_its_exception_line_is_a_failure(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                _PROGRESS,
                "Traceback (most recent call last):",
                '  File "/home/user/proj/train.py", line 61, in <module>',
                "    main()",
                '  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 1009, in _new_process_group_helper',
                "    backend_class = ProcessGroupNCCL(backend_prefix_store, group_rank, group_size, pg_options)",
            ]
        ),
    )
    assert report.verdict.category != "none"


def test_a_survived_exception_teed_to_the_ranks_stderr_file_is_still_survived(tmp_path: Path) -> None:
    tb = [
        "Traceback (most recent call last):",
        '  File "/home/user/jobs/train.py", line 264, in main',
        '    raise ConnectionError("metrics server 10.0.0.5:8125 not reachable")',
        "ConnectionError: metrics server 10.0.0.5:8125 not reachable",
    ]
    steps = [f"step {s} loss 0.13 (0.080s/step)" for s in (1, 5, 10)] + ["training done: 10 steps in 1.3s"]
    console = [f"[default0]:{line}" for line in tb + steps] + [f"[default1]:{line}" for line in steps]
    (tmp_path / "console.log").write_text("\n".join(console) + "\n")
    rank0 = tmp_path / "logs" / "run_x" / "attempt_0" / "0"
    rank0.mkdir(parents=True)
    (rank0 / "stderr.log").write_text("\n".join(tb) + "\n")
    (rank0 / "stdout.log").write_text("\n".join(steps) + "\n")
    report = logsleuth.analyze([str(tmp_path / "console.log"), str(rank0 / "stderr.log"), str(rank0 / "stdout.log")])
    assert report.verdict.category == "none"


def test_an_nccl_error_pytorch_reports_is_a_failure_even_mid_log(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "Collective WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) raised the following"
                " async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
                "Last error:",
                "",
                "Exception raised from checkForNCCLErrorsInternal at /src/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1987",
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57",
            ]
        ),
    )
    assert report.verdict.category != "none"
    assert any("NCCL error" in e.text or "ncclSystemError" in e.text for e in report.verdict.evidence)


def test_the_launchers_error_record_is_a_failure_though_the_log_goes_on(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "ERROR:torch.distributed.elastic.multiprocessing.errors.error_handler:{",
                '  "message": {',
                '    "message": "OverflowError: cannot convert float infinity to integer",',
                '    "extraInfo": {',
                '      "py_callstack": "Traceback (most recent call last): ...",',
                '      "timestamp": "1700000000"',
                "    }",
                "  }",
                "}",
            ]
        ),
    )
    assert report.verdict.category != "none"


def test_the_error_files_escaped_traceback_and_a_tee_header_without_a_role_are_a_failure(tmp_path: Path) -> None:
    # the tail of torchelastic's error-file JSON (its py_callstack, newlines escaped), then rank 4's
    # own traceback under torchrun's "[4]:" header (an empty --role)
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                r"\"/w/torch/optim/optimizer.py\", line 33, in _use_grad\n    ret = func(self, *args, **kwargs)\n"
                r"  File \"/w/torch/optim/adamw.py\", line 502, in _multi_tensor_adamw\n    torch._foreach_add_(exp_avgs, grads)\n"
                r"RuntimeError: The size of tensor a (8192384) must match the size of tensor b (262156288) at non-singleton dimension 0\n"
                r'", "timestamp_us": 1692818123557766}',
                '[4]:  File "/usr/lib/python3.8/runpy.py", line 194, in _run_module_as_main',
                "[4]:    return _run_code(code, main_globals, None,",
            ]
        ),
    )
    assert report.verdict.category == "user_code_error"
    assert any("The size of tensor a" in e.text for e in report.verdict.evidence)


def test_an_nccl_warn_no_rule_knows_is_a_failure(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "gpu-a01:2081:2081 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                "gpu-a01:2081:2133 [0] misc/frobnicate.cc:88 NCCL WARN Could not frobnicate the widget 3",
                *(f"epoch 1 | step {s} | loss 1.2" for s in (10, 20)),
            ]
        ),
    )
    assert report.verdict.category == "unknown"
    assert any("frobnicate" in e.text for e in report.verdict.evidence)


def test_an_nccl_warn_known_to_be_harmless_leaves_a_clean_run_clean(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "gpu-a01:2081:2081 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                "gpu-a01:2081:2081 [0] NCCL WARN Failed to open libibverbs.so[.1]",
                "gpu-a01:2081:2081 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
                _PROGRESS,
                "training done",
            ]
        ),
    )
    assert report.verdict.category == "none"


def test_a_log_that_ends_while_a_connection_is_still_retried_names_the_unreachable_peer(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            f"gpu-e02:{pid}:{pid + 40} [{d}] NCCL INFO Call to connect returned Connection refused, retrying"
            for pid, d in ((31, 0), (33, 1)) * 4
        ),
    )
    assert report.verdict.category == "master_unreachable"


def test_an_address_the_store_cannot_use_is_no_retry_and_a_clean_run_stays_clean(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "GPU available: True (cuda), used: True",
                *["[W socket.cpp:601] [c10d] The client socket has failed to connect to [gpu-n01]:29512 (errno: 22 - Invalid argument)."]
                * 3,
            ]
        ),
    )
    assert report.verdict.category == "none"


def test_a_warning_wrapped_as_an_error_by_a_log_collector_is_still_a_warning(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "2025-03-02 10:00:01.250000+00:00 Error From gpu-n01: [W socket.cpp:436] [c10d] The server socket cannot be initialized"
        " on [::]:29512 (errno: 97 - Address family not supported by protocol).",
    )
    assert report.verdict.category == "none"


def test_tracebacks_cut_after_the_ranks_timeouts_are_theirs_not_an_unknown_failure(tmp_path: Path) -> None:
    watchdog = (
        "[E ProcessGroupNCCL.cpp:828] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=512,"
        " OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800950 milliseconds before timing out."
    )
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                *(watchdog.format(r=r) for r in (1, 2)),
                "Traceback (most recent call last):",
                '  File "/home/user/run/train.py", line 6, in <module>',
                "Traceback (most recent call last):",
                '  File "/home/user/run/train.py", line 6, in <module>',
                "    trainer.train()",
            ]
        ),
    )
    assert report.verdict.category == "collective_timeout"


def test_a_workers_traceback_is_not_survived_by_another_processes_progress(tmp_path: Path) -> None:
    # Ray names the worker ("(Worker pid=N)"); the driver's progress bar after it is another process
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "(RolloutWorker pid=7301) Traceback (most recent call last):",
                '(RolloutWorker pid=7301)   File "/opt/venv/lib/python3.11/site-packages/engine/runner.py", line 88, in step',
                "(RolloutWorker pid=7301)     out = self.model(batch)",
                "(RolloutWorker pid=7301) RuntimeError: CUDA error: an illegal memory access was encountered",
                "Generating: 100%|██████████| 64/64 [00:09<00:00,  6.71it/s]",
            ]
        ),
    )
    assert report.verdict.category == "cuda_error"


_SET_UP = "\n".join(
    [
        "node01:5771:5771 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "node01:5771:5771 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "NCCL version 2.21.5+cuda12.4",
        "node01:5771:5783 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>",
        "node01:5771:5783 [0] NCCL INFO ncclCommInitRank comm 0x55d9607ee240 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 61000",
    ]
)


def test_a_log_of_set_up_lines_alone_is_not_an_all_clear(tmp_path: Path) -> None:
    """A paste that stops after NCCL's initialisation shows no failure, but nothing ran either."""
    report = _verdict(tmp_path, _SET_UP)
    assert report.verdict.category == "unknown"
    assert "completion" not in report.verdict.summary and "set-up lines" in report.verdict.summary
    assert report.verdict.first_failure.rank is None
    assert [e.line for e in report.verdict.evidence] == [5]  # the last line read, where the log stops
    assert report.candidates[0].category == "unknown"


@pytest.mark.parametrize(
    "after",
    [
        _PROGRESS,  # training went on
        "UserWarning: Rank 0 using GPU 0 to perform barrier as devices used by this process are currently unknown.",  # the alarming line
        '{"name": "torchelastic.worker.status.SUCCEEDED", "source": "WORKER", "timestamp": 0, "metadata": {"global_rank": 0}}',
        "2022-09-24 15:05:28,102 - mmdet - INFO - Epoch [1][20/3953]     lr: 1.000e-05, eta: 2 days, 2:41:27, time: 1.283",
    ],
)
def test_set_up_lines_followed_by_work_or_an_ending_read_clean(tmp_path: Path, after: str) -> None:
    assert _verdict(tmp_path, _SET_UP + "\n" + after).verdict.category == "none"


def test_a_ray_actor_death_alone_is_a_peer_failure_not_a_clean_run(tmp_path: Path) -> None:
    # the driver's view of a dead actor, its frames pasted at the margin: the death's cause is not in the log
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                'File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 919, in get_objects',
                "    raise value.as_instanceof_cause()",
                "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=59411, ip=node01, actor_id=13ac9a317247fe69717aac0d02000000)",
                'File "/home/user/verl/verl/single_controller/ray/base.py", line 49, in func',
                "    output = ray.get(output)",
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
                "\tclass_name: create_colocated_worker_",
            ]
        ),
    )
    assert report.verdict.category == "peer_failure"


def test_rays_memory_monitor_is_host_memory_not_gpu_memory(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "Traceback (most recent call last):",
                '  File "/home/user/driver.py", line 40, in <module>',
                "    ray.get(refs)",
                "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
                "Memory on the node (IP: 10.0.0.5, ID: 15378de0f928) where the task (task ID: ffff, name=rollout, pid=909447, memory used=31.2GB) was running was 59.1GB / 62.0GB (0.953), which exceeds the memory usage threshold of 0.95.",
            ]
        ),
    )
    assert report.verdict.category == "host_oom"


def test_a_paste_of_an_unknown_nccl_warn_and_a_cut_traceback_header_is_not_a_clean_run(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "\n".join(
            [
                "graph/topo.h:230 NCCL WARN Could not find NET with id 0",
                "distributed_backend=nccl",
                "All distributed processes registered. Starting with 32 processes",
                "[rank4]: Traceback (most recent call l",
            ]
        ),
    )
    assert report.verdict.category == "unknown"


def test_an_nccl_warn_without_its_prefix_alone_is_not_a_clean_run(tmp_path: Path) -> None:
    report = _verdict(tmp_path, f"{_PROGRESS}\ngraph/topo.h:230 NCCL WARN Could not find NET with id 0\nepoch 1 | step 60 | loss 1.2")
    assert report.verdict.category != "none"


def test_a_c10_stack_dump_alone_is_not_a_clean_run(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        f"{_PROGRESS}\n"
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f1e10143d87 in /opt/venv/lib/libc10.so)\n"
        "frame #1: <unknown function> + 0xe5aa84 (0x1554e9aa1a84 in /opt/venv/lib/libtorch_cuda.so)\n"
        f"{_PROGRESS}",
    )
    assert report.verdict.category != "none"


def test_a_watchdog_stack_from_check_timeout_reads_as_a_collective_timeout(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x1554e8b12f86 in /opt/venv/lib/libc10.so)\n"
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >)"
        " + 0x1d2 (0x1554e9e0f8f2 in /opt/venv/lib/libtorch_cuda.so)\n"
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x1554e9e16333 in /opt/venv/lib/libtorch_cuda.so)\n"
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x1554e9e1871c in /opt/venv/lib/libtorch_cuda.so)\n"
        "\n"
        "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x1554e8b12f86 in /opt/venv/lib/libc10.so)",
    )
    assert report.verdict.category == "collective_timeout"


_RAY_DEATH = (
    "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check"
    " the logs for the dead worker. RayTask ID: fffffffffffffffff5729b4c48481e2a8ef1526f02000000 Worker ID: 39a9e9de Node ID: 1f94cb55"
    " Worker IP address: 10.0.0.2 Worker port: 10005 Worker PID: 833 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker"
    " unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed"
    " by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due"
    " to SIGSEGV or other unexpected errors. [repeated 8x across cluster]"
)


def test_the_watchdog_timeout_outranks_the_ray_worker_death_it_caused(tmp_path: Path) -> None:
    report = _verdict(
        tmp_path,
        f"{_RAY_DEATH}\n(WorkerDict pid=833, ip=10.0.0.1) [rank62]:[E809 14:59:33.656957424 ProcessGroupNCCL.cpp:629] [Rank 62]"
        " Watchdog caught collective oper",
    )
    assert report.verdict.category == "collective_timeout"


def test_a_ray_worker_death_alone_is_a_dead_peer_not_a_segfault_or_a_clean_run(tmp_path: Path) -> None:
    """Ray's raylet saw a worker vanish and lists guesses (SIGSEGV among them): the worker's own log says why."""
    report = _verdict(tmp_path, _RAY_DEATH)
    assert report.verdict.category == "peer_failure"
    assert "PER009" in report.candidates[0].rules
