"""Reading under a budget and with bounded memory (issues 15.1 and 18.4): the end of a file
is read first, slow, hung or silent inputs are given up at the deadline, and a log of one
line repeated millions of times keeps a bounded number of lines."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import logsleuth
from logsleuth import ingest

FAILED = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "/home/user/train.py", line 9, in <module>\n'
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
)


def _long_log(path: Path, blocks: int = 40) -> Path:
    with path.open("w") as fh:
        for block in range(blocks):
            fh.write("".join(f"epoch 1 | step {block * 2000 + s} | loss 1.23 | lr 3.0e-04\n" for s in range(2000)))
        fh.write(FAILED)
    return path


def _slow_reads(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Every block read takes ``seconds``: a slow network file system."""
    real = ingest._read_block

    def slow(stream: ingest._Reads, compressed: bool) -> tuple[bytes, str | None]:
        time.sleep(seconds)
        return real(stream, compressed)

    real_into = ingest._read_into  # a plain file's later blocks are read into buffers used again

    def slow_into(stream: ingest._Reads, buf: bytearray) -> tuple[int, str | None]:
        time.sleep(seconds)
        return real_into(stream, buf)

    monkeypatch.setattr(ingest, "BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(ingest, "TAIL_FIRST_BYTES", 64 << 10)
    monkeypatch.setattr(ingest, "_read_block", slow)
    monkeypatch.setattr(ingest, "_read_into", slow_into)


def test_the_end_of_a_file_is_read_first_so_a_budget_that_runs_out_still_sees_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _long_log(tmp_path / "slurm-7.out")  # about 4.6 MB: 70 blocks of 64 KiB, 0.05 s each
    _slow_reads(monkeypatch, 0.05)
    report = logsleuth.analyze(log, budget_s=1.0)
    assert report.partial and report.verdict.cause == "cuda_oom"
    problems = " ".join(report.inputs[0].problems)
    assert "time budget ran out" in problems and "read first" in problems and "estimated" in problems


def test_a_file_read_to_its_end_numbers_the_end_read_first_exactly(tmp_path: Path) -> None:
    log = _long_log(tmp_path / "slurm-8.out")
    plain = logsleuth.analyze(log)
    budgeted = logsleuth.analyze(log, budget_s=60)
    assert budgeted.inputs[0].problems == [] and not budgeted.partial
    assert [(e.file, e.line, e.text) for e in budgeted.verdict.evidence] == [(e.file, e.line, e.text) for e in plain.verdict.evidence]
    assert budgeted.inputs[0].lines == plain.inputs[0].lines == 80_003


def test_a_read_that_hangs_is_given_up_at_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _long_log(tmp_path / "slurm-9.out", blocks=2)

    def hangs(stream: ingest._Reads, compressed: bool) -> tuple[bytes, str | None]:
        time.sleep(30)
        return b"", None

    monkeypatch.setattr(ingest, "_read_block", hangs)
    started = time.monotonic()
    report = logsleuth.analyze(log, budget_s=1.0)
    assert time.monotonic() - started < 10  # the read would take 30 s: it was given up, not waited for
    assert report.partial and report.verdict.category != "none"
    assert "slow or hung" in " ".join(report.inputs[0].problems)


def test_silent_stdin_is_given_up_at_the_budget() -> None:
    read_end, write_end = os.pipe()  # nobody ever writes: a pipeline whose producer hangs
    stdin = os.fdopen(read_end, "rb")
    try:
        started = time.monotonic()
        report = logsleuth.analyze(["-"], stdin=stdin, budget_s=1.0)
        assert time.monotonic() - started < 10  # silent forever: given up, not waited for
    finally:
        os.close(write_end)  # the given-up read now ends, so the pipe can be closed
        time.sleep(0.1)
        stdin.close()
    assert report.verdict.category != "none" and "slow or hung" in " ".join(report.inputs[0].problems)


def test_one_line_repeated_many_times_keeps_a_bounded_number_of_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "MAX_SAME_SHAPE", 500)
    log = tmp_path / "rank0.log"
    with log.open("w") as fh:
        fh.write("".join(f"[rank{i % 64}]: RuntimeError: NCCL error in step {i}, remote process exited\n" for i in range(50_000)))
        fh.write(FAILED)
    got = ingest.ingest(ingest.expand([log]), ["RuntimeError", "Traceback", "OutOfMemory"])
    assert got.lines.height <= 500 + ingest.TAIL_LINES + 3
    assert got.lines.get_column("raw").str.contains("CUDA out of memory").any()  # the end is kept whatever its shape
    assert "counted, not kept" in " ".join(got.inputs[0].problems)
    assert got.inputs[0].lines == 50_003


def test_the_cap_on_all_kept_lines_holds_for_lines_that_all_differ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "MAX_KEPT_LINES", 1_000)
    log = tmp_path / "rank0.log"
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    with log.open("w") as fh:
        fh.write("".join(f"ERROR {words[i % 5]}{words[(i // 5) % 5]}{words[(i // 25) % 5]}{words[(i // 125) % 5]}\n" for i in range(3_000)))
    got = ingest.ingest(ingest.expand([log]), ["ERROR"])
    assert got.lines.height <= 1_000 + ingest.TAIL_LINES


def test_a_budget_that_runs_out_before_the_end_is_read_says_so_not_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _long_log(tmp_path / "slurm-10.out")
    real = ingest._tail_first

    def late(fh: object, size: int, state: object) -> object:
        time.sleep(0.6)  # the deadline passes before the end is read
        return real(fh, size, state)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "_tail_first", late)
    report = logsleuth.analyze(log, budget_s=0.5)
    assert report.partial and "time budget ran out" in " ".join(report.inputs[0].problems)
    assert "empty input" not in " ".join(report.inputs[0].problems)
