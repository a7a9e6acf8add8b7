"""Zero-code activation of spark-adaptive, loaded at interpreter start-up.

``spark_adaptive_startup.pth`` in site-packages imports this module. It must
cost next to nothing in every Python process, so it imports nothing heavy and
nothing of ``spark_adaptive``: it only watches for PySpark's SparkContext
module to be imported, then wraps ``SparkContext.__init__``. When a
SparkContext has started with ``spark.adaptive.enabled=true`` (from
``spark-submit --conf``, ``spark-defaults.conf`` or the app's own builder), the
wrapper imports spark_adaptive and activates it for that context. With the key
absent or false, spark_adaptive is never imported.

Before the SparkContext starts, and only when spark-adaptive is enabled (in the
conf the context is given, or in what ``spark-submit`` passed the driver JVM:
its ``--conf`` keys and ``spark-defaults.conf``), the wrapper also sets
``spark.executor.heartbeatInterval`` to 3s unless it is set already:
spark-adaptive treats an executor silent for
``spark.adaptive.failure-detection.timeout`` (20s) as hung, which needs
heartbeats more often than Spark's default 10s (executors read the interval
when they start, so it cannot be changed later).

A Spark Connect client has no driver in its process: when a Connect session is
built with ``spark.adaptive.enabled=true`` among its options, one warning says
that spark-adaptive does nothing for it, and why.

Set ``SPARK_ADAPTIVE_STARTUP=0`` to switch the hook off for a process.
"""

import os
import sys
import time

_CONTEXTS = ("pyspark.core.context", "pyspark.context")
_CONNECT = "pyspark.sql.connect.session"
_TARGETS = (*_CONTEXTS, _CONNECT)
CONNECT_MESSAGE = (
    "spark.adaptive.enabled=true is set for a Spark Connect session, but spark-adaptive runs "
    "inside the Spark driver's Python process, which a Connect client does not have: it does "
    "nothing for this session. Run the app as a classic PySpark app (spark-submit, or "
    "SparkSession.builder.master(...)) to have its streaming queries scaled.")
_connect_warned = False
_HEARTBEAT = "spark.executor.heartbeatInterval"
HEARTBEAT_INTERVAL = "3s"


def _conf_enables(conf):
    try:
        return conf.get("spark.adaptive.enabled", "false").strip().lower() == "true"
    except Exception:
        return False


def _enabled(sc):
    return _conf_enables(getattr(sc, "_conf", None))


def _submitted(cls, conf, gateway):
    """The driver JVM's system properties, where ``spark-submit`` puts its ``--conf`` keys
    and ``spark-defaults.conf`` (PySpark's SparkConf reads them when the context starts, so
    a session builder's conf does not hold them yet); None when they cannot be read.

    It connects to (or launches) the JVM the way ``SparkContext.__init__`` does first
    (``_ensure_initialized``), with the same gateway and conf, so nothing starts
    differently; a context that would refuse to start (Spark Connect mode) is left alone."""
    if gateway is not None or "SPARK_CONNECT_MODE_ENABLED" in os.environ:
        return None
    ensure = getattr(cls, "_ensure_initialized", None)
    if ensure is None:
        return None
    try:
        ensure(None, None, conf)
        return cls._jvm.java.lang.System
    except Exception:
        return None  # __init__ meets the same problem next and raises it as Spark does


def _prepare(cls, args, kwargs):
    """Settings spark-adaptive needs before the context starts (only when it is enabled)."""
    conf = kwargs.get("conf", args[7] if len(args) > 7 else None)
    props = None
    try:
        if conf is None or not _conf_enables(conf):
            props = _submitted(cls, conf, kwargs.get("gateway", args[8] if len(args) > 8
                                                     else None))
            value = props.getProperty("spark.adaptive.enabled") if props is not None else None
            if str(value).strip().lower() != "true":
                return
        if conf is not None and conf.contains(_HEARTBEAT):
            return
        if props is not None and props.getProperty(_HEARTBEAT) is not None:
            return
        if conf is not None:
            conf.set(_HEARTBEAT, HEARTBEAT_INTERVAL)
        elif props is not None:
            props.setProperty(_HEARTBEAT, HEARTBEAT_INTERVAL)
    except Exception:
        pass  # a conf without these methods: leave it as it is


def _warn_connect(options):
    global _connect_warned
    try:
        enabled = str(options.get("spark.adaptive.enabled", "false")).strip().lower() == "true"
    except Exception:
        enabled = False
    if enabled and not _connect_warned:
        _connect_warned = True
        when = time.strftime("%y/%m/%d %H:%M:%S")
        sys.stderr.write(f"{when} WARN SparkAdaptive: {CONNECT_MESSAGE}\n")


def _patch_connect(module):
    builder = getattr(getattr(module, "SparkSession", None), "Builder", None)
    if builder is None:
        return
    for name in ("getOrCreate", "create"):
        original = getattr(builder, name, None)
        if original is None or getattr(original, "_spark_adaptive", False):
            continue

        def wrapper(self, *args, _original=original, **kwargs):
            _warn_connect(getattr(self, "_options", {}))
            return _original(self, *args, **kwargs)

        wrapper._spark_adaptive = True
        wrapper.__wrapped__ = original
        wrapper.__doc__ = original.__doc__
        setattr(builder, name, wrapper)


def _patch(module):
    if getattr(module, "__name__", "") == _CONNECT:
        _patch_connect(module)
        return
    cls = getattr(module, "SparkContext", None)
    if cls is None or getattr(cls.__init__, "_spark_adaptive", False):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        _prepare(cls, args, kwargs)
        original(self, *args, **kwargs)
        if _enabled(self):
            from spark_adaptive.activation import activate_context

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
