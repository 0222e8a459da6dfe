"""rules/causes.toml as data: its relations name known causes, and a file that says otherwise fails to load."""

from __future__ import annotations

import pytest

from logsleuth import rulebook
from logsleuth.taxonomy import NON_CAUSES, TAXONOMY

RULES = rulebook.load()


def test_every_relation_names_known_causes() -> None:
    known = set(TAXONOMY) | set(RULES.causes)
    for cause in RULES.causes.values():
        assert set(cause.symptom_of) <= known, (cause.id, set(cause.symptom_of) - known)
        assert cause.id not in cause.symptom_of, cause.id
        if cause.symptom_of or cause.waits or cause.scheduler_ended:
            assert cause.id in TAXONOMY, f"{cause.id}: relations belong on taxonomy causes (a finer cause shares its parent's)"
    assert rulebook.relation_problems(RULES) == []


def test_the_relations_the_reasoner_reads_are_in_the_file() -> None:
    assert RULES.waiting == {"collective_timeout", "rendezvous_timeout"}
    assert RULES.scheduler_ended == {"slurm_cancelled", "slurm_time_limit"}
    assert "peer_failure" in RULES.symptoms("version_mismatch")
    assert "cuda_error" in RULES.symptoms("gpu_hardware_fault")
    assert "master_unreachable" in RULES.symptoms("file_init_error")


def test_the_causes_no_rule_names_carry_their_texts() -> None:
    for cid in NON_CAUSES:
        reading = RULES.reading(cid)
        assert reading.title and reading.summary, cid
    assert RULES.reading("unknown").fix and RULES.cause("unknown").located
    for cid, name in (("unknown", "quiet"), ("none", "unfinished")):
        reading = RULES.reading(cid, name)
        assert reading.name == name and reading.title and reading.summary and reading.fix


def test_a_relation_to_an_unknown_cause_fails_to_load(tmp_path) -> None:
    (tmp_path / "causes.toml").write_text('[cause.peer_failure]\ntitle = "x"\nsymptom_of = ["no_such_cause"]\n')
    with pytest.raises(rulebook.RuleError, match="no_such_cause"):
        rulebook.load([tmp_path])


def test_a_finer_cause_cannot_declare_relations(tmp_path) -> None:
    (tmp_path / "causes.toml").write_text('[cause.my_wait]\nparent = "collective_timeout"\ntitle = "x"\nwaits = true\n')
    with pytest.raises(rulebook.RuleError, match="shares its parent's relations"):
        rulebook.load([tmp_path])


def test_a_misspelt_key_fails_to_load(tmp_path) -> None:
    (tmp_path / "causes.toml").write_text('[cause.peer_failure]\ntitle = "x"\nsymptoms_of = ["version_mismatch"]\n')
    with pytest.raises(rulebook.RuleError, match="symptoms_of"):
        rulebook.load([tmp_path])


def test_overriding_a_cause_keeps_its_relations_and_texts(tmp_path) -> None:
    (tmp_path / "causes.toml").write_text(
        '[cause.collective_timeout]\ntitle = "Ours"\nfix = ["Call us."]\n[cause.none]\ntitle = "All good"\n'
    )
    ours = rulebook.load([tmp_path])
    assert ours.cause("collective_timeout").title == "Ours" and "collective_timeout" in ours.waiting
    assert ours.symptoms("version_mismatch") == RULES.symptoms("version_mismatch")
    assert ours.reading("none").title == "All good"
    assert ours.reading("none", "unfinished") == RULES.reading("none", "unfinished")
