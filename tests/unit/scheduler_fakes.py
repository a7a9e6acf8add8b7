"""Hand-written fakes for the scheduler's unit tests (no mocking library).

* :class:`StateContext` implements every state's ``Context``. A test declares
  the transition it expects with :meth:`StateContext.expect`; an unexpected
  transition fails at once ("Unexpected state transition"), and leaving the
  ``with`` block fails when an expected one never happened ("No transition
  to X"), like Flink's ``MockExecutingContext`` + ``StateValidator``.
* :class:`FakeDriver` records ``start``/``stop`` calls; the test resolves
  each one explicitly.
* :class:`FakeActuator` records executor requests and kills.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from spark_adaptive.core.clock import Action, Cancellable, VirtualTime
from spark_adaptive.core.events import (
    ExecutorAdded,
    ExecutorHeartbeat,
    ExecutorRemoved,
    JobStarted,
    QueryIdle,
    QueryProgress,
    QueryTerminated,
    StageSubmitted,
)
from spark_adaptive.core.ports import (
    ExecutorRelease,
    QueryInfo,
    RepartitionSupport,
    StartResult,
    StopResult,
)
from spark_adaptive.core.streaming.allocator import RescaleDecision
from spark_adaptive.core.streaming.history import RescaleHistory, Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements, ScalingTarget
from spark_adaptive.core.streaming.restart import FailedStart, Failure, FailureResult
from spark_adaptive.core.streaming.scheduler import AdaptiveScheduler
from spark_adaptive.core.streaming.states import SchedulingParams, State
from spark_adaptive.settings import Settings

PARAMS = SchedulingParams(
    resource_wait_timeout=300.0, submission_stabilization=10.0, cooldown=30.0,
    executing_stabilization=60.0, trigger_max_delay=0.0)
REPARTITION_OK = RepartitionSupport(True, "RocksDB state store")
BOUNDS_1_4 = ResourceRequirements(1, 4)


@dataclass
class Transition:
    target: str
    args: dict[str, Any]


@dataclass
class PendingCall:
    state: State
    arg: Any
    on_done: Callable[[Any], None]


class StateContext:
    """Every capability a state may use, recording what the state does."""

    def __init__(
        self,
        vt: VirtualTime,
        *,
        share: int | None = None,
        requirements: ResourceRequirements = BOUNDS_1_4,
        params: SchedulingParams = PARAMS,
        support: RepartitionSupport = REPARTITION_OK,
        fixed_partitions: int | None = None,
        target_partitions: int | None = None,
        running: bool = False,
        failure_results: list[FailureResult] | None = None,
    ) -> None:
        self.vt = vt
        self.share = share
        self._requirements = requirements
        self._params = params
        self.support = support
        self.fixed_partitions = fixed_partitions
        self.target_partitions = target_partitions
        self.target: ScalingTarget | None = None
        self.running = running
        self.failure_results = list(failure_results or [])
        self.warming = False
        self.handled_failures: list[Failure] = []
        self.repartition_failures: list[tuple[int, str]] = []
        self.start_failures: list[tuple[int, str]] = []
        self.rescaled_from: int | None = None
        self._history = RescaleHistory(vt)
        self.decisions: list[tuple[str, str]] = []
        self.live_rescales: list[tuple[RescaleDecision, Trigger]] = []
        self.starts: list[PendingCall] = []
        self.stops: list[PendingCall] = []
        self.transitions: list[Transition] = []
        self._expected: set[str] = set()
        self.state: State | None = None
        self._left = False

    # -- test API -----------------------------------------------------------------------
    def __enter__(self) -> StateContext:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is None and self._expected:
            raise AssertionError("No transition to " + ", ".join(sorted(self._expected)))

    def expect(self, target: str) -> None:
        self._expected.add(target)

    def enter(self, build: Callable[[StateContext], State]) -> Any:
        self.state = build(self)
        assert not self.transitions, "a state transitioned from its constructor"
        return self.state

    @property
    def last(self) -> Transition:
        assert self.transitions, "no transition happened"
        return self.transitions[-1]

    def resolve_start(self, result: StartResult) -> None:
        call = self.starts.pop(0)
        if result.ok:
            self.running = True
        self.vt.call_later(0, lambda: self._if_current(call.state, lambda: call.on_done(result)))
        self.vt.run_pending()

    def resolve_stop(self, result: StopResult | None = None) -> None:
        call = self.stops.pop(0)
        self.running = False
        done = result or StopResult(clean=True)
        self.vt.call_later(0, lambda: self._if_current(call.state, lambda: call.on_done(done)))
        self.vt.run_pending()

    def _record(self, target: str, **args: Any) -> None:
        if self._left:
            raise AssertionError(f"Unexpected second state transition to {target} {args}")
        if target not in self._expected:
            raise AssertionError(f"Unexpected state transition to {target} {args}")
        self._expected.discard(target)
        self.transitions.append(Transition(target, args))
        self._left = True
        if self.state is not None:
            self.state.on_leave()

    def _if_current(self, state: State, action: Action) -> None:
        if state is self.state and not self._left:
            action()

    # -- transitions --------------------------------------------------------------------
    def go_to_waiting_for_resources(self, reason: str) -> None:
        self._record("WaitingForResources", reason=reason)

    def go_to_creating_execution_graph(
        self, reason: str, *, fail_without_resources: bool = False
    ) -> None:
        self._record("CreatingExecutionGraph", reason=reason,
                     fail_without_resources=fail_without_resources)

    def go_to_executing(self, result: StartResult, slots: int, reason: str, *,
                        initial: bool = False) -> None:
        self._record("Executing", result=result, slots=slots, reason=reason, initial=initial)

    def go_to_restarting(self, reason: str, *, backoff: float, trigger: Trigger,
                         target_parallelism: int | None = None, target_slots: int | None = None,
                         failure: Failure | None = None) -> None:
        self._record("Restarting", reason=reason, backoff=backoff, trigger=trigger,
                     target_parallelism=target_parallelism, target_slots=target_slots,
                     failure=failure)

    def go_to_stop_with_savepoint(self, reason: str) -> None:
        self._record("StopWithSavepoint", reason=reason)

    def go_to_canceling(self, reason: str) -> None:
        self._record("Canceling", reason=reason)

    def go_to_failing(self, failure: Failure, reason: str) -> None:
        self._record("Failing", failure=failure, reason=reason)

    def go_to_finished(self, status: str, reason: str, failure: Failure | None = None) -> None:
        self._record("Finished", status=status, reason=reason, failure=failure)

    # -- the rest of the contexts -------------------------------------------------------
    def run_if_state(self, state: State, action: Action, delay: float) -> Cancellable:
        return state.track(self.vt.call_later(delay, lambda: self._if_current(state, action)))

    def now(self) -> float:
        return self.vt.now()

    def slot_share(self) -> int | None:
        return self.share

    def warming_up(self) -> bool:
        return self.warming

    def has_desired_share(self, share: int | None) -> bool:
        target = self.fixed_partitions or self._requirements.upper
        return share is not None and share >= target

    def start_parallelism(self, share: int) -> tuple[int, str]:
        if self.fixed_partitions is not None:
            return self.fixed_partitions, "fixed"
        return share, "share"

    @property
    def requirements(self) -> ResourceRequirements:
        return self._requirements

    @requirements.setter
    def requirements(self, value: ResourceRequirements) -> None:
        self._requirements = value

    @property
    def allocation(self) -> ResourceRequirements:
        """As QueryScheduler's, for a query without source tasks beyond its bounds."""
        r, t = self._requirements, self.target
        if t is None:
            return r
        return ResourceRequirements(r.lower, max(r.lower, min(r.upper, t.slots)))

    def repartition_support(self) -> RepartitionSupport:
        return self.support

    @property
    def params(self) -> SchedulingParams:
        return self._params

    @property
    def history(self) -> RescaleHistory:
        return self._history

    def decide(self, action: str, reason: str) -> None:
        self.decisions.append((action, reason))

    def record_live_rescale(self, decision: RescaleDecision, trigger: Trigger) -> None:
        self.live_rescales.append((decision, trigger))

    @property
    def query_running(self) -> bool:
        return self.running

    def start_query(self, state: State, parallelism: int,
                    on_done: Callable[[StartResult], None]) -> None:
        self.starts.append(PendingCall(state, parallelism, on_done))

    def stop_query(self, state: State, clean: bool, on_done: Callable[[StopResult], None]) -> None:
        self.stops.append(PendingCall(state, clean, on_done))

    def repartition_failed(self, target: int, error: str) -> None:
        self.repartition_failures.append((target, error))

    def start_failed(self, target: int, error: str) -> None:
        self.start_failures.append((target, error))

    def handle_failure(self, failure: Failure) -> FailureResult:
        self.handled_failures.append(failure)
        assert self.failure_results, "the test did not say how the restart strategy answers"
        return self.failure_results.pop(0)


# -- the boundary's side --------------------------------------------------------------------
def ok(parallelism: int, run_id: str = "run-1", query_id: str = "qid") -> StartResult:
    return StartResult(ok=True, parallelism=parallelism, query_id=query_id, run_id=run_id)


@dataclass
class FakeDriver:
    """A query driver whose every start and stop the test completes by hand."""

    info: QueryInfo
    support: RepartitionSupport = REPARTITION_OK
    query_id: str = "qid-1"
    calls: list[tuple[str, Any]] = field(default_factory=list)
    pending_starts: list[tuple[int, Callable[[StartResult], None]]] = field(default_factory=list)
    pending_stops: list[tuple[bool, Callable[[StopResult], None]]] = field(default_factory=list)
    run_id: str | None = None
    _runs: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _batches: itertools.count[int] = field(default_factory=itertools.count)

    def repartition_support(self, stateful: bool,
                            on_done: Callable[[RepartitionSupport], None]) -> None:
        on_done(self.support)  # nothing to read: at once

    def first_start(self, parallelism: int) -> StartResult:
        """The app's ``start()``: the first run starts at once, outside the scheduler."""
        self.calls.append(("start", parallelism))
        self.run_id = f"{self.info.key}-run-{next(self._runs)}"
        return StartResult(ok=True, parallelism=parallelism, query_id=self.query_id,
                           run_id=self.run_id, timings=(("start", 0.5),))

    def start(self, parallelism: int, on_done: Callable[[StartResult], None]) -> None:
        self.calls.append(("start", parallelism))
        self.pending_starts.append((parallelism, on_done))

    def stop(self, clean: bool, on_done: Callable[[StopResult], None]) -> None:
        self.calls.append(("stop", clean))
        self.pending_stops.append((clean, on_done))

    def complete_start(self, ok: bool = True, error: str | None = None,
                       parallelism: int | None = None,
                       repartition_error: str | None = None, error_class: str | None = None,
                       recoverable: bool = True) -> StartResult:
        """``repartition_error``: the state could not be repartitioned, and the query
        started at ``parallelism``, the partitions it had. A failed start reports
        ``error`` with Spark's ``error_class``; ``recoverable=False``: starting again
        meets it again."""
        asked, on_done = self.pending_starts.pop(0)
        if ok:
            self.run_id = f"{self.info.key}-run-{next(self._runs)}"
            result = StartResult(ok=True, parallelism=parallelism or asked,
                                 query_id=self.query_id, run_id=self.run_id,
                                 timings=(("start", 0.5),), repartition_error=repartition_error)
        else:
            result = FailedStart(error=error or "start failed", error_class=error_class,
                                 recoverable=recoverable)
        on_done(result)
        return result

    def complete_stop(self, clean: bool = True, error: str | None = None) -> None:
        _, on_done = self.pending_stops.pop(0)
        on_done(StopResult(clean=clean, error=error, timings=(("stop", 0.25),)))

    # events of the current run
    def progress(self, time: float = 0.0) -> QueryProgress:
        assert self.run_id is not None
        return QueryProgress(time, self.query_id, self.run_id, self.info.name,
                             next(self._batches), 10, 1.0, 1.0, 0.1, 0.1)

    def job_started(self, job_id: int = 1, time: float = 0.0) -> JobStarted:
        """A job of the current run's micro-batch started (its tasks may run anywhere)."""
        assert self.run_id is not None
        return JobStarted(time, job_id, (job_id,), job_group=self.run_id)

    def idle(self, time: float = 0.0) -> QueryIdle:
        assert self.run_id is not None
        return QueryIdle(time, self.query_id, self.run_id)

    def terminated(self, exception: str | None = None, error_class: str | None = None,
                   time: float = 0.0) -> QueryTerminated:
        assert self.run_id is not None
        return QueryTerminated(time, self.query_id, self.run_id, exception, error_class)


@dataclass
class FakeActuator:
    """Records every total declared and every executor released (the reconciler names
    them), and every hung executor killed."""

    requested: list[int] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    killed: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def request_total_executors(self, total: int,
                                release: Sequence[ExecutorRelease] = ()) -> list[str]:
        self.requested.append(total)
        ids = [r.executor_id for r in release]
        self.released.extend(ids)
        return ids

    def release_hung_executor(self, executor_id: str, reason: str) -> None:
        self.killed.append(((executor_id,), reason))


def query_info(key: str = "q1", *, partitions: int = 4, checkpoint: str | None = "/cp/q1",
               trigger_interval: float = 0.0, name: str | None = None,
               state_partitions: int | None = None,
               non_replayable_sources: tuple[str, ...] = ()) -> QueryInfo:
    return QueryInfo(key=key, name=name or key, configured_partitions=partitions,
                     checkpoint_location=checkpoint, trigger_interval=trigger_interval,
                     state_partitions=state_partitions,
                     non_replayable_sources=non_replayable_sources)


class App:
    """An AdaptiveScheduler on virtual time with a fake actuator, for scenario tests.

    Executors added through :meth:`add` send a heartbeat every 5 s while time
    moves through :meth:`advance`, so that hang detection leaves them alone
    unless a test freezes one (:meth:`freeze`).
    """

    def __init__(self, settings: Settings | None = None, *, actuator: Any = None,
                 **kw: Any) -> None:
        """``actuator``: another than a FakeActuator (one with ``observe``, as the Spark
        actuator, hears every event, as from the bus)."""
        self.vt = VirtualTime()
        self.actuator = FakeActuator() if actuator is None else actuator
        settings = settings or Settings()
        self.scheduler = AdaptiveScheduler(
            settings.scheduler, self.actuator, self.vt,
            lambda fn: self.vt.call_later(0, fn), random=lambda: 0.5, restart=settings.restart,
            **{"heartbeat_interval": 5.0, **kw})
        self.changes: list[Any] = []
        self.scheduler.add_listener(self.changes.append)
        self.beating: set[str] = set()
        self._stages = itertools.count(1000)

    def add(self, executor_id: str, cores: int = 1, host: str | None = None) -> None:
        self.event(ExecutorAdded(self.vt.wall(), executor_id, host or f"host-{executor_id}",
                                 cores))
        self.beating.add(executor_id)

    def remove(self, executor_id: str, reason: str = "worker lost") -> None:
        self.beating.discard(executor_id)
        self.event(ExecutorRemoved(self.vt.wall(), executor_id, reason))

    def freeze(self, executor_id: str) -> None:
        self.beating.discard(executor_id)

    def event(self, event: Any) -> None:
        observe = getattr(self.actuator, "observe", None)
        if observe is not None:
            observe(event)
        self.scheduler.on_event(event)
        self.vt.run_pending()

    def batch(self, driver: FakeDriver, tasks: tuple[int, ...] = (1,)) -> None:
        """A micro-batch of ``driver``'s current run whose stages (of ``tasks`` tasks each)
        Spark reported, then its progress: by default one stage of one task, which shows
        what the query runs and raises nothing."""
        assert driver.run_id is not None
        stages = tuple(next(self._stages) for _ in tasks)
        self.event(JobStarted(0.0, stages[0], stages, job_group=driver.run_id))
        for stage, count in zip(stages, tasks, strict=True):
            self.event(StageSubmitted(0.0, stage, 0, count))
        self.event(driver.progress())

    def advance(self, seconds: float) -> None:
        end = self.vt.now() + seconds
        while self.vt.now() < end:
            self.vt.advance(min(5.0, end - self.vt.now()))
            for executor_id in sorted(self.beating):
                self.scheduler.on_event(ExecutorHeartbeat(self.vt.wall(), executor_id))

    def register(self, driver: FakeDriver, requirements: Any = None, history: Any = None) -> Any:
        """What the boundary does when the app starts a query: plan the first run, start it
        at once (the driver's ``first_start``), hand the running query to the scheduler
        (with the ``history`` persisted beside its checkpoint, if any)."""
        s = self.scheduler
        bounds = requirements or s.default_requirements(driver.info)
        plan = s.plan_first_start(driver.info, bounds, driver.support)
        q = s.adopt_query(driver, bounds, plan, driver.first_start(plan.parallelism),
                          history=history, own_bounds=requirements is not None)
        self.vt.run_pending()
        return q

    def start(self, driver: FakeDriver, **kw: Any) -> StartResult:
        result = driver.complete_start(**kw)
        self.vt.run_pending()
        return result

    def stop(self, driver: FakeDriver, **kw: Any) -> None:
        driver.complete_stop(**kw)
        self.vt.run_pending()

    def state(self, ident: str) -> str:
        return self.scheduler.query(ident).state.name


class ScalaOption:
    """Stands for a Scala ``Option`` a JVM query handle returns (``exception()``)."""

    def __init__(self, value: str | None) -> None:
        self.value = value

    def isDefined(self) -> bool:  # noqa: N802 - Scala's name
        return self.value is not None
