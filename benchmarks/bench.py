"""Benchmark logsleuth against an honest floor: ripgrep with the patterns a person greps for, and cat.

For each input, in one run, on the same bytes, each command a fresh process, alternating (so a
shared machine's slow minutes fall on all of them alike) and the median of --repeat runs taken:

- ``logsleuth analyze INPUT -f json --timings`` (classifier included): wall time, CPU seconds
  (user + system), peak RSS, and seconds per stage (read, prefilter, decode, parse, ...);
- ripgrep with the error messages a person greps a failed job's log for (benchmarks/rg_patterns.txt,
  fixed strings): the floor for finding the failure lines;
- ``cat INPUT > /dev/null``: the floor for reading the bytes at all;
- ripgrep with every rule pattern of logsleuth (125 regexes, several slow for ripgrep's engine):
  kept as "rg all rules", which is what the README compared with before;
- optionally (``--code DIR``) the logsleuth of another checkout, for before/after in the same minutes.

Inputs: single logs (``--sizes``, generate.write_job, one failure cascade) whose verdict must equal
a small log's, and folders of per-rank files as torchrun ``--log-dir`` writes them (``--rank-dirs``,
generate.write_rank_dir, two files a rank) whose culprit rank must be found.

    python benchmarks/bench.py --sizes 1GiB --ranks 256 --rank-dirs 4,256,4096
    python benchmarks/bench.py --sizes 4GiB --ranks 4096 --repeat 1    # memory at 4 GiB
    python benchmarks/bench.py --startup-only
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from generate import parse_size, write_job, write_rank_dir  # noqa: E402

from logsleuth import rulebook  # noqa: E402

DATA = HERE / "data"
PATTERNS = HERE / "rg_patterns.txt"
STAGES = ("start", "read", "prefilter", "decode", "cap", "clean", "ingest", "parse", "redact", "match", "reason", "classify", "report")


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float
    out: str = ""
    err: str = ""


@dataclass
class Row:
    name: str
    mb: float
    files: int
    logsleuth_s: float
    logsleuth_cpu_s: float
    mb_s: float
    peak_rss_mb: float
    rg_s: float
    rg_cpu_s: float
    x_rg: float
    cat_s: float
    x_cat: float
    rg_rules_s: float | None
    verdict: str
    rank: int | None
    expected: str
    right: bool
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    before_s: float | None = None
    before_cpu_s: float | None = None
    before_rss_mb: float | None = None
    before_right: bool | None = None


def _timed(cmd: list[str] | str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run ``cmd`` (a list, or a shell line) under /usr/bin/time: wall, user + system CPU, peak RSS."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as tf:
        timed = ["/usr/bin/time", "-f", "%U %S %M", "-o", tf.name]
        full = [*timed, *cmd] if isinstance(cmd, list) else [*timed, "sh", "-c", cmd]
        start = time.perf_counter()
        proc = subprocess.run(full, capture_output=True, text=True, env=env, cwd=cwd)
        wall = time.perf_counter() - start
        user, system, rss = tf.read().strip().splitlines()[-1].split()
    if proc.returncode not in (0, 1):  # rg exits 1 when nothing matches
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return Run(wall, float(user) + float(system), float(rss) / 1024, proc.stdout, proc.stderr)


def _env(code: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode compiled once, then reused
    return env


def run_logsleuth(path: Path, code: Path = ROOT) -> tuple[Run, dict, dict[str, dict[str, float]]]:
    timings = ["--timings"] if code == ROOT else []
    # run in the checkout: `python -m` puts the working folder first on the path
    run = _timed([sys.executable, "-m", "logsleuth", "analyze", str(path), "-f", "json", *timings], env=_env(code), cwd=code)
    stages: dict[str, dict[str, float]] = {}
    for line in run.err.splitlines():
        if line.startswith("logsleuth: timings "):
            stages = json.loads(line.removeprefix("logsleuth: timings "))
    return run, json.loads(run.out), stages


def run_rg(path: Path, patterns: list[str] | None = None) -> Run:
    """ripgrep as a person runs it on a job's output: the fixed strings of rg_patterns.txt (or
    ``patterns`` as regexes), every file, matching lines counted."""
    args = ["rg", "--no-config", "-uu", "--count"]
    args += ["-F", "-f", str(PATTERNS)] if patterns is None else [x for p in patterns for x in ("-e", p)]
    return _timed([*args, str(path)])


def run_cat(path: Path) -> Run:
    """Reading every byte once: the floor no analysis goes under."""
    if path.is_dir():
        return _timed(f"find {shlex.quote(str(path))} -type f -exec cat {{}} + > /dev/null")
    return _timed(f"cat {shlex.quote(str(path))} > /dev/null")


def rule_patterns() -> list[str]:
    return [p for r in rulebook.load().rules for p in r.patterns]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _median_stages(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    names = [s for s in STAGES if any(s in r for r in runs)]
    return {s: {k: round(_median([r.get(s, {}).get(k, 0.0) for r in runs]), 3) for k in ("s", "cpu_s")} for s in names}


def installed_state(code: Path = ROOT) -> None:
    """Measure logsleuth as a user runs it after installing: bytecode compiled (pip does
    that on install) and the parsed-rules cache written (the first run writes it)."""
    compileall.compile_dir(code / "logsleuth", quiet=1)
    run_logsleuth(write_job(DATA / "startup-1MB.log", 10**6, ranks=8), code)


def _size_of(path: Path) -> tuple[float, int]:
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file()]
        return sum(p.stat().st_size for p in files) / 1e6, len(files)
    return path.stat().st_size / 1e6, 1


def measure(name: str, path: Path, expected: tuple[str, int | None], repeat: int, rules: list[str] | None, before: Path | None) -> Row:
    """All commands on one input, alternating, ``repeat`` rounds; medians."""
    mb, files = _size_of(path)
    ours: list[tuple[Run, dict, dict[str, dict[str, float]]]] = []
    old: list[tuple[Run, dict]] = []
    rg: list[Run] = []
    cat: list[Run] = []
    order = ["ours", "rg", "cat"] + (["old"] if before else [])
    for i in range(repeat):
        random.Random(i).shuffle(order)  # no command always first, when the page cache or the machine is coldest
        for what in order:
            if what == "ours":
                ours.append(run_logsleuth(path))
            elif what == "old" and before:
                run, report, _ = run_logsleuth(path, before)
                old.append((run, report))
            elif what == "rg":
                rg.append(run_rg(path))
            else:
                cat.append(run_cat(path))
    rg_rules = _median([run_rg(path, rules).wall for _ in range(repeat)]) if rules else None
    wall = _median([r.wall for r, _, _ in ours])
    report = ours[0][1]
    got = (report["verdict"]["category"], report["verdict"]["first_failure"]["rank"])
    rg_wall = _median([r.wall for r in rg])
    cat_wall = _median([r.wall for r in cat])
    row = Row(
        name=name,
        mb=round(mb, 1),
        files=files,
        logsleuth_s=round(wall, 2),
        logsleuth_cpu_s=round(_median([r.cpu for r, _, _ in ours]), 2),
        mb_s=round(mb / wall),
        peak_rss_mb=round(max(r.rss_mb for r, _, _ in ours)),
        rg_s=round(rg_wall, 2),
        rg_cpu_s=round(_median([r.cpu for r in rg]), 2),
        x_rg=round(wall / rg_wall, 1),
        cat_s=round(cat_wall, 2),
        x_cat=round(wall / cat_wall, 1),
        rg_rules_s=None if rg_rules is None else round(rg_rules, 2),
        verdict=got[0],
        rank=got[1],
        expected=f"{expected[0]} ({expected[1]})",
        right=got == expected,
        stages=_median_stages([s for _, _, s in ours]),
    )
    if old:
        row.before_s = round(_median([r.wall for r, _ in old]), 2)
        row.before_cpu_s = round(_median([r.cpu for r, _ in old]), 2)
        row.before_rss_mb = round(max(r.rss_mb for r, _ in old))
        rep = old[0][1]
        row.before_right = (rep["verdict"]["category"], rep["verdict"]["first_failure"]["rank"]) == expected
    return row


def startup(runs: int = 7) -> dict[str, float]:
    """Interpreter start, import, and a whole analysis of a 1 MB log (medians)."""
    small = write_job(DATA / "startup-1MB.log", 10**6, ranks=8)
    bare = _median([_timed([sys.executable, "-c", "pass"]).wall for _ in range(runs)])
    imp = _median(
        [_timed([sys.executable, "-c", "import logsleuth.api, logsleuth.cli"], env=_env(ROOT), cwd=ROOT).wall for _ in range(runs)]
    )
    whole = _median([run_logsleuth(small)[0].wall for _ in range(runs)])
    return {"python_s": round(bare, 3), "import_s": round(imp, 3), "analyze_1MB_s": round(whole, 3)}


def table(rows: list[Row]) -> str:
    before = any(r.before_s is not None for r in rows)
    head = (
        "| input | MB | files | logsleuth | CPU | MB/s | peak RSS | rg (40 patterns) | × rg | cat | × cat | rg all rules | verdict (rank) | right |"
        + (" before | before CPU | before RSS | before right |" if before else "")
    )
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = (
            f"| {r.name} | {r.mb:,.0f} | {r.files:,} | {r.logsleuth_s} s | {r.logsleuth_cpu_s} s | {r.mb_s} | {r.peak_rss_mb} MB | "
            f"{r.rg_s} s ({r.rg_cpu_s} CPU) | {r.x_rg} | {r.cat_s} s | {r.x_cat} | "
            f"{'' if r.rg_rules_s is None else f'{r.rg_rules_s} s'} | {r.verdict} ({r.rank}) | {'yes' if r.right else 'NO'} |"
        )
        if before:
            line += f" {r.before_s} s | {r.before_cpu_s} s | {r.before_rss_mb} MB | {'yes' if r.before_right else 'NO'} |"
        out.append(line)
    out += ["", "Seconds per stage (median; read/prefilter/decode/cap/clean are ingest's parts, busy time summed over threads):", ""]
    names = [s for s in STAGES if any(s in r.stages for r in rows)]
    out.append("| input | " + " | ".join(names) + " |")
    out.append("|" + "---|" * (len(names) + 1))
    for r in rows:
        cells = [f"{r.stages[s]['s']} ({r.stages[s]['cpu_s']})" if s in r.stages else "" for s in names]
        out.append(f"| {r.name} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Each cell: seconds (CPU seconds).")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark logsleuth against ripgrep and cat on the same inputs.")
    ap.add_argument("--sizes", default="1GiB", help="single logs, e.g. 100MB,1GiB,4GiB (empty: none)")
    ap.add_argument("--ranks", type=int, default=256, help="ranks of the single logs")
    ap.add_argument("--rank-dirs", default="4,256,4096", help="ranks of per-rank folders (two files a rank; empty: none)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per input; medians are reported")
    ap.add_argument("--code", type=Path, help="another checkout of logsleuth to time in the same rounds (before/after)")
    ap.add_argument("--no-rules", action="store_true", help="skip ripgrep with every rule pattern (slow)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--startup-only", action="store_true", help="only the 1 MB start-up measurement")
    args = ap.parse_args()
    installed_state()
    if args.code:
        installed_state(args.code)
    if args.startup_only:
        print(json.dumps(startup()))
        return
    rules = None if args.no_rules else rule_patterns()
    rows: list[Row] = []
    for size in filter(None, args.sizes.split(",")):
        small = write_job(DATA / f"job-small-{args.ranks}.log", 2 * 10**5, ranks=args.ranks)
        _, small_report, _ = run_logsleuth(small)
        expected = (small_report["verdict"]["category"], small_report["verdict"]["first_failure"]["rank"])
        path = DATA / f"job-{size}-{args.ranks}.log"
        if not path.exists():
            write_job(path, parse_size(size), ranks=args.ranks)
        rows.append(measure(f"{size} log, {args.ranks} ranks", path, expected, args.repeat, rules, args.code))
    for ranks in (int(r) for r in filter(None, args.rank_dirs.split(","))):
        path = DATA / f"ranks-{ranks}"
        if not path.exists():
            write_rank_dir(path, ranks)
        culprit = random.Random(7 + ranks).randrange(1, ranks)  # as generate.write_rank_dir picks it
        rows.append(measure(f"{ranks} ranks, per-rank files", path, ("user_code_error", culprit), args.repeat, rules, args.code))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "cores": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
