"""spark-adaptive inside one driver: settings, the scheduler thread, listeners, executors.

There is one :class:`AdaptiveRuntime` per SparkContext. It is created by
activation (:func:`spark_adaptive.enable` or the zero-code startup hook) and
ends before the SparkContext stops, removing its listeners first so Spark never
calls into a Python process that is going away (which Spark would log as
"Listener threw an exception").
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.bus import EventBus, Handler
from spark_adaptive.core.events import Event
from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.options import Settings, parse_duration
from spark_adaptive.core.persistence import PersistedRequirements
from spark_adaptive.core.scheduler import AdaptiveScheduler
from spark_adaptive.core.warm_up import WarmUp
from spark_adaptive.rest.facade import RuntimeFacade
from spark_adaptive.rest.server import serve
from spark_adaptive.spark.actuator import SparkExecutorActuator
from spark_adaptive.spark.listener import (
    attach_query_listener,
    attach_spark_listener,
    live_executors,
)
from spark_adaptive.spark.shim_check import usable_shim
from spark_adaptive.spark.store import HadoopRequirementsStore
from spark_adaptive.spark.warm_up import warm_up_launcher

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_lock = threading.RLock()
_runtimes: dict[int, AdaptiveRuntime] = {}


class AdaptiveRuntime:
    """Everything spark-adaptive runs for one SparkContext."""

    def __init__(self, sc: SparkContext, settings: Settings) -> None:
        self.sc = sc
        self.settings = settings
        self.loop = EventLoop()
        self.bus = EventBus(self.loop.submit)
        self.actuator = SparkExecutorActuator(sc, shim_jar=settings.shim_jar)
        self.bus.subscribe(self.actuator.observe, "executor tracking")
        self._query_listener: Any = None
        self._query_listener_session: SparkSession | None = None
        self._closers: list[Callable[[], None]] = []
        self._closed = False
        conf = sc.getConf()
        task_cpus = int(conf.get("spark.task.cpus", "1") or 1)
        cores = conf.get("spark.executor.cores", None)
        heartbeat = parse_duration(conf.get("spark.executor.heartbeatInterval", "10s") or "10s",
                                   unit="ms")
        self.scheduler = AdaptiveScheduler(
            settings, self.actuator, self.loop, self.loop.submit, task_cpus=task_cpus,
            default_slots_per_executor=int(cores) // task_cpus if cores else None,
            heartbeat_interval=heartbeat)
        self.bus.subscribe(self.scheduler.on_event, "adaptive scheduler")
        self.warm_up: WarmUp | None = None
        if settings.warm_up_new_executors and self.actuator.supported:
            self.warm_up = WarmUp(
                self.loop,
                managing_streaming=lambda: any(not q.finished for q in self.scheduler.queries()),
                launch=warm_up_launcher(lambda: self._query_listener_session,
                                        lambda: self.actuator.slots, self.loop.submit))
            self.bus.subscribe(self.warm_up.on_event, "executor warm-up")
        from spark_adaptive.spark.streaming import StreamingManager, install_writer_hooks

        self.streaming = StreamingManager(self, self.scheduler)
        # Every subscriber above exists before the first event is posted.
        self.loop.start()
        jar = usable_shim(sc, settings)  # None after one WARNING naming what is lost
        self.listener, self.listener_path = attach_spark_listener(
            sc, self.bus.post, settings.listener, jar)
        for event in live_executors(sc):
            self.bus.post(event)
        install_writer_hooks()
        log.info("listening to Spark through the %s (%s)",
                 "JVM shim" if self.listener_path == "shim" else "pure-py4j listener",
                 jar if self.listener_path == "shim" else "no per-task filtering in the JVM")
        # Requirements accepted by the REST API live beside each query's checkpoint.
        self.persisted = PersistedRequirements(HadoopRequirementsStore(sc), settings)
        self.rest = serve(RuntimeFacade(self.loop, self.scheduler, self.persisted), settings)
        if self.rest is not None:
            self.on_close(self.rest.stop)  # closers run first: no request during shutdown
        if self.warm_up is not None:
            warm_up = self.warm_up

            def close_warm_up() -> None:
                self.loop.call_sync(warm_up.close)

            self.on_close(close_warm_up)

    # -- plumbing for the scheduler, the REST API and tests ----------------------------
    def subscribe(self, handler: Handler, name: str = "", replay_executors: bool = True
                  ) -> Callable[[], None]:
        """Add a bus subscriber; returns its unsubscribe function.

        With ``replay_executors`` the subscriber first gets an ExecutorAdded for
        every executor alive now. Both happen on the scheduler thread in one
        step, so every executor is seen exactly once: replayed or as a new event.
        """

        def do() -> Callable[[], None]:
            unsubscribe = self.bus.subscribe(handler, name)
            if replay_executors:
                for event in self.actuator.live_executor_events():
                    handler(event)
            return unsubscribe

        result = self.loop.call_sync(do)
        assert callable(result)
        return result

    def post(self, event: Event) -> None:
        self.bus.post(event)

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at shutdown, before the listeners are removed (last added, first run)."""
        self._closers.append(fn)

    def ensure_query_listener(self, spark: SparkSession) -> None:
        """Register the streaming query listener on ``spark`` once."""
        with _lock:
            if self._query_listener is None:
                self._query_listener = attach_query_listener(spark, self.bus.post)
                self._query_listener_session = spark

    # -- shutdown -------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop everything spark-adaptive runs; idempotent; never raises."""
        with _lock:
            if self._closed:
                return
            self._closed = True
            _runtimes.pop(id(self.sc), None)
        for fn in reversed(self._closers):
            _quietly(fn, "a shutdown hook")
        _quietly(self.streaming.close, "the managed queries")
        _quietly(lambda: self.loop.call_sync(self.scheduler.close), "the scheduler")
        if self._query_listener is not None and self._query_listener_session is not None:
            session, listener = self._query_listener_session, self._query_listener
            _quietly(lambda: session.streams.removeListener(listener), "the query listener")
        _quietly(self.listener.close, "the Spark listener")
        _quietly(self.actuator.close, "the executor actuator")
        _quietly(self.loop.stop, "the scheduler thread")
        log.info("spark-adaptive stopped")


def _quietly(fn: Callable[[], Any], what: str) -> None:
    try:
        fn()
    except Exception as e:  # the JVM may already be going down
        log.debug("stopping %s: %s", what, e)


def runtime_for(sc: SparkContext) -> AdaptiveRuntime | None:
    return _runtimes.get(id(sc))


def start_runtime(sc: SparkContext, settings: Settings) -> AdaptiveRuntime:
    """The runtime of ``sc``, created on first use."""
    with _lock:
        rt = _runtimes.get(id(sc))
        if rt is None:
            rt = AdaptiveRuntime(sc, settings)
            _runtimes[id(sc)] = rt
            atexit.register(rt.shutdown)
        return rt


def shutdown_all() -> None:
    for rt in list(_runtimes.values()):
        rt.shutdown()
