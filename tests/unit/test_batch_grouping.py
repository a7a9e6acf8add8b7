"""Grouping RDD helpers read at most a share of the Python worker's memory per task."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from spark_adaptive.batch import plans

MiB = 1 << 20


class _Conf:
    def __init__(self, conf: dict[str, str]) -> None:
        self._conf = conf

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._conf.get(key, default)


class _Context:
    """What :func:`plans.for_grouping` reads of a SparkContext."""

    def __init__(self, app: str, **conf: str) -> None:
        self.applicationId = app
        self._conf = _Conf(conf)

    def getConf(self) -> _Conf:  # noqa: N802 - SparkContext's name
        return self._conf


def params(v: int) -> plans.BatchParams:
    return plans.BatchParams(avg_bytes_per_task=v, min_p=1, max_p=128)


def test_volume_is_capped_at_a_sixteenth_of_the_worker_memory(
        caplog: pytest.LogCaptureFixture) -> None:
    sc: Any = _Context("app-grouping-1")
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch"):
        capped = plans.for_grouping(sc, params(64 * MiB), "join")
        again = plans.for_grouping(sc, params(64 * MiB), "groupByKey")
    assert capped.avg_bytes_per_task == again.avg_bytes_per_task == 32 * MiB  # 512m / 16
    assert capped.max_p == 128
    said = [r.getMessage() for r in caplog.records if "Python lists" in r.getMessage()]
    assert len(said) == 1 and "32 MiB" in said[0] and "64 MiB" in said[0]


def test_more_worker_memory_or_a_smaller_volume_is_left_alone() -> None:
    roomy: Any = _Context("app-grouping-2", **{"spark.python.worker.memory": "2g"})
    assert plans.for_grouping(roomy, params(64 * MiB), "join").avg_bytes_per_task == 64 * MiB
    assert plans.for_grouping(roomy, params(256 * MiB), "join").avg_bytes_per_task == 128 * MiB
    small: Any = _Context("app-grouping-3")
    assert plans.for_grouping(small, params(16 * MiB), "join").avg_bytes_per_task == 16 * MiB


def test_merging_tasks_read_at_most_16_mib_and_map_tasks_write_partitions_for_them(
        caplog: pytest.LogCaptureFixture) -> None:
    sc: Any = _Context("app-merging-1")
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch"):
        capped, per_map_task = plans.for_merging(sc, params(64 * MiB), "reduceByKey")
        plans.for_merging(sc, params(100 * MiB), "reduceByKey")
    assert capped.avg_bytes_per_task == plans.MERGE_TASK_BYTES == 16 * MiB
    assert capped.split_bytes == 64 * MiB  # text_file's splits when unset
    assert per_map_task == 4  # a map task of a 64 MiB split: ceil(64 / 16) partitions
    said = [r.getMessage() for r in caplog.records if "Python dict" in r.getMessage()]
    assert len(said) == 1 and "16 MiB" in said[0] and "64 MiB" in said[0], said
    # At or under the cap V is left alone, and the partitions per map task follow the splits.
    small = params(8 * MiB)
    assert plans.for_merging(sc, small, "reduceByKey") == (small, 8)
    assert plans.for_merging(sc, params(16 * MiB), "reduceByKey")[1] == 4
    big_splits = dataclasses.replace(params(16 * MiB), split_bytes=100 * MiB)
    assert plans.for_merging(sc, big_splits, "reduceByKey")[1] == 7  # ceil(100 / 16)
    tiny_splits = dataclasses.replace(params(16 * MiB), split_bytes=MiB)
    assert plans.for_merging(sc, tiny_splits, "reduceByKey")[1] == 1
    # 16 map tasks of a 1 GB text file: 64 partitions, room for ceil(441 MiB / 16 MiB).
    assert plans.subpartitions(16, capped, per_map_task) == 64
    assert plans.subpartitions(82, capped, per_map_task) == 128  # never above max-parallelism
