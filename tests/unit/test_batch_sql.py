"""The Spark SQL confs that make DataFrame jobs follow the batch settings."""

from __future__ import annotations

from spark_adaptive.batch.sql import source_upper_bound, sql_confs
from spark_adaptive.settings import Settings

AQE, FILES = "spark.sql.adaptive.", "spark.sql.files."


def settings(**conf: str) -> Settings:
    return Settings.from_conf({f"spark.adaptive.batch.{k}": v for k, v in conf.items()})


def test_confs_follow_the_batch_settings() -> None:
    s = settings(**{"avg-data-volume-per-task": "16m", "max-parallelism": "256",
                    "default-source-parallelism": "64"})
    c = sql_confs(s)
    assert c[AQE + "coalescePartitions.initialPartitionNum"] == "256"
    assert c[AQE + "advisoryPartitionSizeInBytes"] == str(16 << 20)
    assert c[AQE + "coalescePartitions.minPartitionSize"] == str(1 << 20)
    # Scans keep the app's split size unless batch.source-split-size is set ...
    assert FILES + "maxPartitionBytes" not in c
    assert c[FILES + "openCostInBytes"] == str(1 << 20)  # Spark's 128 MiB / 128
    assert sql_confs(s, 256 << 20)[FILES + "openCostInBytes"] == str(2 << 20)
    split = sql_confs(settings(**{"source-split-size": "16m"}), 256 << 20)
    assert split[FILES + "maxPartitionBytes"] == str(16 << 20)
    assert split[FILES + "openCostInBytes"] == str(128 << 10)  # ... whose open cost follows
    # ... and never exceeds Spark's 4 MiB.
    assert sql_confs(settings(**{"source-split-size": "1g"}))[
        FILES + "openCostInBytes"] == str(4 << 20)
    assert c[FILES + "maxPartitionNum"] == "64" == str(source_upper_bound(s))
    assert AQE + "enabled" not in c, "the app's choice stays"
    # Held slots are the lower bound: AQE's parallelismFirst, the scans' default minimum.
    assert c[AQE + "coalescePartitions.parallelismFirst"] == "true"
    assert FILES + "minPartitionNum" not in c
    # Spark warns whenever its deprecated minPartitionNum is set: only when it matters.
    assert AQE + "coalescePartitions.minPartitionNum" not in c


def test_flinks_rule_alone_and_a_min_parallelism_above_one() -> None:
    strict = sql_confs(settings(**{"use-held-slots": "false"}))
    assert strict[AQE + "coalescePartitions.parallelismFirst"] == "false"
    assert strict[FILES + "minPartitionNum"] == "1"
    raised = sql_confs(settings(**{"min-parallelism": "6"}))
    assert raised[AQE + "coalescePartitions.minPartitionNum"] == "6"
    assert raised[FILES + "minPartitionNum"] == "6"


def test_small_v_lowers_sparks_minimum_partition_size() -> None:
    s = settings(**{"avg-data-volume-per-task": "100k"})
    assert sql_confs(s)[AQE + "coalescePartitions.minPartitionSize"] == "20480"
    assert source_upper_bound(s) == 128


def test_skew_settings_become_the_skew_joins_thresholds() -> None:
    default = sql_confs(settings())
    assert default[AQE + "skewJoin.skewedPartitionFactor"] == "4.0"
    # unset: the volume per task, which follows batch.avg-data-volume-per-task
    assert default[AQE + "skewJoin.skewedPartitionThresholdInBytes"] == str(64 << 20)
    bigger = sql_confs(settings(**{"avg-data-volume-per-task": "128m"}))
    assert bigger[AQE + "skewJoin.skewedPartitionThresholdInBytes"] == str(128 << 20)
    low = sql_confs(settings(**{"skewed-factor": "2.5", "skewed-threshold": "32m"}))
    assert low[AQE + "skewJoin.skewedPartitionFactor"] == "2.5"
    assert low[AQE + "skewJoin.skewedPartitionThresholdInBytes"] == str(32 << 20)
