"""The quick local tier: pytest-spark's ``spark_session`` (local[2]), no cluster."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from spark_adaptive.spark.streaming import is_stateful


def _plan(df: Any) -> Any:
    return df._jdf.queryExecution().analyzed()


@pytest.mark.parametrize(("build", "stateful"), [
    (lambda s, F: s.select("value"), False),
    (lambda s, F: s.groupBy((F.col("value") % 3).alias("k")).count(), True),
    (lambda s, F: s.dropDuplicates(["value"]), True),
    (lambda s, F: s.select("value").distinct(), True),
    (lambda s, F: s.join(s.sparkSession.range(10).withColumnRenamed("id", "value"), "value"),
     False),  # stream-static join: no state
    (lambda s, F: s.alias("a").join(s.alias("b"), "value"), True),  # stream-stream join
])
def test_stateful_operators_are_recognised_from_the_plan(spark_session: Any, build: Any,
                                                         stateful: bool) -> None:
    from pyspark.sql import functions as F

    stream = spark_session.readStream.format("rate").load()
    assert is_stateful(_plan(build(stream, F))) is stateful


def test_the_autoscaler_is_off_in_local_mode_and_says_so(
        spark_session: Any, caplog: pytest.LogCaptureFixture) -> None:
    """local[N] has a fixed set of task slots: nothing for the autoscaler to take or give
    back. One WARNING says so (the REST route's answer: tests/unit/test_rest_api.py)."""
    import spark_adaptive

    with caplog.at_level(logging.WARNING, logger="spark_adaptive"):
        rt = spark_adaptive.enable(spark_session, **{"autoscaler.enabled": "true",
                                                     "rest.port": "0"})
    try:
        assert rt.autoscaling is None
        warned = [r.getMessage() for r in caplog.records
                  if "autoscaler.enabled=true has no effect" in r.getMessage()]
        assert len(warned) == 1 and "local" in warned[0], warned
    finally:
        rt.shutdown()


@pytest.mark.internals
@pytest.mark.parametrize("path", ["py4j", "shim"])
def test_a_closed_listener_hears_nothing_more(spark_session: Any, path: str) -> None:
    """close() really removes the listener from Spark's bus (py4j proxies a Python object
    afresh at each call, so removal must pass the very proxy that was added)."""
    from spark_adaptive.core import events as ev
    from spark_adaptive.spark.jvm import ensure_callback_server, shim_jar_path
    from spark_adaptive.spark.listener import Py4jListener, ShimListener

    sc = spark_session.sparkContext
    ensure_callback_server(sc)
    bus = sc._jsc.sc().listenerBus()
    heard: list[ev.Event] = []
    # Another Python listener ahead on the bus: removal compares listeners with equals(),
    # which reaches the Python side of a py4j proxy.
    other_heard: list[ev.Event] = []
    other = Py4jListener(sc, other_heard.append)
    if path == "shim":
        jar = shim_jar_path("")
        assert jar is not None, "the shim jar is built by the set-up"
        listener: Any = ShimListener(sc, jar, heard.append)
    else:
        listener = Py4jListener(sc, heard.append)
    spark_session.range(0, 100, 1, 4).selectExpr("sum(id)").collect()
    bus.waitUntilEmpty()
    listener.close()
    stages = [e for e in heard if isinstance(e, ev.StageCompleted)]
    assert stages, "the listener heard the first job"
    before = len(heard)
    spark_session.range(0, 100, 1, 4).selectExpr("sum(id)").collect()
    bus.waitUntilEmpty()
    assert len(heard) == before, heard[before:]
    assert any(isinstance(e, ev.StageCompleted) and e.time > stages[-1].time
               for e in other_heard), "the other listener still hears"
    other.close()


def test_the_offset_log_says_what_a_batch_reads_as_its_progress_does_later(
        spark_session: Any, tmp_path: Any) -> None:
    from spark_adaptive.core.streaming.load import started_batch_rate
    from spark_adaptive.spark.checkpoint import CheckpointOffsetLog
    from spark_adaptive.spark.listener import progress_from_json

    cp = str(tmp_path / "cp")
    query = (spark_session.readStream.format("rate").option("rowsPerSecond", 200).load()
             .writeStream.format("noop").option("checkpointLocation", cp)
             .trigger(processingTime="1 second").start())
    try:
        while len([p for p in query.recentProgress if p["numInputRows"] > 0]) < 3:
            query.awaitTermination(0.5)
    finally:
        query.stop()
    before, last = [p for p in query.recentProgress if p["numInputRows"] > 0][-2:]
    assert last["batchId"] == before["batchId"] + 1
    log = CheckpointOffsetLog(spark_session.sparkContext)
    started = log.started_batch(cp, last["batchId"])
    assert started is not None and started.batch_id == last["batchId"]
    # What the batch read up to, and when it started, as its progress reported them after
    assert [json.loads(o) for o in started.offsets if o is not None] == [
        json.loads(s["endOffset"]) if isinstance(s["endOffset"], str) else s["endOffset"]
        for s in last["sources"]]
    # (the log's batch timestamp is taken as the batch is planned, a millisecond or so
    # after the trigger's start that progress reports)
    assert started.started == pytest.approx(progress_from_json(last).time, abs=0.1)
    # The rate source's offsets count seconds: converted by the rows per second it read
    rate = started_batch_rate(progress_from_json(before), started)
    assert rate == pytest.approx(last["inputRowsPerSecond"], rel=0.01)
    # The same, read off the caller's thread as the autoscaler asks for it
    answers: list[Any] = []
    done = threading.Event()
    log.read(cp, last["batchId"], lambda s: (answers.append(s), done.set()))
    assert done.wait(30) and answers == [started]
    log.close()
    assert log.started_batch(cp, last["batchId"] + 5) is None  # not (yet) written
    assert log.started_batch(str(tmp_path / "nowhere"), 0) is None
