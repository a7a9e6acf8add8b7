"""SparkSessions on a :class:`~spark_adaptive.testing.cluster.LocalCluster`.

A Python process has one SparkContext at a time: a session on a cluster is made
after the one running is stopped, whoever made it (a local session of
pytest-spark's ``spark_session`` fixture too).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from spark_adaptive.spark.jvm import clear_system_properties, registered_executors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_adaptive.testing.cluster import LocalCluster

log = logging.getLogger(__name__)

#: Settings that keep a test app small and quick on a laptop-sized machine.
TEST_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "512m",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.ui.showConsoleProgress": "false",
}


#: Options of the first session that later ones keep: a session without a master or a name
#: of its own takes the first one's, as PySpark's launch of the JVM left them (without
#: them, and without spark-submit's, it could not start at all).
_KEPT_OPTIONS = ("spark.master", "spark.app.name")


def stop_active_session() -> None:
    """Stop whatever SparkContext this process has, so a new one can take other settings.

    PySpark hands the options of a process's first session to the JVM it launches as
    system properties, and every SparkConf made later in the process loads them: a key
    one test's session set (``spark.adaptive.enabled``, ``spark.executor.cores``) would
    reach the sessions of the tests after it. Those options (the ``spark.*`` ones but
    :data:`_KEPT_OPTIONS`) are cleared here, as spark-adaptive's start-up hook saw them
    at the launch, so the next session has the options it is given, spark-submit's
    (``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf``) and Spark's defaults. A key that
    ``PYSPARK_SUBMIT_ARGS`` set as well keeps spark-submit's value, which wins at the
    launch, unless the two are equal; one that ``spark-defaults.conf`` set as well is
    gone (spark-submit skipped it for the session's). Without the hook
    (``SPARK_ADAPTIVE_STARTUP=0``, or a process that never loaded it) nothing is known
    of the launch and nothing is cleared."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    hook = sys.modules.get("_spark_adaptive_startup")  # loaded at start-up, if at all
    launched = getattr(hook, "launch_options", None) or ()
    clear_system_properties(SparkContext, [(k, v) for k, v in launched
                                           if k.startswith("spark.") and k not in _KEPT_OPTIONS])


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark`` if its SparkContext is the one running. One already stopped, or
    replaced by another, is left alone: stopping its session again would clear the
    session now active in the JVM."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is spark.sparkContext:
        spark.stop()


def cluster_session(cluster: LocalCluster, app_name: str = "spark-adaptive-test",
                    **conf: str | None) -> SparkSession:
    """A new SparkSession whose master is ``cluster``; ``conf`` overrides :data:`TEST_CONF`
    (``None`` leaves a key of it unset). The SparkContext running, if any, is stopped first."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        log.info("stopping the SparkContext running in this process to start one on %s",
                 cluster.master_url)
    stop_active_session()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(cluster.master_url).appName(app_name)
    for k, v in {**TEST_CONF, **conf}.items():
        if v is not None:
            builder = builder.config(k, v)
    return builder.getOrCreate()


def wait_for_executors(spark: SparkSession, count: int, timeout: float = 120.0) -> None:
    """Block until at least ``count`` executors have registered with the app's driver.

    A query started before an app's executors register runs at its configured partitions
    and is rescaled once they come; tests that assert on a first partition count wait
    for the executors first.
    """
    deadline = time.monotonic() + timeout
    while True:
        registered = registered_executors(spark.sparkContext)
        if registered >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{registered} of {count} executors registered within {timeout}s")
        time.sleep(0.2)
