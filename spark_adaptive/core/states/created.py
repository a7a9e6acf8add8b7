"""Created: the query is registered; nothing is scheduled yet.

Leaves by :meth:`Created.start_scheduling` to WaitingForResources, or by
``cancel`` straight to Finished(CANCELED) (no query runs yet).
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.states.base import State, ToFinished, ToWaitingForResources


class Context(ToWaitingForResources, ToFinished, Protocol):
    pass


class Created(State):
    name = "Created"

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx

    def start_scheduling(self) -> None:
        self._ctx.go_to_waiting_for_resources("scheduling starts")

    def cancel(self) -> None:
        self._ctx.go_to_finished("CANCELED", "canceled before scheduling started")
