"""What the REST API asks of the scheduler, and the one implementation that asks it.

:class:`SchedulerFacade` is the whole contract between the HTTP layer and the
rest of spark-adaptive: the core's typed values (the JSON is built in
:mod:`spark_adaptive.rest.wire`) and the core's own errors
(:class:`~spark_adaptive.errors.UnknownQueryError`,
:class:`~spark_adaptive.errors.RequirementsError`,
:class:`~spark_adaptive.errors.ConflictError`,
:class:`~spark_adaptive.errors.PersistenceError`). Unit tests implement it
by hand; :class:`RuntimeFacade` implements it over a running runtime.

Threading: the HTTP server calls the facade on its request threads. Every
scheduler method must run on the scheduler thread, so :class:`RuntimeFacade`
hands each call to :meth:`EventLoop.call_sync` (which re-raises the
scheduler's exceptions here and raises ``TimeoutError`` if the scheduler thread
does not take the call in time; the call is then withdrawn and never runs, so
a request answered 503 changed nothing). Persisting is the exception: it is
slow I/O (HDFS, S3) and runs on the request thread, so the scheduler never
waits for a file system.

:class:`InFlight` keeps Flink's rule that only one requirements update of a
query is in progress at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus, Autoscaling
from spark_adaptive.core.streaming.history import Counters, RescaleRecord
from spark_adaptive.core.streaming.persistence import PersistedRequirements, Undo
from spark_adaptive.core.streaming.query import QuerySnapshot
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.samples import Sample, Sampler
from spark_adaptive.core.streaming.scheduler import AdaptiveScheduler
from spark_adaptive.errors import ConflictError

T = TypeVar("T")


@dataclass(frozen=True)
class RescaleView:
    """A query's rescale history as ``GET /queries/{id}/rescales`` shows it."""

    query_id: str
    key: str
    records: tuple[RescaleRecord, ...]
    """Newest last."""
    counters: Counters


@dataclass(frozen=True)
class SamplesView:
    """A query's recent samples as ``GET /queries/{id}/samples`` shows them."""

    query_id: str
    interval: float
    """Seconds between two samples."""
    capacity: int
    """The most samples kept per query."""
    samples: tuple[Sample, ...]
    """Oldest first."""


@dataclass(frozen=True)
class AppFigures:
    """Application-wide figures for ``/metrics``."""

    mode: str
    listener: str
    """``shim`` or ``py4j``: which listener delivers Spark's events."""
    executors_declared: int | None
    """The total last asked of Spark; None before the first request."""
    executors_alive: int
    events_received: int
    events_dropped: int
    events_queued: int
    """Events waiting in the shim's queue and on the scheduler thread."""
    listener_lag: float
    """Seconds the last event waited before the scheduler handled it."""
    samples_held: int = 0


@dataclass(frozen=True)
class MetricsView:
    """Everything ``/metrics`` exports, read in one step of the scheduler thread."""

    queries: tuple[QuerySnapshot, ...]
    autoscalers: dict[str, AutoscalerStatus]
    """By query key; empty when the autoscaler is off."""
    app: AppFigures


class SchedulerFacade(Protocol):
    """The scheduler as the REST API sees it. ``ident``: a key, Spark query id or name."""

    def queries(self) -> list[QuerySnapshot]:
        """Every managed query."""
        ...

    def query(self, ident: str) -> QuerySnapshot: ...

    def key_of(self, ident: str) -> str:
        """The query's key (stable for the app's lifetime): what in-flight updates are keyed by."""
        ...

    def requirements(self, key: str) -> ResourceRequirements: ...

    def rescales(self, key: str) -> RescaleView: ...

    def check_requirements(self, key: str, lower: int | None,
                           upper: int | None) -> ResourceRequirements:
        """Validate new bounds with every rule, changing nothing (``None``: a bound the
        body did not give as an integer)."""
        ...

    def autoscaler(self, key: str) -> AutoscalerStatus | None:
        """The query's autoscaler, None when the autoscaler is off. Its times (the decision's
        and :data:`POLICY_TIMES` of its policy) are epoch seconds, as everywhere in the API:
        the autoscaler keeps them on the scheduler's monotonic clock, and
        :func:`epoch_times` moves them."""
        ...

    def samples(self, key: str) -> SamplesView:
        """The query's recent samples (the operators' page charts them)."""
        ...

    def metrics(self) -> MetricsView:
        """Every figure ``/metrics`` exports."""
        ...

    def persist_requirements(self, key: str, requirements: ResourceRequirements) -> Undo | None:
        """Write the bounds beside the checkpoint; the undo, or None if not persisted."""
        ...

    def apply_requirements(self, key: str, requirements: ResourceRequirements) -> None:
        """Hand validated bounds to the scheduler (they take effect within its timing rules)."""
        ...


class RuntimeFacade:
    """:class:`SchedulerFacade` over an :class:`AdaptiveScheduler` and its event loop."""

    def __init__(self, loop: EventLoop, scheduler: AdaptiveScheduler,
                 persisted: PersistedRequirements, timeout: float = 30.0,
                 autoscaling: Autoscaling | None = None, sampler: Sampler | None = None,
                 app: Callable[[], AppFigures] | None = None) -> None:
        """``app``: the application's figures, called on the scheduler thread (the
        runtime's, which knows the listener and the bus)."""
        self._loop = loop
        self._sched = scheduler
        self._persisted = persisted
        self._timeout = timeout
        self._autoscaling = autoscaling
        self._sampler = sampler
        self._app = app

    def _call(self, fn: Callable[[], T]) -> T:
        # call_sync is typed ``object``; the value is whatever fn returned.
        return self._loop.call_sync(fn, self._timeout)  # type: ignore[return-value]

    def queries(self) -> list[QuerySnapshot]:
        return self._call(self._sched.snapshot)

    def query(self, ident: str) -> QuerySnapshot:
        return self._call(lambda: self._sched.query(ident).snapshot())

    def key_of(self, ident: str) -> str:
        return self._call(lambda: self._sched.query(ident).key)

    def requirements(self, key: str) -> ResourceRequirements:
        return self._call(lambda: self._sched.requirements(key))

    def rescales(self, key: str) -> RescaleView:
        def read() -> RescaleView:
            q = self._sched.query(key)
            return RescaleView(q.query_id or q.key, q.key, q.history.records(),
                               q.history.counters)

        return self._call(read)

    def check_requirements(self, key: str, lower: int | None,
                           upper: int | None) -> ResourceRequirements:
        return self._call(lambda: self._sched.check_requirements(key, lower, upper))

    def autoscaler(self, key: str) -> AutoscalerStatus | None:
        autoscaling = self._autoscaling
        if autoscaling is None:
            return None
        loop = self._loop  # the autoscaler's clock (the runtime gives it the loop)

        def read() -> AutoscalerStatus:
            status = autoscaling.status(self._sched.query(key))
            return epoch_times(status, loop.wall() - loop.now())

        return self._call(read)

    def samples(self, key: str) -> SamplesView:
        sampler = self._sampler

        def read() -> SamplesView:
            q = self._sched.query(key)
            if sampler is None:
                return SamplesView(q.query_id or q.key, 0.0, 0, ())
            return SamplesView(q.query_id or q.key, sampler.interval, sampler.capacity,
                               sampler.samples(q.key))

        return self._call(read)

    def metrics(self) -> MetricsView:
        autoscaling = self._autoscaling

        def read() -> MetricsView:
            queries = self._sched.queries()
            statuses = {} if autoscaling is None else {
                q.key: autoscaling.status(q) for q in queries}
            app = self._app() if self._app is not None else AppFigures(
                self._sched.settings.mode, "", None, self._sched.executor_count, 0, 0, 0, 0.0)
            return MetricsView(tuple(q.snapshot() for q in queries), statuses, app)

        return self._call(read)

    def persist_requirements(self, key: str, requirements: ResourceRequirements) -> Undo | None:
        return self._persisted.persist(key, requirements)

    def apply_requirements(self, key: str, requirements: ResourceRequirements) -> None:
        # The scheduler checks again, so a query that finished in the meantime is still
        # refused (ConflictError).
        self._call(lambda: self._sched.apply_requirements(key, requirements))


POLICY_TIMES = ("stabilizedAt", "pendingScaleDownSince", "blockedUntil")
"""The entries of :attr:`AutoscalerStatus.policy` that are instants (monotonic seconds as the
policy keeps them)."""


def epoch_times(status: AutoscalerStatus, offset: float) -> AutoscalerStatus:
    """``status`` with its instants moved from the scheduler's monotonic clock to epoch
    seconds: ``offset`` is ``wall() - now()`` of that clock, read in the same step (as
    :class:`~spark_adaptive.core.streaming.history.RescaleHistory` re-bases saved records)."""
    decision = status.decision
    if decision is not None:
        decision = replace(decision, time=decision.time + offset)
    policy = {k: v + offset if k in POLICY_TIMES and isinstance(v, (int, float))
              and not isinstance(v, bool) else v for k, v in status.policy.items()}
    return replace(status, decision=decision, policy=policy)


class InFlight:
    """The queries whose requirements update is in progress (Flink's
    ``pendingJobResourceRequirementsUpdates``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[str] = set()

    @contextmanager
    def claim(self, key: str, shown: str) -> Iterator[None]:
        """Hold the query's slot for the block; :class:`ConflictError` if it is taken.

        ``shown`` is how the query is named in the message (what the client asked for).
        """
        with self._lock:
            if key in self._keys:
                raise ConflictError(f"Another update to the query [{shown}] resource "
                                    "requirements is in progress.")
            self._keys.add(key)
        try:
            yield
        finally:
            with self._lock:
                self._keys.discard(key)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._keys
