"""spark-adaptive inside one driver: settings, the scheduler thread, listeners, executors.

There is one :class:`AdaptiveRuntime` per SparkContext. It is created by
activation (:func:`spark_adaptive.enable` or the zero-code startup hook) and
ends before the SparkContext stops, removing its listeners first so Spark never
calls into a Python process that is going away (which Spark would log as
"Listener threw an exception"). A SparkContext that Spark stops itself (the
cluster manager ended the app, a fatal scheduler error) ends it too: on Spark's
application end, on a thread of its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.bus import EventBus, Handler
from spark_adaptive.core.clock import Cancellable
from spark_adaptive.core.events import Event
from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.options import parse_duration
from spark_adaptive.core.streaming.autoscaling import Autoscaling
from spark_adaptive.core.streaming.history_store import HistoryStore
from spark_adaptive.core.streaming.persistence import PersistedRequirements
from spark_adaptive.core.streaming.samples import Sampler
from spark_adaptive.core.streaming.scheduler import AdaptiveScheduler
from spark_adaptive.core.streaming.warm_up import WarmUp
from spark_adaptive.rest.facade import AppFigures, RuntimeFacade
from spark_adaptive.rest.metrics import flat_figures
from spark_adaptive.rest.server import serve
from spark_adaptive.settings import Settings
from spark_adaptive.spark.actuator import SparkExecutorActuator
from spark_adaptive.spark.checkpoint import CheckpointOffsetLog
from spark_adaptive.spark.history_writer import BackgroundHistoryWriter
from spark_adaptive.spark.listener import (
    Py4jListener,
    ShimListener,
    attach_spark_listener,
    live_executors,
)
from spark_adaptive.spark.metrics_source import PUSH_INTERVAL, SparkMetricsSource
from spark_adaptive.spark.shim_check import usable_shim
from spark_adaptive.spark.store import HadoopHistoryStore, HadoopRequirementsStore
from spark_adaptive.spark.streaming import StreamingManager, install_writer_hooks
from spark_adaptive.spark.warm_up import warm_up_launcher

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_lock = threading.RLock()
_runtimes: dict[int, AdaptiveRuntime] = {}
_exit_hook_registered = False


class AdaptiveRuntime:
    """Everything spark-adaptive runs for one SparkContext."""

    def __init__(self, sc: SparkContext, settings: Settings, at_start: bool = False) -> None:
        """``at_start``: ``sc`` has just started and no code of the app has run on it (the
        zero-code activation), so its executors may be held to ``autoscaler.initial-slots``
        until its first query; not for an ``enable()`` that may come after cached data."""
        self.sc = sc
        self.settings = settings
        self.loop = EventLoop()
        self.bus = EventBus(self.loop.submit)
        self.actuator = SparkExecutorActuator(sc, shim_jar=settings.shim_jar)
        self._session: SparkSession | None = None
        self._closers: list[Callable[[], None]] = []
        self._closed = False
        conf = sc._conf
        task_cpus = int(conf.get("spark.task.cpus", "1") or 1)
        cores = conf.get("spark.executor.cores", None)
        heartbeat = parse_duration(conf.get("spark.executor.heartbeatInterval", "10s") or "10s",
                                   unit="ms")
        self.local_slots = local_slots(str(sc.master), task_cpus)
        """Task slots of a local-mode app (a fixed pool), None on a cluster."""
        # Each query's rescale history lives beside its checkpoint, saved off this thread.
        self.history_store: HistoryStore = HadoopHistoryStore(sc)
        self.history_writer = BackgroundHistoryWriter(self.history_store)
        self.scheduler = AdaptiveScheduler(
            settings.scheduler, self.actuator, self.loop, self.loop.submit, task_cpus=task_cpus,
            default_slots_per_executor=int(cores) // task_cpus if cores else None,
            heartbeat_interval=heartbeat, fixed_slots=self.local_slots, restart=settings.restart,
            autoscaled=settings.autoscaler.acting, history_writer=self.history_writer,
            warming=lambda: self.warm_up is not None and self.warm_up.blocking,
            idle_executors=initial_executors(str(sc.master),
                                             conf.get("spark.executor.instances", None)),
            start_slots=settings.autoscaler.start_slots
            if at_start and settings.autoscaler.acting else None)
        # A release Spark refuses (or that fails) is reported back: the executor counts again.
        self.actuator.on_release_refused(
            lambda ids, why: self.loop.submit(
                lambda: self.scheduler.release_refused(ids, why), "refused executor release"))
        self.warm_up: WarmUp | None = None
        if settings.scheduler.warm_up_new_executors and self.actuator.supported:
            self.warm_up = WarmUp(
                self.loop,
                restartable_streaming=lambda: any(
                    not q.finished and q.repartition_support().possible
                    for q in self.scheduler.queries()),
                launch=warm_up_launcher(lambda: self._session,
                                        lambda: self.scheduler.resources.live_slots,
                                        self.loop.submit, self._warm_up_root),
                on_idle=self.scheduler.warm_up_ended)
            # Before the scheduler: an executor that joins is already being warmed up when
            # the scheduler considers a restart onto it.
            self.bus.subscribe(self.warm_up.on_event, "executor warm-up")
        self.bus.subscribe(self.scheduler.on_event, "adaptive scheduler")
        self.autoscaling: Autoscaling | None = None
        self.offset_log: CheckpointOffsetLog | None = None
        if settings.autoscaler.enabled and self.local_slots is not None:
            log.warning("spark.adaptive.autoscaler.enabled=true has no effect with master %s: "
                        "local mode runs on a fixed set of %d task slots, with no executors "
                        "to take or give back", sc.master, self.local_slots)
        elif settings.autoscaler.enabled:
            self.offset_log = CheckpointOffsetLog(sc)
            self.autoscaling = Autoscaling(
                settings.autoscaler, self.scheduler, self.loop,
                resource_wait=settings.scheduler.executing_stabilization,
                offsets=self.offset_log, post=self.loop.submit)
            self.bus.subscribe(self.autoscaling.on_event, "autoscaler")
        self.streaming = StreamingManager(self, self.scheduler)
        self.listener: ShimListener | Py4jListener | None = None
        # Every subscriber above exists before the first event is posted.
        self.loop.start()
        try:
            self._start(sc, settings)
        except BaseException:
            # Nothing started so far outlives a start that fails: the scheduler thread, the
            # listener, the REST server (py4j's callback server is PySpark's, shared by the
            # process, and stays, as after any shutdown).
            self.shutdown()
            raise

    def _start(self, sc: SparkContext, settings: Settings) -> None:
        """What follows the scheduler thread's start: the listener, the REST API, Spark's
        metrics source."""
        jar = usable_shim(sc, settings)  # None after one WARNING naming what is lost
        self.listener, self.listener_path = attach_spark_listener(
            sc, self.bus.post, settings.listener, jar, settings.listener_queue_capacity,
            self._application_ended)
        for event in live_executors(sc):
            self.bus.post(event)
        install_writer_hooks(streaming_manager_for)
        log.info("listening to Spark through the %s (%s)",
                 "JVM shim" if self.listener_path == "shim" else "pure-py4j listener",
                 jar if self.listener_path == "shim" else "no per-task filtering in the JVM")
        # Requirements accepted by the REST API live beside each query's checkpoint.
        self.persisted = PersistedRequirements(HadoopRequirementsStore(sc), settings.scheduler)
        self.sampler: Sampler | None = None
        if settings.rest.enabled:
            self.sampler = Sampler(self.scheduler, self.loop,
                                   interval=settings.rest.sample_interval,
                                   capacity=settings.rest.sample_capacity,
                                   forecast=None if self.autoscaling is None
                                   else self.autoscaling.forecast_rate)
        self.facade = RuntimeFacade(self.loop, self.scheduler, self.persisted,
                                    autoscaling=self.autoscaling, sampler=self.sampler,
                                    app=self._figures)
        self.rest = serve(self.facade, settings.rest)
        if self.rest is not None:
            self.on_close(self.rest.stop)  # closers run first: no request during shutdown
            log.info("spark-adaptive page at %s/ (Spark UI at %s)", self.rest.url,
                     sc.uiWebUrl or "disabled")
        self.metrics_source: SparkMetricsSource | None = None
        if settings.metrics_source and jar is not None:
            self.metrics_source = SparkMetricsSource(sc, jar)
            self._push_timer: Cancellable | None = None
            self.loop.submit(self._push_metrics)

            def close_metrics_source() -> None:
                source, self.metrics_source = self.metrics_source, None
                if self._push_timer is not None:
                    self._push_timer.cancel()
                if source is not None:
                    source.close()

            self.on_close(close_metrics_source)
        if self.sampler is not None:
            sampler = self.sampler

            def close_sampler() -> None:
                self.loop.call_sync(sampler.close)

            self.on_close(close_sampler)
        if self.warm_up is not None:
            warm_up = self.warm_up

            def close_warm_up() -> None:
                self.loop.call_sync(warm_up.close)

            self.on_close(close_warm_up)

    def _push_metrics(self) -> None:
        """Hand the figures to Spark's metrics system, again every few seconds (on the
        scheduler thread, until shutdown)."""
        source = self.metrics_source
        if source is None or self._closed:
            return
        try:
            source.publish(flat_figures(self.facade.metrics()))
        except Exception:  # py4j gone at shutdown, or a bug: the figures wait, nothing else
            log.debug("pushing figures to Spark's metrics system failed", exc_info=True)
        self._push_timer = self.loop.call_later(PUSH_INTERVAL, self._push_metrics)

    def _application_ended(self) -> None:
        """Spark ended the application: the SparkContext stops or has stopped, perhaps not
        through Python's ``stop()`` (which shuts the runtime down first, so this does not
        come then). Shuts down on a thread of its own: this runs on the thread that delivers
        Spark's events (with the py4j listener, Spark's listener bus), which shutting down
        waits for."""
        if self._closed:
            return
        log.info("the SparkContext stopped: spark-adaptive stops")
        threading.Thread(target=self.shutdown, name="spark-adaptive-shutdown",
                         daemon=True).start()

    def _figures(self) -> AppFigures:
        """The application's figures for ``/metrics`` (on the scheduler thread). Events the
        shim lost in a failed delivery to Python count as dropped: the scheduler never saw
        them either."""
        stats = self.listener.stats() if isinstance(self.listener, ShimListener) else {}
        sched = self.scheduler.app_snapshot()
        return AppFigures(
            mode=self.settings.scheduler.mode, listener=self.listener_path,
            executors_declared=sched["declaredExecutors"],
            executors_alive=sched["executors"],
            events_received=sum(self.bus.counts.values()),
            events_dropped=stats.get("dropped", 0) + stats.get("lost", 0),
            events_queued=stats.get("queued", 0) + self.loop.queued(),
            listener_lag=self.loop.lag,
            samples_held=0 if self.sampler is None else self.sampler.held())

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
                for event in self.scheduler.resources.live_executor_events():
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

    def _warm_up_root(self) -> str | None:
        """Where a warm-up writes its scratch files (scheduler thread): the checkpoint of a
        managed query that keeps state and can be restarted onto other partitions (a file
        system every executor reaches); None when there is none, and nothing stateful to
        warm up for."""
        for q in self.scheduler.queries():
            location = q.checkpoint_location
            if (not q.finished and q.keeps_state and location
                    and q.repartition_support().possible):
                return location
        return None

    def remember_session(self, spark: SparkSession) -> None:
        """A session of the app (warm-up jobs run SQL on it); the first one is kept."""
        if self._session is None:
            self._session = spark

    # -- shutdown -------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop everything spark-adaptive runs; idempotent; never raises."""
        with _lock:
            if self._closed:
                return
            self._closed = True
            if _runtimes.get(id(self.sc)) is self:
                del _runtimes[id(self.sc)]
        for fn in reversed(self._closers):
            _quietly(fn, "a shutdown hook")
        _quietly(self.streaming.close, "the managed queries")
        autoscaling = self.autoscaling
        if autoscaling is not None:
            _quietly(lambda: self.loop.call_sync(autoscaling.close), "the autoscaler")
        if self.offset_log is not None:
            _quietly(self.offset_log.close, "the offset-log reader")
        _quietly(lambda: self.loop.call_sync(self.scheduler.close), "the scheduler")
        if self.listener is not None:
            _quietly(self.listener.close, "the Spark listener")
        _quietly(self.actuator.close, "the executor actuator")
        _quietly(self.loop.stop, "the scheduler thread")
        # The histories' last changes are in; save them while the JVM is still there.
        _quietly(self.history_writer.close, "the history writer")
        log.debug("spark-adaptive stopped")


def local_slots(master: str, task_cpus: int = 1) -> int | None:
    """The task slots of a local-mode master (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``), None for any other master (``local-cluster[...]`` included)."""
    if master == "local":
        cores = 1
    else:
        m = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master.strip())
        if m is None:
            return None
        cores = os.cpu_count() or 1 if m.group(1) == "*" else int(m.group(1))
    return max(1, cores // max(1, task_cpus))


#: Executors Spark starts an app with on YARN and Kubernetes when dynamic allocation is off
#: and spark.executor.instances is not set (``SchedulerBackendUtils.DEFAULT_NUMBER_EXECUTORS``).
SPARK_DEFAULT_EXECUTORS = 2


def initial_executors(master: str, instances: str | None) -> int | None:
    """The executors an app holds without spark-adaptive, which keeps dynamic allocation
    off: on YARN and Kubernetes, ``spark.executor.instances`` (Spark's default 2 when it
    is not set or unreadable); None on any other master (a standalone app takes every
    free core up to ``spark.cores.max`` and its backend does not read the instances;
    local mode has no executors to ask for)."""
    m = master.strip().lower()
    if not (m == "yarn" or m.startswith(("yarn-", "k8s://"))):
        return None
    try:
        count = int((instances or "").strip())
    except ValueError:
        return SPARK_DEFAULT_EXECUTORS
    return count if count >= 0 else SPARK_DEFAULT_EXECUTORS


def _quietly(fn: Callable[[], Any], what: str) -> None:
    try:
        fn()
    except Exception as e:  # the JVM may already be going down
        log.debug("stopping %s: %s", what, e)


def runtime_for(sc: SparkContext) -> AdaptiveRuntime | None:
    """The runtime of ``sc``; this module's registry is the one place runtimes are kept."""
    return _runtimes.get(id(sc))


def streaming_manager_for(sc: SparkContext) -> StreamingManager | None:
    rt = _runtimes.get(id(sc))
    return None if rt is None else rt.streaming


def start_runtime(sc: SparkContext, settings: Settings, at_start: bool = False
                  ) -> AdaptiveRuntime:
    """The runtime of ``sc``, created on first use (``at_start``: see
    :class:`AdaptiveRuntime`).

    The runtimes still running when the interpreter exits are shut down then, through one
    exit hook for all (so a runtime that has shut down is referenced by nothing)."""
    global _exit_hook_registered
    with _lock:
        rt = _runtimes.get(id(sc))
        if rt is None:
            rt = AdaptiveRuntime(sc, settings, at_start)
            _runtimes[id(sc)] = rt
            if not _exit_hook_registered:
                atexit.register(shutdown_all)
                _exit_hook_registered = True
        return rt


def shutdown_all() -> None:
    for rt in list(_runtimes.values()):
        rt.shutdown()
