"""spark-adaptive: Flink-style elastic scaling for Apache Spark.

Turn it on with ``spark-submit --conf spark.adaptive.enabled=true app.py`` (no
change to the app) or from code with :func:`enable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["enable", "__version__"]

if TYPE_CHECKING:
    from spark_adaptive.spark.runtime import AdaptiveRuntime


def enable(spark: Any, **conf: str) -> AdaptiveRuntime:
    """Turn spark-adaptive on for a running SparkSession (or SparkContext).

    Keyword arguments set ``spark.adaptive.*`` options for it, e.g.
    ``enable(spark, **{"scheduler.mode": "reactive"})``. Returns the runtime.
    Raises :class:`~spark_adaptive.errors.ConfigurationError` naming any bad key.
    """
    from spark_adaptive.spark.activation import enable as _enable

    return _enable(spark, **conf)
