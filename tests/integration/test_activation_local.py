"""Activation on a real driver, each case an app of its own in local mode (local[1]): a
process keeps the first session's options in its JVM's system properties, so every case
starts from a fresh interpreter and JVM. No cluster is started."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(300)

BUILDER = """
import json, sys, threading
from pyspark.sql import SparkSession

def builder(**conf):
    b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for k, v in conf.items():
        b = b.config(k, v)
    return b

def report(**values):
    print("REPORT " + json.dumps(values), flush=True)

def scheduler_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("spark-adaptive")]
"""


def _run(body: str, env: dict[str, str] | None = None, ok: bool = True) -> dict[str, Any]:
    """Run ``body`` after :data:`BUILDER` in a new interpreter (the start-up hook loads as
    in any app); the values it reported."""
    script = BUILDER + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240, env={**os.environ, **(env or {})})
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == ok, out[-4000:]
    reports = [json.loads(line[len("REPORT "):]) for line in proc.stdout.splitlines()
               if line.startswith("REPORT ")]
    result: dict[str, Any] = {"output": out}
    for r in reports:
        result.update(r)
    return result


def test_the_rest_token_is_read_as_set_not_as_spark_masks_it() -> None:
    """Spark's conf dumps mask every value whose key or value matches
    spark.redaction.regex; the token (and a path or class name with "secret" or "token")
    must reach spark-adaptive as set."""
    r = _run("""
        import urllib.request, urllib.error
        from spark_adaptive.spark.runtime import runtime_for
        spark = builder(**{"spark.adaptive.enabled": "true", "spark.adaptive.rest.port": "0",
                           "spark.adaptive.rest.token": "s3cretvalue",
                           "spark.adaptive.scheduler.non-replayable-sources":
                               "com.acme.TokenStreamSource"}).getOrCreate()
        rt = runtime_for(spark.sparkContext)
        codes = {}
        for token in ("s3cretvalue", "*********(redacted)"):
            req = urllib.request.Request(rt.rest.url + "/queries",
                                         headers={"Authorization": "Bearer " + token})
            try:
                codes[token] = urllib.request.urlopen(req, timeout=30).status
            except urllib.error.HTTPError as e:
                codes[token] = e.code
        report(codes=codes,
               sources=rt.settings.scheduler.non_replayable_sources)
        spark.stop()
    """)
    assert r["codes"] == {"s3cretvalue": 200, "*********(redacted)": 401}
    assert r["sources"] == "com.acme.TokenStreamSource"


@pytest.mark.internals
def test_a_builder_that_enables_it_keeps_the_heartbeat_spark_submit_set() -> None:
    body = """
        spark = builder(**{"spark.adaptive.enabled": "true",
                           "spark.adaptive.rest.enabled": "false"}).getOrCreate()
        heartbeat = spark.sparkContext.getConf().get("spark.executor.heartbeatInterval")
        spark.stop()
        # A later context of the process, with spark-adaptive off, gets Spark's default.
        spark = builder(**{"spark.adaptive.enabled": "false"}).getOrCreate()
        later = spark.sparkContext.getConf().get("spark.executor.heartbeatInterval", None)
        report(heartbeat=heartbeat, later=later)
        spark.stop()
    """
    submitted = _run(body, {"PYSPARK_SUBMIT_ARGS":
                            "--conf spark.executor.heartbeatInterval=5s pyspark-shell"})
    assert submitted["heartbeat"] == "5s"
    own = _run(body)
    assert (own["heartbeat"], own["later"]) == ("3s", None)
    # Enabled by spark-submit alone: the hook sets it through the JVM's system properties,
    # which it clears once the context has read them.
    r = _run("""
        from pyspark import SparkContext
        sc = SparkContext(master="local[1]")
        report(heartbeat=sc.getConf().get("spark.executor.heartbeatInterval"),
               left=sc._jvm.java.lang.System.getProperty("spark.executor.heartbeatInterval"))
        sc.stop()
    """, {"PYSPARK_SUBMIT_ARGS": "--conf spark.adaptive.enabled=true "
                                 "--conf spark.adaptive.rest.enabled=false pyspark-shell"})
    assert (r["heartbeat"], r["left"]) == ("3s", None)


@pytest.mark.parametrize("value", ["yes", "1", "ture"])
def test_a_bad_value_of_the_key_itself_stops_the_app(value: str) -> None:
    r = _run(f"""
        spark = builder(**{{"spark.adaptive.enabled": "{value}"}}).getOrCreate()
        report(started=True)
    """, ok=False)
    assert "started" not in r
    assert f"spark.adaptive.enabled='{value}' is not valid: accepted values: true, false" \
        in r["output"]


def test_a_start_that_fails_partway_leaves_nothing_running() -> None:
    r = _run("""
        from pyspark import SparkContext
        try:
            builder(**{"spark.adaptive.enabled": "true", "spark.adaptive.rest.enabled": "false",
                       "spark.adaptive.listener": "shim",
                       "spark.adaptive.shim.jar": "/nonexistent.jar"}).getOrCreate()
        except Exception as e:
            error = type(e).__name__
        from spark_adaptive.spark import runtime
        report(error=error, threads=scheduler_threads(), runtimes=len(runtime._runtimes),
               context=SparkContext._active_spark_context is not None)
    """)
    assert r["error"] == "ShimNotAvailableError"
    assert (r["threads"], r["runtimes"], r["context"]) == ([], 0, False)


def test_a_session_after_stop_active_session_has_only_the_options_it_is_given() -> None:
    """The process's first session enables spark-adaptive and sets spark.executor.cores;
    PySpark leaves them in the JVM's system properties. After the test helper's
    stop_active_session, a session made without them has neither, and enabling
    spark-adaptive on it with settings of its own works. What spark-submit was given
    (PYSPARK_SUBMIT_ARGS) stays, also where the first session set the key too."""
    r = _run("""
        import spark_adaptive
        from spark_adaptive.spark.runtime import runtime_for
        from spark_adaptive.testing.session import stop_active_session
        first = builder(**{"spark.adaptive.enabled": "true", "spark.adaptive.rest.enabled":
                           "false", "spark.executor.cores": "1",
                           "spark.sql.shuffle.partitions": "3"}).getOrCreate()
        managed_first = runtime_for(first.sparkContext) is not None
        stop_active_session()
        spark = builder().getOrCreate()
        conf = spark.sparkContext.getConf()
        managed = runtime_for(spark.sparkContext) is not None
        rt = spark_adaptive.enable(spark, **{"rest.enabled": "false",
                                             "parallelism.upper-bound": "4"})
        report(managed_first=managed_first, managed=managed,
               enabled=conf.get("spark.adaptive.enabled", None),
               cores=conf.get("spark.executor.cores", None),
               submitted=conf.get("spark.sql.shuffle.partitions", None),
               upper=rt.settings.scheduler.upper_bound)
        stop_active_session()
    """, {"PYSPARK_SUBMIT_ARGS": "--conf spark.sql.shuffle.partitions=7 pyspark-shell"})
    assert (r["managed_first"], r["managed"], r["enabled"], r["cores"]) == (
        True, False, None, None), r["output"][-3000:]
    assert (r["upper"], r["submitted"]) == (4, "7")


@pytest.mark.internals
def test_without_java_the_jvm_is_launched_once() -> None:
    r = _run("""
        try:
            builder().getOrCreate()
        except Exception as e:
            report(error=type(e).__name__)
    """, {"JAVA_HOME": "/nonexistent-java"})
    assert r["error"] == "PySparkRuntimeError"
    assert r["output"].count("/nonexistent-java/bin/java") == 1, r["output"]


@pytest.mark.skipif(importlib.util.find_spec("grpc") is None
                    or importlib.util.find_spec("google.rpc") is None,
                    reason="Spark Connect's client libraries (pyspark[connect]) are not installed")
def test_a_local_connect_session_is_not_managed_and_one_warning_says_so() -> None:
    r = _run("""
        spark = (SparkSession.builder.remote("local[1]")
                 .config("spark.adaptive.enabled", "true")
                 .config("spark.adaptive.rest.port", "0").getOrCreate())
        count = spark.range(5).count()
        report(session=type(spark).__module__, count=count, threads=scheduler_threads(),
               imported="spark_adaptive.activation" in sys.modules)
        spark.stop()
    """)
    assert r["session"] == "pyspark.sql.connect.session" and r["count"] == 5
    assert (r["threads"], r["imported"]) == ([], False)
    assert r["output"].count("WARN SparkAdaptive: spark.adaptive.enabled=true is set for a "
                             "Spark Connect session") == 1
