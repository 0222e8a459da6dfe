"""First contact: score a batch of real cases nobody has tuned on, exactly as a user meets them.

A new batch of real cases is scored by the current code and model *before* any
rule, parser or model changes because of it; the score goes into a ledger kept
in the repository (``corpus/ledger.jsonl``, rendered to ``corpus/LEDGER.md``).
Only then may the batch be used to improve rules and train. Each case is run
through :func:`logsleuth.analyze` on its log files (what ``logsleuth analyze``
does), not through the evaluation shortcuts, so the score is what a user gets.

The worst miss is ``none`` on a job that failed (a false all-clear); it is
counted on its own, as are honest ``unknown`` abstentions and wrong causes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

from logsleuth.api import analyze_jobs
from logsleuth.cases import Case, CorpusError, case_files, find_cases

#: How a case's answer is classed, worst first.
OUTCOMES = ("false_all_clear", "wrong", "false_alarm", "unknown", "top3", "right")


@dataclass
class CaseScore:
    """One case of a batch: the truth, what logsleuth said, and how that is classed."""

    case: str
    kind: str
    label: str
    log_supports: bool
    predicted: str
    predicted_cause: str
    confidence: float
    top3: list[str]
    rank: int | None
    predicted_rank: int | None
    outcome: str


def classify_outcome(label: str, predicted: str, top3: Sequence[str]) -> str:
    """Right, in the top 3, an honest unknown, a wrong cause, a false alarm or a false all-clear."""
    if predicted == label:
        return "right"
    if label != "none" and predicted == "none":
        return "false_all_clear"
    if label == "none":
        return "false_alarm"
    if label in top3:
        return "top3"
    if predicted == "unknown":
        return "unknown"
    return "wrong"


def score_case(case: Case) -> CaseScore:
    """Analyse one case's logs as a user would and class the answer against its label.

    A case holding several SLURM jobs (an earlier run kept beside the failed one) is
    labelled by its latest job: that job's report is the one scored.
    """
    reports = analyze_jobs([str(p) for p in case_files(case.path)])
    report = next((r for r in reversed(reports) if r.job is not None), reports[-1])
    v = report.verdict
    ranked = list(dict.fromkeys([v.category, *(c.category for c in report.candidates)]))
    return CaseScore(
        case=case.id,
        kind=case.kind,
        label=case.label,
        log_supports=case.log_supports,
        predicted=v.category,
        predicted_cause=v.cause,
        confidence=round(float(v.confidence), 4),
        top3=ranked[:3],
        rank=case.rank,
        predicted_rank=v.first_failure.rank,
        outcome=classify_outcome(case.label, v.category, ranked[:3]),
    )


def score_batch(folders: Sequence[Path], *, progress: Callable[[str], None] | None = None) -> list[CaseScore]:
    """Score every case of the batch folders (laid out as corpus/: one folder with case.toml per case)."""
    say = progress or (lambda _m: None)
    cases = find_cases(folders)
    if not cases:
        raise CorpusError(f"no case folders (with case.toml) in {', '.join(map(str, folders))}")
    out = []
    for i, case in enumerate(cases, 1):
        out.append(score_case(case))
        if i % 20 == 0:
            say(f"  scored {i}/{len(cases)} cases")
    return out


def summarise(batch: str, scores: Sequence[CaseScore], *, commit: str = "", when: str | None = None) -> dict[str, Any]:
    """The ledger entry of one batch: counts, top-1/top-3, first-failure rank and every miss."""
    n = len(scores)
    supported = [s for s in scores if s.log_supports]
    ranked = [s for s in scores if s.rank is not None and s.label not in ("none", "unknown")]
    outcomes = Counter(s.outcome for s in scores)

    def share(xs: Sequence[CaseScore], ok: Callable[[CaseScore], bool]) -> float | None:
        return round(sum(map(ok, xs)) / len(xs), 4) if xs else None

    return {
        "date": when or date.today().isoformat(),
        "batch": batch,
        "commit": commit,
        "n": n,
        "kinds": dict(sorted(Counter(s.kind for s in scores).items())),
        "top1": share(scores, lambda s: s.outcome == "right"),
        "top3": share(scores, lambda s: s.outcome in ("right", "top3")),
        "log_supported_n": len(supported),
        "top1_log_supported": share(supported, lambda s: s.outcome == "right"),
        "first_failure_rank_n": len(ranked),
        "first_failure_rank": share(ranked, lambda s: s.predicted_rank == s.rank),
        "outcomes": {k: outcomes.get(k, 0) for k in OUTCOMES},
        "misses": [
            {"case": s.case, "label": s.label, "predicted": s.predicted, "outcome": s.outcome, "log_supports": s.log_supports}
            for s in scores
            if s.outcome != "right"
        ],
    }


def append(ledger: Path, entry: dict[str, Any], scores: Sequence[CaseScore]) -> None:
    """Append the batch to the ledger (JSON lines) and write its per-case rows beside it."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    if any(e["batch"] == entry["batch"] for e in read_ledger(ledger)):
        raise ValueError(f"batch {entry['batch']!r} is already in {ledger}: a batch is scored once, at first contact")
    with ledger.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    rows = ledger.with_name(f"ledger-{entry['batch']}.jsonl")
    rows.write_text("".join(json.dumps(asdict(s), sort_keys=True) + "\n" for s in scores), encoding="utf-8")
    ledger.with_name("LEDGER.md").write_text(render_ledger(read_ledger(ledger)), encoding="utf-8")


def read_ledger(ledger: Path) -> list[dict[str, Any]]:
    """Every batch scored so far, oldest first."""
    if not ledger.is_file():
        return []
    return [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines() if line.strip()]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def render_ledger(entries: Sequence[dict[str, Any]]) -> str:
    """The ledger as Markdown: one row per batch (the trend), then each batch's misses."""
    lines = [
        "# First-contact ledger",
        "",
        "Each batch of real cases was scored by the code and model of the commit shown, *before*",
        "anything was changed because of it (`logsleuth eval --first-contact BATCH DIR`). This file is",
        "generated from `ledger.jsonl`; per-case rows are in `ledger-<batch>.jsonl`.",
        "",
        "| date | batch | commit | n | top-1 | top-3 | top-1 (log supports label) | first-failure rank | false all-clear | wrong | false alarm | unknown |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for e in entries:
        o = e["outcomes"]
        lines.append(
            f"| {e['date']} | {e['batch']} | {e['commit'] or '–'} | {e['n']} | {_pct(e['top1'])} | {_pct(e['top3'])} | "
            f"{_pct(e['top1_log_supported'])} (n={e['log_supported_n']}) | {_pct(e['first_failure_rank'])} (n={e['first_failure_rank_n']}) | "
            f"{o['false_all_clear']} | {o['wrong']} | {o['false_alarm']} | {o['unknown']} |"
        )
    for e in entries:
        lines += ["", f"## {e['batch']}: misses at first contact", ""]
        if not e["misses"]:
            lines.append("none")
            continue
        lines += ["| case | label | logsleuth said | outcome | log supports label |", "|---|---|---|---|---|"]
        lines += [
            f"| `{m['case']}` | {m['label']} | {m['predicted']} | {m['outcome']} | {'yes' if m['log_supports'] else 'no'} |"
            for m in e["misses"]
        ]
    return "\n".join(lines) + "\n"
