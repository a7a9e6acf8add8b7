"""Zero-code activation of spark-adaptive, loaded at interpreter start-up.

``spark_adaptive_startup.pth`` in site-packages imports this module. It must
cost next to nothing in every Python process, so it imports nothing heavy and
nothing of ``spark_adaptive``: it only watches for PySpark's SparkContext
module to be imported, then wraps ``SparkContext.__init__``. When a
SparkContext has started with ``spark.adaptive.enabled=true`` (from
``spark-submit --conf``, ``spark-defaults.conf`` or the app's own builder), the
wrapper imports spark_adaptive and activates it for that context. With the key
absent or false, spark_adaptive is never imported.

Before the SparkContext starts, and only when the configuration it is given
enables spark-adaptive, the wrapper also sets ``spark.executor.heartbeatInterval``
to 3s unless the app set it: spark-adaptive treats an executor silent for
``spark.adaptive.failure-detection.timeout`` (20s) as hung, which needs
heartbeats more often than Spark's default 10s (executors read the interval
when they start, so it cannot be changed later).

Set ``SPARK_ADAPTIVE_STARTUP=0`` to switch the hook off for a process.
"""

import os
import sys

_TARGETS = ("pyspark.core.context", "pyspark.context")
_HEARTBEAT = "spark.executor.heartbeatInterval"
HEARTBEAT_INTERVAL = "3s"


def _conf_enables(conf):
    try:
        return conf.get("spark.adaptive.enabled", "false").strip().lower() == "true"
    except Exception:
        return False


def _enabled(sc):
    return _conf_enables(getattr(sc, "_conf", None))


def _prepare(args, kwargs):
    """Settings spark-adaptive needs before the context starts (only when it is enabled)."""
    conf = kwargs.get("conf", args[7] if len(args) > 7 else None)
    if conf is None or not _conf_enables(conf):
        return
    try:
        if not conf.contains(_HEARTBEAT):
            conf.set(_HEARTBEAT, HEARTBEAT_INTERVAL)
    except Exception:
        pass  # a conf without these methods: leave it as it is


def _patch(module):
    cls = getattr(module, "SparkContext", None)
    if cls is None or getattr(cls.__init__, "_spark_adaptive", False):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        _prepare(args, kwargs)
        original(self, *args, **kwargs)
        if _enabled(self):
            from spark_adaptive.spark.activation import activate_context

            try:
                activate_context(self)
            except Exception:
                # A bad spark.adaptive.* setting: the app must not run unmanaged.
                try:
                    self.stop()
                finally:
                    raise

    __init__._spark_adaptive = True
    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__


class _Finder:
    """A meta-path finder that only ever answers for PySpark's context module."""

    def find_spec(self, name, path=None, target=None):
        if name not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install():
    if os.environ.get("SPARK_ADAPTIVE_STARTUP", "1") == "0":
        return
    for name in _TARGETS:
        if name in sys.modules:
            _patch(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
