from __future__ import annotations

from typing import Any

import pytest

from spark_adaptive.testing.session import stop_active_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def spark_session(_spark_session: Any) -> Any:
    """pytest-spark's local session, made again with its options when a test before this one
    stopped it: a process has one SparkContext, and the cluster tests start their own."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pytest_spark.config import SparkConfigBuilder

    if SparkContext._active_spark_context is _spark_session.sparkContext:
        return _spark_session
    stop_active_session()
    return SparkSession.builder.config(conf=SparkConfigBuilder().get()).getOrCreate()
