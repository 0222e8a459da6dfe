"""One order across files and clocks, and how far it can be trusted."""

from __future__ import annotations

import logsleuth
from logsleuth.reason import timeline
from tests.conftest import events_of

WD = (
    "[rank{r}]:[E1122 {t} ProcessGroupNCCL.cpp:683] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600000 milliseconds before timing out."
)


def node_log(ranks: tuple[int, int], error_at: str, wd_at: str, culprit: int) -> str:
    a, b = ranks
    return "\n".join(
        [
            f"[rank{culprit}]:[W1122 {error_at} 4242 train.py:55] Warning: shard checksum differs, reloading",
            f"[rank{culprit}]: Traceback (most recent call last):",
            f'[rank{culprit}]:   File "/home/user/train.py", line 60, in <module>',
            f"[rank{culprit}]: ValueError: shard {culprit} is corrupt",
            WD.format(r=a if a != culprit else b, t=wd_at),
        ]
    )


def test_clock_offsets_from_shared_watchdog_timeouts_reorder_the_first_failure(write) -> None:
    # node02's clock runs 30 s ahead: its error at "10:00:20" really happened at 09:59:50,
    # before node01's error at 10:00:00. The watchdog timeouts of SeqNum 5 started together.
    n1 = write("node01.log", node_log((0, 1), "10:00:00.000000", "10:10:00.000000", culprit=1))
    n2 = write("node02.log", node_log((2, 3), "10:00:20.000000", "10:10:30.000000", culprit=3))
    report = logsleuth.analyze([n1, n2])
    assert report.verdict.first_failure.rank == 3
    offsets = report.timeline["clock_offsets_s"]
    assert set(offsets) == {str(n2)} and abs(offsets[str(n2)] + 30.0) < 0.01
    assert "aligned" in report.timeline["note"]


def test_without_shared_events_stamps_are_taken_at_face_value_and_the_note_says_so(write) -> None:
    n1 = write("node01.log", node_log((0, 1), "10:00:00.000000", "10:10:00.000000", culprit=1).rsplit("\n", 1)[0])
    n2 = write("node02.log", node_log((2, 3), "10:00:20.000000", "10:10:30.000000", culprit=3).rsplit("\n", 1)[0])
    report = logsleuth.analyze([n1, n2])
    assert report.verdict.first_failure.rank == 1
    assert report.timeline["clock_offsets_s"] == {}
    assert "assumed to agree" in report.timeline["note"]


def test_ordering_says_timestamps_mixed_or_line_order() -> None:
    stamped = events_of(WD.format(r=0, t="10:10:00.000000") + "\n" + WD.format(r=1, t="10:10:01.000000"))
    assert timeline.build(stamped).ordering == "timestamps"
    bare = events_of('[rank0]: Traceback (most recent call last):\n[rank0]:   File "t.py", line 1, in <module>\n[rank0]: KeyError: 3\n')
    tl = timeline.build(bare)
    assert tl.ordering == "line-order" and "position in each file" in tl.note
    both = events_of(WD.format(r=0, t="10:10:00.000000") + "\n[rank1]: Traceback (most recent call last):\n[rank1]: KeyError: 3\n")
    assert timeline.build(both).ordering == "mixed"


def test_an_unstamped_line_is_placed_after_the_stamped_line_above_it() -> None:
    ev = events_of(
        "[rank0]:[W1122 10:00:05.000000 1 train.py:1] Warning: first\n"
        "[rank1]: Traceback (most recent call last):\n[rank1]: KeyError: 3\n"
        "[rank0]:[W1122 10:00:01.000000 1 train.py:1] Warning: stamped earlier but printed later\n"
    )
    order = timeline.build(ev).order.sort("pos")
    kinds = ev.with_row_index("eid").join(order, on="eid").sort("pos").get_column("message").to_list()
    assert kinds.index("KeyError: 3") > kinds.index("Warning: first")
    assert kinds[0] == "Warning: stamped earlier but printed later"
