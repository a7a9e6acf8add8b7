"""The Adaptive Batch Scheduler's options (``spark.adaptive.batch.*``).

One group of :class:`spark_adaptive.settings.Settings`, declared with
:func:`~spark_adaptive.core.options.option`. Their measurements are in
``docs/benchmarks.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_adaptive.core.options import MAX_PARALLELISM_LIMIT, PREFIX, option

#: ``batch.text_file``'s split size when ``batch.source-split-size`` is unset: its map
#: tasks combine in a Python dict, whose time per record grows with its size, so they
#: prefer smaller splits than Spark SQL's compiled scans do.
TEXT_FILE_SPLIT_BYTES = 64 << 20


@dataclass(frozen=True)
class BatchSettings:
    """How batch stages get their parallelism from the data they consume."""

    enabled: bool = option(
        "batch.enabled", "bool", False,
        "Adaptive Batch Scheduler: decide each batch stage's parallelism from the data it "
        "consumes.")
    avg_data_volume_per_task: int = option(
        "batch.avg-data-volume-per-task", "size", 64 << 20,
        "Bytes each task of a shuffle-reading batch stage should consume; the stage's "
        "parallelism is its consumed bytes divided by this (Spark SQL: "
        "spark.sql.adaptive.advisoryPartitionSizeInBytes). Sources are split by "
        "batch.source-split-size instead. AQE's 64 MiB rather than Flink's 16 MiB: once scans "
        "have their own split size, the volume per task changed nothing measurable, and 64 MiB "
        "runs a quarter of the tasks.", minimum=1)
    source_split_size: int | None = option(
        "batch.source-split-size", "size", None,
        "Most bytes one task of a file source reads: a source's parallelism is its bytes "
        "divided by this (Flink's dynamic source parallelism inference), within "
        "batch.default-source-parallelism. Unset: Spark SQL's spark.sql.files.maxPartitionBytes "
        "(128 MiB in Spark) for DataFrame scans, 64 MiB for batch.text_file. Bigger splits "
        "combine more on the map side, while a Python map task's dict gets slower as it "
        "grows.", minimum=1,
        default_text="spark.sql.files.maxPartitionBytes (DataFrame scans), 64 MiB (text_file)")
    min_parallelism: int = option(
        "batch.min-parallelism", "int", 1,
        "Lowest parallelism decided for a batch stage.", minimum=1)
    max_parallelism: int = option(
        "batch.max-parallelism", "int", 128,
        "Highest parallelism decided for a batch stage; also the number of shuffle "
        "partitions written before they are coalesced.", minimum=1,
        maximum=MAX_PARALLELISM_LIMIT)
    default_source_parallelism: int | None = option(
        "batch.default-source-parallelism", "int", None,
        "Parallelism of sources whose size cannot be inferred. Unset: batch.max-parallelism.",
        minimum=1, default_text="batch.max-parallelism")
    skewed_factor: float = option(
        "batch.skewed-factor", "float", 4.0,
        "A shuffle partition is skewed when it holds more than this times the median "
        "partition and more than batch.skewed-threshold. A skewed partition is split by map "
        "ranges where the operation allows it: by the RDD helpers, and by Spark SQL's skew "
        "join (spark.sql.adaptive.skewJoin.skewedPartitionFactor). Flink's default.",
        minimum=1.0)
    skewed_threshold: int | None = option(
        "batch.skewed-threshold", "size", None,
        "Least size of a skewed shuffle partition (see batch.skewed-factor; Spark SQL: "
        "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes). Unset: "
        "batch.avg-data-volume-per-task, the bytes one task is planned to read, because a "
        "partition bigger than that is a task no range assignment can balance; Flink's and "
        "Spark's 256 MiB leaves such partitions unsplit.",
        minimum=1, default_text="batch.avg-data-volume-per-task")
    shuffle_partitions_from_estimate: bool = option(
        "batch.shuffle-partitions-from-estimate", "bool", True,
        "DataFrame and SQL jobs, with the JVM shim: write a query's shuffles in 8 partitions "
        "per task its input plans (Spark's size estimate of what goes into the shuffle divided "
        "by avg-data-volume-per-task, at least the held task slots) when that is below "
        "batch.max-parallelism, instead of always batch.max-parallelism: each partition is a "
        "file in every map task (Spark's bypass writer), which costs a small query more than "
        "its work. Applies to sessions created after activation; a session can switch it off "
        "with spark.conf.set.")
    executor_idle_timeout: float = option(
        "batch.executor-idle-timeout", "duration", 60.0,
        "While spark-adaptive controls the executors (no managed streaming query runs): once no "
        "batch job has run for this long, executors beyond what batch.min-parallelism needs "
        "are released, unless the app holds persisted RDDs (cached RDDs or DataFrames, local "
        "checkpoints): then they stay, as in Spark, until it unpersists them. 0: as soon as "
        "no job runs (never between the stages of one job).", unit="s")
    use_held_slots: bool = option(
        "batch.use-held-slots", "bool", True,
        "Give a batch stage at least one task per task slot the application holds (Spark's "
        "defaultParallelism) while each task still reads min(1 MiB, avg-data-volume-per-task "
        "/ 5): executors are held for the whole job, so an idle slot saves nothing. false: "
        "Flink's rule alone, and a stage with little data leaves held slots idle.")

    @property
    def text_file_split_bytes(self) -> int:
        if self.source_split_size is not None:
            return self.source_split_size
        return TEXT_FILE_SPLIT_BYTES

    @property
    def skew_threshold_bytes(self) -> int:
        if self.skewed_threshold is not None:
            return self.skewed_threshold
        return self.avg_data_volume_per_task

    def problems(self) -> list[str]:
        if self.min_parallelism > self.max_parallelism:
            return [f"{PREFIX}batch.min-parallelism={self.min_parallelism} is above "
                    f"{PREFIX}batch.max-parallelism={self.max_parallelism}"]
        return []
