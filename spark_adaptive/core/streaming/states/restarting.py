"""Restarting: stop the query, wait the backoff, start it again.

Entered for a rescale (backoff 0, a target parallelism) or after a failure
(the restart strategy's backoff, no target). The query is stopped cleanly,
between two micro-batches, so that its checkpoint is complete and its state
can be repartitioned; a query a failure already stopped is not stopped again.

Once stopped, and after the backoff (``run_if_state``), it goes on to
CreatingExecutionGraph when the parallelism available now is still the
target, or the desired resources are there (FLINK-37232 / FLINK-38748);
otherwise to WaitingForResources, which waits for the resources to settle.

A run that failed by itself while it was being stopped (the stop reports its
error: a rescale's clean stop waits for the micro-batch in flight, and that
batch failed) is a failure as any other, handed to the restart strategy once:
on plain Spark the query would have failed, so with ``none`` it fails
(Failing), and a strategy counts it; a restart it allows keeps the target and
waits the strategy's backoff. (Flink ignores failures while restarting because
its graph is already being cancelled; here the run's own error would be lost.)
Resource changes are ignored: they are looked at when the backoff ends.
``cancel`` → Canceling.
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states.base import (
    HandlesFailures,
    HasHistory,
    RunsIfState,
    SeesResources,
    State,
    StateName,
    StopsQuery,
    ToCanceling,
    ToCreatingExecutionGraph,
    ToFailing,
    ToWaitingForResources,
)


class Context(ToCreatingExecutionGraph, ToWaitingForResources, ToCanceling, ToFailing,
              RunsIfState, StopsQuery, SeesResources, HasHistory, HandlesFailures, Protocol):
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
            failure = Failure(result.error, origin="stop")
            verdict = self._ctx.handle_failure(failure)
            what = "the query failed while stopping for a restart"
            if not verdict.can_restart:
                self._ctx.go_to_failing(failure, f"{what}: {failure.message}; "
                                                 f"{verdict.strategy} allows no further restart")
                return
            self.backoff = max(self.backoff, verdict.backoff)
            self._ctx.decide("restart after a failure", (
                f"{what}: {failure.message}; {verdict.strategy} allows a restart after "
                f"{verdict.backoff:g}s"))
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
