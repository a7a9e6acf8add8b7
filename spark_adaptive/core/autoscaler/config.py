"""The autoscaler's options, declared once, and their cross-key rules.

Every field of :class:`AutoscalerConfig` is declared with
:func:`spark_adaptive.core.options.option`, so the same registry machinery that
reads, validates and documents ``spark.adaptive.*`` reads these too. Keys are
relative to ``spark.adaptive.`` and named after Flink's ``job.autoscaler.*``
where they mean the same thing.

Why the defaults differ from Flink's operator
---------------------------------------------
Flink restarts a job for every rescale and plans for minutes of downtime, so
its operator waits long (a 15 min window, 5 min stabilization, a 1 h delay
before scaling down) and keeps a wide utilization band to rescale rarely. On
Spark a rescale that keeps the partition count is *live*: the next
micro-batch simply runs on more or fewer executors, with no restart at all,
and a restart rescale costs seconds. The defaults therefore react within
minutes, keep a narrower band around a higher target (idle executors are the
cost being cut), and still guard against flapping with the same
protections. Each option's doc says where and why it departs from Flink.

Contract
--------
* An :class:`AutoscalerConfig` is always valid: the constructor runs
  :meth:`AutoscalerConfig.problems` and raises
  :class:`~spark_adaptive.errors.ConfigurationError` listing every broken
  rule, each naming its key(s).
* :meth:`AutoscalerConfig.from_conf` reads the ``spark.adaptive.autoscaler.*``
  entries of a Spark configuration (other keys are ignored) and reports every
  bad value and broken rule at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_adaptive.core.options import PREFIX, Option, changed_options, option, options_of, read
from spark_adaptive.errors import ConfigurationError

KEY_PREFIX = "autoscaler."
MAX_FORECAST_BUCKETS = 10080
"""Buckets of one forecast period at most: a week of minutes (bounds what is persisted)."""


@dataclass(frozen=True)
class AutoscalerConfig:
    """The autoscaler settings of one application (all queries share them)."""

    enabled: bool = option(
        "autoscaler.enabled", "bool", False,
        "Turns the autoscaler on: each managed streaming query's slots (and, when a restart "
        "is worth it, its partition count) follow its load. Adaptive scheduler mode only; "
        "off with a local master (local[N] has a fixed set of task slots and no executors "
        "to take or give back; a WARNING says so).")
    scaling_enabled: bool = option(
        "autoscaler.scaling.enabled", "bool", True,
        "false: recommend only. Decisions are computed, logged and shown by the REST API, "
        "flagged as not applied, and the autoscaler rescales nothing: the app runs as with "
        "the autoscaler off (Flink's metrics-only mode).")
    evaluation_interval: float = option(
        "autoscaler.evaluation.interval", "duration", 10.0,
        "How often each query's load is evaluated. Flink's standalone control loop uses the "
        "same 10 s; decisions still need a full metrics window.", unit="s", minimum=0.001)
    metrics_window: float = option(
        "autoscaler.metrics.window", "duration", 180.0,
        "Span of micro-batch metrics averaged for the processing rate and the input rate. "
        "Flink's 15 min suits loads that change over hours and jobs that restart for every "
        "rescale; a few minutes follow loads that change over minutes, and a sudden rise is "
        "read from the newest batches anyway.", unit="s", minimum=0.001)
    stabilization_interval: float = option(
        "autoscaler.stabilization.interval", "duration", 30.0,
        "After every rescale (and at start), how long metrics are ignored and nothing is "
        "decided. Flink waits 5 min for a restarted job to settle; a live rescale restarts "
        "nothing, and a Spark restart is back within seconds.", unit="s")
    utilization_target: float = option(
        "autoscaler.utilization.target", "float", 0.85,
        "Fraction of its processing capacity a query should use after a rescale. Higher than "
        "Flink's 0.7: the spare capacity is paid for every second, while a rise in load is "
        "seen within one evaluation and a live scale-up costs no downtime.",
        minimum=0.001, maximum=1.0)
    utilization_min: float = option(
        "autoscaler.utilization.min", "float", 0.65,
        "Below this utilization the query is scaled down (after scale-down.interval). "
        "Flink's default is target - 0.3; a narrower band releases idle executors sooner, "
        "which costs little when most scale-downs are live. 0 never scales down.",
        minimum=0.0, maximum=1.0)
    utilization_max: float = option(
        "autoscaler.utilization.max", "float", 0.95,
        "Above this utilization the query is scaled up. Flink's default is target + 0.3 "
        "(1.0); ours acts before the query falls behind, since executors take seconds to "
        "start.", minimum=0.001, maximum=2.0)
    scale_up_max_factor: float = option(
        "autoscaler.scale-up.max-factor", "float", 100000.0,
        "A scale-up is sized for at most (1 + this) times the current slots; rounding up to "
        "a slot count that runs the partitions in balanced waves may go past it, as Flink's "
        "alignment to key groups does. Flink's default, i.e. no limit: a needed scale-up is "
        "done in one step.", minimum=0.0)
    scale_down_max_factor: float = option(
        "autoscaler.scale-down.max-factor", "float", 0.8,
        "A scale-down keeps at least (1 - this) times the current slots. Flink keeps 40% "
        "(0.6) to limit the damage of a wrong restart; a live scale-down is undone by a live "
        "scale-up, so after a spike ours may release up to 80% at once.",
        minimum=0.0, maximum=1.0)
    scale_down_interval: float = option(
        "autoscaler.scale-down.interval", "duration", 300.0,
        "A scale-down waits this long after the utilization first reads below "
        "utilization.min (one that restarts, after it is first recommended), then applies "
        "the highest slot count recommended meanwhile; a scale-up or an in-band evaluation "
        "cancels it. Flink waits 1 h to merge restarts; here most scale-downs are live, and "
        "every idle executor-minute is paid. 0 scales down at once.", unit="s")
    catch_up_duration: float = option(
        "autoscaler.catch-up.duration", "duration", 120.0,
        "Time a backlog should take to drain after a rescale: the target rate is the input "
        "rate plus backlog / this. Flink's 30 min lets a lag of minutes persist; a "
        "streaming query with a lag target of seconds must catch up in minutes. 0 ignores "
        "the backlog.", unit="s")
    initial_slots: int | None = option(
        "autoscaler.initial-slots", "int", None,
        "Slots a query is given as soon as spark-adaptive takes it over, before it has "
        "measured the query's load (within the query's bounds and partitions); the executors "
        "beyond are released then, so that its first micro-batch runs on those slots (unless "
        "a job of that batch had already started). From the app's start until its first query"
        " starts, the app keeps only the executors of these slots (a standalone app is given "
        "every free core as it starts; those beyond are released as they register), when "
        "spark-adaptive starts with the app (not with enable()); a job of its own that runs "
        "first (batch work) gets back what the app holds without spark-adaptive. Unset: the "
        "query starts on what the app has (a standalone app gets every core it may take), as "
        "Flink's autoscaler starts a job at its configured parallelism. A small value saves "
        "the executors of a light start, like Spark's "
        "spark.dynamicAllocation.initialExecutors. A heavy start (a backlog after downtime, "
        "Kafka's startingOffsets=earliest) runs its whole first micro-batch on them and is "
        "scaled up once that batch completes; leave it unset for such a query, or bound its "
        "batches (maxOffsetsPerTrigger).", minimum=1)
    restart_time: float = option(
        "autoscaler.restart.time", "duration", 10.0,
        "Downtime assumed for a restart rescale (stop, state repartition, restart) until one "
        "has been observed, or always when time tracking is off. It prices a restart against "
        "a live rescale and adds input rate x restart time / catch-up duration to a restart's "
        "target. Flink assumes 5 min; a Spark restart from a checkpoint takes seconds.",
        unit="s")
    executor_startup_time: float = option(
        "autoscaler.executor-startup.time", "duration", 10.0,
        "Time from asking for executors to their running the query's tasks, assumed until a "
        "live scale-up has been observed, or always when time tracking is off. A query whose "
        "input exceeds its capacity keeps falling behind until the new executors run, so a "
        "scale-up adds (input rate - capacity) x this / catch-up duration to its target: the "
        "live rescale's counterpart of restart.time's term (Flink rescales only by restart). "
        "Executors start in seconds on a standalone cluster, tens of seconds as Kubernetes "
        "pods or YARN containers. 0 leaves the term out.", unit="s")
    restart_time_tracking: bool = option(
        "autoscaler.restart.time-tracking.enabled", "bool", True,
        "Use the longest restart downtime observed for the query (capped by "
        "restart.time-tracking.limit) instead of restart.time, and the longest of its last "
        "live scale-ups' executor start-ups instead of executor-startup.time. On by default, "
        "unlike Flink: the scheduler measures every rescale's duration in its rescale "
        "history.")
    restart_time_tracking_limit: float = option(
        "autoscaler.restart.time-tracking.limit", "duration", 300.0,
        "Cap on the observed restart downtime used when time tracking is on. Flink's is "
        "15 min.", unit="s")
    restart_max_partitions_per_slot: int = option(
        "autoscaler.restart.max-partitions-per-slot", "int", 12,
        "When a restart changes the partition count, the new count P' is chosen among "
        "multiples of the new slot count S' up to this many times S' (within the query's "
        "bounds), for balanced slot counts close together around S', so that later rescales "
        "are live. 1 restarts at P' = S' like Flink; more leaves more live steps but runs more "
        "tasks per slot in every batch.", minimum=1)
    backlog_lag_threshold: float = option(
        "autoscaler.backlog-processing.lag-threshold", "duration", 15.0,
        "While backlog / input rate exceeds this, the query is falling behind: it may scale "
        "up before its window is full, it is never scaled down, and a blocked (ineffective) "
        "scale-up is allowed again. Flink's 5 min tolerates far more lag than users of a "
        "micro-batch query, whose rows already wait a trigger interval and a batch.", unit="s")
    effectiveness_detection: bool = option(
        "autoscaler.scaling.effectiveness.detection.enabled", "bool", True,
        "Judge each scale-up by the capacity it gained. One that gained less than the "
        "threshold of what it promised blocks repeating the same step (more slots on the "
        "same partitions) until the block expires or the query falls behind; a restart at "
        "other partitions that the policy chooses is not blocked. On by default, unlike "
        "Flink's, because the block can neither last nor build a backlog.")
    effectiveness_threshold: float = option(
        "autoscaler.scaling.effectiveness.threshold", "float", 0.1,
        "A scale-up is ineffective when it gained less than this fraction of the capacity it "
        "was expected to gain. Flink's default.", minimum=0.0, maximum=1.0)
    effectiveness_expiry: float = option(
        "autoscaler.scaling.effectiveness.detection.expiry", "duration", 600.0,
        "How long an ineffective scale-up blocks its repetition. Flink's block has no "
        "expiry, which is why users leave the detection off.", unit="s")
    observed_scalability: bool = option(
        "autoscaler.observed-scalability.enabled", "bool", True,
        "Learn how the rate per slot falls as slots are added (a least-squares fit of time "
        "per row against the slot count, over the slot counts the query ran on) so that one "
        "rescale usually reaches the target. On by default, unlike Flink's.")
    observed_scalability_min_observations: int = option(
        "autoscaler.observed-scalability.min-observations", "int", 2,
        "Distinct slot counts observed before the fit is used; until then scaling is assumed "
        "linear. Flink counts 3 rescales; two slot counts already fix a line, and a full "
        "window of batches at each averages out their noise.", minimum=2)
    observed_scalability_coefficient_min: float = option(
        "autoscaler.observed-scalability.coefficient-min", "float", 0.5,
        "The fit may predict at most this drop of the rate per slot between the current and "
        "the new slot count (rate ratio >= this). Flink's default.", minimum=0.01,
        maximum=1.0)

    forecast_enabled: bool = option(
        "autoscaler.forecast.enabled", "bool", False,
        "Scale ahead of load that recurs: each query's input rate is kept per bucket of "
        "forecast.period (beside its checkpoint, with the rescale history), and where the "
        "last periods agree, a rise they show within forecast.horizon is scaled up for "
        "before it comes (rescales with trigger FORECAST). A forecast fall never scales "
        "down: scale-downs stay with the measured load. Flink's operator has no "
        "counterpart (its excluded.periods only blocks scaling).")
    forecast_period: float = option(
        "autoscaler.forecast.period", "duration", 86400.0,
        "The period the load repeats over: 1d for a daily pattern, 7d for a weekly one "
        "(weekdays unlike weekends), 1h for an hourly one. A whole multiple of "
        "forecast.bucket.", unit="s", minimum=2.0)
    forecast_bucket: float = option(
        "autoscaler.forecast.bucket", "duration", 300.0,
        "The stretch of the period whose input rate is averaged into one figure: 5min for a "
        "daily period, 15min to 1h for a weekly one, 1min for an hourly one. A rise is "
        "forecast at this resolution; at most 10080 buckets per period.", unit="s",
        minimum=1.0)
    forecast_horizon: float = option(
        "autoscaler.forecast.horizon", "duration", 300.0,
        "How far ahead the forecast looks: the highest rate expected up to the bucket after "
        "the one this far ahead is scaled for. At least the query's executor start-up (as "
        "tracked, else executor-startup.time) plus an evaluation interval is looked ahead "
        "whatever this says, so that new executors run when the rise comes. A daily rise "
        "comes minutes earlier or later from day to day: 5min (with 5-minute buckets, 5-10 "
        "min ahead) meets most such rises; 10min meets more of the early ones and holds "
        "each rise's executors longer before it (docs/benchmarks.md, Forecast); 0 looks no "
        "further than the executors' start-up, for a load that recurs to the second. "
        "Shorter than forecast.period.",
        unit="s")
    forecast_periods: int = option(
        "autoscaler.forecast.periods", "int", 3,
        "Periods back the forecast averages (each bucket over the same bucket of the last "
        "this many periods observed whole enough). More smooths one unusual day out; fewer "
        "follows a pattern that drifts.", minimum=1, maximum=12)
    forecast_min_coverage: float = option(
        "autoscaler.forecast.min-coverage", "float", 0.8,
        "A period counts only once this fraction of its buckets was observed (a query "
        "stopped for part of it counts that period out).", minimum=0.01, maximum=1.0)
    forecast_max_error: float = option(
        "autoscaler.forecast.max-error", "float", 0.25,
        "The forecast is used only while its error over the last period (the sum of its "
        "absolute errors per bucket over the sum of the input) is at most this, and while "
        "the newest buckets did not read less than forecast by more than this (a rise "
        "forecast that did not come turns it off until they agree again).", minimum=0.0,
        maximum=10.0)

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigurationError(problems)

    @property
    def acting(self) -> bool:
        """The autoscaler sets the queries' slots (on, and not in recommend-only mode, which
        leaves the app as it runs without the autoscaler)."""
        return self.enabled and self.scaling_enabled

    @property
    def start_slots(self) -> int | None:
        """``initial-slots`` when the autoscaler acts on it (recommend-only mode changes
        nothing), else None."""
        return self.initial_slots if self.scaling_enabled else None

    # ------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every broken rule of single values and between keys, each naming its key(s)."""
        p: list[str] = []
        for f, o in _fields():
            value = getattr(self, f.name)
            if value is None:  # an option without a default, not set
                continue
            if isinstance(value, float) and math.isnan(value):
                p.append(f"{o.full_key} is NaN")
                continue
            if o.minimum is not None and value < o.minimum:
                p.append(f"{o.full_key}={o.format(value)} must be >= {o._fmt(o.minimum)}")
            if o.maximum is not None and value > o.maximum:
                p.append(f"{o.full_key}={o.format(value)} must be <= {o._fmt(o.maximum)}")
            if o.type == "duration" and (value < 0 or math.isinf(value)):
                p.append(f"{o.full_key}={o.format(value)} must be a finite duration >= 0")
        umin, utarget, umax = self.utilization_min, self.utilization_target, self.utilization_max
        if umin > utarget:
            p.append(f"{_k('utilization.min')}={umin:g} is above "
                     f"{_k('utilization.target')}={utarget:g}")
        if utarget > umax:
            p.append(f"{_k('utilization.target')}={utarget:g} is above "
                     f"{_k('utilization.max')}={umax:g}")
        if self.scale_up_max_factor <= 0:
            p.append(f"{_k('scale-up.max-factor')}={self.scale_up_max_factor:g} must be > 0")
        if self.scale_down_max_factor <= 0:
            p.append(f"{_k('scale-down.max-factor')}={self.scale_down_max_factor:g} must be > 0 "
                     f"(to never scale down set {_k('utilization.min')}=0)")
        if self.restart_time_tracking and self.restart_time_tracking_limit <= 0:
            p.append(f"{_k('restart.time-tracking.limit')} must be > 0 while "
                     f"{_k('restart.time-tracking.enabled')}=true")
        p.extend(self._forecast_problems())
        return p

    def _forecast_problems(self) -> list[str]:
        """The forecast keys' rules between each other."""
        period, bucket = self.forecast_period, self.forecast_bucket
        if not (math.isfinite(period) and math.isfinite(bucket) and bucket > 0):
            return []
        p: list[str] = []
        per = period / bucket
        if abs(per - round(per)) > 1e-9 * per:
            p.append(f"{_k('forecast.period')}={period:g}s is not a whole multiple of "
                     f"{_k('forecast.bucket')}={bucket:g}s")
        elif not 2 <= round(per) <= MAX_FORECAST_BUCKETS:
            p.append(f"{_k('forecast.period')}={period:g}s holds {round(per)} buckets of "
                     f"{_k('forecast.bucket')}={bucket:g}s; 2 to {MAX_FORECAST_BUCKETS} are "
                     "allowed")
        if self.forecast_horizon >= period:
            p.append(f"{_k('forecast.horizon')}={self.forecast_horizon:g}s is not shorter than "
                     f"{_k('forecast.period')}={period:g}s")
        return p

    # ------------------------------------------------------------------------------
    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> AutoscalerConfig:
        """Read the ``spark.adaptive.autoscaler.*`` entries of a Spark configuration (the
        application's settings read them with every other key: :mod:`spark_adaptive.settings`).

        Unknown ``spark.adaptive.autoscaler.*`` keys and bad values are reported with the
        broken cross-key rules, all at once, in one :class:`ConfigurationError`.
        """
        own = {k: v for k, v in conf.items() if k.startswith(PREFIX + KEY_PREFIX)}
        config, problems = read(cls, own)
        if config is None:
            raise ConfigurationError(problems)
        return config

    def as_conf(self) -> dict[str, str]:
        """The settings that differ from their defaults, as Spark conf entries."""
        return changed_options(self)


def _k(key: str) -> str:
    return PREFIX + KEY_PREFIX + key


def _fields() -> list[tuple[dataclasses.Field[Any], Option]]:
    return [(f, f.metadata["option"]) for f in dataclasses.fields(AutoscalerConfig)]


def autoscaler_options() -> list[Option]:
    """The options of :class:`AutoscalerConfig`, in declaration order (for docs and tables)."""
    return [o for _, o in options_of(AutoscalerConfig)]
