"""The contracts users rely on live in docs/ and cannot drift from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import logsleuth
from logsleuth.taxonomy import TAXONOMY

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_taxonomy_page_lists_exactly_the_ids_the_code_knows() -> None:
    table = re.findall(r"^\| ([a-z_]+) \|", (DOCS / "taxonomy.md").read_text(encoding="utf-8"), flags=re.M)
    assert [i for i in table if i != "id"] == list(TAXONOMY)


def _keys(shape: object, prefix: str = "") -> set[str]:
    if isinstance(shape, dict):
        out = set()
        for k, v in shape.items():
            out |= {f"{prefix}{k}"} | _keys(v, f"{prefix}{k}.")
        return out
    if isinstance(shape, list) and shape:
        return _keys(shape[0], f"{prefix}[].")
    return set()


def test_every_field_of_the_json_contract_is_in_a_real_report(tmp_path: Path) -> None:
    page = (DOCS / "report-contract.md").read_text(encoding="utf-8")
    block = page.split("```")[1]
    fields = set(re.findall(r'"([a-z_]+)":', block))
    log = tmp_path / "train.log"
    log.write_text("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"t.py\", line 3, in <module>\n[rank1]: KeyError: 'x'\n")
    report = json.loads(logsleuth.analyze([str(log)]).to_json())
    present = {k.rsplit(".", 1)[-1] for k in _keys(report)}
    assert fields and fields <= present, fields - present
