"""The Adaptive Scheduler on a real cluster: a stateful query follows its executors 1 -> 3 -> 2."""

from __future__ import annotations

import glob
import os
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.core.streaming.warm_up import WARM_UP_JOB_GROUP
from spark_adaptive.spark.warm_up import QUERY_NAME as WARM_UP_QUERY
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.session import wait_for_executors
from spark_adaptive.testing.streaming import history, rate_aggregation, snapshot

pytestmark = pytest.mark.timeout(600)

FAST_TIMING = {
    # Shorter than Flink's defaults so the test stays short. The submission stabilization
    # (which times the first run's rescale) outlasts the seconds between the two new
    # executors arriving, so that they lead to one rescale 1 -> 3 (desired resources)
    # instead of 1 -> 2 -> 3.
    "scheduler.submission.resource-stabilization-timeout": "45s",
    "scheduler.executing.cooldown-after-rescaling": "4s",
    "scheduler.executing.resource-stabilization-timeout": "20s",
    "scheduler.executor-loss-grace": "3s",
    "parallelism.upper-bound": "3",
}






def test_stateful_query_follows_workers_one_three_two_exactly_once(
        local_cluster, cluster_spark_factory, tmp_path):
    spark = cluster_spark_factory(local_cluster, **{"spark.sql.shuffle.partitions": "3"})
    rt = spark_adaptive.enable(spark, **FAST_TIMING)
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    wait_for_executors(spark, 1)
    query = rate_aggregation(spark, str(tmp_path / "out"), str(tmp_path / "checkpoint"))

    def snap() -> dict[str, Any]:
        return snapshot(rt, query.key)

    # One worker, one slot: it starts at 1, at once.
    first = rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 1, timeout=120)
    assert snap()["parallelism"] == 1 and snap()["state"] == "Executing"
    query_id = query.id

    # Two workers join: desired resources (3 slots) -> restart rescale to 3, state repartitioned.
    local_cluster.add_worker()
    local_cluster.add_worker()
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 3, since=mark, timeout=180)
    s = snap()
    assert (s["parallelism"], s["slots"]) == (3, 3)
    records = history(rt, query.key)
    assert [(r["trigger"], r["kind"], r["fromParallelism"], r["toParallelism"])
            for r in records] == [("INITIAL_SCHEDULE", "initial", 0, 1),
                                  ("NEW_RESOURCES", "restart", 1, 3)], records
    assert "repartition" in dict(records[-1]["timings"]), records[-1]
    assert query.id == query_id, "the same query (same checkpoint) across restarts"
    # The joining executors were warmed up by spark-adaptive's own jobs, and by one
    # micro-batch of a stateful query of its own (in a session of its own, so the app never
    # sees it), before the restart began: the restart did not wait inside, and the query
    # ran on at 1 partition meanwhile.
    warm = [e for e in rec.events[mark:]
            if isinstance(e, ev.JobStarted) and e.job_group == WARM_UP_JOB_GROUP]
    assert warm, "no warm-up job ran for the executors that joined"
    assert any(isinstance(e, ev.QueryProgress) and e.name == WARM_UP_QUERY
               for e in rec.events[mark:]), "no stateful warm-up micro-batch ran"
    # ... and, this being the app's first stateful warm-up, by an offline repartition of
    # that micro-batch's state (Spark names the stages of a job after the call that ran it).
    warm_stages = {s for e in warm for s in e.stage_ids}
    assert any(isinstance(e, ev.StageCompleted) and e.stage_id in warm_stages
               and e.name.startswith("repartition at") and e.failure is None
               for e in rec.events[mark:]), "the warm-up repartitioned no state"
    assert rt.warm_up is not None and not rt.warm_up.in_flight
    assert "warm-up" not in dict(records[-1]["timings"]), records[-1]
    assert [q.name for q in spark.streams.active] == [None], "the app sees only its query"
    assert not glob.glob(str(tmp_path / "checkpoint" / "spark-adaptive" / "warm-up-*")), \
        "the warm-up's scratch files are deleted"

    # A worker is lost (SIGKILL): after the grace, 3 partitions on 2 slots is unbalanced -> 2.
    local_cluster.kill_worker()
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 2, since=mark, timeout=180)
    assert (snap()["parallelism"], snap()["slots"]) == (2, 2)
    down = history(rt, query.key)[-1]
    assert down["trigger"] == "RESOURCES_LOST" and down["toParallelism"] == 2

    # Let it run a little at 2, then stop through the app's own handle.
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, lambda e: e.num_input_rows > 0, since=mark, timeout=60)
    query.stop()
    assert not query.isActive and snap()["state"] == "Finished" and snap()["status"] == "CANCELED"
    assert query.awaitTermination(5) is True

    # Exactly once: the last batch's complete output counts every value 0..top once. The
    # app's stop() cancels, as Spark's does, and may cut a batch's write short: that batch
    # is not committed (a restart would run it again), and its output has no _SUCCESS.
    committed = glob.glob(str(tmp_path / "out" / "batch=*" / "_SUCCESS"))
    last = max((os.path.dirname(p) for p in committed), key=lambda p: int(p.split("=")[-1]))
    rows = spark.read.parquet(last).collect()
    top = max(r["top"] for r in rows)
    assert sum(r["n"] for r in rows) == top + 1, "every input row counted exactly once"
    assert sum(r["total"] for r in rows) == top * (top + 1) // 2
    for r in rows:
        assert r["n"] == len(range(r["key"], top + 1, 10))
    assert first.state_partitions == 1


def test_executors_of_different_sizes_carry_the_slots_a_query_asks_for(
        local_cluster, cluster_spark_factory, tmp_path):
    """Without spark.executor.cores each executor takes its worker's free cores: an old one
    of 1 slot and two newer ones of 2. The query's 4 slots need all three: the total
    declared counts the executors that stay (a lower total releases the newest, a 2-slot
    one), so none is released and the query runs on 4 slots, not 3."""
    spark = cluster_spark_factory(local_cluster, **{"spark.sql.shuffle.partitions": "4"})
    timing = {**FAST_TIMING, "parallelism.upper-bound": "4",
              "scheduler.submission.resource-stabilization-timeout": "5s"}
    rt = spark_adaptive.enable(spark, **timing)
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    wait_for_executors(spark, 1)
    query = rate_aggregation(spark, str(tmp_path / "out"), str(tmp_path / "checkpoint"))

    def at(partitions: int) -> Any:  # the app's query (the warm-up's query has state too)
        return lambda e: e.query_id == query.id and e.state_partitions == partitions

    rec.wait_for(ev.QueryProgress, at(1), timeout=120)
    local_cluster.add_worker(cores=2)
    local_cluster.add_worker(cores=2)
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, at(4), since=mark, timeout=180)
    s = snapshot(rt, query.key)
    assert (s["parallelism"], s["slots"]) == (4, 4), s
    added = {e.executor_id: e.cores for e in rec.events if isinstance(e, ev.ExecutorAdded)}
    assert sorted(added.values()) == [1, 2, 2], added
    assert rt.loop.call_sync(lambda: rt.scheduler.app_snapshot()["declaredExecutors"]) == 3
    # A few micro-batches more: no executor is released, the query stays on 4 slots.
    mark = rec.mark()
    for _ in range(3):
        rec.wait_for(ev.QueryProgress, at(4), since=rec.mark(), timeout=60)
    assert not [e for e in rec.events[mark:] if isinstance(e, ev.ExecutorRemoved)]
    assert len(local_cluster.executors(spark.sparkContext.applicationId)) == 3
    assert (snapshot(rt, query.key)["slots"], snapshot(rt, query.key)["parallelism"]) == (4, 4)
    query.stop()
