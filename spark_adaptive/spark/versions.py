"""The pyspark and Spark versions spark-adaptive supports, checked once at activation.

spark-adaptive reaches into private PySpark and Spark internals (py4j handles on
Spark's scheduler and streaming classes, the JVM shim compiled against Spark's
jars, the streaming checkpoint manager for offline state repartition, which
Spark has had since 4.2), and internals change between releases without notice.
So it claims only the range CI runs it on: the oldest release of that range
(``make test-oldest``) and the newest. The same range is the package's pyspark
requirement in ``pyproject.toml``; a unit test keeps the two equal.

pip keeps a wrong pyspark out of an environment, but not out of a driver: a
``spark-submit`` of another Spark distribution puts its own pyspark first on the
path. Both the pyspark that runs the app and the Spark of the driver JVM are
therefore checked; outside the range the app stops at start with
:class:`~spark_adaptive.errors.UnsupportedSparkError` naming what was found.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spark_adaptive.errors import UnsupportedSparkError

if TYPE_CHECKING:
    from pyspark import SparkContext

#: The supported range, as in pyproject.toml: from ``MINIMUM`` up to, not including, ``BELOW``.
SUPPORTED = ">=4.2,<5"
MINIMUM = (4, 2)
BELOW = (5, 0)


def release(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version such as ``4.3.0``, ``4.2.0.dev1`` or ``4.1.0-SNAPSHOT``."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def supported(version: str) -> bool:
    r = release(version)
    return r is not None and MINIMUM <= r < BELOW


def problems(pyspark_version: str, spark_version: str) -> list[str]:
    """What is outside the supported range: one line for each of pyspark and Spark."""
    out = []
    if not supported(pyspark_version):
        out.append(f"pyspark {pyspark_version}")
    if not supported(spark_version):
        out.append(f"Spark {spark_version} in the driver JVM")
    return out


def check_versions(sc: SparkContext) -> None:
    """Raise :class:`UnsupportedSparkError` unless ``sc`` runs a supported pyspark and Spark."""
    import pyspark

    found = problems(pyspark.__version__, str(sc.version))
    if found:
        raise UnsupportedSparkError(
            f"spark-adaptive supports pyspark and Spark {SUPPORTED} "
            f"({MINIMUM[0]}.{MINIMUM[1]} or newer, before {BELOW[0]}.{BELOW[1]}); this driver "
            f"runs {' and '.join(found)}. Install a supported pyspark "
            f"(pip install 'pyspark{SUPPORTED}') and submit with its spark-submit, or leave "
            "spark.adaptive.enabled unset for this app.")
