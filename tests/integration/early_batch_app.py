"""An app that runs a batch job before it starts any streaming query.

``spark-submit early_batch_app.py --wait S --workers N`` prints how many executors the
app holds after ``S`` seconds of idling from its start (``idle: N``), runs one batch job
and prints how many it holds once that job has had the time to get them back
(``after job: N``, waiting up to 60 s for ``--workers``). Nothing here imports
spark_adaptive: it is switched on by its keys alone, as a user would.
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import SparkSession


def executors(spark: SparkSession) -> int:
    """Executors registered with the driver (the driver itself left out)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(0, len(infos) - 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("early-batch").getOrCreate()
    seen = []
    end = time.monotonic() + args.wait
    while time.monotonic() < end:
        seen.append(executors(spark))
        time.sleep(1.0)
    print(f"idle: {executors(spark)} (seen {seen})", flush=True)
    total = spark.range(0, 100_000, numPartitions=8).selectExpr("sum(id)").first()[0]
    deadline = time.monotonic() + 60.0
    while executors(spark) < args.workers and time.monotonic() < deadline:
        time.sleep(1.0)
    print(f"after job: {executors(spark)} (sum {total})", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
