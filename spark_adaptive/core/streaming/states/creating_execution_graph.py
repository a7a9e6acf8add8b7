"""CreatingExecutionGraph: start the query at its decided parallelism.

Flink builds the execution graph and reserves slots here; Spark's equivalent
is ``QueryDriver.start``, which also repartitions the checkpoint's state when
the partition count changes. The parallelism is the query's slot share now
(or the partitions it must keep when they cannot change).

* No share at all: Finished(FAILED) if the state was entered because the
  resource-wait timeout fired (Flink fails the job with "not enough
  resources"); otherwise the share vanished since the decision →
  WaitingForResources.
* The start succeeded → Executing.
* The start succeeded, but at the partitions the query had, because its state
  could not be repartitioned (``StartResult.repartition_error``: the boundary
  put the checkpoint back as it was) → Executing at those partitions; the
  rescale is recorded as failed, and the query keeps its partitions until its
  bounds, the autoscaler's target or its slot share change (no restart loop
  on a repartition that keeps failing).
* The start failed → the restart strategy decides (Restarting or Failing).
  Flink fails the job when graph creation fails; a Spark start can fail for
  transient reasons (the checkpoint file system, a repartition racing with a
  slow stop), and retrying within the strategy's limits is what users expect.

``cancel`` and stop-with-savepoint while the start is in flight: a cancel is
remembered and carried out once the start reports (Canceling if the query
came up, Finished(CANCELED) if not), because stopping a query that is still
starting could leave it running. Resource changes are ignored: Executing looks
at the resources again as soon as it is entered.
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states.base import (
    HandlesFailures,
    HasHistory,
    RunsIfState,
    SeesResources,
    StartsQuery,
    State,
    StateName,
    ToCanceling,
    ToExecuting,
    ToFailing,
    ToFinished,
    ToRestarting,
    ToWaitingForResources,
    restart_or_fail,
)

NO_RESOURCES = "Not enough resources available for scheduling the query"


class Context(ToWaitingForResources, ToExecuting, ToRestarting, ToFailing, ToCanceling,
              ToFinished, RunsIfState, SeesResources, StartsQuery, HandlesFailures, HasHistory,
              Protocol):
    pass


class CreatingExecutionGraph(State):
    name = StateName.CREATING_EXECUTION_GRAPH

    def __init__(self, ctx: Context, fail_without_resources: bool = False) -> None:
        super().__init__()
        self._ctx = ctx
        self._fail_without_resources = fail_without_resources
        self._cancel_requested = False
        self.starting: int | None = None
        self._slots = 0
        ctx.run_if_state(self, self._start, 0.0)

    def _start(self) -> None:
        share = self._ctx.slot_share()
        if share is None:
            if self._fail_without_resources:
                failure = Failure(f"{NO_RESOURCES}: the lower bounds of the application's "
                                  "queries need more slots than there are.", origin="resources")
                self._ctx.history.count_failure()
                self._ctx.go_to_finished("FAILED", failure.message, failure)
            else:
                self._ctx.go_to_waiting_for_resources("the slot share vanished before the start")
            return
        parallelism, why = self._ctx.start_parallelism(share)
        self.starting = parallelism
        self._slots = share
        history = self._ctx.history
        if history.pending is None:
            history.open(Trigger.INITIAL_SCHEDULE, "restart", from_parallelism=0,
                         to_parallelism=parallelism, from_slots=0, to_slots=share, reason=why)
        else:
            history.update_pending(to_parallelism=parallelism)
        self._ctx.decide(f"start at {parallelism} partitions", why)
        self._ctx.start_query(self, parallelism, self._on_started)

    def _on_started(self, result: StartResult) -> None:
        kept = result.ok and result.repartition_error is not None
        self._ctx.history.update_pending(
            to_parallelism=result.parallelism if result.ok and not kept else None,
            timings=result.timings)
        if kept:
            self._ctx.history.fail_pending()
            self._ctx.repartition_failed(self.starting or result.parallelism,
                                         result.repartition_error or "")
        if result.ok:
            if self._cancel_requested:
                self._ctx.history.supersede_pending()
                self._ctx.go_to_canceling("canceled while the query was starting")
                return
            if kept:
                reason = (f"started again at its {result.parallelism} partitions on "
                          f"{self._slots} slots: its state could not be repartitioned to "
                          f"{self.starting} ({result.repartition_error}); checkpoint rolled "
                          "back, nothing lost")
            else:
                reason = (f"started at {result.parallelism} partitions on {self._slots} slots"
                          + (" (state repartitioned)" if result.repartitioned else ""))
            self._ctx.go_to_executing(result, self._slots, reason)
            return
        self._ctx.history.fail_pending()
        if self._cancel_requested:
            self._ctx.go_to_finished("CANCELED", "canceled while the query was starting "
                                                 "(the start failed)")
            return
        failure = Failure(result.error or "the query failed to start", origin="start")
        restart_or_fail(self._ctx, failure, "the start failed")

    def cancel(self) -> None:
        if self.starting is None:
            # The start has not been asked for yet: nothing runs.
            self._ctx.go_to_finished("CANCELED", "canceled before the query started")
            return
        self._cancel_requested = True
