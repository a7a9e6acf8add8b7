"""The Adaptive Batch Scheduler on a real local standalone cluster.

DataFrame shuffles follow ``ceil(bytes / V)`` through adaptive execution; the
RDD helpers equal PySpark's own operations, with and without the JVM shim;
executors follow the stages and are released when idle. Data is small and
``V`` tiny so that every test runs in seconds.
"""

from __future__ import annotations

import math
import operator
import os
import re
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive import batch
from spark_adaptive.batch import plans, sources
from spark_adaptive.batch import rdd as batch_rdd
from spark_adaptive.batch.sql import PARTITIONS_PER_TASK, SHIM_EXTENSIONS
from spark_adaptive.core import events as ev
from spark_adaptive.spark.lines import CHUNK_BYTES, LineChunks
from spark_adaptive.spark.shuffle import shim_shuffles
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.session import TEST_CONF, cluster_session, stop_active_session

pytestmark = pytest.mark.timeout(300)

KiB = 1024
#: Per-task volume for the DataFrame test, and two inputs whose shuffle bytes are about
#: 2.5 V and 6.5 V: half a task away from a rounding edge, because adaptive execution
#: decides from the map tasks' size estimates (exact to about 10%), and the exact bytes of
#: the read are what the assertion divides.
V_SQL = 184 * KiB
SQL_ROWS = (40_000, 115_000)
ESTIMATE_KEY = "spark.adaptive.batch.shuffle-partitions-from-estimate"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(1, 2, work_dir=tmp_path_factory.mktemp("batch-cluster")) as c:
        yield c


def _session(cluster: LocalCluster, **adaptive: str) -> tuple[Any, Any, EventRecorder]:
    # The task slots the app holds (defaultParallelism) are the cluster's two cores, not
    # TEST_CONF's 4: batch.use-held-slots makes them the least number of tasks.
    # TEST_CONF's explicit shuffle.partitions would be the shuffles' upper bound (unset
    # here; cluster_session clears what earlier sessions of this process left in the JVM's
    # system properties). The initial count is given as batch.max-parallelism's default,
    # so that it is the bound.
    spark = cluster_session(cluster, "batch-test", **{
        "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": None,
        "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "128"})
    rt = spark_adaptive.enable(spark, **{"batch.enabled": "true", **adaptive})
    rec = EventRecorder()
    rt.subscribe(rec, "test recorder")
    return spark, rt, rec


@pytest.fixture
def stop_session() -> Iterator[None]:
    yield
    stop_active_session()


def test_dataframe_shuffle_stage_runs_bytes_over_v_tasks(cluster: LocalCluster,
                                                         stop_session: None) -> None:
    from pyspark.sql import functions as F

    spark, rt, rec = _session(cluster, **{"batch.avg-data-volume-per-task": str(V_SQL)})
    assert spark.conf.get("spark.sql.adaptive.advisoryPartitionSizeInBytes") == str(V_SQL)
    assert spark.conf.get("spark.sql.adaptive.coalescePartitions.initialPartitionNum") == "128"
    seen = []
    for rows in SQL_ROWS:
        mark = rec.mark()
        (spark.range(0, rows, numPartitions=4)
         .groupBy((F.col("id") % (rows // 2)).alias("k")).agg(F.sum("id").alias("s"))
         .write.format("noop").mode("overwrite").save())
        final = rec.wait_for(ev.StageCompleted, where=lambda e: e.shuffle_read_bytes > 0,
                             since=mark)
        seen.append((final.shuffle_read_bytes, final.num_tasks))
        assert final.num_tasks == math.ceil(final.shuffle_read_bytes / V_SQL), seen
    assert seen[0][1] < seen[1][1], "more data, more tasks"

    # The report explains the same stage with the same numbers.
    job = rec.wait_for(ev.JobEnded, since=mark)
    rt.loop.call_sync(lambda: None)  # the batch part has handled what came before
    report = batch.report(spark)
    stages = [s for j in report["jobs"] for s in j["stages"] if s["kind"] == "shuffle"]
    assert (stages[-1]["shuffleReadBytes"], stages[-1]["numTasks"]) == seen[-1]
    assert stages[-1]["followsRule"] is True and "ceil(" in stages[-1]["reason"]
    assert any(j["jobId"] == job.job_id and j["executionId"] is not None
               for j in report["jobs"])

    # Less than V in all: Flink's rule says 1 task, the two held slots make it 2
    # (each task still reads more than V / 5).
    mark = rec.mark()
    (spark.range(0, 8_000, numPartitions=4).groupBy((F.col("id") % 4_000).alias("k"))
     .agg(F.sum("id").alias("s")).write.format("noop").mode("overwrite").save())
    small = rec.wait_for(ev.StageCompleted, where=lambda e: e.shuffle_read_bytes > 0, since=mark)
    assert math.ceil(small.shuffle_read_bytes / V_SQL) == 1
    assert small.shuffle_read_bytes > 2 * V_SQL // 5 and small.num_tasks == 2


def _shuffle_partitions(df: Any, initial: bool = False) -> list[int]:
    """Partition counts of the exchanges, top down, in the final adaptive plan of an executed
    query, or in the plan AQE started from."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    final, _, first = plan.partition("== Initial Plan ==")
    return [int(n) for n in re.findall(r"(?:hash|range)partitioning\(.*?, (\d+)\), "
                                       r"ENSURE_REQUIREMENTS", first if initial else final)]


@pytest.mark.internals
def test_small_query_shuffles_are_written_in_the_partitions_its_estimate_plans(
        cluster: LocalCluster, stop_session: None) -> None:
    """With the shim's SQL extension (sessions created after activation), a query whose
    inputs plan 2 tasks writes its shuffles in 8 partitions per task, not 128; a bigger one
    keeps 128; the answers equal those with the rule off."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    stop_active_session()
    conf = SparkConf().setMaster(cluster.master_url).setAppName("batch-estimate")
    # TEST_CONF's explicit shuffle.partitions would be the shuffles' upper bound: left out.
    unbounded = {k: v for k, v in TEST_CONF.items() if k != "spark.sql.shuffle.partitions"}
    for k, v in {**unbounded, "spark.default.parallelism": "2",
                 "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "128",
                 "spark.sql.autoBroadcastJoinThreshold": "-1"}.items():  # shuffled joins
        conf.set(k, v)
    sc = SparkContext(conf=conf)
    spark_adaptive.enable(sc, **{"batch.enabled": "true", "rest.enabled": "false",
                                 "batch.avg-data-volume-per-task": str(V_SQL)})
    spark = SparkSession.builder.getOrCreate()
    assert SHIM_EXTENSIONS in spark.conf.get("spark.sql.extensions")

    def query(rows: int) -> Any:
        # aggregate, sort-merge join (co-partitioned sides), global sort (range partitioning)
        per_key = (spark.range(0, rows, numPartitions=4).groupBy((F.col("id") % 500).alias("k"))
                   .agg(F.sum("id").alias("s"), F.count("*").alias("n")))
        dims = spark.range(0, 500, numPartitions=2).select(F.col("id").alias("k"),
                                                           (F.col("id") % 7).alias("g"))
        return (per_key.join(dims, "k").groupBy("g").agg(F.sum("s").alias("s"),
                                                          F.sum("n").alias("n")).orderBy("g"))

    answers: dict[int, list[tuple[Any, ...]]] = {}
    for rows, join_sides in ((8_000, 2 * PARTITIONS_PER_TASK), (400_000, 128)):
        # Spark's estimate of 8,000 ids is 64 KB: under V, so the two held slots: 2 tasks.
        # 400,000 ids: 3.2 MB, over 16 tasks of 184 KiB: 8 per task would pass 128.
        spark.conf.set(ESTIMATE_KEY, "true")
        on = query(rows)
        got = [tuple(r) for r in on.collect()]
        counts = _shuffle_partitions(on)  # top down: sort, per group, the join's sides
        assert len(counts) == 4 and counts[2:] == [join_sides] * 2, (rows, counts)
        if rows == 8_000:  # one count for the whole query, from its first plan on
            assert counts[:2] == [join_sides] * 2, counts
            assert _shuffle_partitions(on, initial=True) == [join_sides] * 4
        else:  # planned after the join's sides ran, from their real bytes (7 groups): 16
            assert counts[0] == 2 * PARTITIONS_PER_TASK, counts
        spark.conf.set(ESTIMATE_KEY, "false")
        off = query(rows)
        assert [tuple(r) for r in off.collect()] == got
        assert set(_shuffle_partitions(off)) == {128}
        assert sum(n for _, _, n in got) == rows
        answers[rows] = got

    # A bad value set on the session (activation checked the conf's): Spark's plans, same answers.
    spark.conf.set(ESTIMATE_KEY, "maybe")
    bad = query(8_000)
    assert [tuple(r) for r in bad.collect()] == answers[8_000]
    assert set(_shuffle_partitions(bad)) == {128}


def _pairs(spark: Any, n: int, hot: bool = False, slices: int = 32) -> Any:
    """``n`` pairs over 2,000 keys in ``slices`` slices (a helper writes at most one
    partition per map task); with ``hot``, half of them on key 0 (distinct values, so
    the hot partition stays big after compression)."""
    return spark.sparkContext.parallelize(range(n), slices).map(
        lambda x: (0 if hot and x % 2 else x % 2000, x))


@pytest.mark.parametrize("shim", [pytest.param(True, marks=pytest.mark.internals), False],
                         ids=["shim", "no-shim"])
def test_rdd_reduce_by_key_equals_pyspark(cluster: LocalCluster, stop_session: None,
                                          tmp_path: Path, shim: bool,
                                          caplog: pytest.LogCaptureFixture) -> None:
    conf = {} if shim else {"shim.jar": str(tmp_path / "absent.jar")}
    spark, rt, rec = _session(cluster, **conf)
    assert rt.listener_path == ("shim" if shim else "py4j")
    without = [r for r in caplog.records if "runs without its JVM shim" in r.getMessage()]
    assert [r.levelname for r in without] == ([] if shim else ["WARNING"])
    # 64 partitions (one per map task), each far smaller than V: ranges of them can meet
    # the rule's count exactly.
    rdd = _pairs(spark, 60_000, slices=64)
    expected = sorted(rdd.reduceByKey(operator.add).collect())

    out = batch.reduce_by_key(rdd, operator.add, avg_bytes_per_task=64 * KiB,
                              max_parallelism=64)
    mark = rec.mark()
    assert sorted(out.collect()) == expected
    plan = batch.decision_of(out)
    # The stage that read by the plan names it (through either listener), and the report
    # explains that stage by the plan, not by the session's 64 MiB rule.
    read = rec.wait_for(ev.StageCompleted, where=lambda e: e.shuffle_read_bytes > 0,
                        since=mark)
    assert read.plan is not None and read.plan.startswith("reduceByKey#"), read
    rt.loop.call_sync(lambda: None)
    report = batch.report(spark)
    stage = next(s for j in report["jobs"] for s in j["stages"] if s["stageId"] == read.stage_id)
    assert stage["plan"] == read.plan and stage["followsRule"] is True, stage
    assert f"planned by {read.plan}: reduceByKey" in stage["reason"], stage
    assert any(p.get("id") == read.plan for p in report["rddShuffles"])
    assert plan is not None and plan.partitions == 64
    assert plan.total_bytes is not None and plan.total_bytes > 0
    assert 4 <= plan.parallelism == math.ceil(plan.total_bytes / (64 * KiB))
    assert out.getNumPartitions() == plan.parallelism
    assert plan.method == ("bytes" if shim else "even")
    if shim:
        # Contiguous ranges covering every partition once, balanced by bytes.
        ranges = plan.ranges()
        assert ranges[0][0] == 0 and ranges[-1][1] == 64
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        assert plan.bytes_per_task is not None
        assert max(plan.bytes_per_task) <= 2 * min(plan.bytes_per_task)
    else:
        # Without sizes per map task a join shuffles both sides as one, as PySpark does.
        other = spark.sparkContext.parallelize([(k, -k) for k in range(0, 2000, 7)], 2)
        joined = batch.join(rdd, other, avg_bytes_per_task=64 * KiB, max_parallelism=64)
        assert sorted(joined.collect()) == sorted(rdd.join(other).collect())
        joined_plan = batch.decision_of(joined)
        assert joined_plan is not None and joined_plan.method == "even"
        assert "join shuffles both sides as one" in caplog.text


def test_rdd_reduce_by_key_splits_a_skewed_key_and_merges_it(cluster: LocalCluster,
                                                              stop_session: None) -> None:
    spark, rt, rec = _session(cluster)
    rdd = _pairs(spark, 40_000, hot=True)
    # A reduction that does not shrink (lists), so key 0 stays skewed after local combining.
    as_list = rdd.mapValues(lambda v: [v])
    expected = {k: sorted(v) for k, v in as_list.reduceByKey(operator.add).collect()}

    out = batch.reduce_by_key(as_list, operator.add, avg_bytes_per_task=8 * KiB,
                              max_parallelism=16, skew_threshold=1)
    got = {k: sorted(v) for k, v in out.collect()}
    assert got == expected
    plan = batch.decision_of(out)
    assert plan is not None and plan.skewed, plan.reason
    assert plan.piece_tasks, "the skewed partition is read in pieces"
    assert "split skewed partitions" in plan.reason

    # combineByKey with combiners of another type than the values, through the same paths.
    def create(v: int) -> list[int]:
        return [v]

    def merge_value(c: list[int], v: int) -> list[int]:
        return [*c, v]

    def merge_combiners(a: list[int], b: list[int]) -> list[int]:
        return a + b

    expected = {k: sorted(c) for k, c in
                rdd.combineByKey(create, merge_value, merge_combiners).collect()}
    combined = batch.combine_by_key(rdd, create, merge_value, merge_combiners,
                                    avg_bytes_per_task=8 * KiB, max_parallelism=16,
                                    skew_threshold=1)
    assert {k: sorted(c) for k, c in combined.collect()} == expected
    combined_plan = batch.decision_of(combined)
    assert combined_plan is not None and combined_plan.piece_tasks, combined_plan


def test_rdd_join_splits_a_hot_key_and_equals_pyspark(cluster: LocalCluster,
                                                      stop_session: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spark, rt, rec = _session(cluster)
    sc = spark.sparkContext
    # A third of the left rows on key 0, written by 16 map tasks (so its partition can be
    # cut into up to 16 pieces, and 16 partitions are written: one per map task at most);
    # distinct values, so it stays big after compression.
    left = sc.parallelize(range(24_000), 16).map(lambda x: (0 if x % 3 == 0 else x % 1000, x))
    right = sc.parallelize([(k, -k) for k in range(0, 1000, 2)], 2)
    limits = dict(avg_bytes_per_task=16 * KiB, max_parallelism=16, skew_threshold=1)

    out = batch.join(left, right, **limits)
    assert sorted(out.collect()) == sorted(left.join(right).collect())
    plan = batch.decision_of(out)
    assert plan is not None and plan.method == "bytes", plan
    assert plan.maps_by_shuffle == (16, 2) and out.getNumPartitions() == plan.parallelism
    hot = 0  # PySpark's portable_hash of an int is its hash: key 0 goes to partition 0
    assert hot in plan.skewed, plan.reason
    # The hot partition is read in left pieces, each with the right side's whole partition.
    pieces = [plan.tasks[i] for i in plan.piece_tasks]
    assert len(pieces) >= 3, plan.reason
    assert all(sorted((s.shuffle, s.start, s.is_piece) for s in t)
               == [(0, hot, True), (1, hot, False)] for t in pieces), plan.to_json()
    # Bytes per task are balanced (a last range of the contiguous packing may be small, so
    # against the median), where the hot partition alone would be over twice the largest.
    sizes = plan.bytes_per_task
    described = (sizes, plan.spec(), plan.reason)
    assert sizes is not None and max(sizes) <= 1.5 * statistics.median(sizes), described
    assert sum(sizes[i] for i in plan.piece_tasks) > 2 * max(sizes), described
    rt.loop.call_sync(lambda: None)
    recorded = batch.report(spark)["rddShuffles"]
    assert any(r["operation"] == "join" and r["mapsByShuffle"] == [16, 2] for r in recorded)

    # A left outer join may split the left side only; here that is the hot one.
    outer = batch.left_outer_join(left, right, **limits)
    assert sorted(outer.collect()) == sorted(left.leftOuterJoin(right).collect())
    outer_plan = batch.decision_of(outer)
    assert outer_plan is not None and outer_plan.piece_tasks, outer_plan
    assert {s.shuffle for i in outer_plan.piece_tasks for s in outer_plan.tasks[i]
            if s.is_piece} == {0}

    # Tasks whose smaller side is over the in-memory limit group both sides instead: with
    # a limit of 0 bytes every task does, and the joins still equal PySpark's.
    monkeypatch.setattr(batch_rdd, "HASH_SIDE_SHARE", 1 << 40)
    assert sorted(batch.join(left, right, **limits).collect()) == \
        sorted(left.join(right).collect())
    assert sorted(batch.left_outer_join(left, right, **limits).collect()) == \
        sorted(left.leftOuterJoin(right).collect())


def test_group_by_key_join_and_sort_equal_pyspark(cluster: LocalCluster,
                                                  stop_session: None) -> None:
    spark, rt, rec = _session(cluster, **{"batch.avg-data-volume-per-task": "16k",
                                          "batch.max-parallelism": "24"})
    rdd = _pairs(spark, 30_000, hot=True)
    other = spark.sparkContext.parallelize([(k, -k) for k in range(0, 2000, 3)], 2)

    grouped = batch.group_by_key(rdd, skew_threshold=1)
    assert ({k: sorted(v) for k, v in grouped.collect()}
            == {k: sorted(v) for k, v in rdd.groupByKey().collect()})
    joined = batch.join(rdd, other)
    assert sorted(joined.collect()) == sorted(rdd.join(other).collect())
    for ascending in (True, False):
        keyed = rdd.map(lambda kv: (kv[1] % 977, kv[1]))
        ordered = batch.sort_by_key(keyed, ascending).collect()
        # Equal keys may bring their values in another order than PySpark's; keys may not.
        assert [k for k, _ in ordered] == [k for k, _ in keyed.sortByKey(ascending).collect()]
        assert sorted(ordered) == sorted(keyed.collect())


def test_text_file_runs_bytes_over_split_size_tasks_and_equals_text_file(cluster: LocalCluster,
                                                                stop_session: None,
                                                                tmp_path: Path) -> None:
    spark, rt, rec = _session(cluster)
    sc = spark.sparkContext
    # 40 small files, as a job with 40 shuffle partitions writes them, and what Hadoop
    # skips: a marker and a checksum file, neither of which counts as input.
    small = tmp_path / "small"
    small.mkdir()
    lines = [f"{i},{i % 97}" for i in range(20_000)]
    for f in range(40):
        (small / f"part-{f:05d}").write_text("\n".join(lines[f::40]) + "\n")
    (small / "_SUCCESS").write_text("")
    (small / ".part-00000.crc").write_bytes(b"x" * 50_000)
    size = sum(p.stat().st_size for p in small.glob("part-*"))

    rdd = batch.text_file(sc, str(small), source_split_size=16 * KiB)
    plan = batch.source_decision_of(rdd)
    assert plan is not None and plan.input_bytes == size and plan.splits == 40, plan
    assert plan.parallelism == math.ceil(size / (16 * KiB)) < 40, plan
    assert rdd.getNumPartitions() == plan.parallelism and plan.coalesced
    assert sorted(rdd.collect()) == sorted(lines)
    pairs = rdd.map(lambda line: (int(line.split(",")[1]), 1))
    assert (sorted(batch.reduce_by_key(pairs, operator.add).collect())
            == sorted(sc.textFile(str(small)).map(lambda line: (int(line.split(",")[1]), 1))
                      .reduceByKey(operator.add).collect()))

    # One file: split finer than its block, into ceil(bytes / split size) tasks.
    one = tmp_path / "one.csv"
    one.write_text("\n".join(lines * 8) + "\n")
    big = batch.text_file(sc, str(one), source_split_size=256 * KiB)
    big_plan = batch.source_decision_of(big)
    assert big_plan is not None and big_plan.input_bytes == one.stat().st_size
    assert big.getNumPartitions() == big_plan.parallelism == math.ceil(
        one.stat().st_size / (256 * KiB)), big_plan
    mark = rec.mark()
    assert big.count() == len(lines) * 8
    # The stage that reads it is explained by its plan; Spark's UI still shows the path.
    counted = rec.wait_for(ev.StageCompleted, since=mark)
    assert counted.plan is not None and counted.plan.startswith("textFile#"), counted
    assert big.name() == f"{ev.PLAN_RDD_PREFIX}{counted.plan} {one}"
    # Sized by the shim (the splits of sc.textFile(path), listed once in the driver JVM,
    # one py4j call) and without it (Hadoop's FileSystem over py4j): the same bytes, for
    # a directory with hidden files, a glob and a comma-separated list.
    shim = shim_shuffles(sc, plans.settings_for(sc, {}).shim_jar)
    assert shim is not None
    first = small / "part-00000"
    for path, files in ((str(small), list(small.glob("part-*"))),
                        (str(small / "part-0000*"), list(small.glob("part-0000*"))),
                        (f"{first},{one}", [first, one])):
        expected = sum(f.stat().st_size for f in files)
        assert sources.input_bytes(sc, path) == sources._listed_bytes(sc, path) == expected, path
        assert shim.split_bytes(sc.textFile(path)) == expected, path
    assert sources.input_bytes(sc, str(tmp_path / "absent")) is None
    rt.loop.call_sync(lambda: None)
    recorded = batch.report(spark)["rddSources"]
    assert [r["splits"] for r in recorded[-2:]] == [40, big_plan.splits]

    # A path that is not there is left to Spark, which names it when the job runs.
    absent = batch.text_file(sc, str(tmp_path / "absent"))
    assert batch.source_decision_of(absent) is None
    with pytest.raises(Exception, match="absent"):
        absent.count()
    with pytest.raises(TypeError, match="skew_factor"):
        batch.text_file(sc, str(small), skew_factor=2.0)
    with pytest.raises(TypeError, match="avg_bytes_per_task"):  # sources take a split size
        batch.text_file(sc, str(small), avg_bytes_per_task=16 * KiB)
    with pytest.raises(ValueError, match="source_split_size must be >= 1"):
        batch.text_file(sc, str(small), source_split_size=0)
    with pytest.raises(ValueError, match="source_split_size must be an integer, got 'big'"):
        batch.text_file(sc, str(small), source_split_size="big")


@pytest.mark.internals
def test_text_file_sends_lines_in_chunks_and_they_are_text_files_lines(
        cluster: LocalCluster, stop_session: None, tmp_path: Path) -> None:
    spark, _, _ = _session(cluster)
    sc = spark.sparkContext
    data = tmp_path / "lines"
    data.mkdir()
    # Every way a line can end or hold an odd character, a line longer than a chunk
    # (CHUNK_BYTES), enough short lines to fill several chunks, an empty file, no final
    # newline.
    odd = ("h\u00e9llo\r\n\r\n\r\nx\x0cy\u2028z\x1c\n".encode()
           + b"bad \xff byte\ntruncated \xe2\x82 x\nsurrogate \xed\xa0\x80 x\n"
           + b"L" * (CHUNK_BYTES + 123) + b"\n\n")
    short = "".join(f"{i},{i * 0.5},{i % 7}\n" for i in range(60_000)).encode()
    (data / "a.txt").write_bytes(odd + short + b"last line, no newline")
    (data / "b.txt").write_bytes(b"")
    (data / "c.txt").write_bytes(short)
    shim = shim_shuffles(sc, plans.settings_for(sc, {}).shim_jar)
    assert shim is not None
    for use_unicode in (True, False):
        # The shim's RDD over sc.textFile's splits: the same lines in the same partitions.
        plain = sc.textFile(str(data), minPartitions=3, use_unicode=use_unicode)
        chunked = shim.line_chunks(plain, use_unicode)
        assert isinstance(chunked._jrdd_deserializer, LineChunks)
        expected = plain.glom().collect()
        assert chunked.glom().collect() == expected
        assert sum(map(len, expected)) == 2 * 60_000 + 10
        # What batch.text_file returns is such an RDD, and its lines are textFile's.
        rdd = batch.text_file(sc, str(data), use_unicode=use_unicode,
                              source_split_size=256 * KiB)
        assert isinstance(rdd._jrdd_deserializer, LineChunks)
        assert sorted(rdd.collect()) == sorted(line for part in expected for line in part)

    # A record delimiter of the user's may put '\n' inside a record: lines go one by one.
    hadoop = sc._jsc.hadoopConfiguration()
    (tmp_path / "semi.txt").write_text("a\nb;c;\n;d")
    hadoop.set("textinputformat.record.delimiter", ";")
    try:
        rdd = batch.text_file(sc, str(tmp_path / "semi.txt"))
        assert not isinstance(rdd._jrdd_deserializer, LineChunks)
        assert rdd.collect() == ["a\nb", "c", "\n", "d"]
    finally:
        hadoop.unset("textinputformat.record.delimiter")
    with pytest.raises(Exception, match="not sc.textFile"):
        shim.line_chunks(plain.map(lambda x: x), True)


def test_executors_follow_stage_tasks_and_go_when_idle(local_cluster_factory: Any,
                                                       stop_session: None) -> None:
    cluster = local_cluster_factory(3)
    spark, rt, rec = _session(cluster, **{"batch.executor-idle-timeout": "2s",
                                          "batch.avg-data-volume-per-task": "4k"})

    def live() -> int:
        return len(rt.scheduler.resources.executors)

    rec.wait_for(ev.Event, where=lambda e: live() == 3, timeout=90)
    spark.sparkContext.parallelize(range(10), 1).count()  # one task, then idle
    rec.wait_for(ev.ExecutorRemoved, timeout=60)
    rec.wait_for(ev.Event, where=lambda e: live() == 1, timeout=60)

    mark = rec.mark()
    spark.sparkContext.parallelize(range(3000), 3).map(lambda x: (x % 300, x)) \
        .reduceByKey(operator.add, 3).count()
    rec.wait_for(ev.ExecutorAdded, since=mark, timeout=90)
    assert any(total >= 3 for total, _ in rt.loop.call_sync(lambda: list(
        _follower(rt).decisions)))  # type: ignore[union-attr]


def _follower(rt: Any) -> Any:
    from spark_adaptive.batch.wiring import batch_scheduler_for

    part = batch_scheduler_for(rt.sc)
    assert part is not None
    return part.follower


ZERO_CODE_APP = textwrap.dedent("""
    from pyspark.sql import SparkSession, functions as F
    spark = SparkSession.builder.appName("unmodified-batch-app").getOrCreate()
    # One write per line (spark-submit runs Python unbuffered; JVM log lines share the pipe).
    print(f"ADVISORY {spark.conf.get('spark.sql.adaptive.advisoryPartitionSizeInBytes')}")
    (spark.range(0, 40000, numPartitions=4).groupBy((F.col("id") % 20000).alias("k"))
     .agg(F.sum("id").alias("s")).write.format("noop").mode("overwrite").save())
    print("RESULT done")
    spark.stop()
""")


def test_zero_code_app_is_steered_before_its_first_session(cluster: LocalCluster,
                                                           tmp_path: Path) -> None:
    """spark-submit with the keys only: the session the app creates already has the confs."""
    app = tmp_path / "app.py"
    app.write_text(ZERO_CODE_APP)
    submit = str(Path(sys.executable).parent / "spark-submit")
    conf = ["spark.adaptive.enabled=true", "spark.adaptive.batch.enabled=true",
            f"spark.adaptive.batch.avg-data-volume-per-task={V_SQL}",
            "spark.executor.memory=512m", "spark.driver.host=127.0.0.1", "spark.ui.enabled=false"]
    args = [submit, "--master", cluster.master_url]
    for c in conf:
        args += ["--conf", c]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    p = subprocess.run([*args, str(app)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:]
    assert f"ADVISORY {V_SQL}" in p.stdout and "RESULT done" in p.stdout
    assert "batch: Spark SQL steered to 184 KiB per shuffle-reading task" in p.stdout
    # The session the app made has the shim's SQL extension: Spark estimates 480,000 bytes
    # into the shuffle, 3 tasks of 184 KiB, so 24 partitions are written instead of 128.
    assert ("1 shuffle(s) of this query written in 24 partitions instead of 128 (8 per task): "
            "Spark estimates at most 480000 bytes") in p.stdout, p.stdout[-3000:]
    # 390 KiB of shuffle in 24 partitions (459 KiB in 128) at 184 KiB per task: 3 tasks.
    assert "ran 3 tasks; rule: ceil(390.3 KiB / 184 KiB) = 3" in p.stdout, p.stdout[-3000:]


def test_an_app_s_own_shuffle_partitions_stay_the_upper_bound(cluster: LocalCluster,
                                                              stop_session: None) -> None:
    """An app that sets spark.sql.shuffle.partitions (as Flink's parallelism.default) gets
    its shuffles written in at most that many partitions, and the answers of plain Spark."""
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    initial = "spark.sql.adaptive.coalescePartitions.initialPartitionNum"
    if SparkContext._jvm is not None:
        # The first session of this process launched the JVM with its options as system
        # properties, which every later SparkConf loads: one that gave initialPartitionNum
        # would be read as this app's own setting.
        SparkContext._jvm.java.lang.System.clearProperty(initial)
    spark = cluster_session(cluster, "batch-own-count", **{"spark.default.parallelism": "2",
                                                           "spark.sql.shuffle.partitions": "3"})
    spark_adaptive.enable(spark, **{"batch.enabled": "true"})
    assert spark.conf.get(initial) is None
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    df = (spark.range(0, 400_000, numPartitions=4).groupBy((F.col("id") % 500).alias("k"))
          .agg(F.sum("id").alias("s")).orderBy("k"))
    got = [tuple(r) for r in df.collect()]
    assert max(_shuffle_partitions(df, initial=True)) <= 3
    assert got == [(k, sum(range(k, 400_000, 500))) for k in range(500)]
