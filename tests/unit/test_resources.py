"""Executor and slot tracking: loss grace, replacement, hang detection."""

from __future__ import annotations

import pytest

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.events import ExecutorAdded, ExecutorHeartbeat, ExecutorRemoved, JobEnded
from spark_adaptive.core.executors.inventory import ExecutorInventory as ResourceTracker
from spark_adaptive.core.executors.inventory import SlotChange


class Recorder:
    def __init__(self) -> None:
        self.changes: list[SlotChange] = []
        self.hung: list[tuple[str, float]] = []

    def change(self, c: SlotChange) -> None:
        self.changes.append(c)

    def hang(self, executor_id: str, silent: float) -> None:
        self.hung.append((executor_id, silent))

    @property
    def slots(self) -> list[tuple[int, int]]:
        return [(c.before, c.after) for c in self.changes]


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def tracker(vt: VirtualTime, rec: Recorder, *, grace: float = 10.0, timeout: float = 20.0,
            task_cpus: int = 1) -> ResourceTracker:
    return ResourceTracker(vt, loss_grace=grace, failure_detection_timeout=timeout,
                           task_cpus=task_cpus, on_change=rec.change, on_hung=rec.hang)


def test_slots_are_cores_over_task_cpus(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec, task_cpus=2)
    t.executor_added("1", "h1", 4)
    t.executor_added("2", "h2", 3)
    assert t.slots == 2 + 1
    assert rec.slots == [(0, 2), (2, 3)]


def test_duplicate_add_is_ignored(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 2)
    t.executor_added("1", "h1", 2)
    assert t.slots == 2 and len(rec.changes) == 1


def test_removed_executor_counts_until_its_grace_expires(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 2)
    t.executor_added("2", "h2", 2)
    t.executor_removed("2", "worker lost")
    assert t.slots == 4 and t.executor_count == 2
    vt.advance(9.9)
    assert t.slots == 4
    vt.advance(0.1)
    assert t.slots == 2 and t.executor_count == 1
    assert rec.changes[-1] == SlotChange(4, 2, rec.changes[-1].reason)
    assert "did not come back within the 10s executor-loss grace" in rec.changes[-1].reason


def test_an_executor_the_driver_killed_gets_no_grace(vt: VirtualTime, rec: Recorder) -> None:
    """Released on purpose, it will not come back: its slots go at once."""
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 2)
    t.executor_added("2", "h2", 2)
    t.executor_removed("2", "Executor killed by driver.")
    assert t.slots == 2 and t.executor_count == 1
    assert rec.changes[-1] == SlotChange(4, 2, rec.changes[-1].reason)
    t.executor_added("3", "h3", 2)  # a newcomer is new, not a replacement
    assert t.slots == 4 and rec.slots[-1] == (2, 4)


def test_new_executor_replaces_a_lost_one_without_double_counting(
        vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec, timeout=1000)
    t.executor_added("1", "h1", 2)
    t.executor_added("2", "h2", 2)
    t.executor_removed("2", "lost")
    vt.advance(5)
    t.executor_added("3", "h3", 2)
    assert t.slots == 4 and t.executor_count == 2
    vt.advance(100)
    assert t.slots == 4
    assert rec.slots == [(0, 2), (2, 4)]  # no change was ever reported for the swap


def test_replacement_with_other_size_reports_the_difference(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 2)
    t.executor_removed("1", "lost")
    t.executor_added("2", "h2", 4)
    assert t.slots == 4
    assert rec.slots[-1] == (2, 4)
    assert "replacing lost executor 1" in rec.changes[-1].reason


def test_replacement_prefers_the_same_host(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 1)
    t.executor_added("2", "h2", 3)
    t.executor_removed("1", "lost")
    t.executor_removed("2", "lost")
    t.executor_added("3", "h2", 3)  # h2 came back: it replaces executor 2, not the older 1
    vt.advance(10)
    assert t.slots == 3  # executor 1's grace expired, 2 was replaced
    assert rec.slots[-1] == (4, 3)


def test_zero_grace_removes_at_once(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec, grace=0)
    t.executor_added("1", "h1", 2)
    t.executor_removed("1", "lost")
    assert t.slots == 0
    assert rec.slots == [(0, 2), (2, 0)]


def test_unknown_removal_is_ignored(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    t.executor_removed("nope", "?")
    assert rec.changes == [] and vt.pending() == []


def test_silent_executor_is_reported_hung_and_dropped(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec, timeout=20)
    t.executor_added("1", "h1", 2)
    t.executor_added("2", "h2", 2)
    for _ in range(3):
        vt.advance(8)
        t.heartbeat("1")  # executor 2 stays silent
    assert rec.hung == [("2", 20.0)]
    assert t.slots == 2
    assert rec.slots[-1] == (4, 2)
    assert "no heartbeat for 20s" in rec.changes[-1].reason
    vt.advance(100)  # executor 1 went silent too, at 24
    assert [h[0] for h in rec.hung] == ["2", "1"]
    assert rec.hung[1] == ("1", 20.0)


def test_heartbeats_keep_executors_alive(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec, timeout=20)
    t.executor_added("1", "h1", 2)
    for _ in range(20):
        vt.advance(10)
        t.heartbeat("1")
    assert rec.hung == [] and t.slots == 2


def test_removal_after_hang_is_ignored(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec, timeout=20)
    t.executor_added("1", "h1", 2)
    vt.advance(20)
    assert rec.hung and t.slots == 0
    t.executor_removed("1", "killed")
    vt.advance(20)
    assert t.slots == 0 and len(rec.changes) == 2


def test_close_cancels_every_timer(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 2)
    t.executor_added("2", "h1", 2)
    t.executor_removed("2", "lost")
    t.close()
    assert vt.pending() == []


def test_handle_dispatches_executor_events_only(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    assert t.handle(ExecutorAdded(0, "1", "h", 2))
    assert t.handle(ExecutorHeartbeat(0, "1"))
    assert t.handle(ExecutorRemoved(0, "1", "x"))
    assert not t.handle(JobEnded(0, 1, True))


def test_slots_per_executor_and_executors_for(vt: VirtualTime, rec: Recorder) -> None:
    t = tracker(vt, rec)
    assert t.slots_per_executor() is None
    assert t.pool().executors_for(10) is None
    assert t.pool(4).executors_for(10) == 3
    t.executor_added("1", "h1", 2)
    t.executor_added("2", "h2", 2)
    t.executor_added("3", "h3", 4)
    assert t.slots_per_executor(default=8) == 2  # the most common size wins over the default
    assert t.pool().executors_for(7) == 3  # the three alive carry 8; a fourth is not needed
    assert t.pool().executors_for(4) == 2
    assert t.pool().executors_for(0) == 0
    assert t.pool().executors_for(11) == 5  # the three alive, and 3 slots more at 2 per executor


def test_executors_for_counts_those_that_stay_when_sizes_differ(
        vt: VirtualTime, rec: Recorder) -> None:
    """A lower total releases the newest executors: the count declared for some slots is
    the fewest oldest executors that carry them, not the slots over the common size (which
    would keep a small old executor and release a big new one the slots need)."""
    t = tracker(vt, rec)
    t.executor_added("1", "h1", 1)
    t.executor_added("2", "h2", 4)
    t.executor_added("3", "h3", 4)
    assert t.slots_per_executor() == 4
    assert t.pool().executors_for(8) == 3  # 1 + 4 carry 5 only
    assert t.pool().executors_for(5) == 2
    assert t.pool().executors_for(1) == 1
    t.release("1", "declared fewer")
    assert t.restore("1", "Spark refused")  # counts again, in its place as the oldest
    assert t.pool().executors_for(5) == 2 and t.pool().executors_for(8) == 3
    t.executor_added("4", "h4", 1)
    assert t.pool().executors_for(9) == 3
    assert t.pool().executors_for(10) == 4
    # The four alive, and 2 slots at 1 (1 and 4 tie: the smaller).
    assert t.pool().executors_for(12) == 6


def test_executors_for_orders_executors_by_when_spark_added_them(
        vt: VirtualTime, rec: Recorder) -> None:
    """Executors alive when spark-adaptive starts come from Spark's status store, after the
    listener may have heard of a newer one: the order is Spark's add time (the actuator
    releases the newest by it), the order of arrival only among equal times."""
    t = tracker(vt, rec)
    t.handle(ExecutorAdded(5.0, "10", "h1", 8))  # heard of first, added last
    t.handle(ExecutorAdded(1.0, "2", "h2", 1))
    t.handle(ExecutorAdded(5.0, "11", "h3", 1))
    assert t.pool().executors_for(1) == 1  # "2", the oldest
    assert t.pool().executors_for(8) == 2  # "2" and "10": "11" came after "10" at the same time
    assert t.pool().executors_for(10) == 3


def test_refuses_bad_task_cpus(vt: VirtualTime, rec: Recorder) -> None:
    with pytest.raises(ValueError, match="task_cpus"):
        tracker(vt, rec, task_cpus=0)


def test_first_heartbeat_gets_two_intervals_of_grace() -> None:
    """Spark's first heartbeat comes one to two intervals after the executor starts."""
    vt = VirtualTime()
    hung: list[str] = []
    t = ResourceTracker(vt, loss_grace=0, failure_detection_timeout=20,
                        first_heartbeat_grace=20, on_hung=lambda e, s: hung.append(e))
    t.executor_added("1", "h", 1)
    vt.advance(39.9)
    assert hung == [] and t.slots == 1
    t.heartbeat("1")  # heard from: from now on 20 s of silence is a hang
    vt.advance(19.9)
    assert hung == []
    vt.advance(0.1)
    assert hung == ["1"] and t.slots == 0


def test_never_heard_from_is_a_hang_after_timeout_plus_grace() -> None:
    vt = VirtualTime()
    hung: list[str] = []
    t = ResourceTracker(vt, loss_grace=0, failure_detection_timeout=20,
                        first_heartbeat_grace=6, on_hung=lambda e, s: hung.append(e))
    t.executor_added("1", "h", 1)
    vt.advance(25.9)
    assert hung == []
    vt.advance(0.1)
    assert hung == ["1"]
