"""Restarting: stop the query, wait the backoff, start it again.

Entered for a rescale (backoff 0, a target parallelism) or after a failure
(the restart strategy's backoff, no target). The query is stopped cleanly,
between two micro-batches, so that its checkpoint is complete and its state
can be repartitioned; a query a failure already stopped is not stopped again.

Once stopped, and after the backoff (``run_if_state``), it goes on to
CreatingExecutionGraph when the parallelism available now is still the
target, or the desired resources are there (FLINK-37232 / FLINK-38748);
otherwise to WaitingForResources, which waits for the resources to settle.

A failure reported by the stop itself is ignored, as Flink ignores failures
while restarting: the query is being restarted anyway. Resource changes are
ignored: they are looked at when the backoff ends. ``cancel`` → Canceling.
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.states.base import (
    HasHistory,
    RunsIfState,
    SeesResources,
    State,
    StateName,
    StopsQuery,
    ToCanceling,
    ToCreatingExecutionGraph,
    ToWaitingForResources,
)


class Context(ToCreatingExecutionGraph, ToWaitingForResources, ToCanceling, RunsIfState,
              StopsQuery, SeesResources, HasHistory, Protocol):
    pass


class Restarting(State):
    name = StateName.RESTARTING

    def __init__(self, ctx: Context, backoff: float, target_parallelism: int | None) -> None:
        super().__init__()
        self._ctx = ctx
        self.backoff = backoff
        self.target_parallelism = target_parallelism
        self.stopped = not ctx.query_running
        if self.stopped:
            ctx.run_if_state(self, self._go_on, backoff)
        else:
            ctx.stop_query(self, True, self._on_stopped)

    def _on_stopped(self, result: StopResult) -> None:
        self.stopped = True
        self._ctx.history.update_pending(timings=result.timings)
        if result.error is not None:
            self._ctx.decide("ignore failure while restarting", result.error)
        self._ctx.run_if_state(self, self._go_on, self.backoff)

    def _go_on(self) -> None:
        share = self._ctx.slot_share()
        available = None if share is None else self._ctx.start_parallelism(share)[0]
        if self.target_parallelism is not None and available == self.target_parallelism:
            self._ctx.go_to_creating_execution_graph(
                f"the target parallelism {self.target_parallelism} is still available")
        elif self._ctx.has_desired_share(share):
            self._ctx.go_to_creating_execution_graph(
                f"desired resources available ({share} slots)")
        else:
            target = ("" if self.target_parallelism is None
                      else f"the target parallelism {self.target_parallelism} is gone, ")
            self._ctx.go_to_waiting_for_resources(
                f"{target}{share} slots available now; waiting for the resources to settle")

    def cancel(self) -> None:
        self._ctx.go_to_canceling("cancel requested while restarting")
