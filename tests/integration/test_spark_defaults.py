"""Every way of turning spark-adaptive on, and the 3 s heartbeat on each.

``spark-defaults.conf`` as users write it: the file is made the way
``conf/spark-defaults.conf.template`` says (its lines for the keys wanted, uncommented,
with new values); ``spark-submit`` reads it from ``$SPARK_CONF_DIR`` (a temporary
directory) and runs an unmodified streaming app. The same app with the keys as
``spark-submit --conf``; and apps that set them themselves, in their session builder or
in the ``SparkConf`` of a ``SparkContext(conf=...)``. Each time the app's REST API must
list its query, managed in the mode the keys set, and the executors must get
spark-adaptive's 3 s heartbeat before they start: an executor frozen with SIGSTOP is
then released after ``failure-detection.timeout`` (20 s), not the 30 s that a 10 s
heartbeat would force.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spark_adaptive import configdocs
from spark_adaptive.errors import ClusterError
from spark_adaptive.testing.cluster import LocalCluster, free_port
from spark_adaptive.testing.streaming import wait_until
from spark_adaptive.testing.submit import SubmittedApp

pytestmark = pytest.mark.timeout(300)

APP = textwrap.dedent("""
    import json, os, sys, time
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession, functions as F

    keys = json.loads(sys.argv[4])
    if sys.argv[3] == "builder":
        builder = SparkSession.builder.appName("defaults-app")
        for k, v in keys.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
    elif sys.argv[3] == "SparkContext":
        sc = SparkContext(conf=SparkConf().setAppName("defaults-app").setAll(keys.items()))
        spark = SparkSession(sc)
    else:
        spark = SparkSession.builder.appName("defaults-app").getOrCreate()
    conf = spark.sparkContext.getConf()
    print("heartbeat", conf.get("spark.executor.heartbeatInterval", "unset"), flush=True)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
             .groupBy((F.col("value") % 3).alias("k")).count()
             .writeStream.outputMode("complete").queryName("from-defaults")
             .foreachBatch(lambda df, i: df.count())
             .option("checkpointLocation", sys.argv[1])
             .trigger(processingTime="1 second").start())
    deadline = time.monotonic() + 180
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    spark.stop()
""")


def _from_template(values: dict[str, str]) -> list[str]:
    """The template's line for each key, uncommented, its default replaced by the value."""
    lines = configdocs.template().splitlines()
    out = []
    for key, value in values.items():
        [line] = [ln for ln in lines if ln.startswith(f"# {key} ")]
        padding_and_default = line[2 + len(key):]
        out.append(key + padding_and_default.replace(padding_and_default.strip(), value))
    return out


@pytest.mark.parametrize("where", ["spark-defaults.conf", "--conf", "builder", "SparkContext"])
def test_every_activation_path_manages_the_app_and_releases_a_frozen_executor_in_20s(
        local_cluster: LocalCluster, tmp_path: Path, where: str) -> None:
    port = free_port()
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    keys = {"spark.adaptive.enabled": "true", "spark.adaptive.scheduler.mode": "reactive",
            "spark.adaptive.rest.port": str(port)}
    adaptive = _from_template(keys)
    assert adaptive[0].split() == ["spark.adaptive.enabled", "true"]
    (conf_dir / "spark-defaults.conf").write_text("\n".join([
        "# written by hand, as in $SPARK_HOME/conf",
        *(adaptive if where == "spark-defaults.conf" else []),
        "spark.driver.host                127.0.0.1",
        "spark.driver.bindAddress         127.0.0.1",
        "spark.executor.memory            512m",
        "spark.ui.enabled                 false",
        "spark.sql.shuffle.partitions     2",
        ""]))
    submit_conf = [] if where != "--conf" else [
        arg for k, v in keys.items() for arg in ("--conf", f"{k}={v}")]
    in_app = keys if where in ("builder", "SparkContext") else {}
    app = tmp_path / "app.py"
    app.write_text(APP)
    stop = tmp_path / "stop"
    env = {**os.environ, "SPARK_CONF_DIR": str(conf_dir), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = tmp_path / "app.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "spark-submit"), "--master",
             local_cluster.master_url, *submit_conf, str(app), str(tmp_path / "checkpoint"),
             str(stop), where, json.dumps(in_app)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
            stdin=subprocess.DEVNULL, start_new_session=True)
    submitted = SubmittedApp(process, log, f"http://127.0.0.1:{port}")
    try:
        query = submitted.wait_for_query(timeout=180)
        assert query["name"] == "from-defaults"
        assert query["state"] in ("WaitingForResources", "CreatingExecutionGraph", "Executing")
        # The REST API may list the query a moment before its log line is written.
        def managed() -> str | None:
            text = log.read_text(errors="replace")
            return text if "managing streaming query" in text else None

        text = wait_until(managed, timeout=30, what="the log line of the managed query")
        assert "spark-adaptive enabled (mode reactive)" in text
        assert "heartbeat 3s" in text  # set before the context started, for the executors
        assert "under 3 heartbeat intervals" not in text

        # An executor frozen (SIGSTOP) is found silent after the 20 s timeout and released.
        # Frozen once it has run a few micro-batches, so that its heartbeats were heard (an
        # executor never heard from has a grace for its first heartbeat on top).
        wait_until(lambda: next((q for q in submitted.queries()
                                 if (q["lastProgress"] or {}).get("batchId", -1) >= 3), None),
                   timeout=120, what="a few micro-batches")
        [frozen] = local_cluster.executors()
        local_cluster.freeze_executor(frozen.executor_id, frozen.app_id)
        try:
            released = wait_until(
                lambda: re.search(rf"executor {frozen.executor_id} sent no heartbeat for "
                                  r"([\d.]+)s \(failure-detection.timeout (\d+)s\)",
                                  log.read_text(errors="replace")),
                timeout=90, what="the frozen executor to be released")
        finally:
            with contextlib.suppress(ClusterError, ProcessLookupError):
                local_cluster.thaw_executor(frozen.executor_id, frozen.app_id)
        assert released.group(2) == "20", released.group(0)
        # Found at its deadline: the last heartbeat plus the timeout (the hang check's timer
        # runs then), so no more silent than the timeout and one heartbeat interval.
        assert 20 <= float(released.group(1)) <= 23, released.group(0)
    finally:
        stop.touch()
    assert submitted.wait(120) == 0, submitted.tail(60)
    assert "Traceback" not in log.read_text(errors="replace")
