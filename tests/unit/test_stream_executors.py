"""When the streaming scheduler lets executors go, and when it counts them again.

Scenarios on virtual time with the fake driver and actuator (``scheduler_fakes``):

* a live scale-down during a query's first micro-batch holds its executors until that
  batch completes, as every later one does;
* a QueryIdle of a query's current run is a micro-batch boundary: surplus executors and
  slots held after a live scale-down go then;
* once the last managed query ends, what the app holds without spark-adaptive is
  declared instead of the last query's upper bound;
* an executor whose release Spark refused counts again, and its release is retried only
  at a micro-batch boundary;
* a run's early events keep its QueryTerminated however many progress events came first.
"""

from __future__ import annotations

import dataclasses

import pytest
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.events import (
    JobStarted,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
    StageCompleted,
    StageSubmitted,
)
from spark_adaptive.core.executors.demand import SURPLUS_WAIT
from spark_adaptive.core.ports import RepartitionSupport
from spark_adaptive.core.streaming.requirements import ScalingTarget
from spark_adaptive.core.streaming.scheduler import RETAINED_FINISHED
from spark_adaptive.core.streaming.start_hold import UNMANAGED_GRACE
from spark_adaptive.settings import Settings

LIVE_ONLY = RepartitionSupport(False, "no checkpoint")


def _app(executors: int = 4, settings: Settings | None = None, **kw: object) -> App:
    app = App(settings, **kw)
    for i in range(1, executors + 1):
        app.add(str(i))
    return app


def _alive(app: App) -> set[str]:
    return {e.executor_id for e in app.scheduler.resources.executors}


# -- the first micro-batch ----------------------------------------------------------------
def test_a_live_scale_down_during_the_first_batch_waits_for_it_to_complete() -> None:
    app = _app()
    driver = FakeDriver(query_info("q", partitions=4, checkpoint=None), support=LIVE_ONLY)
    app.register(driver)
    assert app.actuator.requested == [4]
    app.event(driver.job_started())
    app.event(StageSubmitted(0.0, 1, 0, 4))
    app.scheduler.update_requirements("q", 1, 2)  # the first micro-batch runs on 4 slots
    q = app.scheduler.query("q")
    assert (app.actuator.requested, q.slots_in_use, _alive(app)) == ([4], 4, {"1", "2", "3", "4"})
    app.event(driver.progress())  # it completed: the two it no longer needs go now
    assert (app.actuator.requested, q.slots_in_use, _alive(app)) == ([4, 2], 2, {"1", "2"})


# -- QueryIdle is a batch boundary --------------------------------------------------------
def test_a_surplus_executor_goes_when_the_query_reports_idle() -> None:
    app = _app(2)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.batch(driver)
    app.add("3")  # launched before the master heard the total: surplus
    assert app.actuator.requested == [2]  # a batch may run on it: it waits for a boundary
    app.advance(10)
    app.event(driver.idle())  # the trigger found no data: no batch runs
    assert app.actuator.requested == [2, 2]
    assert _alive(app) == {"1", "2"}


def test_slots_held_after_a_live_scale_down_go_when_the_query_reports_idle() -> None:
    app = _app()
    driver = FakeDriver(query_info("q", partitions=4, checkpoint=None), support=LIVE_ONLY)
    app.register(driver)
    app.event(driver.progress())
    app.scheduler.update_requirements("q", 1, 2)  # a later batch runs on the 4: held
    assert app.actuator.requested == [4]
    app.event(driver.idle())
    assert app.actuator.requested == [4, 2]
    assert (app.scheduler.query("q").slots_in_use, _alive(app)) == (2, {"1", "2"})


# -- no managed query remains -------------------------------------------------------------
def _end(app: App, driver: FakeDriver, how: str) -> None:
    if how == "cancelled":
        app.scheduler.cancel(driver.info.key)
        while driver.pending_stops:  # a rescale's stop, if one was under way, then its own
            app.stop(driver)
    elif how == "finished":
        app.event(driver.terminated())
    else:
        app.event(driver.terminated("java.lang.IllegalStateException: boom"))
        app.advance(1)
        if driver.pending_stops:
            app.stop(driver)
    app.advance(60)
    assert app.state(driver.info.key) == "Finished"


@pytest.mark.parametrize("how", ["cancelled", "finished", "failed"])
def test_the_last_query_ending_keeps_the_executors_alive_and_asks_for_no_more(how: str) -> None:
    app = _app()
    a = FakeDriver(query_info("a", partitions=8))
    app.register(a)
    assert app.actuator.requested == [8]  # 8 asked for, 4 alive
    _end(app, a, how)
    # Without the app's initial executors known: the 4 alive stay, no more are asked for.
    assert app.actuator.requested == [8, 4]
    assert app.scheduler.app_snapshot()["declaredExecutors"] == 4
    app.add("5")  # a late one the master had launched: no query to size for, left alone
    app.advance(60)
    assert app.actuator.requested == [8, 4]
    b = FakeDriver(query_info("b", partitions=6))
    app.register(b)  # a new query: its upper bound is declared again
    assert app.actuator.requested == [8, 4, 6]


def test_the_last_query_ending_declares_the_apps_initial_executors() -> None:
    app = _app(idle_executors=2)
    a = FakeDriver(query_info("a", partitions=4))
    app.register(a)
    assert app.actuator.requested == [4]
    _end(app, a, "cancelled")
    assert app.actuator.requested == [4, 2]  # what the app holds without spark-adaptive
    assert _alive(app) == {"1", "2"}


def test_reactive_mode_stops_asking_for_max_parallelism_once_its_query_ended() -> None:
    app = _app(1, Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive"}))
    a = FakeDriver(query_info("a", partitions=4))
    app.register(a)
    assert app.actuator.requested == [32768]
    _end(app, a, "finished")
    assert app.actuator.requested == [32768, 1]


def test_one_of_two_queries_ending_declares_the_other_ones_bound_only() -> None:
    app = _app(idle_executors=2)
    a = FakeDriver(query_info("a", partitions=8))
    b = FakeDriver(query_info("b", partitions=8))
    app.register(a)
    app.register(b)
    assert app.actuator.requested[-1] == 16
    _end(app, a, "cancelled")
    assert app.actuator.requested[-1] == 8  # b still runs: its bound, not the idle total
    _end(app, b, "cancelled")
    assert app.actuator.requested[-1] == 2


# -- a release Spark refused ----------------------------------------------------------------
def test_an_executor_whose_release_was_refused_counts_again_and_is_retried_between_batches(
) -> None:
    app = _app()
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    assert app.actuator.requested == [4]  # nothing released before its first micro-batch
    app.batch(driver)  # upper bound 2: then the two newest are released
    assert (app.actuator.requested, _alive(app), app.scheduler.resources.slots) == (
        [4, 2], {"1", "2"}, 2)
    app.scheduler.release_refused(["3", "4"], "the cluster manager refused")
    # They are alive and get tasks: they count again ...
    assert (_alive(app), app.scheduler.resources.slots) == ({"1", "2", "3", "4"}, 4)
    # ... and are not released again at once (that could loop on refusals), but between
    # two micro-batches.
    assert app.actuator.requested == [4, 2]
    app.event(driver.progress())
    assert app.actuator.requested == [4, 2, 2]
    assert _alive(app) == {"1", "2"}
    app.scheduler.release_refused(["3", "4"], "the cluster manager refused")
    app.advance(30)
    assert app.actuator.requested == [4, 2, 2]  # refused again: the next boundary, not now
    # One removed since, or never released by spark-adaptive, does not come back.
    app.event(driver.progress())
    app.remove("4", "Executor killed by driver.")
    app.scheduler.release_refused(["4", "1"], "killExecutors failed: py4j")
    assert _alive(app) == {"1", "2"}


# -- a run's early events -------------------------------------------------------------------
def test_a_runs_termination_is_kept_however_many_early_events_came_before_it() -> None:
    app = _app(2, Settings.from_conf({"spark.adaptive.restart-strategy.type": "fixed-delay"}))
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.event(driver.terminated("java.lang.IllegalStateException: boom"))  # restarted
    app.advance(1)
    assert driver.pending_starts
    # The next run reports before its start returns: many progress events, then its end.
    run = "q-run-2"
    for batch in range(100):
        app.event(QueryProgress(0.0, driver.query_id, run, "q", batch, 10, 1.0, 1.0, 0.1, 0.1))
    app.event(QueryTerminated(0.0, driver.query_id, run, None))
    started = app.start(driver)
    assert started.run_id == run
    app.advance(1)
    assert app.state("q") == "Finished"
    last = app.scheduler.query("q").last_progress
    assert last is not None and last.batch_id == 99  # the newest progress was kept


# -- before the first query: autoscaler.initial-slots ------------------------------------
RUN = "0b7c4b0e-5b1f-4f3e-9d55-2a9e1c3d4f6a"  # Spark groups a run's jobs under its run id


def _holding(executors: int = 4, **kw: object) -> App:
    """An autoscaled app holding one slot's executor before its first query; Spark gives
    it ``executors`` one by one (the newest beyond the total are released)."""
    app = App(Settings(), autoscaled=True, start_slots=kw.pop("start_slots", 1), **kw)
    for i in range(1, executors + 1):
        app.add(str(i))
    return app


def test_before_its_first_query_an_autoscaled_app_holds_the_initial_slots_executors() -> None:
    app = _holding()
    assert app.actuator.requested == [1, 1, 1]  # each one that joined beyond the first went
    assert _alive(app) == {"1"}
    app.event(QueryStarted(0.0, "qid", RUN, "q"))  # its run's micro-batch: no change
    app.event(JobStarted(0.0, 1, (1,), job_group=RUN))
    app.advance(UNMANAGED_GRACE / 2)
    assert (app.actuator.requested, _alive(app)) == ([1, 1, 1], {"1"})


def test_the_hold_only_trims_what_spark_gives() -> None:
    app = _holding(3, start_slots=4)  # more than Spark gave: nothing is asked for
    assert (app.actuator.requested, _alive(app)) == ([], {"1", "2", "3"})


def test_the_first_query_ends_the_hold_and_its_end_declares_what_the_app_holds() -> None:
    app = _holding(idle_executors=2)
    driver = FakeDriver(query_info("q", partitions=4))
    app.register(driver)
    assert app.actuator.requested == [1, 1, 1]  # the autoscaler sizes it from here
    app.add("5")  # joined late: the hold no longer releases it
    assert _alive(app) == {"1", "5"} and app.actuator.requested == [1, 1, 1]
    _end(app, driver, "cancelled")
    assert app.actuator.requested[-1] == 2  # as without spark-adaptive, not held again


@pytest.mark.parametrize(("idle", "restored"), [(None, 4), (3, 3)])
def test_a_batch_job_before_any_query_gets_back_what_the_app_holds_without_us(
        idle: int | None, restored: int) -> None:
    app = _holding(idle_executors=idle)
    app.event(JobStarted(0.0, 7, (7,), job_group=None))
    # Without spark.executor.instances (standalone): as many as Spark had given it.
    assert app.actuator.requested == [1, 1, 1, restored]
    app.add("5")
    app.event(JobStarted(0.0, 8, (8,), job_group="nightly"))
    assert app.actuator.requested == [1, 1, 1, restored]  # once, and no longer held


def test_a_query_left_unmanaged_or_a_job_of_no_run_undoes_the_hold_after_the_grace() -> None:
    app = _holding()
    app.event(QueryStarted(0.0, "qid", RUN, "q"))  # started, and never taken over
    app.add("5")  # joined after the query's start: it may run its tasks, and stays
    assert app.actuator.requested == [1, 1, 1] and _alive(app) == {"1", "5"}
    app.advance(UNMANAGED_GRACE + 1)
    assert app.actuator.requested == [1, 1, 1, 4]  # the four Spark gave it at the start

    app = _holding()
    app.event(JobStarted(0.0, 3, (3,), job_group=RUN))  # a group like a run id, no run's
    app.advance(UNMANAGED_GRACE - 1)
    assert app.actuator.requested == [1, 1, 1]  # its run's start may still come
    app.advance(2)
    assert app.actuator.requested == [1, 1, 1, 4]  # none did: the app's own batch work


def test_a_release_refused_during_the_hold_is_not_retried_at_once() -> None:
    app = _holding(2)
    assert app.actuator.requested == [1]
    app.scheduler.release_refused(["2"], "the cluster manager refused")
    app.add("3")
    assert app.actuator.requested == [1]  # not again and again
    app.event(JobStarted(0.0, 7, (7,), job_group=None))
    assert app.actuator.requested == [1, 3]


def test_without_initial_slots_or_in_local_mode_nothing_is_held() -> None:
    plain = App(Settings(), autoscaled=True)
    local = App(Settings(), autoscaled=True, start_slots=1, fixed_slots=4)
    for app in (plain, local):
        for i in range(1, 5):
            app.add(str(i))
        assert app.actuator.requested == []


@pytest.mark.parametrize("group", [None, RUN])
def test_a_job_before_the_hold_trimmed_anything_ends_it(group: str | None) -> None:
    app = _holding(1)  # Spark has given one executor so far: nothing to trim yet
    app.event(JobStarted(0.0, 7, (7,), job_group=group))
    if group is not None:  # like a run id, of no run: judged once the grace is over
        app.advance(UNMANAGED_GRACE + 1)
    app.add("2")  # joins while the app's job runs: its tasks may run there
    assert (app.actuator.requested, _alive(app)) == ([], {"1", "2"})


def _two_queries_on_four(autoscaled: bool) -> tuple[App, FakeDriver, FakeDriver]:
    """Queries a and b of 2 partitions each, on four executors, a micro-batch each done."""
    app = App(Settings.from_conf({}), autoscaled=autoscaled)
    for e in "1234":
        app.add(e)
    da = FakeDriver(query_info("a", partitions=2, checkpoint="/cp/a"), query_id="qa")
    db = FakeDriver(query_info("b", partitions=2, checkpoint="/cp/b"), query_id="qb")
    app.register(da)
    app.register(db)
    for d in (da, db):
        app.batch(d)
    return app, da, db

def test_a_surplus_executor_waits_for_every_query_to_be_between_micro_batches() -> None:
    # One query's progress is a boundary of its own micro-batches only: another query's
    # batch may have tasks on the executor that joined beyond the total.
    app, da, db = _two_queries_on_four(autoscaled=True)
    app.scheduler.set_scaling_target("a", ScalingTarget(2, 2))
    app.scheduler.set_scaling_target("b", ScalingTarget(2, 2))
    assert app.actuator.requested == [4]
    app.add("5")  # the master launched it before it heard the total
    app.event(db.job_started(job_id=77))
    app.event(StageSubmitted(0.0, 77, 0, 4))  # b's batch: tasks on every free executor
    app.event(da.progress())  # a's batch completed; b's still runs
    assert (app.actuator.requested, app.scheduler.executor_count) == ([4], 5)
    app.event(db.progress())  # now neither runs one
    assert (app.actuator.requested, app.scheduler.executor_count) == ([4, 4], 4)


def test_with_batches_that_always_overlap_a_surplus_executor_still_goes_in_the_end() -> None:
    # Two queries whose micro-batches overlap for good leave no moment with none running:
    # after SURPLUS_WAIT the surplus goes at a boundary, as it did before the wait.
    app, da, db = _two_queries_on_four(autoscaled=False)  # adaptive mode alone
    assert app.actuator.requested == [4]
    app.add("5")
    stages = iter(range(500, 10_000))

    def start(d: FakeDriver) -> int:
        s = next(stages)
        app.event(JobStarted(0.0, s, (s,), job_group=d.run_id))
        app.event(StageSubmitted(0.0, s, 0, 2))
        return s

    sb = start(db)
    released_at = None
    for second in range(int(SURPLUS_WAIT) + 10):
        sa = start(da)
        app.event(StageCompleted(0.0, sb, 0, 2, 0, 0, 0, 1.0, task_time=1.0))
        app.event(db.progress())  # b's boundary while a's stage runs
        sb = start(db)
        app.event(StageCompleted(0.0, sa, 0, 2, 0, 0, 0, 1.0, task_time=1.0))
        app.event(da.progress())  # a's boundary while b's stage runs
        if released_at is None and app.scheduler.executor_count == 4:
            released_at = second
        app.advance(1)
    assert released_at is not None and SURPLUS_WAIT - 2 <= released_at <= SURPLUS_WAIT + 2


def test_the_queries_that_finished_first_are_forgotten_first() -> None:
    app = App(Settings.from_conf({}))
    for e in "12":
        app.add(e)
    main = FakeDriver(query_info("main", partitions=2, checkpoint="/cp/main"), query_id="main")
    app.register(main)
    app.batch(main)
    for i in range(RETAINED_FINISHED):
        d = FakeDriver(dataclasses.replace(query_info(f"k{i}", checkpoint=None), name=None),
                       query_id=f"k{i}")
        app.register(d)
        app.event(d.progress())
        app.event(d.terminated())
        app.advance(1)
    app.event(main.terminated())  # the first started, the last finished
    app.advance(1)
    d = FakeDriver(dataclasses.replace(query_info("next", checkpoint=None), name=None),
                   query_id="next")
    app.register(d)
    keys = [q.key for q in app.scheduler.queries()]
    assert "main" in keys and "k0" not in keys and "k1" in keys
