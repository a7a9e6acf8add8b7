"""An app with one streaming query of each remaining kind of state, with nothing of
spark-adaptive in it (the five of ``many_queries_app.py`` aside).

    spark-submit operator_kinds_app.py OUT STOP_FILE

Each query reads Spark's ``rate`` source (10 rows/s) and writes each micro-batch with
``foreachBatch`` under ``OUT/<query>/batch=<id>``, with a checkpoint under
``OUT/checkpoints``:

* ``agg``: ``groupBy(key).agg`` (update mode), per ``key = value % 7`` its count, sum and
  newest value;
* ``dedup_wm``: ``dropDuplicates`` on a pair and its event time, under a watermark;
* ``dedup_within``: ``dropDuplicatesWithinWatermark`` on the pair;
* ``sessions``: session windows per key over event times 60 s apart every 30 values;
* ``tws_pandas`` and ``tws_rows``: ``transformWithStateInPandas`` and ``transformWithState``
  with a value, a list and a map state under a TTL, and a processing-time timer per key
  (it fires once, 20 s after the key's first row, and says the key's count then);
* ``join_v4``: a stream-stream join whose state is kept in format 4, which Spark's offline
  repartition leaves unreadable: rescaled live only;
* ``limited``: a streaming ``limit``, whose state Spark's offline repartition refuses:
  rescaled live only;
* ``rooted`` and an unnamed twin: the same counts per key with no checkpoint option, so
  that they live under the session's ``spark.sql.streaming.checkpointLocation`` (by their
  name, or one Spark generates for the unnamed one at its start).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pandas as pd
from many_queries_app import run_queries  # beside this file: spark-submit puts it on the path
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

KEYS = 7
TIMER_DELAY_MS = 20_000
TTL_MS = 3_600_000
OUT_SCHEMA = "key long, what string, n long, total long, listed long, buckets long"


def _rate(spark: SparkSession) -> Any:
    return (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
            .withColumn("key", F.col("value") % KEYS)
            .withColumn("pair", (F.col("value") / 2).cast("long"))
            .withColumn("group", (F.col("value") / 30).cast("long")))


def _processor(pandas_api: bool) -> StatefulProcessor:
    class Totals(StatefulProcessor):
        """Per key: its count and sum (a value state), its values (a list state) and its
        values by residue of 3 (a map state), all under a TTL; a timer 20 s after its first
        row says its count then."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.totals = handle.getValueState("totals", "n long, total long", TTL_MS)
            self.values = handle.getListState("values", "v long", TTL_MS)
            self.buckets = handle.getMapState("buckets", "b long", "n long", TTL_MS)

        def _row(self, key: int, what: str, n: int, total: int) -> Any:
            listed = sum(1 for _ in self.values.get()) if self.values.exists() else 0
            buckets = (sum(v[0] for v in self.buckets.values())
                       if self.buckets.exists() else 0)
            row = {"key": key, "what": what, "n": n, "total": total, "listed": listed,
                   "buckets": buckets}
            return pd.DataFrame({k: [v] for k, v in row.items()}) if pandas_api else Row(**row)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any  # noqa: N802,N803
                            ) -> Iterator[Any]:
            first = not self.totals.exists()
            n, total = self.totals.get() if not first else (0, 0)
            values = ([int(v) for frame in rows for v in frame.value] if pandas_api
                      else [int(r.value) for r in rows])
            n, total = n + len(values), total + sum(values)
            self.totals.update((n, total))
            self.values.appendList([(v,) for v in values])
            for v in values:
                old = self.buckets.getValue((v % 3,))
                self.buckets.updateValue((v % 3,), ((old[0] if old else 0) + 1,))
            if first:
                now = timerValues.getCurrentProcessingTimeInMs()
                self.handle.registerTimer(now + TIMER_DELAY_MS)
            yield self._row(int(key[0]), "data", n, total)

        def handleExpiredTimer(self, key: Any, timerValues: Any,  # noqa: N802,N803
                               expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N803
            n, total = self.totals.get() if self.totals.exists() else (-1, -1)
            yield self._row(int(key[0]), "timer", n, total)

        def close(self) -> None:
            pass

    return Totals()


def queries(spark: SparkSession) -> dict[str, tuple[Any, str]]:
    """Each query's DataFrame and output mode."""
    rate = _rate(spark)
    # Event times from the values (a day past the epoch: a watermark starts at 0, and an
    # event at exactly 0 would count as late).
    events = rate.withColumn("ts", F.timestamp_seconds(F.col("pair") + 86_400))
    grouped = rate.withColumn("ts", F.timestamp_seconds(F.col("group") * 60 + 86_400))
    spark.conf.set("spark.sql.streaming.join.stateFormatVersion", "4")
    left = _rate(spark).withWatermark("timestamp", "60 seconds").alias("l")
    right = _rate(spark).withWatermark("timestamp", "60 seconds").alias("r")
    join = left.join(right, F.expr(
        "l.value = r.value AND r.timestamp BETWEEN l.timestamp - INTERVAL 60 SECONDS "
        "AND l.timestamp + INTERVAL 60 SECONDS")).select(F.col("l.value").alias("value"))
    return {
        "agg": (_counts(rate), "update"),
        "dedup_wm": (events.withWatermark("ts", "10 minutes")
                     .dropDuplicates(["pair", "ts"]).select("pair"), "append"),
        "dedup_within": (events.withWatermark("ts", "10 minutes")
                         .dropDuplicatesWithinWatermark(["pair"]).select("pair"), "append"),
        "sessions": (grouped.withWatermark("ts", "0 seconds")
                     .groupBy(F.session_window("ts", "30 seconds"), "key")
                     .agg(F.count("*").alias("n"), F.min("value").alias("first"),
                          F.max("value").alias("last"))
                     .select("key", "n", "first", "last"), "append"),
        "tws_pandas": (rate.groupBy("key").transformWithStateInPandas(
            _processor(True), OUT_SCHEMA, "Update", "ProcessingTime"), "update"),
        "tws_rows": (rate.groupBy("key").transformWithState(
            _processor(False), OUT_SCHEMA, "Update", "ProcessingTime"), "update"),
        "join_v4": (join, "append"),
        "limited": (rate.select("value").limit(100_000), "append"),
        "rooted": (_counts(rate), "update"),
        "unnamed": (_counts(_rate(spark)), "update"),
    }


def _counts(rate: Any) -> Any:
    return rate.groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"),
                                   F.max("value").alias("latest"))


def _writer(name: str, writer: Any) -> Any:
    """``rooted`` and its unnamed twin live under the session's checkpoint root."""
    if name not in ("rooted", "unnamed"):
        writer = writer.option("checkpointLocation", f"{sys.argv[1]}/checkpoints/{name}")
    return writer if name == "unnamed" else writer.queryName(name)


def main() -> int:
    spark = SparkSession.builder.appName("operator-kinds").getOrCreate()
    return run_queries(spark, queries(spark), sys.argv[1], sys.argv[2], _writer)


if __name__ == "__main__":
    sys.exit(main())
