"""Canceling: stop the query at once → Finished(CANCELED).

The stop does not wait for the micro-batch in flight (``clean=False``); the
checkpoint stays consistent, Spark replays the unfinished batch on a later
run. A query that is not running goes to Finished at once (scheduled, since
constructors never transition). Every other event, a second cancel included,
is ignored.
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.states.base import (
    RunsIfState,
    State,
    StateName,
    StopsQuery,
    ToFinished,
)


class Context(ToFinished, StopsQuery, RunsIfState, Protocol):
    pass


class Canceling(State):
    name = StateName.CANCELING

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx
        if ctx.query_running:
            ctx.stop_query(self, False, self._on_stopped)
        else:
            ctx.run_if_state(self, self._finish, 0.0)

    def _on_stopped(self, result: StopResult) -> None:
        self._finish()

    def _finish(self) -> None:
        self._ctx.go_to_finished("CANCELED", "canceled")

    def cancel(self) -> None:
        pass  # already canceling
