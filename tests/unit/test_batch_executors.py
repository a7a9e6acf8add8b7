"""Executors follow batch stages: up at once, down only when idle, never over streaming."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from spark_adaptive.core.batch.executors import (
    STALE_RECHECK,
    ExecutorFollower,
    executors_for_tasks,
)
from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.executors.demand import Baseline


class FakeActuator:
    def __init__(self) -> None:
        self.requested: list[int] = []
        self.alive = ["e1"]

    def request_total_executors(self, total: int) -> list[str]:
        """Like the Spark actuator: executors join up to the total, and the newest beyond
        it are released."""
        self.requested.append(total)
        while len(self.alive) < total:
            self.alive.append(f"e{len(self.alive) + 1}")
        released, self.alive = self.alive[total:], self.alive[:total]
        return released

    def kill_executors(self, executor_ids: Sequence[str], reason: str) -> None:
        raise AssertionError("the follower only declares totals")


class World:
    def __init__(self, alive: int = 1, slots: int | None = 2, controls: bool = True,
                 min_p: int = 1, max_p: int = 128, idle_timeout: float = 60.0) -> None:
        self.time = VirtualTime()
        self.actuator = FakeActuator()
        self.alive, self.slots, self.controls = alive, slots, controls
        self.persisted: int | None = 0
        self.declarations = 0
        self.released: list[str] = []
        self.follower = ExecutorFollower(
            self._declare, self.time, min_p=min_p, max_p=max_p, idle_timeout=idle_timeout,
            controls=lambda: self.controls, slots_per_executor=lambda: self.slots,
            executors_alive=lambda: self.alive, persisted_rdds=lambda: self.persisted)

    def _declare(self, demand: Baseline) -> None:
        """The reconciler's part: each decision is sent, and executors beyond its total go
        when it releases them."""
        self.declarations += 1
        released = self.actuator.request_total_executors(demand.total)
        assert demand.release_surplus or not released, "only the idle decision releases"
        self.released.extend(released)


def test_executors_for_tasks_is_ceil_within_bounds() -> None:
    assert executors_for_tasks(7, 2, 1, 128) == (4, "ceil(7 tasks / 2 slots per executor) = 4")
    n, why = executors_for_tasks(300, 2, 1, 128)
    assert n == 64 and "clamped to 64" in why
    n, why = executors_for_tasks(0, 4, 9, 128)
    assert n == 3 and "raised to 3" in why
    with pytest.raises(ValueError):
        executors_for_tasks(1, 0, 1, 1)


def test_scale_up_at_submission_then_down_to_the_floor_after_idle() -> None:
    w = World(alive=1)
    w.follower.stage_submitted((1, 0), 7)
    assert w.actuator.requested == [4] and w.declarations == 1
    w.alive = 4
    w.follower.stage_submitted((2, 0), 2)  # concurrent: 9 tasks need 5
    assert w.actuator.requested == [4, 5]
    w.follower.stage_completed((1, 0))
    w.follower.stage_completed((2, 0))
    w.time.advance(59)
    assert w.actuator.requested == [4, 5], "not idle long enough"
    assert w.released == []
    w.time.advance(1)
    assert w.actuator.requested == [4, 5, 1]
    assert "no batch job ran for 60s" in w.follower.decisions[-1][1]
    assert w.released == ["e2", "e3", "e4", "e5"], "released executors are handed on"


def test_a_smaller_stage_never_shrinks_mid_job_and_a_new_stage_stops_the_idle_clock() -> None:
    w = World(alive=4)
    w.follower.stage_submitted((1, 0), 8)
    w.follower.stage_completed((1, 0))
    w.time.advance(30)
    w.follower.stage_submitted((2, 0), 1)  # fewer tasks: nothing released
    w.time.advance(100)
    assert w.actuator.requested == []
    w.follower.stage_completed((2, 0))
    w.time.advance(60)
    assert w.actuator.requested == [1]


def test_no_declaration_while_streaming_queries_are_managed() -> None:
    w = World(alive=1, controls=False)
    w.follower.stage_submitted((1, 0), 50)
    w.follower.stage_completed((1, 0))
    w.time.advance(120)
    assert w.actuator.requested == [] and w.declarations == 0


def test_unknown_slots_count_one_per_executor_and_min_parallelism_sets_the_floor() -> None:
    w = World(alive=6, slots=None, min_p=3)
    w.follower.stage_submitted((1, 0), 5)  # 5 executors wanted, 6 alive: nothing
    assert w.actuator.requested == []
    w.follower.stage_completed((1, 0))
    w.time.advance(60)
    assert w.actuator.requested == [3]
    w.time.advance(600)
    assert w.actuator.requested == [3], "declared once"


def test_persisted_rdds_keep_the_executors_and_the_reason_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    # rdd.localCheckpoint() or df.cache(): releasing executors would lose their blocks (a
    # local checkpoint for good), where plain Spark never releases them.
    w = World(alive=4)
    w.persisted = 2
    w.follower.stage_submitted((1, 0), 8)
    w.follower.stage_completed((1, 0))
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch"):
        w.time.advance(60)
        w.time.advance(600)  # looked at again while idle: still persisted, logged once
    assert w.actuator.requested == [] and w.released == []
    kept = [r for r in caplog.records if "stay" in r.getMessage()]
    assert len(kept) == 1 and kept[0].levelno == logging.INFO
    assert "2 persisted RDD(s)" in kept[0].getMessage()
    w.persisted = 0  # unpersist(): the next look releases them
    w.time.advance(60)
    assert w.actuator.requested == [1]
    assert "no batch job ran for 60s" in w.follower.decisions[-1][1]


def test_executors_stay_when_the_persisted_rdds_cannot_be_read() -> None:
    w = World(alive=4)
    w.persisted = None
    w.follower.stage_submitted((1, 0), 8)
    w.follower.stage_completed((1, 0))
    w.time.advance(600)
    assert w.actuator.requested == []


def test_a_zero_timeout_never_releases_between_the_stages_of_a_running_job() -> None:
    # Stage 1 ends before stage 2 is submitted: with idle_timeout 0 a release in between
    # would lose the map outputs stage 2 reads. Idle means no job runs.
    w = World(alive=4, idle_timeout=0.0)
    w.follower.job_started(7)
    w.follower.stage_submitted((1, 0), 8)
    w.follower.stage_completed((1, 0))
    w.time.advance(0)
    w.time.advance(5)
    assert w.actuator.requested == [], "released between two stages of job 7"
    w.follower.stage_submitted((2, 0), 8)
    w.follower.stage_completed((2, 0))
    w.follower.job_ended(7)
    w.time.advance(0)
    assert w.actuator.requested == [1]


# -- ends that never came ------------------------------------------------------------------
class SparkRuns:
    """What Spark's status store says runs: job ids and stage ids (None: cannot be read)."""

    def __init__(self) -> None:
        self.jobs: set[int] = set()
        self.stages: set[int] = set()
        self.readable = True
        self.asked = 0

    def __call__(self) -> tuple[set[int], set[int]] | None:
        self.asked += 1
        return (set(self.jobs), set(self.stages)) if self.readable else None


def _watched(spark: SparkRuns, idle_timeout: float = 60.0) -> World:
    w = World(alive=1, slots=2, idle_timeout=idle_timeout)
    w.follower.spark_active = spark
    return w


def test_a_job_whose_end_was_lost_releases_the_executors_once_spark_no_longer_runs_it(
        caplog: pytest.LogCaptureFixture) -> None:
    # The shim's queue or Spark's own listener bus dropped JobEnded(1): without a look at
    # what Spark runs, job 1 would count as running for good and the 20 executors stay.
    spark = SparkRuns()
    spark.jobs, spark.stages = {1}, {0}
    w = _watched(spark)
    w.follower.job_started(1)
    w.follower.stage_submitted((0, 0), 40)
    assert w.actuator.requested == [20]
    w.alive = 20
    w.follower.stage_completed((0, 0))
    spark.jobs, spark.stages = set(), set()  # the job ended; its end never came
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch"):
        w.time.advance(STALE_RECHECK)
        assert w.follower.idle, "job 1 no longer counts as running"
        w.time.advance(60)
    assert w.actuator.requested == [20, 1]
    lost = [r for r in caplog.records if "never reached spark-adaptive" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING
    assert "job(s) 1 and stage(s) none" in lost[0].getMessage()


def test_what_spark_still_runs_or_only_just_started_keeps_counting() -> None:
    spark = SparkRuns()
    spark.jobs = {1}
    w = _watched(spark)
    w.follower.job_started(1)  # t=0: a long job Spark still runs
    w.time.advance(30)
    w.follower.stage_submitted((4, 0), 8)  # t=30: not in Spark's store yet (it lags)
    w.time.advance(30)  # t=60: the first look
    assert not w.follower.idle and w.follower.running_tasks == 8
    w.time.advance(600)  # held as long as Spark runs job 1; stage 4 went at t=120
    assert w.follower.running_tasks == 0 and not w.follower.idle
    assert w.actuator.requested == [4]
    spark.jobs = set()
    w.time.advance(STALE_RECHECK + 60)
    assert w.actuator.requested == [4, 1]


def test_unreadable_spark_status_keeps_what_runs_and_a_late_end_is_harmless() -> None:
    spark = SparkRuns()
    spark.readable = False
    w = _watched(spark)
    w.follower.job_started(1)
    w.time.advance(600)
    assert not w.follower.idle and spark.asked == 10
    w.follower.job_ended(1)
    w.time.advance(60)
    assert w.actuator.requested == [] and w.follower.idle  # 1 alive: nothing to release
    asked = spark.asked
    w.time.advance(600)
    assert spark.asked == asked, "no look at Spark while nothing runs"


def test_without_a_view_of_spark_the_ends_are_trusted() -> None:
    w = World(alive=1, slots=2)
    w.follower.job_started(1)
    w.follower.stage_submitted((0, 0), 40)
    w.alive = 20
    w.follower.stage_completed((0, 0))
    w.time.advance(10_000)
    assert w.actuator.requested == [20] and not w.follower.idle
