"""What every state shares: the base class and the small capabilities contexts are built of.

Rules every state follows (the per-query scheduler enforces the first two):

* A state never transitions from its constructor. Work that may lead to a
  transition is scheduled with ``ctx.run_if_state(self, action, 0)``.
* Everything asynchronous (timers, driver completions) runs only while the
  state that asked for it is still current (``run_if_state``); a state's
  timers are cancelled when it is left (:meth:`State.on_leave`).
* Each state module declares a ``Context`` protocol with only the
  capabilities below that it uses, so the type checker rejects a transition
  that is not in the graph.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from spark_adaptive.core.clock import Action, Cancellable
from spark_adaptive.core.events import Event
from spark_adaptive.core.options import MAX_PARALLELISM_LIMIT
from spark_adaptive.core.ports import RepartitionSupport, StartResult, StopResult
from spark_adaptive.core.streaming.history import RescaleHistory, Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements, ScalingTarget
from spark_adaptive.core.streaming.restart import Failure, FailureResult
from spark_adaptive.core.streaming.settings import SchedulerSettings
from spark_adaptive.errors import ConflictError

log = logging.getLogger("spark_adaptive.core.streaming.states")

FinishedStatus = Literal["FINISHED", "CANCELED", "FAILED"]


class StateName(str, enum.Enum):
    """The states' public names (the REST API, the CLI, the logs), Flink's spellings."""

    CREATED = "Created"
    WAITING_FOR_RESOURCES = "WaitingForResources"
    CREATING_EXECUTION_GRAPH = "CreatingExecutionGraph"
    EXECUTING = "Executing"
    RESTARTING = "Restarting"
    STOP_WITH_SAVEPOINT = "StopWithSavepoint"
    CANCELING = "Canceling"
    FAILING = "Failing"
    FINISHED = "Finished"

    def __str__(self) -> str:  # the name as written, in f-strings and str() alike
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class SchedulingParams:
    """The timing settings of one query, resolved (seconds; ``math.inf`` = never)."""

    resource_wait_timeout: float
    submission_stabilization: float
    cooldown: float
    executing_stabilization: float
    trigger_max_delay: float
    min_parallelism_increase: int = 1
    scaling_interval_max: float | None = None
    max_parallelism: int = MAX_PARALLELISM_LIMIT

    @classmethod
    def of(cls, settings: SchedulerSettings, trigger_interval: float) -> SchedulingParams:
        """A query's parameters. An unset rescale-trigger max delay is three trigger
        intervals (0 without an interval), as Flink's default is (2 failures + 1) ×
        the checkpoint interval."""
        max_delay = settings.trigger_max_delay
        if max_delay is None:
            max_delay = 3.0 * trigger_interval
        return cls(
            resource_wait_timeout=settings.resource_wait_timeout,
            submission_stabilization=settings.submission_stabilization,
            cooldown=settings.cooldown,
            executing_stabilization=settings.executing_stabilization,
            trigger_max_delay=max_delay,
            min_parallelism_increase=settings.min_parallelism_increase,
            scaling_interval_max=settings.scaling_interval_max,
            max_parallelism=settings.max_parallelism,
        )


class State:
    """Base of every scheduler state. ``name`` is public (REST, logs)."""

    name: ClassVar[StateName]

    def __init__(self) -> None:
        self._timers: list[Cancellable] = []

    def track(self, timer: Cancellable) -> Cancellable:
        """Remember a timer so that :meth:`on_leave` cancels it."""
        self._timers.append(timer)
        return timer

    def untrack(self, timer: Cancellable) -> None:
        """Forget a timer that fired (keeps a long-lived state's list short)."""
        self._timers = [t for t in self._timers if t is not timer and not t.cancelled]

    def on_leave(self) -> None:
        """Called once, just before the scheduler moves to the next state."""
        for t in self._timers:
            t.cancel()
        self._timers.clear()

    # -- events every state receives; the defaults ignore them -------------------
    def cancel(self) -> None:
        raise NotImplementedError

    def stop_with_savepoint(self) -> None:
        """Stop cleanly at the next micro-batch boundary. Only a running query can."""
        raise ConflictError(f"cannot stop with savepoint in state {self.name}; only a query in "
                            "Executing can (cancel works in every state)")

    def on_resources_changed(self) -> None:
        """The query's slot share may have changed. Ignored unless a state says otherwise."""

    def on_requirements_changed(self, *, autoscaler: bool = False) -> None:
        """The query's bounds (or, ``autoscaler``, the autoscaler's target) changed.
        Ignored unless a state says otherwise."""

    def on_warm_up_ended(self) -> None:
        """No warm-up of new executors is in flight any more. Ignored unless a state says
        otherwise."""

    def on_query_event(self, event: Event) -> None:
        """An event of the query's current run. Ignored unless a state says otherwise."""
        log.debug("%s ignores %s", self.name, type(event).__name__)


# -- capabilities ---------------------------------------------------------------------
class RunsIfState(Protocol):
    def run_if_state(self, state: State, action: Action, delay: float) -> Cancellable:
        """Run ``action`` after ``delay`` seconds only if ``state`` is still current."""
        ...

    def now(self) -> float: ...


class ToWaitingForResources(Protocol):
    def go_to_waiting_for_resources(self, reason: str) -> None: ...


class ToCreatingExecutionGraph(Protocol):
    def go_to_creating_execution_graph(
        self, reason: str, *, fail_without_resources: bool = False
    ) -> None: ...


class ToExecuting(Protocol):
    def go_to_executing(self, result: StartResult, slots: int, reason: str, *,
                        initial: bool = False) -> None:
        """Executing; ``initial`` for the query's first run (submission timing)."""
        ...


class ToRestarting(Protocol):
    def go_to_restarting(
        self,
        reason: str,
        *,
        backoff: float,
        trigger: Trigger,
        target_parallelism: int | None = None,
        target_slots: int | None = None,
        failure: Failure | None = None,
    ) -> None:
        """Restart: stop the query if it runs, wait ``backoff``, start again.

        ``target_parallelism`` is set for a rescale, None after a failure.
        """
        ...


class ToStopWithSavepoint(Protocol):
    def go_to_stop_with_savepoint(self, reason: str) -> None: ...


class ToCanceling(Protocol):
    def go_to_canceling(self, reason: str) -> None: ...


class ToFailing(Protocol):
    def go_to_failing(self, failure: Failure, reason: str) -> None: ...


class ToFinished(Protocol):
    def go_to_finished(
        self, status: FinishedStatus, reason: str, failure: Failure | None = None
    ) -> None: ...


class StartsQuery(Protocol):
    def start_query(
        self, state: State, parallelism: int, on_done: Callable[[StartResult], None]
    ) -> None:
        """Start the query; ``on_done`` runs on the scheduler thread, only while ``state`` is."""
        ...

    def repartition_failed(self, target: int, error: str) -> None:
        """The query's state could not be repartitioned to ``target`` partitions (it
        started again at those it had): it keeps them until its bounds, the autoscaler's
        target or its slot share change."""
        ...

    def start_failed(self, target: int, error: str) -> None:
        """Starting the query at ``target`` partitions failed and it started again at
        those it had: it keeps them until its bounds, the autoscaler's target or its slot
        share change."""
        ...

    @property
    def rescaled_from(self) -> int | None:
        """The partitions of the run a restart rescale stopped, while that rescale's start
        is under way; None when no rescale is (a failure's restart, or none)."""
        ...


class StopsQuery(Protocol):
    @property
    def query_running(self) -> bool: ...

    def stop_query(self, state: State, clean: bool, on_done: Callable[[StopResult], None]) -> None:
        """Stop the query; ``on_done`` runs on the scheduler thread, only while ``state`` is."""
        ...


class HandlesFailures(Protocol):
    def handle_failure(self, failure: Failure) -> FailureResult:
        """Ask the query's restart strategy about ``failure``."""
        ...


class SeesResources(Protocol):
    def slot_share(self) -> int | None:
        """The query's share of the application's slots now (None: insufficient)."""
        ...

    def has_desired_share(self, share: int | None) -> bool:
        """``share`` gives the query everything it asked for."""
        ...

    def start_parallelism(self, share: int) -> tuple[int, str]:
        """The partitions to start with on ``share`` slots, and why."""
        ...

    @property
    def requirements(self) -> ResourceRequirements: ...

    @property
    def allocation(self) -> ResourceRequirements:
        """The bounds, with the upper one at the autoscaler's slots when it set a target."""
        ...

    @property
    def target_partitions(self) -> int | None:
        """The autoscaler's partition count, when it set a target."""
        ...

    @property
    def target(self) -> ScalingTarget | None:
        """The autoscaler's target, if it set one."""
        ...

    def repartition_support(self) -> RepartitionSupport: ...

    def warming_up(self) -> bool:
        """Executors that joined are being warmed up now."""
        ...


class HasParams(Protocol):
    @property
    def params(self) -> SchedulingParams: ...


class HasHistory(Protocol):
    @property
    def history(self) -> RescaleHistory: ...

    def decide(self, action: str, reason: str) -> None:
        """Record a decision that is not a transition (logged at INFO with its reason)."""
        ...


# -- shared behaviour -----------------------------------------------------------------
class _RestartOrFail(HandlesFailures, ToRestarting, ToFailing, Protocol):
    pass


def restart_or_fail(ctx: _RestartOrFail, failure: Failure, what: str) -> None:
    """Hand ``failure`` to the restart strategy: Restarting(backoff) or Failing.

    Flink's ``FailureResultUtil.restartOrFail``. ``what`` says what failed, for the reason.
    """
    result = ctx.handle_failure(failure)
    if result.can_restart:
        ctx.go_to_restarting(
            f"{what}: {failure.message}; {result.strategy} allows a restart after "
            f"{result.backoff:g}s", backoff=result.backoff, trigger=Trigger.FAILURE,
            failure=failure)
    elif not failure.recoverable:
        ctx.go_to_failing(failure, f"{what}: {failure.message}; {result.strategy}")
    else:
        ctx.go_to_failing(failure, f"{what}: {failure.message}; {result.strategy} allows no "
                                   "further restart")
