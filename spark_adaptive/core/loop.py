"""The scheduler thread: one queue, one thread, all state changes.

Spark calls our listeners on its own threads (py4j callback threads, the shim's
batch thread). Those callbacks only :meth:`EventLoop.submit` work here and
return at once, so a slow or failing handler can never block or break Spark's
listener bus. Every handler and every timer then runs on this one thread, in
order, which is why no state of the scheduler needs a lock.

A handler that raises is logged with the event that caused it and the loop goes
on: one bad event must not stop scaling for the rest of the app.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable

from spark_adaptive.core.clock import Action, _Scheduled

log = logging.getLogger(__name__)

_STOP = object()


class EventLoop:
    """Real-time :class:`~spark_adaptive.core.clock.Timers` with a work queue."""

    def __init__(self, name: str = "spark-adaptive-scheduler") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._timers: list[_Scheduled] = []
        self._timer_lock = threading.Lock()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.handled = 0
        self.failed = 0
        self.lag = 0.0
        """Seconds the last submitted action waited in the queue before it ran."""

    # -- Timers ---------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def call_later(self, delay: float, action: Action) -> _Scheduled:
        item = _Scheduled(self.now() + max(0.0, delay), next(self._seq), action)
        with self._timer_lock:
            heapq.heappush(self._timers, item)
        self._queue.put(None)  # wake the loop so it re-computes its wait
        return item

    # -- work -----------------------------------------------------------------
    def submit(self, action: Action, what: str = "") -> None:
        """Run ``action`` on the loop thread. Safe from any thread; never blocks."""
        self._queue.put((action, what, time.monotonic()))

    def queued(self) -> int:
        """Actions waiting to run (approximate, as the queue's own size is)."""
        return self._queue.qsize()

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the work already queued; timers not yet due are dropped."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        if not self.in_loop():
            self._thread.join(timeout)
        self._stopped.set()

    def call_sync(self, fn: Callable[[], object], timeout: float = 30.0) -> object:
        """Run ``fn`` on the loop and return its result (for snapshots and tests)."""
        if self.in_loop() or self._thread is None:
            return fn()
        done = threading.Event()
        box: list[object] = []
        err: list[BaseException] = []

        def run() -> None:
            try:
                box.append(fn())
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                err.append(e)
            finally:
                done.set()

        self.submit(run, "call_sync")
        if not done.wait(timeout):
            raise TimeoutError(f"{self._name} did not answer within {timeout}s")
        if err:
            raise err[0]
        return box[0]

    def _next_timeout(self) -> float | None:
        with self._timer_lock:
            while self._timers and self._timers[0].cancelled:
                heapq.heappop(self._timers)
            if not self._timers:
                return None
            return max(0.0, self._timers[0].due - self.now())

    def _run_due_timers(self) -> None:
        while True:
            with self._timer_lock:
                if not self._timers or self._timers[0].due > self.now():
                    return
                item = heapq.heappop(self._timers)
            if not item.cancelled:
                self._guarded(item.action, "timer")

    def _guarded(self, action: Action, what: str) -> None:
        try:
            action()
            self.handled += 1
        except Exception:
            self.failed += 1
            log.exception("handler for %s failed; the scheduler goes on", what)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._next_timeout())
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            if isinstance(item, tuple):
                action, what, submitted = item
                self.lag = time.monotonic() - submitted
                self._guarded(action, what or "event")
            self._run_due_timers()
