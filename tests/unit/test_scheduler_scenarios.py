"""End-to-end scenarios of the application's scheduler, fake driver and actuator, virtual time.

A query's first run starts at once, when the app calls ``start()`` (``App.register``
does what the boundary does: plan, start, hand over); the scheduler rescales it from
there. Later starts (restarts) are completed by hand with ``App.start``.
"""

from __future__ import annotations

import logging

import pytest
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.events import JobStarted, QueryProgress, StageCompleted, StageSubmitted
from spark_adaptive.core.ports import RepartitionSupport
from spark_adaptive.core.streaming.history import LOGGER_NAME, Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements, ScalingTarget
from spark_adaptive.core.streaming.scheduler import LOCAL_MODE_REQUIREMENTS, REACTIVE_REQUIREMENTS
from spark_adaptive.errors import ConflictError, RequirementsError, UnknownQueryError
from spark_adaptive.rest.wire import requirements_from_body
from spark_adaptive.settings import Settings

#: Flink's strategy for a query that can resume (a restart-strategy.type the app sets).
EXPONENTIAL = Settings.from_conf({"spark.adaptive.restart-strategy.type": "exponential-delay"})


def test_first_run_starts_at_once_then_scales_up_and_down() -> None:
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=3))
    app.register(driver)
    assert driver.calls == [("start", 1)]  # at once, on the one slot there is
    assert app.state("q") == "Executing"
    assert app.actuator.requested == [3]  # upper bound 3, one slot per executor
    app.event(driver.progress())

    app.advance(5)
    app.add("2")  # sufficient, not desired: the first run's stabilization starts
    assert driver.calls == [("start", 1)]
    app.add("3")  # desired (the upper bound): at once, the first run has no cooldown
    assert driver.calls[1:] == [("stop", True)]
    assert app.state("q") == "Restarting"
    app.stop(driver)
    assert driver.calls[2:] == [("start", 3)]
    app.start(driver)
    app.event(driver.progress())
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.parallelism, snap.slots) == ("Executing", 3, 3)

    app.advance(60)  # t=65
    app.remove("3")
    app.advance(9.9)  # the executor-loss grace still counts its slot
    assert app.scheduler.query("q").snapshot().slots == 3
    app.advance(0.1)  # t=75: gone; 2 slots are sufficient, not desired: stabilization 60 s
    assert app.scheduler.query("q").snapshot().slots == 2
    app.advance(59.9)
    assert len(driver.calls) == 3
    app.advance(0.1)
    assert driver.calls[3:] == [("stop", True)]
    app.stop(driver)
    assert driver.calls[4:] == [("start", 2)]
    app.start(driver)
    app.event(driver.progress())

    records = app.scheduler.history("q")
    assert [(r.trigger, r.kind, r.from_parallelism, r.to_parallelism, r.outcome)
            for r in records] == [
        (Trigger.INITIAL_SCHEDULE, "initial", 0, 1, "completed"),
        (Trigger.NEW_RESOURCES, "restart", 1, 3, "completed"),
        (Trigger.RESOURCES_LOST, "restart", 3, 2, "completed"),
    ]
    assert dict(records[0].timings) == {"start": 0.5}
    assert dict(records[1].timings) == {"stop": 0.25, "start": 0.5}
    counters = app.scheduler.query("q").history.counters
    assert (counters.restarts, counters.rescales) == (2, 2)


def test_first_run_on_sufficient_resources_waits_the_submission_stabilization() -> None:
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=3))
    app.register(driver)
    app.advance(5)
    app.add("2")  # 1 partition on 2 slots: a restart, once 2 slots held for 10 s
    app.advance(9.9)
    assert driver.calls == [("start", 1)]
    app.advance(0.1)
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    assert driver.calls[-1] == ("start", 2)


def test_executors_registering_before_the_first_batch_are_the_initial_schedule() -> None:
    """An app's executors register one by one in the seconds after it starts: while no
    micro-batch has completed, they complete the initial schedule; no rescale is recorded."""
    app = App()
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)
    app.add("1")
    app.add("2")
    app.add("3")  # 4 partitions on 3 slots: a restart, after the submission stabilization
    app.add("4")  # desired before then: nothing to restart, 4 run balanced on 4
    app.event(driver.progress())
    (initial,) = app.scheduler.history("q")
    assert (initial.kind, initial.to_slots, initial.outcome) == ("initial", 4, "completed")
    assert driver.calls == [("start", 4)]


def test_a_query_starts_before_any_executor_and_never_fails_for_lack_of_them() -> None:
    """Spark runs a query with no executor yet (its tasks wait): so does spark-adaptive."""
    app = App()
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)
    assert driver.calls == [("start", 4)]  # the configured partitions: nothing is known yet
    assert "no task slot is known yet" in app.scheduler.history("q")[0].reason
    app.advance(3600)
    assert app.state("q") == "Executing"
    app.add("1")  # 4 partitions run balanced on 1 slot: it just gets its slots
    app.event(driver.progress())
    app.add("2")
    app.event(driver.progress())
    q = app.scheduler.query("q")
    assert (q.snapshot().parallelism, q.snapshot().slots) == (4, 2)
    assert driver.calls == [("start", 4)]
    initial, live = app.scheduler.history("q")
    assert (initial.kind, initial.to_slots, initial.outcome) == ("initial", 1, "completed")
    assert (live.kind, live.from_slots, live.to_slots) == ("live", 1, 2)
    assert q.history.counters.rescales == 1  # 0 -> 1 slot was no rescale; 1 -> 2 is one


def test_lost_executors_are_a_live_rescale_without_a_restart() -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)  # 4 slots = desired
    app.event(driver.progress())
    app.advance(100)
    app.remove("3")
    app.remove("4")
    app.advance(10)
    q = app.scheduler.query("q")
    assert (q.snapshot().parallelism, q.snapshot().slots) == (4, 2)
    app.event(driver.progress())
    app.advance(100)
    app.add("5")
    app.add("6")
    app.event(driver.progress())
    app.advance(1000)
    assert driver.calls == [("start", 4)]  # never stopped
    live = [r for r in app.scheduler.history("q") if r.kind == "live"]
    assert [(r.trigger, r.from_slots, r.to_slots, r.from_parallelism, r.to_parallelism,
             r.outcome) for r in live] == [
        (Trigger.RESOURCES_LOST, 4, 2, 4, 4, "completed"),
        (Trigger.NEW_RESOURCES, 2, 4, 4, 4, "completed"),
    ]
    assert q.history.counters.live_rescales == 2
    assert q.history.counters.restarts == 0
    assert q.snapshot().last_decision is not None


def test_executor_back_within_the_grace_changes_nothing() -> None:
    app = App()
    for e in "12":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.advance(100)
    app.remove("2")
    app.advance(5)
    app.add("3")  # replaces the lost executor
    app.advance(1000)
    assert driver.calls == [("start", 2)]
    assert [r.trigger for r in app.scheduler.history("q")] == [Trigger.INITIAL_SCHEDULE]


def test_hung_executor_is_killed_and_the_query_scales_down() -> None:
    app = App()
    for e in "123":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=3))
    app.register(driver)
    app.advance(50)
    app.freeze("3")
    app.advance(20)
    assert app.actuator.killed == [(("3",), "spark-adaptive: no heartbeat for 20s")]
    assert app.scheduler.query("q").snapshot().slots == 2
    app.advance(60)
    assert driver.calls[-1] == ("stop", True)


def test_reactive_mode_uses_everything_and_refuses_requirements() -> None:
    app = App(Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive"}))
    app.add("1", cores=2)
    app.add("2", cores=2)
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)
    assert app.actuator.requested == [16384]  # 32768 slots at 2 per executor
    assert driver.calls == [("start", 4)]
    app.advance(5)
    app.add("3", cores=2)  # reactive: no stabilization, and the first run has no cooldown
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    assert driver.calls[-1] == ("start", 6)
    app.start(driver)
    app.advance(5)  # t=10
    app.add("4", cores=2)  # now the 30 s cooldown and the 60 s stabilization apply
    app.advance(59.9)
    assert driver.calls[-1] == ("start", 6)
    app.advance(0.1)
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    assert driver.calls[-1] == ("start", 8)
    with pytest.raises(RequirementsError) as e:
        app.scheduler.update_requirements("q", 1, 2)
    assert e.value.reasons == [REACTIVE_REQUIREMENTS]
    with pytest.raises(RequirementsError):
        app.register(FakeDriver(query_info("q2")), ResourceRequirements(1, 2))


def test_after_a_failure_without_slots_the_resource_wait_timeout_fails_the_query() -> None:
    app = App(EXPONENTIAL)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    app.remove("1")
    app.advance(10)  # the loss grace is over: no slot left; the query keeps running
    assert app.state("q") == "Executing"
    app.event(driver.terminated("boom"))  # exponential-delay: a restart after 1 s...
    app.advance(1)
    assert app.state("q") == "WaitingForResources"  # ...with nothing to start on
    app.advance(299)
    assert app.state("q") == "WaitingForResources"
    app.advance(1)
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status) == ("Finished", "FAILED")
    assert snap.error is not None and "Not enough resources" in snap.error
    assert driver.calls == [("start", 1)]


def test_two_queries_each_run_on_every_slot_as_their_batches_interleave() -> None:
    # The queries of one app share its slots in time: each runs on all 9, within its bounds
    # (Flink's exclusive slot-sharing groups would give A 4 and B 5). The executors asked
    # for still sum their upper bounds.
    app = App()
    for e in range(9):
        app.add(str(e))
    a = FakeDriver(query_info("A", partitions=4), query_id="qa")
    b = FakeDriver(query_info("B", partitions=10), query_id="qb")
    app.register(a, ResourceRequirements(1, 4))
    app.register(b, ResourceRequirements(2, 10))
    assert a.calls == [("start", 4)] and b.calls == [("start", 9)]
    assert (app.scheduler.slot_share("A"), app.scheduler.slot_share("B")) == (4, 9)
    assert app.actuator.requested[-1] == 14
    # When A finishes, B runs on the same 9 slots; the total goes down to B's bound.
    app.event(a.terminated(None))
    assert app.state("A") == "Finished"
    assert app.actuator.requested[-1] == 10
    app.advance(60)
    assert b.calls == [("start", 9)]
    app.add("9")  # B's desired 10: restarted at them after the stabilization
    app.advance(60)
    assert b.calls[-1] == ("stop", True)
    app.stop(b)
    assert b.calls[-1] == ("start", 10)


def test_an_executor_that_joins_after_the_declaration_is_released() -> None:
    """The master may launch an executor before it hears the declared total: it is surplus,
    and the same total is declared again to release it."""
    app = App()
    app.add("1")
    app.add("2")
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.batch(driver)  # its first micro-batch completed
    assert app.actuator.requested == [2]
    app.add("3")
    # Spark may already have given it tasks of the running micro-batch: it goes after it.
    assert app.actuator.requested == [2]
    app.event(driver.progress())
    assert app.actuator.requested == [2, 2]
    assert app.scheduler.executor_count == 2  # released: it stops counting at once
    app.remove("3", "Executor killed by driver.")  # its removal, later, declares nothing
    app.event(driver.progress())
    assert app.actuator.requested == [2, 2]
    app.add("4")
    app.event(driver.progress())
    assert app.actuator.requested == [2, 2, 2]
    assert app.scheduler.executor_count == 2


def test_requirements_update_rescales_the_query() -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=4, name="orders"))
    app.register(driver)
    for _ in range(3):  # a shuffle and no state: three micro-batches end the first hold
        app.batch(driver, tasks=(4, 4))
    app.advance(40)
    assert app.actuator.requested == [4]
    new = app.scheduler.update_requirements("orders", -1, 2)
    assert new == ResourceRequirements(1, 2)
    app.vt.run_pending()
    assert driver.calls[-1] == ("stop", True)  # desired at once
    # Its micro-batch still runs on 4 slots: releasing executors now would cost it tasks.
    assert app.actuator.requested == [4]
    app.stop(driver)
    assert app.actuator.requested == [4, 2]  # stopped between batches: now they may go
    # Released on request, they stop counting now, not when Spark reports them gone.
    assert app.scheduler.resources.slots == 2 and app.scheduler.executor_count == 2
    assert driver.calls[-1] == ("start", 2)
    assert app.scheduler.history("q")[-1].trigger is Trigger.REQUIREMENTS_CHANGED
    assert app.actuator.requested[-1] == 2
    with pytest.raises(RequirementsError) as e:
        requirements_from_body(
            {"parallelism": {"lowerBound": 0, "upperBound": True}},
            lambda lower, upper: app.scheduler.check_requirements("orders", lower, upper))
    assert len(e.value.reasons) == 2


def test_by_default_a_failed_query_fails_with_its_own_error_as_on_plain_spark() -> None:
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))  # it has a checkpoint, all the same
    app.register(driver)
    app.event(driver.terminated("boom"))
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status, snap.error) == ("Finished", "FAILED", "boom")


def test_failure_with_no_restart_strategy_fails_with_the_original_error() -> None:
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1, checkpoint=None))
    app.register(driver)
    app.event(driver.terminated("org.apache.spark.SparkException: boom", "TASK_FAILED"))
    q = app.scheduler.query("q")
    snap = q.snapshot()
    assert (snap.state, snap.status, snap.error, snap.error_class) == (
        "Finished", "FAILED", "org.apache.spark.SparkException: boom", "TASK_FAILED")
    assert [(c.old, c.new) for c in app.changes][-2:] == [
        ("Executing", "Failing"), ("Failing", "Finished")]
    assert driver.calls == [("start", 1)]  # the query had already stopped


def test_a_query_whose_source_cannot_replay_is_not_restarted_after_a_failure() -> None:
    app = App(EXPONENTIAL)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1, non_replayable_sources=("socket",)))
    app.register(driver)
    app.event(driver.terminated("boom"))
    assert app.scheduler.query("q").snapshot().status == "FAILED"
    assert driver.calls == [("start", 1)]


@pytest.mark.parametrize(("conf", "backoffs"), [
    ({"spark.adaptive.restart-strategy.type": "fixed-delay",
      "spark.adaptive.restart-strategy.fixed-delay.attempts": "2",
      "spark.adaptive.restart-strategy.fixed-delay.delay": "4s"}, [4.0, 4.0]),
    ({"spark.adaptive.restart-strategy.type": "failure-rate",
      "spark.adaptive.restart-strategy.failure-rate.max-failures-per-interval": "2",
      "spark.adaptive.restart-strategy.failure-rate.delay": "3s"}, [3.0, 3.0]),
    ({"spark.adaptive.restart-strategy.type": "exponential-delay"},
     [1.0, 1.5]),  # jitter at mid-point
])
def test_failures_restart_per_strategy_then_fail(conf: dict[str, str],
                                                 backoffs: list[float]) -> None:
    app = App(Settings.from_conf({
        **conf, "spark.adaptive.restart-strategy.exponential-delay.attempts-before-reset-backoff":
        "2"}))
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    for backoff in backoffs:
        app.event(driver.terminated("boom"))
        assert app.state("q") == "Restarting"
        app.advance(backoff - 0.01)
        assert driver.calls[-1] == ("start", 1) and len(driver.pending_starts) == 0
        app.advance(0.01)
        assert len(driver.pending_starts) == 1  # restarted after exactly the backoff
        app.start(driver)
    app.event(driver.terminated("boom"))
    snap = app.scheduler.query("q").snapshot()
    assert (snap.status, snap.error) == ("FAILED", "boom")
    assert snap.counters.restarts == 2 and snap.counters.failures == 3
    assert ("stop", True) not in driver.calls


def test_events_of_the_first_run_before_it_is_handed_over_are_not_lost() -> None:
    """Spark reports a run's first events (even its end) before ``start()`` returns."""
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1, checkpoint=None))
    s = app.scheduler
    bounds = s.default_requirements(driver.info)
    plan = s.plan_first_start(driver.info, bounds, driver.support)
    result = driver.first_start(plan.parallelism)
    s.on_event(driver.progress())
    s.on_event(driver.terminated("died at once"))
    s.adopt_query(driver, bounds, plan, result)
    app.vt.run_pending()
    snap = s.query("q").snapshot()
    assert (snap.state, snap.status, snap.error) == ("Finished", "FAILED", "died at once")
    assert s.history("q")[0].outcome == "completed"  # the early progress was replayed too


def test_query_terminated_before_a_restart_reports_is_not_lost() -> None:
    app = App(EXPONENTIAL)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    app.event(driver.terminated("boom"))
    app.advance(1)  # exponential-delay's first backoff
    driver.complete_start()  # the report is posted, not handled yet...
    app.scheduler.on_event(driver.terminated("died at once"))  # ...when the query dies
    app.vt.run_pending()
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.counters.failures) == ("Restarting", 2)  # failed, restarting again


def test_stop_with_savepoint_from_executing_and_refused_elsewhere() -> None:
    app = App(EXPONENTIAL)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    app.event(driver.terminated("boom"))  # Restarting, waiting for its backoff
    with pytest.raises(ConflictError, match="Restarting"):
        app.scheduler.stop_with_savepoint("q")
    app.advance(1)
    app.start(driver)
    app.scheduler.stop_with_savepoint("qid-1")  # by Spark query id
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status) == ("Finished", "FINISHED")
    with pytest.raises(ConflictError, match="finished"):
        app.scheduler.update_requirements("q", 1, 1)


def _to_executing(app: App, driver: FakeDriver) -> None:
    pass


def _to_restarting(app: App, driver: FakeDriver) -> None:
    app.add("2")  # desired (2 slots), and the first run has no cooldown: restart at once


def _to_creating(app: App, driver: FakeDriver) -> None:
    _to_restarting(app, driver)
    app.stop(driver)  # the restart's start is in flight


def _to_waiting(app: App, driver: FakeDriver) -> None:
    app.remove("1")
    app.advance(10)
    app.event(driver.terminated("boom"))
    app.advance(1)


def _to_stop_with_savepoint(app: App, driver: FakeDriver) -> None:
    app.scheduler.stop_with_savepoint("q")


@pytest.mark.parametrize(("setup", "state", "stops"), [
    (_to_executing, "Executing", [("stop", False)]),
    (_to_restarting, "Restarting", [("stop", True), ("stop", False)]),
    (_to_creating, "CreatingExecutionGraph", [("stop", True), ("stop", False)]),
    (_to_waiting, "WaitingForResources", []),
    (_to_stop_with_savepoint, "StopWithSavepoint", [("stop", True), ("stop", False)]),
])
def test_cancel_from_each_state(setup: object, state: str,
                                stops: list[tuple[str, bool]]) -> None:
    app = App(EXPONENTIAL)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    setup(app, driver)  # type: ignore[operator]
    assert app.state("q") == state
    app.scheduler.cancel("q")
    if state == "CreatingExecutionGraph":
        app.start(driver)  # the cancel waits for the start in flight
    while driver.pending_stops:
        app.stop(driver)
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status) == ("Finished", "CANCELED")
    assert [c for c in driver.calls if c[0] == "stop"] == stops
    app.advance(1000)
    assert app.state("q") == "Finished"
    app.scheduler.cancel("q")  # cancelling a finished query is harmless


def test_query_that_cannot_repartition_is_only_rescaled_live() -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=4),
                        support=RepartitionSupport(False, "stateful, HDFS state store"))
    app.register(driver)
    app.event(driver.progress())
    app.advance(100)
    app.remove("4")
    app.advance(1000)
    assert driver.calls == [("start", 4)]
    (live,) = [r for r in app.scheduler.history("q") if r.kind == "live"]
    assert (live.from_slots, live.to_slots, live.to_parallelism) == (4, 3, 4)
    assert "HDFS state store" in live.reason


def test_query_that_can_never_repartition_starts_at_its_configured_partitions() -> None:
    """Its first partition count is its last: start where Spark alone would, then scale live."""
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=6),
                        support=RepartitionSupport(False, "no checkpoint location"))
    app.register(driver)
    assert driver.calls == [("start", 6)]
    app.event(driver.progress())
    for e in "23":
        app.add(e)
    app.advance(1000)
    assert driver.calls == [("start", 6)]  # never restarted
    snap = app.scheduler.query("q").snapshot()
    assert (snap.parallelism, snap.slots) == (6, 3)
    assert "starts at its configured 6 partitions" in app.scheduler.history("q")[0].reason


def test_reactive_query_that_can_never_repartition_keeps_its_configured_partitions() -> None:
    """Reactive mode's upper bound is max-parallelism; the first start must not use it."""
    app = App(Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive"}))
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=4),
                        support=RepartitionSupport(False, "stateful, HDFS state store"))
    app.register(driver)
    assert driver.calls == [("start", 4)]


def test_local_mode_is_a_fixed_pool() -> None:
    app = App(fixed_slots=2)
    driver = FakeDriver(query_info("q", partitions=4),
                        support=RepartitionSupport(False, "local mode"))
    app.register(driver)
    assert driver.calls == [("start", 4)]
    app.add("1")  # no executor events in local mode; any that came would change nothing
    app.advance(1000)
    snap = app.scheduler.query("q").snapshot()
    assert (snap.slots, snap.executors, snap.parallelism) == (2, 1, 4)
    assert app.actuator.requested == []  # nothing to request in a fixed pool
    with pytest.raises(RequirementsError) as e:
        app.scheduler.update_requirements("q", 1, 2)
    assert e.value.reasons == [LOCAL_MODE_REQUIREMENTS]
    assert driver.calls == [("start", 4)]


def test_lookup_by_key_query_id_and_name() -> None:
    app = App()
    driver = FakeDriver(query_info("key-1", name="orders"), query_id="spark-id")
    app.register(driver)
    app.add("1")
    q = app.scheduler.query("key-1")
    assert app.scheduler.query("orders") is q and app.scheduler.query("spark-id") is q
    with pytest.raises(UnknownQueryError, match="no query managed"):
        app.scheduler.query("nope")
    with pytest.raises(ValueError, match="already managed"):
        app.register(FakeDriver(query_info("key-1")))
    snaps = app.scheduler.snapshot()
    assert [s.id for s in snaps] == ["spark-id"]
    assert app.scheduler.app_snapshot() == {
        "mode": "adaptive", "slots": 1, "executors": 1, "declaredExecutors": 4, "queries": 1}


def test_executor_requests_follow_the_executor_size() -> None:
    app = App(default_slots_per_executor=2)
    app.register(FakeDriver(query_info("q", partitions=8)))
    assert app.actuator.requested == [4]  # 8 slots at the configured 2 per executor
    app.add("1", cores=4)
    assert app.actuator.requested == [4, 2]  # now observed: 4 slots per executor


def test_a_query_started_again_from_its_checkpoint_replaces_the_finished_one() -> None:
    """Spark gives a query restarted by the app from the same checkpoint the same id."""
    app = App()
    app.add("1")
    first = FakeDriver(query_info("q", partitions=1))
    app.register(first)
    app.event(first.terminated(None))
    assert app.state("q") == "Finished"
    second = FakeDriver(query_info("q", partitions=1))
    app.register(second)
    assert app.state("q") == "Executing"
    with pytest.raises(ValueError, match="already managed"):
        app.register(FakeDriver(query_info("q", partitions=1)))


def test_an_autoscaler_target_on_a_divisor_is_a_live_rescale_and_executors_go_after_a_batch(
        ) -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)
    app.batch(driver)
    app.advance(60)
    assert app.actuator.requested == [4]
    app.scheduler.set_scaling_target("q", ScalingTarget(slots=2, partitions=4))
    q = app.scheduler.query("q")
    assert (q.snapshot().parallelism, q.snapshot().slots) == (4, 2)  # live, at once
    live = app.scheduler.history("q")[-1]
    assert (live.trigger, live.kind, live.from_slots, live.to_slots) == (
        Trigger.AUTOSCALER, "live", 4, 2)
    # The micro-batch running now may still use all 4 slots: nothing is released yet.
    assert app.actuator.requested == [4]
    app.event(driver.progress())
    assert app.actuator.requested == [4, 2]  # after it completed, the surplus goes
    assert driver.calls == [("start", 4)]


def test_slots_a_query_gave_up_under_its_running_batch_ask_for_no_executor() -> None:
    """A gives up a slot live while its micro-batch runs; B is rescaled onto it at once. For
    a while both count it, but the targets want the 4 executors alive: none is asked for."""
    app = App(Settings.from_conf({}), autoscaled=True)
    for e in "1234":
        app.add(e)
    a = FakeDriver(query_info("A", partitions=4), query_id="qa")
    b = FakeDriver(query_info("B", partitions=4), query_id="qb")
    app.register(a, ResourceRequirements(1, 4))
    app.register(b, ResourceRequirements(1, 4))
    for key in "AB":
        app.scheduler.set_scaling_target(key, ScalingTarget(slots=2, partitions=4))
    app.batch(a)
    app.batch(b)
    app.advance(60)
    assert app.actuator.requested == [4]
    app.scheduler.set_scaling_target("A", ScalingTarget(slots=1, partitions=4))
    app.scheduler.set_scaling_target("B", ScalingTarget(slots=3, partitions=4))
    qa, qb = app.scheduler.query("A"), app.scheduler.query("B")
    assert (qa.slots_in_use, qb.slots_in_use) == (2, 3)  # A's batch still runs on 2
    assert app.actuator.requested == [4]
    app.event(a.progress())
    assert (qa.slots_in_use, qb.slots_in_use) == (1, 3)
    assert app.actuator.requested == [4]
    assert app.actuator.killed == []


def test_an_autoscaler_target_with_other_partitions_restarts_at_them_when_the_slots_come(
        ) -> None:
    app = App(Settings.from_conf({"spark.adaptive.parallelism.upper-bound": "12"}))
    for e in "12":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)  # 2 slots within [1, 12]: starts at 2 partitions
    app.event(driver.progress())
    app.advance(60)
    app.scheduler.set_scaling_target("q", ScalingTarget(slots=3, partitions=6))
    assert app.actuator.requested[-1] == 3  # executors declared for the target
    assert driver.calls == [("start", 2)]  # 2 slots of 3: not the desired resources yet
    app.add("3")
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    assert driver.calls[-1] == ("start", 6)
    app.start(driver)
    app.event(driver.progress())
    record = app.scheduler.history("q")[-1]
    assert (record.trigger, record.kind, record.to_parallelism, record.to_slots) == (
        Trigger.AUTOSCALER, "restart", 6, 3)


def test_new_bounds_from_the_rest_api_bring_the_autoscaler_target_within_them() -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)
    app.scheduler.set_scaling_target("q", ScalingTarget(slots=2, partitions=4))
    assert app.scheduler.query("q").target == ScalingTarget(2, 4)
    app.scheduler.update_requirements("q", 1, 3)
    assert app.scheduler.query("q").target == ScalingTarget(2, 3)
    app.scheduler.update_requirements("q", 3, 3)
    assert app.scheduler.query("q").target == ScalingTarget(3, 3)


def _one_stage_batch(app: App, driver: FakeDriver, stage: int, tasks: int) -> None:
    """A micro-batch whose job ran one stage of ``tasks`` tasks: no shuffle, no state."""
    assert driver.run_id is not None
    app.event(JobStarted(0.0, stage, (stage,), job_group=driver.run_id))
    app.event(StageSubmitted(0.0, stage, 0, tasks))
    app.event(StageCompleted(0.0, stage, 0, tasks, 0, 0, 0, 0.5, task_time=1.0))
    app.event(driver.progress())


def test_a_query_without_a_shuffle_follows_its_executors_live_and_never_restarts() -> None:
    app = App()
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=3))
    app.register(driver)
    _one_stage_batch(app, driver, 1, tasks=4)  # 4 source partitions; the 3 shuffle ones unused
    q = app.scheduler.query("q")
    support = q.repartition_support()
    assert not support.possible and "one stage" in support.reason
    app.add("2")
    app.add("3")  # 3 slots: a query with a shuffle would restart at 3 partitions
    app.advance(120)
    app.remove("3")
    app.advance(120)
    assert driver.calls == [("start", 1)]
    kinds = [(r.trigger, r.kind) for r in app.scheduler.history("q")]
    assert kinds[0] == (Trigger.INITIAL_SCHEDULE, "initial")
    assert kinds[1:] and all(kind == "live" for _, kind in kinds[1:]), kinds
    # A batch with a shuffle (two stages) makes it restartable again.
    app.event(JobStarted(0.0, 2, (2, 3), job_group=driver.run_id))
    app.event(StageSubmitted(0.0, 2, 0, 4))
    app.event(StageSubmitted(0.0, 3, 0, 3))
    app.event(driver.progress())
    assert q.repartition_support().possible


def test_a_query_that_runs_its_source_s_tasks_keeps_the_executors_they_run_on() -> None:
    # 2 configured partitions, 4 source partitions in one stage: plain Spark runs its 4
    # tasks on all 4 executors, and so they are kept; its bounds and share stay its own.
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    _one_stage_batch(app, driver, 1, tasks=4)
    app.advance(120)
    q = app.scheduler.query("q")
    assert q.requirements == ResourceRequirements(1, 2)
    assert app.actuator.requested == [4] and app.actuator.killed == []
    assert driver.calls == [("start", 2)]
    # A batch of more stages (an extra job of foreachBatch's) does not give them back.
    assert driver.run_id is not None
    app.event(JobStarted(0.0, 2, (2, 3), job_group=driver.run_id))
    app.event(StageSubmitted(0.0, 2, 0, 4))
    app.event(StageSubmitted(0.0, 3, 0, 1))
    app.event(driver.progress())
    app.remove("4")
    app.add("5")  # the declaration is made again
    app.advance(120)
    assert app.actuator.requested[-1] == 4 and app.actuator.killed == []
    assert driver.calls == [("start", 2)]


def test_the_most_source_tasks_a_batch_ran_are_kept_and_bounds_of_the_user_s_own_rule(
        caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        app.event(driver.idle())  # the hold ends before any batch ran: 2 are declared
        assert app.actuator.requested == [4, 2] and app.scheduler.executor_count == 2
        _one_stage_batch(app, driver, 1, tasks=4)  # 4 source tasks: declared again for them
    assert app.actuator.requested == [4, 2, 4]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]
    assert len(said) == 2, said
    assert "upper bounds want 2 slots" in said[0] and "source's partitions" not in said[0]
    assert "runs its source's partitions as its tasks: those) want 4 slots" in said[1], said
    app.add("5")
    app.add("6")
    for stage, tasks in ((2, 2), (3, 3), (4, 4)):  # a source that runs fewer some batches
        _one_stage_batch(app, driver, stage, tasks=tasks)
    assert app.actuator.requested == [4, 2, 4]  # nothing given back for a smaller batch
    app.scheduler.update_requirements("q", 1, 1)  # the user's own bounds: they rule
    app.event(driver.progress())
    assert app.actuator.requested[-1] == 1


def test_a_stateless_query_s_source_tasks_take_no_slots_from_another_query() -> None:
    # 6 executors: a stateless query on 2 partitions running 8 source tasks, and a stateful
    # one on 4. Their shares stay 2 and 4 (nothing restarts); all 6 executors are kept.
    app = App()
    for e in "123456":
        app.add(e)
    a = FakeDriver(query_info("a", partitions=2), query_id="qa")
    b = FakeDriver(query_info("b", partitions=4, state_partitions=4, checkpoint="/cp/b"),
                   query_id="qb")
    app.register(a)
    app.register(b)
    _one_stage_batch(app, a, 1, tasks=8)
    app.event(b.progress())
    app.advance(120)
    assert (app.scheduler.slot_share("a"), app.scheduler.slot_share("b")) == (2, 4)
    assert a.calls == [("start", 2)] and b.calls == [("start", 4)]
    assert app.actuator.killed == [] and app.actuator.requested[-1] >= 6


def test_an_empty_first_batch_does_not_end_the_hold_on_the_executors() -> None:
    # The rate source's first micro-batch reads nothing and runs one task: what the query
    # runs is still unknown, and its 4 source tasks show in the next one.
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    assert driver.run_id is not None
    app.event(JobStarted(0.0, 90, (90,), job_group=driver.run_id))
    app.event(StageSubmitted(0.0, 90, 0, 1))
    app.event(QueryProgress(0.0, driver.query_id, driver.run_id, "q", 0, 0, 0.0, 0.0, 0.1, 0.1))
    assert app.actuator.requested == [4]
    _one_stage_batch(app, driver, 1, tasks=4)
    app.advance(60)
    assert app.actuator.requested == [4] and app.actuator.killed == []
    # Without any task Spark reported, the third micro-batch ends the hold all the same.
    other = App()
    for e in "1234":
        other.add(e)
    quiet = FakeDriver(query_info("q", partitions=2))
    other.register(quiet)
    assert quiet.run_id is not None
    for batch in (0, 1, 2):
        assert other.actuator.requested == [4]
        other.event(QueryProgress(0.0, quiet.query_id, quiet.run_id, "q", batch, 10, 1.0, 1.0,
                                  0.1, 0.1))
    assert other.actuator.requested == [4, 2]


def test_a_query_whose_trigger_finds_no_data_ends_the_hold_on_the_executors() -> None:
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    assert app.actuator.requested == [4]
    app.event(driver.idle())
    assert app.actuator.requested == [4, 2]


def test_no_executor_is_released_before_a_query_s_first_micro_batch_says_what_it_runs() -> None:
    # State in 2 partitions: its upper bound stays 2, and the executors beyond them go
    # once its first micro-batch has completed, not as it starts.
    app = App()
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2, state_partitions=2))
    app.register(driver)
    app.advance(5)
    assert app.actuator.requested == [4]
    assert driver.run_id is not None
    app.event(JobStarted(0.0, 1, (1, 2), job_group=driver.run_id))
    app.event(StageSubmitted(0.0, 1, 0, 4))
    app.event(StageSubmitted(0.0, 2, 0, 2))
    app.event(driver.progress())
    assert app.scheduler.query("q").requirements == ResourceRequirements(1, 2)
    assert app.actuator.requested == [4, 2]


def test_a_restart_onto_joining_executors_waits_for_their_warm_up() -> None:
    warming = [False]
    app = App(warming=lambda: warming[0])
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=3, trigger_interval=2.0))
    app.register(driver)
    app.event(driver.progress())
    app.advance(60)
    warming[0] = True  # the executors that join are being warmed up
    app.add("2")
    app.add("3")  # desired: the restart would go at once
    app.event(driver.progress())
    app.advance(10)
    app.event(driver.progress())
    assert driver.calls == [("start", 1)], "the query runs on at 1 partition meanwhile"
    assert app.scheduler.query("q").restart_deferred
    assert app.state("q") == "Executing"
    warming[0] = False
    app.scheduler.warm_up_ended()
    app.vt.run_pending()
    assert driver.calls == [("start", 1)], "the restart waits for a batch boundary"
    app.event(driver.progress())  # (at the latest 3 triggers later, 6 s, without one)
    assert driver.calls[1:] == [("stop", True)]
    app.stop(driver)
    app.start(driver)
    app.event(driver.progress())
    assert app.scheduler.query("q").snapshot().parallelism == 3


def test_new_bounds_below_a_pending_target_s_partitions_restart_nothing() -> None:
    # A target of 16 partitions waits (timing rules); bounds put below it make the target's
    # partitions the ones the query runs, not the bound: no restart nobody chose.
    app = App(Settings.from_conf(
        {"spark.adaptive.scheduler.executing.cooldown-after-rescaling": "5s"}), autoscaled=True)
    for e in range(1, 9):
        app.add(str(e))
    driver = FakeDriver(query_info("q", partitions=8))
    app.register(driver)
    for _ in range(2):
        app.batch(driver, (8, 8))
        app.advance(1)
    app.scheduler.update_requirements("q", 1, 32)
    app.scheduler.set_scaling_target("q", ScalingTarget(8, 16))
    app.scheduler.update_requirements("q", 1, 12)
    q = app.scheduler.query("q")
    assert q.target == ScalingTarget(8, 8)
    for _ in range(30):
        app.batch(driver, (8, 8))
        app.advance(1)
    assert driver.calls == [("start", 8)]


def _batch(app: App, driver: FakeDriver, first_stage: int, stages: int,
           end: bool = True) -> None:
    """A micro-batch whose first stage runs 4 tasks (4 source partitions), then ``stages``
    - 1 stages of 2 (a shuffle onto 2 partitions); ``end``: it completes."""
    assert driver.run_id is not None
    ids = tuple(range(first_stage, first_stage + stages))
    app.event(JobStarted(0.0, first_stage, ids, job_group=driver.run_id))
    app.event(StageSubmitted(0.0, first_stage, 0, 4))
    if end:
        _end_batch(app, driver, first_stage, stages)


def _end_batch(app: App, driver: FakeDriver, first_stage: int, stages: int) -> None:
    for stage in range(first_stage, first_stage + stages):
        tasks = 4 if stage == first_stage else 2
        if stage > first_stage:
            app.event(StageSubmitted(0.0, stage, 0, tasks))
        app.event(StageCompleted(0.0, stage, 0, tasks, 0, 0, 0, 0.5, task_time=1.0))
    app.event(driver.progress())


def _app_after_three_batches(executors: str, stages: int, *, autoscaled: bool = True
                             ) -> tuple[App, FakeDriver]:
    """An app with ``executors`` (one slot each), a query of 2 partitions whose source has
    4, and three micro-batches of ``stages`` stages (:func:`_batch`) completed."""
    app = App(autoscaled=autoscaled)
    for e in executors:
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.advance(60)
    for b in range(3):
        _batch(app, driver, 10 * b + 1, stages)
    return app, driver


@pytest.mark.parametrize("change, stages", [("autoscaler target", 1),
                                            ("autoscaler target", 2), ("bounds put", 1)])
def test_executors_under_a_running_batch_s_wider_stage_go_only_once_it_completes(
        change: str, stages: int) -> None:
    # 2 partitions, 4 source partitions: a batch's first stage runs 4 tasks on the 4
    # executors, whatever the 2 slots the query is counted on (with state or without).
    # A lower total declared while it runs waits for its end.
    app, driver = _app_after_three_batches("1234", stages,
                                           autoscaled=change == "autoscaler target")
    assert app.actuator.requested in ([], [4])  # nothing released yet
    before = len(app.actuator.requested)
    _batch(app, driver, 100, stages, end=False)
    if change == "autoscaler target":
        app.scheduler.set_scaling_target("q", ScalingTarget(1, 2))
    else:
        app.scheduler.update_requirements("q", 1, 2)  # the user's own: its 2 slots
    app.advance(5)
    assert all(total == 4 for total in app.actuator.requested[before:]), app.actuator.requested
    _end_batch(app, driver, 100, stages)  # the batch completed: its executors may go now
    assert app.actuator.requested[-1] == (1 if change == "autoscaler target" else 2)
    assert driver.calls == [("start", 2)]


def test_the_hold_of_a_wide_stage_asks_for_no_executor_that_joins_mid_batch() -> None:
    app, driver = _app_after_three_batches("12", 2)
    # A target of 2 slots; then executors 3 and 4 join while a batch's 4-task stage runs:
    # they are surplus, released at the boundary, and the stage asks for nothing more.
    app.scheduler.set_scaling_target("q", ScalingTarget(2, 2))
    assert app.actuator.requested == [2]
    _batch(app, driver, 100, 2, end=False)
    app.add("3")
    app.add("4")
    app.advance(5)
    assert app.actuator.requested == [2]
    _end_batch(app, driver, 100, 2)
    assert app.actuator.requested == [2, 2]


def test_a_wide_stage_that_completed_holds_no_executor() -> None:
    app, driver = _app_after_three_batches("1234", 2)
    # The first target comes while the batch's narrow stage runs (its 4-task one has
    # completed): the executors beyond its 2 slots in use go at once.
    _batch(app, driver, 100, 2, end=False)
    app.event(StageCompleted(0.0, 100, 0, 4, 0, 0, 0, 0.5, task_time=1.0))
    app.event(StageSubmitted(0.0, 101, 0, 2))
    app.scheduler.set_scaling_target("q", ScalingTarget(1, 2))
    assert app.actuator.requested == [2]


def test_the_executors_declared_for_a_query_s_slots_stay_whatever_their_sizes(
        caplog: pytest.LogCaptureFixture) -> None:
    # An old executor of 1 slot and two newer ones of 4: the query's 8 slots need all
    # three, since a lower total releases the newest (one of 4 slots), not the small one.
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    app = App(autoscaled=False)
    app.add("1", cores=1)
    app.add("2", cores=4)
    app.add("3", cores=4)
    driver = FakeDriver(query_info("q", partitions=8))
    app.register(driver)
    app.advance(60)
    for b in range(3):
        _batch(app, driver, 10 * b + 1, 2)
    app.scheduler.update_requirements("q", 1, 8)
    app.advance(5)
    assert app.actuator.requested == [3] and app.actuator.killed == []
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]
    assert said and "want 8 slots, executors of 1-4 slots (any more at 4)" in said[-1], said
