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

import importlib
import logging
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.options import Settings
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.spark.runtime import AdaptiveRuntime, runtime_for, start_runtime
from spark_adaptive.spark.versions import check_versions

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_activation_hooks: list[Any] = []
#: Parts that start through an activation hook; imported at the first activation only, so an
#: app that never enables spark-adaptive loads none of them.
_PARTS = ("spark_adaptive.batch.wiring",)


def conf_dict(sc: SparkContext) -> dict[str, str]:
    return {k: v for k, v in sc.getConf().getAll()}


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
    _configure_logging()
    rt = start_runtime(sc, settings)
    _install_stop_hook()
    for part in _PARTS:
        importlib.import_module(part)  # registers its hook below, once
    for hook in _activation_hooks:
        hook(rt)
    log.info("spark-adaptive enabled (mode %s)", settings.mode)
    return rt


def on_activation(hook: Any) -> None:
    """Call ``hook(runtime)`` for every runtime activated from now on (used by the scheduler)."""
    _activation_hooks.append(hook)


def enable(spark: SparkSession | SparkContext, **conf: str) -> AdaptiveRuntime:
    """Turn spark-adaptive on for a running session, as ``spark.adaptive.enabled=true`` would.

    ``conf`` may give ``spark.adaptive.*`` keys (with or without the prefix, dots
    or underscores) that override the session's configuration for spark-adaptive.
    """
    sc: SparkContext = spark if _is_context(spark) else spark.sparkContext  # type: ignore[assignment,union-attr]
    overrides = {_full_key(k): str(v) for k, v in conf.items()}
    rt = activate_context(sc, overrides, force=True)
    assert rt is not None
    if not _is_context(spark):
        rt.ensure_query_listener(spark)  # type: ignore[arg-type]
    return rt


def _full_key(key: str) -> str:
    key = key.replace("_", "-") if "." not in key else key
    return key if key.startswith("spark.adaptive.") else "spark.adaptive." + key


def _is_context(obj: Any) -> bool:
    from pyspark import SparkContext

    return isinstance(obj, SparkContext)


_stop_hook_installed = False


def _install_stop_hook() -> None:
    """Shut the runtime down before its SparkContext stops (listeners removed first)."""
    global _stop_hook_installed
    if _stop_hook_installed:
        return
    from pyspark import SparkContext

    original = SparkContext.stop

    def stop(self: SparkContext) -> None:
        rt = runtime_for(self)
        if rt is not None:
            rt.shutdown()
        original(self)

    stop.__wrapped__ = original  # type: ignore[attr-defined]
    SparkContext.stop = stop  # type: ignore[method-assign]
    _stop_hook_installed = True


def _configure_logging() -> None:
    """INFO lines of spark-adaptive reach stderr like Spark's own, unless the app set logging up."""
    logger = logging.getLogger("spark_adaptive")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                           "%y/%m/%d %H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


__all__ = ["ConfigurationError", "activate_context", "enable", "on_activation"]
