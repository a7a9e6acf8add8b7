"""Apps with more queries than slots: every query gets a share, a decision and its rescales.

The queries of one app interleave their micro-batches on the same executors, so each runs
on all the app's slots within its bounds (``allocator.share_slots``); Flink's exclusive
shares left five queries on three slots with none at all.
"""

from __future__ import annotations

from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.settings import Settings

KEYS = ("bronze", "silver", "join", "windows", "report")


def _five(app: App) -> list[FakeDriver]:
    drivers = [FakeDriver(query_info(k, partitions=4, state_partitions=None), query_id=k)
               for k in KEYS]
    for d in drivers:
        app.register(d)
    return drivers


def _settle(app: App, drivers: list[FakeDriver], seconds: float = 120.0) -> None:
    """Let time pass with a micro-batch of each query now and then, completing every stop
    and start the scheduler asks for."""
    for _ in range(int(seconds // 5)):
        app.advance(5)
        for d in drivers:
            while d.pending_stops:
                app.stop(d)
            while d.pending_starts:
                app.start(d)
            app.batch(d, tasks=(d.calls[-1][1], d.calls[-1][1]))


def test_five_queries_on_one_slot_all_start_at_one_partition() -> None:
    app = App(Settings())
    app.add("1")
    drivers = _five(app)
    # The first query takes the only slot; the others start from the same rule, not from
    # "no task slot is known yet" at their configured 4.
    assert [d.calls for d in drivers] == [[("start", 1)]] * 5
    assert {app.scheduler.query(k).snapshot().slots for k in KEYS} == {1}


def test_five_queries_are_each_rescaled_as_workers_go_from_one_to_three_to_two() -> None:
    app = App(Settings())
    app.add("1")
    drivers = _five(app)
    _settle(app, drivers)
    for e in "23":
        app.add(e)
    _settle(app, drivers)
    assert [d.calls[-1] for d in drivers] == [("start", 3)] * 5, [d.calls for d in drivers]
    assert {app.scheduler.query(k).snapshot().slots for k in KEYS} == {3}
    app.remove("3")
    _settle(app, drivers)
    assert [d.calls[-1] for d in drivers] == [("start", 2)] * 5, [d.calls for d in drivers]
    for k in KEYS:
        snap = app.scheduler.query(k).snapshot()
        assert (snap.parallelism, snap.slots, snap.state) == (2, 2, "Executing")
        restarts = [r for r in app.scheduler.history(k) if r.kind == "restart"]
        assert [(r.from_parallelism, r.to_parallelism) for r in restarts] == [(1, 3), (3, 2)]


def test_a_query_whose_lower_bound_is_above_the_slots_keeps_running_and_shows_them() -> None:
    app = App(Settings())
    for e in "12":
        app.add(e)
    big = FakeDriver(query_info("big", partitions=4), query_id="big")
    small = FakeDriver(query_info("small", partitions=4), query_id="small")
    app.register(big, ResourceRequirements(3, 4))
    app.register(small, ResourceRequirements(1, 4))
    _settle(app, [big, small], 60)
    snap = app.scheduler.query("big").snapshot()
    assert (snap.state, snap.slots, snap.parallelism) == ("Executing", 2, 4)
    assert "its lower bound 3 is above the app's 2 slots" in str(snap.last_decision)
    assert app.scheduler.query("small").snapshot().slots == 2  # not held up by the other
    app.add("3")
    _settle(app, [big, small], 120)
    assert big.calls[-1] == ("start", 3) and small.calls[-1] == ("start", 3)


def test_a_query_ending_changes_no_other_query_s_partitions() -> None:
    app = App(Settings())
    for e in "123":
        app.add(e)
    drivers = _five(app)
    _settle(app, drivers, 60)
    calls = [list(d.calls) for d in drivers]
    app.event(drivers[0].terminated())
    _settle(app, drivers[1:], 120)
    assert [d.calls for d in drivers[1:]] == calls[1:]
    assert app.actuator.requested[-1] == 16  # four upper bounds of 4
