"""The foundation on a real local standalone cluster: events in, executors out, activation."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.core.ports import ExecutorRelease
from spark_adaptive.spark.listener import Py4jListener
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.recorder import EventRecorder

pytestmark = pytest.mark.timeout(300)


def _enable(spark, **conf):  # type: ignore[no-untyped-def]
    rt = spark_adaptive.enable(spark, **conf)
    rec = EventRecorder()
    rt.subscribe(rec, "test recorder")
    return rt, rec


@pytest.mark.parametrize("listener", ["shim", "py4j"])
def test_worker_join_and_executor_kill_reach_python(local_cluster, cluster_spark_factory, listener):
    spark = cluster_spark_factory(local_cluster)
    rt, rec = _enable(spark, listener=listener)
    assert rt.listener_path == listener
    first = rec.wait_for(ev.ExecutorAdded)  # the executor on the first worker

    mark = rec.mark()
    joined = local_cluster.add_worker()
    added = rec.wait_for(ev.ExecutorAdded, since=mark,
                         where=lambda e: e.executor_id != first.executor_id)
    assert added.host == "127.0.0.1" and added.cores == 1

    mark = rec.mark()
    killed = local_cluster.kill_executor(added.executor_id)
    removed = rec.wait_for(ev.ExecutorRemoved, since=mark,
                           where=lambda e: e.executor_id == added.executor_id)
    assert removed.reason, "Spark gives a reason for every removal"
    assert killed.worker == joined.name  # the executor of the worker that joined


def test_requesting_one_then_three_then_two_executors(local_cluster_factory, cluster_spark_factory):
    cluster = local_cluster_factory(3)
    spark = cluster_spark_factory(cluster)
    rt, rec = _enable(spark)
    act = rt.actuator

    def live() -> set[str]:
        alive: set[str] = set()
        for e in rec.events:
            if isinstance(e, ev.ExecutorAdded):
                alive.add(e.executor_id)
            elif isinstance(e, ev.ExecutorRemoved):
                alive.discard(e.executor_id)
        return alive

    def wait_live(n: int) -> None:
        rec.wait_for(ev.Event, where=lambda e: len(live()) == n, timeout=90)

    wait_live(3)  # standalone: the app takes every free core at first
    for target in (1, 3, 2):
        # A lower total ends no executor in standalone mode: the newest beyond it are named
        # to release, as the reconciler names them.
        newest = sorted(live(), key=int)[target:]
        act.request_total_executors(target, [ExecutorRelease(e, "a test") for e in newest])
        wait_live(target)
        assert rt.scheduler.resources.live_slots == target  # one core each, task.cpus=1
    # Surplus executors are killed before the new total is requested, so the last request
    # may still be on its way when the executors are already gone.
    assert act.drain()
    assert act.requested == [1, 3, 2]
    assert len(rec.of(ev.ExecutorRemoved)) == 3  # 3->1 released two, 3->2 one


def test_stage_completed_carries_the_real_shuffle_bytes_of_a_groupby(local_cluster,
                                                                      cluster_spark_factory):
    from pyspark.sql import functions as F

    spark = cluster_spark_factory(local_cluster, **{"spark.sql.adaptive.enabled": "false"})
    rt, shim_rec = _enable(spark, listener="shim")
    py4j_rec = EventRecorder()
    py4j_listener = Py4jListener(spark.sparkContext, py4j_rec)  # both paths, one job
    try:
        spark.sparkContext.setJobGroup("groupby-under-test", "groupBy")
        rows = (spark.range(0, 200_000, numPartitions=4)
                .groupBy((F.col("id") % 1000).alias("k")).agg(F.sum("id")).collect())
        assert len(rows) == 1000
        store = spark.sparkContext._jsc.sc().statusStore()
        no_quantiles = spark.sparkContext._gateway.new_array(spark.sparkContext._jvm.double, 0)
        for rec in (shim_rec, py4j_rec):
            done = [rec.wait_for(ev.StageCompleted, where=lambda e: e.shuffle_write_bytes > 0),
                    rec.wait_for(ev.StageCompleted, where=lambda e: e.shuffle_read_bytes > 0)]
            for e in done:
                truth = store.stageAttempt(e.stage_id, e.attempt, False, None, False,
                                           no_quantiles)._1()
                assert e.shuffle_write_bytes == truth.shuffleWriteBytes()
                assert e.shuffle_read_bytes == truth.shuffleReadBytes()
                assert e.succeeded and e.duration > 0
            assert done[0].shuffle_write_bytes == done[1].shuffle_read_bytes
        submitted = shim_rec.wait_for(ev.StageSubmitted)
        assert submitted.job_group == "groupby-under-test"
    finally:
        py4j_listener.close()


# -- zero-code activation through spark-submit ------------------------------------------
APP = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession, functions as F
    spark = SparkSession.builder.appName("unmodified-app").getOrCreate()
    n = spark.range(0, 50_000).groupBy((F.col("id") % 7).alias("k")).count().count()
    # One write per line: spark-submit runs Python unbuffered, so print(a, b, c) is
    # several writes, and the driver JVM's log lines share the pipe and can fall between.
    print(f"RESULT {{n}} LOADED {{'spark_adaptive' in sys.modules}}")
    {ending}
""")


def _submit(cluster: LocalCluster, tmp_path: Path, *conf: str, ending: str = "spark.stop()"
            ) -> subprocess.CompletedProcess[str]:
    app = tmp_path / "app.py"
    app.write_text(APP.format(ending=ending))
    submit = str(Path(sys.executable).parent / "spark-submit")
    args = [submit, "--master", cluster.master_url, "--conf", "spark.executor.memory=512m",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false"]
    for c in conf:
        args += ["--conf", c]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    # spark-submit's PythonRunner merges the app's stderr into its stdout: read one stream.
    return subprocess.run([*args, str(app)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=240, cwd=tmp_path)


def test_unknown_key_stops_an_enabled_app_at_start(local_cluster, tmp_path):
    p = _submit(local_cluster, tmp_path, "spark.adaptive.enabled=true", "spark.adaptive.foo=1")
    assert p.returncode != 0
    assert "spark.adaptive.foo is not a spark-adaptive option" in p.stdout
    assert "RESULT" not in p.stdout


def test_bad_value_names_key_and_accepted_values(local_cluster, tmp_path):
    p = _submit(local_cluster, tmp_path, "spark.adaptive.enabled=true",
                "spark.adaptive.scheduler.mode=elastic")
    assert p.returncode != 0
    assert ("spark.adaptive.scheduler.mode='elastic' is not valid: "
            "accepted values: adaptive, reactive") in p.stdout


@pytest.mark.parametrize("conf", [(), ("spark.adaptive.enabled=false",)])
def test_app_without_the_key_runs_untouched(local_cluster, tmp_path, conf):
    p = _submit(local_cluster, tmp_path, *conf)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "RESULT 7 LOADED False" in p.stdout
    assert "spark_adaptive" not in p.stdout


@pytest.mark.parametrize("ending", [
    pytest.param("spark.stop()", marks=pytest.mark.internals),
    "pass  # no stop: the JVM ends the context"])
def test_enabled_app_is_managed_and_leaves_cleanly(local_cluster, tmp_path, ending):
    p = _submit(local_cluster, tmp_path, "spark.adaptive.enabled=true", ending=ending)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "RESULT 7 LOADED True" in p.stdout
    assert "listening to Spark through the JVM shim" in p.stdout
    assert "Listener threw an exception" not in p.stdout
    assert "Traceback" not in p.stdout
