"""A batch's entry in a streaming checkpoint's offset log, as the autoscaler reads it."""

from __future__ import annotations

from spark_adaptive.core.ports import StartedBatch
from spark_adaptive.spark.checkpoint import started_batch

META = '{"batchWatermarkMs":0,"batchTimestampMs":1795682919253,"conf":{}}'


def test_an_entry_gives_the_batch_start_and_each_source_offsets() -> None:
    lines = ["v1", META, '{"rows": 14391}', "-", '{"t":{"0":5}}']
    assert started_batch(lines, 15) == StartedBatch(
        15, 1795682919.253, ('{"rows": 14391}', None, '{"t":{"0":5}}'))


def test_what_is_not_an_entry_gives_nothing() -> None:
    assert started_batch(None, 1) is None  # no entry (yet)
    assert started_batch(["v1", META], 1) is None  # no source
    assert started_batch(["v2", META, "1"], 1) is None  # a format not known
    assert started_batch(["v1", "{not json", "1"], 1) is None
    assert started_batch(["v1", '{"batchTimestampMs": 0}', "1"], 1) is None
    assert started_batch(["v1", '{"batchTimestampMs": "x"}', "1"], 1) is None
    assert started_batch(["v1", '{"batchTimestampMs": true}', "1"], 1) is None
