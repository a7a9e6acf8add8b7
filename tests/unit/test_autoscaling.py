"""The autoscaler at work in the scheduler: samples from events, targets carried out.

An application on virtual time (scheduler_fakes.App) with one query of 8
partitions; :class:`Load` plays its micro-batches: each second a batch reads what
arrived, its stages' task time is what those rows cost on a slot, and Spark's job
and stage events say so, as the shim reports them.
"""

from __future__ import annotations

from typing import Any

from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.autoscaler import AutoscalerConfig
from spark_adaptive.core.events import JobStarted, QueryProgress, StageCompleted, StageSubmitted
from spark_adaptive.core.streaming.autoscaling import Autoscaling
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.settings import Settings

#: Each row costs this many seconds of one task slot.
COST = 0.01
QUICK = dict(enabled=True, evaluation_interval=5.0, metrics_window=20.0,
             stabilization_interval=5.0, scale_down_interval=30.0,
             observed_scalability=False, effectiveness_detection=False)


class Load:
    """Micro-batches of a query: ``rate`` rows per second, ``COST`` slot-seconds a row."""

    def __init__(self, app: App, driver: FakeDriver, autoscaling: Autoscaling) -> None:
        self.app, self.driver, self.autoscaling = app, driver, autoscaling
        self.rate = 50.0
        self.batch = 0
        self.stage = 0

    def second(self) -> None:
        q = self.app.scheduler.query("q")
        slots = max(1, q.running_slots)
        rows = self.rate
        busy = rows * COST
        duration = max(0.1, busy / min(slots, q.partitions))
        run = self.driver.run_id
        assert run is not None
        self.stage += 1
        for event in (JobStarted(0.0, self.stage, (self.stage,), job_group=run),
                      StageSubmitted(0.0, self.stage, 0, q.partitions),
                      StageCompleted(0.0, self.stage, 0, q.partitions, 0, 0, 0, duration,
                                     task_time=busy),
                      QueryProgress(0.0, "qid-1", run, "q", self.batch, int(rows), rows,
                                    rows / duration, duration, duration)):
            self.app.event(event)
            self.autoscaling.on_event(event)
        self.batch += 1
        self.app.advance(1.0)

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.second()


def _setup(**config: Any) -> tuple[App, FakeDriver, Autoscaling, Load]:
    app = App(Settings.from_conf({"spark.adaptive.scheduler.executing.cooldown-after-rescaling":
                                  "5s"}), autoscaled=True)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=8))
    app.register(driver)
    autoscaling = Autoscaling(AutoscalerConfig(**{**QUICK, **config}), app.scheduler, app.vt)
    return app, driver, autoscaling, Load(app, driver, autoscaling)


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
    app, driver, autoscaling, load = _setup(scaling_enabled=False)
    load.rate = 300.0
    load.run(60)
    q = app.scheduler.query("q")
    decision = autoscaling.status(q).decision
    assert decision is not None and decision.outcome == "scale-up" and not decision.applied
    assert "recommend only" in decision.reason
    assert q.target is None and app.actuator.requested == [8]
    assert [r.kind for r in app.scheduler.history("q")] == ["initial"]


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
