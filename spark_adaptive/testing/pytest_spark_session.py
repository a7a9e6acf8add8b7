"""pytest-spark's ``spark_session`` for the tests after a cluster test: an opt-in plugin.

A process has one SparkContext, so a test that makes a session on a
:class:`~spark_adaptive.testing.cluster.LocalCluster` (``cluster_spark_factory``)
stops the session-scoped local session of pytest-spark, and the tests after it
would be given a stopped session. With this plugin, ``spark_session`` and
``spark_context`` are pytest-spark's while its session runs, and otherwise a
session made again with pytest-spark's options (``spark_options``), kept for
the tests after and stopped at the end of the run. Ask for it as for the
fixtures' plugin, in the top-level ``conftest.py``::

    pytest_plugins = ["spark_adaptive.testing.pytest_plugin",
                      "spark_adaptive.testing.pytest_spark_session"]

or with ``pytest -p spark_adaptive.testing.pytest_spark_session``.

Its fixtures are function-scoped (each test checks the session it is given), so
a fixture of a wider scope cannot ask for them. A Spark Connect session
(``spark_connect_url``) is given as it is: a session on a cluster leaves it
running.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def _local_session() -> Any:
    """A session made as pytest-spark makes its own, after the SparkContext running
    (a cluster test's) is stopped."""
    from pyspark.sql import SparkSession
    from pytest_spark.config import SparkConfigBuilder  # type: ignore[import-untyped]
    from pytest_spark.util import reduce_logging  # type: ignore[import-untyped]

    from spark_adaptive.testing.session import stop_active_session

    stop_active_session()
    session = SparkSession.builder.config(conf=SparkConfigBuilder().get()).getOrCreate()
    reduce_logging(session.sparkContext)
    return session


@pytest.fixture(scope="session")
def _spark_sessions_made_again() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    from spark_adaptive.testing.session import stop_session

    for spark in made:
        stop_session(spark)


class _Fixtures:
    """The fixtures named as pytest-spark's, on an object registered as a plugin when
    pytest is configured: after pytest-spark whichever way this module was loaded (``-p``
    loads it first), so that they replace pytest-spark's."""

    @pytest.fixture
    def spark_session(self, _spark_session: Any,
                      _spark_sessions_made_again: list[Any]) -> Any:
        """pytest-spark's local session while it runs, else one made again with its
        options."""
        from pyspark import SparkContext
        from pytest_spark.config import SparkConfigBuilder

        if SparkConfigBuilder.is_spark_connect():
            return _spark_session
        running = SparkContext._active_spark_context
        for spark in (_spark_session, *_spark_sessions_made_again):
            if running is not None and running is spark.sparkContext:
                return spark
        spark = _local_session()
        _spark_sessions_made_again.append(spark)
        return spark

    @pytest.fixture
    def spark_context(self, spark_session: Any) -> Any:
        """The SparkContext of ``spark_session``."""
        return spark_session.sparkContext


_PLUGIN_NAME = "spark-adaptive-pytest-spark-session"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(_Fixtures(), _PLUGIN_NAME)
