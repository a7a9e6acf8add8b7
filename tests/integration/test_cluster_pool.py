"""The clusters ``local_cluster_factory`` keeps between tests come back as a fresh start:
no app at the master, exactly the workers asked for, each of the cluster's own cores and
memory, no executor left (a frozen one's worker is ended, and so is one added with other
cores); a cluster whose app still runs is not kept."""

from __future__ import annotations

from typing import Any

import pytest

from spark_adaptive.testing import session
from spark_adaptive.testing.pytest_plugin import _ClusterPool


def test_a_cluster_given_back_comes_back_as_a_fresh_start(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    pool = _ClusterPool(tmp_path_factory, settle_timeout=5.0)
    try:
        cluster = pool.take(2)
        bigger = cluster.add_worker(cores=2)
        spark: Any = session.cluster_session(cluster, "pool-test")
        assert spark.sparkContext.parallelize(range(4), 2).sum() == 6
        app = spark.sparkContext.applicationId
        own = next(e for e in cluster.executors(app) if e.worker != bigger.name)
        # Its worker kills it 10 s after the app ends (SIGTERM, then SIGKILL): given back
        # at once, it is still there when the pool looks, 5 s at most after the app ended.
        frozen = cluster.freeze_executor(own.executor_id, app)
        session.stop_session(spark)
        pool.give_back(cluster)

        again = pool.take(3)
        assert again is cluster  # kept, not started again
        assert again.active_apps() == [] and again.executors() == []
        assert len(again.workers) == len(again.registered_workers()) == 3
        assert again.alive_worker_count() == 3
        assert frozen.worker not in {w.name for w in again.workers}  # ended with its worker
        assert bigger.name not in {w.name for w in again.workers}  # not the cluster's own kind
        assert {w.cores for w in again.workers} == {1}

        pool.give_back(again)
        smaller = pool.take(1)
        assert smaller is cluster and smaller.alive_worker_count() == 1

        spark = session.cluster_session(smaller, "pool-test-left-running")
        pool.give_back(smaller)  # its app still runs: ended, not kept
        assert smaller.status() is None  # its master ended
        session.stop_session(spark)
    finally:
        pool.close()
