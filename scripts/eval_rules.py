"""Measure the rule catalogue on a labelled corpus: per-category accuracy and the misses.

Runs ``logsleuth.analyze`` on every case folder (a folder with ``case.toml``)
under the given corpus directories and compares ``verdict.category`` with the
case's ``category`` and ``verdict.first_failure.rank`` with ``[first_failure]
rank`` when the case states one. Cases are data the rules were *not* written
from, so this is the honest number for the catalogue.

    python scripts/eval_rules.py /work/wt-real/corpus /work/wt-public/corpus
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logsleuth import analyze  # noqa: E402
from logsleuth.cases import find_cases, read_case  # noqa: E402


@dataclass
class CaseResult:
    case: str
    expected: str
    got: str
    cause: str
    expected_rank: int | None
    got_rank: int | None
    rules: list[str]

    @property
    def category_ok(self) -> bool:
        return self.expected == self.got

    @property
    def rank_ok(self) -> bool | None:
        if self.expected_rank is None:
            return None
        return self.expected_rank == self.got_rank


def cases(corpus: Path) -> list[Path]:
    """Every case folder under ``corpus`` (a folder holding a case.toml)."""
    return [c.path for c in find_cases([corpus])]


def evaluate_case(folder: Path, rules: Sequence[str] = ()) -> CaseResult:
    truth = read_case(folder)
    logs = [
        str(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "case.toml" and not p.name.endswith((".toml", ".md", ".py", ".sh", ".json"))
    ]
    report = analyze(logs, rules=list(rules) or None)
    verdict = report.verdict
    top = report.candidates[0].rules if report.candidates else []
    return CaseResult(
        case=folder.name,
        expected=truth.label,
        got=verdict.category,
        cause=verdict.cause,
        expected_rank=truth.rank,
        got_rank=verdict.first_failure.rank,
        rules=list(top),
    )


def evaluate(corpora: Sequence[Path], rules: Sequence[str] = ()) -> list[CaseResult]:
    """Analyse every case of every corpus directory."""
    return [evaluate_case(c, rules) for corpus in corpora for c in cases(corpus)]


def summary(results: list[CaseResult]) -> str:
    """Per-category accuracy, overall accuracy, rank accuracy, and the misses."""
    by_cat: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        by_cat[r.expected].append(r)
    lines = [f"{'category':24} {'ok':>3}/{'n':<3}"]
    for cat in sorted(by_cat):
        rs = by_cat[cat]
        lines.append(f"{cat:24} {sum(r.category_ok for r in rs):>3}/{len(rs):<3}")
    ok = sum(r.category_ok for r in results)
    ranked = [r for r in results if r.rank_ok is not None]
    lines.append(f"{'TOTAL':24} {ok:>3}/{len(results):<3} = {ok / max(1, len(results)):.1%}")
    if ranked:
        rok = sum(bool(r.rank_ok) for r in ranked)
        lines.append(f"first-failure rank: {rok}/{len(ranked)} of the cases that state one")
    misses = [r for r in results if not r.category_ok]
    if misses:
        lines.append("\nmisses:")
        lines.extend(f"  {r.case}: got {r.got} ({r.cause}; rules {','.join(r.rules) or '-'})" for r in misses)
    wrong_rank = [r for r in results if r.category_ok and r.rank_ok is False]
    if wrong_rank:
        lines.append("\nright category, wrong first-failure rank:")
        lines.extend(f"  {r.case}: rank {r.got_rank}, expected {r.expected_rank}" for r in wrong_rank)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="+", type=Path, help="corpus directories (folders of case folders)")
    ap.add_argument("--rules", action="append", default=[], help="extra rule folder (repeatable)")
    args = ap.parse_args(argv)
    print(summary(evaluate(args.corpus, args.rules)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
