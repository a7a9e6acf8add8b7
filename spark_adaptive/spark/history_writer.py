"""Saves the queries' rescale histories beside their checkpoints, off the scheduler thread.

The scheduler thread decides every rescale of every query: it must never wait
for HDFS or an object store. :class:`BackgroundHistoryWriter` implements
:class:`~spark_adaptive.core.streaming.history_store.HistoryWriter` with one
small daemon thread of its own: ``write`` only files the history under its
checkpoint and returns. Only the newest history of a checkpoint matters (each
holds everything before it), so one not yet saved is replaced by a newer one
rather than queued behind it: however slow the store, at most one history per
query waits, and the thread saves each checkpoint's newest.

A save that fails logs one WARNING naming the file and why, and nothing else
happens: the query goes on, and its next change is saved afresh. At shutdown
:meth:`~BackgroundHistoryWriter.close` saves what waits, for a bounded time,
while the JVM is still there.
"""

from __future__ import annotations

import logging
import threading

from spark_adaptive.core.streaming.history import SavedHistory
from spark_adaptive.core.streaming.history_store import HistoryStore, history_file, why

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 10.0
"""Seconds :meth:`BackgroundHistoryWriter.close` waits for the histories still waiting."""


class BackgroundHistoryWriter:
    """Saves each checkpoint's newest history through ``store``, on its own thread (started
    at the first write)."""

    def __init__(self, store: HistoryStore, name: str = "spark-adaptive-history-writer") -> None:
        self._store = store
        self._name = name
        self._cond = threading.Condition()
        self._waiting: dict[str, tuple[str, SavedHistory]] = {}
        self._saving: str | None = None
        """The checkpoint whose history is being saved now."""
        self._closed = False
        self._thread: threading.Thread | None = None

    def write(self, checkpoint: str, label: str, history: SavedHistory) -> None:
        """File ``history`` to be saved beside ``checkpoint``; returns at once (any thread)."""
        with self._cond:
            if self._closed:
                log.debug("query %s: the history writer is closed; %s is not updated", label,
                          history_file(checkpoint))
                return
            self._waiting[checkpoint] = (label, history)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every history handed over so far is saved (or failed); False if that
        took longer than ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and self._saving is None,
                                       timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Save what waits (for at most ``timeout`` seconds), then stop; later writes are
        dropped. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return
        thread.join(timeout)
        with self._cond:
            left = sorted({*self._waiting, *([self._saving] if self._saving else [])})
        if left:
            log.warning("%s not saved within %gs of shutdown: the store did not answer in time",
                        ", ".join(history_file(c) for c in left), timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._waiting) or self._closed)
                if not self._waiting:
                    return  # closed, and nothing waits
                checkpoint = next(iter(self._waiting))
                label, history = self._waiting.pop(checkpoint)
                self._saving = checkpoint
            try:
                self._store.save(checkpoint, history)
                log.debug("query %s: rescale history saved to %s", label,
                          history_file(checkpoint))
            except Exception as e:  # the store's failure is reported; the query goes on
                log.warning("query %s: its rescale history was not saved (%s); the query goes "
                            "on", label, why(e, checkpoint))
            finally:
                with self._cond:
                    self._saving = None
                    self._cond.notify_all()
