"""The quick local tier: pytest-spark's ``spark_session`` (local[2]), no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from spark_adaptive.spark.streaming import is_stateful


def _plan(df: Any) -> Any:
    return df._jdf.queryExecution().analyzed()


@pytest.mark.parametrize(("build", "stateful"), [
    (lambda s, F: s.select("value"), False),
    (lambda s, F: s.groupBy((F.col("value") % 3).alias("k")).count(), True),
    (lambda s, F: s.dropDuplicates(["value"]), True),
    (lambda s, F: s.select("value").distinct(), True),
    (lambda s, F: s.join(s.sparkSession.range(10).withColumnRenamed("id", "value"), "value"),
     False),  # stream-static join: no state
    (lambda s, F: s.alias("a").join(s.alias("b"), "value"), True),  # stream-stream join
])
def test_stateful_operators_are_recognised_from_the_plan(spark_session: Any, build: Any,
                                                         stateful: bool) -> None:
    from pyspark.sql import functions as F

    stream = spark_session.readStream.format("rate").load()
    assert is_stateful(_plan(build(stream, F))) is stateful
