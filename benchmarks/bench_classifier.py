#!/usr/bin/env python3
"""How much time the classifier adds to an analysis.

    python benchmarks/bench_classifier.py [CASE_DIR_OR_CORPUS ...] [--repeat 5]

For every case folder: analyze() with the shipped model and with rules only,
each ``--repeat`` times after one warm-up run; the difference of the medians is
what the classifier (features, inference, fusion) adds. Also times the
classifier stage alone on the already-parsed event table, and a large
synthetic job (every case's logs at once) as the worst case. Prints per-case
percentiles. Run it on an idle machine: other load inflates both sides.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logsleuth import api, classify, fuse, pipeline, rulebook  # noqa: E402


def cases(roots: list[str]) -> list[Path]:
    out: list[Path] = []
    for root in map(Path, roots):
        out += [root] if (root / "case.toml").exists() else sorted(p.parent for p in root.glob("*/case.toml"))
    return out


def median_ms(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def _stage(events, reasoning, model) -> None:  # type: ignore[no-untyped-def]
    fuse.fuse(events, reasoning, classify.predict(model, events), model)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["corpus"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sample", type=int, default=40, help="cases to time (evenly spread over the list)")
    args = ap.parse_args()
    found = cases(args.paths)
    chosen = found[:: max(1, len(found) // args.sample)][: args.sample]
    model = classify.load()
    if model is None:
        print("no shipped model: train one first (logsleuth train)", file=sys.stderr)
        return 1
    rules = rulebook.load()

    def cold_load() -> None:
        classify._load.cache_clear()
        classify.load()

    load_ms = median_ms(cold_load, args.repeat)
    added, stage, sizes = [], [], []
    for case in chosen:
        with_model = median_ms(functools.partial(api.analyze, [case]), args.repeat)
        rules_only = median_ms(functools.partial(api.analyze, [case], classifier=False), args.repeat)
        (run,) = pipeline.run([case], rules=rules, until="reason")
        events, reasoning = run.events, run.reasoning
        assert reasoning is not None
        stage.append(median_ms(functools.partial(_stage, events, reasoning, model), args.repeat))
        added.append(with_model - rules_only)
        sizes.append(events.height)

    def pct(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

    print(
        f"{len(chosen)} cases, {args.repeat} runs each (median per case); events per case: median {statistics.median(sizes):.0f}, max {max(sizes)}"
    )
    print(f"{'':32s} {'p50':>8s} {'p90':>8s} {'max':>8s}")
    print(f"{'analyze() with - without model':32s} {pct(added, 0.5):8.1f} {pct(added, 0.9):8.1f} {max(added):8.1f}  ms")
    print(f"{'classifier + fusion stage alone':32s} {pct(stage, 0.5):8.1f} {pct(stage, 0.9):8.1f} {max(stage):8.1f}  ms")
    (run,) = pipeline.run(chosen, rules=rules, until="reason")
    events, reasoning, big = run.events, run.reasoning, run.inputs
    assert reasoning is not None
    big_ms = median_ms(lambda: fuse.fuse(events, reasoning, classify.predict(model, events), model), args.repeat)
    print(f"{'stage on all sampled logs at once':32s} {big_ms:8.1f} ms  ({events.height} events, {len(big)} files)")
    print(f"{'loading the model (once a process)':32s} {load_ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
