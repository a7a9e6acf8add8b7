from __future__ import annotations

from typing import Any

import pytest

from spark_adaptive.testing.session import stop_active_session

#: ``make test-integration`` runs the integration tests in two lanes side by side, each
#: one test at a time (``tests/integration/lanes.py``). These modules spend their time
#: waiting on a load profile's or a fault schedule's clock, with little work on the
#: cores: they are marked ``waiting`` and make one lane; every other module is the other.
WAITING = {"test_autoscaler.py", "test_soak.py", "test_many_queries.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if item.fspath.basename in WAITING:
                item.add_marker(pytest.mark.waiting)


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
