"""Shared test settings, and the opt-in to spark_adaptive.testing's pytest plugin."""

from __future__ import annotations

import os
import sys

# The fixtures for a real cluster (local_cluster, local_cluster_factory,
# cluster_spark_factory): the plugin is opt-in, as for any project that uses it.
pytest_plugins = ["spark_adaptive.testing.pytest_plugin"]

# Executors and Python workers use this interpreter (with pyspark and this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Every JVM the tests start (the clusters' daemons and executors, the drivers, local
# sessions) is short-lived and shares a few cores: with the client compiler alone and the
# serial collector they take about 40% less CPU time (docs/testing.md). The java
# launcher reads this; set it (even empty) to run them otherwise.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
