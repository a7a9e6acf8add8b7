"""The errors spark-adaptive raises, split by what the caller should do.

::

    SparkAdaptiveError          base of everything below
    ├── ConfigurationError      at activation (spark-submit, spark-defaults.conf, enable()):
    │                           an unknown spark.adaptive.* key, a bad value, or a clash with
    │                           another Spark setting; enable() on a Spark Connect session.
    │                           Fix the configuration; retrying cannot help.
    ├── RequirementsError       new bounds refused (REST PUT: 400): Flink's rules, or an app
    │                           in reactive or local mode. Carries every reason; nothing
    │                           changed.
    ├── UnknownQueryError       no managed query has that id or name (REST: 404; the CLI).
    ├── ConflictError           the query's state refuses it (REST: 409): another update of
    │                           its bounds is in flight (retry once it is done), it has
    │                           finished, or stop_with_savepoint() outside Executing.
    ├── PersistenceError        the bounds could not be written beside the query's
    │                           checkpoint (REST: 500). Nothing changed; retry.
    ├── QueryFailedError        awaitTermination() of a query that spark-adaptive failed for
    │                           a reason of its own: after a restart, no resources within
    │                           scheduler.submission.resource-wait-timeout. A query Spark
    │                           failed raises Spark's own exception instead. Also raised by
    │                           stop_with_savepoint() when the stop is given up (the query
    │                           failed while stopping and its restart strategy restarts it).
    ├── ShimNotAvailableError   spark.adaptive.listener=shim but the jar is missing or does
    │                           not load, or a batch helper that needs the shim has none.
    ├── UnsupportedSparkError   at activation: the driver runs a pyspark or Spark outside
    │                           the supported range. Install a supported pyspark; retrying
    │                           cannot help.
    └── ClusterError            the local test cluster (spark_adaptive.testing) could not be
                                started or driven.

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


class QueryFailedError(SparkAdaptiveError):
    pass


class ShimNotAvailableError(SparkAdaptiveError):
    pass


class UnsupportedSparkError(SparkAdaptiveError):
    pass


class ClusterError(SparkAdaptiveError, RuntimeError):
    pass
