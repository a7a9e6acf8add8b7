"""Starting and stopping one streaming query for the scheduler (the QueryDriver port).

The driver keeps the app's own JVM ``DataStreamWriter``: every start of the
query, the first one included, is ``writer.start()`` on it, so the query keeps
its sink, options, trigger and checkpoint, and Spark gives it the same query id
each time (the id lives in the checkpoint).

**Parallelism.** A query's parallelism is its partition count. At a start the
driver sets ``spark.sql.shuffle.partitions`` on the query's session just for
that call (Spark copies the session for the query while ``start()`` runs, then
the old value is put back), which fixes the shuffle partitions of a stateless
query (Spark >= 4.1 lets them change on restart) and of a stateful query's
first run. A stateful query's partitions are fixed in its checkpoint: when
they differ from the decided parallelism, the driver repartitions the state
offline first (``StreamingCheckpointManager.repartition``, RocksDB state store).
A repartition that fails twice is rolled back
(:func:`~spark_adaptive.spark.checkpoint.roll_back_unfinished_repartition`) and
the query starts again at the partitions it had, saying why
(``StartResult.repartition_error``); one a dead driver left unfinished is rolled
back before the next start (:func:`recover_checkpoint`). Either way no batch is
lost or run twice, and the query goes on.

**Clean stop.** Spark's ``stop()`` interrupts whatever runs, and a stop during
a micro-batch leaves it unfinished: the repartition then refuses the
checkpoint and an exactly-once sink would see the batch twice. Spark has no
graceful stop for Structured Streaming, but its micro-batch loop constructs a
new batch only while the query's state is ACTIVE, and ends once a trigger
finds it is not. The driver therefore first sets that state to TERMINATED
without interrupting anything: the batch running now finishes and commits, and
no new one starts. Once no trigger is active, ``stop()`` only cuts short the
wait for the next trigger. A query saturated with back-to-back batches is
stopped as soon as its current batch is done, not whenever a gap appears.
The state must not change while a batch is being built: Spark checks it again
before running a batch whose offsets are already written, and abandons that
batch. With the JVM shim the state is therefore changed exactly at a batch
boundary, under the query's own progress lock (``BatchBoundary``); without it,
at once.

Afterwards the driver checks the checkpoint anyway. If a batch was caught
unfinished (a trigger that passed its ACTIVE check an instant before), it
finishes that one batch by running the query once more with a one-shot
trigger, and puts the app's trigger back.

A cancel (``stop(clean=False)``) does not wait for a clean stop in progress:
the clean stop gives up waiting for its micro-batch and stops the query at
once, as the cancel would, so ``stop()`` returns as fast as Spark's own.

**Failed starts.** An error Spark's ``start()`` raised is kept as it was
(:attr:`SparkQueryDriver.start_error`, for the app's handle to raise as
``start()`` would have) and reported with its error class; an
``AnalysisException`` or an unreadable checkpoint metadata file is reported
as unrecoverable (``FailedStart.recoverable``): starting again meets it again.

Operations run on a thread of their own and report through ``on_done``; the
scheduler routes those back to its own thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.ports import QueryInfo, RepartitionSupport, StartResult, StopResult
from spark_adaptive.core.streaming.restart import FailedStart
from spark_adaptive.spark.checkpoint import (
    BROKEN_JOIN_FORMATS,
    JOIN_FORMAT_KEY,
    PROVIDER_KEY,
    ROCKSDB_PROVIDER,
    CheckpointState,
    describe_roll_back,
    inspect_checkpoint,
    roll_back_unfinished_repartition,
)
from spark_adaptive.spark.jvm import error_text, jvm, new_shim_object, shim_jar_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

#: Spark copies the session conf while ``start()`` runs; one start at a time.
_START_LOCK = threading.Lock()
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: Longest wait of a restart for executors being warmed up (seconds).
WARM_UP_WAIT_LIMIT = 10.0
#: Longest single wait of the shim for a batch boundary (seconds): a clean stop looks for a
#: cancel between two.
HOLD_SLICE = 0.2
#: Spark's refusals to repartition a checkpoint's state that no retry changes (the
#: conditions of STATE_REPARTITION_INVALID_CHECKPOINT about what the checkpoint holds): the
#: query is rescaled live only from then on.
REFUSED_FOR_GOOD = frozenset({
    "STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_STATEFUL_OPERATOR",
    "STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_TRANSFORM_WITH_STATE_VARIABLE_TYPE",
    "STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER",
    "STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_OFFSET_SEQ_VERSION",
    "STATE_REPARTITION_INVALID_CHECKPOINT.MISSING_OFFSET_SEQ_METADATA",
    # A streaming limit's state (operator globalLimit): Spark cannot read its schema.
    "STDS_FAILED_TO_READ_STATE_SCHEMA",
})


class SparkQueryDriver:
    """Drives one query through the app's JVM ``DataStreamWriter``."""

    def __init__(self, spark: SparkSession, jwriter: Any, start: Callable[[Any], Any],
                 info: QueryInfo, poll_interval: float = 0.01,
                 clean_stop_timeout: float = 120.0,
                 warm_up_wait: Callable[[float], bool] | None = None,
                 shim_jar: str = "", session_checkpoint_root: bool = False,
                 local_slots: int | None = None) -> None:
        """``start(jwriter)`` starts the query (``jwriter.start()``, ``start(path)`` or
        ``toTable(name)``, as the app asked) and returns the JVM ``StreamingQuery``.
        ``warm_up_wait(timeout)`` blocks while executors that joined are being warmed up
        (:class:`~spark_adaptive.core.streaming.warm_up.WarmUp`); a restart calls it first.
        ``session_checkpoint_root``: the query has no checkpoint of its own but the
        session's ``spark.sql.streaming.checkpointLocation`` gives it one under a name
        Spark generates at the first start; the driver reads it from the started query
        and restarts on it. ``local_slots``: the app runs in local mode with that many
        task slots (a fixed pool: the partitions never change)."""
        self._spark = spark
        self._jwriter = jwriter
        self._start = start
        self._info = info
        self._poll = poll_interval
        self._clean_stop_timeout = clean_stop_timeout
        self._warm_up_wait = warm_up_wait
        self._shim_jar = shim_jar
        self._boundary: Any = None
        self._session_checkpoint_root = session_checkpoint_root
        self._local_slots = local_slots
        self._refused: str | None = None  # why Spark refuses to repartition its state, for good
        self._last_parallelism = 0
        self._run_changed = threading.Condition()
        self.earlier_progress: list[Any] = []
        """Progress updates of the runs before the current one (newest last, bounded)."""
        self._lock = threading.Lock()
        self._cancels = 0
        """Cancels asked for so far: a clean stop asked for before the latest one gives up
        waiting for its micro-batch."""
        self.start_error: BaseException | None = None
        """The error Spark's ``start()`` raised at the last start, if it failed there."""
        self.current: StreamingQuery | None = None
        """The PySpark handle of the run going on now (or of the last one)."""
        self.previous: StreamingQuery | None = None
        self.runs = 0
        self.on_new_run: Callable[[StreamingQuery], None] | None = None

    @property
    def info(self) -> QueryInfo:
        return self._info

    # -- what can change ----------------------------------------------------------------
    def repartition_support(self, stateful: bool,
                            on_done: Callable[[RepartitionSupport], None]) -> None:
        """Answers at once when nothing needs reading; a stateful query's state store
        provider is read from its checkpoint on a thread of its own (after any operation of
        the query in flight)."""
        if not (stateful and self._reads_checkpoint()):
            on_done(self.support_now(stateful))
            return
        self._run_async("read its checkpoint", lambda: self.support_now(stateful), on_done,
                        lambda e: RepartitionSupport(False, (
                            f"its checkpoint could not be read ({_text(e)}); it keeps its "
                            "partitions until a new run reads it")))

    def _reads_checkpoint(self) -> bool:
        """Whether :meth:`support_now` reads the checkpoint (a file system call)."""
        return (self._local_slots is None and not self._info.non_replayable_sources
                and self._info.checkpoint_location is not None)

    def support_now(self, stateful: bool) -> RepartitionSupport:
        """Whether the partition count can change, read now on the caller's thread (the
        app's, at the first start; a thread of the driver's later)."""
        if self._local_slots is not None:
            return RepartitionSupport(False, (
                f"local mode: its task slots are the {self._local_slots} local cores and "
                "cannot change, so the query keeps the partitions it was started with"))
        if self._refused is not None:
            return RepartitionSupport(False, self._refused)
        sources = self._info.non_replayable_sources
        if sources:
            return RepartitionSupport(False, (
                f"its source {', '.join(sources)} cannot replay its input, so a restart "
                "would lose what it sent meanwhile"))
        loc = self._info.checkpoint_location
        # An unnamed query under the session's checkpoint root gets a checkpoint of its own
        # at its first start (Spark names its directory then): planned as having one.
        if loc is None and not self._session_checkpoint_root:
            return RepartitionSupport(False, (
                "the query has no checkpoint location, so a restart would begin again from "
                "its sources' starting offsets and lose its state; set the checkpointLocation "
                "option to let spark-adaptive change its partitions"))
        if stateful:
            provider, join_format = self._state_conf()
            if provider != ROCKSDB_PROVIDER:
                return RepartitionSupport(False, (
                    f"its state store provider is {provider}; Spark repartitions state offline "
                    f"only for the RocksDB provider (set {PROVIDER_KEY}={ROCKSDB_PROVIDER})"))
            if self._info.stream_join and join_format in BROKEN_JOIN_FORMATS:
                return RepartitionSupport(False, (
                    f"its stream-stream join keeps state in format {join_format} "
                    f"({JOIN_FORMAT_KEY}), which Spark's offline repartition leaves unreadable "
                    "(the restarted query fails); it is rescaled live only"))
            return RepartitionSupport(True, "stateful query on the RocksDB state store with a "
                                            "checkpoint: its state can be repartitioned")
        return RepartitionSupport(True, "stateless query with a checkpoint: its shuffle "
                                        "partitions can change at a restart")

    def _state_conf(self) -> tuple[str, str | None]:
        """The state store provider and join state format the query's state is kept with:
        as its checkpoint's last batch recorded them, else the session's (a first start)."""
        loc = self._info.checkpoint_location
        cp = inspect_checkpoint(self._spark, loc) if loc is not None else None
        provider = cp.state_provider if cp is not None else None
        if not provider:
            default = jvm(self._spark.sparkContext).org.apache.spark.sql.internal.SQLConf \
                .STATE_STORE_PROVIDER_CLASS().defaultValueString()
            provider = str(self._spark.conf.get(PROVIDER_KEY, default))
        join_format = cp.join_state_format if cp is not None and cp.last_offset is not None \
            else self._spark.conf.get(JOIN_FORMAT_KEY, None)
        return provider, join_format

    # -- operations ----------------------------------------------------------------------
    def start_first(self, parallelism: int) -> StartResult:
        """Start the query's first run now, on the caller's (the app's) thread, as Spark's
        ``start()`` would; Spark's exceptions propagate untouched. The query's key becomes
        Spark's query id, and a checkpoint Spark created under the session's root becomes
        the query's own for every later start."""
        t0 = time.monotonic()
        jquery = self._start_with_partitions(parallelism)
        elapsed = time.monotonic() - t0
        checkpoint = self._info.checkpoint_location
        if checkpoint is None and self._session_checkpoint_root:
            checkpoint = str(jquery.streamingQuery().resolvedCheckpointRoot())
        self._info = dataclasses.replace(self._info, key=str(jquery.id().toString()),
                                         checkpoint_location=checkpoint)
        self._took_run(jquery, parallelism)
        return StartResult(ok=True, parallelism=parallelism, query_id=self._info.key,
                           run_id=str(jquery.runId().toString()),
                           timings=(("start", elapsed),))

    def _took_run(self, jquery: Any, parallelism: int) -> None:
        from pyspark.sql.streaming.query import StreamingQuery

        with self._run_changed:
            previous = self.current
            if previous is not None:
                try:
                    self.earlier_progress = (self.earlier_progress
                                             + list(previous.recentProgress))[-100:]
                except Exception:  # the JVM may be going down; progress is informative
                    pass
            self.previous, self.current = previous, StreamingQuery(jquery)
            self.runs += 1
            self._last_parallelism = parallelism
            self._run_changed.notify_all()

    def wait_for_run_after(self, run: Any, timeout: float) -> None:
        """Block until a run other than ``run`` is current, at most ``timeout`` seconds."""
        with self._run_changed:
            self._run_changed.wait_for(lambda: self.current is not run, timeout)

    def start(self, parallelism: int, on_done: Callable[[StartResult], None]) -> None:
        self._run_async(f"start at {parallelism}", lambda: self._start_now(parallelism), on_done,
                        self._failed_start)

    def stop(self, clean: bool, on_done: Callable[[StopResult], None]) -> None:
        # Called on the scheduler thread. A cancel counts itself at once, before its turn
        # comes: a clean stop asked for earlier sees the count change while it waits.
        asked = self._cancels
        if not clean:
            self._cancels += 1

        def op() -> StopResult:
            return self._stop_now(clean, lambda: self._cancels != asked)

        self._run_async("clean stop" if clean else "stop", op, on_done,
                        lambda e: StopResult(clean=False, error=_text(e)))

    def _run_async(self, what: str, op: Callable[[], Any], on_done: Callable[[Any], None],
                   on_error: Callable[[str | BaseException], Any]) -> None:
        def run() -> None:
            with self._lock:  # one operation of this query at a time, in order
                if self._spark.sparkContext._jsc is None:
                    on_done(on_error("the SparkContext has stopped"))
                    return
                try:
                    result = op()
                except Exception as e:  # the scheduler logs what it does about it
                    log.debug("%s of query %s failed", what, self._info.key, exc_info=True)
                    result = on_error(e)
            on_done(result)

        threading.Thread(target=run, name=f"spark-adaptive-{self._info.key}-{what}",
                         daemon=True).start()

    def _failed_start(self, error: str | BaseException) -> StartResult:
        """A start that failed: with Spark's error class, and recoverable unless starting
        again cannot succeed (an error of Spark's ``start()`` itself, see
        :func:`unrecoverable_start_error`)."""
        if isinstance(error, _StartRefused):
            spark_error = error.error
            self.start_error = spark_error
            return FailedStart(error=error_text(spark_error), error_class=_error_class(spark_error),
                               recoverable=not unrecoverable_start_error(spark_error))
        self.start_error = None
        return FailedStart(error=_text(error))

    def _start_now(self, parallelism: int) -> StartResult:
        self.start_error = None
        timings: list[tuple[str, float]] = []
        repartitioned = False
        if self.runs and self._warm_up_wait is not None and parallelism > self._last_parallelism:
            # A restart onto more partitions: let executors that just joined warm up first,
            # so that neither the repartition nor the first micro-batch pays their first-task
            # costs.
            t0 = time.monotonic()
            self._warm_up_wait(WARM_UP_WAIT_LIMIT)
            waited = time.monotonic() - t0
            if waited >= 0.01:
                timings.append(("warm-up", waited))
        loc = self._info.checkpoint_location
        repartition_error = None
        if loc is not None:
            cp = self.recover_checkpoint(loc)
            if cp.has_state and cp.shuffle_partitions not in (None, parallelism):
                if not cp.complete:
                    timings.append(("finish-batch", self._finish_unfinished_batch(cp)))
                t0 = time.monotonic()
                repartition_error = self._repartition(cp, parallelism)
                timings.append(("repartition", time.monotonic() - t0))
                if repartition_error is None:
                    repartitioned = True
                else:  # the checkpoint is back at its last committed batch: start there
                    parallelism = cp.shuffle_partitions or parallelism
        t0 = time.monotonic()
        try:
            jquery = self._start_with_partitions(parallelism)
        except Exception as e:
            raise _StartRefused(e) from e
        timings.append(("start", time.monotonic() - t0))
        self._took_run(jquery, parallelism)
        if self.on_new_run is not None and self.current is not None:
            self.on_new_run(self.current)
        return StartResult(ok=True, parallelism=parallelism, query_id=str(jquery.id().toString()),
                           run_id=str(jquery.runId().toString()), repartitioned=repartitioned,
                           timings=tuple(timings), repartition_error=repartition_error)

    def _start_with_partitions(self, parallelism: int) -> Any:
        """Start at ``parallelism`` shuffle partitions: the session's setting and, after the
        first run, the query's checkpoint are given to Spark for this one call only, so
        the app's session and writer are left as the app made them."""
        conf = self._spark.conf
        with _START_LOCK:
            before = conf.get(SHUFFLE_PARTITIONS, None)  # None: the session never set it
            options = None
            checkpoint = self._info.checkpoint_location
            if self.runs and checkpoint is not None and self._session_checkpoint_root:
                options = _private_field(self._jwriter, "extraOptions")
                self._jwriter.option("checkpointLocation", checkpoint)
            conf.set(SHUFFLE_PARTITIONS, str(parallelism))
            try:
                return self._start(self._jwriter)
            finally:
                if before is None:
                    conf.unset(SHUFFLE_PARTITIONS)  # as it was: unset, not set to the default
                else:
                    conf.set(SHUFFLE_PARTITIONS, str(before))
                if options is not None:
                    _set_private_field(self._jwriter, "extraOptions", options)

    def recover_checkpoint(self, location: str) -> CheckpointState:
        """The checkpoint as a start finds it, after rolling back the unfinished state
        repartition a driver that died during one left (one WARNING line says so)."""
        return recover_checkpoint(self._spark, location, self._label)

    def _repartition(self, cp: CheckpointState, parallelism: int) -> str | None:
        """Repartition the state of the stopped query from ``cp.shuffle_partitions`` to
        ``parallelism``; None once done. Spark's repartition switches to the new
        partitions with one file, its commit, but one that failed before it leaves a
        batch after which Spark accepts nothing but that same repartition. So it is
        retried once (Spark continues the batch it left); should that fail too, the
        checkpoint is rolled back to its last committed batch and the reason is returned:
        the query then starts at the partitions it had. One WARNING line says what
        happened. Raises only if the roll-back fails."""
        manager = self._spark._streamingCheckpointManager
        errors: list[str] = []
        for _ in range(2):
            try:
                manager.repartition(cp.location, parallelism)
            except Exception as e:
                errors.append(error_text(e))
                if _error_class(e) in REFUSED_FOR_GOOD:
                    self._refuse(_error_class(e), errors[-1])
                    break  # no retry changes what the checkpoint holds
                continue
            if errors:
                log.warning("query %s: repartitioning its state in %s from %s to %d partitions "
                            "failed (%s); the retry succeeded", self._label, cp.location,
                            cp.shuffle_partitions, parallelism, errors[0])
            return None
        failed = inspect_checkpoint(self._spark, cp.location)
        if failed.complete and failed.shuffle_partitions == parallelism:
            log.warning("query %s: repartitioning its state in %s from %s to %d partitions "
                        "reported a failure (%s), but its batch committed", self._label,
                        cp.location, cp.shuffle_partitions, parallelism, "; then ".join(errors))
            return None
        undone = roll_back_unfinished_repartition(self._spark, failed)
        state = (describe_roll_back(failed) if undone is not None else
                 f"its checkpoint is unchanged, at its last committed batch {failed.last_commit}")
        log.warning("query %s: repartitioning its state in %s from %s to %d partitions failed "
                    "twice (%s); %s; the query goes on at its %s partitions", self._label,
                    cp.location, cp.shuffle_partitions, parallelism, "; then ".join(errors),
                    state, cp.shuffle_partitions)
        return errors[-1]

    def _refuse(self, condition: str | None, error: str) -> None:
        """Spark refuses to repartition this query's state for good (an operator or a state
        format its offline repartition does not support): from now on the query keeps its
        partitions and is rescaled live only; said once."""
        self._refused = (f"Spark cannot repartition its state ({condition}: "
                         f"{error.splitlines()[0] if error else ''}), so it keeps its "
                         "partitions and is rescaled live only")
        log.warning("query %s: %s", self._label, self._refused)

    @property
    def _label(self) -> str:
        return self._info.name or self._info.key or "(starting)"

    def _stop_now(self, clean: bool, canceled: Callable[[], bool] = lambda: False) -> StopResult:
        """Stop the current run; ``clean``: between two micro-batches, unless ``canceled()``
        turns true meanwhile (a cancel came: the run is stopped at once, as the cancel
        would, and its unfinished batch is left for a later run to replay)."""
        q = self.current
        timings: list[tuple[str, float]] = []
        if q is None or not q.isActive:
            return StopResult(clean=self._checkpoint_complete(), error=_failure_of(q))
        t0 = time.monotonic()
        if clean:
            self._let_current_batch_finish(q, canceled)
        q._jsq.stop()
        timings.append(("stop", time.monotonic() - t0))
        error = _failure_of(q)
        loc = self._info.checkpoint_location
        if clean and loc is not None and error is None and not canceled():
            cp = inspect_checkpoint(self._spark, loc)
            if not cp.complete:
                timings.append(("finish-batch", self._finish_unfinished_batch(cp)))
        return StopResult(clean=self._checkpoint_complete(), error=error, timings=tuple(timings))

    def _let_current_batch_finish(self, q: StreamingQuery,
                                  canceled: Callable[[], bool] = lambda: False) -> None:
        """Stop new batches from starting; return once the running one has finished, or
        at once when ``canceled()`` turns true (checked while waiting).

        With the JVM shim, :class:`BatchBoundary` holds the batches back at the exact
        boundary (see its doc). Without it, the state is set to TERMINATED at once: a
        batch that has not yet passed its last state check then abandons itself, and the
        checkpoint check after the stop finishes it. After the timeout the stop that
        follows interrupts the batch, and the checkpoint check finishes it afterwards.
        """
        jquery = q._jsq
        if self._hold_at_boundary(jquery, canceled):
            return
        try:
            execution = jquery.streamingQuery()  # the StreamExecution behind the wrapper
            terminated = jvm(self._spark.sparkContext).java.lang.Class.forName(
                execution.state().get().getClass().getPackageName() + ".TERMINATED$"
            ).getField("MODULE$").get(None)
            execution.state().set(terminated)
        except Exception as e:  # a Spark without this internal: poll for a gap instead
            log.debug("cannot hold back new micro-batches of %s (%s); polling for a gap",
                      self._info.key, e)
        deadline = time.monotonic() + self._clean_stop_timeout
        while time.monotonic() < deadline:
            if canceled() or not jquery.status().isTriggerActive():
                return
            time.sleep(self._poll)
        log.warning("query %s kept a micro-batch running for %.0fs; stopping it anyway and "
                    "finishing that batch afterwards", self._info.key, self._clean_stop_timeout)

    def _hold_at_boundary(self, jquery: Any, canceled: Callable[[], bool]) -> bool:
        """Hold back new batches at the next batch boundary through the shim; False when
        the shim is missing or could not (the caller falls back). The shim waits in
        slices of ``HOLD_SLICE`` seconds, so that a cancel is seen between two."""
        jar = shim_jar_path(self._shim_jar)
        if jar is None:
            return False
        deadline = time.monotonic() + self._clean_stop_timeout
        try:
            if self._boundary is None:
                self._boundary = new_shim_object(self._spark.sparkContext, "BatchBoundary", jar)
            execution = jquery.streamingQuery()
            while True:
                left = deadline - time.monotonic()
                held = bool(self._boundary.holdNewBatches(
                    execution, max(1, int(min(left, HOLD_SLICE) * 1000))))
                if held or canceled():
                    return True
                if time.monotonic() >= deadline:
                    break
        except Exception as e:  # an older shim jar, or a Spark without these internals
            log.debug("the shim cannot hold back micro-batches of %s (%s); falling back",
                      self._info.key, error_text(e))
            return False
        if not held:
            log.warning("query %s kept a micro-batch running for %.0fs; stopping it anyway and "
                        "finishing that batch afterwards", self._info.key,
                        self._clean_stop_timeout)
        return True

    def _finish_unfinished_batch(self, cp: CheckpointState) -> float:
        """Run the query once with a one-shot trigger: it re-runs just the unfinished batch."""
        t0 = time.monotonic()
        log.info("the last micro-batch %s of %s did not finish; running it once more before "
                 "going on", cp.last_offset, cp.location)
        field = self._jwriter.getClass().getDeclaredField("trigger")
        field.setAccessible(True)
        original = field.get(self._jwriter)
        once = jvm(self._spark.sparkContext).org.apache.spark.sql.streaming.Trigger.Once()
        self._jwriter.trigger(once)
        try:
            jquery = self._start_with_partitions(cp.shuffle_partitions or 1)
            jquery.awaitTermination()
        finally:
            self._jwriter.trigger(original)
        return time.monotonic() - t0

    def _checkpoint_complete(self) -> bool:
        loc = self._info.checkpoint_location
        return True if loc is None else inspect_checkpoint(self._spark, loc).complete


def recover_checkpoint(spark: SparkSession, location: str, query: str) -> CheckpointState:
    """What a checkpoint says before a start, once an unfinished state repartition left in
    it (by a driver that died during one) is rolled back, in one WARNING line: Spark would
    refuse to start the query at all on it. Raises if the store refuses the roll-back."""
    cp = inspect_checkpoint(spark, location)
    undone = roll_back_unfinished_repartition(spark, cp)
    if undone is None:
        return cp
    log.warning("query %s: its checkpoint %s ended with a state repartition that did not "
                "finish; %s", query, location, describe_roll_back(cp))
    return undone


def _private_field(obj: Any, name: str) -> Any:
    field = obj.getClass().getDeclaredField(name)
    field.setAccessible(True)
    return field.get(obj)


def _set_private_field(obj: Any, name: str, value: Any) -> None:
    field = obj.getClass().getDeclaredField(name)
    field.setAccessible(True)
    field.set(obj, value)


class _StartRefused(Exception):
    """Spark's ``start()`` raised ``error`` (as opposed to a step before it)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _text(error: str | BaseException) -> str:
    return error if isinstance(error, str) else error_text(error)


def _java_chain(error: BaseException) -> list[Any]:
    """The JVM exception behind a PySpark or py4j error, and its causes (none when the
    error did not come from the JVM, or the JVM is gone)."""
    java = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
    chain: list[Any] = []
    try:
        while java is not None and len(chain) < 20:
            chain.append(java)
            java = java.getCause()
    except Exception:  # the JVM is going down: what was read so far
        pass
    return chain


#: JVM exceptions from ``DataStreamWriter.start()`` that starting again meets again: Spark's
#: analysis of the query, and a checkpoint metadata file that is not JSON.
UNRECOVERABLE_START_ERRORS = ("org.apache.spark.sql.AnalysisException",
                              "com.fasterxml.jackson.core.JsonProcessingException")


def unrecoverable_start_error(error: BaseException) -> bool:
    """Whether an error that Spark's ``start()`` raised comes back at every start: an
    ``AnalysisException`` (the path is missing, the query is not supported, ...) or a
    checkpoint metadata file that cannot be parsed. Other errors (the file system, a
    concurrent run still stopping) may pass."""
    from pyspark.errors import AnalysisException

    if isinstance(error, AnalysisException):
        return True
    for java in _java_chain(error):
        try:
            cls = java.getClass()
            while cls is not None:
                if str(cls.getName()) in UNRECOVERABLE_START_ERRORS:
                    return True
                cls = cls.getSuperclass()
        except Exception:  # the JVM is going down: nothing says it cannot recover
            return False
    return False


def _error_class(error: BaseException) -> str | None:
    """Spark's error class (condition) of an error, if it has one: PySpark's, else the
    JVM exception's."""
    for source in (error, *_java_chain(error)[:1]):
        try:
            value = source.getCondition()
        except Exception:  # not a SparkThrowable, or the JVM is gone
            continue
        if value:
            return str(value)
    return None


def _failure_of(q: StreamingQuery | None) -> str | None:
    if q is None:
        return None
    try:
        e = q._jsq.exception()
    except Exception:
        return None
    if e is None or (hasattr(e, "isEmpty") and e.isEmpty()):
        return None
    inner = e.get() if hasattr(e, "get") else e
    return str(inner.toString())
