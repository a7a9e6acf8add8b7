"""spark-adaptive demo: a streaming query on a local Spark cluster as workers join and leave.

Starts a standalone cluster on 127.0.0.1 with one worker, runs a stateful
streaming query with spark-adaptive enabled, adds two workers, kills one, and
prints what spark-adaptive sees as it happens.

    make demo
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time

from spark_adaptive.core import events as ev
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.session import cluster_session

T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {text}", flush=True)


def show(event: ev.Event) -> None:
    if isinstance(event, ev.ExecutorAdded):
        say(f"executor {event.executor_id} added on {event.host} ({event.cores} core)")
    elif isinstance(event, ev.ExecutorRemoved):
        say(f"executor {event.executor_id} removed: {event.reason}")
    elif isinstance(event, ev.QueryProgress):
        say(f"batch {event.batch_id}: {event.num_input_rows} rows, "
            f"{event.processed_rows_per_second:.0f} rows/s, state partitions "
            f"{event.state_partitions}")


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = tempfile.mkdtemp(prefix="spark-adaptive-demo-")
    with LocalCluster(workers=1, work_dir=os.path.join(work, "cluster")) as cluster:
        say(f"local cluster up at {cluster.master_url} with 1 worker")
        spark = cluster_session(cluster, "spark-adaptive-demo",
                                **{"spark.adaptive.enabled": "true"})
        spark.sparkContext.setLogLevel("ERROR")
        from pyspark.sql import functions as F

        from spark_adaptive.spark.runtime import runtime_for

        rt = runtime_for(spark.sparkContext)
        assert rt is not None, "spark.adaptive.enabled=true activates spark-adaptive"
        say(f"spark-adaptive active, listening through the {rt.listener_path} path")
        rec = EventRecorder()
        rt.subscribe(lambda e: (rec(e), show(e)), "demo")
        rt.ensure_query_listener(spark)

        counts = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
                  .groupBy((F.col("value") % 10).alias("key")).count())
        out = os.path.join(work, "out")
        query = (counts.writeStream.outputMode("complete")
                 .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(f"{out}/{i}"))
                 .option("checkpointLocation", os.path.join(work, "checkpoint"))
                 .trigger(processingTime="2 seconds").start())
        rec.wait_for(ev.QueryProgress, lambda e: e.num_input_rows > 0, timeout=120)
        for _ in range(2):
            mark = rec.mark()
            w = cluster.add_worker()
            say(f"{w.name} joined the cluster")
            rec.wait_for(ev.ExecutorAdded, since=mark, timeout=120)
        mark = rec.mark()
        rec.wait_for(ev.QueryProgress, since=mark, timeout=120)
        w = cluster.kill_worker()
        say(f"{w.name} killed (SIGKILL: the node and its executor are gone)")
        rec.wait_for(ev.ExecutorRemoved, since=mark, timeout=120)
        mark = rec.mark()
        rec.wait_for(ev.QueryProgress, since=mark, timeout=120)
        query.stop()
        spark.stop()
    say(f"done; {len(rec.of(ev.ExecutorAdded))} executors added, "
        f"{len(rec.of(ev.ExecutorRemoved))} removed, {len(rec.of(ev.QueryProgress))} batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
