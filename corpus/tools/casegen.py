#!/usr/bin/env python3
"""Write synthetic labelled cases: failures this machine cannot produce (GPUs, InfiniBand,
Xid/ECC, multi-node, version skew), clean runs full of scary lines, and unexplained failures.

    python corpus/tools/casegen.py --label cuda_oom --variant allocator-2x --seed 1 --out corpus
    python corpus/tools/casegen.py --all --out corpus          # every committed synthetic case
    python corpus/tools/casegen.py --list                      # labels and wording families

One call writes one case folder, ``<label>--synth-<variant>-s<seed>``; the exact call is
recorded in its case.toml (``provenance.generator``), and the same call always writes the
same bytes (the random generator is seeded from label, variant and seed, never the clock).
Cases of one variant share the group ``synth:<label>:<variant>``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from pathlib import Path

from casegen_causes import VARIANTS
from casegen_job import make_job
from casegen_story import Story

#: Seeds written by --all: more for the classes that measure false alarms and abstention.
SEEDS = {"none": (1, 2, 3, 4, 5), "unknown": (1, 2, 3, 4, 5)}
DEFAULT_SEEDS = (1, 2, 3, 4)


def case_id(label: str, variant: str, seed: int) -> str:
    return f"{label}--synth-{variant}-s{seed}"


def build(label: str, variant: str, seed: int) -> tuple[dict[str, str], str]:
    """The files of one case and its case.toml text."""
    fn, force = VARIANTS[label][variant]
    rng = random.Random(f"{label}/{variant}/{seed}")
    job = make_job(rng, **force)
    story = Story(job)
    truth = fn(job, story)
    # pastes are often partial: the start-up is missing, or the launcher summary is cut off
    if rng.random() < 0.25:
        job.drop_roles.add("preamble")
    has_cause_lines = any(b.role == "cause" and any(b.lines) for b in job.blocks)
    if has_cause_lines and rng.random() < 0.15:
        job.drop_roles.add("summary")
    files = job.render()
    cut = sorted(job.drop_roles)
    notes = (
        f"{job.launcher} job, {len(job.nodes)} node(s) x {job.gpus} GPU(s), layout {job.layout}"
        + (f", without its {' and '.join(cut)} lines" if cut else "")
        + f"; wording family '{variant}' of {label}."
    )
    lines = [
        f'label = "{label}"',
        f'category = "{label}"',
        f'group = "synth:{label}:{variant}"',
        "",
    ]
    ff = [f"rank = {truth.rank}"] if truth.rank is not None else []
    ff += [f'node = "{truth.node}"'] if truth.node is not None else []
    if ff:
        lines += ["[first_failure]", *ff, ""]
    versions = f"torch {job.torch_version}, NCCL {job.nccl}" + (f", slurm {job.slurm}" if job.slurm else "")
    lines += [
        "[provenance]",
        'kind = "synthetic"',
        f'generator = "corpus/tools/casegen.py --label {label} --variant {variant} --seed {seed}"',
        f'versions = "{versions}"',
        f'notes = "{notes}"',
    ]
    return files, "\n".join(lines) + "\n"


def write(out: Path, label: str, variant: str, seed: int) -> Path:
    files, toml = build(label, variant, seed)
    folder = out / case_id(label, variant, seed)
    if folder.exists():
        shutil.rmtree(folder)
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (folder / "case.toml").write_text(toml, encoding="utf-8")
    return folder


def plan() -> list[tuple[str, str, int]]:
    """Every (label, variant, seed) that --all writes."""
    return [(label, v, seed) for label in sorted(VARIANTS) for v in sorted(VARIANTS[label]) for seed in SEEDS.get(label, DEFAULT_SEEDS)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label")
    ap.add_argument("--variant")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("corpus"))
    ap.add_argument("--all", action="store_true", help="write every case of the plan")
    ap.add_argument("--list", action="store_true", help="print labels and variants")
    args = ap.parse_args(argv)
    if args.list:
        for label in sorted(VARIANTS):
            print(f"{label}: {', '.join(sorted(VARIANTS[label]))}")
        return 0
    if args.all:
        for label, v, seed in plan():
            write(args.out, label, v, seed)
        print(f"wrote {len(plan())} cases to {args.out}", file=sys.stderr)
        return 0
    if not args.label or not args.variant:
        ap.error("--label and --variant (or --all / --list) are required")
    if args.label not in VARIANTS or args.variant not in VARIANTS[args.label]:
        ap.error("unknown label/variant; see --list")
    print(write(args.out, args.label, args.variant, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
