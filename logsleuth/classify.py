"""The learned classifier at analysis time: event table -> hashed features -> class probabilities.

Rules name causes they have patterns for; the classifier reads the same event
table as bags of masked words and generalises to wordings no rule covers
(paraphrasing wrappers, other releases). It is a linear model over hashed
n-grams, trained with torch by ``logsleuth train`` (logsleuth/learn/) and run
here without numpy (polars and the standard library: epilog nodes start fast and
need nothing more): the artifact is an ``.npz`` of raw float32 arrays (read
here as bytes, never unpickled) plus JSON metadata that carries everything inference
needs: labels, feature configuration (masks included), temperature, fusion
weights and the abstention threshold.

Features are computed per event and pooled per job, so the same code gives the
job's scores and each event's contribution to them (the evidence a verdict
without a rule shows).
"""

from __future__ import annotations

import array
import ast
import hashlib
import json
import math
import os
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from logsleuth.events import NCCL_SETUP_KINDS, NCCL_VERSION, WATCHDOG_TIMEOUT, numbered

from .reason import IS_FAILURE

#: Where the shipped model lives (next to the package, or inside it when installed).
MODELS_DIR = Path(os.environ.get("LOGSLEUTH_MODELS_DIR", Path(__file__).resolve().parent.parent / "models"))
if not MODELS_DIR.is_dir():
    MODELS_DIR = Path(__file__).resolve().parent / "models"
MODEL_NAME = "classifier"
#: Event levels whose words are features ("e:" namespace).
LOUD = ("error", "fatal", "warning")
#: Levels of the events a verdict may show as the classifier's evidence.
EVIDENCE_LEVELS = ("error", "fatal")
#: Info-level kinds whose words are features too ("i:"): how NCCL was set up, not training chatter.
TELLING_INFO = NCCL_SETUP_KINDS
_TOKEN = r"<[a-z0-9]+>|[a-z][a-z0-9]+"


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
    """The fitted combination of rule and classifier evidence (see fuse.py), as plain lists."""

    hidden: list[list[float]]  # (signals, units)
    hidden_bias: list[float]  # (units,)
    out: list[float]  # (units,)
    linear: list[float]  # (signals,)
    threshold: float  # below this fused probability the verdict is unknown

    #: names of the arrays in the .npz, in field order
    ARRAYS = ("fusion_hidden", "fusion_hidden_bias", "fusion_out", "fusion_linear")

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any], threshold: float) -> Fusion:
        """From the .npz's arrays (or numpy arrays in training): anything with ``tolist()``."""
        hidden, hidden_bias, out, linear = (arrays[k].tolist() for k in cls.ARRAYS)
        return cls(
            [[float(x) for x in row] for row in hidden],
            [float(x) for x in hidden_bias],
            [float(x) for x in out],
            [float(x) for x in linear],
            threshold,
        )


class Array:
    """A float32 array read from an ``.npy`` member: its shape and its values, flat, row-major."""

    def __init__(self, shape: tuple[int, ...], values: array.array[float]) -> None:
        self.shape = shape
        self.values = values

    def tolist(self) -> list[Any]:
        if len(self.shape) == 2:
            n = self.shape[1]
            return [self.values[i * n : (i + 1) * n].tolist() for i in range(self.shape[0])]
        return self.values.tolist()


#: The most one array may hold (the shipped weights: 16,384 buckets x 30 labels, 2 MiB), and all of a model's together.
MAX_ARRAY_BYTES = 1 << 30
MAX_MODEL_BYTES = 2 << 30
#: The longest .npy header read (numpy's own np.load refuses longer ones too).
_NPY_HEADER_MAX = 10_000
#: A float32's high bytes map to 1 where its exponent bits are all ones (NaN or infinity): byte 3 then byte 2.
_EXP_HIGH = bytes(1 if b & 0x7F == 0x7F else 0 for b in range(256))
_EXP_LOW = bytes(1 if b & 0x80 else 0 for b in range(256))


def read_npz(path: str) -> dict[str, Array]:
    """The float32 arrays of an uncompressed or deflated ``.npz``, without numpy and without unpickling.

    Only little-endian float32 C-order arrays of finite numbers are accepted (what
    ``logsleuth train`` writes). Nothing is decompressed past what the arrays need:
    a member's size as the zip's central directory declares it must be what its
    array header implies, within :data:`MAX_ARRAY_BYTES` (and all members within
    :data:`MAX_MODEL_BYTES`), before its data is read, and it is read in bounded
    pieces that stop there (a zip bomb of a few MB once asked for 14 GB).
    """
    out: dict[str, Array] = {}
    total = 0
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.endswith(".npy"):
                raise ValueError(f"{name}: not an .npy array")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ValueError(f"{name}: compressed with method {info.compress_type}; only stored or deflated members are read")
            if info.file_size > MAX_ARRAY_BYTES + _NPY_HEADER_MAX:
                raise ValueError(f"{name}: the zip declares {info.file_size} bytes, over the limit of {MAX_ARRAY_BYTES} for an array")
            with zf.open(info) as fh:
                shape, start = _npy_header(name, fh)
                expected = math.prod(shape) * 4
                if expected > MAX_ARRAY_BYTES or total + expected > MAX_MODEL_BYTES:
                    raise ValueError(
                        f"{name}: shape {shape} is {expected} bytes of float32, over the limit of {MAX_ARRAY_BYTES} (all arrays: {MAX_MODEL_BYTES})"
                    )
                if info.file_size != start + expected:
                    raise ValueError(
                        f"{name}: the zip declares {info.file_size} bytes, its header implies {start + expected} for shape {shape}"
                    )
                data = _read_exactly(name, fh, expected)
                if fh.read(1):  # a stream longer than declared (zipfile stops at the declared size: this is a second guard)
                    raise ValueError(f"{name}: more data than its header implies")
            total += expected
            # NaN and infinity have every exponent bit set; checked on the bytes (C speed, 1 ms for the shipped weights)
            if int.from_bytes(data[3::4].translate(_EXP_HIGH), "little") & int.from_bytes(data[2::4].translate(_EXP_LOW), "little"):
                raise ValueError(f"{name}: values that are not finite numbers (NaN or infinity)")
            values = array.array("f")
            values.frombytes(data)
            if sys.byteorder == "big":
                values.byteswap()
            out[name[: -len(".npy")]] = Array(shape, values)
    return out


def _npy_header(name: str, fh: Any) -> tuple[tuple[int, ...], int]:
    """(shape, bytes before the data) of an .npy stream positioned at its start; only the header is read."""
    prefix = _read_exactly(name, fh, 8)
    if prefix[:6] != b"\x93NUMPY" or prefix[6] not in (1, 2, 3):
        raise ValueError(f"{name}: not an .npy array")
    size_bytes = 2 if prefix[6] == 1 else 4
    hlen = int.from_bytes(_read_exactly(name, fh, size_bytes), "little")
    if hlen > _NPY_HEADER_MAX:
        raise ValueError(f"{name}: an .npy header of {hlen} bytes, over the limit of {_NPY_HEADER_MAX}")
    text = _read_exactly(name, fh, hlen).decode("utf-8" if prefix[6] == 3 else "latin1")
    header = ast.literal_eval(text)  # a dict literal, never code
    if not isinstance(header, dict) or header.get("descr") != "<f4" or header.get("fortran_order"):
        raise ValueError(f"{name}: expected little-endian float32 in C order, found {header!r}")
    dims = header.get("shape")
    if not isinstance(dims, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise ValueError(f"{name}: bad shape {dims!r}")
    return tuple(dims), 8 + size_bytes + hlen


def _read_exactly(name: str, fh: Any, n: int) -> bytes:
    """``n`` bytes, read (and decompressed) a MiB at a time, never more."""
    buf = bytearray()
    while len(buf) < n:
        chunk = fh.read(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ValueError(f"{name}: {len(buf)} bytes where {n} were expected")
        buf += chunk
    return bytes(buf)


@dataclass
class Model:
    """A loaded classifier: weights (dim x labels), bias, idf, and what inference needs to know."""

    labels: list[str]
    weights: array.array[float]  # float32, row-major (bucket, label): label j's weight for bucket h is at h * len(labels) + j
    bias: list[float]
    idf: pl.Series  # per bucket: how rare the feature was in training (common lines weigh little)
    features: FeatureConfig
    temperature: float
    fusion: Fusion
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def build(
        cls,
        labels: Sequence[str],
        weights: Iterable[float],
        bias: Iterable[float],
        idf: Iterable[float],
        features: FeatureConfig,
        temperature: float,
        fusion: Fusion,
        meta: dict[str, Any] | None = None,
        source: str = "",
    ) -> Model:
        """From flat row-major float32 values (the file's arrays, or training's rounded ones)."""
        w = weights if isinstance(weights, array.array) and weights.typecode == "f" else array.array("f", weights)
        n = len(labels)
        if len(w) != features.dim * n:
            raise ModelError(f"{source}: {len(w)} weights do not fit {features.dim} features x {n} labels")
        idf_s = pl.Series("idf", idf, dtype=pl.Float32).cast(pl.Float64)
        bias_l = [float(b) for b in pl.Series(bias, dtype=pl.Float32).to_list()]
        if idf_s.len() != features.dim or len(bias_l) != n:
            raise ModelError(f"{source}: bias {len(bias_l)}, idf {idf_s.len()} do not fit {features.dim} features x {n} labels")
        return cls(list(labels), w, bias_l, idf_s, features, temperature, fusion, meta or {}, source)

    def rows(self, buckets: pl.Series) -> pl.DataFrame:
        """(h, j, w) for these buckets and every label: the few weights a job's features touch.

        The weights stay a flat float32 array: a job touches a few hundred of the
        16,384 buckets, and turning all of them into a table cost more than the analysis.
        """
        n = len(self.labels)
        hs = buckets.cast(pl.Int64)
        picked = array.array("f")
        for h in hs.to_list():  # one slice per active bucket, not per line
            picked.extend(self.weights[h * n : (h + 1) * n])
        k = pl.int_range(0, len(picked), dtype=pl.Int64, eager=True)
        return pl.DataFrame(
            {"h": hs.gather(k // n), "j": (k % n).cast(pl.Int32), "w": pl.Series(picked, dtype=pl.Float32).cast(pl.Float64)}
        )


@dataclass
class Prediction:
    """Class probabilities for one job and, per class, the events that push towards it most."""

    probs: dict[str, float]
    find_evidence: Callable[[], dict[str, list[int]]] = field(repr=False, compare=False)

    @cached_property
    def evidence(self) -> dict[str, list[int]]:
        """Computed on first use: the fusion needs it only for a label no rule supports."""
        return self.find_evidence()


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


def digest(base: str | os.PathLike[str] | None = None) -> str:
    """A short hash of the model's files ("none" without them): part of what a stored verdict was made with."""
    h = hashlib.sha256()
    for path in model_paths(base):
        try:
            h.update(path.read_bytes())
        except OSError:
            return "none"
    return h.hexdigest()[:16]


@lru_cache(maxsize=4)
def _load(npz: str, meta_path: str, _m1: int, _m2: int) -> Model:
    """Read and check a model once per file version (the mtimes are part of the cache key)."""
    try:
        meta = json.loads(Path(meta_path).read_text(encoding="utf-8"))
        arrays = read_npz(npz)
        labels = [str(x) for x in meta["labels"]]
        cfg = FeatureConfig.from_dict(meta["features"])
        temperature, threshold = float(meta["temperature"]), float(meta["fusion"]["threshold"])
        if not (math.isfinite(temperature) and temperature > 0 and math.isfinite(threshold)):
            raise ModelError(f"{meta_path}: temperature {temperature} and threshold {threshold} must be finite, the temperature above 0")
        fusion = Fusion.from_arrays(arrays, threshold)
        shapes = {k: arrays[k].shape for k in ("weights", "bias", "idf")}
        if shapes != {"weights": (cfg.dim, len(labels)), "bias": (len(labels),), "idf": (cfg.dim,)}:
            raise ModelError(f"{npz}: arrays {shapes} do not fit {cfg.dim} features x {len(labels)} labels")
        return Model.build(
            labels,
            arrays["weights"].values,
            arrays["bias"].values,
            arrays["idf"].values,
            cfg,
            temperature,
            fusion,
            meta,
            npz,
        )
    except (OSError, ValueError, KeyError, TypeError, SyntaxError, RecursionError, zipfile.BadZipFile) as exc:
        raise ModelError(f"{npz}: {type(exc).__name__}: {exc}") from None


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
    # Only error-level events are shown as evidence; of the others (warnings every rank repeats,
    # NCCL set-up) the first of each identical event carries all the words the job vector needs.
    said = ["ns", "message", "detail", "kind", "level", "source", "exc_type", "signal", "exit_code"]
    told = numbered(events).with_columns(ns.alias("ns")).filter(pl.col("ns").is_not_null())
    shown = pl.col("level").is_in(EVIDENCE_LEVELS)
    told = pl.concat([told.filter(shown), told.filter(~shown).unique(subset=said, keep="first", maintain_order=True)])
    base = told.select(
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
    versions = events.filter(kind == NCCL_VERSION).get_column("version").drop_nulls().n_unique()
    if versions > 1:
        out.append("xf:nccl_versions_differ")
    seqs = events.filter(kind == WATCHDOG_TIMEOUT).get_column("seq").drop_nulls().n_unique()
    if seqs > 1:
        out.append("xf:watchdog_seq_differ")
    failing = events.filter(IS_FAILURE)
    if failing.is_empty():
        out.append("xf:no_failure_events")
    n_ranks = failing.get_column("rank").drop_nulls().n_unique()
    out.append(f"xf:failed_ranks={'0' if n_ranks == 0 else '1' if n_ranks == 1 else '2-3' if n_ranks < 4 else '4+'}")
    counts = events.select("barrier_world", "barrier_joined").drop_nulls()
    for world, joined in counts.iter_rows():
        out.append("xf:barrier_overfull" if joined > world else "xf:barrier_short" if joined < world else "xf:barrier_full")
    return sorted(set(out))


def hashed(feats: pl.DataFrame, dim: int) -> pl.DataFrame:
    """Add the feature's bucket (``h``) to an (eid, feat) table (one hash per distinct feature)."""
    uniq = feats.get_column("feat").unique().sort()
    table = pl.DataFrame({"feat": uniq, "h": pl.Series([stable_hash(s) % dim for s in uniq.to_list()], dtype=pl.Int64)})
    return feats.join(table, on="feat", how="left")


def job_vector(feats: pl.DataFrame) -> list[int]:
    """The job's active buckets (unique, sorted): a feature is present or not, whatever its count."""
    return [int(h) for h in feats.get_column("h").unique().sort().to_list()]


def logits(model: Model, buckets: Sequence[int]) -> list[float]:
    """Raw class scores of one job (before temperature): bias + weights . tf-idf (L2-normalised idf of the active buckets).

    Sums are exact (math.fsum), so the result does not depend on the order polars' threads
    produce the rows in: training reproduces the same bytes, analysis the same scores.
    """
    if not buckets:
        return list(model.bias)
    hs = pl.Series("h", buckets, dtype=pl.Int64)
    v = model.idf.gather(hs)
    norm = math.sqrt(math.fsum(x * x for x in v.to_list()))
    active = pl.DataFrame({"h": hs, "v": v / norm if norm > 0 else v})
    terms = model.rows(hs).join(active, on="h", how="inner").select("j", (pl.col("w") * pl.col("v")).alias("t"))
    per_label: list[list[float]] = [[] for _ in model.bias]
    for j, t in zip(terms.get_column("j").to_list(), terms.get_column("t").to_list(), strict=True):  # active buckets x labels
        per_label[j].append(t)
    return [b + math.fsum(ts) for b, ts in zip(model.bias, per_label, strict=True)]


def softmax(z: Sequence[float]) -> list[float]:
    top = max(z)
    e = [math.exp(x - top) for x in z]
    total = sum(e)
    return [x / total for x in e]


def predict(model: Model, events: pl.DataFrame) -> Prediction:
    """Calibrated probabilities of every label for the job these events come from."""
    return predict_from(model, events, hashed(event_features(events, model.features), model.features.dim))


def predict_from(model: Model, events: pl.DataFrame, feats: pl.DataFrame) -> Prediction:
    """``predict`` on features already computed (training and evaluation compute them once per case)."""
    probs = softmax([z / model.temperature for z in logits(model, job_vector(feats))])
    return Prediction(dict(zip(model.labels, probs, strict=True)), lambda: evidence(model, events, feats))


def evidence(model: Model, events: pl.DataFrame, feats: pl.DataFrame, limit: int = 3) -> dict[str, list[int]]:
    """Per label, the error-level events whose features weigh most towards it, strongest first."""
    rows = feats.filter(pl.col("eid") >= 0).select("eid", "h").unique()
    loud = numbered(events).filter(pl.col("level").is_in(EVIDENCE_LEVELS)).get_column("eid").cast(pl.Int64)
    rows = rows.filter(pl.col("eid").is_in(loud.implode()))
    if rows.is_empty():
        return {}
    hs = rows.get_column("h").unique()
    idf = pl.DataFrame({"h": hs, "v": model.idf.gather(hs)})
    # events with the same buckets score the same (every rank's copy of one timeout): score each set once
    sets = rows.group_by("eid").agg(pl.col("h").sort().cast(pl.String).str.join(",").alias("key"))
    keys = sets.select(pl.col("key").unique().sort()).with_row_index("g")
    members = keys.select("g", pl.col("key").str.split(",").cast(pl.List(pl.Int64)).alias("h")).explode("h")
    scored = (
        members.join(idf, on="h")
        .join(model.rows(hs), on="h")
        .group_by("j", "g")
        .agg((pl.col("w") * pl.col("v")).sum().alias("c"))
        .filter(pl.col("c") > 0)
    )
    per_event = (
        scored.join(sets.join(keys, on="key").select("g", "eid"), on="g")
        .sort(["j", "c", "eid"], descending=[False, True, False])
        .group_by("j", maintain_order=True)
        .head(limit)
    )
    out: dict[str, list[int]] = {}
    for (j,), group in per_event.group_by(["j"], maintain_order=True):  # one group per label
        out[model.labels[int(j)]] = [int(e) for e in group.get_column("eid").to_list()]
    return out
