"""RDD file sources sized by the bytes they read: :func:`text_file`.

``sc.textFile(path)`` runs one task per file block and at least one per
file, whatever the files hold. :func:`text_file` reads the input's size from
the file system (Hadoop's input format, or its ``FileSystem`` without the
shim, so any scheme Spark reads: local, HDFS, S3A, ...), decides the tasks
with Flink's source inference (:mod:`spark_adaptive.core.batch.sources`) and
makes the splits into that many tasks. With the JVM shim its lines reach
Python in chunks of 256 KiB (:mod:`spark_adaptive.spark.lines`) instead of one
frame per line, which takes Python as long as parsing a short line
(measurements: docs/benchmarks.md, RDD costs per record). The decision is one
INFO line on the ``spark_adaptive.batch`` logger and is listed under
``rddSources`` in :func:`spark_adaptive.batch.report`.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from spark_adaptive.batch import plans
from spark_adaptive.core.batch.executors import LOGGER_NAME
from spark_adaptive.core.batch.sources import SourcePlan, decide_source, plan_source, split_paths
from spark_adaptive.spark.files import hadoop_conf_get, listed_bytes, splits_have_locations
from spark_adaptive.spark.shuffle import shim_shuffles

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark import RDD, SparkContext

decision_log = logging.getLogger(LOGGER_NAME)
log = logging.getLogger(__name__)

_SOURCE_LIMITS = ("source_split_size", "min_parallelism", "max_parallelism")
_DELIMITER = "textinputformat.record.delimiter"
_plans: weakref.WeakKeyDictionary[Any, SourcePlan] = weakref.WeakKeyDictionary()


def input_bytes(sc: SparkContext, path: str) -> int | None:
    """The bytes ``sc.textFile(path)`` would read, or None when the file system cannot say.

    As Hadoop's ``FileInputFormat`` lists them: every comma-separated path is a
    glob; a directory contributes its files but not hidden ones (names starting
    with ``_`` or ``.``, such as ``_SUCCESS`` and checksum files), and its
    subdirectories only with ``mapreduce.input.fileinputformat.input.dir.recursive``.
    With the JVM shim they are the lengths of the splits of ``sc.textFile(path)``,
    listed by the input format in the driver, in one py4j call; without it the
    same rules are applied here, at a few py4j calls per file.
    """
    return _sized_text_file(sc, path, plans.settings_for(sc, {}).shim_jar, True)[1]


def _listed_bytes(sc: SparkContext, path: str) -> int | None:
    """:func:`input_bytes` without the shim: Hadoop's ``FileSystem`` over py4j."""
    return listed_bytes(sc, split_paths(path))


def _sized_text_file(sc: SparkContext, path: str, jar: Path | None, use_unicode: bool
                     ) -> tuple[RDD[str] | None, int | None]:
    """``sc.textFile(path)`` with Spark's default splits and its bytes, read from those
    splits (the shim; one listing, which the RDD keeps for its job), or no RDD and the
    bytes :func:`_listed_bytes` finds (no shim). A size of None: unknown."""
    shim = shim_shuffles(sc, jar)
    if shim is None:
        return None, _listed_bytes(sc, path)
    rdd = sc.textFile(path, use_unicode=use_unicode)
    try:
        return rdd, shim.split_bytes(rdd)
    except Exception as e:  # noqa: BLE001 - any failure leaves the source as Spark makes it
        log.debug("size of %s unknown: %s", path, e)
        return rdd, None


def text_file(sc: SparkContext, path: str, *, use_unicode: bool = True,
              **limits: Any) -> RDD[str]:
    """``sc.textFile(path)`` with ``ceil(bytes / S)`` tasks (Flink's source inference), ``S``
    being ``batch.source-split-size`` (64 MiB when unset).

    Within ``min(batch.default-source-parallelism, batch.max-parallelism)``,
    at least ``batch.min-parallelism`` and, with ``batch.use-held-slots``, one
    task per held slot while each reads 1 MiB. With the JVM shim the size is
    read from the splits of ``sc.textFile(path)`` itself, so the input is listed
    once; a count above those splits asks the input format again, with
    ``minPartitions`` set to it. When there are more splits than tasks (small
    files, or file blocks smaller than ``bytes / p``) neighbouring splits are
    grouped without a shuffle (``coalesce``), but only when no split has preferred
    locations (a local or object-store path; HDFS splits have their blocks' hosts, and
    Spark's ``coalesce`` groups those by host, which would change the order of the
    lines): otherwise, or with more than 1000 splits (whose locations are not all looked
    at), the splits stay one task each, and the log says why. With the shim, lines are
    sent to Python in
    chunks (unless ``textinputformat.record.delimiter`` is set); the lines, their order
    and their partitions are ``sc.textFile``'s. When the size cannot
    be read the source is left as ``sc.textFile`` makes it, and the log says
    so. ``limits`` override the settings for this call: ``source_split_size``,
    ``min_parallelism``, ``max_parallelism``. The decision is available from
    :func:`source_decision_of`.
    """
    params = plans.settings_for(sc, limits, _SOURCE_LIMITS)
    rdd, size = _sized_text_file(sc, path, params.shim_jar, use_unicode)
    if size is None:
        decision_log.info("batch: textFile(%s): size unknown, splits left as Spark makes them",
                          path)
        return rdd if rdd is not None else sc.textFile(path, use_unicode=use_unicode)
    decision = decide_source(size, avg_bytes_per_task=params.split_bytes,
                             min_p=params.min_p, max_p=params.max_p,
                             default_source_parallelism=params.default_source,
                             slots=params.slots)
    if rdd is None or decision.parallelism > rdd.getNumPartitions():
        # Finer splits than Spark's default ones need the input format's goal size.
        rdd = sc.textFile(path, minPartitions=decision.parallelism, use_unicode=use_unicode)
    splits = rdd.getNumPartitions()
    rdd = _in_chunks(sc, rdd, params.shim_jar, use_unicode)
    plan = plan_source(path, size, decision, splits,
                       located=_located(rdd) if splits > decision.parallelism else False)
    if plan.coalesced:
        rdd = rdd.coalesce(plan.parallelism)
    plan_id = plans.record(sc, plan)
    plans.name_by_plan(rdd, plan_id, reads=path)
    decision_log.info("batch: textFile(%s) (%s) reads with %d task(s): %s", path, plan_id,
                      plan.parallelism, plan.reason)
    _plans[rdd] = plan
    return rdd


def _located(rdd: RDD[str]) -> bool | None:
    """Whether a split of ``rdd`` has preferred locations (None: not known), which decides
    whether its splits may be grouped without changing the order of its lines."""
    try:
        return splits_have_locations(rdd)
    except Exception as e:  # noqa: BLE001 - unknown: the splits stay as Spark makes them
        log.debug("preferred locations of %s unknown: %s", rdd, e)
        return None


def _in_chunks(sc: SparkContext, rdd: RDD[str], jar: Path | None, use_unicode: bool
               ) -> RDD[str]:
    """``rdd``'s lines sent to Python in chunks by the shim (``LineChunksRDD``), or ``rdd``
    itself without the shim or with a record delimiter of the user's, whose records may
    hold the ``'\n'`` that separates lines in a chunk."""
    shim = shim_shuffles(sc, jar)
    if shim is None or hadoop_conf_get(sc, _DELIMITER) is not None:
        return rdd
    try:
        return shim.line_chunks(rdd, use_unicode)
    except Exception as e:  # noqa: BLE001 - any failure leaves the lines as Spark sends them
        log.debug("lines of %s sent one by one: %s", rdd, e)
        return rdd


def source_decision_of(rdd: RDD[Any]) -> SourcePlan | None:
    """The plan behind an RDD :func:`text_file` returned (None for any other RDD)."""
    return _plans.get(rdd)

