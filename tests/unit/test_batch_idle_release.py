"""Idle executors are released only when nothing persisted would go with them, and never
between the stages of a running job (the batch wing's Spark side, on stand-ins)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from batch_fakes import FakeSC

from spark_adaptive.batch.wiring import BatchScheduler
from spark_adaptive.core import events as ev
from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.executors.demand import Baseline
from spark_adaptive.settings import Settings
from spark_adaptive.spark.jvm import persisted_rdd_count


class Actuator:
    supported = True

    def __init__(self) -> None:
        self.requested: list[int] = []


class Executor:
    slots = 2


class Inventory:
    executors = tuple(Executor() for _ in range(4))  # 4 executors of 2 cores
    live_slots = 8


class Reconciler:
    """Sends each batch decision's total, as the reconciler does with no managed query."""

    def __init__(self, actuator: Actuator) -> None:
        self._actuator = actuator

    def set_batch_demand(self, demand: Baseline | None) -> None:
        if demand is not None:
            self._actuator.requested.append(demand.total)


class Scheduler:
    def __init__(self, actuator: Actuator) -> None:
        self.resources = Inventory()
        self.executors = Reconciler(actuator)

    def queries(self) -> list[Any]:
        return []


class Runtime:
    def __init__(self, timeout: str) -> None:
        self.settings = Settings.from_conf({
            "spark.adaptive.batch.enabled": "true",
            "spark.adaptive.batch.executor-idle-timeout": timeout,
            "spark.adaptive.batch.shuffle-partitions-from-estimate": "false"})
        self.sc = FakeSC()
        self.actuator = Actuator()
        self.loop = VirtualTime()
        self.scheduler = Scheduler(self.actuator)
        self.handler: Callable[[ev.Event], None] | None = None

    def subscribe(self, fn: Callable[[ev.Event], None], name: str,
                  replay_executors: bool = True) -> Callable[[], None]:
        self.handler = fn
        return lambda: None

    def post(self, event: ev.Event) -> None:
        assert self.handler is not None
        self.handler(event)


def run_job(rt: Runtime, job: int = 1) -> None:
    rt.post(ev.JobStarted(0.0, job, (10 * job, 10 * job + 1)))
    for stage in (10 * job, 10 * job + 1):
        rt.post(ev.StageSubmitted(0.0, stage, 0, 8))
        rt.post(ev.StageCompleted(0.0, stage, 0, 8, 0, 0, 0, 1.0))
    rt.post(ev.JobEnded(0.0, job, True))


def test_persisted_rdd_count_asks_sparks_own_list() -> None:
    sc = FakeSC()
    assert persisted_rdd_count(sc) == 0  # type: ignore[arg-type]
    sc._jsc.persisted = {3: "localCheckpoint", 7: "cached DataFrame"}
    assert persisted_rdd_count(sc) == 2  # type: ignore[arg-type]


def test_a_cached_or_locally_checkpointed_rdd_keeps_idle_executors(
        caplog: pytest.LogCaptureFixture) -> None:
    # rdd.localCheckpoint(); rdd.count(); ... 60 s without a job ...; rdd.count() must
    # still find its checkpoint blocks, as on plain Spark, which never releases them.
    rt = Runtime("60s")
    part = BatchScheduler(rt)  # type: ignore[arg-type]
    rt.sc._jsc.persisted = {5: "localCheckpoint"}
    run_job(rt)
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch"):
        rt.loop.advance(3600)
    assert rt.actuator.requested == [], "executors holding persisted blocks were released"
    kept = [r for r in caplog.records if "1 persisted RDD(s)" in r.getMessage()]
    assert len(kept) == 1 and kept[0].levelno == logging.INFO, "the reason, logged once"
    rt.sc._jsc.persisted = {}  # unpersist(): released at the next look
    rt.loop.advance(60)
    assert rt.actuator.requested == [1]
    part.close()


def test_when_spark_cannot_be_asked_the_executors_stay() -> None:
    rt = Runtime("60s")
    part = BatchScheduler(rt)  # type: ignore[arg-type]
    rt.sc._jsc.persisted_error = RuntimeError("py4j: connection refused")
    run_job(rt)
    rt.loop.advance(600)
    assert rt.actuator.requested == []
    part.close()


def test_a_zero_timeout_waits_for_the_job_not_the_stage() -> None:
    rt = Runtime("0")
    part = BatchScheduler(rt)  # type: ignore[arg-type]
    rt.post(ev.JobStarted(0.0, 1, (10, 11)))
    rt.post(ev.StageSubmitted(0.0, 10, 0, 8))
    rt.post(ev.StageCompleted(0.0, 10, 0, 8, 0, 0, 0, 1.0))
    rt.loop.advance(1)  # stage 11 not submitted yet: its map outputs are on the executors
    assert rt.actuator.requested == []
    rt.post(ev.StageSubmitted(0.0, 11, 0, 8))
    rt.post(ev.StageCompleted(0.0, 11, 0, 8, 0, 0, 0, 1.0))
    rt.post(ev.JobEnded(0.0, 1, True))
    rt.loop.advance(0)
    assert rt.actuator.requested == [1]
    part.close()
