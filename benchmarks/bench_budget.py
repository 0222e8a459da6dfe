"""Does analyze() keep to its time budget and to bounded memory on the inputs that used to
break it? (issue 18.4, 15.1)

Three inputs, each analysed in a fresh process with ``budget_s``:

- ``repeated``: one NCCL error line repeated until the file has ``--size`` bytes (all of
  its lines pass the prefilter: the case that used to keep every line);
- ``slow``: a training log with a failure at its end, read through a file system that
  delivers one 64 KiB block every ``--block-delay`` seconds;
- ``hung``: the same log on a file system whose reads never return.

For each: wall time (interpreter start-up excluded, measured inside the process), its
ratio to the budget, peak RSS, the verdict and whether the report is partial.

    python benchmarks/bench_budget.py --size 400MB --budget 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = "[rank3]: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3\n"
FAILED = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "/home/user/train.py", line 9, in <module>\n'
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)

#: Run inside the child: patch the read for the slow/hung modes, analyse, report as JSON.
CHILD = """
import json, resource, sys, time
from logsleuth import ingest
mode, path, budget, delay = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
if mode in ("slow", "hung"):
    real = ingest._read_block
    ingest.BLOCK_BYTES = 64 << 10
    def patched(stream, compressed):
        time.sleep(delay if mode == "slow" else 3600)
        return real(stream, compressed)
    ingest._read_block = patched
import logsleuth
logsleuth.analyze([], budget_s=1)  # imports and caches loaded: start-up is not the budget's
started = time.monotonic()
report = logsleuth.analyze(path, budget_s=budget)
wall = time.monotonic() - started
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall": wall, "rss_mb": rss, "cause": report.verdict.cause, "partial": report.partial}))
sys.stdout.flush()
import os; os._exit(0)
"""


def _size(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
    return int(float(text[:-2]) * units[text[-2:].upper()])


def _write(path: Path, size: int, line: str, end: str = "") -> None:
    chunk = line * max(1, (1 << 20) // len(line))
    with path.open("w") as fh:
        written = 0
        while written < size:
            fh.write(chunk)
            written += len(chunk)
        fh.write(end)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="400MB", help="size of the repeated-line log")
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--block-delay", type=float, default=0.05, help="seconds per 64 KiB block in the slow mode")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repeated, training = Path(tmp) / "repeated.log", Path(tmp) / "training.log"
        _write(repeated, _size(args.size), LINE)
        _write(training, 8 << 20, "epoch 1 | step 100 | loss 1.23 | lr 3.0e-04\n", FAILED)
        for mode, path in (("repeated", repeated), ("slow", training), ("hung", training)):
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            done = subprocess.run(
                [sys.executable, "-c", CHILD, mode, str(path), str(args.budget), str(args.block_delay)],
                capture_output=True,
                text=True,
                env=env,
                timeout=600,
            )
            got = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({"input": mode, "bytes": path.stat().st_size, **got, "of_budget": got["wall"] / args.budget})
    print(f"budget {args.budget:g} s")
    print(f"{'input':<10} {'size':>9} {'wall s':>7} {'/budget':>8} {'peak MB':>8}  partial  verdict")
    for r in rows:
        print(
            f"{r['input']:<10} {r['bytes'] / (1 << 20):>7.0f}MB {r['wall']:>7.2f} {r['of_budget']:>8.2f} {r['rss_mb']:>8.0f}  {r['partial']!s:<7}  {r['cause']}"
        )


if __name__ == "__main__":
    main()
