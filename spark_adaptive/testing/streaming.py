"""Builders and checks for testing streaming apps with spark-adaptive (yours and ours).

* :func:`rate_aggregation`: a stateful query as apps write them, Spark's ``rate``
  source counted per key, each micro-batch's complete aggregate written with
  ``foreachBatch`` by batch id (a re-run batch overwrites its own output: an
  idempotent sink), with a checkpoint location; :func:`latest_aggregate` reads the
  newest batch written and :func:`assert_counted_exactly_once` checks that every row
  the source produced up to then was counted exactly once.
* :func:`file_sink_files`: the files a file sink committed, read through its
  ``_spark_metadata`` log as Spark's own readers do (the newest compaction and the
  batches after it), so files of a batch that was re-run are never counted twice.
* :func:`wait_until`: poll a condition until it holds, or fail saying what it waited for.
* :func:`history` and :func:`snapshot`: what spark-adaptive's REST API would answer
  about a query of an app running in this process (``spark_adaptive.enable``'s runtime).

Example (on the local cluster of :mod:`spark_adaptive.testing.cluster`)::

    rt = spark_adaptive.enable(spark)
    query = rate_aggregation(spark, out=tmp / "out", checkpoint=tmp / "cp")
    wait_until(lambda: snapshot(rt, query.id)["parallelism"] == 2, what="parallelism 2")
    query.stop()
    assert_counted_exactly_once(latest_aggregate(tmp / "out"))
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from spark_adaptive.rest.wire import query_json, record_json

T = TypeVar("T")


def file_sink_files(out: str | os.PathLike[str]) -> list[str]:
    """Paths of the files the file sink writing to ``out`` committed. Spark's log holds one
    file per batch and, every ``spark.sql.streaming.fileSink.log.compactInterval`` batches,
    a ``.compact`` file with everything before it: reading from the newest one on sees
    each committed file once. The log holds URIs (``file:///my%20out/part-0...``); a
    ``file:`` one is given as the local path it names."""
    log_dir = os.path.join(os.fspath(out), "_spark_metadata")
    entries = sorted((n for n in os.listdir(log_dir) if not n.startswith(".")),
                     key=lambda n: int(n.split(".")[0]))
    first = max((i for i, n in enumerate(entries) if n.endswith(".compact")), default=0)
    files: list[str] = []
    for name in entries[first:]:
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            lines = f.read().splitlines()[1:]  # the first line is the log's version
        for line in lines:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.append(_local_path(entry["path"]))
    return files


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def wait_until(check: Callable[[], T], timeout: float = 120.0, what: str = "the condition",
               interval: float = 0.25) -> T:
    """Call ``check()`` until it returns something truthy, and return that; raise
    ``AssertionError`` naming ``what`` and the last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T = check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} "
                                 f"(last: {last!r})")
        time.sleep(interval)
        last = check()
    return last


def rate_aggregation(spark: Any, out: str | os.PathLike[str], checkpoint: str | os.PathLike[str],
                     *, rows_per_second: int = 40, keys: int = 10, trigger: str = "1 second",
                     name: str | None = None) -> Any:
    """Start the stateful query described in the module's doc; returns its handle.

    The aggregate holds, per ``key = value % keys``: ``n`` (rows), ``total`` (sum of
    values) and ``top`` (largest value), so the complete output of any batch says
    exactly which rows it has counted.
    """
    from pyspark.sql import functions as F

    counts = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
              .groupBy((F.col("value") % keys).alias("key"))
              .agg(F.count("*").alias("n"), F.sum("value").alias("total"),
                   F.max("value").alias("top")))
    target = os.fspath(out)

    def write(df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(f"{target}/batch={batch_id}")

    writer = (counts.writeStream.outputMode("complete").foreachBatch(write)
              .option("checkpointLocation", os.fspath(checkpoint))
              .trigger(processingTime=trigger))
    if name is not None:
        writer = writer.queryName(name)
    return writer.start()


def latest_aggregate(out: str | os.PathLike[str]) -> dict[str, list[Any]]:
    """The newest batch :func:`rate_aggregation` wrote that holds rows, as columns
    (``{"key": [...], "n": [...], ...}``); empty before the first."""
    import pyarrow.parquet as pq

    batches = sorted(glob.glob(os.path.join(os.fspath(out), "batch=*")),
                     key=lambda p: int(p.rsplit("=", 1)[-1]))
    for batch in reversed(batches):
        table: dict[str, list[Any]] = pq.read_table(batch).to_pydict()
        if table.get("n"):
            return table
    return {}


def assert_counted_exactly_once(aggregate: dict[str, list[Any]], keys: int = 10) -> int:
    """Every value ``0..top`` the rate source produced was counted once, no more, no less;
    returns ``top``."""
    assert aggregate.get("n"), "no aggregate written yet"
    top = max(aggregate["top"])
    assert sum(aggregate["n"]) == top + 1, (
        f"{sum(aggregate['n'])} rows counted for values 0..{top}")
    assert sum(aggregate["total"]) == top * (top + 1) // 2
    for key, n in zip(aggregate["key"], aggregate["n"], strict=True):
        assert n == len(range(key, top + 1, keys)), f"key {key}: {n} rows"
    return int(top)


def history(rt: Any, query: str) -> list[dict[str, Any]]:
    """The query's rescale history as ``GET /queries/{id}/rescales`` lists it."""
    result: list[dict[str, Any]] = rt.loop.call_sync(
        lambda: [record_json(r) for r in rt.scheduler.history(query)])
    return result


def snapshot(rt: Any, query: str) -> dict[str, Any]:
    """The query as ``GET /queries/{id}`` shows it."""
    result: dict[str, Any] = rt.loop.call_sync(
        lambda: query_json(rt.scheduler.query(query).snapshot()))
    return result
