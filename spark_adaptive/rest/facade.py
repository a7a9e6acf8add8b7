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
scheduler's exceptions here and raises ``TimeoutError`` if the scheduler does
not answer). Persisting is the exception: it is slow I/O (HDFS, S3) and runs
on the request thread, so the scheduler never waits for a file system.

:class:`InFlight` keeps Flink's rule that only one requirements update of a
query is in progress at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus, Autoscaling
from spark_adaptive.core.streaming.history import Counters, RescaleRecord
from spark_adaptive.core.streaming.persistence import PersistedRequirements, Undo
from spark_adaptive.core.streaming.query import QuerySnapshot
from spark_adaptive.core.streaming.requirements import ResourceRequirements
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
        """The query's autoscaler, None when the autoscaler is off."""
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
                 autoscaling: Autoscaling | None = None) -> None:
        self._loop = loop
        self._sched = scheduler
        self._persisted = persisted
        self._timeout = timeout
        self._autoscaling = autoscaling

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
        return self._call(lambda: autoscaling.status(self._sched.query(key)))

    def persist_requirements(self, key: str, requirements: ResourceRequirements) -> Undo | None:
        return self._persisted.persist(key, requirements)

    def apply_requirements(self, key: str, requirements: ResourceRequirements) -> None:
        # The scheduler checks again, so a query that finished in the meantime is still
        # refused (ConflictError).
        self._call(lambda: self._sched.apply_requirements(key, requirements))


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
