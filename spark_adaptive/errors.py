"""The errors spark-adaptive raises, split by what the caller should do.

::

    SparkAdaptiveError                 base of everything below
    ├── ConfigurationError             a spark.adaptive.* key or value is wrong, or
    │                                  conflicts with another Spark setting. Fix the
    │                                  configuration; retrying cannot help.
    ├── RequirementsError              resource requirements refused (REST 400). Carries
    │                                  every reason; nothing was changed.
    ├── UnknownQueryError              no managed query has that id or name (REST 404).
    ├── ConflictError                  another update of the same query is in flight
    │                                  (REST 409). Retry once it has finished.
    ├── PersistenceError               requirements could not be written beside the query's
    │                                  checkpoint (REST 500). Nothing changed; retry.
    ├── RescaleNotPossibleError        a query cannot be restart-rescaled (no checkpoint,
    │                                  state store without repartition support). The
    │                                  query keeps running; only live rescales apply.
    ├── QueryFailedError               a managed query failed for a reason of the scheduler's
    │                                  own (no resources within the wait timeout). A query
    │                                  failed by Spark raises Spark's own exception instead.
    ├── ShimNotAvailableError          the JVM shim jar is missing or does not load. The
    │                                  pure-py4j path is used instead where one exists.
    ├── UnsupportedSparkError          the driver runs a pyspark or Spark outside the
    │                                  supported range (spark_adaptive.spark.versions).
    │                                  Install a supported pyspark; retrying cannot help.
    └── ClusterError                   the local test cluster could not be started or
                                       driven (spark_adaptive.testing).

Errors from Spark itself are not wrapped: a query that fails keeps its own
exception, and ``awaitTermination()`` raises it as Spark would.
"""

from __future__ import annotations

from collections.abc import Sequence


class SparkAdaptiveError(Exception):
    """Base class of spark-adaptive's own errors."""


class ConfigurationError(SparkAdaptiveError, ValueError):
    """One or more configuration problems; ``problems`` lists each, naming its key."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        if len(self.problems) == 1:
            msg = f"spark-adaptive configuration error: {self.problems[0]}"
        else:
            msg = "spark-adaptive configuration errors:\n" + "\n".join(
                f"  - {p}" for p in self.problems
            )
        super().__init__(msg)


class RequirementsError(SparkAdaptiveError, ValueError):
    """Resource requirements were refused; ``reasons`` says why, one line each."""

    def __init__(self, reasons: Sequence[str]) -> None:
        self.reasons = list(reasons)
        super().__init__("\n".join(self.reasons))


class UnknownQueryError(SparkAdaptiveError, KeyError):
    def __init__(self, query: str) -> None:
        self.query = query
        super().__init__(f"no query managed by spark-adaptive has id or name {query!r}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ConflictError(SparkAdaptiveError):
    pass


class PersistenceError(SparkAdaptiveError):
    pass


class RescaleNotPossibleError(SparkAdaptiveError):
    pass


class QueryFailedError(SparkAdaptiveError):
    pass


class ShimNotAvailableError(SparkAdaptiveError):
    pass


class UnsupportedSparkError(SparkAdaptiveError):
    pass


class ClusterError(SparkAdaptiveError, RuntimeError):
    pass
