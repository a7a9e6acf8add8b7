"""Turning spark-adaptive on for a SparkContext.

Two ways in, one code path:

* :func:`spark_adaptive.enable` from code (notebooks, explicit use);
* zero-code: ``spark-submit --conf spark.adaptive.enabled=true app.py`` or the
  same key in ``spark-defaults.conf``. The distribution installs
  ``spark_adaptive_startup.pth`` into site-packages; Python runs it at start-up
  and it loads the tiny module :mod:`_spark_adaptive_startup`, which imports
  nothing of this package. That module waits for PySpark's ``SparkContext`` to
  be imported and wraps its ``__init__``: right after a SparkContext starts, it
  reads ``spark.adaptive.enabled`` and, unless it is absent or ``false``, imports
  this module and calls :func:`activate_context` (which refuses any value but
  ``true``). This runs before the app gets its SparkContext back, hence before
  its first job. A SparkContext that runs a local Spark Connect server is left
  alone: its sessions' queries never pass through PySpark.

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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from spark_adaptive.batch.wiring import start_batch
from spark_adaptive.core.options import PREFIX, Option, options_of
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.settings import Settings
from spark_adaptive.spark import logs
from spark_adaptive.spark.jvm import spark_conf
from spark_adaptive.spark.listener import active_work
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


def _wanted(sc: SparkContext, overrides: dict[str, str] | None, force: bool) -> Settings:
    """The settings of ``sc`` with ``overrides``, validated; enabled when ``force``."""
    settings = settings_for(sc, overrides)
    if force and not settings.enabled:
        settings = Settings.from_conf({**conf_dict(sc), **(overrides or {}),
                                       "spark.adaptive.enabled": "true"})
    return settings


def _refuse_other_settings(running: Settings, wanted: Settings, keys: Iterable[str]) -> None:
    """:class:`ConfigurationError` naming each of ``keys`` whose value in ``wanted`` is not
    the one ``running`` has."""
    by_key: dict[str, tuple[tuple[str, ...], Option]] = {}
    for path, o in options_of(Settings):
        for key in (o.key, *o.aliases):
            by_key[PREFIX + key] = (path, o)
    differ = []
    for key in sorted(keys):
        path, o = by_key[key]  # from_conf has refused every other key
        have, want = _value_at(running, path), _value_at(wanted, path)
        if have != want:
            differ.append(key if o.secret else
                          f"{key}={_shown(o, want)} (running: {_shown(o, have)})")
    if differ:
        raise ConfigurationError([
            "spark-adaptive is already running for this SparkContext with other settings: "
            + "; ".join(differ) + ". A running spark-adaptive is not reconfigured: set these "
            "keys before the context starts (spark-submit --conf, the session builder), or "
            "stop the SparkContext and start it again with them"])


def _shown(o: Option, value: Any) -> str:
    """``value`` as a user would write it; an unset key (None, or an empty text where that
    means a default), as unset, with what that means."""
    if value is None or (value == "" and o.default_text):
        return f"unset: {o.default_text}" if o.default_text else "unset"
    return o.format(value)


def _value_at(settings: Settings, path: tuple[str, ...]) -> Any:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return value


def activate_context(sc: SparkContext, overrides: dict[str, str] | None = None,
                     force: bool = False, at_start: bool = False) -> AdaptiveRuntime | None:
    """Validate the settings of ``sc`` and start spark-adaptive if it is enabled.

    ``at_start``: ``sc`` has just started, before any code of the app ran on it (the
    zero-code hook); only then may ``autoscaler.initial-slots`` hold its executors before
    its first query (an ``enable()`` may come after the app cached data on them).

    When spark-adaptive already runs for ``sc`` (the zero-code hook started it, or an
    earlier call), that runtime is returned; ``overrides`` are then validated, and
    :class:`ConfigurationError` names those that differ from the settings it runs with
    (a running runtime is not reconfigured)."""
    existing = runtime_for(sc)
    if existing is not None:
        if overrides:
            _refuse_other_settings(existing.settings, _wanted(sc, overrides, force),
                                   overrides)
        return existing
    settings = _wanted(sc, overrides, force)
    if not settings.enabled:
        return None
    check_versions(sc)
    logs.configure(sc)
    rt = start_runtime(sc, settings, at_start)
    _install_context_hooks()
    try:
        batch = start_batch(rt)
    except BaseException:
        rt.shutdown()
        raise
    if batch is not None:
        # A job or stage whose end event was lost on the way is not held as running for
        # good: the batch executors ask Spark's status store what still runs.
        batch.follower.spark_active = lambda: active_work(sc)
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

    ``conf`` may give ``spark.adaptive.*`` keys, with or without the prefix, that override
    the session's configuration for spark-adaptive. A keyword argument without a dot has
    its underscores read as dashes (``max_parallelism=64`` is ``max-parallelism``); a key
    with dots is passed as a dict: ``enable(spark, **{"scheduler.mode": "reactive"})``.
    When spark-adaptive already runs for the session's SparkContext (the zero-code hook
    started it), that runtime is returned, and :class:`ConfigurationError` names the keys
    of ``conf`` whose values differ from the ones it runs with.
    Raises :class:`ConfigurationError` for a bad key or value, and for a Spark Connect
    session: it has no driver in this process.
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
