"""The element-by-element check: correct outputs count 0 wrong, each corrupted element counts 1.

The collectives are computed here by hand from every rank's input, so the
expected values are checked for several world sizes without starting processes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from logsleuth.repro.worker import Collective  # noqa: E402

pytestmark = pytest.mark.torch


def _ranks(op: str, numel: int, dtype: torch.dtype, world: int) -> list[Collective]:
    return [Collective(op, numel, dtype, r, world, torch.device("cpu")) for r in range(world)]


def _simulate(op: str, ranks: list[Collective]) -> None:
    """Write into each rank's result buffer what the real collective would."""
    world = len(ranks)
    inputs = [c.input.clone() for c in ranks]
    for r, c in enumerate(ranks):
        if op == "all_reduce":
            c.input.copy_(torch.stack(inputs).sum(0).to(c.input.dtype))
        elif op == "broadcast":
            c.input.copy_(inputs[0])
        elif op == "all_gather":
            c.output.copy_(torch.cat(inputs))
        elif op == "reduce_scatter":
            c.output.copy_(torch.stack(inputs).sum(0).to(c.input.dtype).chunk(world)[r])
        elif op == "all_to_all":
            c.output.copy_(torch.cat([inputs[s].chunk(world)[r] for s in range(world)]))


@pytest.mark.parametrize("world", [2, 3, 13])
@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint8"])
def test_correct_results_have_no_wrong_elements(op: str, world: int, dtype: str) -> None:
    ranks = _ranks(op, 26 * world, getattr(torch, dtype), world)
    _simulate(op, ranks)
    assert [c.wrong() for c in ranks] == [0] * world


@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"])
def test_each_corrupted_element_counts_as_one_wrong(op: str) -> None:
    ranks = _ranks(op, 60, torch.float32, 3)
    _simulate(op, ranks)
    last = ranks[2]
    result = last.input if op in ("all_reduce", "broadcast") else last.output
    result[[0, 7]] += 1
    assert [c.wrong() for c in ranks] == [0, 0, 2]


def test_untouched_buffers_are_wrong_where_ranks_inputs_differ() -> None:
    # an all_gather that never ran leaves garbage: the check must not pass it
    ranks = _ranks("all_gather", 50, torch.float32, 2)
    for c in ranks:
        c.output.zero_()
    assert all(c.wrong() > 0 for c in ranks)


def test_barrier_moves_no_data_and_is_never_wrong() -> None:
    (c,) = _ranks("barrier", 100, torch.float32, 1)
    assert c.input.numel() == 0 and c.wrong() == 0
