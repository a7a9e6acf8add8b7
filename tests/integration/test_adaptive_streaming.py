"""The Adaptive Scheduler on a real cluster: a stateful query follows its executors 1 -> 3 -> 2."""

from __future__ import annotations

import glob
import os
import time
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.core.warm_up import WARM_UP_JOB_GROUP
from spark_adaptive.testing.recorder import EventRecorder

pytestmark = pytest.mark.timeout(600)

FAST_TIMING = {
    # Shorter than Flink's defaults so the test stays short. The executing stabilization
    # outlasts the seconds between the two new executors arriving, so that they lead to
    # one rescale 1 -> 3 (desired resources) instead of 1 -> 2 -> 3.
    "scheduler.submission.resource-stabilization-timeout": "2s",
    "scheduler.executing.cooldown-after-rescaling": "4s",
    "scheduler.executing.resource-stabilization-timeout": "20s",
    "scheduler.executor-loss-grace": "3s",
    "parallelism.upper-bound": "3",
}


def _rate_aggregation(spark: Any, out: str, checkpoint: str, trigger: str = "1 second") -> Any:
    from pyspark.sql import functions as F

    counts = (spark.readStream.format("rate").option("rowsPerSecond", 40).load()
              .groupBy((F.col("value") % 10).alias("key"))
              .agg(F.count("*").alias("n"), F.sum("value").alias("total"),
                   F.max("value").alias("top")))

    def write(df: Any, batch_id: int) -> None:
        # Overwrite by batch id: a re-run batch replaces its own output (idempotent sink).
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    return (counts.writeStream.outputMode("complete").foreachBatch(write)
            .option("checkpointLocation", checkpoint).trigger(processingTime=trigger).start())


def _wait(what: str, check: Any, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_stateful_query_follows_workers_one_three_two_exactly_once(
        local_cluster, cluster_spark_factory, tmp_path):
    spark = cluster_spark_factory(local_cluster, **{"spark.sql.shuffle.partitions": "3"})
    rt = spark_adaptive.enable(spark, **FAST_TIMING)
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    query = _rate_aggregation(spark, str(tmp_path / "out"), str(tmp_path / "checkpoint"))

    def snap() -> dict[str, Any]:
        return query._manager.snapshot(query.key)

    # One worker, one slot: it starts at 1 (sufficient, after the submission stabilization).
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
    history = rt.loop.call_sync(lambda: [r.to_dict() for r in rt.scheduler.history(query.key)])
    assert [(r["trigger"], r["kind"], r["fromParallelism"], r["toParallelism"])
            for r in history] == [("INITIAL_SCHEDULE", "restart", 0, 1),
                                  ("NEW_RESOURCES", "restart", 1, 3)], history
    assert "repartition" in dict(history[-1]["timings"]), history[-1]
    assert query.id == query_id, "the same query (same checkpoint) across restarts"
    # The joining executors were warmed up by a job of spark-adaptive's own, before or
    # while the rescale waited for them.
    warm = [e for e in rec.events[mark:]
            if isinstance(e, ev.JobStarted) and e.job_group == WARM_UP_JOB_GROUP]
    assert warm, "no warm-up job ran for the executors that joined"
    assert rt.warm_up is not None and not rt.warm_up.in_flight

    # A worker is lost (SIGKILL): after the grace, 3 partitions on 2 slots is unbalanced -> 2.
    local_cluster.kill_worker()
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 2, since=mark, timeout=180)
    assert (snap()["parallelism"], snap()["slots"]) == (2, 2)
    down = rt.loop.call_sync(lambda: [r.to_dict() for r in rt.scheduler.history(query.key)])[-1]
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
