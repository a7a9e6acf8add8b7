"""The helpers' partition hash: PySpark's ``portable_hash``, faster for numeric keys."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.rdd import portable_hash

from spark_adaptive.batch.rdd import partition_hash


def test_partition_hash_is_portable_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    keys = [0, 1, -7, 2**70, 3.5, -0.0, float("inf"), "a", "", None, (1, None), ("x", 2.0),
            b"bytes", True, frozenset({1})]
    assert [partition_hash(k) for k in keys] == [portable_hash(k) for k in keys]
    assert Counter(partition_hash(k) % 7 for k in range(700)) == Counter(
        portable_hash(k) % 7 for k in range(700))


def test_partition_hash_of_a_string_needs_a_hash_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # As PySpark's: without PYTHONHASHSEED, str hashes differ between workers.
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with pytest.raises(Exception, match="PYTHONHASHSEED"):
        partition_hash("a")
    assert partition_hash(12) == hash(12)
