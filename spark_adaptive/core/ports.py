"""The few things the core asks of the outside world.

The core decides; the boundary (:mod:`spark_adaptive.spark`) carries out. These
protocols are the whole contract between them. Unit tests implement them with
hand-written fakes; :mod:`spark_adaptive.spark.driver` and
:mod:`spark_adaptive.spark.actuator` implement them with py4j.

Operations that take time in Spark (stopping a query between micro-batches,
repartitioning its state, starting it) are asynchronous: the call returns at
once and the boundary calls ``on_done`` later, from any thread. The core wraps
every ``on_done`` so that it runs on the scheduler thread and only if the state
that asked is still current (``run_if_state``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class QueryInfo:
    """What the boundary knows about a query before it runs."""

    key: str
    """The query's id: Spark's query id of its first run (stable across restarts from one
    checkpoint)."""
    name: str | None
    configured_partitions: int
    """``spark.sql.shuffle.partitions`` the app started the query with."""
    checkpoint_location: str | None
    """Set only when the app gave one (option or ``spark.sql.streaming.checkpointLocation``)."""
    trigger_interval: float
    """Seconds between micro-batches; 0 for the default trigger."""
    state_partitions: int | None = None
    """Partitions of the state already in the checkpoint (None: no state yet or stateless)."""
    stateful: bool = False
    """The query's plan has stateful operators (aggregation, deduplication, stream-stream
    join, arbitrary state), read from its analyzed plan before the first start."""
    stream_join: bool = False
    """The query joins two streams (its state holds the join's buffered rows)."""
    tasks_follow_slots: bool = False
    """A source of the query sizes its tasks by the cluster (the file source splits its
    input by the default parallelism, the cores there are): its micro-batches' task count
    follows the slots, where another source's (Kafka's, the rate source's, a Python data
    source's) is its partitions."""
    non_replayable_sources: tuple[str, ...] = ()
    """Sources of the query that cannot replay their input (the socket source, or sources
    the user declared so): a restart would lose what they sent meanwhile, so the query is
    never restarted by spark-adaptive."""


@dataclass(frozen=True)
class RepartitionSupport:
    """Whether a query's partition count can change by a restart, and why not."""

    possible: bool
    reason: str


@dataclass(frozen=True)
class StartResult:
    ok: bool
    parallelism: int = 0
    query_id: str | None = None
    run_id: str | None = None
    error: str | None = None
    repartitioned: bool = False
    """True when the checkpoint's state was repartitioned before the start."""
    timings: tuple[tuple[str, float], ...] = ()
    """Named phases and their seconds, e.g. (("repartition", 2.4), ("start", 0.1))."""
    repartition_error: str | None = None
    """Why the state could not be repartitioned to the parallelism asked for: the
    checkpoint was then put back as it was, and the query started (``ok``) at
    ``parallelism``, the partitions its state has."""


@dataclass(frozen=True)
class StopResult:
    clean: bool
    """The checkpoint ends with a committed batch (no batch left unfinished)."""
    error: str | None = None
    """The query had failed by itself before or while being stopped."""
    timings: tuple[tuple[str, float], ...] = ()


class QueryDriver(Protocol):
    """Starts and stops one streaming query for the scheduler."""

    @property
    def info(self) -> QueryInfo: ...

    def repartition_support(self, stateful: bool,
                            on_done: Callable[[RepartitionSupport], None]) -> None:
        """Can the partition count change? ``stateful``: the query has state operators.
        Answers through ``on_done``: at once on the caller's thread when nothing needs
        reading, else from another thread once the checkpoint is read (the scheduler never
        waits for HDFS or an object store)."""
        ...

    def start(self, parallelism: int, on_done: Callable[[StartResult], None]) -> None:
        """Start the query at ``parallelism`` partitions.

        Repartitions the checkpoint's state first when the query is stateful and
        its state has a different partition count; should that fail, the query
        starts at the partitions its state has (``StartResult.repartition_error``
        says why). ``on_done`` reports the outcome.
        """
        ...

    def stop(self, clean: bool, on_done: Callable[[StopResult], None]) -> None:
        """Stop the running query.

        ``clean=True`` stops exactly between two micro-batches, leaving the
        checkpoint complete (finishing an interrupted batch if need be);
        ``clean=False`` stops at once (cancel). Stopping a query that is not
        running reports at once.
        """
        ...


@dataclass(frozen=True)
class StartedBatch:
    """A micro-batch that has started, as its entry in the query's offset log says: Spark
    writes that entry before it runs the batch, so what the batch reads is known while
    it runs, long before its progress event.

    * ``batch_id``: the batch.
    * ``started``: when it started (the log's batch timestamp), epoch seconds.
    * ``offsets``: each source's offsets the batch reads up to, as JSON, in the order of
      the query's sources; None for a source without one.
    """

    batch_id: int
    started: float
    offsets: tuple[str | None, ...]


class OffsetLog(Protocol):
    """Reads a streaming query's offset log (its checkpoint's ``offsets/N``), off the
    caller's thread: the scheduler never waits for HDFS or an object store."""

    def read(self, checkpoint_location: str, batch_id: int,
             on_done: Callable[[StartedBatch | None], None]) -> None:
        """Read the entry of ``batch_id`` and hand it to ``on_done`` (from any thread),
        None when there is none (yet) or it cannot be read. Returns at once; never
        raises. A read still waiting for the same checkpoint may be replaced by this one
        (only the newest batch matters)."""
        ...


@dataclass(frozen=True)
class ExecutorRelease:
    """An executor to release, and why (the actuator's log line says it)."""

    executor_id: str
    reason: str


class ExecutorActuator(Protocol):
    """Carries out the executor total (Spark's ExecutorAllocationClient calls); what to
    declare and which executors go is the
    :class:`~spark_adaptive.core.executors.reconciler.Reconciler`'s."""

    def request_total_executors(self, total: int,
                                release: Sequence[ExecutorRelease] = ()) -> Sequence[str]:
        """Release these executors, then declare ``total`` executors in all; returns the
        executors whose release was sent (none where the master cannot release any). A
        release Spark then refuses, or that fails, is reported back to the reconciler by
        the boundary."""
        ...

    def release_hung_executor(self, executor_id: str, reason: str) -> None:
        """An executor stopped answering: have it replaced, and have the driver drop it
        (and reschedule its tasks) now rather than when its process finally ends."""
        ...
