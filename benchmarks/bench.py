"""Benchmark logsleuth against the floor (ripgrep) and the usual baseline (a Python loop).

For each size, on the same generated file and in the same run:
- logsleuth: wall time (median of --repeat runs) and peak RSS of `python -m logsleuth analyze FILE -f json`;
- ripgrep with the same rule patterns (both use Rust's regex crate), also the median: the floor;
- a naive Python loop, every line against every rule pattern with `re`: what
  people write by hand. It is slow, so on big files it runs on a prefix and
  its throughput is extrapolated (the table says so).
It also checks that the verdict on every big file equals the verdict on a
small file with the same failure, and measures start-up on a 1 MB log.

    python benchmarks/bench.py --sizes 10MB,100MB,1GB --ranks 64
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from generate import parse_size, write_job  # noqa: E402

from logsleuth import rulebook  # noqa: E402

DATA = HERE / "data"
NAIVE_CAP = 50 * 10**6  # bytes of a file the naive loop reads at most


@dataclass
class Row:
    size_mb: float
    ranks: int
    logsleuth_s: float
    logsleuth_mb_s: float
    peak_rss_mb: float
    rg_s: float
    ratio_to_rg: float
    naive_mb_s: float
    naive_measured_mb: float
    speedup_vs_naive: float
    verdict: str
    first_rank: int | None
    same_as_small: bool


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run cmd under /usr/bin/time; return (wall seconds, peak RSS MB, stdout)."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as tf:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name, *cmd], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        rss_kb = float(tf.read().strip().splitlines()[-1] or 0)
    if proc.returncode not in (0, 1):  # rg exits 1 when nothing matches
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, rss_kb / 1024, proc.stdout


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_logsleuth(path: Path) -> tuple[float, float, dict]:
    wall, rss, out = _timed([sys.executable, "-m", "logsleuth", "analyze", str(path), "-f", "json"], env=_env())
    return wall, rss, json.loads(out)


def rule_patterns() -> list[str]:
    return [p for r in rulebook.load().rules for p in r.patterns]


def run_rg(path: Path, patterns: list[str]) -> float:
    args = ["rg", "--no-config", "--count", "--no-filename"]
    for p in patterns:
        args += ["-e", p]
    wall, _, _ = _timed([*args, str(path)])
    return wall


def run_naive(path: Path, patterns: list[str], cap: int) -> tuple[float, float]:
    """Per line, every pattern: MB/s, and how many MB were measured."""
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error:
            continue
    seen = hits = 0
    start = time.perf_counter()
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            seen += len(line)
            for pat in compiled:
                if pat.search(line):
                    hits += 1
            if seen >= cap:
                break
    wall = time.perf_counter() - start
    return seen / 1e6 / wall, seen / 1e6


def installed_state() -> None:
    """Measure logsleuth as a user runs it after installing: bytecode compiled (pip does
    that on install; PYTHONDONTWRITEBYTECODE would otherwise recompile every module on
    every run) and the parsed-rules cache written (the first run writes it)."""
    compileall.compile_dir(ROOT / "logsleuth", quiet=1)
    run_logsleuth(write_job(DATA / "startup-1MB.log", 10**6, ranks=8))


def startup(runs: int = 7) -> dict[str, float]:
    """Interpreter start, import, and a whole analysis of a 1 MB log (medians)."""
    small = write_job(DATA / "startup-1MB.log", 10**6, ranks=8)
    bare = _median([_timed([sys.executable, "-c", "pass"])[0] for _ in range(runs)])
    # what `analyze` imports
    imp = _median([_timed([sys.executable, "-c", "import logsleuth.api, logsleuth.cli"], env=_env())[0] for _ in range(runs)])
    whole = _median([run_logsleuth(small)[0] for _ in range(runs)])
    return {"python_s": round(bare, 3), "import_s": round(imp, 3), "analyze_1MB_s": round(whole, 3)}


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def bench(sizes: list[str], ranks: int, naive_cap: int, repeat: int = 3) -> tuple[list[Row], dict[str, float]]:
    """One row per size; logsleuth and ripgrep take the median of ``repeat`` runs (a shared machine is noisy)."""
    patterns = rule_patterns()
    small = write_job(DATA / f"job-small-{ranks}.log", 2 * 10**5, ranks=ranks)
    _, _, small_report = run_logsleuth(small)
    reference = (small_report["verdict"]["category"], small_report["verdict"]["first_failure"]["rank"])
    rows = []
    for size in sizes:
        path = DATA / f"job-{size}-{ranks}.log"
        if not path.exists():
            write_job(path, parse_size(size), ranks=ranks)
        mb = path.stat().st_size / 1e6
        runs = [run_logsleuth(path) for _ in range(repeat)]
        wall, rss, report = _median([r[0] for r in runs]), max(r[1] for r in runs), runs[0][2]
        rg = _median([run_rg(path, patterns) for _ in range(repeat)])
        naive_mb_s, naive_mb = run_naive(path, patterns, naive_cap)
        verdict = (report["verdict"]["category"], report["verdict"]["first_failure"]["rank"])
        rows.append(
            Row(
                size_mb=round(mb, 1),
                ranks=ranks,
                logsleuth_s=round(wall, 2),
                logsleuth_mb_s=round(mb / wall, 1),
                peak_rss_mb=round(rss, 1),
                rg_s=round(rg, 2),
                ratio_to_rg=round(wall / rg, 2),
                naive_mb_s=round(naive_mb_s, 2),
                naive_measured_mb=round(naive_mb, 1),
                speedup_vs_naive=round((mb / wall) / naive_mb_s, 1),
                verdict=verdict[0],
                first_rank=verdict[1],
                same_as_small=verdict == reference,
            )
        )
    return rows, startup()


def table(rows: list[Row], start: dict[str, float]) -> str:
    head = "| file | ranks | logsleuth | MB/s | peak RSS | ripgrep | ×rg | Python loop MB/s | ×faster | verdict (rank) | = small |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        naive = f"{r.naive_mb_s}" + ("" if r.naive_measured_mb >= r.size_mb else f" (first {r.naive_measured_mb:.0f} MB)")
        out.append(
            f"| {r.size_mb:.0f} MB | {r.ranks} | {r.logsleuth_s} s | {r.logsleuth_mb_s} | {r.peak_rss_mb:.0f} MB | {r.rg_s} s | "
            f"{r.ratio_to_rg} | {naive} | {r.speedup_vs_naive} | {r.verdict} ({r.first_rank}) | {'yes' if r.same_as_small else 'NO'} |"
        )
    out.append("")
    out.append(
        f"Start-up: python {start['python_s']} s, imports {start['import_s']} s, "
        f"`logsleuth analyze` of a 1 MB log {start['analyze_1MB_s']} s (median of 7, interpreter included)."
    )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark logsleuth against ripgrep and a Python loop.")
    ap.add_argument("--sizes", default="10MB,100MB,1GB")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--naive-cap", default="50MB", help="the Python loop reads at most this much of each file")
    ap.add_argument("--repeat", type=int, default=3, help="runs of logsleuth and of ripgrep per size; the median is reported")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--startup-only", action="store_true", help="only the 1 MB start-up measurement")
    args = ap.parse_args()
    installed_state()
    if args.startup_only:
        rows, start = [], startup()
    else:
        rows, start = bench(args.sizes.split(","), args.ranks, parse_size(args.naive_cap), max(1, args.repeat))
    print(table(rows, start))
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "startup": start, "cores": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
