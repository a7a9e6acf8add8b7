"""A plain PySpark streaming app whose input rate follows a time profile.

It knows nothing of spark-adaptive: ``benchmarks/autoscale.py`` submits it
unchanged three ways (static allocation, Spark's dynamic allocation,
spark-adaptive's autoscaler) and compares what each costs.

* The source, ``profiled``, is a Python streaming data source. Row ``i``
  arrives at the instant the profile's cumulative row count reaches ``i + 1``
  (the rate is piecewise linear between the profile's knots), and carries that
  instant as ``ts``. Its rows are spread over ``--partitions`` input partitions
  (like a topic's partitions), row ``i`` in partition ``i % partitions``. After
  the profile's end no more rows arrive.
* The work is ``--cost`` seconds of wall time per row (a sleep: waiting on an
  external service, little CPU), so four one-core workers fit on a small machine.
* The sink is a parquet file sink: exactly-once, each row with the time its
  work finished (``done``).

When the profile is over the app waits for the query to process everything,
stops it and ends. ``--start`` (seconds since the epoch) sets the profile's start: an
app resubmitted on the same checkpoint with the first one's start goes on with the
same profile where it was (by default the profile starts as the app does).

    spark-submit examples/varying_load.py --profile '[[0, 50], [60, 400]]' --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

GRID = 0.02  # seconds between the points of the cumulative-rows curve


class Profile:
    """A piecewise-linear rate (rows/s) over time, and its inverse: when row i arrives."""

    def __init__(self, knots: list[list[float]]) -> None:
        self.knots = knots
        times = np.array([k[0] for k in knots], dtype=float)
        rates = np.array([k[1] for k in knots], dtype=float)
        if len(times) < 2 or np.any(np.diff(times) <= 0) or np.any(rates <= 0):
            raise ValueError(f"a profile needs increasing times and positive rates: {knots}")
        self.duration = float(times[-1])
        self.grid = np.arange(0.0, self.duration + GRID, GRID)
        rate = np.interp(self.grid, times, rates)
        steps = (rate[1:] + rate[:-1]) / 2 * np.diff(self.grid)
        self.cumulative = np.concatenate([[0.0], np.cumsum(steps)])
        self.total = int(self.cumulative[-1])

    def rows_until(self, elapsed: float) -> int:
        if elapsed >= self.duration:
            return self.total
        return int(np.interp(max(0.0, elapsed), self.grid, self.cumulative))

    def arrivals(self, ids: np.ndarray) -> np.ndarray:
        """Seconds after the start at which each row id arrived."""
        return np.interp(ids + 1.0, self.cumulative, self.grid)


class RowRange(InputPartition):
    def __init__(self, start: int, end: int, index: int, count: int) -> None:
        super().__init__(index)
        self.start, self.end, self.index, self.count = start, end, index, count


class ProfiledReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.knots = json.loads(options["profile"])
        self.start = float(options["start"])
        self.partition_count = int(options.get("partitions", "12"))
        self._profile: Profile | None = None

    @property
    def profile(self) -> Profile:
        if self._profile is None:
            self._profile = Profile(self.knots)
        return self._profile

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_profile": None}  # executors rebuild the curve

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API
        return {"rows": 0}

    def latestOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API
        return {"rows": self.profile.rows_until(time.time() - self.start)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        n = self.partition_count
        return [RowRange(start["rows"], end["rows"], i, n) for i in range(n)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, float]]:
        assert isinstance(partition, RowRange)
        first = partition.start + (partition.index - partition.start) % partition.count
        ids = np.arange(first, partition.end, partition.count)
        arrived = self.start + self.profile.arrivals(ids)
        yield from zip(ids.tolist(), arrived.tolist(), strict=True)

    def commit(self, end: dict[str, int]) -> None:
        pass


class ProfiledSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "profiled"

    def schema(self) -> str:
        return "id long, ts double"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 - Spark's API
        return ProfiledReader(self.options)


def work(cost: float) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            time.sleep(cost * batch.num_rows)
            done = pa.array(np.full(batch.num_rows, time.time()))
            yield pa.RecordBatch.from_arrays([batch.column(0), batch.column(1), done],
                                             names=["id", "ts", "done"])
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", required=True, help="JSON [[seconds, rows/s], ...]")
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--cost", type=float, default=0.004, help="seconds of work per row")
    parser.add_argument("--trigger", default="2 seconds")
    parser.add_argument("--start", type=float, default=None,
                        help="the profile's start, seconds since the epoch (default: now)")
    args = parser.parse_args()
    profile = Profile(json.loads(args.profile))

    spark = SparkSession.builder.appName("autoscale-benchmark").getOrCreate()
    spark.dataSource.register(ProfiledSource)
    start = time.time() if args.start is None else args.start
    rows = (spark.readStream.format("profiled")
            .option("profile", args.profile).option("start", repr(start))
            .option("partitions", str(args.partitions)).load())
    done = rows.mapInArrow(work(args.cost), "id long, ts double, done double")
    query = (done.writeStream.format("parquet").option("path", args.out)
             .option("checkpointLocation", args.checkpoint or args.out + "-checkpoint")
             .trigger(processingTime=args.trigger).queryName("profiled").start())
    print(f"source started at {start!r}: {profile.total} rows over {profile.duration:.0f}s",
          flush=True)
    time.sleep(max(0.0, start + profile.duration - time.time()))
    query.processAllAvailable()
    query.stop()
    print(f"caught up {time.time() - start - profile.duration:.1f}s after the profile ended",
          flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
