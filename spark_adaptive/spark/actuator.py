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
never waits on an RPC to the cluster manager. Requests coalesce: when several
totals are declared quickly, only the newest is sent; and the declared total is
sent again after every release, as Spark's ``killExecutors`` lowers its target
by the executors it kills. A call that raises (py4j, the cluster manager) is one
ERROR line saying what was not done; nothing waits on it, so the scheduler and
the queries go on. A release that Spark refuses or that raises is reported to
the :meth:`SparkExecutorActuator.on_release_refused` callback (the runtime hands
it to the scheduler, which counts those executors again), except that of an
executor killed as hung, which is no longer counted and whose kill is sent again
at the next declaration.
"""

from __future__ import annotations

import logging
import queue
import threading
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
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._latest_total: int | None = None  # the total to send, None once sent
        self._declared_total: int | None = None  # the last total the scheduler declared
        self._lock = threading.Lock()
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
        # The total first: a kill sent from here re-sends the declared total once done.
        with self._lock:
            self._latest_total = self._declared_total = total
        sent: list[str] = []
        if self.supported:  # unsupported: no kill is sent, none is released
            by_reason: dict[str, list[str]] = {}
            for r in release:
                by_reason.setdefault(r.reason, []).append(r.executor_id)
            for reason, ids in by_reason.items():
                self.kill_executors(ids, reason)
                sent += ids
        self._enqueue("request", None)
        return sent

    def release_hung_executor(self, executor_id: str, reason: str) -> None:
        """Kill a silent executor and have the driver drop it at once (through the shim),
        then declare the total again: Spark's ``killExecutors`` also lowers the app's
        executor target by the executors it kills, so without it no replacement would
        ever be launched."""
        self.kill_executors([executor_id], reason)
        self._enqueue("declare-lost", (executor_id, reason))
        if self._declared_total is not None:
            with self._lock:
                self._latest_total = self._declared_total
            self._enqueue("request", None)

    def kill_executors(self, executor_ids: Sequence[str], reason: str) -> None:
        if executor_ids:
            self._enqueue("kill", (list(executor_ids), reason))

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
            self._run(what, arg)
            return
        self._queue.put((what, arg))
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="spark-adaptive-actuator",
                                            daemon=True)
            self._thread.start()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every request and release queued before this call has been sent to
        Spark; False if that took longer than ``timeout`` seconds. Releasing surplus
        executors is queued before the request that declares the new total, so executors
        may be gone before that request has been sent."""
        if self._synchronous or self._thread is None:
            return True
        sent = threading.Event()
        self._queue.put(("mark", sent))
        return sent.wait(timeout)

    def _loop(self) -> None:
        while True:
            what, arg = self._queue.get()
            if what == "stop":
                return
            if what == "mark":
                arg.set()
                continue
            self._run(what, arg)

    def _run(self, what: str, arg: Any) -> None:
        """Send one call to Spark. A call that raises (py4j, the cluster manager) is one
        ERROR line saying what was not done (it is not retried: the scheduler's next
        declaration is sent as usual, with the kill of a hung executor again); the
        scheduler and the queries go on."""
        jsc = self._sc._jsc.sc()
        doing = what
        try:
            if what == "request":
                with self._lock:
                    total, self._latest_total = self._latest_total, None
                if total is None:
                    return  # coalesced into a newer request already sent
                doing = f"requesting {total} executor(s) in total"
                ok = jsc.requestTotalExecutors(int(total), 0, empty_scala_map(self._sc))
                self.requested.append(int(total))
                log.info("requested %d executor(s) in total (accepted: %s)",
                         total, ok)
            elif what == "declare-lost":
                executor_id, reason = arg
                doing = f"declaring executor {executor_id} lost to the driver"
                jar = shim_jar_path(self.shim_jar)
                if jar is None:
                    log.info("executor %s is dropped when its process ends (the JVM shim, "
                             "which drops it at once, is not installed)", executor_id)
                    return
                if self._control is None:
                    self._control = new_shim_object(self._sc, "ExecutorControl", jar)
                if self._control.declareLost(self._sc._jsc.sc(), executor_id, reason):
                    log.info("executor %s declared lost to the driver: %s", executor_id, reason)
            elif what == "kill":
                ids, reason = arg
                doing = f"releasing executor(s) {', '.join(ids)}"
                ok = jsc.killExecutors(scala_string_seq(self._sc, ids))
                if not ok:
                    log.warning("releasing executor(s) %s (%s) was refused by the cluster "
                                "manager; they count as the app's again", ", ".join(ids),
                                reason)
                    self._kept(ids, "the cluster manager refused")
                    return
                self.killed.extend(ids)
                log.info("released executor(s) %s: %s", ", ".join(ids), reason)
                # Spark's killExecutors also lowers its executor target by the executors
                # it kills: the declared total goes again after every kill, even when a
                # request queued before the kill has already sent it.
                with self._lock:
                    if self._declared_total is not None:
                        self._latest_total = self._declared_total
                self._run("request", None)
        except Exception as e:
            log.error("%s failed (%s); not done, and the queries run on with the executors "
                      "they have", doing, error_text(e), exc_info=True)
            if what == "kill":
                self._kept(arg[0], f"killExecutors failed: {error_text(e)}")

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
            self._queue.put(("stop", None))
            self._thread.join(5)
            self._thread = None
