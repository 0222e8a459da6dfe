"""`logsleuth batch` against what a cluster team does today: a shell loop of `logsleuth analyze`.

Generates N small job logs (one `slurm-<id>.out` each, as an archive folder holds
them: NCCL start-up, training progress, one failure cascade, 8 to 64 ranks), then,
in one run on the same files:

- `logsleuth batch DIR --out STORE` on every core (wall time, jobs/s, peak RSS of
  the parent and of the largest worker);
- the same command again: every job already stored, so it only checks;
- a loop of `logsleuth analyze FILE --format json` one job after another, and the
  same loop under `xargs -P <cores>`, on every k-th job (a sample: a serial loop over
  5,000 jobs takes most of an hour), extrapolated to all N jobs.

    python benchmarks/bench_batch.py --jobs 5000 --sample 250
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import write_job  # noqa: E402

CLI = [sys.executable, "-m", "logsleuth"]


def make_jobs(folder: Path, n: int, seed: int = 11) -> list[Path]:
    """N small sbatch output files with different ranks, sizes and culprits (kept between runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        path = folder / f"slurm-{100000 + i}.out"
        if not path.exists():
            write_job(path, size_bytes=rng.randint(8, 48) * 1024, ranks=rng.choice([8, 16, 32, 64]), seed=i)
        out.append(path)
    return out


def timed(cmd: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])}... exited {proc.returncode}: {proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--sample", type=int, default=250, help="jobs the analyze loops run on (every k-th job)")
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parent / "data" / "batch")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    files = make_jobs(args.data / f"jobs-{args.jobs}", args.jobs)
    print(f"{len(files)} jobs, {sum(f.stat().st_size for f in files) / 1e6:.0f} MB, {cores} cores")
    store = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        wall, proc = timed([*CLI, "batch", str(files[0].parent), "--out", str(store), "--format", "json"])
        summary = json.loads(proc.stdout)
        worker_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        assert summary["analysed"] == len(files), summary
        resume, proc = timed([*CLI, "batch", str(files[0].parent), "--out", str(store), "--format", "json"])
        assert json.loads(proc.stdout)["skipped"] == len(files)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    step = max(1, len(files) // args.sample)
    sample = files[::step][: args.sample]
    per_job = []
    for f in sample:
        t, _ = timed([*CLI, "analyze", str(f), "--format", "json"])
        per_job.append(t)
    loop = sum(per_job) / len(sample) * len(files)
    listing = "\n".join(str(f) for f in sample)
    xargs_s, _ = timed(
        ["xargs", "-P", str(cores), "-I{}", *CLI, "analyze", "{}", "--format", "json", "--output", "/dev/null"], input=listing
    )
    xargs = xargs_s / len(sample) * len(files)
    rows = [
        ("logsleuth batch (all cores)", wall, ""),
        ("logsleuth batch again (all stored: skipped)", resume, ""),
        (f"loop of logsleuth analyze (serial; {len(sample)} sampled, median {statistics.median(per_job):.2f} s/job)", loop, "estimated"),
        (f"xargs -P {cores} logsleuth analyze ({len(sample)} sampled)", xargs, "estimated"),
    ]
    print(f"\n| way | seconds for {len(files)} jobs | jobs/s | batch is faster by |")
    print("|---|--:|--:|--:|")
    for name, secs, note in rows:
        speed = f"{secs / wall:.1f}x" if secs > wall else "–"
        print(f"| {name} | {secs:.1f}{' (est.)' if note else ''} | {len(files) / secs:.1f} | {speed} |")
    print(f"\npeak RSS: largest process of the batch run {max(before, worker_rss) / 1024:.0f} MB (ru_maxrss of the children)")


if __name__ == "__main__":
    main()
