"""The message catalogue: well-formed entries, each declared mapping backed by the real pipeline, and `rules coverage`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logsleuth import rulebook
from logsleuth.cli import EXIT_FAIL_ON, EXIT_USAGE, app
from logsleuth.coverage import BUILTIN_CATALOGUE, LEVELS, SOURCES, CatalogueError, error_share, evaluate, load_catalogue

RULES = rulebook.load()
MESSAGES = load_catalogue(rules=RULES)
DECLARED = [pytest.param(m.id, id=m.id) for m in MESSAGES if m.cause or m.harmless]
runner = CliRunner()


@pytest.fixture(scope="module")
def result() -> dict[str, dict[str, object]]:
    """Every sample through the pipeline, in one run."""
    return {row["id"]: row for row in evaluate(MESSAGES, RULES).iter_rows(named=True)}


def test_catalogue_loads_and_covers_every_source() -> None:
    assert BUILTIN_CATALOGUE.is_dir()
    assert {m.source for m in MESSAGES} == set(SOURCES)
    assert len(MESSAGES) >= 300


def test_every_entry_is_well_formed() -> None:
    for m in MESSAGES:
        assert m.level in LEVELS and m.origin and m.versions and m.template and m.sample, m.id
        assert "\n" not in m.sample.strip(), m.id
        assert m.id.startswith(f"{m.source}."), m.id
        assert not (m.harmless and m.cause), m.id
        if m.cause:
            assert m.role in rulebook.ROLES and RULES.category(m.cause) != "unknown", m.id


@pytest.mark.parametrize("message_id", DECLARED)
def test_sample_gives_its_declared_mapping(message_id: str, result: dict[str, dict[str, object]]) -> None:
    row = result[message_id]
    assert row["mapped"], f"{message_id}: {row['reason']}"


def test_error_level_share_meets_the_target(result: dict[str, dict[str, object]]) -> None:
    errors = [r for r in result.values() if r["level"] == "error"]
    assert sum(bool(r["mapped"]) for r in errors) / len(errors) >= 0.95


def test_invalid_entries_are_reported_with_their_file(tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text('[[message]]\nid = "x.a"\nsource = "nope"\nlevel = "error"\n')
    with pytest.raises(CatalogueError, match=r"x\.toml: message 0 \(x\.a\): missing or empty 'origin'"):
        load_catalogue([tmp_path])


def test_a_wrong_mapping_is_reported_as_disagreeing(tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text(
        '[[message]]\nid = "slurm.t"\nsource = "slurm"\norigin = "src/x.c"\nversions = "all"\nlevel = "error"\n'
        'template = "t"\nsample = "srun: error: node01: task 0: Out Of Memory"\ncause = "disk_full"\nrole = "primary"\n'
        '[[message]]\nid = "slurm.u"\nsource = "slurm"\norigin = "src/x.c"\nversions = "all"\nlevel = "error"\n'
        'template = "t"\nsample = "srun: error: node01: task 0: Out Of Memory"\nharmless = true\n'
    )
    rows = {r["id"]: r for r in evaluate(load_catalogue([tmp_path], rules=RULES), RULES).iter_rows(named=True)}
    assert not rows["slurm.t"]["mapped"] and "disk_full" in rows["slurm.t"]["reason"]
    assert not rows["slurm.u"]["mapped"] and "host_oom" in rows["slurm.u"]["reason"]


def test_cli_prints_per_source_shares_and_exits_0() -> None:
    out = runner.invoke(app, ["rules", "coverage"])
    assert out.exit_code == 0, out.output
    for source in (*SOURCES, "all"):
        assert any(line.split()[:1] == [source] and line.rstrip().endswith(")") for line in out.stdout.splitlines()), source


def test_cli_json_and_min_share(tmp_path: Path) -> None:
    out = runner.invoke(app, ["rules", "coverage", "--format", "json", "--min-share", "0.95"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["share"] >= 0.95 and {s["source"] for s in data["sources"]} == {*SOURCES, "all"}
    (tmp_path / "x.toml").write_text(
        '[[message]]\nid = "slurm.v"\nsource = "slurm"\norigin = "src/x.c"\nversions = "all"\nlevel = "error"\n'
        'template = "t"\nsample = "srun: something unknown happened"\n'
    )
    out = runner.invoke(app, ["rules", "coverage", "--catalogue", str(tmp_path), "--min-share", "0.5"])
    assert out.exit_code == EXIT_FAIL_ON and "slurm.v: no mapping declared" in out.stdout
    assert runner.invoke(app, ["rules", "coverage", "--catalogue", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["rules", "coverage", "--format", "xml"]).exit_code == EXIT_USAGE


def test_error_share_of_an_empty_result_is_one() -> None:
    assert error_share(evaluate([], RULES)) == 1.0
