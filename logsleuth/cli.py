"""The `logsleuth` command: a thin typer layer over the library.

Exit status (stable; see README and docs/ci.md):
  0  the analysis ran (whatever the verdict)
  1  --fail-on matched the verdict; for `repro`: the reproduction failed or gave wrong results
  2  usage error (bad option, unknown format, invalid rules, an --output or --store that cannot be written)
  3  no readable input: every input was missing, empty, binary or unreadable
     (`history`: the store folder does not exist)
  4  the analysis itself failed (a logsleuth bug); a report is still printed
`epilog` exits 0 whenever it could say what it did: a SLURM epilog must not fail.
"""

# No `from __future__ import annotations`: typer reads every command's signature at each
# start, and evaluating string annotations cost a third of a small log's start-up overhead.
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from . import __version__

if TYPE_CHECKING:
    import polars as pl

    from .rulebook import RuleSet

EXIT_OK, EXIT_FAIL_ON, EXIT_USAGE, EXIT_NO_INPUT, EXIT_INTERNAL = 0, 1, 2, 3, 4

app = typer.Typer(
    name="logsleuth",
    help="Tell why a distributed PyTorch job died, from its logs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rules_app = typer.Typer(help="List and check rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")

PathsArg = Annotated[list[str], typer.Argument(help="Log files, globs, directories, .gz files, or - for stdin.", show_default=False)]
RulesOpt = Annotated[
    list[Path] | None, typer.Option("--rules", help="Extra rule folder or file (repeatable); overrides built-in rules by id.")
]


def _err(message: str) -> None:
    typer.echo(f"logsleuth: {message}", err=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"logsleuth {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Tell why a distributed PyTorch job died, from its logs."""


def _load_rules_or_exit(rules: list[Path] | None) -> "RuleSet":
    from .rulebook import RuleError, load

    try:
        return load(rules or ())
    except RuleError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None


@app.command()
def analyze(
    paths: PathsArg,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="terminal, json, markdown or github (annotations + $GITHUB_STEP_SUMMARY).")
    ] = "terminal",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file instead of stdout.")] = None,
    rules: RulesOpt = None,
    budget: Annotated[float | None, typer.Option("--budget", help="Stop reading after this many seconds; report on what was read.")] = None,
    fail_on: Annotated[
        str | None,
        typer.Option("--fail-on", help="Exit 1 when the verdict's cause or category is in this comma list ('any': any failure)."),
    ] = None,
    color: Annotated[
        bool | None, typer.Option("--color/--no-color", help="Colour in the terminal format (default: when stdout is a terminal).")
    ] = None,
    no_redact: Annotated[bool, typer.Option("--no-redact", help="Keep secrets (tokens, passwords) in the report.")] = False,
    model: Annotated[Path | None, typer.Option("--model", help="Classifier model (folder or .npz) instead of the shipped one.")] = None,
    no_model: Annotated[bool, typer.Option("--no-model", help="Rules only: do not fuse the learned classifier.")] = False,
    store: Annotated[
        Path | None,
        typer.Option("--store", readable=False, help="Append the verdict to this history folder (see `logsleuth history`)."),
    ] = None,
    job_id: Annotated[
        str | None, typer.Option("--job-id", envvar="SLURM_JOB_ID", help="Job id recorded with --store (default: $SLURM_JOB_ID).")
    ] = None,
    merge: Annotated[bool, typer.Option("--merge", help="One report for all inputs, even when they hold several SLURM jobs.")] = False,
    timings: Annotated[
        bool, typer.Option("--timings", hidden=True, help="Print seconds and CPU seconds per stage to stderr (benchmarks).")
    ] = False,
) -> None:
    """Analyse the logs of a job and print the verdict (one per job when the inputs hold several)."""
    from . import stages
    from .api import analyze_jobs
    from .report.render import FORMATS, render_many, step_summary

    if fmt not in FORMATS:
        _err(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
        raise typer.Exit(EXIT_USAGE)
    if store is not None and not _writable_folder(store):
        _err(f"--store {store}: cannot create or write to this folder")
        raise typer.Exit(EXIT_USAGE)
    ruleset = _load_rules_or_exit(rules)
    if fail_on:
        _check_fail_on(fail_on, ruleset)
    reports = analyze_jobs(paths, rules=rules, budget_s=budget, redact=not no_redact, model=model, classifier=not no_model, merge=merge)
    use_color = (sys.stdout.isatty() and output is None) if color is None else color
    with stages.current().stage("report"):
        text = render_many(reports, fmt, color=use_color, workspace=os.environ.get("GITHUB_WORKSPACE"))
    if timings:
        import json

        _err("timings " + json.dumps(stages.current().to_dict()))
    if output:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            _err(f"--output {output}: cannot write the report: {exc.strerror or exc}")
            raise typer.Exit(EXIT_USAGE) from None
    else:
        sys.stdout.write(text)
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as fh:
                fh.write("\n".join(step_summary(r) for r in reports) + "\n")
        except OSError as exc:  # the annotations are out; a missing summary must not hide them
            _err(f"cannot append to $GITHUB_STEP_SUMMARY ({summary_file}): {exc.strerror or exc}")
    for report in reports:
        for inp in report.inputs:
            for problem in inp.problems:
                _err(f"{inp.file}: {problem}")
    internal = next((r.notes[0] for r in reports if any(n.startswith("internal error") for n in r.notes)), None)
    if internal is not None:
        _err(internal)
        raise typer.Exit(EXIT_INTERNAL)
    if not any(r.readable for r in reports):
        _err("no readable input: nothing was analysed")
        raise typer.Exit(EXIT_NO_INPUT)
    if store is not None:
        from .history import append

        try:
            for report in reports:
                append(store, report, job=report.job if len(reports) > 1 else (job_id or report.job))
        except OSError as exc:
            _err(f"--store {store}: the verdict was not recorded: {exc.strerror or exc}")
            raise typer.Exit(EXIT_USAGE) from None
    if fail_on and any(_fails(r.verdict.cause, r.verdict.category, fail_on) for r in reports):
        raise typer.Exit(EXIT_FAIL_ON)


def _writable_folder(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _check_fail_on(spec: str, ruleset: "RuleSet") -> None:
    """A --fail-on naming no known cause would never match: a typo must not pass silently."""
    from .taxonomy import TAXONOMY

    known = {"any", *TAXONOMY, *ruleset.causes}
    unknown = sorted({s.strip() for s in spec.split(",") if s.strip()} - known)
    if unknown:
        _err(f"unknown --fail-on cause {', '.join(map(repr, unknown))}; use 'any' or causes from `logsleuth explain`")
        raise typer.Exit(EXIT_USAGE)


def _fails(cause: str, category: str, spec: str) -> bool:
    wanted = {s.strip() for s in spec.split(",") if s.strip()}
    if "any" in wanted:
        return category != "none"
    return cause in wanted or category in wanted


@app.command()
def events(
    paths: PathsArg,
    rank: Annotated[list[int] | None, typer.Option(help="Only these ranks (repeatable).")] = None,
    node: Annotated[list[str] | None, typer.Option(help="Only these nodes (repeatable).")] = None,
    source: Annotated[list[str] | None, typer.Option(help="slurm, nccl, torch, launcher, python or app (repeatable).")] = None,
    level: Annotated[list[str] | None, typer.Option(help="fatal, error, warning, info or debug (repeatable).")] = None,
    kind: Annotated[list[str] | None, typer.Option(help="Event kind, e.g. traceback, srun_exit (repeatable).")] = None,
    grep: Annotated[str | None, typer.Option(help="Only events whose message matches this regex.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Export to .parquet, .csv, .jsonl or .json instead of printing.")
    ] = None,
    limit: Annotated[int, typer.Option(help="Rows to print (export writes all).")] = 50,
    rules: RulesOpt = None,
    no_redact: Annotated[bool, typer.Option("--no-redact", help="Keep secrets (tokens, passwords) in the output.")] = False,
) -> None:
    """Show or export the event table that the analysis works on."""
    import polars as pl

    from .api import events_for
    from .events import LEVELS, SOURCES

    for name, given, allowed in (("--source", source, SOURCES), ("--level", level, LEVELS)):
        unknown = sorted(set(given or ()) - set(allowed))
        if unknown:
            _err(f"unknown {name} {', '.join(map(repr, unknown))}; choose from {', '.join(allowed)}")
            raise typer.Exit(EXIT_USAGE)
    _load_rules_or_exit(rules)
    table, inputs = events_for(paths, rules=rules, redact=not no_redact)
    for col, values in (("rank", rank), ("node", node), ("source", source), ("level", level), ("kind", kind)):
        if values:
            table = table.filter(pl.col(col).is_in(values))
    if grep:
        try:
            table = table.filter(pl.col("message").str.contains(grep))
        except pl.exceptions.ComputeError as exc:
            _err(f"invalid --grep regex: {str(exc).splitlines()[0]}")
            raise typer.Exit(EXIT_USAGE) from None
    for inp in inputs:
        for problem in inp.problems:
            _err(f"{inp.file}: {problem}")
    if output:
        suffix = output.suffix.lower()
        writers: dict[str, Callable[[Path], object]] = {
            ".parquet": table.write_parquet,
            ".csv": table.write_csv,
            ".jsonl": table.write_ndjson,
            ".ndjson": table.write_ndjson,
            ".json": table.write_json,
        }
        if suffix not in writers:
            _err(f"cannot export to {suffix or 'a file without suffix'}: use .parquet, .csv, .jsonl or .json")
            raise typer.Exit(EXIT_USAGE)
        writers[suffix](output)
        typer.echo(f"wrote {table.height} events to {output}", err=True)
    else:
        _print_events(table, limit)
    if not any(i.lines for i in inputs):
        _err("no readable input")
        raise typer.Exit(EXIT_NO_INPUT)


def _print_events(table: "pl.DataFrame", limit: int) -> None:
    """One line per event: location, who, what, message; cut to the terminal width."""
    import shutil

    from .report.render import printable

    width = shutil.get_terminal_size((160, 20)).columns
    for row in table.head(limit).iter_rows(named=True):
        who = " ".join(x for x in (f"r{row['rank']}" if row["rank"] is not None else "", row["node"] or "") if x)
        head = f"{row['file']}:{row['line']}  {who or '-'}  {row['source']}/{row['level']}  {row['kind']}  "
        text = (row["message"] or "").replace("\n", " ⏎ ")
        typer.echo(printable(head + text)[:width])
    if table.height > limit:
        typer.echo(f"… {table.height - limit} more events (use --limit or --output)", err=True)


@rules_app.command("list")
def rules_list(rules: RulesOpt = None) -> None:
    """List the rules in use (built-in plus --rules)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .rulebook import RuleError, load

    try:
        ruleset = load(rules or ())
    except RuleError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    table = Table(show_header=True, header_style="bold", box=None)
    for col in ("id", "name", "cause", "category", "role", "weight"):
        table.add_column(col)
    for r in sorted(ruleset.rules, key=lambda r: r.id):
        table.add_row(r.id, escape(r.name), escape(r.cause), ruleset.category(r.cause), r.role, f"{r.weight:.2f}")
    Console().print(table)


@rules_app.command("check")
def rules_check(
    folders: Annotated[list[Path] | None, typer.Argument(help="Rule folders or files to check together with the built-in rules.")] = None,
) -> None:
    """Validate rules: schema, patterns, and every example through the real pipeline."""
    from .rulebook import RuleError, load
    from .rulecheck import check

    try:
        ruleset = load(folders or ())
    except RuleError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_FAIL_ON) from None
    problems = check(ruleset)
    for p in problems:
        typer.echo(p)
    n_ex = sum(len(r.examples_match) + len(r.examples_no_match) for r in ruleset.rules)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {len(ruleset.rules)} rules", err=True)
        raise typer.Exit(EXIT_FAIL_ON)
    typer.echo(f"ok: {len(ruleset.rules)} rules, {len(ruleset.causes)} causes, {n_ex} examples")


@rules_app.command("coverage")
def rules_coverage(
    rules: RulesOpt = None,
    catalogue: Annotated[
        list[Path] | None,
        typer.Option("--catalogue", help="Message catalogue folder or file (repeatable); default: the built-in catalogue."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    min_share: Annotated[
        float | None,
        typer.Option("--min-share", help="Exit 1 when the share of error-level messages mapped is below this (0-1)."),
    ] = None,
) -> None:
    """Run every catalogue message's sample through the rules: the share mapped per source, and the unmapped ones.

    Exits 0 whatever the share, unless --min-share is given and not met (1); invalid rules or
    catalogue files exit 2.
    """
    import json

    from .coverage import CatalogueError, error_share, evaluate, load_catalogue, render_json, render_text

    if fmt not in ("text", "json"):
        _err(f"unknown format {fmt!r} (text or json)")
        raise typer.Exit(EXIT_USAGE)
    ruleset = _load_rules_or_exit(rules)
    try:
        messages = load_catalogue(catalogue or (), rules=ruleset)
    except CatalogueError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    result = evaluate(messages, ruleset)
    typer.echo(json.dumps(render_json(result), indent=2) if fmt == "json" else render_text(result))
    if min_share is not None and error_share(result) < min_share:
        _err(f"{error_share(result):.1%} of error-level messages mapped, below --min-share {min_share:.1%}")
        raise typer.Exit(EXIT_FAIL_ON)


@app.command()
def explain(
    what: Annotated[str, typer.Argument(help="A cause id (e.g. port_in_use) or a rule id (e.g. RDZ001).")],
    rules: RulesOpt = None,
) -> None:
    """Explain a cause or a rule: what it means, how to fix it, what detects it."""
    from .rulebook import RuleError, load
    from .taxonomy import TAXONOMY

    try:
        ruleset = load(rules or ())
    except RuleError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    by_id = ruleset.by_id()
    if what in by_id:
        r = by_id[what]
        cause = ruleset.cause(r.cause)
        lines = [
            f"{r.id} {r.name}",
            f"cause: {r.cause} (category {ruleset.category(r.cause)}), role {r.role}, weight {r.weight}",
            f"defined at {r.origin}",
            "",
        ]
        lines += [r.explanation or cause.explanation, "", "Fix:"] + [f"  {i}. {s}" for i, s in enumerate(r.fix or cause.fix, 1)]
        lines += ["", "Patterns:"] + [f"  {p}" for p in r.patterns]
        refs = r.references or cause.references
        if refs:
            lines += ["", "References:"] + [f"  {u}" for u in refs]
        typer.echo("\n".join(lines))
        return
    if what not in TAXONOMY and what not in ruleset.causes:
        known = ", ".join(sorted(set(TAXONOMY) | set(ruleset.causes)))
        _err(f"unknown cause or rule {what!r}. Known causes: {known}")
        raise typer.Exit(EXIT_USAGE)
    cause = ruleset.cause(what)
    detecting = sorted((r for r in ruleset.rules if r.cause == what or ruleset.category(r.cause) == what), key=lambda r: r.id)
    finer = sorted(c.id for c in ruleset.causes.values() if c.parent == what and c.id != what)
    lines = [f"{what}: {cause.title}"]
    if cause.parent != what:
        lines.append(f"refines: {cause.parent}")
    lines += ["", cause.explanation or TAXONOMY.get(what, ""), ""]
    if cause.fix:
        lines += ["Fix:"] + [f"  {i}. {s}" for i, s in enumerate(cause.fix, 1)] + [""]
    if finer:
        lines += ["Finer causes: " + ", ".join(finer), ""]
    lines += ["Detected by:"] + ([f"  {r.id} {r.name} ({r.role}, weight {r.weight})" for r in detecting] or ["  (no rule)"])
    if cause.references:
        lines += ["", "References:"] + [f"  {u}" for u in cause.references]
    typer.echo("\n".join(lines))


@app.command()
def repro(
    paths: Annotated[
        list[str] | None, typer.Argument(help="Logs of the failed job (optional: the flags alone also work).", show_default=False)
    ] = None,
    op: Annotated[str | None, typer.Option(help="all_reduce, all_gather, reduce_scatter, broadcast, all_to_all or barrier.")] = None,
    numel: Annotated[int | None, typer.Option(help="Elements per rank's input (the watchdog's NumelIn).")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32, float16, bfloat16, float64, int32, int64, int8 or uint8.")] = None,
    nproc: Annotated[int | None, typer.Option(help="Processes to start here, and per node in an emitted script.")] = None,
    world_size: Annotated[int | None, typer.Option(help="WORLD_SIZE the local processes are told (default: --nproc).")] = None,
    backend: Annotated[str | None, typer.Option(help="auto (NCCL where GPUs are, else gloo), gloo or nccl.")] = None,
    iters: Annotated[int | None, typer.Option(help="Timed iterations.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up iterations before timing.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds the whole run may take; then every process is killed.")] = None,
    pg_timeout: Annotated[
        float | None, typer.Option(help="Seconds the process group waits for a collective or missing ranks (default: half of --timeout).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="NAME=VALUE for the processes (NCCL_/GLOO_/TORCH_/MASTER_/CUDA_; repeatable).")
    ] = None,
    nodes: Annotated[str | None, typer.Option(help="Nodes for --emit, e.g. node01,node02 or node[01-04].")] = None,
    emit: Annotated[str | None, typer.Option(help="Write a script instead of running: sbatch or torchrun.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the result or script to this file instead of stdout.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or json.")] = "terminal",
    logs: Annotated[Path | None, typer.Option(help="Keep the processes' output in this folder (repro.log).")] = None,
    rules: RulesOpt = None,
    color: Annotated[bool | None, typer.Option("--color/--no-color", help="Colour in the terminal format.")] = None,
) -> None:
    """Re-run the suspect collective with the job's shape and environment: pass or fail, correct or not, how fast.

    Exit status: 0 it passed (or a script was written), 1 it failed or gave wrong results,
    2 usage error, 3 no readable input.
    """
    from .repro.emit import KINDS, nccl_tests, script
    from .repro.plan import PlanError, find, make_plan, parse_env

    if fmt not in ("terminal", "json"):
        _err(f"unknown --format {fmt!r}; choose terminal or json")
        raise typer.Exit(EXIT_USAGE)
    if emit is not None and emit not in KINDS:
        _err(f"unknown --emit {emit!r}; choose one of {', '.join(KINDS)}")
        raise typer.Exit(EXIT_USAGE)
    _load_rules_or_exit(rules)
    found = None
    if paths:
        from .pipeline import run as run_pipeline

        # one read: the event table the collective is taken from and the verdict that names it
        (analysis,) = run_pipeline(paths, rules=rules, never_raise=True)
        for inp in analysis.inputs:
            for problem in inp.problems:
                _err(f"{inp.file}: {problem}")
        if not any(i.lines for i in analysis.inputs):
            _err("no readable input: nothing to take the collective from")
            raise typer.Exit(EXIT_NO_INPUT)
        assert analysis.report is not None
        found = find(analysis.events, analysis.report.verdict)
    try:
        plan = make_plan(
            found,
            op=op,
            numel=numel,
            dtype=dtype,
            nproc=nproc,
            world_size=world_size,
            backend=backend,
            iters=iters,
            warmup=warmup,
            timeout_s=timeout,
            pg_timeout_s=pg_timeout,
            env=parse_env(env or []),
            nodes=nodes,
        )
        if emit:
            _write(output, script(plan, emit))
            perf = nccl_tests(plan, world=plan.nnodes * plan.nproc)
            for note in plan.notes:
                _err(f"note: {note}")
            if output:
                _err(f"wrote {emit} script to {output}")
            _err(f"nccl-tests equivalent: {perf}" if perf else "nccl-tests has no barrier test")
            return
        from .repro.run import reproduce
        from .repro.view import terminal

        result = reproduce(plan, logs=logs, rules=rules)
    except PlanError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    if fmt == "json":
        import json

        text = json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n"
    else:
        text = terminal(result, color=(sys.stdout.isatty() and output is None) if color is None else color)
    _write(output, text)
    if not result.ok:
        raise typer.Exit(EXIT_FAIL_ON)


def _write(output: Path | None, text: str) -> None:
    """To the chosen file (and nowhere else), or to stdout."""
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
        if text.startswith("#!"):
            output.chmod(0o755)
    except OSError as exc:
        _err(f"cannot write {output}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE) from None


@app.command()
def train(
    corpus: Annotated[
        list[Path] | None, typer.Option("--corpus", help="Corpus folder of cases (repeatable).", show_default="corpus")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Folder for classifier.npz and classifier.json.")] = Path("models"),
    rules: RulesOpt = None,
    check: Annotated[
        bool, typer.Option("--check", help="Train into a temporary folder and exit 1 unless the result is byte-identical to --out's model.")
    ] = False,
) -> None:
    """Train the classifier on the corpus (needs torch) and write the model."""
    import tempfile

    _load_rules_or_exit(rules)
    try:
        from .learn.train import train as run
    except ImportError as exc:
        _err(f"training needs the 'train' extra (torch): {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    from .learn.corpus import CorpusError

    def say(msg: str) -> None:
        typer.echo(msg, err=True)

    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = run(corpus or [Path("corpus")], Path(tmp) if check else out, rules=rules or (), progress=say)
        except (CorpusError, ValueError) as exc:
            _err(str(exc))
            raise typer.Exit(EXIT_USAGE) from None
        if check:
            differ = [
                f"{out / p.name}"
                for p in (result.npz, result.npz.with_suffix(".json"))
                if not (out / p.name).is_file() or (out / p.name).read_bytes() != p.read_bytes()
            ]
            if differ:
                _err(f"not what training produces from this corpus: {', '.join(differ)} (retrain with `logsleuth train --out {out}`)")
                raise typer.Exit(EXIT_FAIL_ON)
            typer.echo(f"ok: {out} is byte-identical to a fresh training run ({result.seconds:.0f} s)")
            return
    meta = result.meta
    held = meta["metrics"]["held_out"]
    typer.echo(f"wrote {result.npz} and {result.npz.with_suffix('.json')} in {result.seconds:.0f} s")
    typer.echo(f"trained on {meta['training_data']['cases']} cases; {meta['training_data']['held_out_cases']} held out")
    for origin, per in held.items():
        for name, m in per.items():
            if name == "n":
                continue
            typer.echo(
                f"  held-out {origin} (n={per['n']}) {name:<11} top-1 {m['accuracy']:.3f}  top-3 {m['top3']:.3f}"
                f"  macro-F1 {m['macro_f1']:.3f}  ECE {m['ece']:.3f}"
            )


@app.command("eval")
def evaluate(
    corpus: Annotated[list[Path], typer.Argument(help="Corpus folders; cases of the model's training groups are not scored.")],
    model: Annotated[Path | None, typer.Option("--model", help="Classifier model (folder or .npz); default: the shipped one.")] = None,
    rules: RulesOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or json.")] = "terminal",
    ablation: Annotated[bool, typer.Option("--ablation/--no-ablation", help="Remove each cause's rules and re-score its cases.")] = True,
    sklearn: Annotated[bool, typer.Option("--sklearn/--no-sklearn", help="Fit the tf-idf + logistic regression baseline.")] = True,
    first_contact: Annotated[
        str | None,
        typer.Option(
            "--first-contact",
            metavar="BATCH",
            help="Score a new batch of real cases as `analyze` answers them and append the score to --ledger (once per batch).",
        ),
    ] = None,
    ledger: Annotated[Path, typer.Option("--ledger", help="The first-contact ledger (JSON lines; LEDGER.md is written beside it).")] = Path(
        "corpus/ledger.jsonl"
    ),
) -> None:
    """Score rules, classifier, fusion and naive baselines on held-out cases; or a new batch at first contact."""
    import json

    if fmt not in ("terminal", "json"):
        _err(f"unknown --format {fmt!r}; choose terminal or json")
        raise typer.Exit(EXIT_USAGE)
    _load_rules_or_exit(rules)
    if first_contact is not None:
        _first_contact(first_contact, corpus, ledger, fmt)
        return
    from .classify import ModelError

    try:
        from .learn.corpus import CorpusError
        from .learn.evaluate import evaluate as run
        from .learn.evaluate import render
    except ImportError as exc:
        _err(f"evaluation needs the 'train' extra (numpy, scikit-learn): {exc}")
        raise typer.Exit(EXIT_USAGE) from None

    try:
        ev = run(
            corpus, model_path=model, rules=rules or (), ablation=ablation, sklearn=sklearn, progress=lambda m: typer.echo(m, err=True)
        )
    except (CorpusError, ModelError, ValueError) as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(json.dumps(ev.to_dict(), indent=2) if fmt == "json" else render(ev), nl=fmt == "json")


def _first_contact(batch: str, folders: list[Path], ledger: Path, fmt: str) -> None:
    import json
    import subprocess

    from .learn import firstcontact as fc
    from .learn.corpus import CorpusError

    try:
        scores = fc.score_batch(folders, progress=lambda m: typer.echo(m, err=True))
    except CorpusError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    git = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False)
    entry = fc.summarise(batch, scores, commit=git.stdout.strip() if git.returncode == 0 else "")
    try:
        fc.append(ledger, entry, scores)
    except (OSError, ValueError) as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    if fmt == "json":
        typer.echo(json.dumps(entry, indent=2))
        return
    typer.echo(fc.render_ledger([entry]), nl=False)
    typer.echo(f"appended to {ledger}")


@app.command()
def history(
    store: Annotated[Path, typer.Argument(help="The history folder that `analyze --store` and the epilog append to.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or json.")] = "terminal",
    since: Annotated[str | None, typer.Option(help="Only verdicts since then: 7d, 12h, or an ISO date.")] = None,
    by: Annotated[str, typer.Option(help="Period of the timeline: day, week or month.")] = "day",
    top: Annotated[int, typer.Option(help="Nodes to list.")] = 10,
    color: Annotated[bool | None, typer.Option("--color/--no-color", help="Colour (default: when stdout is a terminal).")] = None,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact",
            help="First merge the store's files into files of up to a million verdicts (safe while others append; e.g. from cron).",
        ),
    ] = False,
    node: Annotated[str | None, typer.Option("--node", help="List the jobs whose verdict implicates this node, newest first.")] = None,
) -> None:
    """Summarise stored verdicts: the nodes implicated again and again, this week's causes against last week's, and causes over time."""
    import json

    import polars as pl

    from .history import NODE_COLUMNS, SUMMARY_COLUMNS, node_jobs, parse_since, render_terminal, scan, summarize
    from .history import compact as compact_store

    if fmt not in ("terminal", "json") or by not in ("day", "week", "month"):
        _err("--format is terminal or json; --by is day, week or month")
        raise typer.Exit(EXIT_USAGE)
    try:
        cutoff = parse_since(since) if since else None
    except ValueError:
        _err(f"--since {since!r}: use e.g. 7d, 12h, 30m or an ISO date such as 2026-11-01")
        raise typer.Exit(EXIT_USAGE) from None
    if compact and store.is_dir():
        try:
            merged, _ = compact_store(store)
        except OSError as exc:
            _err(f"--compact: {store}: {exc.strerror or exc}")
            raise typer.Exit(EXIT_USAGE) from None
        _err(f"merged {merged} files of {store}")
    # only the columns the answer needs are decoded, and big files are streamed, not loaded
    with scan(store, columns=NODE_COLUMNS if node is not None else SUMMARY_COLUMNS) as got:
        if node is not None:
            jobs = got.run(lambda s: node_jobs(s.frame() if cutoff is None else s.frame().filter(pl.col("time") >= cutoff), node))
        else:
            summary = got.run(lambda s: summarize(s, by=by, top=top, since=cutoff))
    for problem in got.problems:
        _err(problem)
    if node is not None:
        if fmt == "json":
            rows = jobs.with_columns(pl.col("time").dt.to_string("%Y-%m-%dT%H:%M:%SZ")).to_dicts()
            typer.echo(json.dumps({"store": str(store), "node": node, "jobs": rows, "problems": got.problems}, indent=2))
        else:
            typer.echo(f"{jobs.height} verdict(s) implicate {node} in {store}")
            for r in jobs.iter_rows(named=True):  # one row per stored verdict of this node: few
                rank = "" if r["first_rank"] is None else f" rank {r['first_rank']}"
                typer.echo(f"  {r['time']:%Y-%m-%d %H:%M}  job {r['job'] or '-'}  {r['category']}{rank}  {r['summary']}")
    elif fmt == "json":
        typer.echo(json.dumps({"store": str(store), **summary, "problems": got.problems}, indent=2))
    else:
        use_color = sys.stdout.isatty() if color is None else color
        sys.stdout.write(render_terminal(summary, store=str(store), color=use_color))
    if not store.is_dir():
        raise typer.Exit(EXIT_NO_INPUT)


@app.command()
def batch(
    roots: Annotated[
        list[str] | None, typer.Argument(help="Folders (or files, globs) holding many jobs' logs.", show_default=False)
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", readable=False, help="The history folder to add one verdict per job to.")
    ] = None,
    job_key: Annotated[
        str | None, typer.Option("--job-key", help="Group files into jobs by this glob with {id}, e.g. 'slurm-{id}.*' or '{id}/**'.")
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", "-j", min=1, help="Processes (default: every core this job may use).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Analyse again jobs the store already holds under the same rules.")] = False,
    flush_every: Annotated[
        int, typer.Option("--flush-every", min=1, help="Write the verdicts to the store every N jobs (an interrupt loses at most these).")
    ] = 500,
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or json (a summary of the run).")] = "terminal",
    list_jobs: Annotated[bool, typer.Option("--list", help="Only list the jobs found (and their files); analyse nothing.")] = False,
    engine: Annotated[str, typer.Option("--engine", help="local (a process per core) or ray.")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="The Ray cluster to use (default: start a local one).")] = None,
    emit: Annotated[
        str | None, typer.Option("--emit", help="'sbatch': write a SLURM job array that analyses the jobs, instead of running here.")
    ] = None,
    emit_dir: Annotated[Path, typer.Option("--emit-dir", help="Where --emit writes the job list, script and task logs.")] = Path(
        "logsleuth-batch"
    ),
    tasks: Annotated[int, typer.Option("--tasks", min=1, help="Array tasks for --emit sbatch.")] = 8,
    cpus_per_task: Annotated[int, typer.Option("--cpus-per-task", min=1, help="Cores per array task for --emit sbatch.")] = 2,
    sbatch_option: Annotated[
        list[str] | None, typer.Option("--sbatch-option", help="Extra #SBATCH line for --emit sbatch, e.g. --partition=debug (repeatable).")
    ] = None,
    manifest: Annotated[Path | None, typer.Option("--manifest", help="Read the jobs from this list (what --emit writes).")] = None,
    shard: Annotated[str | None, typer.Option("--shard", help="Analyse only share I/K of the jobs (an array task's).")] = None,
    rules: RulesOpt = None,
    budget: Annotated[float, typer.Option("--budget", help="Seconds of reading per job before it reports on what it read.")] = 120.0,
    no_redact: Annotated[bool, typer.Option("--no-redact", help="Keep secrets (tokens, passwords) in the stored summaries.")] = False,
    model: Annotated[Path | None, typer.Option("--model", help="Classifier model (folder or .npz) instead of the shipped one.")] = None,
    no_model: Annotated[bool, typer.Option("--no-model", help="Rules only: do not fuse the learned classifier.")] = False,
) -> None:
    """Analyse every job under some folders on all cores (or a SLURM array, or Ray): one verdict per job in a history store."""
    import json
    import time

    from . import batch as b

    if fmt not in ("terminal", "json") or engine not in ("local", "ray") or emit not in (None, "sbatch"):
        _err("--format is terminal or json; --engine is local or ray; --emit is sbatch")
        raise typer.Exit(EXIT_USAGE)
    if bool(roots) == (manifest is not None):
        _err("give folders to search for jobs, or --manifest, not both")
        raise typer.Exit(EXIT_USAGE)
    part: tuple[int, int] | None = None
    if shard is not None:
        i, _, k = shard.partition("/")
        if not (i.isdigit() and k.isdigit() and 0 <= int(i) < int(k)):
            _err(f"--shard {shard!r}: use I/K with 0 <= I < K, e.g. 3/8")
            raise typer.Exit(EXIT_USAGE)
        part = (int(i), int(k))
    _load_rules_or_exit(rules)
    options = b.Options(
        rules=tuple(str(r) for r in rules or ()),
        model=str(model) if model else None,
        classifier=not no_model,
        budget_s=budget,
        redact=not no_redact,
    )
    try:
        found = b.Found(b.read_manifest(manifest)) if manifest is not None else b.discover(roots or [], job_key)
    except (OSError, ValueError) as exc:
        _err(str(exc) if isinstance(exc, ValueError) else f"--manifest {manifest}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE) from None
    for problem in found.problems:
        _err(problem)
    if found.ignored:
        _err(f"{found.ignored} log files do not match --job-key {job_key!r}; left out")
    jobs = b.shard(found.jobs, *part) if part else found.jobs
    if list_jobs:
        if fmt == "json":
            typer.echo(json.dumps([{"key": j.key, "job": j.name, "files": list(j.files)} for j in jobs], indent=2))
        else:
            for j in jobs:
                typer.echo(f"{j.key}  ({len(j.files)} file{'s' if len(j.files) != 1 else ''})")
        return
    if not found.jobs and not part:
        _err("no jobs found: no log files (*.out, *.err, *.log, *.txt, slurm-*) under the roots")
        raise typer.Exit(EXIT_NO_INPUT)
    if out is None:
        _err("--out STORE is needed: the history folder the verdicts go to")
        raise typer.Exit(EXIT_USAGE)
    if not _writable_folder(out):
        _err(f"--out {out}: cannot create or write to this folder")
        raise typer.Exit(EXIT_USAGE)
    version = options.version()
    done, problems = (set(), []) if force else b.stored(out, version)
    for problem in problems:
        _err(problem)
    todo = b.pending(jobs, done)
    if emit == "sbatch":
        script = b.emit_sbatch(
            emit_dir, todo, store=out, tasks=tasks, options=options, cpus=cpus_per_task, sbatch_options=sbatch_option or ()
        )
        if fmt == "json":
            typer.echo(json.dumps({"script": str(script), "jobs": len(todo), "skipped": len(jobs) - len(todo)}))
        else:
            typer.echo(f"wrote {script}: {len(todo)} jobs ({len(jobs) - len(todo)} already stored)")
            typer.echo(f"submit with:  sbatch {script}")
        return
    started = time.monotonic()
    writer = b.PartWriter(out, tag=f"-{part[0]}of{part[1]}" if part else "", rows=flush_every)
    tally = b.Tally()
    interrupted = False
    try:
        with b.stop_on_sigterm(), b.progress_bar(len(todo), enabled=sys.stderr.isatty()) as advance:

            def seen(rows: "pl.DataFrame") -> None:
                tally.add(rows)
                advance(rows.height)

            if engine == "ray":
                b.run_ray(todo, options, version, writer, address=ray_address, progress=seen)
            else:
                b.run_local(todo, options, version, writer, workers=workers, progress=seen)
    except KeyboardInterrupt:
        interrupted = True
    except OSError as exc:
        _err(f"--out {out}: verdicts could not be written: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE) from None
    except RuntimeError as exc:
        _err(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    summary = tally.summary(store=str(out), found=len(jobs), skipped=len(jobs) - len(todo), seconds=time.monotonic() - started)
    summary["parts"] = writer.parts
    summary["interrupted"] = interrupted
    if fmt == "json":
        typer.echo(json.dumps(summary, indent=2))
    else:
        sys.stdout.write(b.render_summary(summary))
    if interrupted:
        _err(f"interrupted: {writer.written} verdicts stored; run the same command again to go on from there")
        raise typer.Exit(130)


@app.command()
def epilog(
    budget: Annotated[float, typer.Option("--budget", help="Seconds of reading before the analysis reports on what it read.")] = 10.0,
    report_dir: Annotated[
        Path | None, typer.Option("--report-dir", readable=False, help="Write the reports here instead of next to the job's output.")
    ] = None,
    store: Annotated[
        Path | None, typer.Option("--store", readable=False, help="Also append the verdict to this history folder (may be write-only).")
    ] = None,
    always: Annotated[bool, typer.Option("--always", help="Analyse every job, not only failed ones.")] = False,
    rules: RulesOpt = None,
) -> None:
    """Diagnose the job a SLURM Epilog/EpilogSlurmctld runs for (reads SLURM_JOB_* variables).

    Meant to be called by examples/slurm/epilog.sh, which bounds its time and
    runs it as the job's user. Prints one line saying what it did.
    """
    from .epilog import run as run_epilog

    outcome = run_epilog(
        os.environ,
        budget_s=budget,
        report_dir=str(report_dir) if report_dir else None,
        store=str(store) if store else None,
        always=always,
        rules=[str(r) for r in rules] if rules else None,
    )
    typer.echo(outcome.message)


def main() -> None:
    """Console-script entry point: run the command, flush its output, and end the process.

    The process ends with ``os._exit``: by then every file is closed and every temporary
    folder removed by the command itself, and the interpreter's own teardown (freeing
    polars' and the tables' objects one by one) cost about 45 ms, a tenth of analysing a
    small log. The exit status is the command's.
    """
    try:
        app()
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # noqa: BLE001 - includes a Rust panic from a user's regex, which is no Exception
        code = _internal_error(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or stream: nothing more can be said
            code = code or 1
    os._exit(code)


def _internal_error(exc: BaseException) -> int:
    """A failure of logsleuth itself: one line naming where, never a traceback (unless asked), status 4.

    Status 1 means "--fail-on matched", so a crash must not exit with it."""
    import traceback

    if os.environ.get("LOGSLEUTH_DEBUG"):
        traceback.print_exception(exc)
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" at {Path(frame[0].filename).name}:{frame[0].lineno}" if frame else ""
    first = (str(exc).splitlines() or [""])[0][:300]
    _err(f"internal error{where}: {type(exc).__name__}: {first} (LOGSLEUTH_DEBUG=1 shows the traceback; please report it)")
    return EXIT_INTERNAL


def _exit_status(code: object) -> int:
    """What the interpreter would exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
