"""Failing: the query failed for good; stop what still runs → Finished(FAILED).

The :class:`~spark_adaptive.core.streaming.restart.Failure` that caused it is kept
unchanged all the way into Finished, so the application's
``awaitTermination()`` raises the query's own error. ``cancel`` → Canceling
(as in Flink, the query then ends CANCELED).
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states.base import (
    RunsIfState,
    State,
    StateName,
    StopsQuery,
    ToCanceling,
    ToFinished,
)


class Context(ToFinished, ToCanceling, StopsQuery, RunsIfState, Protocol):
    pass


class Failing(State):
    name = StateName.FAILING

    def __init__(self, ctx: Context, failure: Failure) -> None:
        super().__init__()
        self._ctx = ctx
        self.failure = failure
        if ctx.query_running:
            ctx.stop_query(self, False, self._on_stopped)
        else:
            ctx.run_if_state(self, self._finish, 0.0)

    def _on_stopped(self, result: StopResult) -> None:
        self._finish()

    def _finish(self) -> None:
        self._ctx.go_to_finished("FAILED", self.failure.message, self.failure)

    def cancel(self) -> None:
        self._ctx.go_to_canceling("cancel requested while failing")
