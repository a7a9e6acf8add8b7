"""spark-adaptive's figures in Spark's own metrics system (the JVM shim's source).

The shim's ``AdaptiveMetricsSource`` is registered with the driver's
``MetricsSystem`` as the source ``spark_adaptive``, so the sinks configured
in ``metrics.properties`` or ``spark.metrics.conf.*`` (JMX, Graphite, the
JSON servlet at the UI's ``/metrics/json``, the Prometheus servlet, CSV)
carry them as ``<app id>.driver.spark_adaptive.<name>``. Every
:data:`PUSH_INTERVAL` seconds the scheduler thread reads the figures
(:func:`~spark_adaptive.rest.metrics.flat_figures`) and hands them over in one
py4j call.

Registering a source with a running metrics system is Spark's
``private[spark]`` API (public in the bytecode): the shim does it, so that the
figures appear whatever way the app was started; the integration test runs on
every supported pyspark. Without the shim there is no source, and ``/metrics``
still has everything.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_adaptive.spark.jvm import new_shim_object

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

PUSH_INTERVAL = 5.0
"""Seconds between two pushes: under the 10 s period Spark's sinks poll at by default."""


class SparkMetricsSource:
    """The shim's source; :meth:`publish` sets every figure."""

    def __init__(self, sc: SparkContext, jar: Path) -> None:
        self._source: Any = new_shim_object(sc, "AdaptiveMetricsSource", jar)
        self._warned = False

    def publish(self, figures: dict[str, float]) -> None:
        lines = "\n".join(f"{name}={value!r}" for name, value in sorted(figures.items())
                          if math.isfinite(value))
        if not self._source.update(lines) and not self._warned:
            self._warned = True
            log.warning("Spark's metrics system is not running; spark-adaptive's figures "
                        "are at the REST API's /metrics only")

    def close(self) -> None:
        self._source.close()
