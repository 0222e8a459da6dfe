"""Cluster scripts: the same test on the implicated nodes, and its nccl-tests equivalent.

Every value in a script comes from a Plan, where names, values and node names
were validated, and is quoted with shlex.quote all the same: a log is
untrusted text and must never reach a shell as code. Nor does a log choose the
rendezvous host: it is the user's MASTER_ADDR (``--env`` or the environment
the script runs in), a node the user named with ``--nodes``, or the first node
of the Slurm allocation at run time, never a host read in a log.
"""

from __future__ import annotations

import math
import shlex

from .plan import DTYPES, Plan

KINDS = ("sbatch", "torchrun")
_PERF = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "broadcast": "broadcast_perf",
    "all_to_all": "alltoall_perf",
}
_PYTHON = '"${PYTHON:-python3}"'


def nccl_tests(plan: Plan, *, world: int) -> str | None:
    """The nccl-tests command that runs the same collective and size (one GPU per process); None for barrier."""
    binary = _PERF.get(plan.op)
    if binary is None:
        return None
    nbytes = str(plan.size_bytes(world))
    args = [binary, "-b", nbytes, "-e", nbytes, "-g", "1", "-d", DTYPES[plan.dtype][1]]
    if plan.op in ("all_reduce", "reduce_scatter"):
        args += ["-o", "sum"]
    if plan.op == "broadcast":
        args += ["-r", "0"]
    return shlex.join([*args, "-n", str(plan.iters), "-w", str(plan.warmup), "-c", "1"])


def script(plan: Plan, kind: str) -> str:
    """A ready-to-run script: ``sbatch`` (srun over the nodes) or ``torchrun`` (run once per node)."""
    if kind == "sbatch":
        return _sbatch(plan)
    if kind == "torchrun":
        return _torchrun(plan)
    raise ValueError(f"unknown script kind {kind!r}; choose one of {', '.join(KINDS)}")


def _header(plan: Plan) -> list[str]:
    world = plan.nnodes * plan.nproc
    what = plan.op if plan.op == "barrier" else f"{plan.op} of {plan.numel:,} {plan.dtype}"
    lines = [
        "#!/bin/bash",
        f"# logsleuth repro: {what}, {world} ranks ({plan.nnodes} node(s) x {plan.nproc}), backend {plan.backend}",
    ]
    found = plan.found
    if found and (found.suspect or found.cause):
        lines.append(_comment(f"from the logs: {found.suspect or 'no collective named'}; verdict {found.cause or 'none'}"))
    if found and found.interfaces:
        lines.append(_comment(f"interfaces the job used: {', '.join(found.interfaces)}"))
    if not plan.nodes:
        lines.append("# no node was named: pass --nodes to run on the suspect nodes")
    lines.append("# needs logsleuth[repro] and torch on every node; PYTHON picks the interpreter (default python3)")
    return lines


def _comment(text: str) -> str:
    """A comment line that stays one line whatever the text (a file name may hold a newline)."""
    return "# " + "".join(c if c.isprintable() else "?" for c in text)


def _exports(plan: Plan, skip: tuple[str, ...] = ()) -> list[str]:
    names = [name for name in sorted(plan.env) if name not in skip]
    lines: list[str] = []
    for source, label in (("logs", "tuning settings from the logs"), ("flag", "from --env")):
        chosen = [n for n in names if plan.origin.get(f"env.{n}", "flag") == source]
        if chosen:
            lines.append(_comment(f"{label}: {', '.join(chosen)}"))
    return lines + [f"export {name}={shlex.quote(plan.env[name])}" for name in names]


def _user_addr(plan: Plan) -> str | None:
    """The rendezvous host the user gave: --env MASTER_ADDR, else the first of --nodes; never one from a log."""
    if plan.env.get("MASTER_ADDR"):
        return plan.env["MASTER_ADDR"]
    if plan.nodes and plan.origin.get("nodes") == "flag":
        return plan.nodes[0]
    return None


def _worker(plan: Plan) -> str:
    return " ".join(shlex.quote(a) for a in plan.worker_args())


def _wants_gpus(plan: Plan) -> bool:
    return plan.backend == "nccl" or (plan.backend == "auto" and plan.found is not None and plan.found.backend == "nccl")


def _sbatch(plan: Plan) -> str:
    world = plan.nnodes * plan.nproc
    minutes = math.ceil(plan.timeout_s / 60) + 5
    lines = _header(plan)
    lines += ["# submit: sbatch THIS_FILE; then: logsleuth analyze slurm-<jobid>.out"]
    perf = nccl_tests(plan, world=world)
    if perf:
        lines.append(f"# nccl-tests equivalent (MPI build): srun --nodes={plan.nnodes} --ntasks-per-node={plan.nproc} {perf}")
    lines += [
        "#SBATCH --job-name=logsleuth-repro",
        f"#SBATCH --nodes={plan.nnodes}",
        f"#SBATCH --ntasks-per-node={plan.nproc}",
        f"#SBATCH --time={minutes}",
    ]
    if plan.nodes:
        lines.append(f"#SBATCH --nodelist={shlex.quote(','.join(plan.nodes))}")
    if _wants_gpus(plan):
        lines.append(f"#SBATCH --gpus-per-node={plan.nproc}")
    lines += ["", "set -euo pipefail", *_exports(plan)]
    if "MASTER_ADDR" not in plan.env:
        lines.append('export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"')
    if "MASTER_PORT" not in plan.env:
        lines.append("export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))")
    lines += [
        "# every task finds its rank in SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID",
        f"srun --label {_PYTHON} -m logsleuth.repro.worker {_worker(plan)}",
        "",
    ]
    return "\n".join(lines)


def _torchrun(plan: Plan) -> str:
    lines = _header(plan)
    nodes = " ".join(plan.nodes) if plan.nodes else "the nodes"
    lines += [f"# run once on each of {nodes} (e.g. srun --nodes={plan.nnodes} --ntasks-per-node=1 THIS_FILE)", ""]
    lines += ["set -euo pipefail", *_exports(plan, skip=("MASTER_ADDR", "MASTER_PORT"))]
    addr = _user_addr(plan)
    port = plan.env.get("MASTER_PORT", "29500")
    if addr:
        lines.append(f"endpoint={shlex.quote(f'{addr}:{port}')}")
    else:
        lines += [
            "# rendezvous host: MASTER_ADDR if set, else the allocation's first node (never a host read in the logs)",
            'if [ -z "${MASTER_ADDR:-}" ] && [ -n "${SLURM_JOB_NODELIST:-}" ]; then',
            '  MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)" || true',
            "fi",
            f'endpoint="${{MASTER_ADDR:?set MASTER_ADDR to the first node, or run inside a Slurm allocation}}:{port}"',
        ]
    lines += [
        f'exec "${{TORCHRUN:-torchrun}}" --nnodes={plan.nnodes} --nproc-per-node={plan.nproc} '
        '--rdzv-backend=c10d --rdzv-endpoint="$endpoint" --rdzv-id=logsleuth-repro '
        f"-m logsleuth.repro.worker {_worker(plan)}",
        "",
    ]
    return "\n".join(lines)
