"""The fast paths of ingest keep exactly the lines the line-by-line path keeps (issue 17).

A big block is searched as bytes (scan.py) and only the lines around keyword matches are cut
out and decoded; many small files are read whole and filtered in batches. Both must give what
splitting every line first and reading every file alone gives: the same lines, numbers, text,
counts and problems."""

from __future__ import annotations

import io
import random
from pathlib import Path

import polars as pl
import pytest

from logsleuth import ingest, parse, rulebook, scan
from logsleuth.ingest import InputInfo

KEYWORDS = [*parse.KEYWORDS, *rulebook.load().keywords]
KEEP = ingest._Keeper(tuple(dict.fromkeys(k for k in KEYWORDS if k)))

#: Lines that stress the edges: CRLF, a lone CR, the CSV reader's separator, a literal U+FFFD,
#: other UTF-8, a byte-order mark inside the text, empty lines, keywords at the very start and end.
LINES = [
    "step 12 loss 0.1234 lr 3.0e-04",
    "RuntimeError: CUDA error: an illegal memory access was encountered\r",
    "plain progress\r",
    "half\rredrawn line",
    "error",
    "",
    "cannot\x1fopen the file",  # 'annot ' only once the separator becomes a space
    "a \ufffd replacement character and an error",
    "Ünïcödé progress ████████ 80%",
    "Ünïcödé Traceback (most recent call last):",
    "\ufeffwarn with a byte-order mark first",
    "NCCL WARN  NET/IB : Got completion from peer 10.0.0.7<34>",
    "   ",
    "xit",
    "tokens/s 120000 grad_norm 0.5",
]


def _block(rng: random.Random, n: int, pool: list[str]) -> bytes:
    return ("\n".join(rng.choice(pool) for _ in range(n)) + "\n").encode()


def _same(a: tuple, b: tuple) -> None:
    for x, y in zip(a[:2], b[:2], strict=True):
        assert x.equals(y), (x, y)
    assert a[2:] == b[2:]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("tail", [0, 3, 256])
def test_the_byte_prefilter_keeps_what_splitting_lines_first_keeps(seed: int, tail: int) -> None:
    rng = random.Random(seed)
    pool = LINES if seed % 3 else [line for line in LINES if line.isascii()]  # some blocks all ASCII
    data = _block(rng, rng.randint(1, 400), pool)
    fast = ingest._filter_bytes(data, len(data), "f.log", KEEP, tail)
    assert fast is not None
    _same(fast, ingest._filter_lines(data, "f.log", KEEP, tail))


def test_a_block_read_in_place_ignores_the_partial_line_after_it() -> None:
    data = _block(random.Random(1), 200, LINES)
    partial = data + b"RuntimeError: this line goes on in the next bl"
    fast = ingest._filter_bytes(partial, len(data), "f.log", KEEP, 5)
    assert fast is not None
    _same(fast, ingest._filter_lines(data, "f.log", KEEP, 5))


def test_long_lines_are_counted_by_characters_as_before() -> None:
    long = "é" * (ingest.MAX_LINE_CHARS - 10) + " error"  # more bytes than the cut, fewer characters
    longer = "x" * (ingest.MAX_LINE_CHARS + 1)
    data = "\n".join(["ok", long, "error here", longer, longer + "\r", "y" * (3 * ingest.MAX_LINE_CHARS), "end"]).encode() + b"\n"
    fast = ingest._filter_bytes(data, len(data), "f.log", KEEP, 2)
    assert fast is not None and fast[4] == 3
    _same(fast, ingest._filter_lines(data, "f.log", KEEP, 2))


def test_what_the_byte_prefilter_leaves_to_the_line_by_line_path() -> None:
    bad = b"ok\nbad \xff\xfe error\n" * 10
    assert ingest._filter_bytes(bad, len(bad), "f.log", KEEP, 2) is None  # not UTF-8: the lines it spoils are counted there
    dense = b"RuntimeError: x\n" * 5000
    assert ingest._filter_bytes(dense, len(dense), "f.log", KEEP, 2) is None  # nearly every line kept


def test_big_files_take_the_byte_path_and_keep_the_same_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    path = tmp_path / "big.log"
    path.write_bytes(_block(rng, 30_000, LINES) + b"last line without a newline, an error")
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 1 << 16)  # many blocks, each read in place
    monkeypatch.setattr(scan, "FAST_FROM_BYTES", 1 << 20)
    slow = ingest.ingest(ingest.expand([path]), KEYWORDS)
    monkeypatch.setattr(scan, "FAST_FROM_BYTES", 0)
    fast = ingest.ingest(ingest.expand([path]), KEYWORDS)
    assert fast.lines.equals(slow.lines)
    assert fast.inputs == slow.inputs and fast.inputs[0].lines == 30_001


def test_many_small_files_read_together_give_what_each_read_alone_gives(tmp_path: Path) -> None:
    rng = random.Random(9)
    names = []
    for i in range(40):
        body = _block(rng, rng.randint(1, 300), LINES)
        name = tmp_path / f"r{i}" / "stderr.log"
        name.parent.mkdir()
        name.write_bytes(body[:-1] if i % 7 == 0 else body)  # some end without a newline
        names.append(str(name))
    # and some the batch leaves to the one-by-one path: gzip, UTF-16, not UTF-8, binary, empty, CR-only
    odd = {
        "gz.log.gz": __import__("gzip").compress(b"x\nRuntimeError: in a gzip\n"),
        "u16.log": "\ufeffRuntimeError: in UTF-16\n".encode("utf-16-le"),
        "latin.log": b"caf\xe9 error\n",
        "bin.out": bytes(range(256)) * 4,
        "empty.log": b"",
        "cr.log": b"step 1\rstep 2\rRuntimeError: cr only\r",
    }
    for name, data in odd.items():
        (tmp_path / name).write_bytes(data)
        names.append(str(tmp_path / name))
    together = ingest.ingest(ingest.expand(names), KEYWORDS)
    alone = [ingest.ingest(ingest.expand([n]), KEYWORDS) for n in names]
    tail = ingest.tail_lines(len(names))
    expected = pl.concat([_tail_kept(a.lines, a.inputs[0].lines, tail) for a in alone])
    assert together.lines.sort("file", "line").equals(expected.sort("file", "line"))
    assert together.inputs == [a.inputs[0] for a in alone]


def _tail_kept(lines: pl.DataFrame, n: int, tail: int) -> pl.DataFrame:
    """A file read alone keeps TAIL_LINES at its end; among many, ``tail``: drop the difference."""
    return lines.filter((pl.col("line") > n - tail) | pl.col("raw").str.contains_any(KEEP.keywords))


def test_thousands_of_inputs_share_a_bounded_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ingest.tail_lines(1) == ingest.TAIL_LINES == ingest.tail_lines(128)
    assert ingest.tail_lines(512) == 64 and ingest.tail_lines(8192) == ingest.TAIL_MIN
    names = []
    for i in range(20):
        path = tmp_path / f"rank-{i}.log"
        path.write_text("".join(f"step {s} loss 0.5\n" for s in range(100)) + ("RuntimeError: boom\n" if i == 3 else ""))
        names.append(path)
    monkeypatch.setattr(ingest, "TAIL_BUDGET", 40)  # 2 a file, at least TAIL_MIN
    got = ingest.ingest(ingest.expand(names), KEYWORDS)
    per_file = got.lines.group_by("file").len()
    assert per_file.get_column("len").max() == ingest.TAIL_MIN
    assert got.lines.filter(pl.col("raw") == "RuntimeError: boom").height == 1


def test_a_hung_read_in_a_batch_is_given_up_and_the_rest_still_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    names = []
    for i in range(3):
        path = tmp_path / f"rank-{i}.log"
        path.write_text(f"RuntimeError: rank {i}\n")
        names.append(str(path))
    real = ingest._slurp

    def slurp(path: str) -> object:
        if path.endswith("rank-1.log"):
            time.sleep(3)
        return real(path)

    monkeypatch.setattr(ingest, "_slurp", slurp)
    started = time.monotonic()
    got = ingest.ingest(ingest.expand(names), KEYWORDS, deadline=time.monotonic() + 0.5)
    assert time.monotonic() - started < 2.5
    problems = {Path(i.file).name: " ".join(i.problems) for i in got.inputs}
    assert problems["rank-0.log"] == "" and "slow or hung" in problems["rank-1.log"] and "time budget" in problems["rank-2.log"]


def test_stdin_among_files_is_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("RuntimeError: from a file\n")
    got = ingest.ingest(ingest.expand(["-", str(path)]), KEYWORDS, stdin=io.BytesIO(b"x\nValueError: from a pipe\n"))
    assert sorted(got.lines.get_column("raw").to_list()) == ["RuntimeError: from a file", "ValueError: from a pipe", "x"]
    assert [i.lines for i in got.inputs] == [2, 1]


def test_line_counts_agree_with_the_csv_reader_on_odd_bytes() -> None:
    for data in (b"a\r\nb\r\n", b"a\rb\n", b"\n\n\n", b"\xef\xbb\xbf\n", b"x\x1fy\n", b"\x00\n\x00\n"):
        assert scan.count_newlines(data) == len(ingest._split_lines(data, data.isascii()))


def test_a_separator_keyword_or_carriage_return_keyword_is_tested_on_the_text() -> None:
    keep = ingest._Keeper(("error\r", "annot "))
    data = (b"x error\r\nno error\r here\ncannot\x1fread\n" + b"fine\n" * 400) * 20
    fast = ingest._filter_bytes(data, len(data), "f.log", keep, 2)
    assert fast is not None
    _same(fast, ingest._filter_lines(data, "f.log", keep, 2))


def test_inputs_are_unchanged_records() -> None:
    info = InputInfo(file="x")
    assert info.to_dict() == {"file": "x", "bytes": 0, "lines": 0, "problems": []}


def test_a_file_read_into_reused_buffers_gives_what_a_gzip_of_it_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Later blocks of a plain file are read into buffers used again (gzip is read as before):
    the same lines, including across a line longer than a block and a last line without a newline."""
    import gzip

    rng = random.Random(3)
    body = _block(rng, 3000, LINES) + b"RuntimeError: " + b"y" * 5000 + b"\n" + _block(rng, 3000, LINES) + b"error at the very end"
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 4096)  # hundreds of blocks, a line longer than one
    monkeypatch.setattr(scan, "FAST_FROM_BYTES", 0)
    (tmp_path / "a.log").write_bytes(body)
    (tmp_path / "a.log.gz").write_bytes(gzip.compress(body))
    plain = ingest.ingest(ingest.expand([tmp_path / "a.log"]), KEYWORDS)
    packed = ingest.ingest(ingest.expand([tmp_path / "a.log.gz"]), KEYWORDS)
    assert plain.lines.drop("file").equals(packed.lines.drop("file"))
    assert plain.inputs[0].lines == packed.inputs[0].lines == 6002


def test_a_big_binary_file_is_drained_without_waiting_for_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 4096)
    path = tmp_path / "core.out"
    path.write_bytes((bytes(range(32)) + b"\n") * 20_000)  # 40 blocks of control bytes, every one ends a line
    got = ingest.ingest(ingest.expand([path]), KEYWORDS)
    assert "binary file" in got.inputs[0].problems[0]
