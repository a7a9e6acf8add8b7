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
* The start failed with an error no retry can get past (Spark's analysis refused
  the query, its checkpoint's metadata cannot be read: ``Failure.recoverable``)
  → Failing at once, with Spark's error, as Flink fails the job when graph
  creation fails with an unrecoverable error.
* The start of a restart that spark-adaptive made to rescale the query failed:
  the app asked for no restart, so the failure is not the restart strategy's
  to count. The start is retried (after ``START_RETRY_DELAY``) once at the
  target and once at the partitions the query ran at before (if they differ);
  one that comes up at those goes to Executing there, the rescale recorded as
  failed, and the query keeps its partitions until its bounds, the autoscaler's
  target or its slot share change. Only when the retries fail too does the last
  failure go to the restart strategy (so with ``none`` the query fails with
  that error).
* Any other failed start (of a failure's restart) → the restart strategy decides
  (Restarting or Failing). Flink fails the job when graph creation fails; a
  Spark start can fail for transient reasons (the checkpoint file system, a
  repartition racing with a slow stop), and retrying within the strategy's
  limits is what users expect.

``cancel`` and stop-with-savepoint while the start is in flight: a cancel is
remembered and carried out once the start reports (Canceling if the query
came up, Finished(CANCELED) if not), because stopping a query that is still
starting could leave it running; a cancel while a retry waits its delay →
Finished(CANCELED). Resource changes are ignored: Executing looks at the
resources again as soon as it is entered.
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.restart import Failure, start_failure
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
START_RETRY_DELAY = 1.0
"""Seconds before a failed start of a rescale restart is tried again (Flink's default
restart delay)."""


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
        self._in_flight = False
        self.starting: int | None = None
        self._target: int | None = None
        """The partitions decided for this start (a retry may start at others)."""
        self._retries: list[int] = []
        """The partition counts a failed start of a rescale restart is retried at."""
        self._target_error: str | None = None
        """Why the start at the decided partitions failed, once it did."""
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
        self._target = parallelism
        self._slots = share
        previous = self._ctx.rescaled_from
        if previous is not None:
            self._retries = [parallelism] + ([previous] if previous != parallelism else [])
        history = self._ctx.history
        if history.pending is None:
            history.open(Trigger.INITIAL_SCHEDULE, "restart", from_parallelism=0,
                         to_parallelism=parallelism, from_slots=0, to_slots=share, reason=why)
        else:
            history.update_pending(to_parallelism=parallelism)
        self._ctx.decide(f"start at {parallelism} partitions", why)
        self._start_at(parallelism)

    def _start_at(self, parallelism: int) -> None:
        self.starting = parallelism
        self._in_flight = True
        self._ctx.start_query(self, parallelism, self._on_started)

    def _on_started(self, result: StartResult) -> None:
        self._in_flight = False
        kept = result.ok and result.repartition_error is not None
        fell_back = result.ok and self.starting != self._target
        self._ctx.history.update_pending(
            to_parallelism=result.parallelism if result.ok and not (kept or fell_back) else None,
            timings=result.timings)
        if fell_back:
            error = self._target_error or ""
            self._ctx.history.fail_pending()
            self._ctx.start_failed(self._target or result.parallelism, error)
        elif kept:
            self._ctx.history.fail_pending()
            self._ctx.repartition_failed(self.starting or result.parallelism,
                                         result.repartition_error or "")
        if result.ok:
            if self._cancel_requested:
                self._ctx.history.supersede_pending()
                self._ctx.go_to_canceling("canceled while the query was starting")
                return
            if fell_back:
                reason = (f"started again at its {result.parallelism} partitions on "
                          f"{self._slots} slots: starting it at {self._target} failed "
                          f"({self._target_error})")
            elif kept:
                reason = (f"started again at its {result.parallelism} partitions on "
                          f"{self._slots} slots: its state could not be repartitioned to "
                          f"{self.starting} ({result.repartition_error}); checkpoint rolled "
                          "back, nothing lost")
            else:
                reason = (f"started at {result.parallelism} partitions on {self._slots} slots"
                          + (" (state repartitioned)" if result.repartitioned else ""))
            self._ctx.go_to_executing(result, self._slots, reason)
            return
        if self._cancel_requested:
            self._ctx.history.fail_pending()
            self._ctx.go_to_finished("CANCELED", "canceled while the query was starting "
                                                 "(the start failed)")
            return
        failure = start_failure(result)
        if failure.recoverable and self._retries:
            if self.starting == self._target and self._target_error is None:
                self._target_error = failure.message
            retry = self._retries.pop(0)
            self._ctx.decide(
                f"retry the start at {retry} partitions",
                f"the start at {self.starting} partitions of a restart made to rescale the "
                f"query failed ({failure.message}); a restart the app did not ask for is "
                f"not the restart strategy's to count: retried in {START_RETRY_DELAY:g}s")
            self._ctx.run_if_state(self, lambda: self._start_at(retry), START_RETRY_DELAY)
            return
        self._ctx.history.fail_pending()
        restart_or_fail(self._ctx, failure, "the start failed")

    def cancel(self) -> None:
        if not self._in_flight:
            # No start is in flight (not asked for yet, or a retry waits): nothing runs.
            self._ctx.go_to_finished("CANCELED", "canceled before the query started")
            return
        self._cancel_requested = True
