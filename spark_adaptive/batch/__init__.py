"""The Adaptive Batch Scheduler for Spark: parallelism from data volume.

Turn it on with ``spark.adaptive.enabled=true`` and ``spark.adaptive.batch.enabled=true``.
Then:

* DataFrame and SQL jobs: every shuffle stage runs ``ceil(bytes / V)`` tasks
  within ``[batch.min-parallelism, batch.max-parallelism]``, and every file
  scan ``ceil(input bytes / S)`` splits (:mod:`spark_adaptive.batch.sql`);
* RDD jobs: :func:`reduce_by_key`, :func:`group_by_key`, :func:`combine_by_key`,
  :func:`join`, :func:`left_outer_join` and :func:`sort_by_key` size their reduce
  side the same way, with byte-balanced partition ranges and skew splitting
  (:mod:`spark_adaptive.batch.rdd`; they work without ``batch.enabled`` too),
  and :func:`text_file` reads files with ``ceil(input bytes / S)`` tasks
  (:mod:`spark_adaptive.batch.sources`);
* executors follow the stages' tasks while no managed streaming query runs;
* :func:`report` returns (and writes) the per-job report: stages, bytes,
  tasks, the rule's value and the reason; each stage and job is also an INFO
  line on the ``spark_adaptive.batch`` logger.

``V`` is ``spark.adaptive.batch.avg-data-volume-per-task``; ``S`` is
``spark.adaptive.batch.source-split-size``, unset by default: DataFrame scans then
keep Spark's ``spark.sql.files.maxPartitionBytes`` (128 MiB) and :func:`text_file`
splits at 64 MiB.
"""

from __future__ import annotations

import json
import os
from typing import Any

from spark_adaptive.batch.rdd import (
    combine_by_key,
    decision_of,
    group_by_key,
    join,
    left_outer_join,
    reduce_by_key,
    sort_by_key,
)
from spark_adaptive.batch.sources import source_decision_of, text_file
from spark_adaptive.batch.wiring import batch_scheduler_for

__all__ = ["combine_by_key", "decision_of", "group_by_key", "join", "left_outer_join",
           "reduce_by_key", "report", "sort_by_key", "source_decision_of", "text_file"]


def report(spark: Any, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The batch report of a SparkSession's (or SparkContext's) application, as JSON-ready data.

    Jobs with the stages that ran for them (skipped stages are absent), each
    stage with its bytes, tasks, the rule's parallelism and the reason; jobs of
    one DataFrame action share an ``executionId``; ``rddShuffles`` lists the
    RDD helpers' plans, ``rddSources`` the plans of :func:`text_file`. With
    ``path``, the report is also written there as JSON. Events reach the
    report a fraction of a second after Spark posts them. Raises
    ``RuntimeError`` when the batch part is not running
    (``spark.adaptive.batch.enabled`` is false or spark-adaptive is off).
    """
    sc = getattr(spark, "sparkContext", spark)
    part = batch_scheduler_for(sc)
    if part is None:
        raise RuntimeError("the adaptive batch scheduler is not running for this application: "
                           "set spark.adaptive.enabled=true and spark.adaptive.batch.enabled=true")
    data = part.tracker.report()
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
    return data
