"""One bus for every event, consumed on the scheduler thread.

The boundary :meth:`EventBus.post`\\ s events from Spark's threads; the bus
hands each to the :class:`~spark_adaptive.core.loop.EventLoop` and there calls
every subscriber in order. A subscriber that raises is logged with the event
it failed on and the others still run.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from spark_adaptive.core.events import Event

log = logging.getLogger(__name__)

Handler = Callable[[Event], None]


class EventBus:
    def __init__(self, submit: Callable[[Callable[[], None], str], None]) -> None:
        """``submit(action, what)`` runs ``action`` on the scheduler thread."""
        self._submit = submit
        self._handlers: list[tuple[str, Handler]] = []
        self.counts: Counter[str] = Counter()
        self.handler_failures = 0

    def subscribe(self, handler: Handler, name: str = "") -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        entry = (name or getattr(handler, "__qualname__", repr(handler)), handler)
        self._handlers = [*self._handlers, entry]

        def unsubscribe() -> None:
            self._handlers = [h for h in self._handlers if h is not entry]

        return unsubscribe

    def post(self, event: Event) -> None:
        """Queue ``event``; safe from any thread, never blocks, never raises."""
        self._submit(lambda: self.publish(event), type(event).__name__)

    def publish(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber now (on the scheduler thread)."""
        self.counts[type(event).__name__] += 1
        for name, handler in self._handlers:
            try:
                handler(event)
            except Exception:
                self.handler_failures += 1
                log.exception("%s failed on %r; the other handlers still ran",
                              name, event)
