"""Created: the query is registered; its first run is being started.

The app's ``start()`` starts the first run itself, at once (Spark analyses the
query and raises its own errors without waiting for spark-adaptive), at the
partitions :func:`~spark_adaptive.core.streaming.allocator.first_start` decided. Leaves
by :meth:`Created.adopt` to Executing once that run is up, or by ``cancel``
straight to Finished(CANCELED).
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.states.base import State, StateName, ToExecuting, ToFinished


class Context(ToExecuting, ToFinished, Protocol):
    pass


class Created(State):
    name = StateName.CREATED

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx

    def adopt(self, result: StartResult, slots: int, reason: str) -> None:
        """The first run started: Executing, with the submission timing."""
        self._ctx.go_to_executing(result, slots, reason, initial=True)

    def cancel(self) -> None:
        self._ctx.go_to_finished("CANCELED", "canceled before the query started")
