"""Line prefixes -> rank, local rank, task, time and level columns.

Launchers stack prefixes on a line, outermost first: the host name pdsh and
clush put before every remote line (DeepSpeed's multi-node launcher uses
pdsh: ``worker-0: ``, ``10.0.0.5: ``) or torchx puts before every line of a
replica (``trainer/0 ``: its role and replica, one node of the job), a platform timestamp,
``srun --label`` (`` 3: ``, space padded), Ray's ``(WorkerDict pid=2441, ip=10.0.0.5) `` before
the lines of its workers and actors (the process and its node), the ``stdout: ``/``stderr: `` label the
Hugging Face test harness (``accelerate test``, transformers' and DeepSpeed's test
utilities: ``tee(..., label="stderr:")``) puts before its child's lines, mpirun ``[1,3]<stdout>:``
(horovodrun's own launcher: ``[3]<stderr>:``, after a ``time.asctime()`` stamp with ``--prefix-timestamp``),
torchrun ``--tee`` headers (``[default0]:``, local rank; ``[0]:`` with an empty
``--role``, as torchx launches it) and PyTorch's own
``[rank3]:`` (global rank, from the excepthook and c10 logging), then glog or
Python logging headers. One anchored regex with an optional group per layer
peels them all in a single vectorised pass.

``[rankN]:`` is ambiguous: ``torchrun --role rank --tee`` writes the *local*
rank that way. When two bracket headers stack, the outer one is torchrun's
(local) and the inner one PyTorch's (global); a lone ``[rankN]:`` is taken as
global, which is what PyTorch itself writes. A bare ``[N]:`` alone on its line
is no header: torchrun's failure table numbers its entries that way.
"""

from __future__ import annotations

import re

import polars as pl

from .common import short_host

_TS = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"

PREFIX = (
    r"^"
    rf"(?:\[?(?P<ts>{_TS})\]?[ \t]+)?"
    r"(?:(?:P\d+ )?[ ]*(?P<task>\d{1,6}):(?: |$))?"  # a label alone: srun's empty line, its space trimmed by a paste
    rf"(?:\[?(?P<ts2>{_TS})\]?[ \t]+)?"
    r"(?:\((?:(?P<ray_who>[A-Za-z_][\w.:-]*) )?(?:rank=(?P<ray_rank>\d+) )?pid=(?P<ray_pid>\d+)(?:, ip=(?P<ray_ip>[\d.]+))?\) )?"
    r"(?:std(?:out|err): )?"
    r"(?:(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[(?:\d+,)?(?P<mpi_rank>\d+)\]<std(?:out|err)>:[ ]?)?"
    r"(?:\[(?P<role_a>[A-Za-z_][A-Za-z_-]*?)?(?P<num_a>\d{1,6})\]:[ ]?)?"
    r"(?:\[(?P<role_b>[A-Za-z_][A-Za-z_-]*?)(?P<num_b>\d{1,6})\]:[ ]?)?"
    r"(?:\[rank: (?P<pl_rank>\d+)\] )?"
    r"(?:\[?(?P<glvl>[IWEF])(?P<gdate>\d{3,4}) (?P<gtime>\d\d:\d\d:\d\d(?:\.\d+)?)(?:[ ]+(?P<gpid>\d+))?[ ]+"
    r"(?P<gsrc>[^\]\s]+:\d+)\][ ]?"
    r"|\[(?P<clvl>[IWEF]) (?P<csrc>[\w./-]+:\d+)\][ ]?"
    r"|(?P<vlvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<vdate>\d\d-\d\d) (?P<vtime>\d\d:\d\d:\d\d(?:\.\d+)?) \[?(?P<vsrc>[\w./-]+\.py:\d+)\][ ]?)?"
    r"(?:(?P<pylvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]+):)?"
    r"(?P<msg>.*)$"
)

_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "fatal"}
_PY_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "ERROR": "error", "CRITICAL": "fatal"}


def _num(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Int32, strict=False)


#: The prefix layers alone, without captures: the whole span they cover.
_SPAN = "(" + re.sub(r"\(\?P<\w+>", "(?:", PREFIX.removesuffix("(?P<msg>.*)$")) + ")"
#: A bare torchrun tee header (empty role) ending a prefix span.
_ENTRY = r"\[\d{1,6}\]:[ ]?$"
#: The layers with their captures, applied to a prefix span alone.
_LAYERS = PREFIX.removesuffix("(?P<msg>.*)$") + "$"


#: pdsh/clush's ``host: `` before a remote line: a name with a digit in it, or an IPv4 address.
_HOST_NAME = r"[A-Za-z][A-Za-z0-9-]*[0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*|\d{1,3}(?:\.\d{1,3}){3}"
_HOST = rf"^({_HOST_NAME}): "
#: torchx's ``{role}/{replica} `` before every line of a replica (``torchx log``, ``torchx run``;
#: torchx/util/log_tee_helpers.py): ``trainer/0 [1]:[W socket.cpp:558] ...``.
_REPLICA = r"^([A-Za-z_][\w-]*/\d{1,5}) "
#: What looks like such a name but is a program's own prefix or an exception type (``S3UploadError: ``).
_NOT_HOST = r"^(?:slurmstepd|srun|sbatch|salloc|sacct|scontrol)\b|(?i:error|exception|warning|exit|interrupt|failure|fault|timeout)$"


#: Share of a file's distinct kept lines that must carry a host prefix for it to be read as pdsh
#: (or torchx) output.
HOST_SHARE = 0.5


def _host_candidates(raws: pl.DataFrame) -> pl.DataFrame:
    """Add ``host`` and ``_cut``: the pdsh/clush-style host name (or torchx replica) a line starts
    with, if any, and the length of that prefix."""
    pdsh = pl.col("raw").str.extract(_HOST, 1)
    pdsh = pl.when(pdsh.str.contains(_NOT_HOST).not_()).then(pdsh)
    replica = pl.col("raw").str.extract(_REPLICA, 1)
    # the same host twice (DeepSpeed's runner over pdsh over ssh: ``10.0.0.5: 10.0.0.5: ``) is one prefix
    again = pl.col("raw").str.slice(pdsh.str.len_chars() + 2).str.extract(_HOST, 1)
    return raws.with_columns(
        pl.coalesce(pdsh, replica).alias("host"),
        pl.when(pdsh.is_not_null() & (again == pdsh))
        .then(pdsh.str.len_chars() * 2 + 4)
        .when(pdsh.is_not_null())
        .then(pdsh.str.len_chars() + 2)
        .when(replica.is_not_null())
        .then(replica.str.len_chars() + 1)
        .alias("_cut"),
    )


def _hosts(lines: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """Distinct (file, raw) lines with ``host``: the host prefix, in files written by pdsh or clush
    (or torchx).

    pdsh prefixes every line, a logger named ``boto3`` only its own: a file whose
    lines mostly start with a host name is pdsh output, any other keeps its text.
    """
    distinct = lines.select("file", "raw").unique().join(candidates, on="raw", how="left")
    share = pl.col("host").is_not_null().mean().over("file")
    return distinct.with_columns(pl.when(share >= HOST_SHARE).then(pl.col(c)).alias(c) for c in ("host", "_cut"))


def _split(lines: pl.DataFrame) -> pl.DataFrame:
    """Each line's prefix fields and bare message.

    Capturing 17 groups per line is the slow path of the regex engine; finding
    the span of the prefixes is the fast one, and a job has few distinct
    prefixes (srun labels x ranks), so the captures run once per distinct span.
    Every rank repeats its lines, so the span is found once per distinct line
    (per file and line where a host prefix may apply, which costs more memory).
    """
    candidates = _host_candidates(lines.select(pl.col("raw").unique()))
    rest = pl.col("raw")
    if candidates.get_column("host").null_count() == candidates.height:  # no line starts with a host name
        distinct, keys = candidates, ["raw"]
    else:
        distinct, keys = _hosts(lines, candidates), ["file", "raw"]
        host = pl.col("host")
        rest = pl.when(host.is_not_null()).then(rest.str.slice(pl.col("_cut"))).otherwise(rest)
    span = rest.str.extract(_SPAN, 1).fill_null("")
    spans = distinct.select(*keys, "host", span.alias("_span"), rest.str.slice(span.str.len_chars()).alias("msg"))
    # a bare "[N]:" with nothing after it is an entry number of torchrun's failure table, not a header
    entry = pl.col("_span").str.extract(_ENTRY, 0)
    numbered = entry.is_not_null() & (pl.col("msg").str.strip_chars() == "")
    spans = spans.with_columns(
        pl.when(numbered).then(pl.col("_span").str.replace(_ENTRY, "")).otherwise(pl.col("_span")).alias("_span"),
        pl.when(numbered).then(pl.concat_str([entry, pl.col("msg")])).otherwise(pl.col("msg")).alias("msg"),
    )
    fields = spans.select(pl.col("_span").unique())
    fields = fields.with_columns(pl.col("_span").str.extract_groups(_LAYERS).alias("_p")).unnest("_p")
    return (
        lines.join(spans, on=keys, how="left", maintain_order="left")
        .join(fields, on="_span", how="left", maintain_order="left")
        .drop("_span")
    )


def peel(lines: pl.DataFrame, years: dict[str, int]) -> pl.DataFrame:
    """Add prefix columns to a line table (file, line, raw) and the bare ``msg``.

    ``years`` gives, per file, the year to assume for glog stamps (they carry none).
    """
    parts = _split(lines)
    role_a = pl.col("role_a")
    has_b = pl.col("num_b").is_not_null()
    rank = (
        pl.when(pl.col("pl_rank").is_not_null())
        .then(_num("pl_rank"))
        .when(pl.col("mpi_rank").is_not_null())
        .then(_num("mpi_rank"))
        .when(has_b & (pl.col("role_b") == "rank"))
        .then(_num("num_b"))
        .when(~has_b & (role_a == "rank"))
        .then(_num("num_a"))
        .when(pl.col("ray_rank").is_not_null())  # vLLM's "(VllmWorker rank=1 pid=4410)"
        .then(_num("ray_rank"))
    )
    # the outer of two headers, or a lone header of another role (an empty one too: torchx's "[1]:")
    local_rank = pl.when(has_b | (role_a != "rank").fill_null(True)).then(_num("num_a"))
    year = pl.col("file").replace_strict(years, default=None, return_dtype=pl.String)
    iso = pl.coalesce("ts2", "ts").str.replace(r"(Z|[+-]\d\d:?\d\d)$", "").str.replace("T", " ").str.replace(",", ".")
    # c10's own logger does not zero-pad the month: E502 is May 2, E1122 Nov 22.
    gdate = pl.col("gdate")
    glog = pl.concat_str([year, pl.lit("-"), gdate.str.head(-2).str.zfill(2), pl.lit("-"), gdate.str.tail(2), pl.lit(" "), pl.col("gtime")])
    # vLLM's logger: "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d]" with "%m-%d %H:%M:%S", no year either
    vllm = pl.concat_str([year, pl.lit("-"), pl.col("vdate"), pl.lit(" "), pl.col("vtime")])
    level = (
        pl.col("glvl")
        .replace_strict(_LEVELS, default=None, return_dtype=pl.String)
        .fill_null(pl.col("clvl").replace_strict(_LEVELS, default=None, return_dtype=pl.String))
        .fill_null(pl.coalesce("pylvl", "vlvl").replace_strict(_PY_LEVELS, default=None, return_dtype=pl.String))
    )
    where = pl.coalesce("gsrc", "csrc", "logger")
    source = (
        pl.when(where.str.contains(r"elastic|distributed[./]run|torchrun"))
        .then(pl.lit("launcher"))
        .when(where.is_not_null())
        .then(pl.lit("torch"))
    )
    return parts.select(
        "file",
        "line",
        "raw",
        pl.col("msg").fill_null(""),
        _num("task").alias("task"),
        rank.alias("rank"),
        local_rank.alias("local_rank"),
        pl.coalesce(_parse_time(iso), _parse_time(glog), _parse_time(vllm)).alias("time"),
        level.alias("level"),
        source.alias("source"),
        pl.coalesce(
            pl.when(pl.col("gsrc").str.contains(r"\.py:\d+$")).then(pl.col("gpid").cast(pl.Int64, strict=False)),
            pl.col("ray_pid").cast(pl.Int64, strict=False),
        ).alias("pid"),
        where.alias("origin"),  # (not vLLM's: it re-logs whole tracebacks line by line, which fold like printed ones)
        # a host name is a node (cut at the domain, as NCCL prints it); an address stays whole
        pl.when(pl.col("host").str.contains(r"^\d"))
        .then(pl.col("host"))
        .otherwise(short_host(pl.col("host")))
        .fill_null(pl.col("ray_ip"))
        .alias("host"),
        pl.concat_str(
            [
                pl.col(c).fill_null("")
                for c in ("file", "host", "ray_pid", "task", "mpi_rank", "role_a", "num_a", "role_b", "num_b", "pl_rank")
            ],
            separator="|",
        ).alias("stream"),
    )


def _parse_time(text: pl.Expr) -> pl.Expr:
    """Parse 'YYYY-MM-DD HH:MM:SS[.fff]' leniently (null where it is not a time)."""
    return text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us")
