"""`logsleuth eval`: score rules, classifier, fusion and the naive baselines on held-out cases.

Held out means: every case of the given corpora whose group the model was not
trained on (the model's metadata lists its training groups). The cases of the
training groups are used only to fit the scikit-learn baseline on the same split.

The ablation asks what the classifier is for: for each cause, remove every rule
of that cause (as if no rule covered its wording), run the whole pipeline again
on that cause's held-out cases, and compare rules-only and fused accuracy with
and without those rules.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logsleuth import classify, rulebook
from logsleuth.rulebook import RuleSet

from . import baselines, metrics, systems
from .corpus import ORIGINS, Case, Observation, find_cases, observe, origin_of
from .train import Settings, load_masks

#: Systems in the order the tables show them.
SYSTEMS = ("fused", "rules", "classifier", "tfidf_logreg", "exit_code", "last_exception", "first_keyword")


@dataclass
class Evaluation:
    """Everything `logsleuth eval` prints."""

    held_out: int
    trained_on: int
    systems: dict[str, dict[str, metrics.Scores]]  # origin (real | synthetic) -> system -> scores
    by_kind: dict[str, dict[str, dict[str, float]]]
    ablation: list[dict[str, Any]]
    cases: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "held_out_cases": self.held_out,
            "training_cases_seen": self.trained_on,
            "model": self.model,
            "held_out_by_origin": {o: sum(1 for c in self.cases if c["origin"] == o) for o in self.systems},
            "systems": {o: {k: v.to_dict() for k, v in per.items()} for o, per in self.systems.items()},
            "by_provenance": self.by_kind,
            "ablation": self.ablation,
            "cases": self.cases,
            "notes": self.notes,
        }


def without(ruleset: RuleSet, category: str) -> RuleSet:
    """The rule set minus every rule whose cause rolls up to ``category``."""
    return RuleSet([r for r in ruleset.rules if ruleset.category(r.cause) != category], ruleset.causes, ruleset.sources)


def evaluate(
    corpora: Sequence[str | Path],
    *,
    model_path: str | Path | None = None,
    rules: Sequence[str | Path] = (),
    ablation: bool = True,
    sklearn: bool = True,
    progress: Callable[[str], None] | None = None,
    groups: Sequence[str] | None = None,
) -> Evaluation:
    """Score every system on the held-out cases of ``corpora`` (only those of ``groups`` when given)."""
    say = progress or (lambda _msg: None)
    notes: list[str] = []
    model = classify.load(model_path)
    ruleset = rulebook.load(rules)
    if model is None:
        notes.append("no model file: only rules and the naive baselines are scored")
        cfg = classify.FeatureConfig(Settings().dim, load_masks(), Settings().max_tokens)
        trained: set[str] = set()
    else:
        cfg = model.features
        trained = set(model.meta.get("training_data", {}).get("train_groups", []))
    cases = find_cases(corpora)
    held_cases = [c for c in cases if c.group not in trained and (groups is None or c.group in groups)]
    train_cases = [c for c in cases if c.group in trained]
    if not held_cases:
        raise ValueError("every case is in the model's training groups: nothing is held out")
    say(f"{len(held_cases)} held-out cases, {len(train_cases)} cases of training groups")
    held = _observe_all(held_cases, ruleset, cfg, say)
    verdicts: dict[str, list[str]] = {}
    extra: dict[str, list[systems.Verdict]] = {}
    extra["rules"] = [systems.rules_only(o, ruleset) for o in held]
    if model is not None:
        preds = [systems.predict(model, o) for o in held]
        extra["classifier"] = [systems.classifier_only(p) for p in preds]
        extra["fused"] = [systems.fused(o, p, model, ruleset) for o, p in zip(held, preds, strict=True)]
    for name, fn in (
        ("exit_code", baselines.exit_code),
        ("last_exception", baselines.last_exception),
        ("first_keyword", baselines.first_keyword),
    ):
        verdicts[name] = [fn(o) for o in held]
    if sklearn and train_cases:
        say("fitting the tf-idf + logistic regression baseline on the training groups")
        verdicts["tfidf_logreg"] = baselines.tfidf_logreg(_observe_all(train_cases, ruleset, cfg, say), held)
    elif sklearn:
        notes.append("tf-idf baseline skipped: none of the model's training cases are in the given corpora")
    truth = [o.case.label for o in held]
    scores: dict[str, dict[str, metrics.Scores]] = {}
    for origin in ORIGINS:
        idx = [i for i, o in enumerate(held) if origin_of(o.case) == origin]
        if not idx:
            continue
        scores[origin] = {}
        t = [truth[i] for i in idx]
        for name in SYSTEMS:
            if name in extra:
                vs = [extra[name][i] for i in idx]
                ff = [(held[i].case.rank, v.rank) for i, v in zip(idx, vs, strict=True)] if name != "classifier" else None
                scores[origin][name] = metrics.score(
                    t, [v.label for v in vs], [v.ranked for v in vs], confidence=[v.confidence for v in vs], first=ff
                )
            elif name in verdicts:
                scores[origin][name] = metrics.score(t, [verdicts[name][i] for i in idx])
    labels_of = {name: [v.label for v in vs] for name, vs in extra.items()} | verdicts
    by_kind = _by_kind(held, truth, labels_of)
    rows = [
        {
            "case": o.case.id,
            "kind": o.case.kind,
            "origin": origin_of(o.case),
            "label": o.case.label,
            **{name: labels_of[name][i] for name in SYSTEMS if name in labels_of},
        }
        for i, o in enumerate(held)
    ]
    abl = _ablation(held, ruleset, model, cfg, say) if ablation and model is not None else []
    info = {}
    if model is not None:
        info = {
            "source": model.source,
            "trained_on_sha256": model.meta.get("training_data", {}).get("sha256"),
            "rules_sha256_at_training": model.meta.get("rules_sha256"),
            "threshold": model.fusion.threshold,
            "temperature": model.temperature,
        }
    return Evaluation(len(held), len(train_cases), scores, by_kind, abl, rows, notes, info)


def _observe_all(cases: Sequence[Case], ruleset: RuleSet, cfg: classify.FeatureConfig, say: Callable[[str], None]) -> list[Observation]:
    out = []
    for i, c in enumerate(cases, 1):
        out.append(observe(c, ruleset, cfg))
        if i % 100 == 0:
            say(f"  read {i}/{len(cases)} cases")
    return out


def _by_kind(held: Sequence[Observation], truth: Sequence[str], labels_of: dict[str, list[str]]) -> dict[str, dict[str, dict[str, float]]]:
    """Accuracy and macro-F1 of every system per provenance (run-here, public, synthetic)."""
    idx: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(held):
        idx[o.case.kind].append(i)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind, members in sorted(idx.items()):
        t = [truth[i] for i in members]
        out[kind] = {}
        for name, pred in labels_of.items():
            sc = metrics.score(t, [pred[i] for i in members])
            out[kind][name] = {"n": len(members), "accuracy": sc.accuracy, "macro_f1": sc.macro_f1}
    return out


def _ablation(
    held: Sequence[Observation], ruleset: RuleSet, model: classify.Model, cfg: classify.FeatureConfig, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Per cause: accuracy on its held-out cases with all rules, and with that cause's rules removed."""
    by_label: dict[str, list[Observation]] = defaultdict(list)
    for o in held:
        if o.case.label not in ("none", "unknown"):
            by_label[o.case.label].append(o)
    out = []
    say(f"ablation: {len(by_label)} causes")
    for label, obs in sorted(by_label.items()):
        reduced = without(ruleset, label)
        removed = len(ruleset.rules) - len(reduced.rules)
        full_rules = [systems.rules_only(o, ruleset).label == label for o in obs]
        full_fused = [systems.fused(o, systems.predict(model, o), model, ruleset).label == label for o in obs]
        ab_obs = [observe(o.case, reduced, cfg) for o in obs]
        ab_preds = [systems.predict(model, o) for o in ab_obs]
        ab_rules = [systems.rules_only(o, reduced).label == label for o in ab_obs]
        ab_clf = [systems.classifier_only(p).label == label for p in ab_preds]
        ab_fused = [systems.fused(o, p, model, reduced).label == label for o, p in zip(ab_obs, ab_preds, strict=True)]
        n = len(obs)
        out.append(
            {
                "cause": label,
                "cases": n,
                "rules_removed": removed,
                "rules": round(sum(full_rules) / n, 4),
                "fused": round(sum(full_fused) / n, 4),
                "rules_ablated": round(sum(ab_rules) / n, 4),
                "classifier_ablated": round(sum(ab_clf) / n, 4),
                "fused_ablated": round(sum(ab_fused) / n, 4),
            }
        )
    return out


def ablation_totals(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Case-weighted accuracies over all causes of the ablation."""
    n = sum(r["cases"] for r in rows)
    if not n:
        return {}
    keys = ("rules", "fused", "rules_ablated", "classifier_ablated", "fused_ablated")
    return {k: round(sum(r[k] * r["cases"] for r in rows) / n, 4) for k in keys} | {"cases": n}


def render(ev: Evaluation, *, width: int = 160) -> str:
    """The evaluation as terminal tables (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width, record=True, file=io.StringIO())
    console.print(f"[bold]Held-out cases:[/] {ev.held_out}  (cases of training groups seen: {ev.trained_on})")
    for note in ev.notes:
        console.print(f"note: {note}")
    for origin, per in ev.systems.items():
        n = next(iter(per.values())).n if per else 0
        t = Table(title=f"Systems on held-out {origin} cases (n={n})", title_justify="left")
        for col in ("system", "top-1", "top-3", "macro-F1", "first-failure rank", "ECE", "abstained"):
            t.add_column(col, justify="left" if col == "system" else "right")
        for name, sc in per.items():
            ff = f"{sc.first_failure:.3f} (n={sc.first_failure_n})" if sc.first_failure is not None else "-"
            t.add_row(name, f"{sc.accuracy:.3f}", _opt(sc.top3), f"{sc.macro_f1:.3f}", ff, _opt(sc.ece), _opt(sc.abstained))
        console.print(t)
    t = Table(title="By provenance (top-1 / macro-F1)", title_justify="left")
    t.add_column("system")
    kinds = list(ev.by_kind)
    for k in kinds:
        t.add_column(f"{k} (n={next(iter(ev.by_kind[k].values()))['n']:.0f})", justify="right")
    for name in SYSTEMS:
        if not any(name in ev.by_kind[k] for k in kinds):
            continue
        t.add_row(
            name,
            *(
                f"{ev.by_kind[k][name]['accuracy']:.3f} / {ev.by_kind[k][name]['macro_f1']:.3f}" if name in ev.by_kind[k] else "-"
                for k in kinds
            ),
        )
    console.print(t)
    for origin, per in ev.systems.items():
        if "fused" not in per:
            continue
        sc = per["fused"]
        t = Table(title=f"Fused, per class, {origin} cases", title_justify="left")
        for col in ("label", "precision", "recall", "F1", "support", "confused with"):
            t.add_column(col, justify="left" if col in ("label", "confused with") else "right")
        for label, v in sc.per_class.items():
            wrong = {p: n for p, n in sc.confusion.get(label, {}).items() if p != label}
            t.add_row(
                label,
                f"{v['precision']:.2f}",
                f"{v['recall']:.2f}",
                f"{v['f1']:.2f}",
                str(v["support"]),
                ", ".join(f"{p} x{n}" for p, n in sorted(wrong.items())),
            )
        console.print(t)
    if ev.ablation:
        t = Table(title="Ablation: a cause's rules removed, accuracy on its held-out cases", title_justify="left")
        for col in ("cause", "cases", "rules removed", "rules", "fused", "rules ablated", "classifier", "fused ablated"):
            t.add_column(col, justify="left" if col == "cause" else "right")
        for r in ev.ablation:
            t.add_row(
                r["cause"],
                str(r["cases"]),
                str(r["rules_removed"]),
                f"{r['rules']:.2f}",
                f"{r['fused']:.2f}",
                f"{r['rules_ablated']:.2f}",
                f"{r['classifier_ablated']:.2f}",
                f"{r['fused_ablated']:.2f}",
            )
        tot = ablation_totals(ev.ablation)
        t.add_row(
            "all",
            str(tot["cases"]),
            "",
            f"{tot['rules']:.2f}",
            f"{tot['fused']:.2f}",
            f"{tot['rules_ablated']:.2f}",
            f"{tot['classifier_ablated']:.2f}",
            f"{tot['fused_ablated']:.2f}",
            style="bold",
        )
        console.print(t)
    return console.export_text()


def _opt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
