"""Logs as users have them: UTF-16/32 with or without a byte-order mark, carriage-return-only
line breaks, and progress bars redrawn with carriage returns (issue 13, point 5)."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

import logsleuth
from logsleuth.ingest import MAX_LINE_CHARS, sniff_encoding

_TRACEBACK = [
    "epoch 1 step 10 loss 1.52",
    "Traceback (most recent call last):",
    '  File "C:\\Users\\user\\proj\\train.py", line 88, in <module>',
    "    main()",
    "ValueError: could not convert string to float: 'n/a'",
]


def _analyze(path: Path) -> logsleuth.Report:
    return logsleuth.analyze([str(path)])


@pytest.mark.parametrize(
    ("encoding", "bom"),
    [
        ("utf-16-le", codecs.BOM_UTF16_LE),
        ("utf-16-be", codecs.BOM_UTF16_BE),
        ("utf-32-le", codecs.BOM_UTF32_LE),
        ("utf-16-le", b""),
        ("utf-8", codecs.BOM_UTF8),
    ],
)
def test_a_log_written_by_windows_tools_is_read_with_its_lines_where_they_are(tmp_path: Path, encoding: str, bom: bytes) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(bom + "\r\n".join(_TRACEBACK).encode(encoding) + "\r\n".encode(encoding))
    report = _analyze(log)
    assert report.verdict.category == "user_code_error"
    assert [(e.line, e.text) for e in report.verdict.evidence][:1] == [(5, "ValueError: could not convert string to float: 'n/a'")]


def test_sniffing_does_not_take_plain_utf8_for_anything_else() -> None:
    assert sniff_encoding(b"[rank0]: NCCL INFO Bootstrap : Using eth0\n") == (None, 0)
    assert sniff_encoding(codecs.BOM_UTF8 + b"x") == (None, 3)


def test_carriage_return_only_line_breaks_are_line_breaks(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes("\r".join(_TRACEBACK).encode() + b"\r")
    report = _analyze(log)
    assert report.verdict.category == "user_code_error"
    assert report.verdict.evidence[0].line == 5
    assert any("carriage returns" in p for i in report.inputs for p in i.problems)


def test_a_progress_bar_redrawn_past_the_line_limit_keeps_the_traceback_glued_to_its_end(tmp_path: Path) -> None:
    bar = "".join(f"\r{i * 100 // 20000:3d}%|#####     | {i}/20000 [01:02<00:41, 3.21it/s]" for i in range(20000))
    assert len(bar) > 4 * MAX_LINE_CHARS
    log = tmp_path / "train.log"
    log.write_text("start\n" + bar + "\n".join(_TRACEBACK[1:]) + "\n", encoding="utf-8")
    report = _analyze(log)
    assert report.verdict.category == "user_code_error"
    assert report.verdict.evidence[0].kind == "traceback"
    assert report.verdict.evidence[0].line == 5
