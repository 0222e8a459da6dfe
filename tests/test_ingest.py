"""Ingest: every line keeps its file and line number; bad input becomes a problem, never a traceback."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from logsleuth import ingest

KW = ["error", "Error"]


def _read(*paths: str | Path, stdin: bytes | None = None) -> ingest.Ingested:
    return ingest.ingest(ingest.expand([str(p) for p in paths]), KW, stdin=io.BytesIO(stdin) if stdin is not None else None)


def _problems(got: ingest.Ingested) -> dict[str, list[str]]:
    return {Path(i.file).name: i.problems for i in got.inputs}


def test_line_numbers_are_one_based_and_count_blank_lines(write) -> None:
    path = write("a.log", "ok\n\nthird has error\n")
    got = _read(path)
    assert got.lines.filter(got.lines["raw"] == "third has error")["line"].to_list() == [3]
    assert got.inputs[0].lines == 3


def test_prefilter_drops_benign_lines_but_keeps_the_tail_of_each_file(write, monkeypatch) -> None:
    monkeypatch.setattr(ingest, "TAIL_LINES", 2)
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 64)  # many blocks: the tail must span them
    body = "".join(f"step {i} loss 0.1\n" for i in range(50)) + "RuntimeError: x\n" + "".join(f"step {i}\n" for i in range(50, 60))
    got = _read(write("a.log", body))
    assert got.lines["line"].to_list() == [51, 60, 61]
    assert got.inputs[0].lines == 61


def test_crlf_ansi_and_nul_are_cleaned(write) -> None:
    got = _read(write("a.log", b"\x1b[31mRuntimeError\x1b[0m: boom\r\nx\x00y error\r\n"))
    assert got.lines["raw"].to_list() == ["RuntimeError: boom", "xy error"]


def test_invalid_utf8_is_replaced_and_reported(write) -> None:
    got = _read(write("a.log", b"bad \xff\xfe error\n"))
    assert got.lines["raw"][0] == "bad \ufffd\ufffd error"
    assert any("invalid UTF-8" in p for p in got.inputs[0].problems)


def test_gzip_and_truncated_gzip(write) -> None:
    data = gzip.compress(b"".join(b"line %d error\n" % i for i in range(2000)))
    whole = _read(write("a.log.gz", data))
    assert whole.inputs[0].lines == 2000 and not whole.inputs[0].problems
    cut = _read(write("b.log.gz", data[: len(data) // 2]))
    assert 0 < cut.inputs[0].lines < 2000
    assert any("truncated gzip" in p for p in cut.inputs[0].problems)


def test_corrupt_gzip_is_a_problem_not_an_exception(write) -> None:
    got = _read(write("c.log.gz", b"\x1f\x8b\x08\x00garbage-not-deflate" * 10))
    assert got.inputs[0].problems and got.lines.is_empty()


def test_huge_line_is_cut_and_reported_and_later_lines_keep_their_numbers(write, monkeypatch) -> None:
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 1 << 16)
    big = "error " + "x" * (ingest.MAX_LINE_CHARS * 6)
    got = _read(write("a.log", f"first error\n{big}\nlast error\n"))
    assert got.lines["line"].to_list() == [1, 2, 3]
    assert len(got.lines["raw"][1]) == ingest.MAX_LINE_CHARS
    assert any("cut" in p for p in got.inputs[0].problems)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda w: w("bin.out", bytes(range(256)) * 100), "binary file"),
        (lambda w: w("empty.out", b""), "empty file"),
        (lambda w: w("emptydir/keep.md", "x").parent, "directory contains no log files"),
        (lambda w: Path(str(w("x.log", "x")) + ".missing"), "no such file or directory"),
    ],
)
def test_bad_inputs_become_problems_and_the_rest_is_read(write, make, expected: str) -> None:
    bad = make(write)
    good = write("good.log", "RuntimeError: real\n")
    got = _read(bad, good)
    problems = {i.file: i.problems for i in got.inputs}
    assert any(expected in p for p in problems[str(bad)])
    assert got.lines["raw"].to_list() == ["RuntimeError: real"]


def test_unreadable_file_is_reported(write) -> None:
    path = write("secret.log", "error\n")
    path.chmod(0)
    try:
        got = _read(path)
        if got.inputs[0].problems:  # root can read anything; then it is simply read
            assert "permission denied" in got.inputs[0].problems[0]
    finally:
        path.chmod(0o644)


def test_glob_and_directory_expand_to_the_log_files_in_order(write) -> None:
    write("job/slurm-1.out", "a error\n")
    write("job/sub/rank1.log.gz", gzip.compress(b"b error\n"))
    write("job/notes.md", "error\n")
    root = write("job/rank0.err", "c error\n").parent
    names = [i.file for i in ingest.expand([str(root)])]
    assert [Path(n).name for n in names] == ["rank0.err", "slurm-1.out", "rank1.log.gz"]
    assert [Path(i.file).name for i in ingest.expand([str(root / "*.out")])] == ["slurm-1.out"]
    assert ingest.expand([str(root / "*.nothing")])[0].problems == ["no file matches this pattern"]


def test_stdin_is_read_as_dash() -> None:
    got = _read("-", stdin=b"x\nRuntimeError: from a pipe\n")
    assert got.inputs[0].file == "-" and got.inputs[0].bytes == 28
    assert got.lines["line"].to_list() == [1, 2]


def test_budget_stops_reading_and_says_so(write) -> None:
    path = write("a.log", "error\n" * 1000)
    got = ingest.ingest(ingest.expand([str(path)]), KW, deadline=0.0)
    assert any("time budget" in p for p in got.inputs[0].problems)


def test_directory_walk_takes_pbs_and_grid_engine_job_outputs(tmp_path: Path) -> None:
    for name in ("train.o4242", "train.e4242", "train.e4242.1", "notes.md", "model.pt"):
        (tmp_path / name).write_text("x\n")
    found = sorted(Path(i.file).name for i in ingest.expand([tmp_path]))
    assert found == ["train.e4242", "train.e4242.1", "train.o4242"]


@pytest.mark.parametrize("regex_from", [0, 10**9], ids=["regex-alternation", "aho-corasick"])
def test_prefilter_keeps_the_same_lines_whichever_engine_runs_it(regex_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "_REGEX_FROM_LINES", regex_from)
    text = "step 1 ok\n  what():  CUDA error\nNCCL WARN [x]\nloss 0.1\nan error here\nfine\n"
    got = ingest.ingest_text(text, ["what():", "[x]", "error", "rror"], tail=False)
    assert got.lines["raw"].to_list() == ["  what():  CUDA error", "NCCL WARN [x]", "an error here"]
