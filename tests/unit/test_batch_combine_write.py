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


def test_reduce_by_key_values_are_their_own_combiners() -> None:
    # create None: no call per new key, the value itself is stored.
    value = [1]
    batches = _write([(7, value)], partitions=1, create=None)
    assert batches == [(0, [(7, [1])])]
    assert _write([(1, 2.5), (1, 0.5), (2, 1.0)], partitions=1, create=None) == \
        [(0, [(1, 3.0), (2, 1.0)])]


def _merged(batches: list[list[tuple[Any, Any]]], memory_mb: float) -> dict[Any, Any]:
    from pyspark.shuffle import Aggregator

    agg = Aggregator(lambda v: v, operator.add, operator.add)
    out = dict(batch_rdd._merge_batches(iter(batches), operator.add, agg, memory_mb,
                                        CPickleSerializer()))
    return out


def test_the_reduce_side_merges_batches_and_past_the_memory_limit_spills_to_disk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark.shuffle

    batches = [[(k % 50, 1) for k in range(i, i + 300)] for i in range(0, 3_000, 300)]
    expected = {k: 60 for k in range(50)}
    assert _merged(batches, memory_mb=1e9) == expected

    mergers: list[Any] = []

    class Recorded(pyspark.shuffle.ExternalMerger):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            mergers.append(self)

    monkeypatch.setattr(pyspark.shuffle, "ExternalMerger", Recorded)
    monkeypatch.setattr(batch_rdd, "MEMORY_CHECK_RECORDS", 500)
    # Under the limit nothing changes hands; at 1 MiB (any process is over it) the merged
    # keys and the batches still to come go to an ExternalMerger, which spills.
    assert _merged(batches, memory_mb=1e9) == expected and not mergers
    assert _merged(batches, memory_mb=1) == expected
    assert len(mergers) == 1 and mergers[0].spills > 0
    assert _merged([], memory_mb=1) == {}
