"""The learned classifier at analysis time: event table -> hashed features -> class probabilities.

Rules name causes they have patterns for; the classifier reads the same event
table as bags of masked words and generalises to wordings no rule covers
(paraphrasing wrappers, other releases). It is a linear model over hashed
n-grams, trained with torch by ``logsleuth train`` (logsleuth/learn/) and run
here with numpy only: the artifact is an ``.npz`` (loaded with
``allow_pickle=False``) plus JSON metadata that carries everything inference
needs: labels, feature configuration (masks included), temperature, fusion
weights and the abstention threshold.

Features are computed per event and pooled per job, so the same code gives the
job's scores and each event's contribution to them (the evidence a verdict
without a rule shows).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .reason import FAILURE_KINDS

#: Where the shipped model lives (next to the package, or inside it when installed).
MODELS_DIR = Path(os.environ.get("LOGSLEUTH_MODELS_DIR", Path(__file__).resolve().parent.parent / "models"))
if not MODELS_DIR.is_dir():
    MODELS_DIR = Path(__file__).resolve().parent / "models"
MODEL_NAME = "classifier"
#: Event levels whose words are features ("e:" namespace).
LOUD = ("error", "fatal", "warning")
#: Info-level kinds whose words are features too ("i:"): how NCCL was set up, not training chatter.
TELLING_INFO = ("nccl_net", "nccl_env", "nccl_version", "nccl_init")
_TOKEN = r"<[a-z0-9]+>|[a-z][a-z0-9]+"
_BARRIER = r"world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+)"
_CLIENTS = r"(\d+)/(\d+) (?:clients|workers) joined"


@dataclass(frozen=True)
class FeatureConfig:
    """How events become features; stored in the model metadata so training and analysis agree."""

    dim: int
    masks: tuple[tuple[str, str], ...]
    max_tokens: int = 64

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "masks": [list(m) for m in self.masks], "max_tokens": self.max_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeatureConfig:
        return cls(int(data["dim"]), tuple((str(p), str(r)) for p, r in data["masks"]), int(data["max_tokens"]))


@dataclass
class Fusion:
    """The fitted combination of rule and classifier evidence (see fuse.py): arrays from the .npz."""

    hidden: np.ndarray  # (signals, units)
    hidden_bias: np.ndarray  # (units,)
    out: np.ndarray  # (units,)
    linear: np.ndarray  # (signals,)
    threshold: float  # below this fused probability the verdict is unknown

    #: names of the arrays in the .npz, in field order
    ARRAYS = ("fusion_hidden", "fusion_hidden_bias", "fusion_out", "fusion_linear")

    def arrays(self) -> dict[str, np.ndarray]:
        return dict(zip(self.ARRAYS, (self.hidden, self.hidden_bias, self.out, self.linear), strict=True))

    @classmethod
    def from_arrays(cls, arrays: Any, threshold: float) -> Fusion:
        """From the .npz (or any mapping of the ARRAYS names)."""
        hidden, hidden_bias, out, linear = (np.ascontiguousarray(arrays[k], dtype=np.float64) for k in cls.ARRAYS)
        return cls(hidden, hidden_bias, out, linear, threshold)


@dataclass
class Model:
    """A loaded classifier: weights (dim x labels), bias, and what inference needs to know."""

    labels: list[str]
    weights: np.ndarray
    bias: np.ndarray
    idf: np.ndarray  # per bucket: how rare the feature was in training (common lines weigh little)
    features: FeatureConfig
    temperature: float
    fusion: Fusion
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass
class Prediction:
    """Class probabilities for one job and, per class, the events that push towards it most."""

    probs: dict[str, float]
    evidence: dict[str, list[int]]


class ModelError(Exception):
    """The model files exist but cannot be used (wrong shape, bad metadata)."""


def model_paths(base: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(npz, json) for a model given as a folder, a path without suffix, or either file."""
    path = Path(base) if base is not None else MODELS_DIR / MODEL_NAME
    if path.is_dir():
        path = path / MODEL_NAME
    if path.suffix in (".npz", ".json"):
        path = path.with_suffix("")
    return path.with_suffix(".npz"), path.with_suffix(".json")


def load(base: str | os.PathLike[str] | None = None) -> Model | None:
    """The model at ``base`` (default: the shipped one), or None when its files are absent.

    Raises ModelError when the files exist but do not fit together.
    """
    npz, meta_path = model_paths(base)
    if not npz.is_file() or not meta_path.is_file():
        return None
    return _load(str(npz), str(meta_path), npz.stat().st_mtime_ns, meta_path.stat().st_mtime_ns)


@lru_cache(maxsize=4)
def _load(npz: str, meta_path: str, _m1: int, _m2: int) -> Model:
    """Read and check a model once per file version (the mtimes are part of the cache key)."""
    try:
        meta = json.loads(Path(meta_path).read_text(encoding="utf-8"))
        with np.load(npz, allow_pickle=False) as arrays:
            weights = np.ascontiguousarray(arrays["weights"], dtype=np.float32)
            bias = np.ascontiguousarray(arrays["bias"], dtype=np.float32)
            idf = np.ascontiguousarray(arrays["idf"], dtype=np.float32)
            fusion = Fusion.from_arrays(arrays, float(meta["fusion"]["threshold"]))
        labels = [str(x) for x in meta["labels"]]
        cfg = FeatureConfig.from_dict(meta["features"])
        model = Model(labels, weights, bias, idf, cfg, float(meta["temperature"]), fusion, meta, npz)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{npz}: {type(exc).__name__}: {exc}") from None
    if weights.shape != (cfg.dim, len(labels)) or bias.shape != (len(labels),) or idf.shape != (cfg.dim,):
        raise ModelError(
            f"{npz}: weights {weights.shape}, bias {bias.shape}, idf {idf.shape} do not fit {cfg.dim} features x {len(labels)} labels"
        )
    return model


# -- features ---------------------------------------------------------------------------------


def stable_hash(text: str) -> int:
    """CRC-32 of the UTF-8 text: the same on every run and platform (unlike Python's salted hash())."""
    return zlib.crc32(text.encode("utf-8"))


def event_features(events: pl.DataFrame, cfg: FeatureConfig) -> pl.DataFrame:
    """One row per (event, feature string): masked words and structured-field tokens.

    Identifiers are cut into words (``OutOfMemoryError`` -> out of memory error,
    ``oom_kill`` -> oom kill) so a wrapper's paraphrase shares words with the
    original. ``eid`` is the event's row index; the job-level features have eid -1.
    """
    if events.is_empty():
        return pl.DataFrame(schema={"eid": pl.Int64, "feat": pl.String})
    hosts = sorted({h for h in events.get_column("node").drop_nulls().unique().to_list() if len(h) > 2}, key=len, reverse=True)
    text = pl.concat_str([pl.col("message").fill_null(""), pl.col("detail").fill_null("")], separator=" ")
    if hosts:
        text = text.str.replace_many(hosts, [" <host> "] * len(hosts))
    for pattern, repl in cfg.masks:
        text = text.str.replace_all(pattern, repl)
    text = text.str.replace_all(r"([a-z0-9])([A-Z])", "$1 $2").str.replace_all("_", " ", literal=True)
    ns = pl.when(pl.col("level").is_in(LOUD)).then(pl.lit("e:")).when(pl.col("kind").is_in(TELLING_INFO)).then(pl.lit("i:"))
    base = (
        events.with_row_index("eid")
        .with_columns(ns.alias("ns"))
        .filter(pl.col("ns").is_not_null())
        .select(
            pl.col("eid").cast(pl.Int64),
            pl.col("ns"),
            text.str.to_lowercase().str.extract_all(_TOKEN).list.head(cfg.max_tokens).alias("tok"),
            pl.col("kind"),
            pl.col("level"),
            pl.col("source"),
            pl.col("exc_type").str.extract(r"([A-Za-z_][\w]*)$").alias("exc"),
            pl.col("signal"),
            pl.col("exit_code").clip(-64, 256).cast(pl.String).alias("code"),
        )
    )
    words = base.select("eid", "ns", "tok").explode("tok").drop_nulls("tok")
    parts = [words.select("eid", (pl.col("ns") + pl.col("tok")).alias("feat"))]
    for name, expr in (
        ("kind", pl.col("kind")),
        ("kindlvl", pl.concat_str([pl.col("kind"), pl.lit(":"), pl.col("level")])),
        ("src", pl.col("source")),
        ("exc", pl.col("exc")),
        ("sig", pl.col("signal")),
        ("exit", pl.col("code")),
    ):
        parts.append(base.select("eid", (pl.lit(f"{name}=") + expr).alias("feat")).drop_nulls("feat"))
    parts.append(pl.DataFrame({"eid": -1, "feat": job_features(events)}, schema={"eid": pl.Int64, "feat": pl.String}))
    return pl.concat(parts).unique(maintain_order=True)


def job_features(events: pl.DataFrame) -> list[str]:
    """Facts about the whole job that no single line states: version skew, who failed, barrier counts."""
    out: list[str] = []
    kind = pl.col("kind")
    versions = events.filter(kind == "nccl_version").get_column("version").drop_nulls().n_unique()
    if versions > 1:
        out.append("xf:nccl_versions_differ")
    seqs = events.filter(kind == "watchdog_timeout").get_column("seq").drop_nulls().n_unique()
    if seqs > 1:
        out.append("xf:watchdog_seq_differ")
    failing = events.filter(kind.is_in(FAILURE_KINDS) & pl.col("level").is_in(["error", "fatal"]))
    if failing.is_empty():
        out.append("xf:no_failure_events")
    n_ranks = failing.get_column("rank").drop_nulls().n_unique()
    out.append(f"xf:failed_ranks={'0' if n_ranks == 0 else '1' if n_ranks == 1 else '2-3' if n_ranks < 4 else '4+'}")
    msg = pl.col("message")
    counts = events.select(
        msg.str.extract(_BARRIER, 1).cast(pl.Int64, strict=False).alias("world"),
        msg.str.extract(_BARRIER, 2).cast(pl.Int64, strict=False).alias("joined"),
    ).drop_nulls()
    clients = events.select(
        msg.str.extract(_CLIENTS, 1).cast(pl.Int64, strict=False).alias("joined"),
        msg.str.extract(_CLIENTS, 2).cast(pl.Int64, strict=False).alias("world"),
    ).drop_nulls()
    for world, joined in [*counts.iter_rows(), *((w, j) for j, w in clients.iter_rows())]:
        out.append("xf:barrier_overfull" if joined > world else "xf:barrier_short" if joined < world else "xf:barrier_full")
    return sorted(set(out))


def hashed(feats: pl.DataFrame, dim: int) -> pl.DataFrame:
    """Add the feature's bucket (``h``) to an (eid, feat) table."""
    uniq = feats.get_column("feat").unique().sort()
    buckets = np.fromiter((stable_hash(s) % dim for s in uniq.to_list()), dtype=np.int64, count=uniq.len())
    table = pl.DataFrame({"feat": uniq, "h": buckets})
    return feats.join(table, on="feat", how="left")


def job_vector(feats: pl.DataFrame) -> np.ndarray:
    """The job's active buckets (unique, sorted): a feature is present or not, whatever its count."""
    return np.unique(feats.get_column("h").to_numpy())


def tfidf(idf: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Values of a job's active buckets: their idf, L2-normalised over the job."""
    v = idf[buckets].astype(np.float64)
    norm = float(np.sqrt((v * v).sum()))
    return np.asarray(v / norm if norm > 0 else v)


def logits(model: Model, buckets: np.ndarray) -> np.ndarray:
    """Raw class scores of one job (before temperature)."""
    if buckets.size == 0:
        return model.bias.astype(np.float64)
    return np.asarray((model.weights[buckets] * tfidf(model.idf, buckets)[:, None]).sum(axis=0) + model.bias)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True))


def predict(model: Model, events: pl.DataFrame) -> Prediction:
    """Calibrated probabilities of every label for the job these events come from."""
    return predict_from(model, events, hashed(event_features(events, model.features), model.features.dim))


def predict_from(model: Model, events: pl.DataFrame, feats: pl.DataFrame) -> Prediction:
    """``predict`` on features already computed (training and evaluation compute them once per case)."""
    probs = softmax(logits(model, job_vector(feats)) / model.temperature)
    return Prediction({label: float(p) for label, p in zip(model.labels, probs, strict=True)}, evidence(model, events, feats))


def evidence(model: Model, events: pl.DataFrame, feats: pl.DataFrame, limit: int = 3) -> dict[str, list[int]]:
    """Per label, the error-level events whose features weigh most towards it, strongest first."""
    rows = feats.filter(pl.col("eid") >= 0).select("eid", "h").unique()
    if rows.is_empty():
        return {}
    loud = events.with_row_index("eid").filter(pl.col("level").is_in(["error", "fatal"])).get_column("eid").cast(pl.Int64)
    rows = rows.filter(pl.col("eid").is_in(loud.implode()))
    if rows.is_empty():
        return {}
    eids = rows.get_column("eid").to_numpy()
    h = rows.get_column("h").to_numpy()
    contrib = model.weights[h] * model.idf[h][:, None]  # (rows, labels)
    order, inverse = np.unique(eids, return_inverse=True)
    per_event = np.zeros((order.size, len(model.labels)))
    np.add.at(per_event, inverse, contrib)
    out: dict[str, list[int]] = {}
    for j, label in enumerate(model.labels):
        col = per_event[:, j]
        best = np.argsort(-col, kind="stable")[:limit]
        out[label] = [int(order[i]) for i in best if col[i] > 0]
    return out
