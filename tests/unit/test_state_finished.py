"""Finished: terminal."""

from __future__ import annotations

import pytest

from spark_adaptive.core.events import QueryTerminated
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states import Finished
from spark_adaptive.errors import ConflictError


def test_failed_carries_its_failure_and_only_failed_does() -> None:
    failure = Failure("boom")
    assert Finished("FAILED", failure).failure is failure
    with pytest.raises(ValueError):
        Finished("FAILED")
    with pytest.raises(ValueError):
        Finished("CANCELED", failure)


def test_everything_is_ignored() -> None:
    state = Finished("FINISHED")
    state.cancel()
    state.on_resources_changed()
    state.on_requirements_changed()
    state.on_query_event(QueryTerminated(0, "q", "r", None))
    with pytest.raises(ConflictError):
        state.stop_with_savepoint()
    assert (state.name, state.status) == ("Finished", "FINISHED")
