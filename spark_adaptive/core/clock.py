"""Time and timers, injected everywhere in the core.

Contract
--------
Everything in :mod:`spark_adaptive.core` that waits, delays or measures time does
so through a :class:`Timers` object handed to it. Nothing in the core calls
``time.time()``, ``time.sleep()`` or ``threading.Timer`` itself. That is what
lets every state, backoff and stabilization rule be unit-tested on virtual time.

Two implementations exist:

* :class:`VirtualTime` (here): time moves only when a test calls
  :meth:`VirtualTime.advance`; due actions then run in time order, on the
  caller's thread. Actions scheduled while advancing run in the same call if
  they fall due before the new time (Flink's ``passTime`` semantics).
* :class:`spark_adaptive.core.loop.EventLoop`: the real thing, one thread that
  runs every event handler and every timer of the scheduler.

All times are seconds as ``float``. ``now()`` is monotonic; :meth:`Timers.wall`
gives the epoch time used in histories and REST answers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

Action = Callable[[], None]


class Cancellable(Protocol):
    """A scheduled action that can be called off. Cancelling twice is harmless."""

    def cancel(self) -> None: ...

    @property
    def cancelled(self) -> bool: ...


class Timers(Protocol):
    """The time source and timer service the core is given."""

    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wall(self) -> float:
        """Epoch seconds, for records shown to people."""
        ...

    def call_later(self, delay: float, action: Action) -> Cancellable:
        """Run ``action`` once, ``delay`` seconds from now, on the scheduler's thread."""
        ...


@dataclass(order=True)
class _Scheduled:
    due: float
    seq: int
    action: Action = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class VirtualTime:
    """Timers on virtual time, for tests and simulations.

    ``wall()`` is ``epoch + now()`` so records stay readable.
    """

    def __init__(self, start: float = 0.0, epoch: float = 1_800_000_000.0) -> None:
        self._now = start
        self._epoch = epoch
        self._queue: list[_Scheduled] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._epoch + self._now

    def call_later(self, delay: float, action: Action) -> _Scheduled:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        item = _Scheduled(self._now + delay, next(self._seq), action)
        heapq.heappush(self._queue, item)
        return item

    def advance(self, seconds: float) -> None:
        """Move time forward, running every action that falls due, in order."""
        if seconds < 0:
            raise ValueError(f"time cannot go backwards ({seconds})")
        target = self._now + seconds
        while self._queue and self._queue[0].due <= target:
            item = heapq.heappop(self._queue)
            if item.cancelled:
                continue
            self._now = max(self._now, item.due)
            item.action()
        self._now = target

    def run_pending(self) -> None:
        """Run actions already due (``delay=0`` ones) without moving time."""
        self.advance(0.0)

    def pending(self) -> list[float]:
        """Due times of the actions still scheduled, earliest first."""
        return sorted(i.due for i in self._queue if not i.cancelled)
