"""The soak's app: a plain stateful streaming app, with nothing of spark-adaptive in it.

Counts the rate source's values per key (``value % keys``) and writes each micro-batch's
complete aggregate with ``foreachBatch``, overwriting by batch id, so that a batch run
again replaces its own output. The last committed batch's aggregate then says, key by
key, whether every value ``0..latest`` was counted exactly once
(:func:`spark_adaptive.testing.soak.check_counts`).

    spark-submit soak_app.py --checkpoint CK --output OUT --stop-file STOP

It stops when ``--stop-file`` appears, and exits non-zero when its query failed.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--rows-per-second", type=int, default=200)
    ap.add_argument("--keys", type=int, default=50)
    ap.add_argument("--trigger", default="2 seconds")
    args = ap.parse_args()

    spark = SparkSession.builder.appName("soak-counts").getOrCreate()
    values = spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second).load()
    counts = (values.groupBy((F.col("value") % args.keys).alias("key"))
              .agg(F.count("*").alias("count"), F.sum("value").alias("total"),
                   F.max("value").alias("latest")))

    def write(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batch.write.mode("overwrite").parquet(f"{args.output}/batch={batch_id}")

    query = (counts.writeStream.queryName("soak-counts").outputMode("complete")
             .foreachBatch(write).option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=args.trigger).start())
    while not query.awaitTermination(1):
        if os.path.exists(args.stop_file):
            query.stop()
    failed = query.exception() is not None
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
