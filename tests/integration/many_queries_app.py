"""A pipeline app of five stateful streaming queries, with nothing of spark-adaptive in it.

    spark-submit many_queries_app.py OUT STOP_FILE

Each query reads Spark's ``rate`` source and writes each micro-batch with ``foreachBatch``
under ``OUT/<query>/batch=<id>`` (overwritten by batch id: a batch run again replaces its
own output), in a checkpoint of its own under ``OUT/checkpoints``:

* ``bronze``: ``dropDuplicates`` on ``value // 2`` (each pair of values once);
* ``silver``: ``applyInPandasWithState``, per ``key = value % 7`` its count, sum and
  newest value;
* ``join``: a stream-stream inner join of two rate sources on the value, with watermarks
  and a time range;
* ``report``: event-time tumbling windows of 5 s (append mode), each with its count and its
  smallest and largest value;
* ``counter``: ``transformWithStateInPandas``, per key its count, sum and newest value in a
  ``ValueState``.

The app stops its queries when ``STOP_FILE`` appears and exits non-zero if one failed.
``many_queries_check.py`` checks each output exactly once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.streaming.state import GroupStateTimeout

KEYS = 7
ROWS_PER_SECOND = 10
TRIGGER = "2 seconds"


def _rate(spark: SparkSession) -> Any:
    return spark.readStream.format("rate").option("rowsPerSecond", ROWS_PER_SECOND).load()


def _running_totals(key: Any, frames: Iterator[pd.DataFrame], state: Any
                    ) -> Iterator[pd.DataFrame]:
    n, total, latest = state.get if state.exists else (0, 0, -1)
    for frame in frames:
        n += len(frame)
        total += int(frame.value.sum())
        latest = max(latest, int(frame.value.max()))
    state.update((n, total, latest))
    yield pd.DataFrame({"key": [int(key[0])], "n": [n], "total": [total], "latest": [latest]})


class Counter(StatefulProcessor):
    """Per key: its rows, their sum and its newest value, in one ValueState."""

    def init(self, handle: Any) -> None:
        self.totals = handle.getValueState("totals", "n long, total long, latest long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],  # noqa: N802
                        timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N803
        n, total, latest = self.totals.get() if self.totals.exists() else (0, 0, -1)
        for frame in rows:
            n += len(frame)
            total += int(frame.value.sum())
            latest = max(latest, int(frame.value.max()))
        self.totals.update((n, total, latest))
        yield pd.DataFrame({"key": [int(key[0])], "n": [n], "total": [total], "latest": [latest]})

    def close(self) -> None:
        pass


def queries(spark: SparkSession) -> dict[str, tuple[Any, str]]:
    """Each query's DataFrame and output mode."""
    keyed = _rate(spark).withColumn("key", F.col("value") % KEYS)
    left = _rate(spark).withWatermark("timestamp", "60 seconds").alias("l")
    right = _rate(spark).withWatermark("timestamp", "60 seconds").alias("r")
    return {
        "bronze": (_rate(spark).withColumn("pair", F.col("value") / 2).withColumn(
            "pair", F.col("pair").cast("long")).dropDuplicates(["pair"]), "append"),
        "silver": (keyed.groupBy("key").applyInPandasWithState(
            _running_totals, "key long, n long, total long, latest long",
            "n long, total long, latest long", "update", GroupStateTimeout.NoTimeout),
            "update"),
        "join": (left.join(right, F.expr(
            "l.value = r.value AND r.timestamp BETWEEN l.timestamp - INTERVAL 60 SECONDS "
            "AND l.timestamp + INTERVAL 60 SECONDS")).select(F.col("l.value").alias("value")),
            "append"),
        "report": (_rate(spark).withWatermark("timestamp", "5 seconds")
                   .groupBy(F.window("timestamp", "5 seconds"))
                   .agg(F.count("*").alias("n"), F.min("value").alias("first"),
                        F.max("value").alias("last")), "append"),
        "counter": (keyed.groupBy("key").transformWithStateInPandas(
            Counter(), "key long, n long, total long, latest long", "Update", "None"),
            "update"),
    }


def run_queries(spark: SparkSession, found: dict[str, tuple[Any, str]], out: str, stop: str,
                writer_for: Callable[[str, Any], Any] | None = None) -> int:
    """Start each query with a ``foreachBatch`` writing ``out/<name>/batch=<id>``, run
    until ``stop`` appears (or a query failed), stop them and the session; 1 if any query
    failed. ``writer_for(name, writer)`` names each and places its checkpoint (by default:
    its name, and ``out/checkpoints/<name>``)."""
    started = []
    for name, (df, mode) in found.items():
        def write(batch: Any, batch_id: int, name: str = name) -> None:
            batch.write.mode("overwrite").parquet(f"{out}/{name}/batch={batch_id}")

        writer = df.writeStream.outputMode(mode).foreachBatch(write).trigger(
            processingTime=TRIGGER)
        if writer_for is None:
            writer = writer.queryName(name).option("checkpointLocation",
                                                   f"{out}/checkpoints/{name}")
        else:
            writer = writer_for(name, writer)
        started.append(writer.start())
    while not os.path.exists(stop):
        if any(q.exception() is not None or not q.isActive for q in started):
            break
        time.sleep(1)
    failed = [(q.name, str(q.exception())[:300]) for q in started if q.exception() is not None]
    for q in started:
        q.stop()
    spark.stop()
    print("failed queries:", failed, flush=True)
    return 1 if failed else 0


def main() -> int:
    spark = SparkSession.builder.appName("many-queries").getOrCreate()
    return run_queries(spark, queries(spark), sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
