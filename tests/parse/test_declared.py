"""What each parser module declares (triggers, kinds, examples) holds through the real ingest.

Every example is buried in the middle of a 600-line file, where only the prefilter keeps a line
(the tail of a file is kept whatever it says, so a line at the end proves nothing), and must give
its event with the declared fields. A parser's trigger that the prefilter does not know, or a
wording the triggers do not cover, fails here.
"""

from __future__ import annotations

import textwrap
from types import ModuleType

import pytest

from logsleuth import events, ingest, parse, reason
from logsleuth.parse.common import Example

#: A line no keyword keeps, repeated around the example.
FILLER = "train | epoch 3 | batch 17 | lr 0.0001 | tokens/s 51234"
BEFORE, AFTER = 300, 300


def _examples() -> list[tuple[str, tuple[str, ...], Example]]:
    return [(f"{p.__name__.rsplit('.', 1)[-1]}-{i}", p.TRIGGERS, ex) for p in parse.PARSERS for i, ex in enumerate(p.EXAMPLES)]


def test_the_filler_is_dropped_by_the_prefilter() -> None:
    assert not any(k in FILLER for k in parse.KEYWORDS)


@pytest.mark.parametrize("parser", parse.PARSERS, ids=lambda p: p.__name__)
def test_every_trigger_of_a_parser_is_in_the_prefilter(parser: ModuleType) -> None:
    missing = [t for t in parser.TRIGGERS if t not in parse.KEYWORDS]
    assert not missing, f"{parser.__name__}.TRIGGERS not in parse.KEYWORDS: {missing}"


@pytest.mark.parametrize("parser", parse.PARSERS, ids=lambda p: p.__name__)
def test_a_parser_declares_known_kinds_and_an_example_of_each(parser: ModuleType) -> None:
    assert set(parser.KINDS) <= set(events.KINDS)
    shown = {ex[1]["kind"] for ex in parser.EXAMPLES}
    assert set(parser.KINDS) <= shown, f"{parser.__name__}: no example of {sorted(set(parser.KINDS) - shown)}"


@pytest.mark.parametrize("keywords", ["prefilter", "own triggers"])
@pytest.mark.parametrize(("name", "triggers", "example"), _examples(), ids=[n for n, _, _ in _examples()])
def test_an_example_in_the_middle_of_a_long_file_gives_its_event(
    name: str, triggers: tuple[str, ...], example: Example, keywords: str
) -> None:
    """With the real prefilter (parse.KEYWORDS), and with its parser's own triggers alone: a trigger
    taken from a parser that its wordings need fails here even where another keyword covers it."""
    text, fields = example
    block = textwrap.dedent(text).split("\n")
    body = "\n".join([FILLER] * BEFORE + block + [FILLER] * AFTER) + "\n"
    # a module that reads other parsers' events (identity) brings the triggers of the parser of its example's kind
    own = (*triggers, *(t for p in parse.PARSERS if fields["kind"] in p.KINDS for t in p.TRIGGERS))
    got = ingest.ingest_text(body, parse.KEYWORDS if keywords == "prefilter" else own, name="job.log")
    table = reason.resolve_identity(parse.build(got.lines, {"job.log": 2026}))
    first, last = BEFORE + 1, BEFORE + len(block)
    mine = table.filter((table["line"] >= first) & (table["line"] <= last) & (table["kind"] == fields["kind"]))
    assert mine.height == 1, f"{name}: {mine.height} {fields['kind']} events; table:\n{table.select('line', 'kind', 'message')}"
    row = mine.row(0, named=True)
    assert {k: row[k] for k in fields} == dict(fields)
