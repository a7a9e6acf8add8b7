"""All of spark-adaptive's settings for one application: every group, read once.

:class:`Settings` composes the option groups of each concern, each declared
where it is used: :class:`~spark_adaptive.core.streaming.settings.SchedulerSettings`,
:class:`~spark_adaptive.core.streaming.settings.RestartStrategySettings`,
:class:`~spark_adaptive.core.autoscaler.config.AutoscalerConfig`,
:class:`~spark_adaptive.core.batch.settings.BatchSettings`,
:class:`~spark_adaptive.rest.settings.RestSettings`. :meth:`Settings.from_conf`
reads and validates a whole Spark configuration at activation and raises one
:class:`~spark_adaptive.errors.ConfigurationError` naming every bad key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_adaptive.core.autoscaler.config import AutoscalerConfig
from spark_adaptive.core.batch.settings import BatchSettings
from spark_adaptive.core.options import PREFIX, Option, changed_options, group, option
from spark_adaptive.core.options import options_of as _options_of
from spark_adaptive.core.options import read as _read
from spark_adaptive.core.streaming.settings import RestartStrategySettings, SchedulerSettings
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.rest.settings import RestSettings


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
    listener_queue_capacity: int = option(
        "listener.queue.capacity", "int", 10000,
        "Stage and job events the JVM shim keeps for spark-adaptive while Python falls behind; "
        "more are dropped and counted (spark_adaptive_events_dropped_total). Heartbeats are "
        "coalesced to each executor's latest, and executor and query events are never "
        "dropped, so the driver's memory stays bounded.", minimum=1, maximum=10_000_000)
    shim_jar: str = option(
        "shim.jar", "string", "",
        "Path of the JVM shim jar. Empty: the jar built into the installed package.",
        default_text="(the packaged jar)")
    metrics_source: bool = option(
        "metrics.spark-source.enabled", "bool", True,
        "Also publish spark-adaptive's figures in Spark's own metrics system, as the driver "
        "source `spark_adaptive` (so the sinks of `metrics.properties` carry them: JMX, "
        "Graphite, the JSON and Prometheus servlets). Needs the JVM shim; the REST API's "
        "/metrics has them either way.")
    scheduler: SchedulerSettings = group(SchedulerSettings)
    restart: RestartStrategySettings = group(RestartStrategySettings)
    autoscaler: AutoscalerConfig = group(AutoscalerConfig)
    batch: BatchSettings = group(BatchSettings)
    rest: RestSettings = group(RestSettings)

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> Settings:
        """Read and validate every ``spark.adaptive.*`` key of a Spark configuration.

        Raises :class:`ConfigurationError` listing every problem, each naming its key.
        """
        try:
            settings, problems = _read(cls, conf, _reactive_defaults)
        except ConfigurationError as e:  # a group that checks its own rules as it is built
            settings, problems = None, e.problems
        if settings is not None:
            problems = settings._problems(conf)
        if problems or settings is None:
            raise ConfigurationError(problems)
        return settings

    def _problems(self, conf: Mapping[str, str]) -> list[str]:
        p = [*self.scheduler.problems(), *self.restart.problems(), *self.batch.problems(),
             *self.rest.problems()]
        if self.autoscaler.enabled and self.scheduler.mode == "reactive":
            p.append(f"{PREFIX}autoscaler.enabled=true cannot be combined with "
                     f"{PREFIX}scheduler.mode=reactive: reactive mode gives every query every "
                     "executor, the autoscaler gives each the executors its load needs. Use "
                     "the adaptive mode (the default) with the autoscaler, or switch it off")
        if self.enabled and dynamic_allocation_on(conf):
            p.append("spark.dynamicAllocation.enabled=true cannot be combined with "
                     f"{PREFIX}enabled=true: Spark refuses killExecutors while dynamic "
                     "allocation is on, and both would fight over the executor count. Set "
                     "spark.dynamicAllocation.enabled=false (spark-adaptive requests and "
                     "releases executors itself)")
        return p

    def as_conf(self) -> dict[str, str]:
        """The settings that differ from the defaults, as ``spark.adaptive.*`` entries."""
        return changed_options(self)


def is_local_master(master: str) -> bool:
    """Whether Spark runs ``master`` in local mode, by Spark's own test
    (``Utils.isLocalMaster``): ``local`` and ``local[...]``; ``local-cluster[...]`` has
    executors and is not."""
    return master == "local" or master.startswith("local[")


def dynamic_allocation_on(conf: Mapping[str, str]) -> bool:
    """Whether Spark runs dynamic allocation with ``conf`` (``Utils.
    isDynamicAllocationEnabled``): enabled, and not in local mode (which Spark ignores it in)
    unless ``spark.dynamicAllocation.testing`` is set."""
    def flag(key: str) -> bool:
        return conf.get(key, "false").strip().lower() == "true"

    return flag("spark.dynamicAllocation.enabled") and (
        not is_local_master(conf.get("spark.master", "")) or
        flag("spark.dynamicAllocation.testing"))


def _reactive_defaults(explicit: dict[tuple[str, ...], Any]) -> dict[tuple[str, ...], Any]:
    """In reactive mode, the options that have a reactive default take it unless set."""
    if explicit.get(("scheduler", "mode")) != "reactive":
        return {}
    return {path: o.reactive_default for path, o in _options_of(Settings)
            if o.reactive_default is not None}


def all_options() -> list[Option]:
    """Every option, in declaration order (the reference and the template follow it)."""
    return [o for _, o in _options_of(Settings)]


__all__ = ["Settings", "all_options", "dynamic_allocation_on", "is_local_master"]
