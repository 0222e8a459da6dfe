"""The classifier at analysis time: masking, features, the model artifact, and inference without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from logsleuth import classify
from logsleuth.learn.train import load_masks

from .conftest import events_of

CFG = classify.FeatureConfig(1 << 12, load_masks())


def masked_words(line: str) -> set[str]:
    """The word features of one error line (its 'e:' words, prefix removed)."""
    return {f[2:] for f in classify.event_features(events_of(line), CFG).get_column("feat").to_list() if f.startswith("e:")}


@pytest.mark.parametrize(
    ("line", "kept", "gone"),
    [
        (
            "RuntimeError: The client socket has timed out after 600000ms while trying to connect to (10.0.3.12, 29500).",
            {"client", "socket", "timed", "<ip>", "<num>"},
            {"10", "29500", "600000ms"},
        ),
        (
            "misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes",
            {"devshm", "extend", "bytes"},
            {"fjwoob", "nccl-fjwoob", "5967876"},
        ),
        (
            "PermissionError: [Errno 13] Permission denied: '/home/alice/vision/checkpoints/epoch_3.pt'",
            {"permission", "denied", "<path>", "epoch"},
            {"alice", "home", "checkpoints"},
        ),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered at 0x7f3a2c001000 on 2024-03-01 10:11:12",
            {"illegal", "memory", "<hex>", "<ts>"},
            {"0x7f3a2c001000", "10"},
        ),
        (
            "node01:3468:3905 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer fe80::4124:bf95:925a:9d1c with status=12",
            {"completion", "peer", "<ip>", "status"},
            {"bf95", "925a"},
        ),
    ],
)
def test_masks_keep_the_words_and_forget_numbers_paths_and_addresses(line: str, kept: set[str], gone: set[str]) -> None:
    words = masked_words(line)
    assert kept <= words
    assert not gone & words


def test_identifiers_are_cut_into_the_words_a_paraphrase_would_use() -> None:
    words = masked_words("torch.distributed.DistBackendError: ncclRemoteError: Detected 1 oom_kill event")
    assert {"dist", "backend", "error", "nccl", "remote", "oom", "kill"} <= words


def test_the_jobs_own_host_names_become_host() -> None:
    ev = events_of("""
        srun: error: gpu-a100-017: task 3: Exited with exit code 1
        slurmstepd: error: *** STEP 4411.0 ON gpu-a100-017 CANCELLED AT 2024-03-01T10:11:12 ***
    """)
    feats = classify.event_features(ev, CFG).get_column("feat").to_list()
    assert "e:<host>" in feats
    assert not any("a100" in f or "gpu" in f for f in feats)


def test_training_chatter_at_info_level_is_not_a_feature() -> None:
    ev = events_of("""
        epoch 0 step 100/1000 | loss 2.3412 | lr 3.00e-04 | 152.3 samples/s
        node01:1234:1290 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0
        RuntimeError: CUDA error: out of memory
    """)
    feats = set(classify.event_features(ev, CFG).get_column("feat").to_list())
    assert "e:memory" in feats and {"i:nccl", "i:socket", "i:ifname"} <= feats
    assert not any("loss" in f or "samples" in f for f in feats)


def test_job_features_see_what_no_single_line_says() -> None:
    ev = events_of("""
        node01:11:11 [0] NCCL INFO NCCL version 2.20.5+cuda12.2
        node02:22:22 [0] NCCL INFO NCCL version 2.19.3+cuda12.2
        RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=4, worker_count=8, timeout=0:30:00)
    """)
    assert classify.job_features(ev) == ["xf:barrier_overfull", "xf:failed_ranks=0", "xf:nccl_versions_differ", "xf:no_failure_events"]


def test_stable_hash_is_crc32_not_pythons_salted_hash() -> None:
    # the value must not change between runs, machines or Python versions: models depend on it
    assert classify.stable_hash("e:memory") == 0xAA951E3C


def _write_model(folder: Path, *, labels: list[str], dim: int = 8, idf_len: int | None = None) -> Path:
    arrays = {
        "weights": np.zeros((dim, len(labels)), np.float32),
        "bias": np.arange(len(labels), dtype=np.float32),
        "idf": np.ones(idf_len or dim, np.float32),
        "fusion_hidden": np.zeros((3, 2), np.float32),
        "fusion_hidden_bias": np.zeros(2, np.float32),
        "fusion_out": np.zeros(2, np.float32),
        "fusion_linear": np.zeros(3, np.float32),
    }
    np.savez(folder / "classifier.npz", **arrays)  # type: ignore[arg-type]
    meta = {
        "labels": labels,
        "features": {"dim": dim, "masks": [], "max_tokens": 8},
        "temperature": 1.0,
        "fusion": {"threshold": 0.3},
    }
    (folder / "classifier.json").write_text(json.dumps(meta))
    return folder


def test_load_reads_a_model_folder_and_answers_none_when_absent(tmp_path: Path) -> None:
    assert classify.load(tmp_path) is None
    model = classify.load(_write_model(tmp_path, labels=["none", "unknown", "cuda_oom"]))
    assert model is not None and model.labels == ["none", "unknown", "cuda_oom"]
    probs = classify.predict(model, events_of("RuntimeError: CUDA error: out of memory")).probs
    assert max(probs, key=probs.__getitem__) == "cuda_oom"  # only the bias speaks: 0 < 1 < 2


def test_read_npz_reads_stored_and_deflated_arrays_alike(tmp_path: Path) -> None:
    weights = np.arange(24, dtype=np.float32).reshape(8, 3) / 7
    np.savez(tmp_path / "stored.npz", weights=weights)
    np.savez_compressed(tmp_path / "deflated.npz", weights=weights)
    for name in ("stored.npz", "deflated.npz"):
        arrays = classify.read_npz(str(tmp_path / name))
        assert arrays["weights"].shape == (8, 3) and arrays["weights"].tolist() == weights.tolist()


def test_load_rejects_arrays_that_do_not_fit_the_metadata(tmp_path: Path) -> None:
    _write_model(tmp_path, labels=["none", "unknown"], idf_len=5)
    with pytest.raises(classify.ModelError, match="do not fit"):
        classify.load(tmp_path)


def test_load_refuses_arrays_that_are_not_plain_float32_without_unpickling_them(tmp_path: Path) -> None:
    _write_model(tmp_path, labels=["none", "unknown"])
    np.savez(tmp_path / "classifier.npz", weights=np.array([{"x": 1}], dtype=object))  # type: ignore[arg-type]
    with pytest.raises(classify.ModelError, match="float32"):
        classify.load(tmp_path)
    (tmp_path / "classifier.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(classify.ModelError):
        classify.load(tmp_path)


def test_shipped_model_loads_and_predicts_without_torch_or_numpy() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
        "from logsleuth import classify\n"
        "from tests.conftest import events_of\n"
        "m = classify.load()\n"
        "assert m is not None, 'no shipped model'\n"
        "p = classify.predict(m, events_of('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'))\n"
        "assert abs(sum(p.probs.values()) - 1) < 1e-6\n"
        "print(max(p.probs, key=p.probs.get))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "cuda_oom"


def test_shipped_model_arrays_need_no_pickle() -> None:
    npz, meta = classify.model_paths()
    with np.load(npz, allow_pickle=False) as arrays:
        assert {k: arrays[k].dtype for k in arrays.files} == dict.fromkeys(("weights", "bias", "idf", *classify.Fusion.ARRAYS), np.float32)
    data = json.loads(meta.read_text())
    assert data["labels"][-2:] == ["unknown", "none"] and data["torch_version"].startswith("2.")


def test_evidence_points_at_error_lines_that_carry_the_label() -> None:
    model = classify.load()
    assert model is not None
    ev = events_of("""
        epoch 0 step 100/1000 | loss 2.3412
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.10 GiB
        srun: error: node01: task 3: Exited with exit code 1
    """)
    pred = classify.predict(model, ev)
    first = pred.evidence["cuda_oom"][0]
    assert "out of memory" in ev.get_column("message")[first]
    assert ev.filter(pl.col("level") == "info").height == 1  # the progress line is there, and not evidence
