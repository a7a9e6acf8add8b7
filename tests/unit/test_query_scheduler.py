"""The per-query scheduler: the guarded transition, run_if_state, driver callbacks."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

import pytest
from scheduler_fakes import PARAMS, FakeDriver, query_info

from spark_adaptive.core.clock import Action, VirtualTime
from spark_adaptive.core.streaming.allocator import FirstStart
from spark_adaptive.core.streaming.history import LOGGER_NAME, Trigger
from spark_adaptive.core.streaming.query import QueryScheduler, StateChange
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.restart import FixedDelay, NoRestart
from spark_adaptive.core.streaming.settings import SchedulerSettings
from spark_adaptive.core.streaming.states import Executing, SchedulingParams
from spark_adaptive.rest.wire import query_json


class OneQueryApp:
    def __init__(self, share: int | None = 4, executors: int = 2) -> None:
        self.share = share
        self.executor_count = executors
        self.slots = 4
        self.released = 0
        self.started_work = True  # whether a job of the query's run has started

    def slot_share(self, key: str) -> int | None:
        return self.share

    def released_slots(self) -> None:
        self.released += 1

    def warming_up(self) -> bool:
        return False

    def run_started_work(self, run_id: str) -> bool:
        return self.started_work


class Posted:
    """A post function that queues work until the test runs it."""

    def __init__(self) -> None:
        self.queue: list[Action] = []
        self.threads: list[str] = []

    def __call__(self, action: Action) -> None:
        self.threads.append(threading.current_thread().name)
        self.queue.append(action)

    def run(self) -> None:
        while self.queue:
            self.queue.pop(0)()


def make(vt: VirtualTime, driver: FakeDriver | None = None, post: Callable[[Action], None] | None
         = None, app: OneQueryApp | None = None, strategy: object = None) -> QueryScheduler:
    return QueryScheduler(
        driver or FakeDriver(query_info()), requirements=ResourceRequirements(1, 4),
        params=PARAMS, strategy=strategy or NoRestart(),  # type: ignore[arg-type]
        timers=vt, post=post or (lambda fn: vt.call_later(0, fn)), app=app or OneQueryApp())


def run_to_executing(vt: VirtualTime, q: QueryScheduler, driver: FakeDriver,
                     parallelism: int | None = None) -> None:
    """The app's start(): the first run starts at once, and the scheduler takes it over."""
    share = q.slot_share()
    p = parallelism or share or 4
    q.adopt_first_run(FirstStart(p, share or 0, "test"), driver.first_start(p))
    vt.run_pending()
    assert q.state.name == "Executing"


def test_created_then_executing_once_the_first_run_is_taken_over(vt: VirtualTime) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver)
    assert q.state.name == "Created"
    run_to_executing(vt, q, driver)
    assert isinstance(q.state, Executing) and q.state.initial
    with pytest.raises(RuntimeError, match="already taken over"):
        q.adopt_first_run(FirstStart(4, 4, "again"), driver.first_start(4))


def test_transition_into_the_same_state_is_refused(vt: VirtualTime) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver)
    run_to_executing(vt, q, driver)
    with pytest.raises(RuntimeError, match="very state"):
        q.go_to_executing(driver.first_start(4), 4, "again")


def test_reentrant_transition_is_refused(vt: VirtualTime) -> None:
    q = make(vt, app=OneQueryApp(share=None))
    state = q.state

    def leave_and_transition() -> None:
        q.go_to_canceling("from on_leave")

    state.on_leave = leave_and_transition  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="another state transition is in progress"):
        q.go_to_finished("CANCELED", "x")
    assert q.state is state  # nothing changed


def test_run_if_state_drops_actions_of_a_left_state(
        vt: VirtualTime, caplog: pytest.LogCaptureFixture) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver, app=OneQueryApp(share=None))
    q.go_to_restarting("test", backoff=60.0, trigger=Trigger.FAILURE)  # stopped: waits
    old = q.state
    ran: list[int] = []
    timer = q.run_if_state(old, lambda: ran.append(1), 5)
    q.cancel()  # → Finished(CANCELED), which cancels old's timers
    assert timer.cancelled
    with caplog.at_level(logging.DEBUG, logger="spark_adaptive.core.streaming.query"):
        q._if_state(old, lambda: ran.append(2))
    vt.advance(10)
    assert ran == []
    assert "ignoring an action of state Restarting" in caplog.text


def _to_creating(vt: VirtualTime, q: QueryScheduler, post: Posted | None = None) -> None:
    """A restart whose start is asked of the driver (Restarting → CreatingExecutionGraph)."""
    q.go_to_restarting("test", backoff=0.0, trigger=Trigger.FAILURE)
    vt.run_pending()
    if post is not None:
        post.run()
    assert q.state.name == "CreatingExecutionGraph"


def test_driver_callbacks_go_through_post_and_only_once(vt: VirtualTime) -> None:
    post = Posted()
    driver = FakeDriver(query_info())
    q = make(vt, driver, post=post)
    _to_creating(vt, q, post)
    _, on_done = driver.pending_starts[0]
    result = driver.complete_start()
    assert q.state.name == "CreatingExecutionGraph"  # nothing ran on the caller's thread
    on_done(result)  # a buggy driver reports twice
    assert len(post.queue) == 1
    post.run()
    assert q.state.name == "Executing"
    assert q.run_id == result.run_id and q.query_id == "qid-1"


def test_a_driver_that_raises_is_a_failed_start(vt: VirtualTime) -> None:
    class Broken(FakeDriver):
        def start(self, parallelism: int, on_done: Callable[..., None]) -> None:
            raise RuntimeError("py4j gateway gone")

    q = make(vt, Broken(query_info()))
    q.go_to_restarting("test", backoff=0.0, trigger=Trigger.FAILURE)
    vt.run_pending()
    vt.run_pending()
    assert q.state.name == "Finished"
    snap = q.snapshot()
    assert snap.status == "FAILED"
    assert snap.error == "RuntimeError: py4j gateway gone"


def test_events_of_other_runs_are_dropped(vt: VirtualTime) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver)
    run_to_executing(vt, q, driver)
    old_run = driver.terminated("boom")
    stale = type(old_run)(0.0, "qid-1", "some-older-run", "boom")
    q.on_query_event(stale)
    assert q.state.name == "Executing"
    q.on_query_event(driver.terminated(None))
    assert q.state.name == "Finished"


def test_every_transition_is_an_info_decision_and_listeners_hear_it(
        vt: VirtualTime, caplog: pytest.LogCaptureFixture) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver, app=OneQueryApp(share=None))
    heard: list[StateChange] = []
    q.add_listener(heard.append)
    q.add_listener(lambda change: 1 / 0)  # a broken listener does not stop the others
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        q.adopt_first_run(FirstStart(4, 0, "no slot known"), driver.first_start(4))
    why = "started at 4 partitions: no slot known"
    assert heard == [StateChange("q1", "Created", "Executing", why)]
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    assert lines == [f"query q1: Created -> Executing: {why}"]
    assert q.snapshot().last_decision is not None
    assert q.snapshot().last_decision.reason == why  # type: ignore[union-attr]


def test_snapshot_is_json_able_and_shows_the_running_partitions(vt: VirtualTime) -> None:
    driver = FakeDriver(query_info(name="orders"))
    q = make(vt, driver, app=OneQueryApp(share=3, executors=2))
    assert q.snapshot().parallelism == 0
    run_to_executing(vt, q, driver)
    d = query_json(q.snapshot())
    json.dumps(d)
    assert {k: d[k] for k in ("id", "name", "state", "parallelism", "slots", "executors")} == {
        "id": "qid-1", "name": "orders", "state": "Executing", "parallelism": 3, "slots": 3,
        "executors": 2}
    assert d["requirements"] == {"parallelism": {"lowerBound": 1, "upperBound": 4}}
    assert d["lastDecision"]["action"] == "Created -> Executing"
    assert d["counters"] == {"restarts": 0, "rescales": 0, "liveRescales": 0, "failures": 0}


def test_failed_query_keeps_the_original_error(vt: VirtualTime) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver)
    run_to_executing(vt, q, driver)
    q.on_query_event(driver.terminated("java.lang.ArithmeticException: / by zero",
                                       "DIVIDE_BY_ZERO"))
    vt.run_pending()
    snap = q.snapshot()
    assert (snap.state, snap.status) == ("Finished", "FAILED")
    assert snap.error == "java.lang.ArithmeticException: / by zero"
    assert snap.error_class == "DIVIDE_BY_ZERO"
    assert snap.counters.failures == 1


def test_query_that_cannot_repartition_restarts_at_its_partitions(vt: VirtualTime) -> None:
    from spark_adaptive.core.ports import RepartitionSupport

    driver = FakeDriver(query_info(), support=RepartitionSupport(False, "HDFS state store"))
    app = OneQueryApp(share=4)
    q = make(vt, driver, app=app, strategy=FixedDelay(1, 0.0))
    run_to_executing(vt, q, driver)
    app.share = 2
    q.on_query_event(driver.terminated("boom"))
    vt.run_pending()  # Restarting, backoff 0; 2 slots are not desired -> waiting
    vt.advance(10)  # submission stabilization
    assert driver.calls[-1] == ("start", 4) and driver.pending_starts
    assert q.start_parallelism(2)[1].startswith("keeps 4 partitions (HDFS state store)")


def test_executing_gets_the_started_parallelism(vt: VirtualTime) -> None:
    driver = FakeDriver(query_info())
    q = make(vt, driver, app=OneQueryApp(share=3))
    run_to_executing(vt, q, driver)
    assert isinstance(q.state, Executing)
    assert (q.state.parallelism, q.state.slots) == (3, 3)


def test_scheduling_params_from_settings() -> None:
    p = SchedulingParams.of(SchedulerSettings(), trigger_interval=2.0)
    assert (p.resource_wait_timeout, p.submission_stabilization, p.cooldown,
            p.executing_stabilization, p.trigger_max_delay) == (300.0, 10.0, 30.0, 60.0, 6.0)
    assert SchedulingParams.of(SchedulerSettings(), 0.0).trigger_max_delay == 0.0
    four = SchedulerSettings(trigger_max_delay=4.0)
    assert SchedulingParams.of(four, 2.0).trigger_max_delay == 4.0


def test_fired_timers_are_forgotten_by_their_state(vt: VirtualTime) -> None:
    q = make(vt, app=OneQueryApp(share=None))
    q.go_to_waiting_for_resources("test")
    state = q.state
    for _ in range(100):
        q.run_if_state(state, lambda: None, 1.0)
        vt.advance(1)
    assert len(state._timers) <= 2  # the resource-wait timeout, not 100 fired ones


def test_slots_in_use_drop_only_when_the_run_lets_go(vt: VirtualTime) -> None:
    """The app may release executors only once a query's run no longer uses them."""
    from spark_adaptive.core.ports import RepartitionSupport

    driver = FakeDriver(query_info(), support=RepartitionSupport(False, "HDFS state store"))
    app = OneQueryApp(share=4)
    q = make(vt, driver, app=app)
    assert q.slots_in_use == 0
    run_to_executing(vt, q, driver)
    assert (q.slots_in_use, app.released) == (4, 0)
    app.share = 2  # 4 partitions run balanced on 2 slots: a live rescale onto fewer
    q.on_resources_changed()
    # ... while the first micro-batch runs on the 4: they go once it has completed
    assert (q.slots_in_use, app.released) == (4, 0)
    q.on_query_event(driver.progress())
    assert (q.slots_in_use, app.released) == (2, 1)
    app.share = 4  # and back onto more: nothing released
    q.on_resources_changed()
    assert (q.slots_in_use, app.released) == (4, 1)
    q.cancel()  # Canceling stops the run; its slots are free once the stop is reported
    assert q.slots_in_use == 4 and app.released == 1
    driver.complete_stop()
    vt.run_pending()
    assert (q.state.name, q.slots_in_use, app.released) == ("Finished", 0, 2)


def test_a_run_with_no_job_started_lets_its_old_slots_go_at_once(vt: VirtualTime) -> None:
    """Before any job of the run has started (its first micro-batch is being planned), no
    task runs anywhere: a live rescale onto fewer slots frees the others at once, so that
    the first micro-batch runs on the slots it was given."""
    from spark_adaptive.core.ports import RepartitionSupport

    driver = FakeDriver(query_info(), support=RepartitionSupport(False, "HDFS state store"))
    app = OneQueryApp(share=4)
    app.started_work = False
    q = make(vt, driver, app=app)
    run_to_executing(vt, q, driver)
    app.share = 2
    q.on_resources_changed()
    assert (q.slots_in_use, app.released) == (2, 1)  # let go at once
    app.started_work = True  # its first job started: from now on a batch may run on them
    app.share = 4
    q.on_resources_changed()
    app.share = 2
    q.on_resources_changed()
    assert (q.slots_in_use, app.released) == (4, 1)  # held until a micro-batch boundary
