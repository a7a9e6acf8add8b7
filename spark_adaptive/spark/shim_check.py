"""Is the JVM shim there, and does it load on this Spark? Said once, at activation.

spark-adaptive runs without the shim, on pure-py4j paths, but it then loses

* per-task event filtering in the JVM: Spark's listener bus calls into Python
  through py4j for every task, which slows jobs of many tasks;
* the task figures of completed stages, which only the shim's listener keeps
  (``AdaptiveListener``): the busy time of each micro-batch, from which the
  autoscaler measures the processing rate per slot and a batch's fixed and
  per-row cost (without it, only Spark's processedRowsPerSecond), and the
  slowest and median task of each stage that batch reports give for skew;
* clean stops exactly at a micro-batch boundary (``BatchBoundary``);
* fast removal of hung executors (``ExecutorControl``);
* the byte-balanced range reads of the RDD helpers (``ShuffleSizes``,
  ``RangeShuffleRDD``, ``InputSizes``, ``LineChunksRDD``);
* DataFrame shuffles sized by the query (``ShufflePartitionsFromEstimate``,
  through ``AdaptiveExtensions``): fewer partitions for small queries, and a
  session's own ``spark.sql.shuffle.partitions`` set after activation;
* spark-adaptive's figures in Spark's metrics system (``AdaptiveMetricsSource``).

So a missing jar, or one whose classes do not load on the running Spark, is one
WARNING when spark-adaptive starts, naming what is lost and how to get the
shim, instead of a silent fallback. Each feature still checks for the shim on
its own and falls back quietly: this module is only the one place that says so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from spark_adaptive.spark.jvm import PACKAGED_SHIM, gateway, jvm, shim_jar_path

if TYPE_CHECKING:
    from pyspark import SparkContext

    from spark_adaptive.settings import Settings

log = logging.getLogger(__name__)

#: The shim classes the Python side loads by name. Each is loaded and initialized at
#: activation, so the JVM links it against the running Spark's classes.
SHIM_CLASSES = ("AdaptiveListener", "BatchBoundary", "ExecutorControl", "ShuffleSizes",
                "RangeShuffleRDD", "InputSizes", "LineChunksRDD", "ShufflePartitionsFromEstimate",
                "AdaptiveExtensions", "AdaptiveMetricsSource")

LOST = ("per-task event filtering in the JVM (Spark's listener bus now makes a py4j call "
        "into Python for every task, which slows jobs of many tasks), the task figures of "
        "completed stages (the autoscaler loses each micro-batch's busy time, so it measures "
        "the rate per slot from Spark's processedRowsPerSecond and fits no per-batch cost, and "
        "the batch stage reports lose the slowest and median task they give for skew), clean "
        "stops at micro-batch boundaries, fast removal of hung executors, the byte-balanced "
        "range reads of the RDD helpers, DataFrame shuffles sized by the query (fewer "
        "partitions for small queries, and a session's own spark.sql.shuffle.partitions set "
        "after activation), and spark-adaptive's figures in Spark's metrics system")
HOW = ("install spark-adaptive from a wheel (pip builds one with the shim when a JDK 17+ "
       "is present), or build the jar from a checkout with jvm-shim/build.sh or make setup, "
       "or point spark.adaptive.shim.jar at one")


def shim_problem(sc: SparkContext, configured: str = "") -> str | None:
    """Why the shim cannot be used on ``sc``, or None when all its classes load.

    The classes are loaded by a class loader of this check's own, closed afterwards,
    never by the one the features use: a shim class loaded early there would resolve
    its nested classes later, perhaps from Spark's loader once the jar is on it too
    (``spark.sql.extensions``), and two halves of one package in two loaders cannot
    reach each other's package-private members. Its parent is the loader of Spark's
    own classes, which sees no jar added at run time, so it is this jar that is
    checked against this Spark.
    """
    jar = shim_jar_path(configured)
    if jar is None:
        if configured:
            return f"spark.adaptive.shim.jar={configured} is not a file"
        return f"the installed package has no shim jar ({PACKAGED_SHIM} is missing)"
    j = jvm(sc)
    name = ""
    loader = None
    try:
        urls = gateway(sc).new_array(j.java.net.URL, 1)
        urls[0] = j.java.io.File(str(jar)).toURI().toURL()
        loader = j.java.net.URLClassLoader(
            urls, j.org.apache.spark.util.Utils.getSparkClassLoader())
        for name in SHIM_CLASSES:
            j.java.lang.Class.forName(f"io.sparkadaptive.shim.{name}", True, loader)
    except Exception as e:
        first = _java_error(e)
        what = f"io.sparkadaptive.shim.{name} does not load" if name else "it does not open"
        return f"the shim jar {jar}: {what} on Spark {sc.version} ({first})"
    finally:
        if loader is not None:
            try:
                loader.close()
            except Exception:
                pass  # a check only: nothing depends on the loader
    return None


def usable_shim(sc: SparkContext, settings: Settings) -> Path | None:
    """The shim jar to use, or None after one WARNING saying what is lost without it.

    With ``spark.adaptive.listener=shim`` nothing is checked here: the listener then
    fails the start itself when the shim does not load.
    """
    if settings.listener == "shim":
        return shim_jar_path(settings.shim_jar)
    problem = shim_problem(sc, settings.shim_jar)
    if problem is None:
        return shim_jar_path(settings.shim_jar)
    log.warning("spark-adaptive runs without its JVM shim: %s. Without it spark-adaptive "
                "loses %s. To get the shim, %s.", problem, LOST, HOW)
    return None


def _java_error(e: Exception) -> str:
    """The Java exception behind a py4j error (``java.lang.ClassNotFoundException: ...``)."""
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            return str(java.toString())
        except Exception:
            pass
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
