"""SLURM lines: slurmstepd cancellations and OOM kills, srun task exits.

Formats from SchedMD/slurm (src/slurmd/slurmstepd/req.c, src/srun/launch.c,
src/plugins/task/cgroup/task_cgroup_memory.c): stderr lines are
``<argv0>: [error: ]<message>`` where argv0 is ``slurmstepd`` or
``slurmstepd-<node>``. Cancellation wording changed across releases (``DUE to
SIGNAL`` from 25.05, the old ``*** ... *** on node`` form); both are read.
"""

from __future__ import annotations

import polars as pl

from logsleuth import events

from .common import STRSIGNAL, Example, claim, field, integer, on_rows_with, with_columns_of

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


#: Literals one of which is in every line this module claims: the ingest prefilter keeps the lines
#: that hold one (parse.KEYWORDS is built from every parser's TRIGGERS).
TRIGGERS = (
    "slurmstepd",
    "slurmd",
    "srun:",
    "sbatch:",
    "salloc:",
    "*** JOB",
    "*** STEP",
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
#: What annotate() looks at: rows with one of these literals (cheaper than its patterns on every row).
_LOOK_AT = (*TRIGGERS, "srun", "sbatch", "salloc", "*** ")

KINDS = (
    events.SLURM_CANCEL,
    events.SLURM_FAILED,
    events.SLURM_MEMORY_ERROR,
    events.SLURM_OOM,
    events.SLURM_MEM_LIMIT,
    events.SRUN_EXIT,
    events.SLURM_NODE_FAILURE,
    events.SRUN_ABORT,
    events.SLURM_LINE,
)

EXAMPLES: tuple[Example, ...] = (
    (
        "slurmstepd-node01: error: *** JOB 4 ON node01 CANCELLED AT 2026-11-22T02:49:22 DUE TO TIME LIMIT ***",
        {"kind": events.SLURM_CANCEL, "job": "4", "node": "node01", "reason": "TIME LIMIT", "source": "slurm", "level": "error"},
    ),
    (
        "slurmstepd: *** JOB 1234 CANCELLED AT 2019-05-01T10:00:00 DUE TO TIME LIMIT *** on node-b",
        {"kind": events.SLURM_CANCEL, "job": "1234", "node": "node-b", "reason": "TIME LIMIT"},
    ),
    (
        "slurmstepd: error: *** STEP 5.0 ON n1 CANCELLED AT 2025-06-01T00:00:00 DUE to SIGNAL Terminated ***",
        {"kind": events.SLURM_CANCEL, "job": "5.0", "node": "n1", "reason": "SIGNAL Terminated"},
    ),
    (
        "slurmstepd: error: *** JOB 77 ON gpu03 FAILED (non-zero exit code or other failure mode) ***",
        {"kind": events.SLURM_FAILED, "job": "77", "node": "gpu03"},
    ),
    (
        "slurmstepd: error: *** STEP 8.0 ON gpu03 UNCORRECTABLE MEMORY ERROR AT 2026-01-01T00:00:00 ***",
        {"kind": events.SLURM_MEMORY_ERROR, "job": "8.0", "node": "gpu03", "reason": "UNCORRECTABLE MEMORY ERROR"},
    ),
    (
        "slurmstepd-node01: error: Detected 1 oom-kill event(s) in StepId=8.0. Some of your processes may have been killed by the cgroup out-of-memory handler.",
        {"kind": events.SLURM_OOM, "job": "8.0", "node": "node01", "reason": "oom-kill"},
    ),
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=123.batch. Some of the step tasks have been OOM Killed.",
        {"kind": events.SLURM_OOM, "job": "123.batch"},
    ),
    ("slurmstepd: error: StepId=55.0 hit memory limit at least once during execution.", {"kind": events.SLURM_MEM_LIMIT, "job": "55.0"}),
    (
        "srun: error: node02: task 1: Exited with exit code 1",
        {"kind": events.SRUN_EXIT, "node": "node02", "tasks": "1", "exit_code": 1, "source": "slurm", "level": "error"},
    ),
    ("srun: error: node[01-02]: tasks 0-7: Killed", {"kind": events.SRUN_EXIT, "node": "node[01-02]", "tasks": "0-7", "signal": "SIGKILL"}),
    ("srun: error: gpu1: task 3: Segmentation fault (core dumped)", {"kind": events.SRUN_EXIT, "signal": "SIGSEGV"}),
    ("srun: error: Node failure on node03", {"kind": events.SLURM_NODE_FAILURE, "node": "node03"}),
    ("Node node02 is down", {"kind": events.SLURM_NODE_FAILURE, "node": "node02", "source": "slurm"}),
    ("srun: Node node04 not responding", {"kind": events.SLURM_NODE_FAILURE, "node": "node04"}),
    ("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", {"kind": events.SRUN_ABORT, "source": "slurm"}),
    ("srun: forcing job termination", {"kind": events.SLURM_LINE, "source": "slurm"}),
    ("sbatch: error: Batch job submission failed: Invalid account", {"kind": events.SLURM_LINE, "level": "error"}),
)


def annotate(df: pl.DataFrame) -> pl.DataFrame:
    """Claim the SLURM lines (only rows with a trigger are looked at)."""
    return on_rows_with(df, _LOOK_AT, _annotate)


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
            "kind": pl.lit(events.SLURM_CANCEL),
            "job": cancel.struct.field("job"),
            "node": pl.coalesce(cancel.struct.field("node"), cancel.struct.field("node2"), argv_node),
            "reason": cancel.struct.field("reason").fill_null("CANCELLED"),
            "time": cancel.struct.field("time").str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False, time_unit="us"),
        },
    )
    df = claim(
        df,
        msg.str.contains(_FAILED),
        {"kind": pl.lit(events.SLURM_FAILED), "job": field(msg, _FAILED, 1), "node": field(msg, _FAILED, 2)},
    )
    df = claim(
        df,
        msg.str.contains(_ECC),
        {
            "kind": pl.lit(events.SLURM_MEMORY_ERROR),
            "job": field(msg, _ECC, 1),
            "node": field(msg, _ECC, 2),
            "reason": pl.lit("UNCORRECTABLE MEMORY ERROR"),
        },
    )
    df = claim(
        df,
        msg.str.contains(_OOM),
        {"kind": pl.lit(events.SLURM_OOM), "job": field(msg, _OOM, 2), "node": argv_node, "reason": pl.lit("oom-kill")},
    )
    df = claim(
        df,
        msg.str.contains(_MEMLIMIT),
        {"kind": pl.lit(events.SLURM_MEM_LIMIT), "job": field(msg, _MEMLIMIT, 1), "node": argv_node},
    )
    what = field(msg, _TASK_EXIT, 3)
    df = claim(
        df,
        msg.str.contains(_TASK_EXIT),
        {
            "kind": pl.lit(events.SRUN_EXIT),
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
        {"kind": pl.lit(events.SLURM_NODE_FAILURE), "node": pl.coalesce(field(msg, _NODE_FAIL, 1), field(msg, _NODE_FAIL, 2))},
    )
    df = claim(df, msg.str.contains(r"(?i)job step aborted|Force Terminated"), {"kind": pl.lit(events.SRUN_ABORT)})
    df = claim(df, is_slurm, {"kind": pl.lit(events.SLURM_LINE)})
    slurm_kinds = pl.col("kind").str.starts_with("slurm") | pl.col("kind").str.starts_with("srun")
    lvl = field(msg, _ARGV0, 2)
    return with_columns_of(df, "node").with_columns(
        pl.when(slurm_kinds).then(pl.lit("slurm")).otherwise(pl.col("source")).alias("source"),
        pl.when(slurm_kinds)
        .then(pl.coalesce(lvl, pl.when(pl.col("kind") != events.SLURM_LINE).then(pl.lit("error")), pl.col("level")))
        .otherwise(pl.col("level"))
        .alias("level"),
        pl.when(slurm_kinds & pl.col("node").is_null()).then(argv_node).otherwise(pl.col("node")).alias("node"),
    )
