"""Do no harm on a real cluster: sources that cannot replay, Spark's errors at start, and the
checkpoint a query really uses, across workers joining and restarts spark-adaptive makes."""

from __future__ import annotations

import glob
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.testing.session import registered_executors, wait_for_executors
from spark_adaptive.testing.streaming import history, snapshot, wait_until

pytestmark = pytest.mark.timeout(600)

QUICK = {
    "scheduler.submission.resource-stabilization-timeout": "1s",
    "scheduler.executing.cooldown-after-rescaling": "1s",
    "scheduler.executing.resource-stabilization-timeout": "1s",
    "scheduler.executor-loss-grace": "1s",
}


class WordServer:
    """A TCP server that sends lines of words to whoever connects (Spark's socket source)."""

    WORDS = ("alpha", "beta", "gamma", "delta")

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.connections = 0
        self.words_sent = 0
        self._sending = threading.Event()
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            self._clients.append(client)
            threading.Thread(target=self._send, args=(client,), daemon=True).start()

    def _send(self, client: socket.socket) -> None:
        i = 0
        while not self._stop.is_set():
            if not self._sending.is_set():
                time.sleep(0.02)
                continue
            line = " ".join(self.WORDS[(i + k) % len(self.WORDS)] for k in range(3))
            try:
                client.sendall((line + "\n").encode())
            except OSError:
                return
            self.words_sent += 3
            i += 1
            time.sleep(0.02)

    def send(self, on: bool) -> None:
        (self._sending.set if on else self._sending.clear)()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        for c in self._clients:
            c.close()








def _last_batch(out: Path) -> dict[str, list[Any]]:
    """The newest complete-mode batch written that has rows (empty before the first)."""
    import pyarrow.parquet as pq

    batches = sorted(glob.glob(str(out / "batch=*")), key=lambda p: int(p.split("=")[-1]))
    for batch in reversed(batches):
        table = pq.read_table(batch).to_pydict()
        if table.get("count"):
            return table
    return {}


def _last_batch_total(out: Path) -> int:
    return int(sum(_last_batch(out).get("count", [])))


def test_socket_query_with_a_checkpoint_is_rescaled_live_only_and_loses_nothing(
        local_cluster: Any, cluster_spark_factory: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    server = WordServer()
    try:
        spark = cluster_spark_factory(local_cluster, **{"spark.sql.shuffle.partitions": "3"})
        rt = spark_adaptive.enable(spark, **QUICK)
        wait_for_executors(spark, 1)
        out = tmp_path / "out"

        def write(df: Any, batch_id: int) -> None:
            df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        lines = (spark.readStream.format("socket").option("host", "127.0.0.1")
                 .option("port", server.port).load())
        counts = lines.select(F.explode(F.split("value", " ")).alias("word")).groupBy("word")
        query = (counts.count().writeStream.outputMode("complete").foreachBatch(write)
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(processingTime="1 second").start())
        server.send(True)
        first = history(rt, query.key)[0]
        assert first["toParallelism"] == 3 and "cannot replay" in first["reason"]
        local_cluster.add_worker()
        local_cluster.add_worker()
        # Three partitions on three slots: the query follows its executors live.
        wait_until(what="3 slots", check=lambda: snapshot(rt, query.key)["slots"] == 3)
        time.sleep(3)
        server.send(False)
        sent = server.words_sent
        wait_until(lambda: _last_batch_total(out) == sent, timeout=60,
                   what=f"all {sent} words counted")
        snap = snapshot(rt, query.key)
        assert (snap["state"], snap["parallelism"]) == ("Executing", 3)
        assert snap["counters"]["restarts"] == 0 and snap["counters"]["failures"] == 0
        assert [r["kind"] for r in history(rt, query.key)][0] == "initial"
        assert all(r["kind"] != "restart" for r in history(rt, query.key))
        assert server.connections == 1, "the query never reconnected: it never restarted"
        query.stop()
    finally:
        server.close()


def test_a_query_that_runs_its_source_s_partitions_keeps_the_executors_they_run_on(
        local_cluster_factory: Any, cluster_spark_factory: Any, tmp_path: Path) -> None:
    """No state, no shuffle: its micro-batches run the rate source's 3 partitions as their
    tasks, whatever its 1 configured partition, and on plain Spark on all 3 executors. They
    are kept; its bounds stay [1, 1], and nothing restarts."""
    cluster = local_cluster_factory(3)
    spark = cluster_spark_factory(cluster, **{"spark.sql.shuffle.partitions": "1"})
    rt = spark_adaptive.enable(spark, **QUICK)
    wait_for_executors(spark, 3)
    rows = (spark.readStream.format("rate").option("rowsPerSecond", 30)
            .option("numPartitions", 3).load())
    query = (rows.selectExpr("value * 2 AS doubled").writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    try:
        wait_until(what="a micro-batch", timeout=60,
                   check=lambda: query.lastProgress is not None)
        batch = query.lastProgress["batchId"]
        wait_until(what="five more micro-batches", timeout=60,
                   check=lambda: query.lastProgress["batchId"] >= batch + 5)
        assert registered_executors(spark.sparkContext) == 3
        assert rt.scheduler.executor_count == 3
        snap = snapshot(rt, query.key)
        assert snap["requirements"]["parallelism"] == {"lowerBound": 1, "upperBound": 1}
        assert all(r["kind"] != "restart" for r in history(rt, query.key))
    finally:
        query.stop()


def test_spark_refusal_at_start_is_raised_at_once_as_sparks_own(
        local_cluster: Any, cluster_spark_factory: Any, tmp_path: Path) -> None:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    spark = cluster_spark_factory(local_cluster)
    # A long stabilization: were it to stand before Spark's analysis, the error would wait.
    rt = spark_adaptive.enable(spark, **{
        "scheduler.submission.resource-stabilization-timeout": "60s"})
    counts = (spark.readStream.format("rate").load()
              .groupBy((F.col("value") % 3).alias("k")).count())
    t0 = time.monotonic()
    with pytest.raises(AnalysisException, match="STREAMING_OUTPUT_MODE"):
        counts.writeStream.outputMode("append").format("memory").queryName("bad").start()
    assert time.monotonic() - t0 < 30
    assert rt.loop.call_sync(lambda: rt.scheduler.queries()) == ()


def test_checkpoint_under_the_session_root_is_kept_across_a_restart_rescale(
        local_cluster_factory: Any, cluster_spark_factory: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    cluster = local_cluster_factory(2)
    root = tmp_path / "root"
    spark = cluster_spark_factory(cluster, **{
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.checkpointLocation": str(root)})
    rt = spark_adaptive.enable(spark, **QUICK)
    wait_for_executors(spark, 2)
    out = tmp_path / "out"

    def write(df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    # No name, no checkpointLocation option: Spark puts it under <root>/<generated id>.
    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .groupBy((F.col("value") % 5).alias("k"))
             .agg(F.count("*").alias("count"), F.max("value").alias("top"))
             .writeStream.outputMode("complete").foreachBatch(write)
             .trigger(processingTime="1 second").start())
    snap = wait_until(lambda: (s := snapshot(rt, query.key))["lastProgress"] and s,
                      what="a batch")
    (checkpoint,) = [p for p in root.iterdir() if p.is_dir()]
    assert (snap["parallelism"], rt.persisted.checkpoint(query.key)) == (
        2, f"file:{checkpoint}")
    query_id = query.id
    rt.loop.call_sync(lambda: rt.scheduler.update_requirements(query.key, 1, 1))
    wait_until(what="a restart onto 1 partition", check=lambda: any(
        r["kind"] == "restart" and r["outcome"] == "completed" for r in history(rt, query.key)))
    restart = [r for r in history(rt, query.key) if r["kind"] == "restart"][-1]
    assert (restart["fromParallelism"], restart["toParallelism"]) == (2, 1)
    assert "repartition" in restart["timings"]  # the state moved with it
    assert [p for p in root.iterdir() if p.is_dir()] == [checkpoint], "no second checkpoint"
    assert query.id == query_id
    before = query.lastProgress["batchId"]
    wait_until(lambda: query.lastProgress["batchId"] > before + 1,
               what="a batch after the restart")
    query.stop()
    table = _last_batch(out)
    top = max(table["top"])
    assert sum(table["count"]) == top + 1, "every row counted exactly once across the restart"


STREAMING_APP = """
import time
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.appName("leaves-without-stopping").getOrCreate()
query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
         .groupBy((F.col("value") % 3).alias("k")).count()
         .writeStream.outputMode("complete").format("console")
         .option("checkpointLocation", {checkpoint!r}).start())
time.sleep(8)
print("APP DONE", query.id)
# No stop(): the interpreter and the JVM end with the query running.
"""


def test_an_app_that_exits_with_its_query_running_leaves_nothing_in_the_log(
        local_cluster: Any, tmp_path: Path) -> None:
    from spark_adaptive.testing.submit import submit

    app = tmp_path / "app.py"
    app.write_text(STREAMING_APP.format(checkpoint=str(tmp_path / "cp")))
    submitted = submit(local_cluster, app, conf={"spark.adaptive.enabled": "true"})
    try:
        assert submitted.wait(180) == 0, submitted.tail()
    finally:
        submitted.kill()
    log = submitted.log_path.read_text()
    assert "APP DONE" in log and "SparkAdaptiveStreaming: managing streaming query" in log
    shutdown = log[log.index("APP DONE"):]
    for noise in ("PythonStreamingQueryListenerWrapper", "Listener threw an exception",
                  "Traceback", "WARN SparkAdaptive", "ERROR SparkAdaptive"):
        assert noise not in shutdown, f"{noise!r} at shutdown:\n{shutdown[-3000:]}"
