"""The JVM shim and the listener boundary on a real driver, each case an app of its own in
local mode (one subprocess each, as in test_activation_local.py). No cluster is started.

* the shim's listener drops a job or stage start with its end, never an end alone, and
  counts the events of a failed delivery as lost;
* the shim's SQL rule: a session's own spark.sql.shuffle.partitions, set after activation,
  is the count shuffles are written in; a cached plan keeps its output partitioning; a rule
  that fails leaves the query's plan as Spark made it;
* a SparkContext that Spark stops itself stops spark-adaptive too, through either listener.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytestmark = [pytest.mark.internals, pytest.mark.timeout(300)]

PRELUDE = """
import json, re, sys, threading, time
from pyspark.sql import SparkSession

def builder(master="local[2]", **conf):
    b = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
         .config("spark.adaptive.rest.enabled", "false"))
    for k, v in conf.items():
        b = b.config(k, v)
    return b

def report(**values):
    print("REPORT " + json.dumps(values), flush=True)

def partitions(df):
    # The partition counts of the exchanges in the final adaptive plan of an executed query.
    plan = df._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]
    return [int(n) for n in re.findall(r"(?:hash|range|roundrobin)partitioning\\(.*?(\\d+)\\)",
                                       plan)]
"""


def _run(body: str) -> dict[str, Any]:
    script = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240, env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    result: dict[str, Any] = {"output": out}
    for line in proc.stdout.splitlines():
        if line.startswith("REPORT "):
            result.update(json.loads(line[len("REPORT "):]))
    return result


def test_the_listener_drops_a_start_with_its_end_and_never_an_end_alone() -> None:
    # Python stalls on the first batch; three more jobs start while the queue (capacity 3)
    # is full; then the first job ends. Its end must reach Python: it is what tells the
    # batch executors that the job no longer runs.
    r = _run("""
        from spark_adaptive.spark.jvm import ensure_callback_server, jvm, new_shim_object
        from spark_adaptive.spark.jvm import shim_jar_path
        spark = builder().getOrCreate()
        sc = spark.sparkContext
        ensure_callback_server(sc)
        j = jvm(sc)
        go_on, got = threading.Event(), []

        class Stalled:
            class Java:
                implements = ["java.util.function.Consumer"]
            def accept(self, batch):
                got.extend(json.loads(line) for line in batch.split("\\n"))
                go_on.wait(60)

        listener = new_shim_object(sc, "AdaptiveListener", shim_jar_path(""))
        listener.setCapacity(3)
        listener.start(Stalled())
        none, props = j.PythonUtils.toSeq([]), j.java.util.Properties()
        succeeded = j.java.lang.Class.forName(
            "org.apache.spark.scheduler.JobSucceeded$").getField("MODULE$").get(None)
        start = lambda n: j.org.apache.spark.scheduler.SparkListenerJobStart(n, 0, none, props)
        listener.onJobStart(start(1))
        deadline = time.time() + 30
        while not got and time.time() < deadline:
            time.sleep(0.05)
        for n in (2, 3, 4):
            listener.onJobStart(start(n))
        listener.onJobEnd(j.org.apache.spark.scheduler.SparkListenerJobEnd(1, 1, succeeded))
        listener.onJobEnd(j.org.apache.spark.scheduler.SparkListenerJobEnd(4, 1, succeeded))
        go_on.set()
        deadline = time.time() + 30
        while listener.queued() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        listener.close(2000)
        report(events=[(e["type"], e["job_id"]) for e in got], dropped=listener.dropped())
        spark.stop()
    """)
    events = [tuple(e) for e in r["events"]]
    assert ("JobEnded", 1) in events, events
    started = {n for kind, n in events if kind == "JobStarted"}
    ended = {n for kind, n in events if kind == "JobEnded"}
    assert ended <= started, "an end whose start was dropped is dropped too"
    assert 4 not in started and r["dropped"] >= 2
    assert r["output"].count("stage and job events are dropped") == 1


def test_a_failed_delivery_is_counted_as_lost_and_the_first_is_logged() -> None:
    r = _run("""
        from spark_adaptive.spark.jvm import ensure_callback_server, new_shim_object
        from spark_adaptive.spark.jvm import shim_jar_path
        spark = builder().getOrCreate()
        sc = spark.sparkContext
        ensure_callback_server(sc)

        class Broken:
            class Java:
                implements = ["java.util.function.Consumer"]
            def accept(self, batch):
                raise RuntimeError("the handler failed")

        listener = new_shim_object(sc, "AdaptiveListener", shim_jar_path(""))
        listener.start(Broken())
        sc._jsc.sc().addSparkListener(listener)
        for _ in range(3):
            sc.parallelize(range(10), 2).count()
            time.sleep(0.5)
        sc._jsc.sc().removeSparkListener(listener)
        time.sleep(0.5)
        report(failures=listener.failures(), lost=listener.lost(),
               delivered=listener.delivered())
        listener.close(2000)
        spark.stop()
    """)
    assert r["failures"] >= 2 and r["lost"] >= r["failures"] and r["delivered"] == 0
    assert r["output"].count("to Python failed; they are lost") == 1


def test_a_sessions_own_shuffle_partitions_set_after_activation_is_the_count() -> None:
    # Plain Spark writes the shuffles in the session's spark.sql.shuffle.partitions (AQE
    # coalesces afterwards); spark-adaptive's initialPartitionNum (128) must not replace it.
    r = _run("""
        spark = builder(**{"spark.adaptive.enabled": "true",
                           "spark.adaptive.batch.enabled": "true"}).getOrCreate()
        initial = spark.conf.get("spark.sql.adaptive.coalescePartitions.initialPartitionNum")
        df = spark.range(0, 100000).selectExpr("id % 1000 as k", "id as v")
        seen, answers = {}, set()

        def run(tag, query):
            rows = sorted(tuple(r) for r in query.collect())
            answers.add(tuple(rows[:50]) + (len(rows),))
            seen[tag] = sorted(set(partitions(query)))

        spark.conf.set("spark.adaptive.batch.shuffle-partitions-from-estimate", "false")
        run("unset", df.groupBy("k").count())
        spark.conf.set("spark.sql.shuffle.partitions", "400")
        run("400", df.groupBy("k").count())
        run("400 repartition", df.repartition("k").groupBy("k").count())
        spark.conf.set("spark.adaptive.batch.shuffle-partitions-from-estimate", "true")
        run("400 estimate", df.groupBy("k").count())
        spark.conf.set("spark.sql.shuffle.partitions", "1")
        run("1 estimate", df.groupBy("k").count())
        # An initialPartitionNum the session sets itself wins, as on plain Spark.
        spark.conf.set("spark.adaptive.batch.shuffle-partitions-from-estimate", "false")
        spark.conf.set("spark.sql.shuffle.partitions", "400")
        spark.conf.set("spark.sql.adaptive.coalescePartitions.initialPartitionNum", "50")
        run("own initial", df.groupBy("k").count())
        report(initial=initial, seen=seen, answers=len(answers))
        spark.stop()
    """)
    assert r["initial"] == "128"
    assert r["seen"] == {"unset": [128], "400": [400], "400 repartition": [400],
                         "400 estimate": [16], "1 estimate": [1], "own initial": [50]}
    assert r["answers"] == 1
    assert "is not honoured" not in r["output"]


def test_a_side_partitioned_by_the_app_is_no_warning() -> None:
    # A join with a user's repartition(128, k) (or a bucketed table of 128 buckets): the
    # rule's count would break the join's co-partitioning, so Spark's plan stands, quietly.
    r = _run("""
        spark = builder(**{"spark.adaptive.enabled": "true",
                           "spark.adaptive.batch.enabled": "true",
                           "spark.sql.autoBroadcastJoinThreshold": "-1"}).getOrCreate()
        b = spark.range(0, 5000).selectExpr("id % 1000 as k", "id as z")
        u = spark.range(0, 100000).selectExpr("id % 1000 as k", "id as v").repartition(128, "k")
        joined = u.join(b, "k")
        report(count=joined.count(), seen=sorted(set(partitions(joined))))
        spark.stop()
    """)
    assert r["count"] == 500000 and r["seen"] == [128]
    assert "breaks its partitioning requirements" not in r["output"]


def test_a_cached_plan_keeps_the_partitioning_spark_planned_it_with() -> None:
    # Spark plans a cached DataFrame with applyFinalStageShuffleOptimizations=false, as its
    # output partitioning is fixed (canChangeCachedPlanOutputPartitioning): the rule must
    # leave that plan alone, so the join over it plans as with the rule off.
    r = _run("""
        spark = builder(**{"spark.adaptive.enabled": "true",
                           "spark.adaptive.batch.enabled": "true",
                           "spark.sql.shuffle.partitions": "64",
                           "spark.sql.autoBroadcastJoinThreshold": "-1"}).getOrCreate()
        other = spark.range(0, 50000).selectExpr("id % 3000 as k", "id as w")
        seen, answers = {}, []
        for flag in ("false", "true"):
            spark.conf.set("spark.adaptive.batch.shuffle-partitions-from-estimate", flag)
            agg = (spark.range(0, 100000 + (flag == "true")).selectExpr("id % 3000 as k")
                   .groupBy("k").count().cache())
            agg.count()
            joined = agg.join(other, "k")
            answers.append(joined.count())
            seen[flag] = sorted(set(partitions(joined)))
        report(seen=seen, answers=answers)
        spark.stop()
    """)
    assert r["seen"] == {"false": [64], "true": [64]}
    assert r["answers"] == [50000, 50000]


def test_a_rule_that_fails_leaves_the_plan_as_spark_made_it() -> None:
    r = _run("""
        spark = builder(**{"spark.adaptive.enabled": "true",
                           "spark.adaptive.batch.enabled": "true"}).getOrCreate()
        j, gw = spark.sparkContext._jvm, spark.sparkContext._gateway
        plan = spark.range(0, 10).groupBy("id").count()._jdf.queryExecution().executedPlan()
        rule_class = j.java.lang.Class.forName(
            "io.sparkadaptive.shim.ShufflePartitionsFromEstimate", True,
            j.org.apache.spark.util.Utils.getContextOrSparkClassLoader())
        args = gw.new_array(j.java.lang.Object, 1)  # no session: apply() fails inside
        rule = rule_class.getConstructors()[0].newInstance(args)
        try:
            same = rule.apply(plan).equals(plan)
        except Exception as e:
            same = str(e).splitlines()[0]
        report(same=same)
        spark.stop()
    """)
    assert r["same"] is True
    assert r["output"].count("sizing a query's shuffles failed") == 1


@pytest.mark.parametrize("listener", ["shim", "py4j"])
def test_a_sparkcontext_spark_stops_itself_stops_spark_adaptive(listener: str) -> None:
    r = _run(f"""
        from spark_adaptive.spark.runtime import runtime_for
        spark = builder(**{{"spark.adaptive.enabled": "true",
                            "spark.adaptive.listener": "{listener}"}}).getOrCreate()
        sc = spark.sparkContext
        sc.parallelize(range(100), 4).count()
        running = runtime_for(sc) is not None
        mx = sc._jvm.java.lang.management.ManagementFactory.getThreadMXBean()

        def jvm_threads():
            return sorted(t.getThreadName() for t in mx.dumpAllThreads(False, False)
                          if "spark-adaptive" in t.getThreadName())

        def python_threads():
            return sorted(t.name for t in threading.enumerate()
                          if t.name.startswith("spark-adaptive"))

        before = (jvm_threads(), python_threads())
        sc._jsc.sc().stop()  # the JVM stops the context, as on a fatal scheduler error
        deadline = time.time() + 60
        while (runtime_for(sc) is not None or python_threads()) and time.time() < deadline:
            time.sleep(0.1)
        report(running=running, before=before, runtime=runtime_for(sc) is not None,
               jvm=jvm_threads(), python=python_threads())
    """)
    assert r["running"] and r["before"][1], r["before"]
    if listener == "shim":
        assert r["before"][0] == ["spark-adaptive-shim-dispatch"]
    assert (r["runtime"], r["jvm"], r["python"]) == (False, [], [])
