"""spark-adaptive's figures in Spark's own metrics system, read through a sink Spark ships.

A local app configures Spark's ``CsvSink`` for the driver (as a shop would in
``metrics.properties``): the shim's ``spark_adaptive`` source must appear there with a
managed query's parallelism and the application's executors, the query's gauges
appearing once it starts (after the source was registered).
Registering a source is Spark's ``private[spark]`` API, so this runs on every supported
pyspark (``internals``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.testing.session import TEST_CONF, stop_active_session
from spark_adaptive.testing.streaming import rate_aggregation, wait_until

pytestmark = [pytest.mark.internals, pytest.mark.timeout(300)]


def _last_value(directory: Path, suffix: str) -> float | None:
    """The newest value a CsvSink wrote for the gauge whose name ends with ``suffix``."""
    files = [p for p in directory.glob("*.csv") if p.name.endswith(suffix + ".csv")]
    if not files:
        return None
    lines = files[0].read_text().strip().splitlines()
    return float(lines[-1].split(",")[1]) if len(lines) > 1 else None


def test_the_figures_reach_a_spark_metrics_sink(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    sink = tmp_path / "metrics"
    sink.mkdir()
    stop_active_session()
    builder = SparkSession.builder.master("local[2]").appName("spark-metrics")
    conf = {**TEST_CONF, "spark.sql.shuffle.partitions": "2",
            "spark.metrics.conf.driver.sink.csv.class": "org.apache.spark.metrics.sink.CsvSink",
            "spark.metrics.conf.driver.sink.csv.period": "1",
            "spark.metrics.conf.driver.sink.csv.unit": "seconds",
            "spark.metrics.conf.driver.sink.csv.directory": str(sink)}
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark: Any = builder.getOrCreate()
    try:
        rt = spark_adaptive.enable(spark, **{"rest.port": "0"})
        assert rt.metrics_source is not None, "the shim is built by the set-up"
        wait_until(what="the application's figures in the sink", timeout=60,
                   check=lambda: _last_value(sink, ".driver.spark_adaptive.executors.alive")
                   is not None)
        query = rate_aggregation(spark, tmp_path / "out", tmp_path / "checkpoint",
                                 rows_per_second=10, keys=3, name="counts")
        parallelism = wait_until(
            what="the query's parallelism in the sink", timeout=120,
            check=lambda: _last_value(
                sink, ".driver.spark_adaptive.query.counts.parallelism"))
        assert parallelism == 2.0
        assert _last_value(sink, ".driver.spark_adaptive.query.counts.bounds.upper") == 2.0
        query.stop()
    finally:
        stop_active_session()
