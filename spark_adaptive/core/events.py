"""What Spark tells us, as frozen pure-Python values.

The boundary (:mod:`spark_adaptive.spark.listener`, the JVM shim) turns Spark's
listener events into these; nothing past the boundary ever sees a JVM object.
``time`` is the event's own timestamp in epoch seconds where Spark gives one,
else the moment the boundary received it.

Sizes are bytes, durations seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Event:
    time: float


# -- executors -----------------------------------------------------------------
@dataclass(frozen=True)
class ExecutorAdded(Event):
    executor_id: str
    host: str
    cores: int


@dataclass(frozen=True)
class ExecutorRemoved(Event):
    executor_id: str
    reason: str


@dataclass(frozen=True)
class ExecutorHeartbeat(Event):
    """An executor's heartbeat reached the driver (Spark's ExecutorMetricsUpdate)."""

    executor_id: str


# -- jobs and stages -------------------------------------------------------------
@dataclass(frozen=True)
class StageSubmitted(Event):
    stage_id: int
    attempt: int
    num_tasks: int
    name: str = ""
    job_group: str | None = None


#: Names of the RDDs that read by an RDD helper's plan: this prefix, the plan's id and, after
#: a space, what the RDD reads where it has a name of its own (``textFile``'s path). The
#: listeners look for it among a completed stage's RDDs (``StageInfo.rddInfos``).
PLAN_RDD_PREFIX = "spark-adaptive plan "


def plan_of_rdd_name(name: str | None) -> str | None:
    """The plan id in an RDD's name (:data:`PLAN_RDD_PREFIX`), or None."""
    if not name or not name.startswith(PLAN_RDD_PREFIX):
        return None
    return name[len(PLAN_RDD_PREFIX):].split(" ", 1)[0] or None


@dataclass(frozen=True)
class StageCompleted(Event):
    stage_id: int
    attempt: int
    num_tasks: int
    input_bytes: int
    shuffle_read_bytes: int
    shuffle_write_bytes: int
    duration: float
    failure: str | None = None
    name: str = ""
    #: Task durations are not carried (that is what keeps the shim cheap), but the
    #: shim measures the slowest and the median task of the stage for skew reports.
    max_task_duration: float | None = None
    median_task_duration: float | None = None
    #: The sum of the stage's task durations (slot-seconds busy), from the shim.
    task_time: float | None = None
    #: The id of the RDD helper plan (``reduceByKey#3``, ``textFile#1``) an RDD of this
    #: stage reads by, from its name (:data:`PLAN_RDD_PREFIX`); None for any other stage.
    plan: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class JobStarted(Event):
    job_id: int
    stage_ids: tuple[int, ...]
    job_group: str | None = None
    #: The Spark SQL execution (one DataFrame action) the job belongs to, if any: with
    #: adaptive execution every query stage is a job of its own.
    execution_id: str | None = None


@dataclass(frozen=True)
class JobEnded(Event):
    job_id: int
    succeeded: bool
    failure: str | None = None


# -- streaming queries -----------------------------------------------------------
@dataclass(frozen=True)
class QueryStarted(Event):
    query_id: str
    run_id: str
    name: str | None


@dataclass(frozen=True)
class StateOperatorProgress:
    operator: str
    num_rows_total: int
    memory_used_bytes: int
    num_shuffle_partitions: int
    num_state_store_instances: int


@dataclass(frozen=True)
class SourceProgress:
    """One source of a micro-batch, as Spark reports it (``SourceProgress``)."""

    description: str
    num_input_rows: int
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    #: Source-specific figures (Kafka: minOffsetsBehindLatest, maxOffsetsBehindLatest,
    #: avgOffsetsBehindLatest, estimatedTotalBytesBehindLatest), as Spark's strings.
    metrics: tuple[tuple[str, str], ...] = ()
    #: The offsets the batch ended at and the latest the source offered, as JSON (a number,
    #: or Kafka's ``{"topic": {"partition": offset}}``); None when not reported.
    end_offset: str | None = None
    latest_offset: str | None = None
    #: The offsets the batch started at, as JSON; None when not reported (a first batch).
    start_offset: str | None = None

    def metric(self, name: str) -> float | None:
        """A numeric metric, or None when absent or not a number."""
        for key, value in self.metrics:
            if key == name:
                try:
                    return float(value)
                except (TypeError, ValueError):
                    return None
        return None


@dataclass(frozen=True)
class QueryProgress(Event):
    query_id: str
    run_id: str
    name: str | None
    batch_id: int
    num_input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    batch_duration: float
    trigger_execution: float
    state_operators: tuple[StateOperatorProgress, ...] = field(default_factory=tuple)
    sources: tuple[SourceProgress, ...] = field(default_factory=tuple)

    @property
    def state_partitions(self) -> int | None:
        """Partitions of the stateful operators, None for a stateless query."""
        parts = [s.num_shuffle_partitions for s in self.state_operators]
        return max(parts) if parts else None


@dataclass(frozen=True)
class QueryIdle(Event):
    query_id: str
    run_id: str


@dataclass(frozen=True)
class QueryTerminated(Event):
    query_id: str
    run_id: str
    exception: str | None
    error_class: str | None = None


SPARK_EVENTS = (
    ExecutorAdded,
    ExecutorRemoved,
    ExecutorHeartbeat,
    StageSubmitted,
    StageCompleted,
    JobStarted,
    JobEnded,
)
QUERY_EVENTS = (QueryStarted, QueryProgress, QueryIdle, QueryTerminated)
BATCH_BOUNDARIES = (QueryProgress, QueryIdle)
"""Events after which no micro-batch of their run runs: one completed (progress), or the
trigger found no new data and ran none (idle, Spark 3.5 and later)."""
