"""Executor control through Spark's ExecutorAllocationClient calls.

``SparkContext.requestTotalExecutors`` declares how many executors the
application wants; ``SparkContext.killExecutors`` releases chosen ones (and
lowers the target by as many). Both are developer APIs every cluster manager
backend implements (standalone, YARN, Kubernetes: ``CoarseGrainedSchedulerBackend``),
which is why nothing here is specific to one cluster manager. ``local[*]`` has
no such backend: :meth:`SparkExecutorActuator.supported` is then false and the
calls are skipped with one warning.

The actuator decides nothing: the
:class:`~spark_adaptive.core.executors.reconciler.Reconciler` tells it the total and the
executors to release (in standalone mode lowering the target never ends an executor, so
the reconciler names the newest ones beyond it).

The py4j calls run on a worker thread of their own, so the scheduler thread
never waits on an RPC to the cluster manager. Each declaration is one command:
its releases, then the total; and the total goes after every release, as
Spark's ``killExecutors`` lowers its target by the executors it kills. Commands
coalesce: one that finds a newer one queued behind it leaves the total to it, so
when several totals are declared quickly only the newest is sent. A call that
raises (py4j, the cluster manager) is one ERROR line saying what was not done;
nothing waits on it, so the scheduler and the queries go on. A release that
Spark refuses or that raises is reported to the
:meth:`SparkExecutorActuator.on_release_refused` callback (the runtime hands it
to the reconciler, which counts those executors again, or kills one found hung
again with its next total).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.ports import ExecutorRelease
from spark_adaptive.spark.jvm import (
    empty_scala_map,
    error_text,
    jvm,
    new_shim_object,
    scala_string_seq,
    shim_jar_path,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)


class SparkExecutorActuator:
    """:class:`spark_adaptive.core.ports.ExecutorActuator` for a live SparkContext."""

    def __init__(self, sc: SparkContext, synchronous: bool = False, shim_jar: str = "") -> None:
        self._sc = sc
        self.shim_jar = shim_jar
        self._control: Any = None
        self._synchronous = synchronous
        self._commands: deque[tuple[str, Any]] = deque()
        self._queued = threading.Condition()
        self._total: int | None = None  # the last total declared: sent after every release
        self._thread: threading.Thread | None = None
        self._warned = False
        self.supported = self._check_supported()
        self.requested: list[int] = []
        self.killed: list[str] = []
        self._on_refused: Callable[[list[str], str], None] | None = None

    def on_release_refused(self, callback: Callable[[list[str], str], None]) -> None:
        """``callback(executor_ids, why)`` hears of every release Spark refused or that
        failed (from the actuator's thread): those executors are alive and stay the app's,
        and the reconciler, which stopped counting them when they were returned as released
        (:meth:`request_total_executors`), counts them again."""
        self._on_refused = callback

    def _check_supported(self) -> bool:
        try:
            backend = self._sc._jsc.sc().schedulerBackend()
            client = "org.apache.spark.ExecutorAllocationClient"
            jcls = jvm(self._sc).java.lang.Class.forName(client)
            return bool(jcls.isInstance(backend))
        except Exception:  # pragma: no cover - depends on the master
            return False

    def master(self) -> str:
        return str(self._sc.master)

    # -- the port -----------------------------------------------------------------
    def request_total_executors(self, total: int,
                                release: Sequence[ExecutorRelease] = ()) -> list[str]:
        """Release ``release``, then declare ``total`` executors; returns the executors whose
        release is sent (none where the master cannot release any)."""
        self._total = total
        groups: dict[str, list[str]] = {}
        for r in release:
            groups.setdefault(r.reason, []).append(r.executor_id)
        self._enqueue("declare", list(groups.items()))
        return [e for ids in groups.values() for e in ids] if self.supported else []

    def release_hung_executor(self, executor_id: str, reason: str) -> None:
        """Kill a silent executor and have the driver drop it at once (through the shim),
        then declare the total again: Spark's ``killExecutors`` also lowers the app's
        executor target by the executors it kills, so without it no replacement would
        ever be launched."""
        self._enqueue("hung", (executor_id, reason))

    # -- execution ----------------------------------------------------------------
    def _enqueue(self, what: str, arg: Any) -> None:
        if not self.supported:
            if not self._warned:
                self._warned = True
                log.warning("master %s cannot add or remove executors "
                            "(no ExecutorAllocationClient); executor requests are skipped",
                            self.master())
            return
        if self._synchronous:
            self._run(what, arg, superseded=False)
            return
        with self._queued:
            self._commands.append((what, arg))
            self._queued.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="spark-adaptive-actuator",
                                            daemon=True)
            self._thread.start()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every request and release queued before this call has been sent to
        Spark; False if that took longer than ``timeout`` seconds."""
        if self._synchronous or self._thread is None:
            return True
        sent = threading.Event()
        with self._queued:
            self._commands.append(("mark", sent))
            self._queued.notify()
        return sent.wait(timeout)

    def _loop(self) -> None:
        while True:
            with self._queued:
                while not self._commands:
                    self._queued.wait()
                what, arg = self._commands.popleft()
                # A declaration queued behind this one (before any drain's mark, whose
                # caller waits for what was queued before it) sends the total after it.
                superseded = any(w in ("declare", "hung") for w, _ in
                                 itertools.takewhile(lambda c: c[0] != "mark", self._commands))
            if what == "stop":
                return
            if what == "mark":
                arg.set()
                continue
            self._run(what, arg, superseded)

    def _run(self, what: str, arg: Any, superseded: bool) -> None:
        """Carry out one command: its kills (a hung executor's also declared lost to the
        driver), then the total declared last, unless a newer command sends it."""
        if what == "hung":
            executor_id, reason = arg
            self._call(f"releasing executor(s) {executor_id}",
                       lambda: self._kill([executor_id], reason), [executor_id])
            self._call(f"declaring executor {executor_id} lost to the driver",
                       lambda: self._declare_lost(executor_id, reason))
        else:
            for reason, ids in arg:
                self._call(f"releasing executor(s) {', '.join(ids)}",
                           functools.partial(self._kill, ids, reason), ids)
        total = self._total
        if total is not None and not superseded:
            self._call(f"requesting {total} executor(s) in total",
                       lambda: self._request(total))

    def _call(self, doing: str, call: Callable[[], bool],
              releasing: Sequence[str] = ()) -> bool:
        """One call to Spark; what it answers. One that raises (py4j, the cluster manager)
        is one ERROR line saying what was not done (it is not retried: the reconciler's
        next declaration is sent as usual, with the kill of a hung executor again); the
        scheduler and the queries go on."""
        try:
            return call()
        except Exception as e:
            log.error("%s failed (%s); not done, and the queries run on with the executors "
                      "they have", doing, error_text(e), exc_info=True)
            if releasing:
                self._kept(releasing, f"killExecutors failed: {error_text(e)}")
            return False

    def _request(self, total: int) -> bool:
        ok = self._sc._jsc.sc().requestTotalExecutors(int(total), 0, empty_scala_map(self._sc))
        _remember(self.requested, int(total))
        log.info("requested %d executor(s) in total (accepted: %s)", total, ok)
        return bool(ok)

    def _kill(self, ids: Sequence[str], reason: str) -> bool:
        """Release ``ids``; whether Spark did (a refusal is reported back)."""
        if not self._sc._jsc.sc().killExecutors(scala_string_seq(self._sc, list(ids))):
            log.warning("releasing executor(s) %s (%s) was refused by the cluster manager; "
                        "they count as the app's again", ", ".join(ids), reason)
            self._kept(ids, "the cluster manager refused")
            return False
        for executor_id in ids:
            _remember(self.killed, executor_id)
        log.info("released executor(s) %s: %s", ", ".join(ids), reason)
        return True

    def _declare_lost(self, executor_id: str, reason: str) -> bool:
        jar = shim_jar_path(self.shim_jar)
        if jar is None:
            log.info("executor %s is dropped when its process ends (the JVM shim, which "
                     "drops it at once, is not installed)", executor_id)
            return False
        if self._control is None:
            self._control = new_shim_object(self._sc, "ExecutorControl", jar)
        lost = bool(self._control.declareLost(self._sc._jsc.sc(), executor_id, reason))
        if lost:
            log.info("executor %s declared lost to the driver: %s", executor_id, reason)
        return lost

    def _kept(self, ids: Sequence[str], why: str) -> None:
        """Executors whose release failed stay the app's: the :meth:`on_release_refused`
        callback is told, so the reconciler counts them again (or, for one killed as hung,
        kills it again with the next total)."""
        callback = self._on_refused
        if callback is None:
            return
        try:
            callback(list(ids), why)
        except Exception:  # the callback's bug must not stop the actuator's thread
            log.exception("reporting the refused release of executor(s) %s failed",
                          ", ".join(ids))

    def close(self) -> None:
        if self._thread is not None:
            with self._queued:
                self._commands.append(("stop", None))
                self._queued.notify()
            self._thread.join(5)
            self._thread = None


#: The newest totals sent and executors released that the actuator keeps (for tests and
#: diagnostics): an app that runs for weeks must not grow them without end.
_REMEMBERED = 1000


def _remember(kept: list[Any], value: Any) -> None:
    kept.append(value)
    if len(kept) > _REMEMBERED:
        del kept[: len(kept) - _REMEMBERED]
