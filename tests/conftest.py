"""Shared test settings. Fixtures for the real cluster come from spark_adaptive.testing."""

from __future__ import annotations

import os
import sys

# Executors and Python workers use this interpreter (with pyspark and this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
