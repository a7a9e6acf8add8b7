"""Testing spark-adaptive, and your own apps with it, on a real local Spark cluster.

* :class:`~spark_adaptive.testing.cluster.LocalCluster`: a standalone master and
  workers on 127.0.0.1, with workers and executors that join, leave, crash and hang.
* pytest fixtures, opt-in (``pytest_plugins = ["spark_adaptive.testing.pytest_plugin"]``
  in a ``conftest.py``, or ``pytest -p spark_adaptive.testing.pytest_plugin``):
  ``local_cluster`` (a fresh cluster per test, one worker by default),
  ``local_cluster_factory`` and ``cluster_spark_factory``; and, for a run that also uses
  pytest-spark's ``spark_session``, ``spark_adaptive.testing.pytest_spark_session``,
  which makes that session again after a cluster test stopped it.

Install with the extra ``spark-adaptive[testing]`` (psutil, pytest).

Imports are lazy so ``python -m spark_adaptive.testing.cluster`` runs cleanly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LocalCluster"]


def __getattr__(name: str) -> Any:
    if name == "LocalCluster":
        from spark_adaptive.testing.cluster import LocalCluster

        return LocalCluster
    raise AttributeError(name)
