"""Failures, live rescales and queries that cannot be repartitioned, on a real cluster."""

from __future__ import annotations

from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.spark.checkpoint import inspect_checkpoint
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.session import wait_for_executors
from spark_adaptive.testing.streaming import history, snapshot

pytestmark = pytest.mark.timeout(400)

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"






def test_failing_query_restarts_per_strategy_then_raises_its_own_error(
        local_cluster, cluster_spark_factory, tmp_path):
    from pyspark.errors import StreamingQueryException

    spark = cluster_spark_factory(local_cluster, **{"spark.sql.shuffle.partitions": "1"})
    rt = spark_adaptive.enable(spark, **{
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "1",
        "restart-strategy.fixed-delay.delay": "1s",
        "scheduler.submission.resource-stabilization-timeout": "0s",
    })

    def explode(df: Any, batch_id: int) -> None:
        if df.count() > 0:
            raise RuntimeError(f"sink rejected batch {batch_id}")

    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .writeStream.foreachBatch(explode)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    with pytest.raises(StreamingQueryException, match="sink rejected batch"):
        query.awaitTermination()
    snap = snapshot(rt, query.key)
    assert (snap["state"], snap["status"]) == ("Finished", "FAILED")
    assert "sink rejected batch" in snap["error"]
    assert snap["counters"]["failures"] == 2  # the first failure restarted it, the second ended it
    assert snap["counters"]["restarts"] == 1
    assert not query.isActive
    assert [r["trigger"] for r in history(rt, query.key)] == ["INITIAL_SCHEDULE", "FAILURE"]


def test_balanced_partitions_are_rescaled_live_without_a_restart(
        local_cluster_factory, cluster_spark_factory, tmp_path):
    from pyspark.sql import functions as F

    cluster = local_cluster_factory(2, cores_per_worker=2)
    spark = cluster_spark_factory(cluster, **{"spark.sql.shuffle.partitions": "4"})
    rt = spark_adaptive.enable(spark, **{"scheduler.executor-loss-grace": "2s"})
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    wait_for_executors(spark, 2)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .groupBy((F.col("value") % 8).alias("k")).count()
             .writeStream.outputMode("update")
             .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(
                 str(tmp_path / "out" / str(i))))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 4, timeout=120)
    assert (snapshot(rt, query.key)["parallelism"], snapshot(rt, query.key)["slots"]) == (4, 4)
    first_run = query.runId

    cluster.kill_worker()  # 4 partitions on 2 slots: balanced, so nothing restarts
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 4, since=mark, timeout=60)
    def lives() -> int:
        return sum(r["kind"] == "live" for r in history(rt, query.key))

    rec.wait_until(lambda: lives() == 1, timeout=60, what="a live rescale 4 -> 2 slots")
    cluster.add_worker(cores=2)  # and back on 4 slots, live again
    rec.wait_until(lambda: lives() == 2, timeout=120, what="a live rescale 2 -> 4 slots")
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, since=mark, timeout=60)
    records = [r for r in history(rt, query.key) if r["kind"] == "live"]
    assert [(r["fromSlots"], r["toSlots"], r["fromParallelism"], r["toParallelism"])
            for r in records] == [(4, 2, 4, 4), (2, 4, 4, 4)]
    assert [r["trigger"] for r in records] == ["RESOURCES_LOST", "NEW_RESOURCES"]
    assert all(r["outcome"] == "completed" and r["duration"] is not None for r in records)
    assert query.runId == first_run, "a live rescale never restarts the query"
    snap = snapshot(rt, query.key)
    assert (snap["parallelism"], snap["slots"], snap["counters"]["restarts"]) == (4, 4, 0)
    query.stop_with_savepoint()  # for good, between two micro-batches
    snap = snapshot(rt, query.key)
    assert (snap["state"], snap["status"]) == ("Finished", "FINISHED")
    assert inspect_checkpoint(spark, str(tmp_path / "cp")).complete
    assert query.awaitTermination(1) is True


def test_state_that_cannot_be_repartitioned_keeps_its_partitions_and_says_why(
        local_cluster, cluster_spark_factory, tmp_path):
    from pyspark.sql import functions as F

    spark = cluster_spark_factory(local_cluster, **{
        "spark.sql.shuffle.partitions": "3",
        "spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER})
    rt = spark_adaptive.enable(spark, **{
        "scheduler.submission.resource-stabilization-timeout": "0s",
        "scheduler.executing.cooldown-after-rescaling": "0s",
        "scheduler.executing.resource-stabilization-timeout": "1s"})
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .groupBy((F.col("value") % 5).alias("k")).count()
             .writeStream.outputMode("complete")
             # Spark 4.3 fails a stateful batch whose sink leaves partitions unread.
             .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(
                 str(tmp_path / "out" / str(i))))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    # One slot, but this query's first partition count is final: it starts at its upper bound.
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 3, timeout=120)
    start = history(rt, query.key)[0]
    assert start["toParallelism"] == 3  # the app's spark.sql.shuffle.partitions
    assert "only for the RocksDB provider" in start["reason"]
    run = query.runId
    local_cluster.add_worker()  # 3 partitions on 2 slots would want a restart; it cannot
    rec.wait_until(lambda: any(r["kind"] == "live" for r in history(rt, query.key)),
                   timeout=120, what="a live-only rescale")
    live = [r for r in history(rt, query.key) if r["kind"] == "live"][-1]
    assert "only for the RocksDB provider" in live["reason"]
    assert query.runId == run and snapshot(rt, query.key)["parallelism"] == 3
    query.stop()
