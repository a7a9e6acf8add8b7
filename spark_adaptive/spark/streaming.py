"""Every streaming query the app starts, managed by the adaptive scheduler.

While spark-adaptive is active, ``DataStreamWriter.start()`` and ``toTable()``
start the query in Spark at once, on the app's thread, as Spark's own do: Spark
analyses it and raises its own errors right there, and the query gets Spark's
id. The partition count of that first run is decided from the resources known
at that moment (:meth:`AdaptiveScheduler.plan_first_start`); then the
scheduler takes the running query over (:meth:`AdaptiveScheduler.adopt_query`)
and rescales it from there. ``start()`` returns as soon as Spark's does.

The app gets a :class:`ManagedStreamingQuery`: a PySpark ``StreamingQuery``
that always speaks for the query's current run, so it stays valid across the
restarts of rescales and failures. ``awaitTermination()`` returns only when the
query really ends (and raises the query's own error if it failed);
``stop()`` cancels it through the scheduler (Canceling, then
Finished(CANCELED)); ``stop_with_savepoint()`` stops it between two
micro-batches for good (StopWithSavepoint, then Finished(FINISHED)), and raises
if the query failed meanwhile; ``recentProgress`` spans its runs. When the
SparkContext stops before the query ended, the handle speaks for the run going
on then, which the SparkContext's end ends as it would on plain Spark.

When spark-adaptive cannot take a query over (a Spark without an internal it
reads, a failure of its own), the query runs as Spark runs it, with one
warning: spark-adaptive never stands between the app and its query.

Not covered: ``spark.streams.awaitAnyTermination()`` and ``spark.streams.active``
speak of Spark's runs, so on a cluster they see a run end at each restart
rescale (local mode never restarts a query).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

# pyspark at module level: only spark_adaptive.spark.runtime imports this module, and at
# run time only spark_adaptive.activation imports that, once a SparkContext runs (the
# start-up hook's wrapper, or enable() given a session): pyspark is loaded by then, and
# neither ``import spark_adaptive`` nor the start-up hook reaches this module.
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.ports import QueryInfo
from spark_adaptive.core.streaming.history_store import HistoryStore, restore_history
from spark_adaptive.core.streaming.persistence import PersistedRequirements
from spark_adaptive.core.streaming.query import QuerySnapshot, StateChange
from spark_adaptive.core.streaming.scheduler import AdaptiveScheduler
from spark_adaptive.core.streaming.states import StateName
from spark_adaptive.core.streaming.warm_up import WarmUp
from spark_adaptive.errors import QueryFailedError
from spark_adaptive.settings import Settings
from spark_adaptive.spark.driver import SHUFFLE_PARTITIONS, SparkQueryDriver, recover_checkpoint
from spark_adaptive.spark.jvm import seq_to_list

log = logging.getLogger(__name__)

_installed = False
#: Spark's socket source: it keeps no history, so a restarted query cannot re-read what it
#: had not committed (Spark warns that it "does not support recovery").
SOCKET_SOURCES = frozenset({"socket", "textsocketsourceprovider",
                            "org.apache.spark.sql.execution.streaming.sources."
                            "textsocketsourceprovider"})
#: How Spark names a file source (``FileSource[<path>]``): it splits its input by the
#: default parallelism, so its task count follows the cluster's cores.
FILE_SOURCE = "FileSource["
#: Failure origins that are the query's current run's own exception (Spark's): the run
#: terminated with it, or had failed by itself when it was stopped.
RUN_FAILURES = frozenset({"query", "stop"})
#: How many progress updates of earlier runs ``recentProgress`` keeps (Spark's default for
#: spark.sql.streaming.numRecentProgressUpdates).
RECENT_PROGRESS = 100


class ManagedStreamingQuery(StreamingQuery):
    """The app's handle of a query managed by spark-adaptive (valid across restarts)."""

    def __init__(self, manager: StreamingManager, key: str, driver: SparkQueryDriver) -> None:
        self._manager = manager
        self._key = key
        self._driver = driver
        self._finished = threading.Event()
        self._changed = threading.Condition()
        """Notified when the query finishes, or a stop with savepoint is given up."""
        self._final: tuple[str | None, str | None] | None = None
        """The query's (status, error) once it finished for good."""
        self._run_failed = False
        """The error that ended it is its current run's own (Spark's exception)."""
        self._start_failed = False
        """The error that ended it is a failed start's."""
        self._stop_failure: str | None = None
        """Why the stop with savepoint asked for last was given up (the query goes on)."""
        self._closed_run: Any = None
        """The run that speaks for the query once spark-adaptive stopped with the
        SparkContext while the query was not finished (Spark ends that run)."""

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
        """The query's id, as spark-adaptive's REST API and CLI name it."""
        return self._key

    @property
    def scheduler_state(self) -> str:
        """The adaptive scheduler's state of the query (Executing, Restarting, ...)."""
        return str(self._manager.snapshot(self._key).state)

    @property
    def isActive(self) -> bool:  # noqa: N802 - PySpark's name
        if self._closed_run is not None:
            return bool(self._closed_run.isActive)
        return not self._finished.is_set()

    def awaitTermination(self, timeout: int | None = None) -> bool | None:  # noqa: N802
        """Wait until the query really ends, across rescales and restarts."""
        if timeout is not None:
            if not isinstance(timeout, (int, float)) or timeout < 0:
                # Spark's own check and message (PySparkValueError).
                return super().awaitTermination(timeout)
            deadline = time.monotonic() + timeout
            if not self._finished.wait(timeout):
                return False
            if self._closed_run is not None:
                left = max(0.0, deadline - time.monotonic())
                return bool(self._closed_run.awaitTermination(left))
        else:
            while not self._finished.wait(1.0):
                pass
            if self._closed_run is not None:
                self._closed_run.awaitTermination()
                return None
        self._raise_if_failed()
        return True if timeout is not None else None

    def processAllAvailable(self) -> None:  # noqa: N802
        """Spark's, on the current run; a run that a restart ends hands over to the next.
        A run's failure is raised only when it ended the query: one the scheduler
        restarts from is waited out."""
        while True:
            if self._closed_run is not None:
                self._closed_run.processAllAvailable()
                return
            run = self._driver.current
            if run is None:
                return
            try:
                run.processAllAvailable()
            except Exception:
                if not self._finished.is_set():
                    # The run failed: the scheduler restarts the query or fails it.
                    self._driver.wait_for_run_after(run, 1.0)
                    continue
                if self._closed_run is not None:
                    raise
                self._raise_if_failed()
                return
            if self._finished.is_set() or run is self._driver.current and run.isActive:
                self._raise_if_failed()
                return
            self._driver.wait_for_run_after(run, 1.0)

    def _failed_run(self) -> Any:
        """The run whose own exception ended the query, if one did: not when the query
        failed to start again (or never had slots), which leaves an earlier run, that
        was restarted after its own failure, as the driver's current one."""
        status, _ = self._final or (None, None)
        run = self._driver.current
        if status != "FAILED" or not self._run_failed or run is None:
            return None
        return run if run._jsq.exception().isDefined() else None

    def _start_error(self) -> BaseException | None:
        """The error Spark's ``start()`` raised, when a failed start ended the query."""
        status, _ = self._final or (None, None)
        if status != "FAILED" or not self._start_failed:
            return None
        return self._driver.start_error

    def _raise_if_failed(self) -> None:
        status, error = self._final or (None, None)
        if status == "FAILED":
            run = self._failed_run()
            if run is not None:
                run.awaitTermination()  # raises Spark's own StreamingQueryException
            start_error = self._start_error()
            if start_error is not None:
                raise start_error  # what start() raised, as an app's own restart gets it
            raise QueryFailedError(f"query {self._key} failed: {error}")

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
        Finished(FINISHED). Raises ``ConflictError`` unless the query is Executing.

        Should the query fail while stopping, the restart strategy decides, as for
        any failure: when it restarts the query, the stop is given up and this raises
        ``QueryFailedError`` saying why, while the query goes on (Flink's
        stop-with-savepoint completes exceptionally); when it does not, the query
        ends FAILED and this raises its error, as ``awaitTermination()`` does."""
        if self._finished.is_set():
            return
        with self._changed:
            self._stop_failure = None
        self._manager.stop_with_savepoint(self._key)
        with self._changed:
            while not self._changed.wait_for(
                    lambda: self._finished.is_set() or self._stop_failure is not None, 1.0):
                pass
            failure = None if self._finished.is_set() else self._stop_failure
        if failure is not None:
            raise QueryFailedError(f"stop with savepoint of query {self._key} failed: "
                                   f"{failure}; the query goes on")
        if self._closed_run is None:
            self._raise_if_failed()

    @property
    def status(self) -> dict[str, Any]:
        state = self._manager.snapshot(self._key).state
        run = self._driver.current
        if state in (StateName.EXECUTING, StateName.FINISHED) and run is not None:
            return run.status
        return {"message": f"spark-adaptive: {state}", "isDataAvailable": False,
                "isTriggerActive": False}

    @property
    def lastProgress(self) -> Any:  # noqa: N802
        for run in (self._driver.current, self._driver.previous):
            if run is not None and run.lastProgress is not None:
                return run.lastProgress
        return None

    @property
    def recentProgress(self) -> list[Any]:  # noqa: N802
        run = self._driver.current
        current = [] if run is None else list(run.recentProgress)
        earlier = self._driver.earlier_progress
        return (earlier + current)[-max(RECENT_PROGRESS, len(current)):]

    def exception(self) -> Any:
        """Spark's exception of the run that ended the query; the error Spark's
        ``start()`` raised when a failed start ended it; the error that ended it as
        a ``QueryFailedError`` when neither did; None unless it failed."""
        if self._closed_run is not None:
            return self._closed_run.exception()
        status, error = self._final or (None, None)
        if status != "FAILED":
            return None
        run = self._failed_run()
        if run is not None:
            return run.exception()
        start_error = self._start_error()
        if start_error is not None:
            return start_error
        return QueryFailedError(f"query {self._key} failed: {error}")

    def _on_finished(self, status: str | None, error: str | None,
                     origin: str | None = None) -> None:
        """The query ended for good; ``origin``: where its error came from
        (``QuerySnapshot.error_origin``; ``query`` and ``stop`` are its run's own)."""
        with self._changed:
            if self._finished.is_set():
                return
            self._final = (status, error)
            self._run_failed = origin in RUN_FAILURES
            self._start_failed = origin == "start"
            self._finished.set()
            self._changed.notify_all()

    def _on_stop_given_up(self, reason: str) -> None:
        """The stop with savepoint asked for failed; the query goes on (``reason``)."""
        with self._changed:
            self._stop_failure = reason
            self._changed.notify_all()

    def _on_context_stopping(self) -> None:
        """spark-adaptive stops with the SparkContext before the query finished: its
        current run, which the SparkContext's end ends, speaks for it from now on, as
        the query would on plain Spark. Without a run it ends CANCELED."""
        run = self._driver.current
        if run is None:
            self._on_finished("CANCELED", "the SparkContext stopped")
            return
        with self._changed:
            if self._finished.is_set():
                return
            self._closed_run = run
            self._finished.set()
            self._changed.notify_all()

    def __repr__(self) -> str:
        return f"<ManagedStreamingQuery {self._key} {self.scheduler_state}>"


class ManagingRuntime(Protocol):
    """What the manager uses of the runtime it belongs to."""

    settings: Settings
    loop: EventLoop
    persisted: PersistedRequirements
    history_store: HistoryStore
    warm_up: WarmUp | None
    local_slots: int | None

    def remember_session(self, spark: Any) -> None: ...


class StreamingManager:
    """Starts the app's streaming queries, hands them to the scheduler, keeps their handles."""

    def __init__(self, runtime: ManagingRuntime, scheduler: AdaptiveScheduler) -> None:
        self._rt = runtime
        self._sched = scheduler
        self._handles: dict[str, ManagedStreamingQuery] = {}
        scheduler.add_listener(self._on_state_change)

    # -- called on the app's thread -----------------------------------------------------
    def manage(self, writer: Any, start: Callable[[Any], Any],
               unmanaged: Callable[[], Any]) -> Any:
        """Start the query the app is starting, at once, and hand it to the scheduler.

        ``start(jwriter)`` starts it in Spark; Spark's exceptions reach the app untouched.
        Should spark-adaptive itself fail before the start, ``unmanaged()`` starts the
        query as Spark would (one warning says why); after the start, a failure to take
        it over leaves it running as Spark runs it. The query's history goes on from the
        one persisted beside its checkpoint (read once Spark has resolved the checkpoint).
        """
        try:
            driver, requirements, plan, own_bounds = self._prepare(writer, start)
        except Exception as e:
            log.warning("spark-adaptive cannot manage this streaming query (%s: %s); it runs "
                        "as Spark runs it", type(e).__name__, e)
            return unmanaged()
        result = driver.start_first(plan.parallelism)  # Spark's own errors propagate
        info = driver.info
        try:
            self._rt.persisted.remember(info)
            history = restore_history(self._rt.history_store, info)
            handle = ManagedStreamingQuery(self, info.key, driver)
            self._handles[info.key] = handle
            self._rt.loop.call_sync(lambda: self._sched.adopt_query(
                driver, requirements, plan, result, history=history, own_bounds=own_bounds))
        except Exception:
            log.exception("spark-adaptive could not take over streaming query %s; it runs "
                          "as Spark runs it", info.key)
            self._handles.pop(info.key, None)
            return driver.current
        log.info("managing streaming query %s (%s): %d partitions (%s), checkpoint %s",
                 info.key, info.name or "unnamed", result.parallelism, plan.reason,
                 info.checkpoint_location or "none")
        if info.non_replayable_sources:
            log.info("query %s reads from %s, which cannot replay its input: spark-adaptive "
                     "never restarts it (a restart would lose what the source sent meanwhile); "
                     "it is rescaled live only", info.key,
                     ", ".join(info.non_replayable_sources))
        return handle

    def _prepare(self, writer: Any, start: Callable[[Any], Any]) -> Any:
        spark = writer._spark
        self._rt.remember_session(spark)
        jwriter = writer._jwrite
        plan = writer._df._jdf.queryExecution().analyzed()
        # The memory sink cannot recover from a checkpoint: treat it as having none.
        memory_sink = _private(jwriter, "source") == "memory"
        checkpoint = None if memory_sink else _checkpoint_location(spark, jwriter)
        # A repartition a dead driver left unfinished is rolled back first: Spark would not
        # start the query on it.
        existing = (recover_checkpoint(spark, checkpoint, _query_name(jwriter) or checkpoint)
                    if checkpoint else None)
        settings = self._rt.settings
        declared = {n.strip().lower() for n in settings.scheduler.non_replayable_sources.split(",")
                    if n.strip()}
        sources = source_names(plan)
        non_replayable = tuple(sorted({
            name for name in sources if _normalized(name) & (SOCKET_SOURCES | declared)}))
        info = QueryInfo(
            key="",  # Spark's query id, once it is started
            name=_query_name(jwriter),
            configured_partitions=int(spark.conf.get(SHUFFLE_PARTITIONS) or "200"),
            checkpoint_location=checkpoint,
            trigger_interval=_trigger_interval(jwriter),
            state_partitions=existing.shuffle_partitions
            if existing is not None and existing.has_state else None,
            stateful=is_stateful(plan),
            stream_join=has_stream_join(plan),
            tasks_follow_slots=any(name.startswith(FILE_SOURCE) for name in sources),
            non_replayable_sources=non_replayable,
        )
        warm_up = self._rt.warm_up
        driver = SparkQueryDriver(
            spark, jwriter, start, info,
            warm_up_wait=None if warm_up is None else warm_up.wait,
            shim_jar=settings.shim_jar, session_checkpoint_root=checkpoint is None
            and not memory_sink and _session_checkpoint_root(spark) is not None,
            local_slots=self._rt.local_slots)
        # Bounds a REST PUT persisted beside the checkpoint win over the defaults.
        persisted = self._rt.persisted.load(info)
        requirements = persisted or self._sched.default_requirements(info)
        support = driver.support_now(info.stateful)  # on the app's thread, as it starts
        first = self._rt.loop.call_sync(
            lambda: self._sched.plan_first_start(info, requirements, support))
        return driver, requirements, first, persisted is not None

    def cancel(self, key: str) -> None:
        self._rt.loop.call_sync(lambda: self._sched.cancel(key))

    def stop_with_savepoint(self, key: str) -> None:
        self._rt.loop.call_sync(lambda: self._sched.stop_with_savepoint(key))

    def snapshot(self, key: str) -> QuerySnapshot:
        result = self._rt.loop.call_sync(lambda: self._sched.query(key).snapshot())
        assert isinstance(result, QuerySnapshot)
        return result

    def close(self) -> None:
        """The SparkContext is stopping: no handle waits for the scheduler any more. One
        whose query runs (or ran) defers to that run, which the SparkContext's end ends
        as on plain Spark; one without any run ends CANCELED."""
        for handle in list(self._handles.values()):
            if not handle._finished.is_set():
                handle._on_context_stopping()

    # -- on the scheduler thread ---------------------------------------------------------
    def _on_state_change(self, change: StateChange) -> None:
        handle = self._handles.get(change.key)
        if handle is None:
            return
        if change.new is StateName.FINISHED:
            snap = self._sched.query(change.key).snapshot()
            handle._on_finished(snap.status, snap.error, snap.error_origin)
        elif change.old is StateName.STOP_WITH_SAVEPOINT and change.new not in (
                StateName.FAILING, StateName.CANCELING):
            # The query failed while stopping and is restarted: the stop is given up.
            handle._on_stop_given_up(f"{change.reason} (now {change.new})")


# -- reading the app's JVM DataStreamWriter ------------------------------------------------
#: Logical operators that keep state across micro-batches in a streaming plan.
_STATEFUL_OPERATORS = frozenset({
    "Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "Distinct",
    "FlatMapGroupsWithState", "FlatMapGroupsInPandasWithState", "TransformWithState",
    "TransformWithStateInPySpark", "GlobalLimit",
})


#: Leaves of a streaming plan that read a source; each has Spark's ``sourceName``.
_SOURCE_RELATIONS = frozenset({"StreamingRelation", "StreamingRelationV2",
                               "StreamingExecutionRelation"})


def _nodes(plan: Any) -> list[Any]:
    out, stack = [], [plan]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(seq_to_list(node.children()))
    return out


def is_stateful(plan: Any) -> bool:
    """Whether an analyzed streaming plan keeps state (a stream-static join does not)."""
    for node in _nodes(plan):
        name = node.getClass().getSimpleName()
        if name in _STATEFUL_OPERATORS and node.isStreaming():
            return True
        if _stream_stream_join(node):
            return True
    return False


def has_stream_join(plan: Any) -> bool:
    """Whether an analyzed streaming plan joins two streams (its state is the join's)."""
    return any(_stream_stream_join(node) for node in _nodes(plan))


def _stream_stream_join(node: Any) -> bool:
    return bool(node.getClass().getSimpleName() == "Join" and node.left().isStreaming()
                and node.right().isStreaming())


def source_names(plan: Any) -> set[str]:
    """The streaming sources an analyzed plan reads: the format each was read with
    (``socket``, ``kafka``, a class name) and, for data source V2, its provider class."""
    names: set[str] = set()
    for node in _nodes(plan):
        if node.getClass().getSimpleName() not in _SOURCE_RELATIONS:
            continue
        try:
            names.add(str(node.sourceName()))
        except Exception:
            names.add(str(node.toString()).split("[", 1)[0])
        try:
            provider = node.source()
            if provider.isDefined():
                names.add(str(provider.get().getClass().getName()))
        except Exception:
            pass  # a V1 relation, or a Spark without the field: the name is enough
    return names


def _normalized(name: str) -> set[str]:
    """A source name as it may be declared: the name itself and a class's simple name."""
    lower = name.strip().lower()
    return {lower, lower.rsplit(".", 1)[-1]}



def _private(jwriter: Any, name: str) -> Any:
    field = jwriter.getClass().getDeclaredField(name)
    field.setAccessible(True)
    return field.get(jwriter)


def _option(jwriter: Any, key: str) -> str | None:
    value = _private(jwriter, "extraOptions").get(key)
    return None if value.isEmpty() else str(value.get())


def _query_name(jwriter: Any) -> str | None:
    return _option(jwriter, "queryName")


def _session_checkpoint_root(spark: Any) -> str | None:
    return spark.conf.get("spark.sql.streaming.checkpointLocation", None) or None


def _checkpoint_location(spark: Any, jwriter: Any) -> str | None:
    """The query's checkpoint when it is known before the start: its own option, or the
    session-wide root plus its name. An unnamed query under the session's root gets a
    directory of a generated name at its start (the driver reads it from the started
    query)."""
    explicit = _option(jwriter, "checkpointLocation")
    if explicit:
        return explicit
    root = _session_checkpoint_root(spark)
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
def install_writer_hooks(manager_for: Callable[[Any], StreamingManager | None]) -> None:
    """Route ``DataStreamWriter.start`` and ``toTable`` to the manager of the writer's
    SparkContext (``manager_for(sc)``; None: spark-adaptive is not active there). Once per
    process: every SparkContext's runtime is found through the same ``manager_for``."""
    global _installed
    if _installed:
        return
    original_start = DataStreamWriter.start
    original_to_table = DataStreamWriter.toTable

    def _manager_for(writer: Any) -> StreamingManager | None:
        return manager_for(writer._spark.sparkContext)

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

        def unmanaged() -> Any:
            return original_start(self, path)

        if path is None:
            return manager.manage(self, lambda jw: jw.start(), unmanaged)
        return manager.manage(self, lambda jw: jw.start(path), unmanaged)

    def to_table(self: Any, tableName: str, format: str | None = None,  # noqa: A002,N803
                 outputMode: str | None = None, partitionBy: Any = None,  # noqa: N803
                 queryName: str | None = None, **options: Any) -> Any:  # noqa: N803
        manager = _manager_for(self)
        if manager is None:
            return original_to_table(self, tableName, format, outputMode, partitionBy, queryName,
                                     **options)
        _prepare(self, format, outputMode, partitionBy, queryName, options)
        return manager.manage(self, lambda jw: jw.toTable(tableName),
                              lambda: original_to_table(self, tableName))

    start.__doc__ = original_start.__doc__
    to_table.__doc__ = original_to_table.__doc__
    DataStreamWriter.start = start  # type: ignore[method-assign]
    DataStreamWriter.toTable = to_table  # type: ignore[method-assign]
    _installed = True
