"""Every streaming query the app starts, managed by the adaptive scheduler.

While spark-adaptive is active, ``DataStreamWriter.start()`` and ``toTable()``
register the query with the scheduler instead of starting it directly: the
scheduler decides its parallelism, then starts it through a
:class:`~spark_adaptive.spark.driver.SparkQueryDriver`. ``start()`` returns once
the query runs (or raises if it cannot start at all), as Spark's does.

The app gets a :class:`ManagedStreamingQuery`: a PySpark ``StreamingQuery``
that always speaks for the query's current run, so it stays valid across the
restarts of rescales and failures. ``awaitTermination()`` returns only when the
query really ends (and raises the query's own error if it failed);
``stop()`` cancels it through the scheduler (Canceling, then
Finished(CANCELED)); ``stop_with_savepoint()`` stops it between two
micro-batches for good (StopWithSavepoint, then Finished(FINISHED)).

Not covered: ``spark.streams.awaitAnyTermination()`` and ``spark.streams.active``
speak of Spark's runs, so they see a run end at each restart.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.ports import QueryInfo
from spark_adaptive.core.query import StateChange
from spark_adaptive.errors import QueryFailedError
from spark_adaptive.spark.checkpoint import inspect_checkpoint
from spark_adaptive.spark.driver import SHUFFLE_PARTITIONS, SparkQueryDriver
from spark_adaptive.spark.jvm import seq_to_list

if TYPE_CHECKING:
    from spark_adaptive.core.scheduler import AdaptiveScheduler
    from spark_adaptive.spark.runtime import AdaptiveRuntime

log = logging.getLogger(__name__)

_keys = itertools.count(1)
_installed = False


def _managed_query_class() -> type:
    from pyspark.sql.streaming.query import StreamingQuery

    class ManagedStreamingQuery(StreamingQuery):
        """The app's handle of a query managed by spark-adaptive (valid across restarts)."""

        def __init__(self, manager: StreamingManager, key: str, driver: SparkQueryDriver) -> None:
            self._manager = manager
            self._key = key
            self._driver = driver
            self._finished = threading.Event()
            self._final: dict[str, Any] | None = None

        # Every inherited method talks to the run going on now.
        @property
        def _jsq(self) -> Any:
            run = self._driver.current
            if run is None:
                raise RuntimeError(f"query {self._key} has not started")
            return run._jsq

        @_jsq.setter
        def _jsq(self, value: Any) -> None:  # StreamingQuery.__init__ assigns it
            pass

        @property
        def key(self) -> str:
            """spark-adaptive's name for the query before Spark gives it an id."""
            return self._key

        @property
        def scheduler_state(self) -> str:
            """The adaptive scheduler's state of the query (Executing, Restarting, ...)."""
            return str(self._manager.snapshot(self._key)["state"])

        @property
        def isActive(self) -> bool:  # noqa: N802 - PySpark's name
            return not self._finished.is_set()

        def awaitTermination(self, timeout: int | None = None) -> bool | None:  # noqa: N802
            """Wait until the query really ends, across rescales and restarts."""
            if timeout is not None:
                if not isinstance(timeout, (int, float)) or timeout < 0:
                    raise ValueError(f"timeout must be a non-negative number, got {timeout!r}")
                if not self._finished.wait(timeout):
                    return False
            else:
                while not self._finished.wait(1.0):
                    pass
            self._raise_if_failed()
            return True if timeout is not None else None

        def _raise_if_failed(self) -> None:
            final = self._final or {}
            if final.get("status") == "FAILED":
                run = self._driver.current
                if run is not None and run._jsq.exception().isDefined():
                    run.awaitTermination()  # raises Spark's own StreamingQueryException
                raise QueryFailedError(f"query {self._key} failed: {final.get('error')}")

        def stop(self) -> None:
            """Cancel the query: Canceling, then Finished(CANCELED)."""
            if self._finished.is_set():
                return
            self._manager.cancel(self._key)
            while not self._finished.wait(1.0):
                pass

        def stop_with_savepoint(self) -> None:
            """Stop for good, exactly between two micro-batches, leaving the checkpoint
            complete (Flink's stop-with-savepoint): StopWithSavepoint, then
            Finished(FINISHED). Raises ``ConflictError`` unless the query is Executing."""
            if self._finished.is_set():
                return
            self._manager.stop_with_savepoint(self._key)
            while not self._finished.wait(1.0):
                pass

        @property
        def status(self) -> dict[str, Any]:
            state = self._manager.snapshot(self._key)["state"]
            run = self._driver.current
            if state == "Executing" and run is not None and run.isActive:
                return run.status
            return {"message": f"spark-adaptive: {state}", "isDataAvailable": False,
                    "isTriggerActive": False}

        @property
        def lastProgress(self) -> Any:  # noqa: N802
            for run in (self._driver.current, self._driver.previous):
                if run is not None and run.lastProgress is not None:
                    return run.lastProgress
            return None

        def exception(self) -> Any:
            if (self._final or {}).get("status") == "FAILED" and self._driver.current is not None:
                return self._driver.current.exception()
            return None

        def _on_finished(self, snapshot: dict[str, Any]) -> None:
            self._final = snapshot
            self._finished.set()

        def __repr__(self) -> str:
            return f"<ManagedStreamingQuery {self._key} {self.scheduler_state}>"

    return ManagedStreamingQuery


class StreamingManager:
    """Registers the app's streaming queries with the scheduler and keeps their handles."""

    def __init__(self, runtime: AdaptiveRuntime, scheduler: AdaptiveScheduler) -> None:
        self._rt = runtime
        self._sched = scheduler
        self._handles: dict[str, Any] = {}
        self._started: dict[str, threading.Event] = {}
        self._cls = _managed_query_class()
        scheduler.add_listener(self._on_state_change)

    # -- called on the app's thread -----------------------------------------------------
    def manage(self, writer: Any, start: Callable[[Any], Any]) -> Any:
        """Register the query the app is starting; return its handle once it runs."""
        spark = writer._spark
        self._rt.ensure_query_listener(spark)
        jwriter = writer._jwrite
        key = f"query-{next(_keys)}"
        # The memory sink cannot recover from a checkpoint: treat it as having none.
        memory_sink = _private(jwriter, "source") == "memory"
        checkpoint = None if memory_sink else _checkpoint_location(spark, jwriter)
        existing = inspect_checkpoint(spark, checkpoint) if checkpoint else None
        info = QueryInfo(
            key=key,
            name=_query_name(jwriter),
            configured_partitions=int(spark.conf.get(SHUFFLE_PARTITIONS) or "200"),
            checkpoint_location=checkpoint,
            trigger_interval=_trigger_interval(jwriter),
            state_partitions=existing.shuffle_partitions
            if existing is not None and existing.has_state else None,
            stateful=is_stateful(writer._df._jdf.queryExecution().analyzed()),
        )
        warm_up = self._rt.warm_up
        driver = SparkQueryDriver(spark, jwriter, start, info,
                                  warm_up_wait=None if warm_up is None else warm_up.wait,
                                  shim_jar=self._rt.settings.shim_jar)
        handle = self._cls(self, key, driver)
        self._handles[key] = handle
        started = self._started[key] = threading.Event()
        # Bounds a REST PUT persisted beside the checkpoint win over the defaults.
        requirements = self._rt.persisted.restore(info)
        self._rt.loop.call_sync(lambda: self._sched.register_query(driver, requirements))
        log.info("managing streaming query %s (%s): %d configured partitions, checkpoint %s",
                 key, info.name or "unnamed", info.configured_partitions,
                 info.checkpoint_location or "none")
        while not started.wait(1.0):
            pass
        final = handle._final
        if final is not None and final.get("status") == "FAILED":
            handle._raise_if_failed()
        return handle

    def cancel(self, key: str) -> None:
        self._rt.loop.call_sync(lambda: self._sched.cancel(key))

    def stop_with_savepoint(self, key: str) -> None:
        self._rt.loop.call_sync(lambda: self._sched.stop_with_savepoint(key))

    def snapshot(self, key: str) -> dict[str, Any]:
        result = self._rt.loop.call_sync(lambda: self._sched.query(key).snapshot().to_dict())
        assert isinstance(result, dict)
        return result

    def close(self) -> None:
        """The SparkContext is stopping: every handle still waiting is released."""
        for key, handle in self._handles.items():
            if not handle._finished.is_set():
                handle._on_finished({"key": key, "state": "Finished", "status": "CANCELED",
                                     "error": "the SparkContext stopped"})
        for started in self._started.values():
            started.set()

    # -- on the scheduler thread ---------------------------------------------------------
    def _on_state_change(self, change: StateChange) -> None:
        if change.new in ("Executing", "Finished"):
            started = self._started.get(change.key)
            if started is not None:
                started.set()
        if change.new == "Finished":
            handle = self._handles.get(change.key)
            if handle is not None:
                handle._on_finished(self._sched.query(change.key).snapshot().to_dict())


# -- reading the app's JVM DataStreamWriter ------------------------------------------------
#: Logical operators that keep state across micro-batches in a streaming plan.
_STATEFUL_OPERATORS = frozenset({
    "Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "Distinct",
    "FlatMapGroupsWithState", "FlatMapGroupsInPandasWithState", "TransformWithState",
    "TransformWithStateInPySpark", "GlobalLimit",
})


def is_stateful(plan: Any) -> bool:
    """Whether an analyzed streaming plan keeps state (a stream-static join does not)."""
    stack = [plan]
    while stack:
        node = stack.pop()
        name = node.getClass().getSimpleName()
        if name in _STATEFUL_OPERATORS and node.isStreaming():
            return True
        if name == "Join" and node.left().isStreaming() and node.right().isStreaming():
            return True
        stack.extend(seq_to_list(node.children()))
    return False



def _private(jwriter: Any, name: str) -> Any:
    field = jwriter.getClass().getDeclaredField(name)
    field.setAccessible(True)
    return field.get(jwriter)


def _option(jwriter: Any, key: str) -> str | None:
    value = _private(jwriter, "extraOptions").get(key)
    return None if value.isEmpty() else str(value.get())


def _query_name(jwriter: Any) -> str | None:
    return _option(jwriter, "queryName")


def _checkpoint_location(spark: Any, jwriter: Any) -> str | None:
    """The query's own checkpoint, or the session-wide root plus its name (stable too)."""
    explicit = _option(jwriter, "checkpointLocation")
    if explicit:
        return explicit
    root = spark.conf.get("spark.sql.streaming.checkpointLocation", None)
    name = _query_name(jwriter)
    if root and name:
        return f"{root.rstrip('/')}/{name}"
    return None


def _trigger_interval(jwriter: Any) -> float:
    trigger = _private(jwriter, "trigger")
    try:
        return float(trigger.intervalMs()) / 1000.0
    except Exception:
        return 0.0  # once, available-now, continuous: no interval


# -- the writer hooks --------------------------------------------------------------------
def install_writer_hooks() -> None:
    """Route ``DataStreamWriter.start`` and ``toTable`` to the scheduler where it is active."""
    global _installed
    if _installed:
        return
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    original_start = DataStreamWriter.start
    original_to_table = DataStreamWriter.toTable

    def _manager_for(writer: Any) -> StreamingManager | None:
        from spark_adaptive.spark.runtime import runtime_for

        rt = runtime_for(writer._spark.sparkContext)
        return None if rt is None else rt.streaming

    def _prepare(writer: Any, fmt: Any, output_mode: Any, partition_by: Any, query_name: Any,
                 options: dict[str, Any]) -> None:
        # The same steps as PySpark's own start() before it calls the JVM.
        writer.options(**options)
        if output_mode is not None:
            writer.outputMode(output_mode)
        if partition_by is not None:
            writer.partitionBy(partition_by)
        if fmt is not None:
            writer.format(fmt)
        if query_name is not None:
            writer.queryName(query_name)

    def start(self: Any, path: str | None = None, format: str | None = None,  # noqa: A002
              outputMode: str | None = None, partitionBy: Any = None,  # noqa: N803
              queryName: str | None = None, **options: Any) -> Any:  # noqa: N803
        manager = _manager_for(self)
        if manager is None:
            return original_start(self, path, format, outputMode, partitionBy, queryName,
                                  **options)
        _prepare(self, format, outputMode, partitionBy, queryName, options)
        if path is None:
            return manager.manage(self, lambda jw: jw.start())
        return manager.manage(self, lambda jw: jw.start(path))

    def to_table(self: Any, tableName: str, format: str | None = None,  # noqa: A002,N803
                 outputMode: str | None = None, partitionBy: Any = None,  # noqa: N803
                 queryName: str | None = None, **options: Any) -> Any:  # noqa: N803
        manager = _manager_for(self)
        if manager is None:
            return original_to_table(self, tableName, format, outputMode, partitionBy, queryName,
                                     **options)
        _prepare(self, format, outputMode, partitionBy, queryName, options)
        return manager.manage(self, lambda jw: jw.toTable(tableName))

    start.__doc__ = original_start.__doc__
    to_table.__doc__ = original_to_table.__doc__
    DataStreamWriter.start = start  # type: ignore[method-assign]
    DataStreamWriter.toTable = to_table  # type: ignore[method-assign]
    _installed = True
