"""The autoscaler at work in the scheduler: samples from events, targets carried out.

An application on virtual time (scheduler_fakes.App) with one query of 8
partitions; :class:`Load` plays its micro-batches: each second a batch reads what
arrived, its stages' task time is what those rows cost on a slot, and Spark's job
and stage events say so, as the shim reports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.autoscaler import AutoscalerConfig
from spark_adaptive.core.autoscaler.policy import QueryAutoscaler
from spark_adaptive.core.events import (
    ExecutorAdded,
    JobStarted,
    QueryProgress,
    SourceProgress,
    StageCompleted,
    StageSubmitted,
)
from spark_adaptive.core.ports import StartedBatch
from spark_adaptive.core.streaming.autoscaling import Autoscaling, _useful_slots, _Watched
from spark_adaptive.core.streaming.history import Kind, Trigger
from spark_adaptive.core.streaming.query import QueryScheduler
from spark_adaptive.core.streaming.requirements import ResourceRequirements, ScalingTarget
from spark_adaptive.core.streaming.scheduler import RETAINED_FINISHED
from spark_adaptive.settings import Settings

#: Each row costs this many seconds of one task slot.
COST = 0.01
QUICK = dict(enabled=True, evaluation_interval=5.0, metrics_window=20.0,
             stabilization_interval=5.0, scale_down_interval=30.0,
             observed_scalability=False, effectiveness_detection=False)


class Load:
    """Micro-batches of a query: ``rate`` rows per second, ``COST`` slot-seconds a row."""

    def __init__(self, app: App, driver: FakeDriver, autoscaling: Autoscaling,
                 key: str = "q", query_id: str = "qid-1") -> None:
        self.app, self.driver, self.autoscaling = app, driver, autoscaling
        self.key, self.query_id = key, query_id
        self.rate = 50.0
        self.overhead = 0.0  # slot-seconds every batch costs whatever its rows (its tasks')
        self.tasks: int | None = None  # its one stage's tasks (its source's); None: partitions
        self.batch = 0
        self.stage = 0

    def second(self) -> None:
        q = self.app.scheduler.query(self.key)
        slots = max(1, q.running_slots)
        rows = self.rate
        busy = self.overhead + rows * COST
        tasks = self.tasks or q.partitions
        duration = max(0.1, busy / min(slots, tasks))
        run = self.driver.run_id
        assert run is not None
        self.stage += 1
        for event in (JobStarted(0.0, self.stage, (self.stage,), job_group=run),
                      StageSubmitted(0.0, self.stage, 0, tasks),
                      StageCompleted(0.0, self.stage, 0, tasks, 0, 0, 0, duration,
                                     task_time=busy),
                      QueryProgress(0.0, self.query_id, run, self.key, self.batch, int(rows),
                                    rows, rows / duration, duration, duration)):
            self.app.event(event)
            self.autoscaling.on_event(event)
        self.batch += 1
        self.app.advance(1.0)

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.second()


def _setup(executors: int = 1, resource_wait: float = 60.0, conf: dict[str, str] | None = None,
           partitions: int = 8, **config: Any) -> tuple[App, FakeDriver, Autoscaling, Load]:
    acting = AutoscalerConfig(**{**QUICK, **config}).acting  # as the runtime builds it
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "5s", **(conf or {})}), autoscaled=acting)
    for e in range(1, executors + 1):
        app.add(str(e))
    driver = FakeDriver(query_info("q", partitions=partitions))
    app.register(driver)
    autoscaling = Autoscaling(AutoscalerConfig(**{**QUICK, **config}), app.scheduler, app.vt,
                              resource_wait=resource_wait)
    return app, driver, autoscaling, Load(app, driver, autoscaling)


def test_a_query_not_decided_for_keeps_its_slots_and_holds_up_no_other_query() -> None:
    # Without initial-slots a query whose load stays within the band never gets a target;
    # the app declared nothing until every query had one, so the other never grew.
    app, driver, autoscaling, load = _setup(executors=2)
    calm = FakeDriver(query_info("q2", partitions=8, checkpoint="/cp/q2"), query_id="qid-2")
    app.register(calm)
    load2 = Load(app, calm, autoscaling, key="q2", query_id="qid-2")
    load2.rate = 70.0  # 0.7 of its one slot: within the band
    load.rate = 300.0  # three slots' worth
    for _ in range(100):
        load.second()
        load2.second()
    q, q2 = app.scheduler.query("q"), app.scheduler.query("q2")
    assert q2.target is None and q2.running_slots == 1
    assert q.target is not None and q.target.slots >= 4, autoscaling.status(q).decision
    assert app.actuator.requested[-1] == q.target.slots + 1
    for e in range(3, q.target.slots + 2):
        app.add(str(e))
    for _ in range(10):
        load.second()
        load2.second()
    assert (q.snapshot().slots, q2.snapshot().slots) == (q.target.slots, 1)


def test_recommend_only_leaves_the_app_as_without_the_autoscaler() -> None:
    # A PUT that lowers the bounds releases the executors beyond them, as with no autoscaler.
    def requests(config: AutoscalerConfig | None) -> list[int]:
        app = App(Settings.from_conf({}), autoscaled=config is not None and config.acting)
        for e in "1234":
            app.add(e)
        if config is not None:
            Autoscaling(config, app.scheduler, app.vt)
        d = FakeDriver(query_info("q", partitions=8))
        app.register(d)
        for _ in range(3):
            app.batch(d)
            app.advance(1)
        app.scheduler.update_requirements("q", 1, 2)
        for _ in range(3):
            app.batch(d)
            app.advance(1)
        return app.actuator.requested

    assert AutoscalerConfig(enabled=True).acting
    assert not AutoscalerConfig(enabled=True, scaling_enabled=False).acting
    off = requests(None)
    assert off[-1] == 2
    assert requests(AutoscalerConfig(enabled=True, scaling_enabled=False)) == off


def test_a_load_step_up_takes_executors_and_a_step_down_gives_them_back() -> None:
    app, driver, autoscaling, load = _setup()
    load.run(40)  # 50 rows/s at 10 ms a row: half a slot
    assert app.scheduler.query("q").target is None or app.scheduler.query("q").target.slots == 1
    load.rate = 300.0  # three slots' worth
    load.run(30)
    q = app.scheduler.query("q")
    assert q.target is not None and q.target.slots >= 4, autoscaling.status(q).decision
    wanted = q.target.slots
    assert app.actuator.requested[-1] == wanted  # executors asked for
    for e in range(2, wanted + 1):
        app.add(str(e))
    load.run(10)
    assert q.snapshot().slots == wanted
    ups = [r for r in app.scheduler.history("q") if r.trigger is Trigger.AUTOSCALER]
    assert ups and all(r.kind == "live" for r in ups)  # 8 partitions kept: no restart
    load.rate = 50.0
    load.run(25)  # a scale-down waits for the scale-down interval (30 s)
    assert q.target.slots == wanted
    load.run(60)
    assert q.target.slots < wanted
    assert app.actuator.requested[-1] == q.target.slots  # executors given back
    assert driver.calls == [("start", 8)]  # never restarted
    status = autoscaling.status(q)
    assert status.decision is not None and status.decision.inputs.true_rate_per_slot
    assert status.next_evaluation is not None and 0 <= status.next_evaluation <= 5.0


def test_recommend_only_decides_and_changes_nothing() -> None:
    app, driver, autoscaling, load = _setup(executors=2, scaling_enabled=False)
    load.rate = 300.0
    load.run(60)
    q = app.scheduler.query("q")
    decision = autoscaling.status(q).decision
    assert decision is not None and not decision.applied
    assert decision.reason.startswith("utilization 1.50 above 0.95"), decision.reason
    assert driver.calls == [("start", 2)]  # started as adaptive mode starts it
    # The app runs as with the autoscaler off: its bounds' executors asked for, no rescale
    # of the autoscaler's.
    assert q.target is None and app.actuator.requested == [8]
    assert not [r for r in app.scheduler.history("q") if r.trigger is Trigger.AUTOSCALER]


def test_a_failing_policy_leaves_the_queries_as_they_are(caplog: Any) -> None:
    app, driver, autoscaling, load = _setup()

    def broken(q: Any) -> None:
        raise RuntimeError("a policy bug")

    autoscaling.evaluate = broken  # type: ignore[method-assign]
    load.rate = 300.0
    load.run(30)
    assert app.scheduler.query("q").target is None
    assert "the autoscaler's evaluation failed" in caplog.text
    assert driver.calls == [("start", 8)]


def test_a_fixed_cost_per_batch_is_not_taken_for_a_cost_per_row() -> None:
    # Every batch costs 0.5 slot-s whatever its rows. At 10 rows/s a slot seems to process
    # 10 / 0.6 = 17 rows a busy second; at 150 rows/s the work is 0.5 + 1.5 = 2 slots'
    # worth, not the 150 / 17 = 9 slots that rate would ask for.
    app, driver, autoscaling, load = _setup()
    load.overhead, load.rate = 0.5, 10.0
    load.run(40)
    load.rate = 150.0
    q = app.scheduler.query("q")
    for _ in range(20):
        load.second()
        decision = autoscaling.status(q).decision
        if decision is not None and decision.outcome == "scale-up":
            break
    assert decision is not None and decision.outcome == "scale-up", decision
    assert "slot-s a batch" in decision.inputs.rate_source
    assert q.target is not None and 2 <= q.target.slots <= 4, decision


def test_executors_that_do_not_come_stop_holding_the_policy_back() -> None:
    app, driver, autoscaling, load = _setup(resource_wait=10.0)
    load.rate = 300.0
    load.run(30)
    q = app.scheduler.query("q")
    assert q.target is not None and q.target.slots >= 4
    app.add("2")  # one of the executors asked for comes; the others never do
    load.run(8)
    assert autoscaling.status(q).waiting_for_resources
    assert autoscaling._view(q, autoscaling._watch(q)).rescale_in_flight  # still coming
    load.run(15)  # no executor for the resource wait: the policy decides again
    view = autoscaling._view(q, autoscaling._watch(q))
    assert not view.rescale_in_flight and view.cluster_max_slots == 2
    ups = [r for r in app.scheduler.history("q") if r.trigger is Trigger.AUTOSCALER]
    assert ups and ups[-1].to_slots == 2 and ups[-1].outcome == "completed"


def _rescaled(app: App, load: Load, trigger: Trigger, kind: Kind, seconds: float) -> None:
    """A rescale of the query opened, done ``seconds`` later, then 5 s of batches."""
    history = app.scheduler.query("q").history
    history.open(trigger, kind, from_parallelism=8, to_parallelism=8, from_slots=1,
                 to_slots=1, reason=f"a {kind} rescale ({trigger.value})")
    app.advance(seconds)
    history.complete_pending()
    load.run(5)


def _price(autoscaling: Autoscaling, app: App) -> tuple[tuple[float, ...], float]:
    """The restart downtimes the view carries, and the downtime the policy prices."""
    q = app.scheduler.query("q")
    watched = autoscaling._watch(q)
    view = autoscaling._view(q, watched)
    return view.restart_downtimes, watched.policy._downtime(view)


def test_a_restart_after_a_failure_does_not_price_a_rescale_s_restart() -> None:
    app, driver, autoscaling, load = _setup(restart_time=10.0)
    load.run(30)
    # the restart strategy's delay, then the first batch
    _rescaled(app, load, Trigger.FAILURE, "restart", 195.0)
    assert _price(autoscaling, app) == ((), 10.0)  # restart.time


def test_a_rescale_s_restart_prices_the_next_even_once_the_history_has_dropped_it() -> None:
    app, driver, autoscaling, load = _setup(restart_time=10.0)
    load.run(30)
    _rescaled(app, load, Trigger.AUTOSCALER, "restart", 45.0)
    assert _price(autoscaling, app) == ((45.0,), 45.0)
    for _ in range(100):  # live rescales push it out of the history's newest records
        _rescaled(app, load, Trigger.NEW_RESOURCES, "live", 0.0)
    assert _price(autoscaling, app) == ((), 45.0)


def test_a_query_started_again_under_its_key_is_watched_afresh() -> None:
    app, driver, autoscaling, load = _setup(executors=4, initial_slots=1)
    load.run(6)
    old = app.scheduler.query("q")
    assert old.target is not None and old.target.slots == 1
    kept = autoscaling._watch(old)
    app.scheduler.cancel("q")  # the app stops it and starts it again from its checkpoint,
    app.stop(driver)  # before the next evaluation
    assert old.finished
    driver2 = FakeDriver(query_info("q", partitions=8))
    app.register(driver2)
    new = app.scheduler.query("q")
    # watched afresh as the scheduler takes it over, and given initial-slots at once
    fresh = autoscaling._watched(new)
    assert new is not old and fresh is not None and fresh is not kept and fresh.query is new
    assert new.target is not None and new.target.slots == 1
    Load(app, driver2, autoscaling).run(6)
    watched = autoscaling._watch(new)
    assert watched is not kept and watched.query is new
    assert new.target is not None and new.target.slots == 1  # initial-slots, once more


def test_one_query_s_give_up_caps_only_its_own_slots() -> None:
    app, driver, autoscaling, load = _setup(resource_wait=10.0)
    load.rate = 300.0
    load.run(30)
    q = app.scheduler.query("q")
    app.add("2")
    load.run(25)  # no more executors for the resource wait: this query's cap is 2
    watched = autoscaling._watch(q)
    assert autoscaling._view(q, watched).cluster_max_slots == 2
    q2 = app.register(FakeDriver(query_info("q2", partitions=8)))
    assert autoscaling._view(q2, autoscaling._watch(q2)).cluster_max_slots is None
    autoscaling.on_event(ExecutorAdded(0.0, "3", "host-3", 1))  # the cluster changed
    assert watched.cluster_max_slots is None


def test_an_autoscaled_query_follows_unbalanced_executors_live_until_its_first_target() -> None:
    # Executors registering after the start, before the first batch showed how the query
    # runs: three for eight partitions would restart an adaptive query at three. Under the
    # autoscaler the partition count is its to change, so the query follows them live.
    app, driver, autoscaling, load = _setup()
    app.add("2")
    app.add("3")
    app.advance(15.0)
    q = app.scheduler.query("q")
    assert driver.calls == [("start", 8)]
    assert q.snapshot().slots == 3 and q.partitions == 8


def test_initial_slots_start_a_query_small_and_its_load_scales_it_up() -> None:
    app, driver, autoscaling, load = _setup(executors=4, initial_slots=1)
    q = app.scheduler.query("q")
    assert q.snapshot().slots == 4
    load.run(6)  # the first evaluation: 1 slot, live, and three executors given back
    assert q.target is not None and (q.target.slots, q.target.partitions) == (1, 8)
    assert app.actuator.requested[-1] == 1
    for e in ("2", "3", "4"):
        app.remove(e)
    load.run(5)
    assert q.snapshot().slots == 1 and driver.calls == [("start", 8)]
    first = [r for r in app.scheduler.history("q") if r.trigger is Trigger.AUTOSCALER]
    assert [(r.kind, r.to_slots) for r in first] == [("live", 1)]
    load.rate = 300.0  # three slots' worth: scaled up from its load as usual
    load.run(30)
    assert q.target.slots >= 4, autoscaling.status(q).decision


def test_initial_slots_are_given_as_the_query_is_taken_over_before_its_first_task() -> None:
    # The autoscaler exists before the app starts its query (as at activation): the query
    # gets initial-slots as the scheduler takes it over, not at the first evaluation, and
    # the other executors go at once: its first micro-batch has no job yet, so no task of
    # it runs on them, and it runs on the one slot instead of being spread over four.
    app = App(Settings.from_conf({}), autoscaled=True)
    for e in ("1", "2", "3", "4"):
        app.add(e)
    autoscaling = Autoscaling(AutoscalerConfig(**{**QUICK, "initial_slots": 1}),
                              app.scheduler, app.vt)
    driver = FakeDriver(query_info("q", partitions=8))
    q = app.register(driver)
    assert q.target is not None and q.target.slots == 1 and q.slots_in_use == 1
    assert app.actuator.requested == [1] and app.scheduler.resources.slots == 1
    assert app.vt.now() < QUICK["evaluation_interval"] and autoscaling._watched(q) is not None
    assert [(r.kind, r.to_slots) for r in app.scheduler.history("q")] == [("initial", 1)]

    # Once a job of its run has started, a scale-down holds the slots that batch runs on.
    app2 = App(Settings.from_conf({}), autoscaled=True)
    for e in ("1", "2", "3", "4"):
        app2.add(e)
    driver2 = FakeDriver(query_info("q", partitions=8))
    q2 = app2.register(driver2)
    assert driver2.run_id is not None
    app2.event(JobStarted(0.0, 1, (1,), job_group=driver2.run_id))
    Autoscaling(AutoscalerConfig(**{**QUICK, "initial_slots": 1}), app2.scheduler,
                app2.vt).evaluate(q2)
    assert q2.target is not None and q2.target.slots == 1 and q2.slots_in_use == 4
    assert app2.actuator.requested == [4]  # the four stay until that batch completes


def test_at_take_over_initial_slots_keep_the_bounds_and_recommend_only_changes_nothing(
        ) -> None:
    def take_over(requirements: Any = None, **config: Any) -> tuple[App, Any]:
        app = App(Settings.from_conf({}), autoscaled=True)
        for e in ("1", "2", "3", "4"):
            app.add(e)
        Autoscaling(AutoscalerConfig(**{**QUICK, "initial_slots": 1, **config}),
                    app.scheduler, app.vt)
        return app, app.register(FakeDriver(query_info("q", partitions=8)), requirements)

    app, q = take_over(ResourceRequirements(2, 8))  # a lower bound above initial-slots
    assert q.target is not None and q.target.slots == 2 and app.actuator.requested == [2]
    app, q = take_over(scaling_enabled=False)
    assert q.target is None and app.actuator.requested == [] and q.snapshot().slots == 4


def test_initial_slots_keep_within_the_bounds_and_do_nothing_in_recommend_only_mode() -> None:
    app, driver, autoscaling, load = _setup(executors=4, initial_slots=1)
    app.scheduler.update_requirements("q", 2, 8)
    load.run(6)
    q = app.scheduler.query("q")
    assert q.target is not None and q.target.slots == 2
    app, driver, autoscaling, load = _setup(executors=4, initial_slots=1, scaling_enabled=False)
    load.run(20)
    # As with the autoscaler off: started on its 4 slots' share, its bounds' executors asked.
    assert app.scheduler.query("q").target is None and app.actuator.requested == [8]
    assert driver.calls == [("start", 4)]


class FakeOffsetLog:
    """The query's offset log: what each batch reads, as the source's row counter."""

    def __init__(self) -> None:
        self.entries: dict[int, StartedBatch] = {}
        self.reads: list[tuple[str, int]] = []

    def read(self, checkpoint_location: str, batch_id: int,
             on_done: Callable[[StartedBatch | None], None]) -> None:
        self.reads.append((checkpoint_location, batch_id))
        on_done(self.entries.get(batch_id))


def test_a_jump_is_acted_on_when_the_batch_that_reads_it_starts() -> None:
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "5s"}), autoscaled=True)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=8))
    app.register(driver)
    offsets = FakeOffsetLog()
    posted: list[Callable[[], None]] = []  # what the log's thread hands to the scheduler's
    autoscaling = Autoscaling(AutoscalerConfig(**QUICK), app.scheduler, app.vt, offsets=offsets,
                              post=posted.append)
    run = driver.run_id
    assert run is not None
    q = app.scheduler.query("q")
    total, stage = 0, 0

    def post(event: Any) -> None:
        app.event(event)
        autoscaling.on_event(event)

    def batch(batch_id: int, rows: int, duration: float = 0.5) -> None:
        nonlocal total, stage
        stage += 1
        src = SourceProgress("counter", rows, None, None, (), f'{{"rows": {total + rows}}}',
                             None, f'{{"rows": {total}}}')
        total += rows
        post(JobStarted(app.vt.now(), stage, (stage,), job_group=run))
        post(StageCompleted(0.0, stage, 0, 8, 0, 0, 0, duration, task_time=rows * COST))
        post(QueryProgress(app.vt.now(), "qid-1", run, "q", batch_id, rows, float(rows),
                           rows / duration, duration, duration, sources=(src,)))
        app.advance(1.0)

    for b in range(40):  # 50 rows/s at 10 ms a row: half a slot, settled
        batch(b, 50)
    for answer in posted:  # no entries: nothing to tell
        answer()
    posted.clear()
    assert q.target is None or q.target.slots == 1
    reads = len(offsets.reads)
    # Batch 40 starts reading 3 s of 300 rows/s (three slots' worth); it runs long, and
    # no progress says so yet.
    started = app.vt.now() - 1.0 + 3.0
    offsets.entries[40] = StartedBatch(40, started, (f'{{"rows": {total + 900}}}',))
    app.advance(3.0)
    assert q.target is None or q.target.slots == 1  # the completed batches show nothing
    for job in range(3):  # its jobs: the log is read once
        post(JobStarted(app.vt.now(), 1000 + job, (1000 + job,), job_group=run))
    assert offsets.reads[reads:] == [("/cp/q1", 40)]
    answers = list(posted)
    posted.clear()
    assert len(answers) == 1 and (q.target is None or q.target.slots == 1)  # not yet told
    answers[0]()  # on the scheduler thread
    assert q.target is not None and q.target.slots >= 4, autoscaling.status(q).decision
    decision = autoscaling.status(q).decision
    assert decision is not None and decision.inputs.input_rate == 300.0
    # Another run's jobs, or jobs of no group, read nothing
    post(JobStarted(app.vt.now(), 2000, (2000,), job_group="another-run"))
    post(JobStarted(app.vt.now(), 2001, (2001,)))
    assert len(offsets.reads) == reads + 1
    # Batch 40 completes; its executors are still starting when batch 41 starts reading
    # 3 s of 600 rows/s: twice what the scale-up in flight was sized for.
    first = q.target.slots
    batch(40, 300, duration=3.0)  # progress: 300 rows/s, as the scale-up was sized for
    offsets.entries[41] = StartedBatch(41, app.vt.now() - 1.0 + 3.0,
                                       (f'{{"rows": {total + 1800}}}',))
    app.advance(3.0)
    post(JobStarted(app.vt.now(), 3000, (3000,), job_group=run))
    for answer in posted:
        answer()
    again = autoscaling.status(q).decision
    assert again is not None and again.inputs.input_rate_started == 600.0, again
    assert q.target.slots > first and app.actuator.requested[-1] == q.target.slots


@pytest.mark.parametrize("tracking, delay, expected", [
    (True, 7, 7.0), (False, 7, 10.0),
    (True, 25, 10.0),  # after the resource wait: the cluster was full, not starting
])
def test_the_executors_start_up_is_measured_from_the_scale_up_to_their_tasks(
        tracking: bool, delay: int, expected: float) -> None:
    app, driver, autoscaling, load = _setup(executor_startup_time=10.0, resource_wait=20.0,
                                            restart_time_tracking=tracking)
    load.run(40)
    load.rate = 300.0
    q = app.scheduler.query("q")
    for _ in range(30):
        load.second()
        if q.target is not None and q.target.slots > 1:
            break
    decision = autoscaling.status(q).decision
    assert decision is not None and decision.outcome == "scale-up"
    assert decision.inputs.executor_startup == 10.0  # none observed yet: the key
    load.run(delay)  # the executors take this long to come
    for e in range(2, q.target.slots + 1):
        app.add(str(e))
    load.run(40)
    later = autoscaling.status(q).decision
    assert later is not None and later.inputs.executor_startup is not None
    # from the decision to the live rescale that reached its slots: 7 s and the second of
    # the batch that ran meanwhile
    # from the decision to the live rescale that reached its slots
    assert later.inputs.executor_startup == expected


@pytest.mark.parametrize("started", [False, True])
def test_a_batch_is_stuck_only_once_its_first_job_started(started: bool) -> None:
    """No completed batch for 30 s: the input stopped (Spark starts no batch), or with a
    job of the next batch started (no offset log read) that batch holds the query up."""
    app, driver, autoscaling, load = _setup()
    load.run(40)  # 50 rows/s: half a slot
    if started:
        event = JobStarted(0.0, 999, (999,), job_group=driver.run_id)
        app.event(event)
        autoscaling.on_event(event)
    app.advance(30.0)
    decision = autoscaling.status(app.scheduler.query("q")).decision
    assert decision is not None and decision.inputs is not None
    if started:
        assert decision.inputs.backlog > 50 * 20  # the rows arrived since it started
    else:
        assert decision.inputs.backlog == 0 and decision.outcome != "scale-up"


def _scale_up_waiting() -> tuple[Any, Any, Any, Any, Any]:
    """Two executors, then a load whose scale-up asks for executors that never come."""
    app, driver, autoscaling, load = _setup(executors=2)
    load.run(40)
    load.rate = 400.0
    load.run(20)
    return app, driver, autoscaling, load, app.scheduler.query("q")


def test_an_executor_lost_while_a_scale_up_waits_is_resources_lost() -> None:
    app, driver, autoscaling, load, q = _scale_up_waiting()
    assert q.target is not None and q.target.slots > 2  # its executors never come
    load.run(3)
    app.remove("2", "worker lost")
    load.run(30)  # past the executor-loss grace
    last = app.scheduler.history("q")[-1]
    assert (last.kind, last.from_slots, last.to_slots) == ("live", 2, 1)
    assert last.trigger is Trigger.RESOURCES_LOST  # away from the target: not its doing
    app.add("3")
    load.run(2)
    last = app.scheduler.history("q")[-1]
    assert (last.from_slots, last.to_slots, last.trigger) == (1, 2, Trigger.AUTOSCALER)


def test_a_finished_query_waits_for_no_resources() -> None:
    app, driver, autoscaling, load, q = _scale_up_waiting()
    assert autoscaling.status(q).waiting_for_resources
    app.event(driver.terminated())  # the query ends by itself
    assert q.finished and q.target is None
    assert not autoscaling.status(q).waiting_for_resources
    load_after = autoscaling.status(q)
    app.advance(10)  # evaluations after its end
    assert not autoscaling.status(q).waiting_for_resources
    assert autoscaling.status(q).decisions == load_after.decisions


def test_decision_counts_go_on_when_a_query_starts_again_from_its_checkpoint() -> None:
    app, driver, autoscaling, load = _setup(executors=2)
    load.run(40)
    q = app.scheduler.query("q")
    before = dict(autoscaling.status(q).decisions)
    assert sum(before.values()) > 0
    app.event(driver.terminated())
    app.advance(10)  # evaluated while finished
    driver2 = FakeDriver(query_info("q", partitions=8))  # the same checkpoint: the same key
    app.register(driver2)
    q2 = app.scheduler.query("q")
    assert q2 is not q and dict(autoscaling.status(q2).decisions) == before
    Load(app, driver2, autoscaling).run(20)
    after = dict(autoscaling.status(q2).decisions)
    assert all(after.get(k, 0) >= n for k, n in before.items())
    assert sum(after.values()) > sum(before.values())


def test_what_is_kept_for_a_query_the_scheduler_forgot_goes_with_it() -> None:
    app, driver, autoscaling, load = _setup(executors=2)
    load.run(20)
    assert "q" in autoscaling._queries and "q" in autoscaling._outcomes
    for i in range(2):  # two more starts of its name: the first run is forgotten
        app.event(driver.terminated())
        driver = FakeDriver(query_info(f"q{i}", name="q", checkpoint=f"/cp/q{i}"),
                            query_id=f"q{i}")
        app.register(driver)
    assert "q" not in {x.key for x in app.scheduler.queries()}
    app.advance(10)
    assert "q" not in autoscaling._queries and "q" not in autoscaling._outcomes


@pytest.mark.parametrize("bounds", ["default", "put", "conf"])
def test_a_stateless_query_runs_its_source_s_tasks_on_more_slots_than_its_default_bound(
        bounds: str) -> None:
    # 24 source partitions on 8 configured ones: its one stage runs 24 tasks, which plain
    # Spark runs on as many executors. Its default upper bound (8) does not cap its slots
    # there; bounds of the user's own (put, or set with the key) do.
    conf = {"spark.adaptive.parallelism.upper-bound": "8"} if bounds == "conf" else {}
    app, driver, autoscaling, load = _setup(conf=conf)
    q = app.scheduler.query("q")
    assert q.requirements == ResourceRequirements(1, 8)
    if bounds == "put":
        app.scheduler.update_requirements("q", 1, 8)
    load.tasks = 24
    load.run(40)
    load.rate = 1600.0  # 16 slots' worth
    load.run(30)
    assert q.target is not None
    wanted = q.target.slots
    if bounds != "default":
        assert wanted == 8 and app.actuator.requested[-1] == 8
        return
    assert wanted == 24, autoscaling.status(q).decision  # 24 tasks in one wave
    assert app.actuator.requested[-1] == 24 and q.allocation == ResourceRequirements(1, 24)
    assert autoscaling.status(q).waiting_for_resources  # 1 executor of 24: they are coming
    for e in range(2, 25):
        app.add(str(e))
    load.run(10)
    assert q.snapshot().slots == 24 and q.requirements == ResourceRequirements(1, 8)
    assert not autoscaling.status(q).waiting_for_resources
    assert driver.calls == [("start", 8)]  # followed live: never restarted
    # The user puts the bounds it shows: they are the user's own now, and cap it.
    app.scheduler.update_requirements("q", 1, 8)
    assert q.target == ScalingTarget(8, 8) and q.allocation == ResourceRequirements(1, 8)
    load.run(1)  # the executors go once the micro-batch that may use them has completed
    assert q.snapshot().slots == 8 and app.actuator.requested[-1] == 8
    load.run(30)
    assert q.snapshot().slots == 8 and app.actuator.requested[-1] == 8


def test_a_stateless_query_s_source_tasks_count_up_to_max_parallelism() -> None:
    app, driver, autoscaling, load = _setup(conf={"spark.adaptive.max-parallelism": "16"})
    q = app.scheduler.query("q")
    load.tasks = 24
    load.run(40)
    load.rate = 1600.0
    load.run(30)
    assert q.slot_upper == 16
    # Past its default bound (8), not past max-parallelism: 12 slots run the 24 tasks in two
    # waves, as 16 would (24, one wave, is what it takes without the cap).
    assert q.target is not None and q.target.slots == 12, autoscaling.status(q).decision
    assert app.actuator.requested[-1] == q.target.slots
    for e in range(2, q.target.slots + 1):
        app.add(str(e))
    load.run(10)
    assert q.snapshot().slots == q.target.slots and not autoscaling.status(q).waiting_for_resources


def test_a_stateless_query_s_task_cap_holds_once_its_slots_match_it() -> None:
    q = SimpleNamespace(observed_tasks=42, running_slots=15,  # 42 source partitions
                        tasks_follow_slots=True)
    watched = _Watched(cast(QueryAutoscaler, None), cast(QueryScheduler, q), {})
    assert _useful_slots(cast(QueryScheduler, q), watched) == 42
    q.running_slots = 42  # the autoscaler gave it a slot per task: still its cap
    assert _useful_slots(cast(QueryScheduler, q), watched) == 42
    q.observed_tasks = None  # a batch of more stages (foreachBatch's extra job): still
    assert _useful_slots(cast(QueryScheduler, q), watched) == 42
    q.observed_tasks = 42
    assert _useful_slots(cast(QueryScheduler, q), watched) == 42
    # A source that sizes its tasks by the slots (the file source) is never capped there.
    sized = SimpleNamespace(observed_tasks=8, running_slots=8, tasks_follow_slots=True)
    fresh = _Watched(cast(QueryAutoscaler, None), cast(QueryScheduler, sized), {})
    assert _useful_slots(cast(QueryScheduler, sized), fresh) is None


def test_a_source_of_fixed_partitions_caps_the_slots_at_them_when_they_match() -> None:
    # A Kafka topic's, the rate source's or a Python data source's 4 partitions, first run
    # on 4 slots: its 4 tasks are its cap from the start (planned on 200 shuffle
    # partitions, the query would be given 8 slots for 4 tasks).
    fixed = SimpleNamespace(observed_tasks=4, running_slots=4, tasks_follow_slots=False)
    watched = _Watched(cast(QueryAutoscaler, None), cast(QueryScheduler, fixed), {})
    assert _useful_slots(cast(QueryScheduler, fixed), watched) == 4


@pytest.mark.parametrize("stages", [1, 2])
def test_a_batch_of_one_stage_tells_the_policy_its_tasks(stages: int,
                                                          monkeypatch: Any) -> None:
    app, driver, autoscaling, load = _setup(executors=2)
    load.run(1)
    policy = autoscaling._queries["q"].policy
    seen: list[Any] = []
    observe = policy.observe
    monkeypatch.setattr(policy, "observe", lambda s: (seen.append(s), observe(s))[1])
    run = driver.run_id
    ids = tuple(range(100, 100 + stages))
    events: list[Any] = [JobStarted(0.0, 100, ids, job_group=run)]
    for i, tasks in zip(ids, (42, 1), strict=False):  # the source's 42, then an extra job's
        events += [StageSubmitted(0.0, i, 0, tasks),
                   StageCompleted(0.0, i, 0, tasks, 0, 0, 0, 1.0, task_time=2.0)]
    events.append(QueryProgress(0.0, "qid-1", run, "q", load.batch, 50, 50.0, 50.0, 1.0, 1.0))
    for event in events:
        app.event(event)
        autoscaling.on_event(event)
    (sample,) = seen
    assert sample.tasks == (42 if stages == 1 else 43)
    assert sample.stage_tasks == (42 if stages == 1 else None)


def test_finished_unnamed_queries_are_kept_up_to_a_bound() -> None:
    # Each start from a new checkpoint is a new query; unnamed ones were never forgotten, and
    # the autoscaler's outcomes grew with them.
    app, driver, autoscaling, load = _setup(executors=2)
    load.run(10)
    extra = RETAINED_FINISHED + 20
    for i in range(extra):
        info = dataclasses.replace(query_info(f"k{i}", checkpoint=None), name=None)
        d = FakeDriver(info, query_id=f"k{i}")
        app.register(d)
        app.event(d.progress())
        app.advance(6)  # an evaluation while it runs
        app.event(d.terminated())
        app.advance(6)
    keys = [q.key for q in app.scheduler.queries()]
    finished = [q.key for q in app.scheduler.queries() if q.finished]
    # Forgotten as the next query starts: the last one finished makes one more.
    assert "q" in keys and len(finished) == RETAINED_FINISHED + 1
    assert finished == [f"k{i}" for i in range(extra - RETAINED_FINISHED - 1, extra)]
    assert len(autoscaling._outcomes) <= RETAINED_FINISHED + 2



def _two_queries(executors: int) -> tuple[App, FakeDriver, FakeDriver]:
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "1s"}), autoscaled=True)
    for e in range(1, executors + 1):
        app.add(str(e))
    da = FakeDriver(query_info("a", partitions=8, checkpoint="/cp/a"), query_id="qa")
    db = FakeDriver(query_info("b", partitions=4, checkpoint="/cp/b"), query_id="qb")
    app.register(da)
    app.register(db)
    return app, da, db


def _batches(app: App, *drivers: FakeDriver, rounds: int = 3) -> None:
    for _ in range(rounds):
        for d in drivers:
            app.batch(d)
        app.advance(2)


def test_once_the_only_query_with_a_target_ends_the_others_are_declared_at_their_slots(
        ) -> None:
    app, da, db = _two_queries(2)
    _batches(app, da, db)
    app.scheduler.set_scaling_target("a", ScalingTarget(6, 8))
    assert app.actuator.requested == [7]  # 6 for a, b's 1
    for e in range(3, 9):
        app.add(str(e))
    _batches(app, da, db)
    app.event(da.terminated())
    app.advance(1)
    _batches(app, db, rounds=2)
    assert app.actuator.requested[-1] == app.scheduler.query("b").running_slots == 1


def test_a_query_without_a_target_gets_back_the_slots_an_executor_loss_took() -> None:
    app, da, db = _two_queries(8)
    _batches(app, da, db)
    b = app.scheduler.query("b")
    assert b.running_slots == 4
    app.scheduler.set_scaling_target("a", ScalingTarget(4, 8))
    _batches(app, da, db)
    for e in "5678":
        app.remove(e, "worker lost")
    app.advance(120)
    _batches(app, da, db, rounds=5)
    assert b.running_slots == 2 and app.actuator.requested[-1] == 8  # still asked for
    for e in "WXYZ":
        app.add(e)
    _batches(app, da, db, rounds=10)
    assert b.running_slots == 4 and b.target is None


def test_a_query_started_after_the_app_went_idle_is_taken_over_as_in_a_new_app() -> None:
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "1s"}), autoscaled=True, idle_executors=8)
    app.add("1")
    app.add("2")
    da = FakeDriver(query_info("a", partitions=2, checkpoint="/cp/a"), query_id="qa")
    app.register(da)
    _batches(app, da, rounds=1)
    app.scheduler.set_scaling_target("a", ScalingTarget(2, 2))
    _batches(app, da, rounds=1)
    app.event(da.terminated())
    app.advance(1)
    assert app.actuator.requested[-1] == 8  # idle: the app's initial executors
    dc = FakeDriver(query_info("c", partitions=8, checkpoint="/cp/c"), query_id="qc")
    app.register(dc)
    _batches(app, dc, rounds=1)
    assert app.actuator.requested[-1] == 8  # not cut to the 2 it found
    for e in "345678":
        app.add(e)
    _batches(app, dc, rounds=5)
    assert app.scheduler.query("c").running_slots == 8


def test_bounds_lowered_and_raised_again_bring_back_no_slots_from_before() -> None:
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "1s"}), autoscaled=True)
    for e in range(1, 9):
        app.add(str(e))
    da = FakeDriver(query_info("a", partitions=8, checkpoint="/cp/a"), query_id="qa")
    db = FakeDriver(query_info("b", partitions=8, checkpoint="/cp/b"), query_id="qb")
    app.register(da)
    app.register(db)
    _batches(app, da, db)
    b = app.scheduler.query("b")
    assert b.running_slots == 4
    app.scheduler.set_scaling_target("a", ScalingTarget(4, 8))
    _batches(app, da, db)
    app.scheduler.update_requirements("b", 1, 2)
    _batches(app, da, db, rounds=5)
    for e in "5678":
        app.remove(e, "released")
    _batches(app, da, db, rounds=5)
    app.scheduler.update_requirements("b", 1, 8)
    _batches(app, da, db, rounds=5)
    assert b.running_slots == 2 and app.actuator.requested[-1] == 6  # 4 for a, b's 2


def test_a_stateless_query_shows_the_slots_its_source_s_tasks_run_on_before_any_decision(
        ) -> None:
    # 4 source partitions on 2 configured ones, 5 executors: plain Spark runs its 4 tasks on
    # 4 of them. Before the autoscaler's first decision its snapshot showed 2 slots (its
    # default upper bound, its configured partitions) while its tasks ran on 4.
    app, driver, autoscaling, load = _setup(executors=5, partitions=2)
    q = app.scheduler.query("q")
    assert q.snapshot().slots == 2  # no batch yet: its tasks are not known
    load.tasks = 4
    load.run(2)
    assert q.target is None and autoscaling.status(q).decision is None
    assert q.allocation == ResourceRequirements(1, 4)
    assert q.requirements == ResourceRequirements(1, 2)  # its bounds stay its own
    assert q.snapshot().slots == 4 and q.running_slots == 4
    assert driver.calls == [("start", 2)]


def test_a_stateless_query_of_4_source_partitions_is_planned_on_its_4_tasks() -> None:
    # The commonest streaming app: a source of 4 partitions (a Kafka topic's, a Python data
    # source's), no shuffle and no state, spark.sql.shuffle.partitions at 200, 4 executors.
    # Planned on its 200 partitions, the autoscaler kept all 4 slots at utilization 0.46 ("4
    # slots run the 200 partitions balanced") and asked for 8 on a rise.
    acting = AutoscalerConfig(**QUICK).acting
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "5s"}), autoscaled=acting)
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q", partitions=200))
    app.register(driver)
    autoscaling = Autoscaling(AutoscalerConfig(**QUICK), app.scheduler, app.vt)
    load = Load(app, driver, autoscaling)
    q = app.scheduler.query("q")
    load.tasks = 4
    load.rate = 1000.0  # 10 slots' worth: its 4 tasks use 4 at most
    load.run(90)
    assert max(app.actuator.requested, default=0) <= 4, app.actuator.requested  # was [20]
    load.rate = 150.0  # 1.5 slots' worth: 2 slots run its 4 tasks in two waves at 0.75
    load.run(120)
    assert q.target is not None and q.target.slots < 4, autoscaling.status(q).decision
    assert q.snapshot().slots == q.target.slots
    assert driver.calls == [("start", 200)]  # followed live: never restarted
