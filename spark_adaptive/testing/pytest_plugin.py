"""pytest fixtures for a real local Spark cluster: an opt-in pytest plugin.

Nothing loads it by itself: a project that wants the fixtures asks for them, in
its top-level ``conftest.py``::

    pytest_plugins = ["spark_adaptive.testing.pytest_plugin"]

or on the command line, ``pytest -p spark_adaptive.testing.pytest_plugin``. What
it needs beyond the package (pytest, psutil) comes with the extra
``spark-adaptive[testing]``.

* ``local_cluster_factory(workers=1, cores_per_worker=1, ...)`` gives a test
  clusters as a fresh start would: no app at the master, exactly ``workers`` live
  workers with no executor. Clusters are kept for the tests after it (a master
  and its workers start in 5-10 s): at the end of the test, once its apps have
  ended, a worker with an executor left (a frozen one, say) is ended and the
  cluster waits for the next test that asks for the same cores and memory per
  worker, which gets its workers ended or added to its count. A cluster whose app
  is still running at the end of the test, or one with a ``work_dir`` of its own,
  is ended instead. Every cluster ends with the pytest session, also when it fails;
* ``local_cluster``: a cluster with one one-core worker;
* ``cluster_spark_factory(cluster, **conf)``: a SparkSession on a cluster,
  stopped at the end of the test, before its cluster is given back.

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

from spark_adaptive.errors import ClusterError
from spark_adaptive.testing.cluster import LocalCluster


class _ClusterPool:
    """Running clusters no test uses, by their workers' cores, memory and daemon memory."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory,
                 settle_timeout: float = 15.0) -> None:
        self._tmp = tmp_path_factory
        self._settle_timeout = settle_timeout
        self._idle: dict[tuple[Any, ...], list[LocalCluster]] = {}
        self._key_of: dict[LocalCluster, tuple[Any, ...]] = {}

    def take(self, workers: int, cores_per_worker: int = 1, **kw: Any) -> LocalCluster:
        key = (cores_per_worker, tuple(sorted(kw.items())))
        idle = self._idle.get(key, [])
        while idle:
            c = idle.pop()
            try:
                return c.resize(workers)
            except ClusterError:
                del self._key_of[c]
                c.close()
        c = LocalCluster(workers, cores_per_worker,
                         work_dir=self._tmp.mktemp("cluster"), **kw)
        c.start()
        self._key_of[c] = key
        return c

    def give_back(self, cluster: LocalCluster) -> None:
        key = self._key_of.get(cluster)
        if key is None or not cluster.settle(self._settle_timeout):
            self._key_of.pop(cluster, None)
            cluster.close()
            return
        self._idle.setdefault(key, []).append(cluster)

    def close(self) -> None:
        for clusters in self._idle.values():
            for c in clusters:
                c.close()
        self._idle.clear()
        self._key_of.clear()


@pytest.fixture(scope="session")
def _local_cluster_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ClusterPool]:
    pool = _ClusterPool(tmp_path_factory)
    yield pool
    pool.close()


@pytest.fixture
def local_cluster_factory(_local_cluster_pool: _ClusterPool
                          ) -> Iterator[Callable[..., LocalCluster]]:
    made: list[LocalCluster] = []

    def make(workers: int = 1, cores_per_worker: int = 1, **kw: Any) -> LocalCluster:
        if "work_dir" in kw or kw.get("detached"):
            c = LocalCluster(workers, cores_per_worker, **kw)
            made.append(c)
            return c.start()
        c = _local_cluster_pool.take(workers, cores_per_worker, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        _local_cluster_pool.give_back(c)


@pytest.fixture
def local_cluster(local_cluster_factory: Callable[..., LocalCluster]) -> LocalCluster:
    return local_cluster_factory(1)


@pytest.fixture
def cluster_spark_factory(local_cluster_factory: Callable[..., LocalCluster]
                          ) -> Iterator[Callable[..., Any]]:
    # Set up after the clusters' factory, so torn down before it: the sessions stop, and
    # their apps end, before their clusters are given back.
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
