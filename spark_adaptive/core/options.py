"""Every ``spark.adaptive.*`` option, declared once.

Each option is one field of a frozen settings dataclass below, declared with
:func:`option`: key, type, default, unit, doc and aliases. From that single
list come

* :meth:`Settings.from_conf`, which reads and validates a whole Spark
  configuration once and names the key in every error;
* the README's table of keys and ``conf/spark-defaults.conf.template``
  (``python -m spark_adaptive.core.options markdown|template``; a test fails
  when the committed files drift from the registry).

Values are written the way Spark writes them: durations ``500ms``, ``30s``,
``5min``, ``1h`` (a bare number is in the option's unit), sizes ``64m``,
``1g`` (a bare number is bytes), booleans ``true``/``false``.

An option whose default depends on the scheduler mode has a
``reactive_default``: it applies when ``scheduler.mode=reactive`` and the key
is not set.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_adaptive.errors import ConfigurationError

PREFIX = "spark.adaptive."
MAX_PARALLELISM_LIMIT = 32768  # 2^15, Flink's UPPER_BOUND_MAX_PARALLELISM
#: ``batch.text_file``'s split size when ``batch.source-split-size`` is unset. Its map tasks
#: combine in a Python dict, whose time per record grows with its size: in
#: benchmarks/batch.py's 1 GB ``reduceByKey`` the map stage took 45.5 s with 64 MiB splits
#: and 46.9 s with 128 MiB (Spark SQL's scans, compiled, gain from the bigger ones).
TEXT_FILE_SPLIT_BYTES = 64 << 20


# -- value parsing ----------------------------------------------------------------
_TIME_UNITS = {
    "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0,
    "mins": 60.0, "h": 3600.0, "d": 86400.0,
}  # fmt: skip
_SIZE_UNITS = {
    "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
}  # fmt: skip
_NUM_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(text: str, unit: str = "s") -> float:
    """Spark's duration format to seconds; ``-1`` (any negative) is infinity."""
    m = _NUM_UNIT.match(text)
    if not m:
        raise ValueError("not a duration")
    number, suffix = float(m.group(1)), (m.group(2) or unit).lower()
    if suffix not in _TIME_UNITS:
        raise ValueError(f"unknown time unit {suffix!r}")
    if number < 0:
        return math.inf
    return number * _TIME_UNITS[suffix]


def parse_size(text: str) -> int:
    m = _NUM_UNIT.match(text)
    if not m:
        raise ValueError("not a size")
    number, suffix = float(m.group(1)), (m.group(2) or "b").lower()
    if suffix not in _SIZE_UNITS:
        raise ValueError(f"unknown size unit {suffix!r}")
    if number < 0:
        raise ValueError("negative size")
    return int(number * _SIZE_UNITS[suffix])


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "(none)"
    if math.isinf(seconds):
        return "-1"
    for suffix, size in (("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size and float(seconds / size).is_integer():
            return f"{int(seconds // size)}{suffix}"
    return f"{int(round(seconds * 1000))}ms"


def format_size(n: int | None) -> str:
    if n is None:
        return "(none)"
    for suffix, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


# -- declaration ------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One configuration option. ``key`` is relative to ``spark.adaptive.``."""

    key: str
    type: str  # bool | int | float | duration | size | string | enum
    default: Any
    doc: str
    unit: str = ""
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    #: accepted spellings -> canonical value, for enums
    spellings: tuple[tuple[str, str], ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    forever: bool = False  # a negative duration means "forever"
    reactive_default: Any = None
    default_text: str = ""  # shown instead of the default where it is computed
    secret: bool = False

    @property
    def full_key(self) -> str:
        return PREFIX + self.key

    def parse(self, raw: str) -> Any:
        """Parse one raw string, raising ``ValueError`` with what is accepted."""
        text = raw.strip()
        if self.type == "bool":
            if text.lower() in ("true", "false"):
                return text.lower() == "true"
            raise ValueError("accepted values: true, false")
        if self.type == "enum":
            canon = dict(self.spellings) or {c: c for c in self.choices}
            if text.lower() in canon:
                return canon[text.lower()]
            raise ValueError("accepted values: " + ", ".join(self.choices))
        if self.type == "string":
            return text
        if self.type == "int":
            try:
                value: float = int(text)
            except ValueError:
                raise ValueError("expected an integer") from None
        elif self.type == "float":
            try:
                value = float(text)
            except ValueError:
                raise ValueError("expected a number") from None
        elif self.type == "duration":
            try:
                value = parse_duration(text, self.unit or "s")
            except ValueError:
                raise ValueError(
                    "expected a duration such as 500ms, 30s, 5min, 1h"
                    + (" (-1 for forever)" if self.forever else "")
                ) from None
            if math.isinf(value) and not self.forever:
                raise ValueError("expected a duration >= 0 (negative durations are not accepted)")
        elif self.type == "size":
            try:
                value = parse_size(text)
            except ValueError:
                raise ValueError(
                    "expected a size such as 16m, 64m, 1g (a bare number is bytes)") from None
        else:  # pragma: no cover - a declaration bug
            raise AssertionError(self.type)
        if self.minimum is not None and value < self.minimum and not math.isinf(value):
            raise ValueError(f"must be >= {self._fmt(self.minimum)}")
        if self.maximum is not None and value > self.maximum and not math.isinf(value):
            raise ValueError(f"must be <= {self._fmt(self.maximum)}")
        return value

    def _fmt(self, v: float) -> str:
        if self.type == "duration":
            return format_duration(v)
        if self.type == "size":
            return format_size(int(v))
        return str(int(v)) if float(v).is_integer() else str(v)

    def format(self, value: Any) -> str:
        """A value written back the way a user would write it."""
        if value is None:
            return ""
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "duration":
            return format_duration(value)
        if self.type == "size":
            return format_size(value)
        return str(value)

    def default_for_docs(self) -> str:
        if self.default_text:
            return self.default_text
        text = self.format(self.default) if self.default is not None else "(none)"
        if self.reactive_default is not None:
            text += f" (reactive: {self.format(self.reactive_default)})"
        return text


def option(key: str, type: str, default: Any, doc: str, **kw: Any) -> Any:
    """Declare a settings field and its option in one place."""
    return field(default=default, metadata={"option": Option(key, type, default, doc, **kw)})


# -- the options --------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """All spark-adaptive settings of one application, validated."""

    enabled: bool = option(
        "enabled", "bool", False,
        "Turns spark-adaptive on for the application. When false or absent, nothing of the "
        "package is loaded and Spark behaves exactly as without it.")
    listener: str = option(
        "listener", "enum", "auto",
        "How Spark's events reach spark-adaptive: `shim` (the JVM shim filters and batches "
        "them, no per-task py4j call), `py4j` (a pure-py4j SparkListener), or `auto` (the shim "
        "when its jar is present, else py4j).", choices=("auto", "shim", "py4j"))
    shim_jar: str = option(
        "shim.jar", "string", "",
        "Path of the JVM shim jar. Empty: the jar built into the installed package.",
        default_text="(the packaged jar)")

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
        "Run a small SQL job on executors that join while a streaming query is managed, so "
        "that the rescale onto them does not pay their first-task costs (class loading, code "
        "generation, JIT) in its first micro-batch. A restart rescale onto more partitions "
        "waits for a warm-up in flight, at most 10 s.")
    non_replayable_sources: str = option(
        "scheduler.non-replayable-sources", "string", "",
        "Streaming sources, besides Spark's socket source, that cannot replay their input "
        "(format names or provider class names, comma-separated). spark-adaptive never "
        "restarts a query that reads one: a restart would lose what the source sent "
        "meanwhile. Such a query is rescaled live only, and a failure is not restarted unless "
        "restart-strategy.type says so.")
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
        "configured partitions (adaptive) or max-parallelism (reactive).",
        default_text="the query's partitions (reactive: max-parallelism)")
    max_parallelism: int = option(
        "max-parallelism", "int", MAX_PARALLELISM_LIMIT,
        "No query's parallelism ever exceeds this.", minimum=1, maximum=MAX_PARALLELISM_LIMIT)

    restart_strategy: str = option(
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

    batch_enabled: bool = option(
        "batch.enabled", "bool", False,
        "Adaptive Batch Scheduler: decide each batch stage's parallelism from the data it "
        "consumes.")
    batch_avg_data_volume_per_task: int = option(
        "batch.avg-data-volume-per-task", "size", 64 << 20,
        "Bytes each task of a shuffle-reading batch stage should consume; the stage's "
        "parallelism is its consumed bytes divided by this (Spark SQL: "
        "spark.sql.adaptive.advisoryPartitionSizeInBytes). Sources are split by "
        "batch.source-split-size instead. Flink's default is 16 MiB, AQE's 64 MiB: with scans "
        "at 128 MiB splits, 16, 32 and 64 MiB took the same time on the aggregation-plus-join "
        "of benchmarks/batch.py (1 GB: 36.7, 38.0 and 36.7 s; 100 MB: 3.26, 3.16 and 3.27 s; "
        "medians), and 64 MiB runs a quarter of the tasks.", minimum=1)
    batch_source_split_size: int | None = option(
        "batch.source-split-size", "size", None,
        "Most bytes one task of a file source reads: a source's parallelism is its bytes "
        "divided by this (Flink's dynamic source parallelism inference), within "
        "batch.default-source-parallelism. Unset: Spark SQL's spark.sql.files.maxPartitionBytes "
        "(128 MiB in Spark) for DataFrame scans, 64 MiB for batch.text_file. Bigger splits "
        "combine more on the map side (1 GB aggregation-plus-join: 523 MB shuffled with 128 "
        "MiB splits, 640 MB with 64 MiB), while a Python map task's dict gets slower as it "
        "grows.", minimum=1,
        default_text="spark.sql.files.maxPartitionBytes (DataFrame scans), 64 MiB (text_file)")
    batch_min_parallelism: int = option(
        "batch.min-parallelism", "int", 1,
        "Lowest parallelism decided for a batch stage.", minimum=1)
    batch_max_parallelism: int = option(
        "batch.max-parallelism", "int", 128,
        "Highest parallelism decided for a batch stage; also the number of shuffle "
        "partitions written before they are coalesced.", minimum=1,
        maximum=MAX_PARALLELISM_LIMIT)
    batch_default_source_parallelism: int | None = option(
        "batch.default-source-parallelism", "int", None,
        "Parallelism of sources whose size cannot be inferred. Unset: batch.max-parallelism.",
        minimum=1, default_text="batch.max-parallelism")
    batch_skewed_factor: float = option(
        "batch.skewed-factor", "float", 4.0,
        "A shuffle partition is skewed when it holds more than this times the median "
        "partition and more than batch.skewed-threshold. A skewed partition is split by map "
        "ranges where the operation allows it: by the RDD helpers, and by Spark SQL's skew "
        "join (spark.sql.adaptive.skewJoin.skewedPartitionFactor). Flink's default.",
        minimum=1.0)
    batch_skewed_threshold: int | None = option(
        "batch.skewed-threshold", "size", None,
        "Least size of a skewed shuffle partition (see batch.skewed-factor; Spark SQL: "
        "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes). Unset: "
        "batch.avg-data-volume-per-task, the bytes one task is planned to read, because a "
        "partition bigger than that is a task no range assignment can balance (Flink's and "
        "Spark's 256 MiB left the 1 and 2 GB skewed joins of benchmarks/batch.py unsplit, "
        "slowest task 3-6x the median).",
        minimum=1, default_text="batch.avg-data-volume-per-task")
    batch_shuffle_partitions_from_estimate: bool = option(
        "batch.shuffle-partitions-from-estimate", "bool", True,
        "DataFrame and SQL jobs, with the JVM shim: write a query's shuffles in 8 partitions "
        "per task its input plans (Spark's size estimate of what goes into the shuffle divided "
        "by avg-data-volume-per-task, at least the held task slots) when that is below "
        "batch.max-parallelism, instead of always batch.max-parallelism. Each partition is a "
        "file in every map task (Spark's bypass writer), which costs a small query more than "
        "its work (benchmarks/batch.py, 10 MB: see the README). Applies to sessions created "
        "after activation; a session can switch it off with spark.conf.set.")
    batch_executor_idle_timeout: float = option(
        "batch.executor-idle-timeout", "duration", 60.0,
        "While spark-adaptive controls the executors (no managed streaming query runs): once no "
        "batch stage has run for this long, executors beyond what batch.min-parallelism needs "
        "are released.", unit="s")
    batch_use_held_slots: bool = option(
        "batch.use-held-slots", "bool", True,
        "Give a batch stage at least one task per task slot the application holds (Spark's "
        "defaultParallelism) while each task still reads min(1 MiB, avg-data-volume-per-task "
        "/ 5): executors are held for the whole job, so an idle slot saves nothing. false: "
        "Flink's rule alone, and a stage with little data leaves held slots idle.")

    rest_enabled: bool = option(
        "rest.enabled", "bool", True, "Serve the REST API on the driver.")
    rest_host: str = option(
        "rest.host", "string", "127.0.0.1",
        "Address the REST API binds. Anything but loopback requires rest.token.")
    rest_port: int = option(
        "rest.port", "int", 4050,
        "First port tried for the REST API; the next free one is taken if it is busy "
        "(logged). 0 picks any free port.", minimum=0, maximum=65535)
    rest_token: str | None = option(
        "rest.token", "string", None,
        "Bearer token every REST request must carry. Required to bind anywhere but loopback.",
        secret=True)

    # ------------------------------------------------------------------------------
    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> Settings:
        """Read and validate every ``spark.adaptive.*`` key of a Spark configuration.

        Raises :class:`ConfigurationError` listing every problem, each naming its key.
        """
        problems: list[str] = []
        by_key = {o.full_key: (f, o) for f, o in _fields()}
        for f, o in _fields():
            for alias in o.aliases:
                by_key[PREFIX + alias] = (f, o)
        values: dict[str, Any] = {}
        explicit: set[str] = set()
        for key in sorted(conf):
            if not key.startswith(PREFIX):
                continue
            if key not in by_key:
                hint = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.8)
                problems.append(
                    f"{key} is not a spark-adaptive option"
                    + (f" (did you mean {hint[0]}?)" if hint else "")
                    + "; the keys are listed in the README's Configuration table"
                )
                continue
            fld, opt = by_key[key]
            raw = conf[key]
            if fld.name in explicit:
                problems.append(f"{key}: set twice (also as one of {opt.full_key}, "
                                + ", ".join(PREFIX + a for a in opt.aliases) + ")")
                continue
            if opt.key == "parallelism.upper-bound" and raw.strip() == "-1":
                values[fld.name] = None  # -1 means the default, as in Flink
                explicit.add(fld.name)
                continue
            try:
                values[fld.name] = opt.parse(raw)
                explicit.add(fld.name)
            except ValueError as e:
                shown = "<hidden>" if opt.secret else repr(raw)
                problems.append(f"{key}={shown} is not valid: {e}")
        mode = values.get("mode", "adaptive")
        for f, o in _fields():
            if f.name not in explicit and mode == "reactive" and o.reactive_default is not None:
                values[f.name] = o.reactive_default
        settings = cls(**values) if not problems else None
        if settings is not None:
            problems.extend(settings._cross_check(conf))
        if problems:
            raise ConfigurationError(problems)
        assert settings is not None
        return settings

    def _cross_check(self, conf: Mapping[str, str]) -> list[str]:
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
        if self.batch_min_parallelism > self.batch_max_parallelism:
            p.append(f"{PREFIX}batch.min-parallelism={self.batch_min_parallelism} is above "
                     f"{PREFIX}batch.max-parallelism={self.batch_max_parallelism}")
        if self.exp_max_backoff < self.exp_initial_backoff:
            p.append(f"{PREFIX}restart-strategy.exponential-delay.max-backoff is below its "
                     "initial-backoff")
        if self.rest_enabled and not _is_loopback(self.rest_host) and not self.rest_token:
            p.append(f"{PREFIX}rest.host={self.rest_host} binds beyond loopback; set "
                     f"{PREFIX}rest.token to a secret every request must carry")
        if self.enabled and _truthy(conf.get("spark.dynamicAllocation.enabled", "false")):
            p.append("spark.dynamicAllocation.enabled=true cannot be combined with "
                     f"{PREFIX}enabled=true: Spark refuses killExecutors while dynamic "
                     "allocation is on, and both would fight over the executor count. Set "
                     "spark.dynamicAllocation.enabled=false (spark-adaptive requests and "
                     "releases executors itself)")
        return p

    # ------------------------------------------------------------------------------
    def effective_upper_bound(self, configured_partitions: int) -> int:
        """A query's default upper bound: its partitions, or max-parallelism in reactive mode."""
        if self.upper_bound is not None:
            return self.upper_bound
        if self.mode == "reactive":
            return self.max_parallelism
        return max(self.lower_bound, min(configured_partitions, self.max_parallelism))

    @property
    def text_file_split_bytes(self) -> int:
        """``batch.source-split-size``, or :data:`TEXT_FILE_SPLIT_BYTES` when it is unset."""
        if self.batch_source_split_size is not None:
            return self.batch_source_split_size
        return TEXT_FILE_SPLIT_BYTES

    @property
    def batch_skew_threshold_bytes(self) -> int:
        """``batch.skewed-threshold``, or the volume per task when it is unset."""
        if self.batch_skewed_threshold is not None:
            return self.batch_skewed_threshold
        return self.batch_avg_data_volume_per_task

    def as_conf(self) -> dict[str, str]:
        """The settings that differ from their defaults, as Spark conf entries."""
        out: dict[str, str] = {}
        for f, o in _fields():
            v = getattr(self, f.name)
            if v != o.default:
                out[o.full_key] = o.format(v)
        return out


def _truthy(v: str) -> bool:
    return v.strip().lower() == "true"


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _fields() -> Iterator[tuple[dataclasses.Field[Any], Option]]:
    for f in dataclasses.fields(Settings):
        yield f, f.metadata["option"]


def all_options() -> list[Option]:
    return [o for _, o in _fields()]


# -- generated documentation ------------------------------------------------------
def markdown_table() -> str:
    lines = ["| Key | Default | Type | Meaning |", "|---|---|---|---|"]
    for o in all_options():
        kind = o.type if o.type != "enum" else " \\| ".join(o.choices)
        if o.type == "duration":
            kind = "duration" + (", -1 = forever" if o.forever else "")
        doc = o.doc
        if o.aliases:
            doc += " Also accepted: " + ", ".join(f"`{PREFIX}{a}`" for a in o.aliases) + "."
        lines.append(f"| `{o.full_key}` | {o.default_for_docs()} | {kind} | {doc} |")
    return "\n".join(lines) + "\n"


def defaults_template() -> str:
    out = [
        "# spark-adaptive: every option, with its default. Generated from",
        "# spark_adaptive/core/options.py (python -m spark_adaptive.core.options template).",
        "# Copy the lines you need into $SPARK_HOME/conf/spark-defaults.conf and uncomment them.",
        "",
    ]
    for o in all_options():
        for line in _wrap(o.doc, 86):
            out.append(f"# {line}")
        value = o.format(o.default) if o.default is not None else ""
        shown = value or f"<{o.default_for_docs()}>"
        out.append(f"# {o.full_key:<64} {shown}")
        out.append("")
    return "\n".join(out)


def _wrap(text: str, width: int) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


README_START, README_END = "<!-- keys:start -->", "<!-- keys:end -->"


def update_readme(path: str) -> None:
    """Replace the README's table of keys (between the two markers) with the generated one."""
    with open(path) as f:
        text = f.read()
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    with open(path, "w") as f:
        f.write(f"{head}{README_START}\n{markdown_table()}{README_END}{tail}")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "markdown"
    if what == "readme":
        update_readme(sys.argv[2] if len(sys.argv) > 2 else "README.md")
    else:
        sys.stdout.write(markdown_table() if what == "markdown" else defaults_template())
