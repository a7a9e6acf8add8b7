"""Spark's streaming internals that restart rescales rely on, in one short run.

A stateful query on the RocksDB state store runs at 3 partitions on one executor of 3
slots; its upper bound is lowered to 2 through the scheduler (as ``PUT
.../resource-requirements`` does). That
restart goes through every private piece the query driver uses: the clean stop at a
micro-batch boundary (the JVM shim's ``BatchBoundary``, the query's state), the offline
state repartition (``StreamingCheckpointManager``), the restart from the app's own JVM
``DataStreamWriter``. Then ``stop_with_savepoint()`` ends it between two micro-batches.
No executor joins or leaves, so nothing depends on how fast the machine starts them:
this is the streaming part of the ``internals`` tests run on the oldest pyspark too.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.spark.checkpoint import inspect_checkpoint
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.streaming import history, snapshot

pytestmark = [pytest.mark.timeout(300), pytest.mark.internals]

FAST = {
    "scheduler.submission.resource-stabilization-timeout": "0s",
    "scheduler.executing.cooldown-after-rescaling": "0s",
    "scheduler.executing.resource-stabilization-timeout": "1s",
}


def test_lowered_upper_bound_restarts_with_state_repartitioned_then_stops_cleanly(
        local_cluster_factory: Any, cluster_spark_factory: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    cluster = local_cluster_factory(1, cores_per_worker=3)
    # One executor with all three slots: the query starts at 3 as soon as it registers.
    spark = cluster_spark_factory(cluster, **{"spark.sql.shuffle.partitions": "3",
                                              "spark.executor.cores": "3"})
    rt = spark_adaptive.enable(spark, **FAST)
    rec = EventRecorder()
    rt.subscribe(rec, "test")
    out, cp = tmp_path / "out", tmp_path / "cp"
    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .groupBy((F.col("value") % 10).alias("k"))
             .agg(F.count("*").alias("n"), F.max("value").alias("top"))
             .writeStream.outputMode("complete")
             # Overwrite by batch id: a re-run batch replaces its own output.
             .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(f"{out}/batch={i}"))
             .option("checkpointLocation", str(cp))
             .trigger(processingTime="1 second").start())
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 3 and e.num_input_rows > 0,
                 timeout=120)
    query_id, run = query.id, query.runId

    rt.loop.call_sync(lambda: rt.scheduler.update_requirements(query.key, 1, 2))
    mark = rec.mark()
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 2 and e.num_input_rows > 0,
                 since=mark, timeout=120)
    last = history(rt, query.key)[-1]
    assert (last["kind"], last["fromParallelism"], last["toParallelism"]) == ("restart", 3, 2)
    assert last["outcome"] == "completed", last
    assert "repartition" in dict(last["timings"]), last
    assert query.id == query_id and query.runId != run

    query.stop_with_savepoint()  # for good, between two micro-batches
    snap = snapshot(rt, query.key)
    assert (snap["state"], snap["status"]) == ("Finished", "FINISHED")
    assert inspect_checkpoint(spark, str(cp)).complete

    # Exactly once across the restart: the last batch counts every value 0..top once.
    committed = glob.glob(f"{out}/batch=*/_SUCCESS")
    newest = max((os.path.dirname(p) for p in committed), key=lambda p: int(p.split("=")[-1]))
    rows = spark.read.parquet(newest).collect()
    top = max(r["top"] for r in rows)
    assert sum(r["n"] for r in rows) == top + 1
    for r in rows:
        assert r["n"] == len(range(r["k"], top + 1, 10))
