"""The warm-up job that :class:`~spark_adaptive.core.streaming.warm_up.WarmUp` runs.

A small aggregation with a shuffle, written to Spark's ``noop`` sink: it loads
Spark SQL's classes, compiles generated code and exercises the shuffle on
every executor it reaches. It has twice as many tasks as the application has
task slots (at least 4, at most 512), none with a preferred location, so
Spark's scheduler spreads them over every executor, the new ones included (on
the ones already warm they take milliseconds). It runs on a thread of its own
in the job group :data:`~spark_adaptive.core.streaming.warm_up.WARM_UP_JOB_GROUP`, so the
Spark UI shows it as "spark-adaptive: warm up executor(s) ...", and a failure
is logged and otherwise ignored: a warm-up is an optimization only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spark_adaptive.core.streaming.warm_up import WARM_UP_JOB_GROUP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROWS_PER_TASK = 2000


def warm_up_launcher(
    session: Callable[[], SparkSession | None], slots: Callable[[], int],
    post: Callable[[Callable[[], None]], None],
) -> Callable[[Sequence[str], Callable[[], None]], None]:
    """``launch(executor_ids, done)`` for :class:`~spark_adaptive.core.streaming.warm_up.WarmUp`.

    ``session()`` is the session of the managed queries (None: nothing to run with),
    ``slots()`` the application's task slots now, ``post`` puts ``done`` back on the
    scheduler thread."""

    def launch(executor_ids: Sequence[str], done: Callable[[], None]) -> None:
        spark = session()
        if spark is None:
            post(done)
            return
        tasks = min(max(4, 2 * slots()), 512)
        threading.Thread(target=_run, args=(spark, tuple(executor_ids), tasks, done, post),
                         name="spark-adaptive-warm-up", daemon=True).start()

    return launch


def _run(spark: SparkSession, executor_ids: tuple[str, ...], tasks: int,
         done: Callable[[], None], post: Callable[[Callable[[], None]], None]) -> None:
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    try:
        sc.setJobGroup(WARM_UP_JOB_GROUP, "spark-adaptive: warm up executor(s) "
                       + ", ".join(executor_ids), interruptOnCancel=True)
        (spark.range(0, tasks * ROWS_PER_TASK, 1, tasks)
         .withColumn("k", F.col("id") % 997)
         .repartition(tasks, "k")
         .groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"))
         .write.format("noop").mode("overwrite").save())
    except Exception as e:  # the context may be stopping; a warm-up is only an optimization
        log.info("warming up executor(s) %s did not complete: %s", ", ".join(executor_ids),
                 str(e).splitlines()[0] if str(e) else type(e).__name__)
    finally:
        try:
            sc._jsc.clearJobGroup()
        except Exception:  # the context is gone: nothing to clear
            pass
        post(done)
