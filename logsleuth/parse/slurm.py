"""SLURM lines: slurmstepd cancellations and OOM kills, srun task exits.

Formats from SchedMD/slurm (src/slurmd/slurmstepd/req.c, src/srun/launch.c,
src/plugins/task/cgroup/task_cgroup_memory.c): stderr lines are
``<argv0>: [error: ]<message>`` where argv0 is ``slurmstepd`` or
``slurmstepd-<node>``. Cancellation wording changed across releases (``DUE to
SIGNAL`` from 25.05, the old ``*** ... *** on node`` form); both are read.
"""

from __future__ import annotations

import polars as pl

from .common import STRSIGNAL, claim, field, integer, on_rows_with

_ARGV0 = r"^(?:slurmstepd|srun|sbatch|salloc|slurmd)(?:-([\w.-]+))?: (?:(error|fatal|warning|info): )?"
_CANCEL = (
    r"\*\*\* (?:JOB|STEP) (?P<job>\S+) (?:ON (?P<node>\S+) )?CANCELLED AT (?P<time>\S+)"
    r"(?: DUE (?:TO|to) (?P<reason>.+?))? \*\*\*(?: on (?P<node2>\S+))?"
)
_FAILED = r"\*\*\* (?:JOB|STEP) (\S+) ON (\S+) FAILED \(non-zero exit code or other failure mode\) \*\*\*"
_ECC = r"\*\*\* (?:JOB|STEP) (\S+) ON (\S+) UNCORRECTABLE MEMORY ERROR AT (\S+) \*\*\*"
_OOM = r"Detected (\d+) oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )?(\d+(?:\.\w+)?)"
_MEMLIMIT = r"(?:StepId=)?(\d+(?:\.\w+)?) hit memory limit at least once"
_TASK_EXIT = r"^srun: error: ([^:\s]+): tasks? ([\d,\-\[\]]+): (.+?)\s*$"
_NODE_FAIL = r"(?i)node failure on (\S+)|Node (\S+) (?:not responding|is down)"


#: Literals every line this module claims contains (the argv0 of SLURM's programs,
#: slurmstepd's *** banners, OOM and node-failure wordings).
TRIGGERS = (
    "slurmstepd",
    "srun",
    "sbatch",
    "salloc",
    "slurmd",
    "*** ",
    "oom-kill",
    "oom_kill",
    "hit memory limit",
    "ode failure",
    "ODE FAILURE",
    "not responding",
    "is down",
    "tep aborted",
    "Force Terminated",
)


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim the SLURM lines (only rows with a trigger are looked at)."""
    return on_rows_with(df, TRIGGERS, _annotate)


def _annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim the SLURM lines and fill job, node, reason, tasks, exit_code, signal."""
    msg = pl.col("msg")
    is_slurm = msg.str.contains(_ARGV0) | msg.str.contains(r"\*\*\* (?:JOB|STEP) \S+ ")
    argv_node = field(msg, _ARGV0, 1)
    cancel = msg.str.extract_groups(_CANCEL)
    df = claim(
        df,
        msg.str.contains(r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?CANCELLED AT "),
        {
            "kind": pl.lit("slurm_cancel"),
            "job": cancel.struct.field("job"),
            "node": pl.coalesce(cancel.struct.field("node"), cancel.struct.field("node2"), argv_node),
            "reason": cancel.struct.field("reason").fill_null("CANCELLED"),
            "time": cancel.struct.field("time").str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False, time_unit="us"),
        },
    )
    df = claim(
        df,
        msg.str.contains(_FAILED),
        {"kind": pl.lit("slurm_failed"), "job": field(msg, _FAILED, 1), "node": field(msg, _FAILED, 2)},
    )
    df = claim(
        df,
        msg.str.contains(_ECC),
        {
            "kind": pl.lit("slurm_memory_error"),
            "job": field(msg, _ECC, 1),
            "node": field(msg, _ECC, 2),
            "reason": pl.lit("UNCORRECTABLE MEMORY ERROR"),
        },
    )
    df = claim(
        df,
        msg.str.contains(_OOM),
        {"kind": pl.lit("slurm_oom"), "job": field(msg, _OOM, 2), "node": argv_node, "reason": pl.lit("oom-kill")},
    )
    df = claim(
        df,
        msg.str.contains(_MEMLIMIT),
        {"kind": pl.lit("slurm_mem_limit"), "job": field(msg, _MEMLIMIT, 1), "node": argv_node},
    )
    what = field(msg, _TASK_EXIT, 3)
    df = claim(
        df,
        msg.str.contains(_TASK_EXIT),
        {
            "kind": pl.lit("srun_exit"),
            "node": field(msg, _TASK_EXIT, 1),
            "tasks": field(msg, _TASK_EXIT, 2),
            "exit_code": integer(what, r"^Exited with exit code (\d+)").cast(pl.Int32),
            "signal": what.str.replace(r"\s*\(core dumped\)$", "").replace_strict(STRSIGNAL, default=None, return_dtype=pl.String),
            "reason": what,
        },
    )
    df = claim(
        df,
        msg.str.contains(_NODE_FAIL),
        {"kind": pl.lit("slurm_node_failure"), "node": pl.coalesce(field(msg, _NODE_FAIL, 1), field(msg, _NODE_FAIL, 2))},
    )
    df = claim(df, msg.str.contains(r"(?i)job step aborted|Force Terminated"), {"kind": pl.lit("srun_abort")})
    df = claim(df, is_slurm, {"kind": pl.lit("slurm_line")})
    slurm_kinds = pl.col("kind").str.starts_with("slurm") | pl.col("kind").str.starts_with("srun")
    lvl = field(msg, _ARGV0, 2)
    return df.with_columns(
        pl.when(slurm_kinds).then(pl.lit("slurm")).otherwise(pl.col("source")).alias("source"),
        pl.when(slurm_kinds)
        .then(pl.coalesce(lvl, pl.when(pl.col("kind") != "slurm_line").then(pl.lit("error")), pl.col("level")))
        .otherwise(pl.col("level"))
        .alias("level"),
        pl.when(slurm_kinds & pl.col("node").is_null()).then(argv_node).otherwise(pl.col("node")).alias("node"),
    )
