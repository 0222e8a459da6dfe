"""Text fields the parse stage fills for later stages (parse/fields.py)."""

from __future__ import annotations

from logsleuth.events import DISTINCT_FROM
from logsleuth.parse.fields import ASSIGNMENT_SEPARATOR
from tests.conftest import events_of


def test_settings_a_line_assigns_are_a_column_with_each_value_as_printed() -> None:
    # the reproducer reads these instead of searching the message again
    ev = events_of("+ export NCCL_IB_HCA=mlx5_0 MASTER_ADDR='node01' NCCL_DEBUG=INFO; LD_PRELOAD=/opt/x.so python train.py\n")
    (assigned,) = ev.get_column("env_assignments").drop_nulls().to_list()
    assert assigned.split(ASSIGNMENT_SEPARATOR) == ["NCCL_IB_HCA=mlx5_0", "MASTER_ADDR='node01'", "NCCL_DEBUG=INFO", "LD_PRELOAD=/opt/x.so"]


def test_a_name_inside_a_longer_word_is_no_assignment() -> None:
    ev = events_of("MY_NCCL_DEBUG=INFO set by the site profile\n")
    assert ev.get_column("env_assignments").drop_nulls().to_list() == []


def test_a_big_table_gets_the_same_fields_as_a_small_one() -> None:
    # above events.DISTINCT_FROM rows each distinct text is read once and joined back: a big job's
    # warnings once came back with null flags and wording
    line = "[rank3]: Warning: NCCL_BLOCKING_WAIT is deprecated, use TORCH_NCCL_BLOCKING_WAIT=1\n"
    small, big = events_of(line * 3), events_of(line * (DISTINCT_FROM + 1))
    assert big.height > DISTINCT_FROM
    columns = ["shutdown_noise", "says_nccl", "progress", "wording", "env_assignments", "at_setup"]
    assert big.select(columns).unique().rows() == small.select(columns).unique().rows()
    assert big.get_column("shutdown_noise").all() and big.get_column("says_nccl").all()
