"""The warm-up job that :class:`~spark_adaptive.core.streaming.warm_up.WarmUp` runs.

A new executor's first tasks of a kind are slow: its JVM loads the classes, compiles the
generated code and has not been through the JIT yet. Three steps take most of that out of a
restart rescale's way, on a thread of their own while the query runs on:

1. A small aggregation with a shuffle, written to Spark's ``noop`` sink, in the job group
   :data:`~spark_adaptive.core.streaming.warm_up.WARM_UP_JOB_GROUP` (the Spark UI shows it
   as "spark-adaptive: warm up executor(s) ..."): Spark SQL's classes, generated code, the
   shuffle. It has twice as many tasks as the application has task slots (at least 4, at
   most 512), none with a preferred location, so Spark spreads them over every executor,
   the new ones included (on the ones already warm they take milliseconds).
2. When a managed query keeps state: one micro-batch of a small stateful aggregation on the
   RocksDB state store, read from parquet files it has just written, named
   ``spark-adaptive warm-up`` and started with Spark's own ``start()`` (spark-adaptive
   does not manage it). That is what a restart rescale runs next on the new executors:
   the state repartition writes RocksDB stores, and the first micro-batch loads them and
   reads its source. It runs in one session of spark-adaptive's own, created once from
   the app's (whose runtime settings, file-system credentials among them, are copied in
   before each run): the app's session, its ``spark.streams`` and the listeners it added
   never see the query; the Spark UI and listeners configured for every session
   (``spark.sql.streaming.streamingQueryListeners``) do. Its scratch files live under the
   stateful query's checkpoint (a file system every executor reaches) and are deleted
   afterwards. It has twice as many partitions as executors joined (at least 4, at most
   :data:`STATE_PARTITIONS_MAX`), and is stopped after :data:`STREAM_TIMEOUT_MS`.
3. Once per app (until one succeeds), after such a micro-batch: Spark's offline state
   repartition of its checkpoint onto one partition more, in the same session. It loads
   the repartition's code on the driver, which a restart rescale runs next and nothing
   else loads (the app's first repartition is the slow one). Later warm-ups leave it
   out: the driver stays warm, a new executor's share of a repartition is warmed enough
   by step 2, and every job of a warm-up holds back the query's tasks on the executors
   it takes (see docs/benchmarks.md, Rescale downtime).

A failure is logged and otherwise ignored: a warm-up is an optimization only.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.streaming.warm_up import WARM_UP_JOB_GROUP
from spark_adaptive.spark.checkpoint import PROVIDER_KEY, ROCKSDB_PROVIDER
from spark_adaptive.spark.driver import SHUFFLE_PARTITIONS
from spark_adaptive.spark.jvm import error_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROWS_PER_TASK = 2000
STATE_ROWS_PER_TASK = 50
STATE_PARTITIONS_MAX = 32
#: Longest the warm-up's micro-batch may run before it is stopped (milliseconds): as long
#: as a restart waits for a warm-up at most (``warm_up.DEFAULT_LIMIT`` of the core).
STREAM_TIMEOUT_MS = 20_000
QUERY_NAME = "spark-adaptive warm-up"


def warm_up_launcher(
    session: Callable[[], SparkSession | None], slots: Callable[[], int],
    post: Callable[[Callable[[], None]], None],
    state_root: Callable[[], str | None] = lambda: None,
) -> Callable[[Sequence[str], Callable[[], None]], None]:
    """``launch(executor_ids, done)`` for :class:`~spark_adaptive.core.streaming.warm_up.WarmUp`.

    ``session()`` is the session of the managed queries (None: nothing to run with),
    ``slots()`` the application's task slots now, ``post`` puts ``done`` back on the
    scheduler thread. ``state_root()`` is the checkpoint of a managed query that keeps
    state (None: there is none, and no stateful step is run)."""

    stateful = _StatefulSteps()

    def launch(executor_ids: Sequence[str], done: Callable[[], None]) -> None:
        spark = session()
        if spark is None:
            post(done)
            return
        tasks = min(max(4, 2 * slots()), 512)
        root = state_root()
        threading.Thread(target=_run, args=(spark, stateful, tuple(executor_ids), tasks, root,
                                            done, post),
                         name="spark-adaptive-warm-up", daemon=True).start()

    return launch


class _StatefulSteps:
    """What the stateful steps of an app's warm-ups share: spark-adaptive's own session
    (created at the first use), whether the offline repartition has run (once per app,
    until one succeeds), and a lock, as one query name runs once at a time in a session."""

    def __init__(self) -> None:
        self.session: SparkSession | None = None
        self.repartitioned = False
        self.lock = threading.Lock()


def _run(spark: SparkSession, stateful: _StatefulSteps, executor_ids: tuple[str, ...],
         tasks: int, root: str | None, done: Callable[[], None],
         post: Callable[[Callable[[], None]], None]) -> None:
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    which = ", ".join(executor_ids)
    try:
        sc.setJobGroup(WARM_UP_JOB_GROUP, f"spark-adaptive: warm up executor(s) {which}",
                       interruptOnCancel=True)
        (spark.range(0, tasks * ROWS_PER_TASK, 1, tasks)
         .withColumn("k", F.col("id") % 997)
         .repartition(tasks, "k")
         .groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"))
         .write.format("noop").mode("overwrite").save())
        if root is not None:
            partitions = min(max(4, 2 * len(executor_ids)), STATE_PARTITIONS_MAX)
            with stateful.lock:
                if stateful.session is None:
                    stateful.session = spark.newSession()
                if _stateful_batch(spark, stateful.session, root, partitions,
                                   repartition=not stateful.repartitioned):
                    stateful.repartitioned = True
    except Exception as e:  # the context may be stopping; a warm-up is only an optimization
        log.info("warming up executor(s) %s did not complete: %s", which, error_text(e))
    finally:
        try:
            sc._jsc.clearJobGroup()
        except Exception:  # the context is gone: nothing to clear
            pass
        post(done)


def _stateful_batch(app: SparkSession, session: SparkSession, root: str, tasks: int,
                    repartition: bool) -> bool:
    """One micro-batch of a stateful aggregation on RocksDB, read from parquet, on scratch
    files under ``root`` (deleted afterwards), in ``session`` with the runtime settings of
    the ``app``'s session; then, with ``repartition``, its state repartitioned offline.
    True if it was."""
    from pyspark.sql import functions as F

    for key, value in app.conf.getAll.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
    session.conf.set(SHUFFLE_PARTITIONS, str(tasks))
    session.conf.set(PROVIDER_KEY, ROCKSDB_PROVIDER)
    scratch = f"{root.rstrip('/')}/spark-adaptive/warm-up-{uuid.uuid4().hex[:12]}"
    try:
        (session.range(0, tasks * STATE_ROWS_PER_TASK, 1, tasks)
         .selectExpr("id % 1000 AS key", "CAST(id AS STRING) AS payload")
         .write.parquet(f"{scratch}/input"))
        counts = (session.readStream.schema("key LONG, payload STRING")
                  .parquet(f"{scratch}/input")
                  .groupBy("key").agg(F.count("*").alias("n"), F.max("payload").alias("last")))
        writer = (counts.writeStream.format("noop").outputMode("update")
                  .trigger(availableNow=True).queryName(QUERY_NAME)
                  .option("checkpointLocation", f"{scratch}/checkpoint"))
        # Spark's own start on the JVM writer: the app's start() is spark-adaptive's hook,
        # which would manage this query like one of the app's.
        query = writer._jwrite.start()
        if not query.awaitTermination(STREAM_TIMEOUT_MS):
            query.stop()
            return False
        if not repartition:
            return False
        session._streamingCheckpointManager.repartition(f"{scratch}/checkpoint", tasks + 1)
        return True
    finally:
        _delete(app, scratch)


def _delete(spark: SparkSession, location: str) -> None:
    try:
        jvm: Any = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(location)
        path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(path, True)
    except Exception as e:  # scratch files left behind cost a few KB; say so
        log.info("could not delete the warm-up's scratch files %s: %s", location, error_text(e))
