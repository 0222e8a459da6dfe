"""`logsleuth train`: corpus -> classifier weights, temperature, fusion weights, threshold -> models/.

Reproducible by construction: cases are read in id order, features are hashed
with CRC-32, torch runs single-threaded with deterministic algorithms on the
portable (non-SIMD-dispatched) CPU kernels in float64, optimisation is full
batch (L-BFGS, no sampling), and the artifact is written with fixed zip
timestamps and sorted JSON. The same corpus, rules and settings give the same
bytes.

The held-out split (corpus.split) is never trained on. Inside the training
split a grouped k-fold gives out-of-fold scores, on which the temperature, the
fusion weights and the abstention threshold are fitted; the final classifier is
then trained on the whole training split.
"""

from __future__ import annotations

import os

# Before torch is imported: the portable kernels give the same floats on every x86 CPU.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")

import hashlib
import io
import json
import math
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from logsleuth import classify, fuse, reason, rulebook
from logsleuth.taxonomy import NON_CAUSES, TAXONOMY

from . import metrics, systems
from .corpus import ORIGINS, Case, Observation, find_cases, folds, observe, origin_of, split

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

MASKS_FILE = Path(__file__).with_name("masks.toml")
#: Every label the classifier can answer: the taxonomy (its order), unknown and none included.
LABELS = tuple(TAXONOMY)


@dataclass(frozen=True)
class Settings:
    """Training settings; the committed model records the ones it was trained with."""

    dim: int = 1 << 14
    l2: float = 1e-4
    max_iter: int = 100
    folds: int = 5
    test_share: float = 0.25
    seed: int = 0
    #: weight of a case by provenance: real logs count more than generated ones
    kind_weights: tuple[tuple[str, float], ...] = (("public", 2.0), ("run-here", 2.0), ("synthetic", 1.0))
    fusion_units: int = 16
    fusion_l2: float = 1e-3
    #: weight of the fusion's training copies with the true cause's rules removed (wordings no rule covers)
    ablation_weight: float = 0.5
    thresholds: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(0, 13))
    max_tokens: int = 64


@dataclass
class Result:
    """What a training run produced, for the CLI to print."""

    npz: Path
    meta: dict[str, Any]
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)


def load_masks(path: Path = MASKS_FILE) -> tuple[tuple[str, str], ...]:
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    return tuple((str(m["pattern"]), str(m["mask"])) for m in data["mask"])


def _deterministic(seed: int) -> None:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def softmax_rows(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a (cases, labels) array."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True))


def tfidf(idf: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Values of a job's active buckets: their idf, L2-normalised over the job (as classify.logits computes them)."""
    v = idf[buckets].astype(np.float64)
    norm = float(np.sqrt((v * v).sum()))
    return np.asarray(v / norm if norm > 0 else v)


def inverse_df(buckets: Sequence[np.ndarray], dim: int) -> np.ndarray:
    """Smoothed inverse document frequency of every bucket over the training jobs."""
    df = np.zeros(dim)
    for b in buckets:
        df[b] += 1
    return np.log((1 + len(buckets)) / (1 + df)) + 1


def fit_linear(
    buckets: Sequence[np.ndarray], idf: np.ndarray, y: np.ndarray, w: np.ndarray, n_labels: int, s: Settings
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted multinomial logistic regression over hashed tf-idf features (binary tf, L2-normalised per job)."""
    _deterministic(s.seed)
    lengths = [len(b) for b in buckets]
    idx = torch.from_numpy(np.concatenate(buckets).astype(np.int64)) if sum(lengths) else torch.zeros(0, dtype=torch.int64)
    offsets = torch.from_numpy(np.cumsum([0, *lengths[:-1]]).astype(np.int64))
    psw = torch.from_numpy(np.concatenate([tfidf(idf, b) for b in buckets] or [np.zeros(0)]))
    bag = torch.nn.EmbeddingBag(s.dim, n_labels, mode="sum", dtype=torch.float64)
    torch.nn.init.zeros_(bag.weight)
    bias = torch.zeros(n_labels, dtype=torch.float64, requires_grad=True)
    target = torch.from_numpy(y.astype(np.int64))
    weight = torch.from_numpy(w.astype(np.float64))
    weight = weight / weight.sum()
    opt = torch.optim.LBFGS(
        [bag.weight, bias],
        lr=1.0,
        max_iter=s.max_iter,
        tolerance_grad=1e-10,
        tolerance_change=1e-14,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        z = bag(idx, offsets, per_sample_weights=psw) + bias
        loss = (torch.nn.functional.cross_entropy(z, target, reduction="none") * weight).sum() + s.l2 * (bag.weight**2).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    return bag.weight.detach().numpy().copy(), bias.detach().numpy().copy()


def fit_temperature(z: np.ndarray, y: np.ndarray) -> float:
    """The temperature that minimises held-out log loss (a 1-D search on a log grid, then refined)."""

    def nll(t: float) -> float:
        p = softmax_rows(z / t)
        return float(-np.log(np.maximum(p[np.arange(len(y)), y], 1e-12)).mean())

    grid = np.exp(np.linspace(math.log(0.05), math.log(20.0), 61))
    best = float(grid[int(np.argmin([nll(t) for t in grid]))])
    lo, hi = best / 1.12, best * 1.12
    for _ in range(40):  # golden-section refinement
        a, b = hi - (hi - lo) / 1.618, lo + (hi - lo) / 1.618
        lo, hi = (lo, b) if nll(a) < nll(b) else (a, hi)
    return round((lo + hi) / 2, 6)


def fit_fusion(signal_sets: np.ndarray, y: np.ndarray, w: np.ndarray, s: Settings) -> classify.Fusion:
    """The fusion network (one tanh layer plus a linear term, shared by every label), fitted on out-of-fold signals."""
    _deterministic(s.seed)
    gen = torch.Generator().manual_seed(s.seed)
    n_signals = signal_sets.shape[2]
    x = torch.from_numpy(signal_sets)  # (cases, labels, signals)
    target = torch.from_numpy(y.astype(np.int64))
    weight = torch.from_numpy(w / w.sum())
    hidden = (torch.randn(n_signals, s.fusion_units, generator=gen, dtype=torch.float64) * 0.3).requires_grad_()
    hidden_bias = torch.zeros(s.fusion_units, dtype=torch.float64, requires_grad=True)
    out = (torch.randn(s.fusion_units, generator=gen, dtype=torch.float64) * 0.3).requires_grad_()
    linear = torch.zeros(n_signals, dtype=torch.float64, requires_grad=True)
    params = [hidden, hidden_bias, out, linear]
    opt = torch.optim.LBFGS(
        params, lr=1.0, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        z = torch.tanh(x @ hidden + hidden_bias) @ out + x @ linear
        penalty = sum((p**2).sum() for p in (hidden, out, linear))
        loss = (torch.nn.functional.cross_entropy(z, target, reduction="none") * weight).sum() + s.fusion_l2 * penalty
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    # rounded to float32 here, as stored, so what training measures is what the shipped file computes
    return classify.Fusion.from_arrays(
        {name: p.detach().numpy().astype(np.float32) for name, p in zip(classify.Fusion.ARRAYS, params, strict=True)}, 0.0
    )


def fusion_arrays(fusion: classify.Fusion) -> dict[str, np.ndarray]:
    """The fusion's arrays under their .npz names."""
    values = (fusion.hidden, fusion.hidden_bias, fusion.out, fusion.linear)
    return {name: np.asarray(v, dtype=np.float32) for name, v in zip(classify.Fusion.ARRAYS, values, strict=True)}


def fused_rows(signal_sets: np.ndarray, fusion: classify.Fusion) -> np.ndarray:
    """Fused probabilities of every example, computed by the code analysis runs (fuse.scores)."""
    return np.array([classify.softmax(fuse.scores(x, fusion)) for x in signal_sets.tolist()])


def constrained_rows(probs: np.ndarray, reasonings: Sequence[reason.Reasoning], labels: Sequence[str]) -> np.ndarray:
    """Fused probabilities after what the reasoner established (fuse.constrain), as analysis sees them."""
    out = np.zeros_like(probs)
    for i, (row, reasoning) in enumerate(zip(probs.tolist(), reasonings, strict=True)):
        kept, _ = fuse.constrain(dict(zip(labels, row, strict=True)), reasoning)
        out[i] = [kept.get(label, 0.0) for label in labels]
    return out


def sample_weights(cases: Sequence[Case], s: Settings) -> np.ndarray:
    """Balanced class weights times provenance weights."""
    counts: dict[str, int] = {}
    for c in cases:
        counts[c.label] = counts.get(c.label, 0) + 1
    kinds = dict(s.kind_weights)
    n, k = len(cases), len(counts)
    return np.array([n / (k * counts[c.label]) * kinds.get(c.kind, 1.0) for c in cases])


def _model(
    labels: Sequence[str],
    weights: np.ndarray,
    bias: np.ndarray,
    idf: np.ndarray,
    cfg: classify.FeatureConfig,
    temperature: float,
    fusion: classify.Fusion | None,
) -> classify.Model:
    """A model from float64 training results, rounded to what is stored (float32), so scores match the shipped file."""
    blank = classify.Fusion([[0.0]] * len(fuse.SIGNALS), [0.0], [0.0], [0.0] * len(fuse.SIGNALS), 0.0)
    return classify.Model.build(
        labels,
        weights.astype(np.float32).ravel(),
        bias.astype(np.float32),
        idf.astype(np.float32),
        cfg,
        temperature,
        fusion or blank,
    )


def train(
    corpora: Sequence[str | Path],
    out: str | Path,
    *,
    rules: Sequence[str | Path] = (),
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Train on the training split of ``corpora`` and write ``<out>/classifier.{npz,json}``."""
    s = settings or Settings()
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    ruleset = rulebook.load(rules)
    cfg = classify.FeatureConfig(s.dim, load_masks(), s.max_tokens)
    cases = find_cases(corpora)
    if not cases:
        raise ValueError(f"no cases (folders with case.toml) under {', '.join(map(str, corpora))}")
    train_cases, test_cases = split(cases, s.test_share)
    say(f"{len(cases)} cases: {len(train_cases)} train, {len(test_cases)} held out")
    obs: dict[str, Observation] = {}
    for i, case in enumerate(cases, 1):
        obs[case.id] = observe(case, ruleset, cfg)
        if i % 50 == 0:
            say(f"  read {i}/{len(cases)} cases")
    labels = list(LABELS)
    index = {label: i for i, label in enumerate(labels)}
    tr = [obs[c.id] for c in train_cases]
    y = np.array([index[c.label] for c in train_cases])
    w = sample_weights(train_cases, s)

    # out-of-fold scores on the training split: what calibration and fusion are fitted on
    fold = folds(train_cases, s.folds)
    oof = np.zeros((len(tr), len(labels)))
    for k in range(s.folds):
        inside, outside = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        if outside.size == 0 or inside.size == 0:
            continue
        idf_k = inverse_df([tr[i].buckets for i in inside], s.dim)
        wk, bk = fit_linear([tr[i].buckets for i in inside], idf_k, y[inside], w[inside], len(labels), s)
        part = _model(labels, wk, bk, idf_k, cfg, 1.0, None)
        for j in outside:
            oof[j] = classify.logits(part, tr[j].buckets.tolist())
        say(f"  fold {k + 1}/{s.folds}: {outside.size} cases scored")
    temperature = fit_temperature(oof, y)
    oof_probs = softmax_rows(oof / temperature)
    sig, sig_y, sig_w, blind, reasonings = fusion_examples(tr, oof_probs, y, w, labels, ruleset, s.ablation_weight)
    fusion = fit_fusion(sig, sig_y, sig_w, s)
    fused_p = constrained_rows(fused_rows(sig, fusion), reasonings, labels)
    fusion.threshold = _pick_threshold(fused_p, sig_y, labels, s.thresholds)
    say(
        f"  temperature {temperature:.3f}, fusion fitted on {len(sig_y)} examples ({int(blind.sum())} without their rules), threshold {fusion.threshold}"
    )

    idf = inverse_df([o.buckets for o in tr], s.dim)
    weights, bias = fit_linear([o.buckets for o in tr], idf, y, w, len(labels), s)
    model = _model(labels, weights, bias, idf, cfg, temperature, fusion)
    held = [obs[c.id] for c in test_cases]
    meta = {
        "format": "logsleuth-classifier-1",
        "labels": labels,
        "features": cfg.to_dict(),
        "temperature": temperature,
        "fusion": {"threshold": fusion.threshold, "signals": list(fuse.SIGNALS), "units": s.fusion_units},
        "settings": {
            k: (list(map(list, v)) if k == "kind_weights" else list(v) if isinstance(v, tuple) else v) for k, v in asdict(s).items()
        },
        "seed": s.seed,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "training_data": {
            "cases": len(train_cases),
            "held_out_cases": len(test_cases),
            "sha256": corpus_hash(train_cases),
            "held_out_sha256": corpus_hash(test_cases),
            "train_groups": sorted({c.group for c in train_cases}),
            "held_out_groups": sorted({c.group for c in test_cases}),
            "per_label": {label: sum(c.label == label for c in train_cases) for label in labels},
            "per_kind": {kind: sum(c.kind == kind for c in train_cases) for kind in sorted({c.kind for c in train_cases})},
        },
        "rules_sha256": rules_hash(ruleset),
        "metrics": {
            "out_of_fold": _oof_metrics(oof_probs, fused_p[~blind], y, labels),
            "held_out": held_out_metrics(model, held, ruleset) if held else {},
        },
    }
    npz = Path(out) / f"{classify.MODEL_NAME}.npz"
    arrays = {"weights": weights, "bias": bias, "idf": idf, **fusion_arrays(fusion)}
    write_model(npz, arrays, meta)
    return Result(npz, meta, round(time.monotonic() - started, 1))


def fusion_examples(
    obs: Sequence[Observation],
    probs: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    labels: Sequence[str],
    ruleset: rulebook.RuleSet,
    ablation_weight: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[reason.Reasoning]]:
    """Fusion signals of every training case, plus a copy reasoned without its own cause's rules.

    The copies teach the fusion what a wording no rule covers looks like: other rules
    fire on the side effects, and only the classifier knows the cause. The fourth array
    marks the copies; the list holds each row's reasoning.
    """
    sig, ys, ws, blind_rows, reasonings = [], [], [], [], []
    for o, p, label, weight in zip(obs, probs, y, w, strict=True):
        named = dict(zip(labels, p, strict=True))
        sig.append(fuse.signals(o.reasoning, named, labels))
        ys.append(label)
        ws.append(weight)
        blind_rows.append(False)
        reasonings.append(o.reasoning)
        if ablation_weight > 0 and o.case.label not in NON_CAUSES:
            blind = reason.reason(o.events, o.hits.filter(pl.col("category") != o.case.label), ruleset)
            sig.append(fuse.signals(blind, named, labels))
            ys.append(label)
            ws.append(weight * ablation_weight)
            blind_rows.append(True)
            reasonings.append(blind)
    return np.stack(sig), np.array(ys), np.array(ws), np.array(blind_rows), reasonings


def _pick_threshold(probs: np.ndarray, y: np.ndarray, labels: Sequence[str], grid: Sequence[float]) -> float:
    """The abstention threshold that maximises out-of-fold macro-F1 (ties: the lowest)."""
    truth = [labels[i] for i in y]
    best, best_f1 = 0.0, -1.0
    for t in grid:
        pred = []
        for p in probs:
            top = int(np.argmax(p))
            label = labels[top]
            pred.append(label if label in ("none", "unknown") or p[top] >= t else "unknown")
        f1 = metrics.score(truth, pred).macro_f1
        if f1 > best_f1 + 1e-12:
            best, best_f1 = float(t), f1
    return best


def _oof_metrics(clf: np.ndarray, fused: np.ndarray, y: np.ndarray, labels: Sequence[str]) -> dict[str, Any]:
    truth = [labels[i] for i in y]
    out = {}
    for name, p in (("classifier", clf), ("fused", fused)):
        pred = [labels[int(np.argmax(row))] for row in p]
        sc = metrics.score(truth, pred, confidence=[float(row.max()) for row in p])
        out[name] = {"accuracy": sc.accuracy, "macro_f1": sc.macro_f1, "ece": sc.ece}
    return out


def held_out_metrics(model: classify.Model, held: Sequence[Observation], ruleset: rulebook.RuleSet) -> dict[str, Any]:
    """Top-line scores on the held-out split, real and synthetic cases apart (the full report is `logsleuth eval`)."""
    out: dict[str, Any] = {}
    for origin in ORIGINS:
        part = [o for o in held if origin_of(o.case) == origin]
        if not part:
            continue
        truth = [o.case.label for o in part]
        preds = [systems.predict(model, o) for o in part]
        out[origin] = {"n": len(part)}
        for name, verdicts in (
            ("rules", [systems.rules_only(o, ruleset) for o in part]),
            ("classifier", [systems.classifier_only(p) for p in preds]),
            ("fused", [systems.fused(o, p, model, ruleset) for o, p in zip(part, preds, strict=True)]),
        ):
            sc = metrics.score(
                truth, [v.label for v in verdicts], [v.ranked for v in verdicts], confidence=[v.confidence for v in verdicts]
            )
            out[origin][name] = {"accuracy": sc.accuracy, "top3": sc.top3, "macro_f1": sc.macro_f1, "ece": sc.ece}
    return out


def corpus_hash(cases: Sequence[Case]) -> str:
    """SHA-256 over every case's id, label, group and file contents (paths relative to the case)."""
    h = hashlib.sha256()
    for c in sorted(cases, key=lambda c: c.id):
        h.update(f"{c.id}\0{c.label}\0{c.group}\0".encode())
        for f in sorted(p for p in c.path.rglob("*") if p.is_file()):
            h.update(f"{f.relative_to(c.path).as_posix()}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def rules_hash(ruleset: rulebook.RuleSet) -> str:
    """SHA-256 of what the rules contribute to features and fusion: ids, causes, patterns, keywords, weights."""
    h = hashlib.sha256()
    for r in sorted(ruleset.rules, key=lambda r: r.id):
        h.update(
            json.dumps([r.id, r.cause, r.role, r.weight, list(r.patterns), list(r.keywords), list(r.exclude)], sort_keys=True).encode()
        )
    return h.hexdigest()


#: Fixed timestamp of zip entries (the earliest a zip can hold), so the file is byte-identical.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def write_model(npz: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write the .npz (deterministic zip of float32 .npy arrays) and the .json next to it."""
    npz.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in sorted(arrays.items()):
            data = io.BytesIO()
            np.lib.format.write_array(data, np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data.getvalue())
    npz.write_bytes(buf.getvalue())
    npz.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
