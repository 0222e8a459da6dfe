"""The rule engine's own behaviour: deferred rules, bad fields, the batch checker."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from logsleuth import api, match, rulebook
from tests.conftest import events_of

_RULES = """
[[rule]]
id = "TST001"
name = "test-abort"
cause = "crash_signal"
role = "primary"
weight = 0.45
deferred = true
keywords = ["SIGABRT"]
patterns = ['''SIGABRT''']
match = ['''  exitcode  : -6 (pid: 2231) (SIGABRT)''']

[[rule]]
id = "TST002"
name = "test-watchdog"
cause = "collective_timeout"
role = "consequence"
weight = 0.75
keywords = ["Watchdog caught"]
patterns = ['''Watchdog caught collective operation timeout''']
match = ['''[Rank 0] Watchdog caught collective operation timeout''']
"""


@pytest.fixture
def only_test_rules(tmp_path: Path) -> rulebook.RuleSet:
    (tmp_path / "t.toml").write_text(_RULES)
    return rulebook.load([tmp_path], builtin=False)


def _roles(text: str, rules: rulebook.RuleSet) -> dict[str, str]:
    hits = match.match(events_of(text), rules)
    return dict(zip(hits.get_column("rule").to_list(), hits.get_column("role").to_list(), strict=True))


def test_deferred_hit_becomes_a_consequence_when_its_rank_reported_another_failure(only_test_rules: rulebook.RuleSet) -> None:
    text = """
    [rank0]:[E1122 02:40:23.026531 140 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600059 milliseconds before timing out.
    Root Cause (first observed failure):
    [0]:
      time      : 2026-11-22_02:40:25
      host      : node01
      rank      : 0 (local_rank: 0)
      exitcode  : -6 (pid: 2231) (SIGABRT)
      error_file: <N/A>
      traceback : Signal 6 (SIGABRT) received by PID 2231
    """
    assert _roles(text, only_test_rules) == {"TST002": "consequence", "TST001": "consequence"}


def test_deferred_hit_stays_primary_when_only_other_ranks_failed(only_test_rules: rulebook.RuleSet) -> None:
    text = """
    [rank1]:[E1122 02:40:23.026531 140 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600059 milliseconds before timing out.
    Root Cause (first observed failure):
    [0]:
      time      : 2026-11-22_02:40:25
      host      : node01
      rank      : 0 (local_rank: 0)
      exitcode  : -6 (pid: 2231) (SIGABRT)
      error_file: <N/A>
      traceback : Signal 6 (SIGABRT) received by PID 2231
    """
    assert _roles(text, only_test_rules)["TST001"] == "primary"


def test_deferred_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(_RULES.replace("deferred = true", 'deferred = "yes"'))
    with pytest.raises(rulebook.RuleError, match=r"bad.toml:\d+: rule TST001: deferred must be true or false"):
        rulebook.load([tmp_path], builtin=False)


def test_an_id_used_twice_in_one_rules_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(_RULES)
    (tmp_path / "b.toml").write_text(_RULES)
    with pytest.raises(rulebook.RuleError, match=r"b.toml:\d+: rule TST001: id already used in .*a.toml"):
        rulebook.load([tmp_path], builtin=False)


def test_matcher_keeps_the_hits_schema_with_deferred_rules(only_test_rules: rulebook.RuleSet) -> None:
    hits = match.match(events_of("  exitcode  : -6 (pid: 2231) (SIGABRT)\n"), only_test_rules)
    assert hits.schema == pl.Schema(match.HITS_SCHEMA)


def test_a_rule_is_only_tried_on_messages_that_carry_one_of_its_keywords(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(_RULES.replace('keywords = ["SIGABRT"]', 'keywords = ["exitcode  : -6"]'))
    gated = rulebook.load([tmp_path], builtin=False)
    (tmp_path / "t.toml").write_text(_RULES.replace('keywords = ["SIGABRT"]', 'keywords = ["never printed"]'))
    absent = rulebook.load([tmp_path], builtin=False)
    text = "  exitcode  : -6 (pid: 2231) (SIGABRT)\n"
    assert _roles(text, gated) == {"TST001": "primary"}
    assert _roles(text, absent) == {}


def test_summary_template_reads_the_named_groups_of_the_matching_pattern(tmp_path: Path) -> None:
    (tmp_path / "port.toml").write_text(
        """
[[rule]]
id = "TST010"
name = "test-port"
cause = "port_in_use"
weight = 1.0
keywords = ["EADDRINUSE"]
patterns = ['''listen on port (?P<port>\\d+).*EADDRINUSE''']
summary = "Port {port} was taken on {where}."
match = ['''RuntimeError: could not listen on port 29511 (EADDRINUSE)''']
"""
    )
    log = tmp_path / "job.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "RuntimeError: could not listen on port 29511 (EADDRINUSE)\n"
    )
    report = api.analyze([log], rules=[tmp_path], classifier=False)
    assert report.verdict.cause == "port_in_use"
    assert report.verdict.summary.startswith("Port 29511 was taken")
