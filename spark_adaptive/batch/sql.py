"""Steering Spark SQL (DataFrame) jobs with the ``batch.*`` settings: which confs, and when.

Spark SQL already has the two mechanisms Flink's adaptive batch scheduler
needs; spark-adaptive sets them so that they follow Flink's rule,
``p = ceil(bytes / V)`` within ``[batch.min-parallelism, batch.max-parallelism]``:

* **Shuffle stages, by adaptive query execution (AQE).** Every shuffle is
  written with ``initialPartitionNum = batch.max-parallelism`` partitions
  (Flink's subpartitions); once the map side is done, AQE packs contiguous
  partitions greedily up to ``advisoryPartitionSizeInBytes = V``. With
  partitions much smaller than ``V`` that gives ``ceil(bytes / V)`` tasks.
* **Source stages, by the file-scan planner.** Spark sizes file splits per
  scan from the scan's own total bytes at planning time: ``min(maxPartitionBytes,
  max(openCost, total / minPartitionNum))``, then caps the split count at
  ``maxPartitionNum``. With ``maxPartitionNum = min(default source parallelism,
  max-parallelism)`` every scan gets ``ceil(total / S)`` splits within that
  bound, ``S`` being ``batch.source-split-size`` when set, else the app's own
  ``maxPartitionBytes`` (Spark's 128 MiB): Flink's dynamic source parallelism
  inference, where a source also cuts its own splits (Flink's Hive source by
  its 128 MB ``split-max-size``), with Spark's per-file open cost counted as
  bytes. Sources are not cut at ``V``: a scan's map task combines its rows
  before the shuffle, and bigger splits combine more, so the shuffle is
  smaller (measurements: docs/benchmarks.md, The volume per task and the scan
  split size).
  The open cost (``openCostInBytes``) becomes ``S / 128`` (1 MiB at Spark's
  128 MiB), a quarter of Spark's own ratio of 4 MiB to its 128 MiB
  splits, because a split costs more here than Spark's model counts: every
  map task writes up to ``batch.max-parallelism`` shuffle partitions, one file each
  with Spark's bypass writer. A scan still gets a split per held task slot
  (``minPartitionNum``), so packing small files tighter never idles a slot. On
  the benchmark's 10 MB job in 200 files, Spark's 4 MiB and ``S / 32`` both
  read the files in more splits and ran slower than ``S / 128`` (measurements:
  docs/benchmarks.md, A file's open cost). Compact files are unaffected (their
  open cost is a sliver of a split).

The lower bound, and ``parallelismFirst``. AQE's ``parallelismFirst`` (on in
Spark) makes ``defaultParallelism``, the task slots the application holds at
planning, the least number of tasks, as long as each gets ``minPartitionSize``;
the advisory size stays the most a task reads, so ``p`` is never below
``ceil(bytes / V)``. Scans do the same through ``minPartitionNum``'s default.
With ``batch.use-held-slots`` (the default) both stay on: executors are held
for the whole job (spark-adaptive never shrinks them mid-job), so an idle slot
saves nothing, and on the benchmark's 100 MB job Flink's rule alone was slower
than Spark's defaults (measurements: docs/benchmarks.md, The volume per task
and the scan split size). The coupling this creates with executors that
follow the tasks is harmless: ``p`` never exceeds
``max(held slots, ceil(bytes / V))``, so it can hold executors but never
inflate them. With ``batch.use-held-slots=false`` it is off and
``minPartitionNum = batch.min-parallelism`` (Flink's rule alone).
``batch.min-parallelism`` above 1 is set as ``minPartitionNum`` of both and
then replaces the slot count (Spark has one number for it; that AQE key is
deprecated and warns when set, so it is set only then). ``minPartitionSize``
is ``min(1 MiB, V / 5)`` (Spark's own test-mode clamp), so a small ``V`` is
not overridden by Spark's 1 MiB floor.

Skew joins: ``batch.skewed-factor`` and ``batch.skewed-threshold`` become AQE's
``skewJoin.skewedPartitionFactor`` and ``skewedPartitionThresholdInBytes``, so
that a DataFrame join splits the partitions the RDD helpers would split
(Flink's factor 4 against Spark's 5). The threshold defaults to the volume per
task, not Flink's and Spark's 256 MiB: see ``batch.skewed-threshold``.

When: at activation (:func:`apply_sql_confs`). The values go into the
SparkContext's live configuration, which every session created later starts
from (the zero-code path activates before the app's first session exists),
and into the shared state and session conf of a session that already exists
(:func:`spark_adaptive.enable` on a running session). Session confs are read
at planning, so a query planned after activation is steered. An app that
sets one of these keys on a session afterwards overrides it for that session.

``spark.sql.shuffle.partitions`` set on a session after activation (the
zero-code path activates before any app code runs, so this is where most apps
set it: ``spark.conf.set``, SQL ``SET``). With AQE, Spark writes shuffles in
``initialPartitionNum`` partitions in its place, so the context-wide
``initialPartitionNum`` set here would silently override it, where plain Spark
writes the app's count. With the JVM shim, its query-stage rule is told
(:func:`~spark_adaptive.spark.sqlconf.mark_own_initial_partition_num`) that
``initialPartitionNum`` is spark-adaptive's, and in a session that sets
``spark.sql.shuffle.partitions`` itself it writes the shuffles Spark sized
from the conf in the app's count (or fewer, from the estimate below): the
app's count is the upper bound, as for one set before activation. The rule is
registered for this whenever spark-adaptive sets ``initialPartitionNum``,
also with ``batch.shuffle-partitions-from-estimate=false`` (which it then
gets as ``false``). Without the shim, and in a session that existed before
activation (it keeps the extensions it was created with), the app's later
count is not honoured: activation says so in one WARNING.

The app's own settings win (do no harm): a key it set itself before activation
(its SparkConf or session builder, ``spark-submit --conf``,
``spark-defaults.conf``, or ``spark.conf.set`` on the session ``enable()`` is
called on; :func:`~spark_adaptive.spark.sqlconf.explicit_confs`, read before
anything is set) is kept as it is, even where a ``batch.*`` key would set it.
An explicit ``spark.sql.shuffle.partitions`` (or ``initialPartitionNum``) is the
most partitions a shuffle is written in, as Flink's adaptive batch scheduler
takes an explicit ``parallelism.default`` as its upper bound: ``initialPartitionNum``
is then left unset, AQE coalesces from the app's count, and the shim writes a
small query's shuffles in fewer partitions, never more. An explicit
``maxPartitionBytes`` is the scans' split size, and the open cost follows it.
The INFO line of :func:`apply_sql_confs` lists the keys kept and why.

How many partitions a shuffle is written in. Up to
``spark.shuffle.sort.bypassMergeThreshold`` (200) partitions Spark writes a
shuffle with its bypass writer, a file per partition in every map task, so
``batch.max-parallelism`` (128) partitions cost a sub-second job more than its
work: on the 10 MB benchmark job, 1 or 2 partitions with AQE on are faster,
and as fast as 2 partitions with AQE off, so the time lost is the files, not
AQE's stages (measurements: docs/benchmarks.md, Shuffle partitions of small
queries).
Hence, with the JVM shim, ``batch.shuffle-partitions-from-estimate``: the
shim's query-stage rule (``ShufflePartitionsFromEstimate``, named in
``spark.sql.extensions`` at activation, applied by sessions created after it)
writes a query's shuffles in :data:`PARTITIONS_PER_TASK` partitions per task
its inputs plan, when that is below ``batch.max-parallelism``: Spark's own size
estimate of what goes into the shuffle (the logical plan's ``sizeInBytes``)
over ``V``, at least the held slots. One count per query keeps joined sides
co-partitioned, and exchanges AQE plans after a stage ran are sized from the
stages' real bytes. The factor leaves room for an estimate up to 8x low
(compressed input, a growing join) before a task reads more than ``V``; from
about 1 GB of input up nothing changes (16 tasks x 8 reaches 128). Making
Spark's sorting writer take over instead
(``bypassMergeThreshold = batch.max-parallelism - 1``, one file per map task)
also fixed small jobs but made the 5 GB benchmark job slower, so Spark's
writer choice stays (measurements: docs/benchmarks.md, Shuffle partitions of
small queries).

``spark.sql.adaptive.enabled`` is left as the app has it (Spark's default is
on). With AQE off, shuffle stages run ``spark.sql.shuffle.partitions`` tasks
and only source stages are steered; activation warns about it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_adaptive.core.batch.decider import format_bytes
from spark_adaptive.core.batch.shuffle import min_task_bytes
from spark_adaptive.settings import Settings
from spark_adaptive.spark.jvm import add_to_spark_class_loader, shim_jar_path
from spark_adaptive.spark.sqlconf import (
    append_to_list_conf,
    byte_string_as_bytes,
    explicit_confs,
    mark_own_initial_partition_num,
    set_everywhere,
    set_live,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

AQE = "spark.sql.adaptive."
FILES = "spark.sql.files."
EXTENSIONS = "spark.sql.extensions"
#: The shim's Spark SQL extensions (its query-stage rule ShufflePartitionsFromEstimate).
SHIM_EXTENSIONS = "io.sparkadaptive.shim.AdaptiveExtensions"
#: The shim's query-stage rule, which the extensions inject.
SHIM_RULE = "io.sparkadaptive.shim.ShufflePartitionsFromEstimate"
#: The session conf the rule reads to size shuffles from Spark's estimate (a settings key).
ESTIMATE_KEY = "spark.adaptive.batch.shuffle-partitions-from-estimate"
#: Shuffle partitions written per planned task (the shim's ShufflePartitionsFromEstimate).
PARTITIONS_PER_TASK = 8
#: Spark's default ``spark.sql.files.maxPartitionBytes``.
SPARK_MAX_PARTITION_BYTES = 128 << 20
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
INITIAL_PARTITION_NUM = AQE + "coalescePartitions.initialPartitionNum"


def source_upper_bound(settings: Settings) -> int:
    """Flink's source inference bound: min(default source parallelism, max-parallelism)."""
    default = settings.batch.default_source_parallelism
    upper = settings.batch.max_parallelism
    return upper if default is None else min(default, upper)


#: A file's open cost as a share of the largest split: a quarter of Spark's ratio
#: (``openCostInBytes`` 4 MiB to ``maxPartitionBytes`` 128 MiB), see the module doc.
OPEN_COST_SHARE = 128


def open_cost(split: int) -> int:
    """``spark.sql.files.openCostInBytes`` for splits of at most ``split`` bytes:
    ``split / 128``, never above Spark's 4 MiB."""
    return max(1, min(4 << 20, split // OPEN_COST_SHARE))


def sql_confs(settings: Settings, max_partition_bytes: int = SPARK_MAX_PARTITION_BYTES,
              explicit: Collection[str] = ()) -> dict[str, str]:
    """The Spark SQL confs that make DataFrame jobs follow the ``batch.*`` settings.

    ``max_partition_bytes``: the app's ``spark.sql.files.maxPartitionBytes``, the scans'
    split size when ``batch.source-split-size`` is unset (then the key is left alone).
    ``explicit``: the keys the app set itself, which are left out (:func:`kept_confs` says
    why): a key of its own stays as it is, an explicit ``spark.sql.shuffle.partitions``
    leaves ``initialPartitionNum`` unset (it would replace it as the partition count
    shuffles are written in), and an explicit ``maxPartitionBytes`` is the split size the
    open cost follows."""
    v = settings.batch.avg_data_volume_per_task
    min_p, held = settings.batch.min_parallelism, settings.batch.use_held_slots
    split = settings.batch.source_split_size
    if FILES + "maxPartitionBytes" in explicit:
        split = None  # the app's own split size stands, and the open cost follows it
    confs = {
        AQE + "coalescePartitions.enabled": "true",
        INITIAL_PARTITION_NUM: str(settings.batch.max_parallelism),
        AQE + "advisoryPartitionSizeInBytes": str(v),
        AQE + "coalescePartitions.parallelismFirst": "true" if held else "false",
        AQE + "coalescePartitions.minPartitionSize": str(min_task_bytes(v)),
    }
    if split is not None:
        confs[FILES + "maxPartitionBytes"] = str(split)
    confs.update({
        FILES + "openCostInBytes": str(open_cost(split or max_partition_bytes)),
        FILES + "maxPartitionNum": str(source_upper_bound(settings)),
        AQE + "skewJoin.skewedPartitionFactor": repr(settings.batch.skewed_factor),
        AQE + "skewJoin.skewedPartitionThresholdInBytes": str(settings.batch.skew_threshold_bytes),
    })
    if min_p > 1 or not held:
        confs[FILES + "minPartitionNum"] = str(min_p)
    if min_p > 1:
        confs[AQE + "coalescePartitions.minPartitionNum"] = str(min_p)
    return {k: v for k, v in confs.items() if k not in kept_confs(confs, explicit)}


def kept_confs(wanted: Collection[str], explicit: Collection[str]) -> dict[str, str]:
    """Which of the ``wanted`` keys stay as the app set them (``explicit``: the keys it set
    itself), each with why."""
    kept = {k: "set by the app" for k in wanted if k in explicit}
    if INITIAL_PARTITION_NUM in wanted and INITIAL_PARTITION_NUM not in kept:
        if SHUFFLE_PARTITIONS in explicit:
            kept[INITIAL_PARTITION_NUM] = (f"left unset: the app's {SHUFFLE_PARTITIONS} stays "
                                           "the partition count shuffles are written in")
    return kept


def sql_keys(settings: Settings) -> list[str]:
    """Every key :func:`sql_confs` may set for ``settings``, and the ones that decide what it
    leaves alone: what to look for among the app's own settings."""
    return [*sql_confs(settings), FILES + "maxPartitionBytes", SHUFFLE_PARTITIONS]


def max_partition_bytes(sc: SparkContext, text: str | None) -> int:
    """``spark.sql.files.maxPartitionBytes`` as the app set it (``text``, None: unset, Spark's
    default), read by Spark's own parser."""
    if text is None:
        return SPARK_MAX_PARTITION_BYTES
    try:
        return byte_string_as_bytes(sc, text)
    except ValueError:  # Spark itself rejects it when a scan is planned
        log.warning("batch: %smaxPartitionBytes=%r is not a size; open cost sized for %s",
                    FILES, text, format_bytes(SPARK_MAX_PARTITION_BYTES))
        return SPARK_MAX_PARTITION_BYTES


@dataclass(frozen=True)
class SqlSteering:
    """What :func:`apply_sql_confs` did: the confs it set, the keys it left as the app set
    them (with why), and the most bytes a DataFrame scan's split reads (``S``)."""

    confs: dict[str, str]
    kept: dict[str, str] = field(default_factory=dict)
    split_bytes: int = SPARK_MAX_PARTITION_BYTES


def apply_sql_confs(sc: SparkContext, settings: Settings) -> SqlSteering:
    """Set :func:`sql_confs` where sessions read them, except the keys the app set itself.

    Logs one INFO line with the values, and the keys kept as the app set them and why.
    """
    explicit = explicit_confs(sc, sql_keys(settings))  # before anything is set
    scan_split = max_partition_bytes(sc, explicit.get(FILES + "maxPartitionBytes"))
    confs = sql_confs(settings, scan_split, explicit=explicit.keys())
    kept = kept_confs(sql_confs(settings, scan_split), explicit.keys())
    applied = set_everywhere(sc, confs)  # which never overwrites a key the app set either
    split = settings.batch.source_split_size
    if FILES + "maxPartitionBytes" in explicit:
        split = None  # the app's own split size stands
    kept_text = ", ".join(f"{k}={explicit[k]} (set by the app)" if k in explicit
                          else f"{k} {why}" for k, why in kept.items())
    log.info("batch: Spark SQL steered to %s per shuffle-reading task within [%d, %d] tasks; "
             "scans in splits of at most %s, at most %d of them: %s%s",
             format_bytes(settings.batch.avg_data_volume_per_task),
             settings.batch.min_parallelism, settings.batch.max_parallelism,
             format_bytes(split) if split is not None
             else f"{format_bytes(scan_split)} ({FILES}maxPartitionBytes)",
             source_upper_bound(settings), ", ".join(f"{k}={v}" for k, v in confs.items()),
             f"; kept as the app set them (its own Spark SQL settings win over "
             f"spark.adaptive.batch.*): {kept_text}" if kept else "")
    own_initial = INITIAL_PARTITION_NUM in confs and INITIAL_PARTITION_NUM not in applied.kept
    honoured = False
    if settings.batch.shuffle_partitions_from_estimate or own_initial:
        # Its count never exceeds the app's own: Spark's numShufflePartitions (initialPartitionNum,
        # else the app's shuffle.partitions), or the shuffle.partitions a session sets itself
        # where initialPartitionNum is spark-adaptive's.
        if not settings.batch.shuffle_partitions_from_estimate:
            set_live(sc, ESTIMATE_KEY, "false")  # sessions read it (enable() may have set it)
        if register_extensions(sc, settings, applied.session_exists) and own_initial:
            why = mark_own_initial_partition_num(sc, SHIM_RULE, int(confs[INITIAL_PARTITION_NUM]))
            honoured = why is None
            if why is not None:
                log.debug("batch: the shim's rule cannot tell initialPartitionNum is "
                          "spark-adaptive's: %s", why)
    if own_initial and (not honoured or applied.session_exists):
        where = ("in the session that already exists (it keeps the extensions it was created "
                 "with)" if honoured else "in any session (it needs the JVM shim's rule)")
        log.warning("batch: spark.sql.shuffle.partitions set on a session from now on is not "
                    "honoured %s: with adaptive execution Spark writes shuffles in %s=%s, "
                    "which spark-adaptive set, in its place. To keep an app's own count, set "
                    "spark.sql.shuffle.partitions before the SparkContext starts (spark-submit "
                    "--conf, the session builder), or set %s with it.", where,
                    INITIAL_PARTITION_NUM, confs[INITIAL_PARTITION_NUM], INITIAL_PARTITION_NUM)
    if not applied.aqe_on:
        log.warning("batch: spark.sql.adaptive.enabled=false, so shuffle stages of DataFrame jobs "
                    "run spark.sql.shuffle.partitions tasks; only source splits follow "
                    "spark.adaptive.batch.*. Turn adaptive execution on to steer shuffles.")
    return SqlSteering(confs, kept, split if split is not None else scan_split)


def register_extensions(sc: SparkContext, settings: Settings, session_exists: bool) -> bool:
    """Name the shim's SQL extensions in ``spark.sql.extensions`` of the SparkContext's live
    conf, which sessions created from now on apply; False (and a log line saying why) when
    the shim is absent or does not load."""
    jar = shim_jar_path(settings.shim_jar)
    why = ("no shim jar (build it with jvm-shim/build.sh or set spark.adaptive.shim.jar)"
           if jar is None else add_to_spark_class_loader(sc, jar, SHIM_EXTENSIONS))
    if why is not None:
        log.info("batch: DataFrame shuffles are written in batch.max-parallelism (%d) partitions "
                 "whatever their size: %s", settings.batch.max_parallelism, why)
        return False
    append_to_list_conf(sc, EXTENSIONS, SHIM_EXTENSIONS)
    what = (f"DataFrame shuffles are written in {PARTITIONS_PER_TASK} partitions per planned "
            f"task, at most {settings.batch.max_parallelism} (or a session's own "
            "spark.sql.shuffle.partitions)" if settings.batch.shuffle_partitions_from_estimate
            else "a session's own spark.sql.shuffle.partitions is the partition count of its "
                 "DataFrame shuffles")
    log.info("batch: %s added to %s: %s%s", SHIM_EXTENSIONS, EXTENSIONS, what,
             "; the session that already exists keeps the extensions it was created with"
             if session_exists else "")
    return True
