"""Deciding how the reduce side of an RDD helper's shuffle is read, and carrying it out.

:func:`plan_read` is the step between the map and the reduce side of every
helper in :mod:`spark_adaptive.batch.rdd`: it runs the map side, reads the
sizes (shim) or the total (fallback), decides the plan with the pure core
(:mod:`spark_adaptive.core.batch.shuffle`), logs it as one INFO line on the
``spark_adaptive.batch`` logger, records it in the batch report, and returns
a function that builds the RDD reading any subset of the plan's tasks.
:func:`plan_join_read` does the same for a join's two shuffles at once
(:mod:`spark_adaptive.core.batch.join`); it needs the shim.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import numbers
import operator
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_adaptive.batch.wiring import batch_scheduler_for
from spark_adaptive.core.batch.decider import format_bytes
from spark_adaptive.core.batch.executors import LOGGER_NAME
from spark_adaptive.core.batch.join import plan_join, plan_join_even, smaller_side_first
from spark_adaptive.core.batch.ranges import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_THRESHOLD,
    Splitting,
)
from spark_adaptive.core.batch.settings import TEXT_FILE_SPLIT_BYTES
from spark_adaptive.core.batch.shuffle import (
    EVEN_BY_COUNT,
    ReadSlice,
    ShufflePlan,
    plan_by_bytes,
    plan_even,
    subpartition_count,
)
from spark_adaptive.core.batch.sources import SourcePlan
from spark_adaptive.core.events import PLAN_RDD_PREFIX
from spark_adaptive.core.options import parse_size
from spark_adaptive.errors import ShimNotAvailableError
from spark_adaptive.settings import Settings
from spark_adaptive.spark.jvm import shim_jar_path, spark_conf
from spark_adaptive.spark.shuffle import SparkShuffles, shim_shuffles, shuffle_dependency

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

decision_log = logging.getLogger(LOGGER_NAME)

_warned_lock = threading.Lock()
_warned: set[str] = set()
_LIMITS = ("avg_bytes_per_task", "min_parallelism", "max_parallelism", "skew_factor",
           "skew_threshold")


@dataclass(frozen=True)
class BatchParams:
    """What one helper call decides with: the ``batch.*`` settings and per-call overrides."""

    avg_bytes_per_task: int
    min_p: int
    max_p: int
    skew_factor: float = DEFAULT_SKEW_FACTOR
    skew_threshold: int = DEFAULT_SKEW_THRESHOLD
    shim_jar: Path | None = None
    #: Task slots held (``defaultParallelism``) with ``batch.use-held-slots``, else 1.
    slots: int = 1
    #: ``batch.default-source-parallelism`` (None: unset).
    default_source: int | None = None
    #: Bytes a source task reads (``batch.source-split-size``, else ``text_file``'s default).
    split_bytes: int = TEXT_FILE_SPLIT_BYTES


def _integer_limit(name: str, value: Any) -> int:
    """A per-call limit that counts (tasks, bytes): an integer >= 1, else ``ValueError``
    naming it. A float is refused, not truncated (1.5 tasks is not 1)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    return n


def _factor_limit(name: str, value: Any) -> float:
    """A per-call factor (``skew_factor``): a finite number >= 1, as ``batch.skewed-factor``
    takes, else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    factor = float(value)
    if not math.isfinite(factor) or factor < 1:
        raise ValueError(f"{name} must be a finite number >= 1, got {value!r}")
    return factor


def settings_for(sc: SparkContext, limits: dict[str, Any],
                 accepted: tuple[str, ...] = _LIMITS) -> BatchParams:
    """The running spark-adaptive's settings (else the app's conf), with ``limits`` applied.

    Every limit is checked before anything runs: ``TypeError`` on a limit not ``accepted``;
    ``ValueError`` naming the limit on a count or size that is not an integer >= 1
    (``avg_bytes_per_task``, ``min_parallelism``, ``max_parallelism``, ``skew_threshold``,
    ``source_split_size``), a ``skew_factor`` that is not a finite number >= 1, and
    ``min_parallelism`` above ``max_parallelism``. A limit given as None is the setting.
    """
    unknown = set(limits) - set(accepted)
    if unknown:
        raise TypeError(f"unknown keyword(s) {sorted(unknown)}; accepted: {', '.join(accepted)}")
    given = {name: _integer_limit(name, value) for name, value in limits.items()
             if value is not None and name != "skew_factor"}
    factor = limits.get("skew_factor")
    skew_factor = None if factor is None else _factor_limit("skew_factor", factor)
    part = batch_scheduler_for(sc)
    s = part.settings if part is not None else Settings.from_conf(spark_conf(sc))
    p = BatchParams(
        avg_bytes_per_task=given.get("avg_bytes_per_task", s.batch.avg_data_volume_per_task),
        min_p=given.get("min_parallelism", s.batch.min_parallelism),
        max_p=given.get("max_parallelism", s.batch.max_parallelism),
        skew_factor=s.batch.skewed_factor if skew_factor is None else skew_factor,
        skew_threshold=given.get("skew_threshold", s.batch.skew_threshold_bytes),
        shim_jar=shim_jar_path(s.shim_jar),
        slots=int(sc.defaultParallelism) if s.batch.use_held_slots else 1,
        default_source=s.batch.default_source_parallelism,
        split_bytes=given.get("source_split_size", s.batch.text_file_split_bytes))
    if p.min_p > p.max_p:
        raise ValueError(f"min_parallelism must be <= max_parallelism, got min_parallelism "
                         f"{p.min_p} and max_parallelism {p.max_p}")
    return p


def subpartitions(map_tasks: int, params: BatchParams, per_map_task: int = 1) -> int:
    """Partitions a helper's map side writes (:func:`~spark_adaptive.core.batch.shuffle.
    subpartition_count`)."""
    return subpartition_count(map_tasks, max_p=params.max_p, slots=params.slots,
                              per_map_task=per_map_task)


#: The most shuffle bytes a task of :func:`~spark_adaptive.batch.rdd.reduce_by_key` or
#: ``combine_by_key`` reads, whatever ``batch.avg-data-volume-per-task`` says. A merging
#: task holds one combiner per key in a Python dict, and Python's time per record grows
#: with the dict, so fewer, bigger merging tasks take more task time in all, even when
#: none spills (measurements: docs/benchmarks.md, RDD helpers: partitions per map task
#: and task sizes).
MERGE_TASK_BYTES = 16 << 20


def for_merging(sc: SparkContext, params: BatchParams, operation: str) -> tuple[BatchParams, int]:
    """``params`` with the volume per task ``V`` at most :data:`MERGE_TASK_BYTES`, for the
    helpers whose tasks merge combiners by key, and the partitions per map task their map
    side writes so that its tasks' bytes can be read at that volume: ``ceil(S / V)``, as a
    map task of a source split of ``S`` bytes (:func:`~spark_adaptive.batch.text_file`'s)
    writes at most about that. Logs once per application when it lowers the volume."""
    v = params.avg_bytes_per_task
    if v > MERGE_TASK_BYTES:
        _say_once(sc, "merging-cap", logging.INFO,
                  f"batch: {operation} and combineByKey merge each key's combiners in a Python "
                  f"dict, whose time per record grows with its size, so their tasks read at "
                  f"most {format_bytes(MERGE_TASK_BYTES)} of shuffle instead of "
                  f"{format_bytes(v)}")
        params = dataclasses.replace(params, avg_bytes_per_task=MERGE_TASK_BYTES)
    return params, max(1, -(-params.split_bytes // params.avg_bytes_per_task))


#: A grouping task (``groupByKey``, a join) holds every value of its keys in Python lists,
#: several times its compressed shuffle bytes; past ``spark.python.worker.memory`` PySpark's
#: ``ExternalGroupBy`` spills them and groups by sorting. In benchmarks/batch.py a skewed
#: join read in fewer, bigger tasks than PySpark's took far more time per byte. That run
#: also built lists on the map side, which spilled; the helpers no longer do, so the cap's
#: own share of that gap is not measured apart. With the cap and no map-side lists, the
#: tasks took the same time per byte as PySpark's (measurements: docs/benchmarks.md, RDD
#: helpers: partitions per map task and task sizes).
GROUPING_MEMORY_SHARE = 16


def for_grouping(sc: SparkContext, params: BatchParams, operation: str) -> BatchParams:
    """``params`` with the volume per task at most ``spark.python.worker.memory / 16``
    (32 MiB at PySpark's 512m), for operations that hold each key's values as lists.

    Logs once per application when it lowers the volume."""
    cap = max(1, (memory_limit_mb(sc) << 20) // GROUPING_MEMORY_SHARE)
    if params.avg_bytes_per_task <= cap:
        return params
    _say_once(sc, "grouping-cap", logging.INFO,
              f"batch: {operation} and the other grouping helpers hold each key's values in "
              f"Python lists, so their tasks read at most {format_bytes(cap)} "
              f"(spark.python.worker.memory / {GROUPING_MEMORY_SHARE}) instead of "
              f"{format_bytes(params.avg_bytes_per_task)}: past the worker memory PySpark "
              f"spills and sorts the groups. Raise spark.python.worker.memory to raise it.")
    return dataclasses.replace(params, avg_bytes_per_task=cap)


def memory_limit_mb(sc: SparkContext) -> int:
    """``spark.python.worker.memory`` in MiB: what PySpark's own shuffles spill at."""
    return max(1, parse_size(sc.getConf().get("spark.python.worker.memory", "512m") or "512m")
               >> 20)


@dataclass(frozen=True)
class PlannedRead:
    """A decided plan and how to read it: ``read(tasks)`` builds an RDD over those tasks."""

    plan: ShufflePlan
    read: Callable[..., RDD[Any]]
    #: A join's plan only: per task, the bytes of the side its slices read first, the
    #: smaller one (None when the sizes were lost and the sides come in plan order).
    first_side_bytes: tuple[int, ...] | None = None
    #: The plan's id (:func:`record`), which names the RDDs ``read`` builds.
    plan_id: str = ""


def plan_read(shuffled: RDD[Any], operation: str, splitting: Splitting, params: BatchParams,
              *, keep_order: bool = False) -> PlannedRead:
    """Run the map side of ``shuffled`` (a PySpark ``partitionBy`` result) and plan its read.

    ``keep_order``: tasks must read adjacent partitions in order (a sort).
    """
    sc = shuffled.context
    jdep = shuffle_dependency(shuffled)
    shim = shim_shuffles(sc, params.shim_jar)
    with _job_description(sc, f"spark-adaptive: map side of {operation}"):
        total = (shim.run_map_stage(jdep) if shim is not None
                 else SparkShuffles(sc).run_map_stage_total(jdep))
    n = shuffled.getNumPartitions()
    bounds = dict(avg_bytes_per_task=params.avg_bytes_per_task, min_p=params.min_p,
                  max_p=params.max_p, slots=params.slots)
    if shim is not None:
        try:
            sizes = shim.sizes(jdep)
            plan = plan_by_bytes(operation, sizes, splitting, skew_factor=params.skew_factor,
                                 skew_threshold=params.skew_threshold, **bounds)
        except Exception as e:  # a map output lost since the stage ran: Spark re-runs it
            plan = plan_even(operation, n, total, why=f"sizes per partition unavailable "
                             f"({str(e).splitlines()[0][:160]})", **bounds)
    else:
        _warn_once(sc, "helpers", _NO_SHIM)
        if keep_order:
            # Spark's coalesce may group non-adjacent partitions, which would break the order.
            plan = ShufflePlan(operation, n, tuple((ReadSlice(j, j + 1),) for j in range(n)),
                               None, total, EVEN_BY_COUNT,
                               f"{operation}: no JVM shim: one task per partition, {n} in all "
                               f"(Spark's coalesce may group non-adjacent partitions)")
        else:
            plan = plan_even(operation, n, total, why="no JVM shim, so no sizes per partition; "
                             "Spark's coalesce groups whole partitions evenly by count", **bounds)

    def read(tasks: list[int] | None = None) -> RDD[Any]:
        if shim is not None:
            return shim.read(shuffled, [jdep], plan, tasks)
        return shuffled if keep_order else shuffled.coalesce(plan.parallelism)

    plan_id = _publish(sc, plan, "its shuffle")
    return PlannedRead(plan, _named(read, plan_id), plan_id=plan_id)


def can_plan_join(sc: SparkContext, params: BatchParams) -> bool:
    """Whether :func:`plan_join_read` can run (the shim is there). If not, logs once per
    application what a join does instead: PySpark's single shuffle of both sides, read
    in ranges of equal partition count, with no skewed key split."""
    if shim_shuffles(sc, params.shim_jar) is not None:
        return True
    _warn_once(sc, "join", _NO_SHIM_JOIN)
    return False


def plan_join_read(left: RDD[Any], right: RDD[Any], how: str, params: BatchParams, *,
                   operation: str = "join") -> PlannedRead:
    """Run the map sides of a join's two shuffles at once and plan reading both.

    ``left`` and ``right`` are PySpark ``partitionBy`` results with the same
    partitioner; the plan is :func:`~spark_adaptive.core.batch.join.plan_join`'s
    (left is shuffle 0) with each task's smaller side first
    (:func:`~spark_adaptive.core.batch.join.smaller_side_first`), or even ranges
    over both when the sizes are lost. Each task of ``read`` yields one side's
    records, then the other's, so the sides must be told apart by the records
    themselves. Raises
    ``ShimNotAvailableError`` without the shim (see :func:`can_plan_join`).
    """
    sc = left.context
    shim = shim_shuffles(sc, params.shim_jar)
    if shim is None:
        raise ShimNotAvailableError("a join's two shuffles are read through the JVM shim")
    jdeps = [shuffle_dependency(left), shuffle_dependency(right)]
    with _job_description(sc, f"spark-adaptive: map sides of {operation}"):
        totals = shim.run_map_stages(jdeps)
    bounds = dict(avg_bytes_per_task=params.avg_bytes_per_task, min_p=params.min_p,
                  max_p=params.max_p, slots=params.slots)
    try:
        sizes = [shim.sizes(d) for d in jdeps]
    except Exception as e:  # a map output lost since the stage ran: Spark re-runs it
        plan = plan_join_even(left.getNumPartitions(), sum(totals), operation=operation,
                              why=f"sizes per partition unavailable "
                                  f"({str(e).splitlines()[0][:160]})", **bounds)
        first: tuple[int, ...] | None = None
    else:
        plan, first = smaller_side_first(
            plan_join(sizes[0], sizes[1], how, skew_factor=params.skew_factor,
                      skew_threshold=params.skew_threshold, operation=operation, **bounds),
            sizes[0], sizes[1])
    plan_id = _publish(sc, plan, "its 2 shuffles")
    return PlannedRead(plan, _named(lambda tasks=None: shim.read(left, jdeps, plan, tasks),
                                    plan_id), first, plan_id)


def _named(read: Callable[..., RDD[Any]], plan_id: str) -> Callable[..., RDD[Any]]:
    """``read`` whose RDDs carry the plan's id in their name, so that the stage that runs
    them is explained by the plan (:attr:`~spark_adaptive.core.events.StageCompleted.plan`)."""

    def named_read(tasks: list[int] | None = None) -> RDD[Any]:
        return name_by_plan(read(tasks), plan_id)

    return named_read


def name_by_plan(rdd: RDD[Any], plan_id: str, reads: str | None = None) -> RDD[Any]:
    """Name ``rdd`` after the plan it reads by and, when given, what it reads (``textFile``'s
    path, which Spark's UI shows as the RDD's name otherwise)."""
    return rdd.setName(PLAN_RDD_PREFIX + plan_id + (f" {reads}" if reads else ""))


def _publish(sc: SparkContext, plan: ShufflePlan, what: str) -> str:
    """The plan as one INFO line and in the batch report; returns its id."""
    plan_id = record(sc, plan)
    decision_log.info("batch: %s (%s) reads %s with %d task(s): %s", plan.operation, plan_id,
                      what, plan.parallelism, plan.reason)
    return plan_id


_plan_numbers = itertools.count(1)
_plan_numbers_lock = threading.Lock()


def record(sc: SparkContext, plan: ShufflePlan | SourcePlan) -> str:
    """Add a helper's decision to the batch report, when the batch scheduler runs; returns
    the plan's id (``reduceByKey#3``, ``textFile#1``), unique within the process."""
    with _plan_numbers_lock:
        number = next(_plan_numbers)
    kind = "textFile" if isinstance(plan, SourcePlan) else plan.operation
    plan_id = f"{kind}#{number}"
    part = batch_scheduler_for(sc)
    if part is None:
        return plan_id
    if isinstance(plan, SourcePlan):
        part.tracker.add_source(plan, time.time(), plan_id)
    else:
        part.tracker.add_plan(plan, time.time(), plan_id)
    return plan_id


_NO_SHIM = (
    "batch: the JVM shim is not available, so the RDD helpers cannot read sizes per "
    "partition: they size the reduce side from the total bytes and let Spark's coalesce "
    "group whole partitions evenly by count (sorts read one partition per task). Build "
    "the shim with jvm-shim/build.sh or set spark.adaptive.shim.jar.")
_NO_SHIM_JOIN = (
    "batch: the JVM shim is not available, so join shuffles both sides as one, as PySpark "
    "does, reads it in ranges of equal partition count and cannot split a skewed key (that "
    "needs each side's sizes per partition and map task). Build the shim with "
    "jvm-shim/build.sh or set spark.adaptive.shim.jar.")


def _warn_once(sc: SparkContext, topic: str, message: str) -> None:
    """``message`` as a warning, once per application and topic."""
    _say_once(sc, topic, logging.WARNING, message)


def _say_once(sc: SparkContext, topic: str, level: int, message: str) -> None:
    key = f"{sc.applicationId}/{topic}"
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    decision_log.log(level, message)


@contextlib.contextmanager
def _job_description(sc: SparkContext, text: str) -> Iterator[None]:
    key = "spark.job.description"
    old = sc.getLocalProperty(key)
    sc.setLocalProperty(key, text)
    try:
        yield
    finally:
        sc.setLocalProperty(key, old)  # type: ignore[arg-type]
