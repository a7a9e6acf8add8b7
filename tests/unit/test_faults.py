"""Faults inside spark-adaptive's pure core: the query goes on, and one log line says why.

The integration side (tests/integration/test_faults.py) injects faults into a live
driver; these are the faults best injected where the core decides, on virtual time:

* a bus subscriber raising (a.);
* the autoscaler's policy raising (b.): the autoscaler runs only on a cluster;
* a start whose state repartition failed (f.): the boundary rolled the checkpoint back
  and started the query at the partitions it had; the scheduler must take that run as
  it is, record the rescale as failed, and not restart it again and again.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scheduler_fakes import App, FakeDriver, StateContext, query_info
from test_autoscaling import QUICK, Load

from spark_adaptive.core import events as ev
from spark_adaptive.core.autoscaler import AutoscalerConfig, QueryAutoscaler
from spark_adaptive.core.bus import EventBus
from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.autoscaling import Autoscaling
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.states import CreatingExecutionGraph
from spark_adaptive.settings import Settings

REPARTITION_FAILED = ("org.apache.spark.SparkException: Job aborted due to stage failure: "
                      "state store files could not be written")


def _problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name.startswith("spark_adaptive") and r.levelno >= logging.WARNING]


# -- a. a bus subscriber raising --------------------------------------------------------
def test_a_subscriber_raising_is_one_error_line_naming_it_and_its_event(
        caplog: pytest.LogCaptureFixture) -> None:
    vt = VirtualTime()
    bus = EventBus(lambda action, what: vt.call_later(0, action))
    seen: list[ev.Event] = []

    def broken(event: ev.Event) -> None:
        raise ValueError("a handler's bug")

    bus.subscribe(broken, "broken handler")
    bus.subscribe(seen.append, "scheduler")
    heartbeat = ev.ExecutorHeartbeat(1.0, "7")
    bus.post(heartbeat)
    bus.post(ev.ExecutorHeartbeat(2.0, "7"))
    vt.run_pending()

    assert len(seen) == 2  # the next subscriber, and the next event, all the same
    first, second = _problems(caplog)
    assert first.getMessage() == (f"broken handler failed on {heartbeat!r}; the other "
                                  "handlers still ran")
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert second.getMessage().startswith("broken handler failed on ExecutorHeartbeat(time=2.0")
    assert bus.handler_failures == 2


# -- b. the autoscaler's policy raising -------------------------------------------------
def test_b_a_raising_policy_is_one_line_and_leaves_its_query_while_the_others_scale(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    app = App(Settings.from_conf({
        "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "5s"}), autoscaled=True)
    app.add("1")
    broken = FakeDriver(query_info("broken", partitions=8))
    driver = FakeDriver(query_info("q", partitions=8), query_id="qid-2")
    app.register(broken)
    app.register(driver)
    autoscaling = Autoscaling(AutoscalerConfig(**QUICK), app.scheduler, app.vt)
    evaluate = QueryAutoscaler.evaluate
    failing = {"broken"}

    def policy(self: QueryAutoscaler, view: Any) -> Any:
        if self.query in failing:
            raise ZeroDivisionError("a policy's bug")
        return evaluate(self, view)

    monkeypatch.setattr(QueryAutoscaler, "evaluate", policy)
    caplog.set_level(logging.DEBUG, logger="spark_adaptive")
    load = Load(app, driver, autoscaling)
    for event in (broken.progress(), broken.progress()):  # its policy exists, and fails
        app.event(event)
        autoscaling.on_event(event)
    load.rate = 300.0  # three slots' worth for q
    load.run(60)  # a dozen evaluations

    [line] = _problems(caplog)
    assert line.getMessage() == (
        "query broken: the autoscaler's evaluation failed (ZeroDivisionError: a policy's "
        "bug); the query runs on unchanged, with the target it had (said once until the "
        "evaluation succeeds again)")
    assert line.levelno == logging.ERROR and line.exc_info is not None
    again = [r for r in caplog.records if "evaluation failed again" in r.getMessage()]
    assert len(again) >= 10 and all(r.levelno == logging.DEBUG for r in again)
    assert app.scheduler.query("broken").target is None
    assert broken.calls == [("start", 8)]  # never stopped or restarted
    target = app.scheduler.query("q").target
    assert target is not None and target.slots >= 3  # the other query was evaluated

    failing.clear()  # the bug goes away: said once, and the policy decides again
    load.run(10)
    [back] = [r for r in caplog.records if r.getMessage().endswith("succeeds again")]
    assert back.getMessage() == "query broken: the autoscaler's evaluation succeeds again"
    assert back.levelno == logging.INFO
    assert autoscaling.status(app.scheduler.query("broken")).decision is not None


# -- f. a start whose repartition failed ------------------------------------------------
def test_f_a_start_that_kept_its_partitions_is_executing_and_the_rescale_failed(
        vt: VirtualTime) -> None:
    with StateContext(vt, share=1) as ctx:
        ctx.history.open(Trigger.REQUIREMENTS_CHANGED, "restart", from_parallelism=2,
                         to_parallelism=1, from_slots=2, to_slots=1, reason="bounds [1, 1]")
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        assert [c.arg for c in ctx.starts] == [1]
        ctx.expect("Executing")
        ctx.resolve_start(StartResult(ok=True, parallelism=2, run_id="r2",
                                      timings=(("repartition", 3.0), ("start", 0.5)),
                                      repartition_error=REPARTITION_FAILED))
    assert ctx.last.args["result"].parallelism == 2
    assert ctx.last.args["reason"] == (f"started again at its 2 partitions on 1 slots: its state "
                               f"could not be repartitioned to 1 ({REPARTITION_FAILED}); "
                               "checkpoint rolled back, nothing lost")
    assert ctx.repartition_failures == [(1, REPARTITION_FAILED)]
    (record,) = ctx.history.records()
    assert (record.to_parallelism, record.outcome) == (1, "failed")
    assert dict(record.timings) == {"repartition": 3.0, "start": 0.5}


def test_f_a_failed_repartition_is_not_tried_again_until_something_changes(
        caplog: pytest.LogCaptureFixture) -> None:
    app = App(Settings.from_conf({
        "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "0s",
        "spark.adaptive.scheduler.executing.resource-stabilization-timeout": "0s"}))
    app.add("1", cores=2)
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.event(driver.progress())
    assert driver.calls == [("start", 2)]

    app.scheduler.update_requirements("q", 1, 1)
    app.vt.run_pending()
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    assert driver.calls[-1] == ("start", 1)
    app.start(driver, parallelism=2, repartition_error=REPARTITION_FAILED)

    q = app.scheduler.query("q")
    assert (app.state("q"), q.partitions) == ("Executing", 2)
    for _ in range(5):  # micro-batches and time pass: no restart loop
        app.event(driver.progress())
        app.advance(30)
    assert driver.calls == [("start", 2), ("stop", True), ("start", 1)]
    assert not q.repartition_support().possible
    assert "repartitioning its state to 1 partitions failed" in q.repartition_support().reason
    [restart] = [r for r in app.scheduler.history("q") if r.kind == "restart"]
    assert (restart.from_parallelism, restart.to_parallelism, restart.outcome) == (2, 1, "failed")
    assert q.snapshot().counters.restarts == 1
    assert _problems(caplog) == []  # the boundary's one line says why, not the core

    # An operator asking again (new bounds) tries again.
    app.scheduler.update_requirements("q", 1, 2)
    app.scheduler.update_requirements("q", 1, 1)
    app.vt.run_pending()
    assert driver.calls[-1] == ("stop", True)
    app.stop(driver)
    assert driver.calls[-1] == ("start", 1)
    app.start(driver)
    assert (app.state("q"), q.partitions) == ("Executing", 1)
    assert q.requirements == ResourceRequirements(1, 1)
