"""Requirements kept beside the checkpoint: the file format, restore at registration, undo."""

from __future__ import annotations

import json
import logging

import pytest

from spark_adaptive.core.ports import QueryInfo
from spark_adaptive.core.streaming.persistence import (
    MemoryRequirementsStore,
    PersistedRequirements,
    decode,
    encode,
)
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.settings import SchedulerSettings
from spark_adaptive.errors import PersistenceError

CP = "hdfs:///checkpoints/orders"


def info(checkpoint: str | None = CP, partitions: int = 4) -> QueryInfo:
    return QueryInfo("query-1", "orders", partitions, checkpoint, 1.0)


def test_format_round_trip() -> None:
    text = encode(ResourceRequirements(2, 6), updated=1700000000.0)
    assert json.loads(text) == {"version": 1, "updated": 1700000000.0,
                                "parallelism": {"lowerBound": 2, "upperBound": 6}}
    assert decode(text) == ResourceRequirements(2, 6)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"version": 2, "parallelism": {"lowerBound": 1, "upperBound": 2}}', "version 2"),
    ('{"version": 1, "parallelism": {"lowerBound": 1}}', "upperBound"),
    ('{"version": 1}', "must be a JSON object"),
    ('{"version": 1, "parallelism": {"lowerBound": 3, "upperBound": 2}}', "invalid bounds"),
])
def test_a_bad_file_is_a_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode(text)


def test_restore_returns_what_was_persisted(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryRequirementsStore()
    store.save(CP, ResourceRequirements(1, 2))
    persisted = PersistedRequirements(store, SchedulerSettings())
    with caplog.at_level(logging.INFO, "spark_adaptive.core.streaming.persistence"):
        assert persisted.restore(info()) == ResourceRequirements(1, 2)
    assert f"query orders: requirements [1, 2] restored from {CP}" in caplog.text
    assert persisted.checkpoint("query-1") == CP


def test_restore_without_a_file_or_checkpoint_uses_the_defaults() -> None:
    persisted = PersistedRequirements(MemoryRequirementsStore(), SchedulerSettings())
    assert persisted.restore(info()) is None
    assert persisted.restore(QueryInfo("query-2", None, 4, None, 0.0)) is None
    assert persisted.checkpoint("query-2") is None


def test_restore_ignores_bounds_that_no_longer_apply(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryRequirementsStore()
    store.save(CP, ResourceRequirements(1, 64))
    persisted = PersistedRequirements(store, SchedulerSettings(max_parallelism=16))
    assert persisted.restore(info()) is None
    assert "no longer apply (The upper bound 64 exceeds the max parallelism 16.)" in caplog.text


def test_restore_ignores_them_in_reactive_mode(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryRequirementsStore()
    store.save(CP, ResourceRequirements(1, 2))
    with caplog.at_level(logging.INFO, "spark_adaptive.core.streaming.persistence"):
        reactive = SchedulerSettings(mode="reactive")
        assert PersistedRequirements(store, reactive).restore(info()) is None
    assert "reactive mode" in caplog.text


class BrokenStore(MemoryRequirementsStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def load(self, checkpoint: str) -> ResourceRequirements | None:
        raise self.error


@pytest.mark.parametrize("error", [ValueError("not JSON"), PersistenceError("unreachable")])
def test_restore_never_raises(error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    assert PersistedRequirements(BrokenStore(error), SchedulerSettings()).restore(info()) is None
    assert "using the defaults" in caplog.text


def test_persist_and_undo_put_back_the_previous_file() -> None:
    store = MemoryRequirementsStore()
    persisted = PersistedRequirements(store, SchedulerSettings())
    persisted.restore(info())
    undo = persisted.persist("query-1", ResourceRequirements(1, 3))
    assert undo is not None and store.load(CP) == ResourceRequirements(1, 3)
    undo()
    assert store.files == {}  # there was no file: the undo removes it
    persisted.persist("query-1", ResourceRequirements(1, 3))
    undo = persisted.persist("query-1", ResourceRequirements(2, 2))
    assert undo is not None
    undo()
    assert store.load(CP) == ResourceRequirements(1, 3)


def test_a_corrupt_file_is_replaced() -> None:
    store = BrokenStore(ValueError("not JSON"))
    persisted = PersistedRequirements(store, SchedulerSettings())
    persisted.restore(info())
    undo = persisted.persist("query-1", ResourceRequirements(1, 3))
    assert store.files == {CP: ResourceRequirements(1, 3)} and undo is not None


def test_persist_without_a_checkpoint_writes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryRequirementsStore()
    persisted = PersistedRequirements(store, SchedulerSettings())
    persisted.restore(info(checkpoint=None))
    assert persisted.persist("query-1", ResourceRequirements(1, 3)) is None
    assert store.files == {}
    assert "not persisted and last until the driver stops" in caplog.text


def test_an_unreachable_store_fails_before_writing() -> None:
    store = BrokenStore(PersistenceError("unreachable"))
    persisted = PersistedRequirements(store, SchedulerSettings())
    persisted.restore(info())
    with pytest.raises(PersistenceError):
        persisted.persist("query-1", ResourceRequirements(1, 3))
    assert store.files == {}
