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

LONGEST_WAIT = 3600.0
"""Seconds the loop waits for work at the most before it looks at its timers again."""


class _SyncCall:
    """One :meth:`EventLoop.call_sync`: pending until the loop starts it or the caller gives
    up, whichever comes first. The two moves out of pending are made under one lock, so
    exactly one of them happens: the call runs, or it is cancelled and never runs."""

    _PENDING, _RUNNING, _CANCELLED = "pending", "running", "cancelled"

    def __init__(self, fn: Callable[[], object]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._state = self._PENDING
        self._done = threading.Event()
        self._value: object = None
        self._error: BaseException | None = None

    def run(self) -> None:
        """On the loop thread: run ``fn`` unless the caller gave up on it."""
        with self._lock:
            if self._state != self._PENDING:
                return
            self._state = self._RUNNING
        try:
            self._value = self._fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            self._error = e
        finally:
            self._done.set()

    def result(self, timeout: float, loop_name: str) -> object:
        if not self._done.wait(timeout):
            with self._lock:
                if self._state == self._PENDING:
                    self._state = self._CANCELLED
                    raise TimeoutError(f"{loop_name} did not start the call within "
                                       f"{timeout}s; it was withdrawn and will not run")
            self._done.wait()  # started in time: its outcome is the answer
        if self._error is not None:
            raise self._error
        return self._value


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
        """Run ``fn`` on the loop and return its result (or raise what it raised).

        ``TimeoutError`` if the loop has not started ``fn`` within ``timeout`` seconds, and
        then ``fn`` never runs: the call is taken back from the queue in the same step that
        gives up, so that a caller told "no answer" can rely on nothing having happened.
        Once ``fn`` has started, the call waits for it to finish and answers with its real
        result, however long that takes (giving up then would hide a change it made)."""
        if self.in_loop() or self._thread is None:
            return fn()
        call = _SyncCall(fn)
        self.submit(call.run, "call_sync")
        return call.result(timeout, self._name)

    def _next_timeout(self) -> float | None:
        with self._timer_lock:
            while self._timers and self._timers[0].cancelled:
                heapq.heappop(self._timers)
            if not self._timers:
                return None
            # A timer far ahead (a duration key of years) is waited for in steps: the
            # queue's wait takes no timeout past the platform's time_t.
            return min(max(0.0, self._timers[0].due - self.now()), LONGEST_WAIT)

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
