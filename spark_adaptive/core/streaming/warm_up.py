"""Warming up executors that join while streaming queries run.

A new executor's first tasks are slow: its JVM loads Spark SQL's classes,
compiles generated code and has not been through the JIT yet. The first
micro-batch of a stateful query restarted onto a fresh executor is much slower
than after one small SQL job has run on that executor (measurements:
docs/benchmarks.md, Warm-up of new executors). A rescale onto new executors
pays that price exactly when it matters, in the first micro-batch after the
restart.

:class:`WarmUp` decides *when* to warm up; the boundary says *how* (a small
aggregation with a shuffle, spread over every executor, in the job group
:data:`WARM_UP_JOB_GROUP`). Rules:

* only executors that join while spark-adaptive manages a streaming query
  that has not finished and that a restart can rescale are warmed: batch jobs
  warm executors by themselves, the executors present at the start warm up
  with the query's first micro-batches, and a query rescaled only live warms
  new executors with its own next micro-batch (a warm-up job would only hold
  its tasks back);
* executors of one scale-up arrive within seconds of each other: the job
  starts ``debounce`` seconds after the last of them joined, once for all;
* a warm-up is *in flight* from the first join until its jobs have ended, or for
  at most ``limit`` seconds after the first join or after the start of a later
  job (a job that hangs must not hold rescales back; executors that join while
  one runs are as cold as the first ones, and a restart onto them waits for
  their own job). A
  restart rescale onto more slots is not even begun while one is
  (:meth:`WarmUp.blocking`): the query runs on where it is, and the restart
  follows when ``on_idle`` reports the end, so that its state repartition and
  first micro-batch meet warm executors and the warm-up costs no downtime. A
  restart already under way when executors join waits for the warm-up before
  it repartitions (:meth:`WarmUp.wait`); one onto fewer slots never waits.

Every method but :meth:`WarmUp.wait` runs on the scheduler thread; the job
runs on a thread of its own (``launch``), whose ``done`` callback the boundary
posts back to the scheduler thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from spark_adaptive.core.clock import Cancellable, Timers
from spark_adaptive.core.events import Event, ExecutorAdded

log = logging.getLogger(__name__)

#: Spark job group of warm-up jobs; the batch part leaves these jobs out of its reports.
WARM_UP_JOB_GROUP = "spark-adaptive-warm-up"
#: Seconds after the last executor joined before the job starts: executors a cluster manager
#: starts together register within a fraction of a second; a straggler gets a job of its own.
DEFAULT_DEBOUNCE = 0.25
#: Longest a warm-up holds restarts back (seconds), whatever its job does.
DEFAULT_LIMIT = 20.0


class WarmUp:
    """Decides when executors that joined are warmed up; see the module docstring."""

    def __init__(
        self,
        timers: Timers,
        *,
        restartable_streaming: Callable[[], bool],
        launch: Callable[[Sequence[str], Callable[[], None]], None],
        debounce: float = DEFAULT_DEBOUNCE,
        limit: float = DEFAULT_LIMIT,
        on_idle: Callable[[], None] = lambda: None,
    ) -> None:
        """``launch(executor_ids, done)`` starts the job without blocking and has ``done``
        called on the scheduler thread once the job has ended, whatever the outcome.
        ``on_idle()`` runs on the scheduler thread when no warm-up blocks restarts any more
        (its jobs ended, or ``limit`` seconds passed since the first join or the start of a
        later job)."""
        self._timers = timers
        self._managing = restartable_streaming
        self._launch = launch
        self._debounce = debounce
        self._limit = limit
        self._on_idle = on_idle
        self._joined: list[str] = []
        self._timer: Cancellable | None = None
        self._deadline: Cancellable | None = None
        self._since: float | None = None  # the first join of the warm-up blocking restarts
        self._since_launched = False  # a job of it has started already
        self._jobs = 0
        self._idle = threading.Event()
        self._idle.set()
        self._released = threading.Event()  # set while no warm-up blocks restarts
        self._released.set()
        self.launched: list[tuple[str, ...]] = []

    def on_event(self, event: Event) -> None:
        """Bus subscriber: an executor that joins while a streaming query that a restart can
        rescale is managed."""
        if not isinstance(event, ExecutorAdded) or not self._managing():
            return
        self._joined.append(event.executor_id)
        self._idle.clear()
        if self._since is None:
            self._since = self._timers.now()
            self._since_launched = False
            self._released.clear()
            self._arm_deadline()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timers.call_later(self._debounce, self._start)

    def _start(self) -> None:
        self._timer = None
        ids, self._joined = tuple(self._joined), []
        if not ids:
            return
        self._jobs += 1
        self.launched.append(ids)
        if self._since is not None and self._since_launched:
            self._arm_deadline()  # these executors are as cold as the first ones were
        self._since_launched = True
        log.info("warming up executor(s) %s before a rescale uses them", ", ".join(ids))
        try:
            self._launch(ids, self.job_ended)
        except Exception:
            log.exception("starting the warm-up of executor(s) %s failed", ", ".join(ids))
            self.job_ended()

    def _arm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self._timers.call_later(self._limit, self._expired)

    def job_ended(self) -> None:
        """The warm-up job ended (scheduler thread)."""
        self._jobs = max(0, self._jobs - 1)
        if self._jobs == 0 and self._timer is None and not self._joined:
            self._idle.set()
            self._unblock()

    def _expired(self) -> None:
        self._deadline = None
        if self.in_flight:
            log.info("executor warm-up still running after %gs; rescales no longer wait for it",
                     self._limit)
        self._unblock()

    def _unblock(self) -> None:
        was_blocking = self._since is not None
        self._since = None
        self._released.set()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if was_blocking:
            self._on_idle()

    @property
    def in_flight(self) -> bool:
        return not self._idle.is_set()

    @property
    def blocking(self) -> bool:
        """A warm-up is in flight and has not yet run for ``limit`` seconds: restarts onto
        more slots wait for it."""
        return self.in_flight and self._since is not None

    def wait(self, timeout: float) -> bool:
        """Block (not on the scheduler thread) while a warm-up blocks restarts: until its
        jobs have ended or its ``limit`` has passed, at most ``timeout`` seconds; True if
        none blocks."""
        return self._released.wait(timeout)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._since = None
        self._joined.clear()
        self._idle.set()
        self._released.set()
