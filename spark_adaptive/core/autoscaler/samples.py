"""The autoscaler's inputs: one sample per micro-batch, one view per evaluation.

Both are frozen values made at the boundary and handed in; the policy keeps no
reference to Spark. Units: seconds, rows, rows per second, slot-seconds.

:class:`LoadSample` trusts only ``time``, ``slots`` and ``partitions``. Every
other field may be missing (None) or wrong (NaN, infinite, negative): Spark
leaves ``processedRowsPerSecond`` at 0 for an empty batch, a source without
offsets reports no backlog, a listener may miss the stage metrics that give
busy time. :func:`clean` turns each bad value into None so that the window
never sees one; the policy then decides with what is left or says why it
cannot.

:class:`QueryView` is what the scheduler knows about the query at an
evaluation. It is trusted less than it looks: the policy re-checks it and
answers "not now" (never raises) when it is inconsistent.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from spark_adaptive.core.autoscaler.forecast import Forecast
from spark_adaptive.core.events import QueryProgress


@dataclass(frozen=True, slots=True)
class LoadSample:
    """What one completed micro-batch says about the load and the query's capacity.

    * ``time``: when the batch completed, from the injected clock (seconds).
    * ``slots`` / ``partitions``: the task slots and the partition count it ran on.
    * ``batch_id``: Spark's batch id; a repeated id is ignored.
    * ``num_input_rows``: rows the batch read.
    * ``input_rows_per_second`` / ``processed_rows_per_second``: Spark's rates.
    * ``batch_duration``: wall time of the batch (seconds).
    * ``trigger_interval``: the query's processing-time trigger (seconds); 0 runs
      batches back to back.
    * ``backlog``: rows the source still holds beyond this batch (Kafka: offsets
      behind latest), None when the source reports none.
    * ``busy_time``: total task run time of the batch's stages, in slot-seconds.
    * ``tasks``: how many tasks the batch's stages ran in all, None when unknown.
    * ``stage_tasks``: the tasks of a batch that ran in one stage (no shuffle: its
      source's partitions), None for a batch of more stages or when unknown.
    """

    time: float
    slots: int
    partitions: int
    batch_id: int | None = None
    num_input_rows: float | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    batch_duration: float | None = None
    trigger_interval: float | None = None
    backlog: float | None = None
    busy_time: float | None = None
    tasks: int | None = None
    stage_tasks: int | None = None

    @classmethod
    def from_progress(
        cls,
        progress: QueryProgress,
        *,
        time: float,
        slots: int,
        partitions: int,
        trigger_interval: float | None = None,
        backlog: float | None = None,
        busy_time: float | None = None,
        tasks: int | None = None,
        stage_tasks: int | None = None,
    ) -> LoadSample:
        """A sample from Spark's progress event plus what the wiring measures itself.

        ``time`` comes from the injected clock, not from the event, so that it is
        comparable with :attr:`QueryView.now`.
        """
        return cls(
            time=time, slots=slots, partitions=partitions, batch_id=progress.batch_id,
            num_input_rows=progress.num_input_rows,
            input_rows_per_second=progress.input_rows_per_second,
            processed_rows_per_second=progress.processed_rows_per_second,
            batch_duration=progress.batch_duration, trigger_interval=trigger_interval,
            backlog=backlog, busy_time=busy_time, tasks=tasks, stage_tasks=stage_tasks)


@dataclass(frozen=True, slots=True)
class QueryView:
    """The query as the scheduler sees it at one evaluation.

    * ``now``: the injected clock (seconds).
    * ``slots`` / ``partitions``: what it runs on now.
    * ``lower`` / ``upper``: its parallelism bounds (partition counts).
    * ``max_useful_slots``: the most tasks it can run at once regardless of its
      partition count (a stateless query's source partitions); None means its
      partition count, which a restart changes.
    * ``can_restart``: the partition count can change (checkpoint, RocksDB state);
      otherwise only live rescales apply.
    * ``restart_downtimes``: downtime of each restart rescale in the query's rescale
      history (its newest records; restarts after a failure left out).
    * ``rescale_in_flight``: a rescale was requested and has not completed.
    * ``last_rescale_completed``: when the last rescale (of any cause) completed;
      the query's start counts as one.
    * ``slots_per_executor``: slot targets are whole executors.
    * ``cluster_max_slots``: the most slots the query could be given, if known.
    * ``slot_upper``: the most slots it may be given, when more than ``upper`` (a
      stateless query whose source has more partitions than its default bounds
      allow: plain Spark runs those tasks on as many executors); None: ``upper``.
    * ``forecast``: the rate its recurring load is forecast to reach within the horizon
      ahead (:mod:`.forecast`); None with ``forecast.enabled=false``.
    """

    now: float
    slots: int
    partitions: int
    lower: int = 1
    upper: int = 32768
    max_useful_slots: int | None = None
    can_restart: bool = True
    restart_downtimes: tuple[float, ...] = ()
    rescale_in_flight: bool = False
    last_rescale_completed: float | None = None
    slots_per_executor: int = 1
    cluster_max_slots: int | None = None
    slot_upper: int | None = None
    forecast: Forecast | None = None

    def problem(self) -> str | None:
        """Why this view cannot be evaluated, or None when it can."""
        if not _finite(self.now):
            return f"the clock reads {self.now!r}"
        for name in ("slots", "partitions", "lower", "upper", "slots_per_executor",
                     "max_useful_slots", "cluster_max_slots", "slot_upper"):
            value = getattr(self, name)
            if value is not None and not _whole(value):
                return f"{name} is {value!r}, not a whole number"
        if self.slots < 1:
            return f"the query runs on {self.slots} slots"
        if self.partitions < 1:
            return f"the query has {self.partitions} partitions"
        if self.lower < 1 or self.upper < self.lower:
            return f"the parallelism bounds [{self.lower}, {self.upper}] are not valid"
        if self.slots_per_executor < 1:
            return f"{self.slots_per_executor} slots per executor"
        if self.slot_upper is not None and self.slot_upper < 1:
            return f"the query may be given {self.slot_upper} slots"
        if self.max_useful_slots is not None and self.max_useful_slots < 1:
            return f"the query can run {self.max_useful_slots} tasks at once"
        if self.cluster_max_slots is not None and self.cluster_max_slots < 1:
            return f"the cluster offers {self.cluster_max_slots} slots"
        return None


def _whole(x: object) -> bool:
    """A finite whole number of any numeric type (Python's or numpy's ints, 3.0)."""
    return (isinstance(x, numbers.Real) and math.isfinite(x)
            and float(x).is_integer())


def _finite(x: float | None) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


#: Above this no figure of a micro-batch is real (rows, rows/s, seconds): beyond it the
#: window's sums of squares would overflow to infinity and stay NaN for good.
MAX_FIGURE = 1e15


def clean(value: float | None) -> float | None:
    """A usable non-negative number, or None (missing, NaN, infinite, negative, above
    :data:`MAX_FIGURE`, not a number)."""
    if value is None:
        return None
    try:
        if 0.0 <= value <= MAX_FIGURE:  # NaN fails every comparison
            return float(value)
    except TypeError:
        pass
    return None


#: Below this no rate of a batch that read rows is real (one row in about twelve days): the
#: window divides by rates, and a rate of 1e-320 would turn its sums infinite, then NaN.
MIN_RATE = 1e-6


def clean_rate(value: float | None) -> float | None:
    """:func:`clean` for a rate (rows/s): 0 stays 0 (Spark's rate of an empty batch), a
    positive rate below :data:`MIN_RATE` is None."""
    rate = clean(value)
    if rate is not None and 0.0 < rate < MIN_RATE:
        return None
    return rate
