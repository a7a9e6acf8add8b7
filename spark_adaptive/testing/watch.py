"""A submitted app watched once a second: its executor processes, and its first query as
spark-adaptive's REST API shows it.

    watch = AppWatch(cluster, app, autoscaler=True)
    watch.start()
    ...                       # the app runs
    watch.stop()
    watch.samples, watch.rescales, watch.autoscaler

The autoscaler benchmark and the autoscaler's integration tests read their runs through
it. A sample is taken whether or not the REST API answers (an app without
spark-adaptive, or one not up yet or ended): then only its executors are known.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.submit import SubmittedApp


@dataclass
class Seen:
    """One second of an app."""

    time: float
    """``time.time()`` of the sample."""
    executors: int
    """Executor processes the cluster runs for its apps."""
    slots: int | None = None
    parallelism: int | None = None
    state: str | None = None
    """The query's, None while the REST API did not answer."""


class AppWatch(threading.Thread):
    """Samples ``app`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, cluster: LocalCluster, app: SubmittedApp, *, rest: bool = True,
                 autoscaler: bool = False, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.cluster, self.app = cluster, app
        self.rest, self.with_autoscaler, self.interval = rest, autoscaler, interval
        self.samples: list[Seen] = []
        self.rescales: list[dict[str, Any]] = []
        """The query's rescale history, as last read."""
        self.autoscaler: list[dict[str, Any]] = []
        """``GET /queries/{id}/autoscaler`` of every sample (with ``autoscaler=True``)."""
        self.stopped = threading.Event()
        self.created = time.time()
        self._answered = False

    def since(self, seen: Seen) -> float:
        """Seconds from the watch's creation to ``seen``."""
        return seen.time - self.created

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            seen = Seen(time.time(), len(self.cluster.executors()))
            if self.rest:
                self._read(seen)
            self.samples.append(seen)

    def _read(self, seen: Seen) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            if not self._answered:  # the log says where the server went; read it until then
                self.app.learn_rest_url()
            q = self.app.queries()[0]
            self._answered = True
            seen.slots, seen.parallelism, seen.state = (
                q.get("slots"), q.get("parallelism"), q.get("state"))
            self.rescales = self.app.rescales(q["id"])["rescales"]
            if self.with_autoscaler:
                self.autoscaler.append(self.app.get(f"/queries/{q['id']}/autoscaler"))

    def stop(self) -> None:
        self.stopped.set()
        if self.is_alive():
            self.join(5)
