"""Tracebacks fold into one event per writer, also when ranks interleave."""

from __future__ import annotations

import polars as pl

from tests.conftest import events_of
from tests.data_torchrun import TORCHRUN_VALUEERROR


def _tracebacks(ev: pl.DataFrame) -> list[tuple]:
    return ev.filter(pl.col("kind") == "traceback").select("rank", "exc_type", "line", "block_start").rows()


def test_interleaved_rank_prefixed_tracebacks_fold_per_rank() -> None:
    ev = events_of(
        """
        [rank2]: Traceback (most recent call last):
        [rank1]: Traceback (most recent call last):
        [rank2]:   File "/home/user/train.py", line 42, in <module>
        [rank1]:   File "/home/user/train.py", line 42, in <module>
        [rank2]:     raise ValueError("bad sample 17")
        [rank2]: ValueError: bad sample 17
        [rank1]:     dist.all_reduce(t)
        [rank1]: RuntimeError: Connection closed by peer [10.0.0.2]:36000
        """
    )
    assert _tracebacks(ev) == [(2, "ValueError", 6, 1), (1, "RuntimeError", 8, 2)]
    assert ev.height == 2  # frames and code lines are folded away


def test_real_torchrun_output_gives_one_event_per_traceback() -> None:
    ev = events_of(TORCHRUN_VALUEERROR)
    tbs = ev.filter(pl.col("kind") == "traceback")
    assert tbs.select("rank", "exc_type").rows() == [
        (1, "ValueError"),
        (2, "RuntimeError"),
        (None, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"),
    ]
    assert tbs["message"][0] == "ValueError: bad sample 17 on purpose"
    assert "distributed_c10d.py:3252 in all_reduce" in tbs["detail"][1]


def test_chained_exceptions_give_one_event_per_link_naming_the_one_before() -> None:
    ev = events_of(
        """
        Traceback (most recent call last):
          File "load.py", line 3, in load
            return table[key]
        KeyError: 'shard-7'

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "train.py", line 9, in <module>
            load()
        RuntimeError: could not load shard-7
        """
    )
    tbs = ev.filter(pl.col("kind") == "traceback")
    assert tbs["exc_type"].to_list() == ["KeyError", "RuntimeError"]
    assert "chained after: KeyError" in tbs["detail"][1]


def test_traceback_cut_off_before_its_exception_line_still_becomes_an_event() -> None:
    ev = events_of(
        """
        [rank0]: Traceback (most recent call last):
        [rank0]:   File "train.py", line 9, in <module>
        """
    )
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert tb["rank"] == 0 and "cut off" in tb["message"]


def test_a_header_cut_short_where_the_file_ends_is_a_traceback_cut_off() -> None:
    ev = events_of(
        """
        All distributed processes registered. Starting with 32 processes
        [rank4]: Traceback (most recent call l
        """
    )
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (tb["rank"], tb["line"], tb["level"]) == (4, 2, "error") and "cut off" in tb["message"]
    assert tb["raw"] == "[rank4]: Traceback (most recent call l"


def test_a_cut_header_in_the_middle_of_a_log_is_not_a_traceback() -> None:
    ev = events_of(
        """
        [rank4]: Traceback (most rec
        [rank4]: step 10 loss 0.5
        """
    )
    assert "traceback" not in ev["kind"].to_list()


def test_a_paste_that_starts_inside_a_traceback_folds_from_its_first_frame() -> None:
    ev = events_of(
        "[2023-07-01 10:00:02] step 120 loss 0.41\n"
        "    main()\n"
        '  File "/home/user/run/main.py", line 372, in main\n'
        "    trainer.train()\n"
        '  File "/opt/venv/lib/python3.9/site-packages/torch/_tensor.py", line 487, in backward\n'
        "    torch.autograd.backward(\n"
    )
    tbs = ev.filter(pl.col("kind") == "traceback")
    assert tbs.height == 1
    assert "cut off" in tbs["message"][0] and "_tensor.py:487 in backward" in tbs["detail"][0]


def test_faulthandler_frames_without_a_header_are_not_a_traceback() -> None:
    ev = events_of(
        """
        Thread 0x00007f3a (most recent call first):
          File "/home/user/train.py", line 88 in step
        """
    )
    assert ev.filter(pl.col("kind") == "traceback").is_empty()


def test_nccl_line_inside_an_unprefixed_traceback_does_not_close_it() -> None:
    ev = events_of(
        """
        Traceback (most recent call last):
          File "train.py", line 9, in <module>
        node01:77:80 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE
        torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error
        """
    )
    assert ev.filter(pl.col("kind") == "traceback")["exc_type"].to_list() == ["torch.distributed.DistBackendError"]
    assert ev.filter(pl.col("kind") == "nccl_init").height == 1


def test_cpp_terminate_block_gives_the_what_line_its_exception_type() -> None:
    ev = events_of(
        """
        [rank3]:terminate called after throwing an instance of 'c10::DistBackendError'
        [rank3]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600059 milliseconds before timing out.
        """
    )
    what = ev.filter(pl.col("kind") == "watchdog_timeout").row(0, named=True)
    assert what["exc_type"] == "c10::DistBackendError"
    assert (what["rank"], what["op"], what["seq"], what["numel"], what["timeout_ms"], what["elapsed_ms"]) == (
        3,
        "ALLREDUCE",
        7,
        1048576,
        600000,
        600059,
    )


def test_torchrun_error_file_json_message_becomes_an_exception_event() -> None:
    # torch 1.9-1.12 log the worker's error file as indented JSON (errors/error_handler.py)
    ev = events_of(
        """
        ERROR:torch.distributed.elastic.multiprocessing.errors.error_handler:{
          "message": {
            "message": "RuntimeError: Permission denied",
            "extraInfo": {
        """
    )
    exc = ev.filter(pl.col("kind") == "exception").row(0, named=True)
    assert (exc["exc_type"], exc["message"], exc["level"], exc["line"]) == ("RuntimeError", "RuntimeError: Permission denied", "error", 3)


def test_a_traceback_escaped_into_one_line_is_a_traceback_event() -> None:
    # the error file's py_callstack (error_handler.py record_exception: json.dump of traceback.format_exc())
    ev = events_of(
        r"""
        {"message": {"message": "ValueError: bad \"x\"", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    return f(*args, **kwargs)\n  File \"/w/train.py\", line 12, in main\n    raise ValueError('bad \"x\"')\nValueError: bad \"x\"\n", "timestamp": "1692818123"}}}
        """
    )
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (tb["exc_type"], tb["message"], tb["frame"]) == ("ValueError", 'ValueError: bad "x"', "/w/train.py:12 in main")
    assert tb["detail"].startswith("frames: 2; last: /w/train.py:12 in main")


def test_an_escaped_traceback_cut_before_its_header_keeps_its_last_exception() -> None:
    # a paste that starts inside the error file's JSON: chained exceptions, the last one is the death
    ev = events_of(
        r"""
        \"/w/optim.py\", line 33, in _use_grad\n    ret = func(self)\nKeyError: 'lr'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"/w/train.py\", line 7, in step\n    opt.step()\nRuntimeError: The size of tensor a (8) must match the size of tensor b (2) at non-singleton dimension 0\n", "timestamp_us": 1692818123557766}
        """
    )
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert tb["exc_type"] == "RuntimeError" and tb["message"].endswith("at non-singleton dimension 0")


def test_an_escaped_traceback_without_its_exception_line_is_cut_off() -> None:
    ev = events_of(r"""{"py_callstack": "Traceback (most recent call last):\n  File \"/w/train.py\", line 3, in <module>\n    main()""")
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert tb["message"] == "(traceback cut off before its exception line)" and tb["exc_type"] is None


def test_an_escaped_newline_in_a_json_line_without_frames_is_no_traceback() -> None:
    ev = events_of(r"""{"level": "info", "msg": "epoch 3 done\nValueError: counted 0 bad samples\n"}""")
    assert ev.filter(pl.col("kind") == "traceback").is_empty()


def test_json_message_that_is_not_an_exception_stays_a_line() -> None:
    ev = events_of(
        """
        ERROR:some.logger:{
          "message": "training failed at step 7",
        """
    )
    assert ev.filter(pl.col("kind") == "exception").is_empty()


def test_a_source_line_that_lost_its_indent_to_another_writer_does_not_close_the_traceback() -> None:
    ev = events_of(
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", line 1400, in broadcast\n'
        "    [E ProcessGroupNCCL.cpp:821] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST)\n"
        "work = default_pg.broadcast([tensor], opts)\n"
        "RuntimeError: NCCL communicator was aborted on rank 2.\n"
    )
    tbs = ev.filter(pl.col("kind") == "traceback")
    assert tbs["exc_type"].to_list() == ["RuntimeError"]


def test_rays_remote_traceback_continues_the_callers_and_the_tasks_exception_closes_it() -> None:
    # ray.get raises RayTaskError(Cause) whose message is the task's traceback (ray/exceptions.py)
    ev = events_of(
        """
        Traceback (most recent call last):
          File "/home/user/driver.py", line 40, in <module>
            ray.get(refs)
          File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 919, in get_objects
            raise value.as_instanceof_cause()
        ray.exceptions.RayTaskError(KeyError): ray::Trainer.step() (pid=4120, ip=10.0.0.3, actor_id=ea59b6fd5af4141ec9bd37a50a000000)
          File "/home/user/trainer.py", line 17, in step
            lr = self.cfg["lr"]
        KeyError: 'lr'
        """
    )
    tbs = ev.filter(pl.col("kind") == "traceback")
    assert tbs.height == 1
    tb = tbs.row(0, named=True)
    assert (tb["exc_type"], tb["message"], tb["frame"]) == ("KeyError", "KeyError: 'lr'", "/home/user/trainer.py:17 in step")


def test_frames_at_the_margin_fold_like_indented_ones() -> None:
    # a paste that lost the indentation of its frames (a quote block stripped); Ray's line heads it
    ev = events_of(
        """
        ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=59411, ip=node01, actor_id=13ac9a317247fe69717aac0d02000000)
        File "/home/user/verl/verl/trainer/main_ppo.py", line 183, in run
            trainer.fit()
        File "/home/user/verl/verl/single_controller/ray/base.py", line 49, in func
            output = ray.get(output)
        ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
        \tclass_name: create_colocated_worker_cls.<locals>.WorkerDict
        """
    )
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (tb["exc_type"], tb["line"], tb["block_start"]) == ("ray.exceptions.ActorDiedError", 6, 1)
    assert tb["detail"].startswith("frames: 2; last: /home/user/verl/verl/single_controller/ray/base.py:49 in func")


def test_a_ray_traceback_cut_before_the_tasks_exception_keeps_rays_line() -> None:
    ev = events_of(
        """
        ray.exceptions.RayTaskError(NameError): ray::_RayTrainWorker__execute.get_next() (pid=12422, ip=10.0.0.3)
          File "/home/ray/anaconda3/lib/python3.8/site-packages/ray/train/_internal/utils.py", line 129, in discard_return_wrapper
            train_func(*args, **kwargs)
        """
    )
    tb = ev.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert tb["exc_type"] == "ray.exceptions.RayTaskError(NameError)" and tb["message"].startswith(
        "ray.exceptions.RayTaskError(NameError): ray::"
    )


def test_a_ray_exception_line_on_its_own_is_an_exception_event() -> None:
    ev = events_of("(TorchTrainer pid=811) ray.exceptions.RayTaskError(ValueError): ray::_Inner.train() (pid=811, ip=10.0.0.3)\n")
    exc = ev.filter(pl.col("kind") == "exception").row(0, named=True)
    assert exc["exc_type"] == "ray.exceptions.RayTaskError(ValueError)"
