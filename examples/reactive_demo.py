"""A stateful streaming app, written the way any PySpark app is: no spark-adaptive in it.

Counts readings per sensor from Spark's rate source and writes the complete
aggregate of every micro-batch with foreachBatch (overwriting by batch id, so
a re-run batch replaces its own output). Run it under spark-adaptive with

    spark-submit --conf spark.adaptive.enabled=true \\
                 --conf spark.adaptive.scheduler.mode=reactive \\
                 examples/reactive_demo.py --checkpoint /tmp/ck --output /tmp/out

It stops when ``--stop-file`` appears (the demo uses that to end it cleanly).
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--rows-per-second", type=int, default=400)
    ap.add_argument("--trigger", default="2 seconds")
    ap.add_argument("--stop-file", default=None)
    args = ap.parse_args()

    spark = SparkSession.builder.appName("sensor-counts").getOrCreate()
    readings = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second)
                .load())
    counts = (readings.groupBy((F.col("value") % 100).alias("sensor"))
              .agg(F.count("*").alias("readings"), F.sum("value").alias("total"),
                   F.max("value").alias("latest")))

    def write(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batch.write.mode("overwrite").parquet(f"{args.output}/batch={batch_id}")

    query = (counts.writeStream.queryName("sensor-counts").outputMode("complete")
             .foreachBatch(write).option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=args.trigger).start())
    while not query.awaitTermination(1):
        if args.stop_file and os.path.exists(args.stop_file):
            query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
