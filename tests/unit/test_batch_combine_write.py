"""The map side of ``combine_by_key``: combined records written as PySpark's shuffle records."""

from __future__ import annotations

import operator
import pickle
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.serializers import CPickleSerializer

from spark_adaptive.batch import rdd as batch_rdd


def _read(written: Iterator[bytes]) -> list[tuple[int, list[tuple[Any, Any]]]]:
    """(partition, batch) pairs, as the JVM's PairwiseRDD reads them."""
    out = list(written)
    assert len(out) % 2 == 0
    return [(int.from_bytes(out[i], "big", signed=True), pickle.loads(out[i + 1]))
            for i in range(0, len(out), 2)]


def _write(records: list[tuple[Any, Any]], partitions: int = 5, limit_mb: float = 1e9,
           create: Any = lambda v: v, merge: Any = operator.add) -> list[Any]:
    return _read(batch_rdd._combine_and_write(iter(records), create, merge, partitions,
                                              batch_rdd.partition_hash, CPickleSerializer(),
                                              limit_mb))


def test_every_key_is_combined_once_into_the_partition_of_its_hash() -> None:
    records = [(k % 97, k) for k in range(5_000)]
    batches = _write(records)
    sums: Counter[int] = Counter()
    for partition, batch in batches:
        for k, total in batch:
            assert batch_rdd.partition_hash(k) % 5 == partition
            assert k not in sums  # one record per key: combined on the map side
            sums[k] = total
    expected: Counter[int] = Counter()
    for k, v in records:
        expected[k] += v
    assert sums == expected
    # One batch per partition that got keys, and none for an empty one.
    assert sorted(p for p, _ in batches) == sorted({batch_rdd.partition_hash(k) % 5
                                                   for k in range(97)})
    assert _write([]) == []


def test_combiners_of_another_type_and_a_big_partition_in_several_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_rdd, "BATCH_RECORDS", 10)
    batches = _write([(k, str(k)) for k in range(35)] * 2, partitions=1,
                     create=lambda v: [v], merge=lambda c, v: c + [v])
    assert [len(b) for _, b in batches] == [10, 10, 10, 5]
    assert sorted(k for _, b in batches for k, _ in b) == list(range(35))
    assert all(c == [str(k), str(k)] for _, b in batches for k, c in b)


def test_past_the_memory_limit_the_combined_records_go_out_and_combining_restarts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_rdd, "MEMORY_CHECK_RECORDS", 100)
    records = [(k % 10, 1) for k in range(1_000)]
    # A limit of 0 MiB: every check finds the process over it, until the limit is raised
    # to 5% over the memory used, after the first write.
    batches = _write(records, partitions=2, limit_mb=0)
    written = [kv for _, b in batches for kv in b]
    assert len(written) == 10 + 10  # the first 100 records, combined; then the rest
    totals: Counter[int] = Counter()
    for k, n in written:
        totals[k] += n
    assert totals == Counter({k: 100 for k in range(10)})
