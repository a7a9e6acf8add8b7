"""What one record of the RDD ``reduceByKey`` job costs in Python, step by step.

benchmarks/batch.py's RDD job (``sc.textFile(...).map(parse).reduceByKey(add)``)
spends its time per record, in the Python workers, whatever the partition count.
This measures those steps in one Python process, on lines like the benchmark's
(``key,value,grp``, a key per 8 rows, so a map task of 2M lines sees mostly
distinct keys), with PySpark's own code for each step:

* **parse**: the job's ``parse`` (split, ``int``, ``float``);
* **combine**: the map side's ``ExternalMerger.mergeValues``;
* **hash + bucket**: ``partitionBy``'s bucketing by ``portable_hash(key) % n``,
  and by :func:`spark_adaptive.batch.rdd.partition_hash` (the helpers' hash);
* **pickle**: the buckets as ``CPickleSerializer`` batches, as ``partitionBy``
  writes them;
* **unpickle + merge**: the reduce side's ``mergeCombiners`` over those batches.

Then one map task's whole map side, as a map task of the 10 MB job sees it
(262,144 records, a key per 4): PySpark's (``ExternalMerger.mergeValues``,
then ``RDD.partitionBy``'s own bucketing and pickling, taken from PySpark
itself) against the helpers' (:func:`spark_adaptive.batch.rdd._combine_and_write`,
one dict, then one pickled batch per partition), writing 4 partitions; and
the reduce side of a task that reads 4 such map tasks' batches of a partition:
PySpark's (the batches' records one by one into ``ExternalMerger.mergeCombiners``)
against the helpers' (:func:`spark_adaptive.batch.rdd._merge_batches`, a list
at a time), both unpickling.

The JVM's part (reading lines, moving bytes to and from Python, the shuffle
files) is not in here: benchmarks/batch.py measures whole jobs.

    .venv/bin/python benchmarks/rdd_record_costs.py            # 2M lines, 128 partitions
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("PYTHONHASHSEED", "0")  # as Spark sets it for its Python workers

from pyspark.rdd import RDD, portable_hash  # noqa: E402
from pyspark.serializers import CPickleSerializer  # noqa: E402
from pyspark.shuffle import Aggregator, ExternalMerger  # noqa: E402

from spark_adaptive.batch import rdd as helpers  # noqa: E402
from spark_adaptive.batch.rdd import partition_hash  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def parse(line: str) -> tuple[int, float]:
    k, v, _ = line.split(",")
    return int(k), float(v)


def lines_like_the_benchmark(n: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    keys = max(1, n * 4)  # a 64 MiB map task of a multi-GB input: few repeats within it
    return [f"{rnd.randrange(keys)},{rnd.randrange(10**7) / 100},{rnd.randrange(100)}"
            for _ in range(n)]


def timed(step: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = step()
    return time.perf_counter() - t0, out


def bucket(items: list[tuple[Any, Any]], hashing: Callable[[Any], int],
           n: int) -> list[list[tuple[Any, Any]]]:
    buckets: list[list[tuple[Any, Any]]] = [[] for _ in range(n)]
    for k, v in items:
        buckets[hashing(k) % n].append((k, v))
    return buckets


def one_round(lines: list[str], partitions: int) -> dict[str, float]:
    agg = Aggregator(lambda v: v, operator.add, operator.add)
    ser = CPickleSerializer()
    out: dict[str, float] = {}
    out["parse"], pairs = timed(lambda: [parse(line) for line in lines])

    def combine() -> list[tuple[Any, Any]]:
        merger: Any = ExternalMerger(agg, 1 << 30)
        merger.mergeValues(iter(pairs))
        return list(merger.items())

    out["combine"], items = timed(combine)
    out["hash + bucket (portable_hash)"], _ = timed(
        lambda: bucket(items, portable_hash, partitions))
    out["hash + bucket (partition_hash)"], buckets = timed(
        lambda: bucket(items, partition_hash, partitions))
    out["pickle"], blobs = timed(lambda: [ser.dumps(b) for b in buckets])

    def merge() -> int:
        merger: Any = ExternalMerger(agg, 1 << 30)
        for blob in blobs:
            merger.mergeCombiners(iter(ser.loads(blob)))
        return sum(1 for _ in merger.items())

    out["unpickle + merge"], _ = timed(merge)
    out["distinct share"] = len(items) / len(lines)
    return out


class _Captured(Exception):
    def __init__(self, write: Callable[[int, Any], Any]) -> None:
        super().__init__("captured")
        self.write = write


class _Keyed:
    """Just enough of an RDD for ``RDD.partitionBy`` to build its map-side function, which
    it hands to ``mapPartitionsWithIndex``: caught there, so it is PySpark's own code."""

    partitioner = None

    def __init__(self) -> None:
        from types import SimpleNamespace

        self.ctx = SimpleNamespace(_unbatched_serializer=CPickleSerializer())

    def _memory_limit(self) -> int:
        return 512

    def mapPartitionsWithIndex(self, f: Any, preservesPartitioning: bool = False) -> Any:  # noqa: N802
        raise _Captured(f)


def pyspark_partition_writer(partitions: int) -> Callable[[int, Any], Any]:
    try:
        RDD.partitionBy(_Keyed(), partitions, partition_hash)
    except _Captured as c:
        return c.write
    raise AssertionError("RDD.partitionBy no longer builds its writer as expected")


def map_side_round(records: int = 1 << 18, partitions: int = 4) -> dict[str, float]:
    """Seconds of one map task's map side, PySpark's and the helpers', on the same pairs."""
    rnd = random.Random(3)
    pairs = [(rnd.randrange(records // 4), rnd.randrange(10**7) / 100) for _ in range(records)]
    agg = Aggregator(lambda v: v, operator.add, operator.add)
    ser = CPickleSerializer()

    def pyspark() -> int:
        merger: Any = ExternalMerger(agg, 1 << 30)
        merger.mergeValues(iter(pairs))
        return sum(1 for _ in pyspark_partition_writer(partitions)(0, merger.items()))

    def one_pass() -> int:
        return sum(1 for _ in helpers._combine_and_write(
            iter(pairs), None, operator.add, partitions, partition_hash, ser, 1 << 30))

    written = list(helpers._combine_and_write(iter(pairs), None, operator.add, 1,
                                              partition_hash, ser, 1 << 30))
    blobs = written[1::2] * 4

    def pyspark_reduce() -> int:
        merger: Any = ExternalMerger(agg, 1 << 30)
        merger.mergeCombiners(kv for b in blobs for kv in ser.loads(b))
        return sum(1 for _ in merger.items())

    def helpers_reduce() -> int:
        return sum(1 for _ in helpers._merge_batches((ser.loads(b) for b in blobs),
                                                     operator.add, agg, 1 << 30, ser))

    out: dict[str, float] = {}
    out["map side, PySpark"], _ = timed(pyspark)
    out["map side, helpers"], _ = timed(one_pass)
    out["reduce side, PySpark"], _ = timed(pyspark_reduce)
    out["reduce side, helpers"], _ = timed(helpers_reduce)
    return out


def plot(per_line: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s in per_line if s != "distinct share"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.barh(steps[::-1], [per_line[s] for s in steps[::-1]], color="tab:green")
    ax.set_xlabel("microseconds per input line (one Python process)")
    ax.set_title("RDD reduceByKey: Python's cost per record, by step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="rdd_record_costs")
    args = ap.parse_args()
    lines = lines_like_the_benchmark(args.lines)
    rounds = [one_round(lines, args.partitions) for _ in range(args.repeats)]
    per_line = {k: statistics.median(r[k] for r in rounds) / (
        1 if k == "distinct share" else args.lines / 1e6) for k in rounds[0]}
    for k, v in per_line.items():
        print(f"{k:32s} {v:6.2f}" + ("" if k == "distinct share" else " us/line"))
    map_rounds = [map_side_round() for _ in range(max(args.repeats, 5))]
    map_side = {k: statistics.median(r[k] for r in map_rounds) for k in map_rounds[0]}
    for k, v in map_side.items():
        what = ("map task (262,144 records, a key per 4)" if k.startswith("map")
                else "reduce task (4 such map tasks' batches)")
        print(f"{k:32s} {v * 1e3:6.1f} ms per {what}")
    for side in ("map", "reduce"):
        print(f"helpers / PySpark {side} side: "
              f"{map_side[f'{side} side, helpers'] / map_side[f'{side} side, PySpark']:.2f}")
    portable = per_line["hash + bucket (portable_hash)"]
    print(f"partition_hash / portable_hash bucketing: "
          f"{per_line['hash + bucket (partition_hash)'] / portable:.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(
        {"lines": args.lines, "partitions": args.partitions, "repeats": args.repeats,
         "us_per_line": per_line, "rounds": rounds, "task_seconds": map_side,
         "task_rounds": map_rounds}, indent=1))
    plot(per_line, RESULTS / f"{args.out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
