"""Record spark-adaptive's events and wait for the ones a test expects."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from spark_adaptive.core.events import Event

E = TypeVar("E", bound=Event)


class EventRecorder:
    """A bus subscriber that keeps every event; :meth:`wait_for` blocks until one matches."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cond = threading.Condition()

    def __call__(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def of(self, kind: type[E]) -> list[E]:
        with self._cond:
            return [e for e in self.events if isinstance(e, kind)]

    def wait_for(self, kind: type[E], where: Callable[[E], bool] = lambda e: True,
                 timeout: float = 60.0, since: int = 0) -> E:
        """The first event of ``kind`` (from index ``since``) matching ``where``.

        ``where`` runs without the recorder's lock held, so it may ask the
        scheduler thread (which delivers events here) for anything.
        """
        deadline = time.monotonic() + timeout
        checked = since
        while True:
            with self._cond:
                fresh = self.events[checked:]
            for e in fresh:
                if isinstance(e, kind) and where(e):
                    return e
            checked += len(fresh)
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [type(e).__name__ for e in self.events[since:]]
                raise TimeoutError(f"no {kind.__name__} matching within {timeout}s; "
                                   f"saw {seen[-30:]}")
            with self._cond:
                if len(self.events) == checked:
                    self._cond.wait(left)

    def wait_until(self, check: Callable[[], object], timeout: float = 60.0,
                   what: str = "the condition") -> object:
        """Wait until ``check()`` is truthy; it is tried again at each event, at least twice
        a second. Returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            with self._cond:
                self._cond.wait(min(left, 0.5))

    def mark(self) -> int:
        """An index to pass as ``since`` to wait only for later events."""
        with self._cond:
            return len(self.events)
