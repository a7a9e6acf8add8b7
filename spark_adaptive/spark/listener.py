"""Spark's listener events into :mod:`spark_adaptive.core.events`.

Two paths deliver the same events:

* **shim** (:class:`ShimListener`): the JVM shim's ``AdaptiveListener`` handles
  task events inside the JVM and sends Python only the events we use, as JSON
  lines, one py4j call per batch.
* **py4j** (:class:`Py4jSparkListener`): a Python object implementing
  ``SparkListenerInterface``. Spark calls it for every event, task events
  included, each a py4j round trip; it returns at once for those it ignores.

Streaming query events come the same way: Spark posts them on its listener bus
for every session (``onOtherEvent``), so no PySpark ``StreamingQueryListener``
is needed (one would be called back into Python even while the interpreter
shuts down). Progress arrives as Spark's own JSON (``progress.json()``).

Every callback converts and hands the event to ``sink`` and returns; ``sink``
only queues it for the scheduler thread. A callback that fails logs the failure
with the event type and returns normally, so Spark's listener bus never sees
an exception from us.

The application's end (Spark's ``onApplicationEnd``, posted when the SparkContext
stops, also when Spark stops it itself) is not an event for the scheduler: it
calls ``on_application_end``, which must return at once (it runs on the thread
that delivers Spark's events).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_adaptive.core import events as ev
from spark_adaptive.errors import ShimNotAvailableError
from spark_adaptive.spark.jvm import ensure_callback_server, jvm, new_shim_object, seq_to_list

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

Sink = Callable[[ev.Event], None]
Callback = Callable[[], None]

_SHIM_TYPES: dict[str, type[ev.Event]] = {
    t.__name__: t
    for t in (ev.ExecutorAdded, ev.ExecutorRemoved, ev.ExecutorHeartbeat, ev.StageSubmitted,
              ev.StageCompleted, ev.JobStarted, ev.JobEnded, ev.QueryStarted, ev.QueryIdle,
              ev.QueryTerminated)
}


def event_from_shim(obj: dict[str, Any]) -> ev.Event:
    """One JSON object from the shim to an event (times arrive in epoch millis)."""
    kind = obj.pop("type")
    if kind == "QueryProgress":
        return progress_from_json(obj["progress"])
    cls = _SHIM_TYPES[kind]
    obj["time"] = obj["time"] / 1000.0
    if "stage_ids" in obj:
        obj["stage_ids"] = tuple(obj["stage_ids"])
    return cls(**obj)


def _plan_of(stage_info: Any) -> str | None:
    """The id of the helper plan one of the stage's RDDs reads by (its name), or None."""
    for info in seq_to_list(stage_info.rddInfos()):
        plan = ev.plan_of_rdd_name(info.name())
        if plan is not None:
            return plan
    return None


_QUERY_EVENT_CLASSES = frozenset({"QueryStartedEvent", "QueryProgressEvent", "QueryIdleEvent",
                                  "QueryTerminatedEvent"})


def _opt(jopt: Any, default: Any = None) -> Any:
    return jopt.get() if jopt.isDefined() else default


def _guard(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        def run(self: Any, jevent: Any) -> None:
            try:
                fn(self, jevent)
            except Exception:
                self.errors += 1
                log.exception("could not convert Spark's %s event; ignored", name)

        run.__name__ = fn.__name__
        return run

    return wrap


class Py4jSparkListener:
    """``SparkListenerInterface`` implemented in Python (the fallback path)."""

    class Java:
        implements = ["org.apache.spark.scheduler.SparkListenerInterface"]

    def __init__(self, sink: Sink, on_application_end: Callback | None = None) -> None:
        self._sink = sink
        self._on_application_end = on_application_end
        self.errors = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Callable[[Any], None]:
        # Every other SparkListenerInterface method, task events included: ignored.
        if name.startswith("on"):
            return self._ignore
        raise AttributeError(name)

    def _ignore(self, _jevent: Any) -> None:
        self.calls += 1

    # java.lang.Object's methods reach Python too: Spark's listener bus compares
    # listeners with equals() when one of them is removed.
    def equals(self, other: Any) -> bool:
        return other is self

    def hashCode(self) -> int:  # noqa: N802 - Java's name
        return id(self) & 0x7FFFFFFF

    def toString(self) -> str:  # noqa: N802 - Java's name
        return f"spark_adaptive.Py4jSparkListener@{id(self):x}"

    @_guard("ExecutorAdded")
    def onExecutorAdded(self, e: Any) -> None:  # noqa: N802 - Spark's name
        info = e.executorInfo()
        self._sink(ev.ExecutorAdded(e.time() / 1000.0, e.executorId(), info.executorHost(),
                                    info.totalCores()))

    @_guard("ExecutorRemoved")
    def onExecutorRemoved(self, e: Any) -> None:  # noqa: N802
        self._sink(ev.ExecutorRemoved(e.time() / 1000.0, e.executorId(), e.reason()))

    @_guard("ExecutorMetricsUpdate")
    def onExecutorMetricsUpdate(self, e: Any) -> None:  # noqa: N802
        eid = e.execId()
        if eid != "driver":
            self._sink(ev.ExecutorHeartbeat(time.time(), eid))

    @_guard("StageSubmitted")
    def onStageSubmitted(self, e: Any) -> None:  # noqa: N802
        s = e.stageInfo()
        props = e.properties()
        group = props.getProperty("spark.jobGroup.id") if props is not None else None
        self._sink(ev.StageSubmitted(_opt(s.submissionTime(), time.time() * 1000) / 1000.0,
                                     s.stageId(), s.attemptNumber(), s.numTasks(), s.name(), group))

    @_guard("StageCompleted")
    def onStageCompleted(self, e: Any) -> None:  # noqa: N802
        s = e.stageInfo()
        m = s.taskMetrics()
        submitted = _opt(s.submissionTime())
        completed = _opt(s.completionTime(), time.time() * 1000)
        self._sink(ev.StageCompleted(
            time=completed / 1000.0,
            stage_id=s.stageId(),
            attempt=s.attemptNumber(),
            num_tasks=s.numTasks(),
            input_bytes=m.inputMetrics().bytesRead() if m is not None else 0,
            shuffle_read_bytes=m.shuffleReadMetrics().totalBytesRead() if m is not None else 0,
            shuffle_write_bytes=m.shuffleWriteMetrics().bytesWritten() if m is not None else 0,
            duration=(completed - submitted) / 1000.0 if submitted is not None else 0.0,
            failure=_opt(s.failureReason()),
            name=s.name(),
            plan=_plan_of(s),
        ))

    @_guard("JobStart")
    def onJobStart(self, e: Any) -> None:  # noqa: N802
        props = e.properties()
        group = props.getProperty("spark.jobGroup.id") if props is not None else None
        execution = props.getProperty("spark.sql.execution.id") if props is not None else None
        self._sink(ev.JobStarted(e.time() / 1000.0, e.jobId(),
                                 tuple(int(i) for i in seq_to_list(e.stageIds())), group,
                                 execution))

    @_guard("streaming query")
    def onOtherEvent(self, e: Any) -> None:  # noqa: N802
        kind = e.getClass().getSimpleName()
        if kind not in _QUERY_EVENT_CLASSES:
            return
        now = time.time()
        if kind == "QueryProgressEvent":
            self._sink(progress_from_json(json.loads(e.progress().json())))
        elif kind == "QueryStartedEvent":
            self._sink(ev.QueryStarted(now, str(e.id().toString()), str(e.runId().toString()),
                                       e.name()))
        elif kind == "QueryIdleEvent":
            self._sink(ev.QueryIdle(now, str(e.id().toString()), str(e.runId().toString())))
        else:
            self._sink(ev.QueryTerminated(now, str(e.id().toString()), str(e.runId().toString()),
                                          _opt(e.exception()), _opt(e.errorClassOnException())))

    @_guard("JobEnd")
    def onJobEnd(self, e: Any) -> None:  # noqa: N802
        result = e.jobResult()
        failed = result.getClass().getSimpleName() == "JobFailed"
        self._sink(ev.JobEnded(e.time() / 1000.0, e.jobId(), not failed,
                               str(result.exception().toString()) if failed else None))

    @_guard("ApplicationEnd")
    def onApplicationEnd(self, _e: Any) -> None:  # noqa: N802
        if self._on_application_end is not None:
            self._on_application_end()


class _ShimSink:
    """The Python end of the shim: ``java.util.function.Consumer<String>``."""

    class Java:
        implements = ["java.util.function.Consumer"]

    def __init__(self, sink: Sink, on_application_end: Callback | None = None) -> None:
        self._sink = sink
        self._on_application_end = on_application_end
        self.errors = 0

    def accept(self, batch: str) -> None:
        for line in batch.split("\n"):
            try:
                obj = json.loads(line)
                if obj.get("type") == APPLICATION_ENDED:
                    if self._on_application_end is not None:
                        self._on_application_end()
                    continue
                self._sink(event_from_shim(obj))
            except Exception:
                self.errors += 1
                log.exception("bad event from the JVM shim: %.200s", line)

    def andThen(self, other: Any) -> Any:  # noqa: N802 - part of the Java interface
        raise NotImplementedError


#: The shim's line for Spark's ``onApplicationEnd``.
APPLICATION_ENDED = "ApplicationEnded"


class ShimListener:
    """The JVM shim's listener, registered on the SparkContext."""

    def __init__(self, sc: SparkContext, jar: Path, sink: Sink,
                 queue_capacity: int = 10_000,
                 on_application_end: Callback | None = None) -> None:
        """``queue_capacity``: stage and job events that may wait for Python; more are
        dropped and counted (executor and query events never are)."""
        self._sc = sc
        self._jlistener = new_shim_object(sc, "AdaptiveListener", jar)
        self._jlistener.setCapacity(queue_capacity)
        self._python_sink = _ShimSink(sink, on_application_end)
        self._jlistener.start(self._python_sink)
        sc._jsc.sc().addSparkListener(self._jlistener)

    def stats(self) -> dict[str, int]:
        """The shim's counts: events ``delivered`` to Python in ``batches``; ``failures``,
        deliveries that failed, and the events they ``lost``; events ``queued`` now; stage
        and job events ``dropped`` while the queue was full."""
        j = self._jlistener
        return {"delivered": j.delivered(), "batches": j.batches(), "failures": j.failures(),
                "lost": j.lost(), "queued": j.queued(), "dropped": j.dropped()}

    def close(self) -> None:
        self._sc._jsc.sc().removeSparkListener(self._jlistener)
        self._jlistener.close(2000)


class Py4jListener:
    """The fallback: :class:`Py4jSparkListener` registered on the SparkContext."""

    def __init__(self, sc: SparkContext, sink: Sink,
                 on_application_end: Callback | None = None) -> None:
        self._sc = sc
        self._listener = Py4jSparkListener(sink, on_application_end)
        # py4j proxies a Python object afresh each time it is passed to Java, and Spark
        # removes a listener by equality: add and remove must pass one and the same JVM
        # proxy, so take it once (through a JVM list) and keep it, as PySpark keeps its
        # query listener's Java wrapper.
        holder = jvm(sc).java.util.ArrayList()
        holder.add(self._listener)
        self._jlistener = holder.get(0)
        sc._jsc.sc().addSparkListener(self._jlistener)

    def close(self) -> None:
        self._sc._jsc.sc().removeSparkListener(self._jlistener)


def progress_from_json(p: dict[str, Any]) -> ev.QueryProgress:
    """Spark's ``StreamingQueryProgress.json`` as an event (rates Spark could not compute,
    such as the first batch's input rate, are absent and read as 0)."""
    ops = tuple(
        ev.StateOperatorProgress(str(s.get("operatorName", "")), int(s.get("numRowsTotal", 0)),
                                 int(s.get("memoryUsedBytes", 0)),
                                 int(s.get("numShufflePartitions", 0)),
                                 int(s.get("numStateStoreInstances", 0)))
        for s in p.get("stateOperators") or ())
    sources = tuple(
        ev.SourceProgress(
            str(s.get("description", "")), int(s.get("numInputRows", 0)),
            _float_or_none(s.get("inputRowsPerSecond")),
            _float_or_none(s.get("processedRowsPerSecond")),
            tuple((str(k), str(v)) for k, v in (s.get("metrics") or {}).items()),
            _json_or_none(s.get("endOffset")), _json_or_none(s.get("latestOffset")),
            _json_or_none(s.get("startOffset")))
        for s in p.get("sources") or ())
    durations = p.get("durationMs") or {}
    return ev.QueryProgress(
        time=_ts(p.get("timestamp")), query_id=str(p["id"]), run_id=str(p["runId"]),
        name=p.get("name"), batch_id=int(p.get("batchId", -1)),
        num_input_rows=int(p.get("numInputRows", 0)),
        input_rows_per_second=float(p.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_second=float(p.get("processedRowsPerSecond") or 0.0),
        batch_duration=float(p.get("batchDuration", 0)) / 1000.0,
        trigger_execution=float(durations.get("triggerExecution", 0)) / 1000.0,
        state_operators=ops, sources=sources,
    )


def _json_or_none(value: Any) -> str | None:
    """An offset as JSON text (Spark embeds them as JSON values; some sources as strings)."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _ts(text: str | None) -> float:
    """Spark's ISO-8601 UTC timestamps ('2026-11-22T03:53:35.123Z') to epoch seconds."""
    if not text:
        return time.time()
    from datetime import datetime, timezone

    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def _safe(fn: Callable[[], None], what: str) -> None:
    try:
        fn()
    except Exception:
        log.exception("could not convert the %s query event; ignored", what)


def attach_spark_listener(
    sc: SparkContext, sink: Sink, mode: str, jar: Path | None, queue_capacity: int = 10_000,
    on_application_end: Callback | None = None,
) -> tuple[ShimListener | Py4jListener, str]:
    """Register the listener for ``mode`` (auto|shim|py4j); returns it and the path used.
    ``on_application_end`` is called when Spark ends the application (see the module doc)."""
    ensure_callback_server(sc)
    if mode in ("auto", "shim") and jar is not None:
        try:
            return ShimListener(sc, jar, sink, queue_capacity, on_application_end), "shim"
        except Exception as e:
            if mode == "shim":
                raise
            log.warning("the JVM shim did not load (%s); using the py4j listener", e)
    elif mode == "shim":
        raise ShimNotAvailableError(
            "spark.adaptive.listener=shim but no shim jar was found; build it with "
            "jvm-shim/build.sh or set spark.adaptive.shim.jar")
    return Py4jListener(sc, sink, on_application_end), "py4j"


def active_work(sc: SparkContext) -> tuple[list[int], list[int]]:
    """The ids of the jobs and of the stages that run now, by Spark's status store
    (``SparkStatusTracker``): two py4j calls to the driver JVM, no cluster RPC."""
    tracker = sc._jsc.sc().statusTracker()
    return ([int(i) for i in tracker.getActiveJobIds()],
            [int(i) for i in tracker.getActiveStageIds()])


def live_executors(sc: SparkContext) -> list[ev.ExecutorAdded]:
    """Executors already registered, from Spark's status store, as ExecutorAdded events.

    The listener is attached first and this read second, so no executor falls
    between the two; one seen by both arrives twice, which consumers ignore.
    """
    out = []
    for s in seq_to_list(sc._jsc.sc().statusStore().executorList(True)):
        eid = s.id()
        if eid == "driver":
            continue
        host = str(s.hostPort()).rsplit(":", 1)[0]
        out.append(ev.ExecutorAdded(s.addTime().getTime() / 1000.0, eid, host, s.totalCores()))
    return out


