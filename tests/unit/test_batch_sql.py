"""The Spark SQL confs that make DataFrame jobs follow the batch settings."""

from __future__ import annotations

from spark_adaptive.batch.sql import source_upper_bound, sql_confs
from spark_adaptive.core.options import Settings


def test_confs_follow_the_batch_settings() -> None:
    s = Settings.from_conf({"spark.adaptive.batch.avg-data-volume-per-task": "16m",
                            "spark.adaptive.batch.min-parallelism": "2",
                            "spark.adaptive.batch.max-parallelism": "256",
                            "spark.adaptive.batch.default-source-parallelism": "64"})
    c = sql_confs(s)
    assert c["spark.sql.adaptive.coalescePartitions.initialPartitionNum"] == "256"
    assert c["spark.sql.adaptive.advisoryPartitionSizeInBytes"] == str(16 << 20)
    assert c["spark.sql.adaptive.coalescePartitions.minPartitionNum"] == "2"
    # parallelismFirst would aim at the executor cores instead of the advisory size.
    assert c["spark.sql.adaptive.coalescePartitions.parallelismFirst"] == "false"
    assert c["spark.sql.adaptive.coalescePartitions.minPartitionSize"] == str(1 << 20)
    assert c["spark.sql.files.maxPartitionBytes"] == str(16 << 20)
    assert c["spark.sql.files.minPartitionNum"] == "2"
    assert c["spark.sql.files.maxPartitionNum"] == "64" == str(source_upper_bound(s))
    assert "spark.sql.adaptive.enabled" not in c, "the app's choice stays"


def test_small_v_lowers_sparks_minimum_partition_size() -> None:
    s = Settings.from_conf({"spark.adaptive.batch.avg-data-volume-per-task": "100k"})
    assert sql_confs(s)["spark.sql.adaptive.coalescePartitions.minPartitionSize"] == "20480"
    assert source_upper_bound(s) == 128
