"""spark-adaptive: Flink-style elastic scaling for Apache Spark.

Turn it on with ``spark-submit --conf spark.adaptive.enabled=true app.py`` (no
change to the app) or from code with :func:`enable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_adaptive.version import __version__

__all__ = ["enable", "__version__"]

if TYPE_CHECKING:
    from spark_adaptive.spark.runtime import AdaptiveRuntime


def enable(spark: Any, **conf: str) -> AdaptiveRuntime:
    """Turn spark-adaptive on for a running SparkSession (or SparkContext).

    Keyword arguments set ``spark.adaptive.*`` options for it, e.g.
    ``enable(spark, **{"scheduler.mode": "reactive"})``. Returns the runtime.
    Raises :class:`~spark_adaptive.errors.ConfigurationError` naming any bad key.
    """
    # Imported on use: ``import spark_adaptive`` (the CLI, the REST client) stays free of
    # pyspark and of the driver-side modules.
    from spark_adaptive.activation import enable as _enable

    return _enable(spark, **conf)
