"""SLURM host lists and task ranges, as srun and SLURM_JOB_NODELIST write them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logsleuth.hostlist import HostlistError, collect_hostlist, collect_ranges, expand_hostlist, expand_ranges


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        # the forms in Slurm's documentation (scontrol show hostnames, SLURM_JOB_NODELIST)
        ("tux[1-3]", ["tux1", "tux2", "tux3"]),
        ("dev[1,3-5]", ["dev1", "dev3", "dev4", "dev5"]),
        ("linux[00-02]", ["linux00", "linux01", "linux02"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("node01", ["node01"]),
        ("node[01-02],gpu7", ["node01", "node02", "gpu7"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("frontier[07200,07210]", ["frontier07200", "frontier07210"]),
        ("a-b.c[9-10]", ["a-b.c9", "a-b.c10"]),
    ],
)
def test_expand_hostlist(expr: str, hosts: list[str]) -> None:
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "node[3-1]", "node[a-b]", "node[[1]]"])
def test_malformed_hostlists_raise_a_clear_error(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(bad)


def test_task_ranges_as_srun_prints_them() -> None:
    assert expand_ranges("0-3,5") == [0, 1, 2, 3, 5]
    assert expand_ranges("7") == [7]
    assert expand_ranges("[0-1]") == [0, 1]
    assert collect_ranges([5, 0, 1, 2, 3, 3]) == "0-3,5"


def test_huge_expressions_are_refused_not_expanded() -> None:
    with pytest.raises(HostlistError):
        expand_ranges("0-99999999")


def test_collect_keeps_zero_padding_and_prefixes() -> None:
    assert collect_hostlist(["node01", "node02", "node07", "gpu1"]) == "node[01-02,07],gpu1"
    assert collect_hostlist(["n8", "n9", "n10"]) == "n[8-10]"


@given(st.sets(st.integers(0, 300), min_size=1, max_size=40), st.sampled_from(["node", "gpu-a", "x"]), st.integers(0, 4))
def test_collect_then_expand_is_the_identity(numbers: set[int], prefix: str, width: int) -> None:
    hosts = [f"{prefix}{n:0{width}d}" for n in sorted(numbers)]
    if width and any(len(str(n)) > width for n in numbers):
        return  # mixed widths are not one padded range
    assert sorted(expand_hostlist(collect_hostlist(hosts))) == sorted(hosts)
