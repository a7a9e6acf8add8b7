"""Turning spark-adaptive on for a SparkContext.

Two ways in, one code path:

* :func:`spark_adaptive.enable` from code (notebooks, explicit use);
* zero-code: ``spark-submit --conf spark.adaptive.enabled=true app.py`` or the
  same key in ``spark-defaults.conf``. The distribution installs
  ``spark_adaptive_startup.pth`` into site-packages; Python runs it at start-up
  and it loads the tiny module :mod:`_spark_adaptive_startup`, which imports
  nothing of this package. That module waits for PySpark's ``SparkContext`` to
  be imported and wraps its ``__init__``: right after a SparkContext starts, it
  reads ``spark.adaptive.enabled`` and only when it is ``true`` imports this
  module and calls :func:`activate_context`. This runs before the app gets its
  SparkContext back, hence before its first job.

Activation validates every ``spark.adaptive.*`` key once
(:meth:`Settings.from_conf`); a bad key or value raises
:class:`~spark_adaptive.errors.ConfigurationError` naming it, and the
SparkContext is stopped, so the app fails at start instead of running
unmanaged. A pyspark or Spark outside the supported range does the same with
:class:`~spark_adaptive.errors.UnsupportedSparkError`
(:mod:`spark_adaptive.spark.versions`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from spark_adaptive.batch.wiring import start_batch
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.settings import Settings
from spark_adaptive.spark import logs
from spark_adaptive.spark.jvm import spark_conf
from spark_adaptive.spark.runtime import AdaptiveRuntime, runtime_for, start_runtime
from spark_adaptive.spark.versions import check_versions

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

def conf_dict(sc: SparkContext) -> dict[str, str]:
    return spark_conf(sc)


def settings_for(sc: SparkContext, overrides: dict[str, str] | None = None) -> Settings:
    conf = conf_dict(sc)
    conf.update(overrides or {})
    return Settings.from_conf(conf)


def activate_context(sc: SparkContext, overrides: dict[str, str] | None = None,
                     force: bool = False) -> AdaptiveRuntime | None:
    """Validate the settings of ``sc`` and start spark-adaptive if it is enabled."""
    existing = runtime_for(sc)
    if existing is not None:
        return existing
    settings = settings_for(sc, overrides)
    if force and not settings.enabled:
        settings = Settings.from_conf({**conf_dict(sc), **(overrides or {}),
                                       "spark.adaptive.enabled": "true"})
    if not settings.enabled:
        return None
    check_versions(sc)
    logs.configure(sc)
    rt = start_runtime(sc, settings)
    _install_context_hooks()
    start_batch(rt)
    if rt.local_slots is not None:
        log.info("spark-adaptive enabled in local mode (%s): a fixed pool of %d task slot(s). "
                 "Streaming queries start at once and keep their partitions; no executor is "
                 "requested or released and nothing is rescaled. Active: the REST API, the "
                 "rescale history, restart strategies%s.", sc.master, rt.local_slots,
                 ", batch decisions" if settings.batch.enabled else "")
    else:
        log.info("spark-adaptive enabled (mode %s)", settings.scheduler.mode)
    return rt


def enable(spark: SparkSession | SparkContext, **conf: str) -> AdaptiveRuntime:
    """Turn spark-adaptive on for a running session, as ``spark.adaptive.enabled=true`` would.

    ``conf`` may give ``spark.adaptive.*`` keys (with or without the prefix, dots
    or underscores) that override the session's configuration for spark-adaptive.
    Raises :class:`ConfigurationError` for a Spark Connect session: it has no driver in
    this process.
    """
    if _is_connect(spark):
        raise ConfigurationError([CONNECT_UNSUPPORTED])
    sc: SparkContext = spark if _is_context(spark) else spark.sparkContext  # type: ignore[assignment,union-attr]
    overrides = {_full_key(k): str(v) for k, v in conf.items()}
    rt = activate_context(sc, overrides, force=True)
    assert rt is not None
    if not _is_context(spark):
        rt.remember_session(spark)  # type: ignore[arg-type]
    return rt


def _full_key(key: str) -> str:
    key = key.replace("_", "-") if "." not in key else key
    return key if key.startswith("spark.adaptive.") else "spark.adaptive." + key


CONNECT_UNSUPPORTED = (
    "spark_adaptive.enable() was given a Spark Connect session: spark-adaptive runs inside "
    "the Spark driver's Python process, and a Connect client (SparkSession.builder.remote) "
    "has none; a Connect server runs its driver in the JVM. Run the app as a classic PySpark "
    "app (spark-submit, or SparkSession.builder.master(...)) to use spark-adaptive.")


def _is_connect(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyspark.sql.connect")


def _is_context(obj: Any) -> bool:
    from pyspark import SparkContext

    return isinstance(obj, SparkContext)


_context_hooks_installed = False


def _install_context_hooks() -> None:
    """Shut the runtime down before its SparkContext stops (listeners removed first), and
    follow ``setLogLevel`` with spark-adaptive's own lines."""
    global _context_hooks_installed
    if _context_hooks_installed:
        return
    from pyspark import SparkContext

    original_stop = SparkContext.stop
    original_set_log_level = SparkContext.setLogLevel

    def stop(self: SparkContext) -> None:
        rt = runtime_for(self)
        if rt is not None:
            rt.shutdown()
        original_stop(self)

    def set_log_level(self: SparkContext, logLevel: str) -> None:  # noqa: N803 - PySpark's
        original_set_log_level(self, logLevel)
        logs.follow_spark_level(self)

    stop.__wrapped__ = original_stop  # type: ignore[attr-defined]
    set_log_level.__wrapped__ = original_set_log_level  # type: ignore[attr-defined]
    set_log_level.__doc__ = original_set_log_level.__doc__
    SparkContext.stop = stop  # type: ignore[method-assign]
    SparkContext.setLogLevel = set_log_level  # type: ignore[method-assign]
    _context_hooks_installed = True


__all__ = ["ConfigurationError", "activate_context", "enable"]
