"""The streaming scheduler's options: its timing, bounds and failure handling.

Two groups of :class:`spark_adaptive.settings.Settings`, declared with
:func:`~spark_adaptive.core.options.option` (see there for the formats):
:class:`SchedulerSettings` (``spark.adaptive.scheduler.*``, ``parallelism.*``,
``max-parallelism``, ``failure-detection.timeout``) and
:class:`RestartStrategySettings` (``spark.adaptive.restart-strategy.*``, Flink's
keys and defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spark_adaptive.core.options import MAX_PARALLELISM_LIMIT, PREFIX, format_duration, option


@dataclass(frozen=True)
class SchedulerSettings:
    """How streaming queries are scheduled and rescaled."""

    mode: str = option(
        "scheduler.mode", "enum", "adaptive",
        "`adaptive`: each streaming query runs at the parallelism its executors allow, within "
        "its bounds (FLIP-160). `reactive`: every query uses every executor the cluster gives "
        "it; the configured parallelism is ignored (FLIP-159).", choices=("adaptive", "reactive"))
    resource_wait_timeout: float = option(
        "scheduler.submission.resource-wait-timeout", "duration", 300.0,
        "After a restart: longest wait for sufficient resources before the query is started "
        "anyway (and fails if there are none). -1 waits forever. A query's first run never "
        "waits: Spark starts it when the app calls start(), with or without executors.",
        unit="s", forever=True,
        reactive_default=math.inf, aliases=("scheduler.resource-wait-timeout",))
    submission_stabilization: float = option(
        "scheduler.submission.resource-stabilization-timeout", "duration", 10.0,
        "Once resources are sufficient but not yet desired, how long to wait for more: after a "
        "restart before starting, and during a query's first run (which starts at once) before "
        "its first rescale, which also has no cooldown.", unit="s", reactive_default=0.0,
        aliases=("scheduler.resource-stabilization-timeout",))
    cooldown: float = option(
        "scheduler.executing.cooldown-after-rescaling", "duration", 30.0,
        "Minimum time between two restart rescales of a query.", unit="s",
        aliases=("scheduler.scaling-interval.min",))
    executing_stabilization: float = option(
        "scheduler.executing.resource-stabilization-timeout", "duration", 60.0,
        "While running: how long merely sufficient (not desired) resources must hold before a "
        "rescale. Desired resources rescale at once (after the cooldown).", unit="s")
    trigger_max_delay: float | None = option(
        "scheduler.rescale-trigger.max-delay", "duration", None,
        "Longest wait for a completed micro-batch before a pending rescale is evaluated anyway.",
        unit="s", default_text="3 trigger intervals (0 without an interval)")
    scaling_interval_max: float | None = option(
        "scheduler.scaling-interval.max", "duration", None,
        "When set, a pending scale-up that min-parallelism-increase holds back is forced after "
        "this long.", unit="s")
    min_parallelism_increase: int = option(
        "scheduler.min-parallelism-increase", "int", 1,
        "Smallest increase of a query's parallelism worth a restart rescale.", minimum=1)
    executor_loss_grace: float = option(
        "scheduler.executor-loss-grace", "duration", 10.0,
        "After an executor is lost, how long to wait for it (or a replacement) to come back "
        "before scaling down (FLIP-159).", unit="s")
    warm_up_new_executors: bool = option(
        "scheduler.warm-up-new-executors", "bool", True,
        "Warm up executors that join while a managed streaming query can be restart-rescaled "
        "(a small SQL job, and, when a managed query keeps state, one micro-batch of a small "
        "stateful query on RocksDB named 'spark-adaptive warm-up', which the Spark UI and "
        "listeners configured in spark.sql.streaming.streamingQueryListeners see, and, the "
        "first time, an offline repartition of that query's state), so that "
        "a restart rescale onto them pays less of their first-task costs (class loading, "
        "code generation, JIT) in its state repartition and first micro-batch. A restart "
        "onto more slots begins once the warm-up has ended (at most 20 s; the query runs on "
        "meanwhile).")
    non_replayable_sources: str = option(
        "scheduler.non-replayable-sources", "string", "",
        "Streaming sources, besides Spark's socket source, that cannot replay their input "
        "(format names or provider class names, comma-separated). spark-adaptive never "
        "restarts a query that reads one: a restart would lose what the source sent "
        "meanwhile. Such a query is rescaled live only, and a failure ends it as on plain "
        "Spark.")
    failure_detection_timeout: float = option(
        "failure-detection.timeout", "duration", 20.0,
        "An executor silent (no heartbeat) this long is treated as lost and released.",
        unit="s", minimum=1.0)
    lower_bound: int = option(
        "parallelism.lower-bound", "int", 1,
        "Default lowest parallelism of a streaming query.", minimum=1)
    upper_bound: int | None = option(
        "parallelism.upper-bound", "int", None,
        "Default highest parallelism of a streaming query. -1 or unset: the query's "
        "configured partitions (adaptive) or max-parallelism (reactive). Set, it also "
        "caps the slots of a query without state whose micro-batches run more tasks of "
        "its source's; unset, such a query keeps, and with the autoscaler may be given, "
        "as many as those tasks, as on plain Spark.",
        default_text="the query's partitions (reactive: max-parallelism)",
        minus_one_is_default=True)
    max_parallelism: int = option(
        "max-parallelism", "int", MAX_PARALLELISM_LIMIT,
        "No query's parallelism ever exceeds this.", minimum=1, maximum=MAX_PARALLELISM_LIMIT)

    def effective_upper_bound(self, configured_partitions: int) -> int:
        """A query's default upper bound: the set one, else max-parallelism in reactive mode,
        else its configured partitions."""
        if self.upper_bound is not None:
            return self.upper_bound
        if self.mode == "reactive":
            return self.max_parallelism
        return max(self.lower_bound, min(configured_partitions, self.max_parallelism))

    def problems(self) -> list[str]:
        """Rules between this group's keys, each broken one naming them."""
        p: list[str] = []
        if self.upper_bound is not None:
            if self.upper_bound < self.lower_bound:
                p.append(f"{PREFIX}parallelism.upper-bound={self.upper_bound} is below "
                         f"{PREFIX}parallelism.lower-bound={self.lower_bound}")
            if self.upper_bound > self.max_parallelism:
                p.append(f"{PREFIX}parallelism.upper-bound={self.upper_bound} is above "
                         f"{PREFIX}max-parallelism={self.max_parallelism}")
            if self.upper_bound < 1:
                p.append(f"{PREFIX}parallelism.upper-bound={self.upper_bound} must be >= 1 "
                         "(or -1 for the default)")
        if self.lower_bound > self.max_parallelism:
            p.append(f"{PREFIX}parallelism.lower-bound={self.lower_bound} is above "
                     f"{PREFIX}max-parallelism={self.max_parallelism}")
        return p


@dataclass(frozen=True)
class RestartStrategySettings:
    """What happens when a query fails (Flink's restart strategies, keys and defaults)."""

    type: str = option(
        "restart-strategy.type", "enum", "none",
        "What happens when a query fails: `none` (it fails, as on plain Spark), "
        "`fixed-delay`, `failure-rate` or `exponential-delay` (Flink's spellings accepted). A "
        "strategy applies to queries that can resume where they stopped (a checkpoint "
        "location, sources that can replay); others fail as on plain Spark.",
        choices=("none", "fixed-delay", "failure-rate", "exponential-delay"),
        spellings=(("none", "none"), ("disable", "none"), ("off", "none"),
                   ("fixed-delay", "fixed-delay"), ("fixeddelay", "fixed-delay"),
                   ("failure-rate", "failure-rate"), ("failurerate", "failure-rate"),
                   ("exponential-delay", "exponential-delay"),
                   ("exponentialdelay", "exponential-delay")))
    fixed_delay_attempts: int = option(
        "restart-strategy.fixed-delay.attempts", "int", 1,
        "fixed-delay: restarts before the query is failed.", minimum=0)
    fixed_delay_delay: float = option(
        "restart-strategy.fixed-delay.delay", "duration", 1.0,
        "fixed-delay: wait before each restart.", unit="s")
    failure_rate_max_failures: int = option(
        "restart-strategy.failure-rate.max-failures-per-interval", "int", 1,
        "failure-rate: failures allowed within one interval.", minimum=1)
    failure_rate_interval: float = option(
        "restart-strategy.failure-rate.failure-rate-interval", "duration", 60.0,
        "failure-rate: the interval failures are counted in.", unit="s")
    failure_rate_delay: float = option(
        "restart-strategy.failure-rate.delay", "duration", 1.0,
        "failure-rate: wait before each restart.", unit="s")
    exp_initial_backoff: float = option(
        "restart-strategy.exponential-delay.initial-backoff", "duration", 1.0,
        "exponential-delay: first wait.", unit="s")
    exp_max_backoff: float = option(
        "restart-strategy.exponential-delay.max-backoff", "duration", 60.0,
        "exponential-delay: longest wait.", unit="s")
    exp_multiplier: float = option(
        "restart-strategy.exponential-delay.backoff-multiplier", "float", 1.5,
        "exponential-delay: factor between two waits.", minimum=1.0)
    exp_reset_threshold: float = option(
        "restart-strategy.exponential-delay.reset-backoff-threshold", "duration", 3600.0,
        "exponential-delay: a query running this long without failure starts over at the "
        "initial backoff.", unit="s")
    exp_jitter: float = option(
        "restart-strategy.exponential-delay.jitter-factor", "float", 0.1,
        "exponential-delay: random spread of each wait, as a fraction of it.",
        minimum=0.0, maximum=1.0)
    exp_attempts_before_reset: int | None = option(
        "restart-strategy.exponential-delay.attempts-before-reset-backoff", "int", None,
        "exponential-delay: restarts allowed between two resets. Unset: unlimited.",
        minimum=1, default_text="unlimited")

    def problems(self) -> list[str]:
        """Rules between this group's keys, and bounds a duration's own check cannot say
        (it accepts any duration >= 0), each broken one naming its keys."""
        p: list[str] = []
        if self.exp_max_backoff < self.exp_initial_backoff:
            # Both keys, full: either may be the one the user set (the fuzz test found a
            # message that named only the one left at its default).
            key = f"{PREFIX}restart-strategy.exponential-delay."
            p.append(f"{key}max-backoff={format_duration(self.exp_max_backoff)} is below "
                     f"{key}initial-backoff={format_duration(self.exp_initial_backoff)}")
        if self.failure_rate_interval <= 0:
            # No failure can fall within an empty interval: the rate is undefined.
            p.append(f"{PREFIX}restart-strategy.failure-rate.failure-rate-interval="
                     f"{format_duration(self.failure_rate_interval)} must be > 0")
        return p
