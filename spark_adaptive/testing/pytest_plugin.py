"""pytest fixtures for a real local Spark cluster: an opt-in pytest plugin.

Nothing loads it by itself: a project that wants the fixtures asks for them, in
its top-level ``conftest.py``::

    pytest_plugins = ["spark_adaptive.testing.pytest_plugin"]

or on the command line, ``pytest -p spark_adaptive.testing.pytest_plugin``. What
it needs beyond the package (pytest, psutil) comes with the extra
``spark-adaptive[testing]``.

* ``local_cluster_factory(workers=1, cores_per_worker=1, ...)`` makes clusters
  that are all ended when the test ends, also when it fails;
* ``local_cluster``: a fresh cluster with one one-core worker;
* ``cluster_spark_factory(cluster, **conf)``: a SparkSession on a cluster,
  stopped at the end of the test.

A process has one SparkContext: ``cluster_spark_factory`` stops the one running
when it makes a session, also pytest-spark's session-scoped ``spark_session``.
It stops nothing when the test does not call it, and at the end of the test it
stops only the sessions it made. The opt-in plugin
:mod:`spark_adaptive.testing.pytest_spark_session` gives the tests after it a
``spark_session`` made again with pytest-spark's options.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_adaptive.testing.cluster import LocalCluster


@pytest.fixture
def local_cluster_factory(tmp_path_factory: pytest.TempPathFactory
                          ) -> Iterator[Callable[..., LocalCluster]]:
    made: list[LocalCluster] = []

    def make(workers: int = 1, cores_per_worker: int = 1, **kw: Any) -> LocalCluster:
        kw.setdefault("work_dir", tmp_path_factory.mktemp("cluster"))
        c = LocalCluster(workers, cores_per_worker, **kw)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.close()


@pytest.fixture
def local_cluster(local_cluster_factory: Callable[..., LocalCluster]) -> LocalCluster:
    return local_cluster_factory(1)


@pytest.fixture
def cluster_spark_factory() -> Iterator[Callable[..., Any]]:
    from spark_adaptive.testing import session

    made: list[Any] = []

    def make(cluster: LocalCluster, app_name: str = "spark-adaptive-test",
             **conf: str | None) -> Any:
        spark = session.cluster_session(cluster, app_name, **conf)
        made.append(spark)
        return spark

    yield make
    for spark in made:
        session.stop_session(spark)
