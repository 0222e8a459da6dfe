"""Python tracebacks folded into one event each, per writer.

Lines are grouped by ``stream`` (file + prefixes), so tracebacks of ranks that
interleave line by line still fold correctly when each line carries its rank.
Within a stream, a traceback runs from ``Traceback (most recent call last):``
to its exception line: the first unindented line after the header that is not
a frame, a chain marker, or a line another parser claimed. Chained exceptions
give one event per link; ``detail`` names the link before. A paste that starts
inside a traceback (its header cut off) starts at its first frame.
"""

from __future__ import annotations

import re

import polars as pl

from logsleuth import events

from .common import Example, claim, on_rows_with, streams_with

HEADER = "Traceback (most recent call last):"
#: A frame; ``traceback`` indents it by two, pastes that lost the indentation (a quote block
#: stripped, Ray's layout as users copy it) start it at the margin.
_FRAME = r'^\s*File "([^"]+)", line (\d+)(?:, in (.+))?'
#: A traceback frame as ``traceback`` prints it (faulthandler writes ``line N in f``, no comma):
#: one before any header is a traceback whose header was cut off.
_TRACEBACK_FRAME = r'^\s*File "[^"]+", line \d+, in '
#: Frames of installed libraries and of Python itself; the innermost frame that is none of
#: these is where the job's own code raised (what an expert reads first).
_LIBRARY_FRAME = r'File "(?:[^"]*/(?:site-packages|dist-packages|lib/python\d[\d.]*|lib64/python\d[\d.]*)/|<frozen |<string>)'
_CHAIN = r"^(During handling of the above exception, another exception occurred:|The above exception was the direct cause of the following exception:)"
#: The class name of an exception line: a dotted name ending like an exception.
_EXC_NAME = (
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Timeout|Iteration|Abort|Fault|Empty)"
    # Ray's class made for a task's exception: RayTaskError(NameError) (ray/exceptions.py as_instanceof_cause)
    r"(?:\([A-Za-z_][\w.]*\))?"
    r"|KeyboardInterrupt|SystemExit|StopIteration|c10::\w+"
)
#: An exception line: a dotted class name (ending like an exception) and an optional message.
EXCEPTION = rf"^({_EXC_NAME})(?::\s?(.*))?$"
#: The header ends its line; text before it is another writer's output the header was glued to
#: (a progress bar redrawn without a newline, a message printed with ``end=""``).
#: (torchrun's failure table writes ``traceback : Traceback ...``: its own field, folded by parse.torch.)
_HEADER_AT_END = r"(?:^|[^:\s]\s*)" + re.escape(HEADER) + r"\s*$"
#: Lines a traceback shows (its frames, and source lines such as ``    self.optimizer.step()`` or
#: ``    out = func(*args)``): the words of code, not the program's output, when a traceback runs on unfolded.
SHOWN_SOURCE = r"""^\s*File "|^\s{2,}(?:return\s+|raise\s+|await\s+)?[\w.\[\]'"]+(?:\s*[-+*/]?=\s*[\w.\[\]]+)?\("""
#: A source line of a frame that lost its indentation to another writer (a process printing into the
#: middle of the traceback's line): ``work = default_pg.broadcast([tensor], opts)``. Never an exception
#: line (``Name: message``), so it does not close the traceback.
_STRAY_SOURCE = r"""^(?:return\s+|await\s+)?[\w.\[\]'", ]+?\s*[-+*/]?=\s*[\w.\[\]]+\("""
#: The message of a traceback whose exception line the input does not hold.
CUT_OFF = "(traceback cut off before its exception line)"
_LOOSE = r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::\s?(.*))?$"


#: Ray's remote traceback inside a local one (ray/exceptions.py): the caller's ``ray.get`` raises
#: ``RayTaskError(NameError)`` (``as_instanceof_cause``), whose message is the task's own traceback,
#: headed by ``ray::Func() (pid=.., ip=..)`` instead of ``Traceback ...``, and ends with the task's
#: exception; an actor whose ``__init__`` raised gives ``ActorDiedError: The actor died because of an
#: error raised in its creation task, ray::Actor.__init__() (pid=..)`` the same way. Such a line
#: continues the traceback (or heads it, first in its stream); the task's exception closes it.
_RAY_REMOTE = (
    r"^(?:ray\.exceptions\.)?(?:RayTaskError(?:\([\w.]+\))?: "
    r"|(?:ActorDiedError|RayActorError): The actor died because of an error raised in its creation task)"
)

#: Lines that belong to another writer even without a prefix (NCCL, SLURM, glog):
#: they never close a traceback.
_FOREIGN = r"NCCL (?:INFO|WARN)|^(?:slurmstepd|srun)[\w.-]*: "


#: A header the paste cut short (``[rank4]: Traceback (most recent call l``), after any glued text.
_CUT_HEADER = r"(?:^|[^:\s]\s*)(Traceback \(most(?: .*?)?)\s*$"


#: Literals one of which is in every line this module reads: a traceback's header, frames and chain
#: markers, and the endings of exception class names (_EXC_NAME). The ingest prefilter keeps the
#: lines that hold one.
TRIGGERS = (
    "Traceback",
    'File "',
    'File \\"',  # a traceback escaped into one line (torchelastic's error file)
    "During handling",
    "The above exception",
    "Error",
    "xception",
    "Exit",
    "Interrupt",
    "Warning",
    "Failure",
    "Timeout",
    "Iteration",
    "Abort",
    "Fault",
    "Empty",
)

KINDS = (events.TRACEBACK, events.EXCEPTION)

EXAMPLES: tuple[Example, ...] = (
    (
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 42, in step\n'
        "    loss = model(batch)\n"
        '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl\n'
        "    return forward_call(*args, **kwargs)\n"
        "ValueError: could not convert label 'n/a' to float",
        {
            "kind": events.TRACEBACK,
            "exc_type": "ValueError",
            "frame": "/w/train.py:42 in step",
            "level": "error",
            "message": "ValueError: could not convert label 'n/a' to float",
        },
    ),
    (
        'Traceback (most recent call last):\n  File "/w/train.py", line 7, in <module>\n    main()\nKeyboardInterrupt',
        {"kind": events.TRACEBACK, "exc_type": "KeyboardInterrupt"},
    ),
    (
        'Traceback (most recent call last):\n  File "/w/loader.py", line 9, in get\n    item = q.get(timeout=5)\n_queue.Empty',
        {"kind": events.TRACEBACK, "exc_type": "_queue.Empty"},
    ),
    (
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
        {"kind": events.EXCEPTION, "exc_type": "torch.distributed.DistBackendError", "rank": 1, "source": "python"},
    ),
    ("UserWarning: this DataLoader will create 8 worker processes", {"kind": events.EXCEPTION, "level": "warning"}),
    ("StopIteration", {"kind": events.EXCEPTION, "exc_type": "StopIteration"}),
    (
        '    "message": "RuntimeError: Permission denied",',
        {"kind": events.EXCEPTION, "source": "launcher", "exc_type": "RuntimeError", "message": "RuntimeError: Permission denied"},
    ),
    (
        '{"message": {"message": "RuntimeError: x", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  '
        'File \\"/w/train.py\\", line 3, in f\\n    g()\\nRuntimeError: x\\n"}}}',
        {"kind": events.TRACEBACK, "exc_type": "RuntimeError", "frame": "/w/train.py:3 in f"},
    ),
)


def _complete_cut_header(df: pl.DataFrame) -> pl.DataFrame:
    """A traceback header cut short where its file ends (a paste that stops inside the line) is
    the header all the same: it is completed, so it folds into a traceback cut off before its
    exception line. Only the last line of a file counts: a line cut in the middle of a log is
    another writer's text interleaved, not a header."""
    last = (pl.col("line") == pl.col("line").max().over("file")) & pl.col("msg").str.contains("Traceback (most", literal=True)
    if not df.select(last.any()).item():
        return df
    tail = pl.col("msg").str.extract(_CUT_HEADER, 1)
    cut = last & tail.is_not_null() & pl.lit(HEADER).str.starts_with(tail) & (tail != HEADER)
    return df.with_columns(
        pl.when(cut).then(pl.col("msg").str.replace(r"Traceback \(most.*$", HEADER)).otherwise(pl.col("msg")).alias("msg")
    )


def fold(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (the table without traceback lines, one event per traceback).

    Only streams that print a traceback header, or a frame of one whose header was cut off, are folded.
    A header cut short by the end of its file counts (see _complete_cut_header).
    """
    df = _complete_cut_header(df)
    inside, others = streams_with(df, f"{_HEADER_AT_END}|{_TRACEBACK_FRAME}")
    if inside.is_empty():
        return df, df.clear()
    rest, folded = _fold(inside)
    return pl.concat([rest, others], how="diagonal_relaxed"), folded


def _fold(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fold the tracebacks of streams that have one."""
    msg = pl.col("msg")
    foreign = pl.col("origin").is_not_null() | msg.str.contains(_FOREIGN)
    t = df.sort("stream", "line").with_columns(
        msg.str.contains(_HEADER_AT_END).alias("_hdr"),
        msg.str.contains(_FRAME).alias("_frame"),
        msg.str.contains(_CHAIN).alias("_chain"),
        msg.str.contains(_RAY_REMOTE).alias("_ray"),
    )
    # a stream whose first traceback line is a frame (or Ray's remote-traceback line) was cut inside
    # a traceback: that line heads it (any header counts as seen, torchrun's ``traceback : Traceback ...``
    # field too)
    marks = msg.str.contains(HEADER, literal=True) | (pl.col("_frame") & msg.str.contains(_TRACEBACK_FRAME)) | pl.col("_ray")
    headless = marks & (marks.cast(pl.Int32).cum_sum().over("stream") == 1) & (pl.col("_frame") | pl.col("_ray")) & ~foreign
    t = t.with_columns((pl.col("_hdr") | headless).alias("_hdr"))
    t = t.with_columns(pl.col("_hdr").cum_sum().over("stream").alias("_tb"))
    candidate = (
        (pl.col("_tb") > 0)
        & ~pl.col("_hdr")
        & ~pl.col("_frame")
        & ~pl.col("_chain")
        & ~pl.col("_ray")
        & ~msg.str.contains(r"^\s")
        & (msg != "")
        & ~foreign
        & ~msg.str.contains(_STRAY_SOURCE)
    )
    t = t.with_columns(candidate.cum_sum().over("stream", "_tb").alias("_n"))
    closing = candidate & (pl.col("_n") == 1)
    inside = (pl.col("_tb") > 0) & (pl.col("_n") == 0) & ~foreign
    t = t.with_columns(closing.alias("_close"), ((inside | closing | pl.col("_chain")) & (pl.col("_tb") > 0)).alias("_used"))
    blocks = t.filter((pl.col("_tb") > 0) & pl.col("_used"))
    if blocks.is_empty():
        return df, df.clear()
    # a chain marker sits after the previous traceback's exception line
    chain_before = pl.col("_chain").any()
    frames = pl.col("msg").filter(pl.col("_frame"))
    tbs = blocks.group_by("stream", "_tb", maintain_order=True).agg(
        pl.col("file").first(),
        pl.col("line").filter(pl.col("_hdr")).first().alias("block_start"),
        pl.col("line").filter(pl.col("_close")).first().alias("_close_line"),
        pl.col("raw").filter(pl.col("_close")).first().alias("_close_raw"),
        # a traceback cut before its exception line still names the task's exception class in Ray's line
        pl.coalesce(pl.col("msg").filter(pl.col("_close")).first(), pl.col("msg").filter(pl.col("_ray")).last()).alias("_exc"),
        pl.col("raw").filter(pl.col("_hdr")).first().alias("_hdr_raw"),
        frames.last().alias("_last_frame"),
        pl.col("msg").filter(pl.col("_frame") & ~pl.col("msg").str.contains(_LIBRARY_FRAME)).last().alias("_user_frame"),
        frames.len().alias("_frames"),
        chain_before.alias("_chained_next"),
        *(
            pl.col(c).filter(pl.col("_close") | pl.col("_hdr")).drop_nulls().last().alias(c)
            for c in ("task", "rank", "local_rank", "pid", "host")
        ),
        pl.col("time").drop_nulls().last().alias("time"),
    )
    exc = pl.col("_exc")
    strict = exc.str.extract(EXCEPTION, 1)
    exc_type = pl.coalesce(strict, exc.str.extract(_LOOSE, 1))
    prev_type = exc_type.shift(1).over("stream", order_by="_tb")
    prev_chained = pl.col("_chained_next").shift(1).over("stream", order_by="_tb").fill_null(False)
    last_frame = _where(pl.col("_last_frame"))
    folded = tbs.select(
        "file",
        pl.coalesce("_close_line", "block_start").alias("line"),
        "block_start",
        pl.coalesce("_close_raw", "_hdr_raw").alias("raw"),
        "stream",
        "task",
        "rank",
        "local_rank",
        "pid",
        "host",
        "time",
        pl.coalesce(exc, pl.lit(CUT_OFF)).alias("msg"),
        exc_type.alias("exc_type"),
        pl.concat_str(
            [
                pl.lit("frames: "),
                pl.col("_frames").cast(pl.String),
                pl.when(last_frame.is_not_null()).then(pl.concat_str([pl.lit("; last: "), last_frame])).otherwise(pl.lit("")),
                pl.when(prev_chained).then(pl.concat_str([pl.lit("; chained after: "), prev_type])).otherwise(pl.lit("")),
            ]
        ).alias("detail"),
        _where(pl.col("_user_frame")).alias("frame"),
        pl.lit(events.TRACEBACK).alias("kind"),
        pl.lit("python").alias("source"),
        pl.lit("error").alias("level"),
    )
    rest = t.filter(~pl.col("_used")).drop("_hdr", "_frame", "_chain", "_ray", "_tb", "_n", "_close", "_used")
    return rest, folded


#: A traceback inside one line, its newlines and quotes escaped: the ``py_callstack`` of torchelastic's
#: error file (elastic/multiprocessing/errors/error_handler.py, ``record_exception`` writes
#: ``traceback.format_exc()`` with ``json.dump``), printed whole or in part when the file is shown:
#: ``{"message": {"message": "RuntimeError: x", "extraInfo": {"py_callstack": "Traceback (most recent
#: call last):\n  File \"/w/train.py\", line 3, in f\n    g()\nRuntimeError: x\n", ...}}}``.
#: Its frames (``File \"/w/train.py\", line 3, in f``) or its header mark it.
_ESCAPED_FRAME = r'File \\+"([^"\\]+)\\+", line (\d+), in ([^\\"]+)'
_ESCAPED_TRACEBACK = rf"Traceback \(most recent call last\):\\+n|{_ESCAPED_FRAME}"
#: Its exception line: after an escaped newline, up to the next one (or the end of the string).
_ESCAPED_EXCEPTION = rf'\\+n({_EXC_NAME})(?::[ ]?((?:[^\\"]|\\+[^\\n])*))?(?:\\+n|"|$)'
#: Frames of installed libraries, as ``file`` of an escaped frame.
_LIBRARY_PATH = r"/(?:site-packages|dist-packages|lib/python\d[\d.]*|lib64/python\d[\d.]*)/|^<"

#: torchrun's error file, logged as indented JSON by torch 1.9-1.12 when no error file is set:
#: ``"message": "RuntimeError: Permission denied",`` (elastic/multiprocessing/errors/error_handler.py).
_ERROR_FILE_MESSAGE = r'^\s*"message": "(.*?)",?\s*$'


def annotate_exceptions(df: pl.DataFrame) -> pl.DataFrame:
    """Exception lines outside a traceback (a logged error, torchrun's summary, its error-file JSON),
    and tracebacks escaped into one line (the error file's ``py_callstack``)."""
    return on_rows_with(df, (), _annotate_exceptions, pattern=f"(?:{EXCEPTION})|(?:{_ERROR_FILE_MESSAGE})|{_ESCAPED_TRACEBACK}")


def _unescape(text: pl.Expr) -> pl.Expr:
    """JSON string escapes of a message (quotes, backslashes, tabs) as the message printed them."""
    return text.str.replace_all(r"\\+t", "\t").str.replace_all(r'\\+"', '"').str.replace_all(r"\\\\", "\\", literal=True)


def _escaped_traceback(df: pl.DataFrame) -> pl.DataFrame:
    """Claim the lines that hold an escaped traceback: one traceback event each, its exception line
    the last one the string holds (the one the process died of; chained ones come before it)."""
    msg = pl.col("msg")
    exc = msg.str.extract_all(_ESCAPED_EXCEPTION).list.last()
    frames = msg.str.extract_all(_ESCAPED_FRAME)
    last = frames.list.last()
    own = frames.list.eval(pl.element().filter(~pl.element().str.extract(_ESCAPED_FRAME, 1).str.contains(_LIBRARY_PATH))).list.last()

    def where(frame: pl.Expr) -> pl.Expr:
        part = [frame.str.extract(_ESCAPED_FRAME, i) for i in (1, 2, 3)]
        return pl.concat_str([part[0], pl.lit(":"), part[1], pl.lit(" in "), part[2]])

    exc_line = _unescape(pl.concat_str([exc.str.extract(_ESCAPED_EXCEPTION, 1), pl.lit(": "), exc.str.extract(_ESCAPED_EXCEPTION, 2)]))
    return claim(
        df,
        msg.str.contains(_ESCAPED_TRACEBACK),
        {
            "kind": pl.lit(events.TRACEBACK),
            "source": pl.lit("python"),
            "level": pl.lit("error"),
            "exc_type": exc.str.extract(_ESCAPED_EXCEPTION, 1),
            "msg": pl.coalesce(exc_line, exc.str.extract(_ESCAPED_EXCEPTION, 1), pl.lit(CUT_OFF)),
            "detail": pl.concat_str(
                [
                    pl.lit("frames: "),
                    frames.list.len().cast(pl.String),
                    pl.when(last.is_not_null()).then(pl.concat_str([pl.lit("; last: "), where(last)])).otherwise(pl.lit("")),
                    pl.lit("; escaped in one line"),
                ]
            ),
            "frame": where(own),
        },
    )


def _annotate_exceptions(df: pl.DataFrame) -> pl.DataFrame:
    df = _escaped_traceback(df)
    msg = pl.col("msg")
    inner = msg.str.extract(_ERROR_FILE_MESSAGE, 1).str.replace_all(r"\"", '"', literal=True)
    df = claim(
        df,
        inner.str.contains(EXCEPTION),
        {
            "kind": pl.lit(events.EXCEPTION),
            "source": pl.lit("launcher"),
            "level": pl.lit("error"),
            "exc_type": inner.str.extract(EXCEPTION, 1),
            "msg": inner,
        },
    )
    exc_type = msg.str.extract(EXCEPTION, 1)
    # a warning category printed on its own (warnings.showwarning's "UserWarning: ..."), not raised: a warning
    level = pl.when(exc_type.str.ends_with("Warning")).then(pl.lit("warning")).otherwise(pl.lit("error"))
    return claim(
        df,
        msg.str.contains(EXCEPTION),
        {"kind": pl.lit(events.EXCEPTION), "source": pl.lit("python"), "level": level, "exc_type": exc_type},
    )


def _where(frame: pl.Expr) -> pl.Expr:
    """A frame line as ``file:line in function`` (null when there is no frame)."""
    return pl.concat_str(
        [
            frame.str.extract(_FRAME, 1),
            pl.lit(":"),
            frame.str.extract(_FRAME, 2),
            pl.lit(" in "),
            frame.str.extract(_FRAME, 3).fill_null("?"),
        ]
    )
