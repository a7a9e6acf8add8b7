"""Reactive Mode with an unmodified app through spark-submit, and hung executors."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_adaptive.core import events as ev
from spark_adaptive.spark.runtime import runtime_for
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.streaming import wait_until
from spark_adaptive.testing.submit import SubmittedApp, submit

pytestmark = pytest.mark.timeout(420)
APP = Path(__file__).resolve().parents[2] / "examples" / "reactive_demo.py"


def _until(app: SubmittedApp, what: str, check: Any, timeout: float = 180.0) -> dict[str, Any]:
    def query() -> dict[str, Any] | None:
        assert app.running(), f"the app ended early:\n{app.tail()}"
        q = app.queries()[0]
        return q if check(q) else None

    try:
        return wait_until(query, timeout, what=what, interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen {app.queries()}\n{app.tail()}") from None


def test_unmodified_app_in_reactive_mode_follows_workers_exactly_once(local_cluster, tmp_path):
    app = submit(local_cluster, APP, "--checkpoint", str(tmp_path / "cp"),
                 "--output", str(tmp_path / "out"), "--stop-file", str(tmp_path / "stop"),
                 "--trigger", "1 second",
                 conf={"spark.adaptive.enabled": "true",
                       "spark.adaptive.scheduler.mode": "reactive",
                       # The first run's rescale waits this long for resources to settle, so
                       # that the two workers added together lead to one rescale onto 3.
                       "spark.adaptive.scheduler.submission.resource-stabilization-timeout":
                           "15s",
                       "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "3s",
                       "spark.adaptive.scheduler.executing.resource-stabilization-timeout": "15s",
                       "spark.adaptive.scheduler.executor-loss-grace": "3s",
                       "spark.sql.streaming.stateStore.providerClass":
                           "org.apache.spark.sql.execution.streaming.state."
                           "RocksDBStateStoreProvider",
                       # Its first run starts at these partitions when no executor has
                       # registered yet; the upper bound is max-parallelism in reactive mode.
                       "spark.sql.shuffle.partitions": "7"})
    try:
        q = app.wait_for_query()
        assert q["name"] == "sensor-counts"
        assert q["requirements"]["parallelism"]["upperBound"] == 32768  # max-parallelism
        first = _until(app, "running on 1 slot",
                       lambda q: q["slots"] == 1 and q["state"] == "Executing")
        assert first["parallelism"] in (1, 7)  # the one slot, or no executor known yet
        local_cluster.add_worker()
        local_cluster.add_worker()
        _until(app, "parallelism 3", lambda q: (q["parallelism"], q["slots"]) == (3, 3))
        local_cluster.kill_worker()
        q = _until(app, "parallelism 2", lambda q: (q["parallelism"], q["slots"]) == (2, 2))
        batch = q["lastProgress"]["batchId"]
        _until(app, "a batch at 2", lambda q: q["lastProgress"]["batchId"] > batch)
        rescales = app.rescales(q["id"])
        records = [(r["trigger"], r["kind"], r["toParallelism"]) for r in rescales["rescales"]
                   if r["kind"] != "live"]
        # Both workers' executors usually register within the stabilization timeout, for one
        # rescale onto 3; on a loaded machine the second may come later, and the query then
        # rescales onto 2 first, as the timeout says it should.
        grown = [p for trigger, _, p in records if trigger == "NEW_RESOURCES"]
        assert grown in ([3], [2, 3]), rescales
        assert records == [("INITIAL_SCHEDULE", "initial", first["parallelism"]),
                           *[("NEW_RESOURCES", "restart", p) for p in grown],
                           ("RESOURCES_LOST", "restart", 2)], rescales
        assert rescales["counters"]["restarts"] == len(grown) + 1
        (tmp_path / "stop").touch()
        assert app.wait(120) == 0, app.tail()
    finally:
        app.kill()
    log = app.log_path.read_text()
    assert "Listener threw an exception" not in log
    # Exactly once: the last committed aggregate counts every value 0..latest once. (The
    # app's own stop() is Spark's immediate stop: a batch it cut short was never committed.)
    committed = max(int(p.name) for p in (tmp_path / "cp" / "commits").iterdir()
                    if p.name.isdigit())
    table = pq.read_table(tmp_path / "out" / f"batch={committed}").to_pydict()
    latest = max(table["latest"])
    assert sum(table["readings"]) == latest + 1
    assert sum(table["total"]) == latest * (latest + 1) // 2


def _counts_on_cluster(cluster_spark_factory, cluster, tmp_path, partitions):
    """A counting query on ``partitions`` partitions in adaptive mode, enabled through the
    session's configuration like spark-submit --conf (the start-up hook then sets a 3 s
    executor heartbeat before the context starts), once it runs at them."""
    from pyspark.sql import functions as F

    spark = cluster_spark_factory(cluster, **{
        "spark.adaptive.enabled": "true",
        "spark.adaptive.scheduler.submission.resource-stabilization-timeout": "0s",
        "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "0s",
        "spark.adaptive.scheduler.executing.resource-stabilization-timeout": "2s",
        "spark.adaptive.scheduler.executor-loss-grace": "2s",
        "spark.sql.shuffle.partitions": str(partitions)})
    rt = runtime_for(spark.sparkContext)
    assert rt is not None
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .groupBy((F.col("value") % 10).alias("k")).count()
             .writeStream.outputMode("update")
             .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(
                 str(tmp_path / "out" / str(i))))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == partitions, timeout=180)
    return spark, rt, rec, query


def test_frozen_executor_is_released_within_the_failure_detection_timeout(
        local_cluster_factory, cluster_spark_factory, tmp_path):
    cluster = local_cluster_factory(3)
    spark, rt, rec, query = _counts_on_cluster(cluster_spark_factory, cluster, tmp_path, 3)
    assert spark.sparkContext.getConf().get("spark.executor.heartbeatInterval") == "3s"
    rec.wait_until(lambda: len({e.executor_id for e in rec.of(ev.ExecutorHeartbeat)}) == 3,
                   timeout=60, what="heartbeats from all three executors")
    victim = cluster.executors()[-1]
    frozen = None
    try:
        frozen = cluster.freeze_executor(victim.executor_id)
        t_freeze = time.monotonic()
        mark = rec.mark()
        removed = rec.wait_for(ev.ExecutorRemoved, lambda e: e.executor_id == victim.executor_id,
                               since=mark, timeout=60)
        released_after = time.monotonic() - t_freeze
        assert released_after <= 20 + 3, f"released {released_after:.1f}s after the freeze"
        assert removed.reason  # Spark's words ("Executor killed by driver.")
        assert victim.executor_id in rt.actuator.killed  # released by spark-adaptive
        # The query goes on without the hung executor: on the two others, or on the
        # replacement the master launches on the frozen one's worker once its process is gone
        # (spark-adaptive declares its total again after the release).
        after = rec.mark()
        going_on = rec.wait_for(ev.QueryProgress, since=after, timeout=120)
        stall = time.monotonic() - t_freeze
        print(f"frozen executor released after {released_after:.1f}s; a micro-batch at "
              f"{going_on.state_partitions} partitions {stall:.1f}s after the freeze")
    finally:
        if frozen is not None:
            try:
                cluster.thaw_executor(frozen.executor_id)
            except Exception:
                pass  # killed meanwhile, as it should be
    query.stop()


def test_a_released_frozen_executor_is_replaced_when_a_worker_has_room(
        local_cluster_factory, cluster_spark_factory, tmp_path):
    """Spark's killExecutors also lowers the app's executor target: spark-adaptive declares
    its total again after releasing a hung executor, so the master launches a replacement."""
    cluster = local_cluster_factory(3)
    # Adaptive mode: the query's 2 partitions want 2 of the 3 executors.
    _, rt, rec, query = _counts_on_cluster(cluster_spark_factory, cluster, tmp_path, 2)
    wait_until(lambda: len(cluster.executors()) == 2, timeout=60,
               what="the surplus executor released")
    rec.wait_until(lambda: len({e.executor_id for e in rec.of(ev.ExecutorHeartbeat)}) >= 2,
                   timeout=60, what="heartbeats from both executors")
    before = {e.executor_id for e in cluster.executors()}
    victim = cluster.executors()[-1]
    frozen = cluster.freeze_executor(victim.executor_id)
    try:
        mark = rec.mark()
        rec.wait_for(ev.ExecutorRemoved, lambda e: e.executor_id == victim.executor_id,
                     since=mark, timeout=60)
        assert victim.executor_id in rt.actuator.killed
        joined = rec.wait_for(ev.ExecutorAdded, lambda e: e.executor_id not in before,
                              since=mark, timeout=90)
        print(f"executor {victim.executor_id} released; executor {joined.executor_id} replaces "
              "it")
        rec.wait_until(lambda: rt.loop.call_sync(
            lambda: rt.scheduler.query(query.id).snapshot().slots) == 2,
            timeout=120, what="the query on 2 slots again")
    finally:
        with contextlib.suppress(Exception):  # killed meanwhile, as it should be
            cluster.thaw_executor(frozen.executor_id)
    query.stop()
