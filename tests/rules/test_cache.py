"""The parsed-rules cache: a speed-up that must never change what is loaded or stop a load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth import rulebook

_RULE = """
[[rule]]
id = "TST020"
name = "test-cache"
cause = "disk_full"
weight = {weight}
keywords = ["No space left"]
patterns = ['''No space left on device''']
match = ['''OSError: [Errno 28] No space left on device''']
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(where))
    rulebook._LOADED.clear()  # the in-process memo would hide the cache
    return where


def _fresh(extra: list[Path]) -> rulebook.RuleSet:
    rulebook._LOADED.clear()
    return rulebook.load(extra)


def test_rules_from_the_cache_equal_rules_from_the_files(cache: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(_RULE.format(weight=0.5))
    parsed = _fresh([mine])
    assert (cache / "rules.json").is_file()
    assert _fresh([mine]) == parsed


def test_an_edited_rule_file_is_read_again(cache: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(_RULE.format(weight=0.5))
    assert _fresh([mine]).by_id()["TST020"].weight == 0.5
    mine.write_text(_RULE.format(weight=0.25))
    assert _fresh([mine]).by_id()["TST020"].weight == 0.25


@pytest.mark.parametrize("damage", ["truncated", "not-an-object", "files-missing"])
def test_a_damaged_cache_is_ignored_and_rewritten(damage: str, cache: Path) -> None:
    expected = _fresh([])
    saved = json.loads((cache / "rules.json").read_text())
    broken = {
        "truncated": (cache / "rules.json").read_text()[:100],
        "not-an-object": "[1, 2]",
        "files-missing": json.dumps({**saved, "data": {}}),
    }[damage]
    (cache / "rules.json").write_text(broken)
    assert _fresh([]) == expected
    assert json.loads((cache / "rules.json").read_text()) == saved  # rewritten whole


def test_an_unusable_cache_folder_does_not_stop_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", str(blocker / "cache"))
    assert len(_fresh([]).rules) > 100


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSLEUTH_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    _fresh([])
    assert list(tmp_path.iterdir()) == []
