"""Zero-code activation of spark-adaptive, loaded at interpreter start-up.

``spark_adaptive_startup.pth`` in site-packages imports this module. It must
cost next to nothing in every Python process, so it imports nothing heavy and
nothing of ``spark_adaptive``: it only watches for PySpark's SparkContext
module to be imported, then wraps ``SparkContext.__init__``. When a
SparkContext has started with ``spark.adaptive.enabled=true`` (from
``spark-submit --conf``, ``spark-defaults.conf`` or the app's own builder), the
wrapper imports spark_adaptive and activates it for that context. With the key
absent or false, spark_adaptive is never imported. Any other value (``yes``,
``1``, a typo) is a configuration error, as for every other key: the wrapper
lets spark_adaptive validate it, which stops the context and raises
``ConfigurationError`` naming the key and the value.

Before the context starts, and only when spark-adaptive is enabled (in the conf
the context is given, or in what ``spark-submit`` passed the driver JVM: its
``--conf`` keys and ``spark-defaults.conf``), the wrapper also sets
``spark.executor.heartbeatInterval`` to 3s unless either of them sets it
already: spark-adaptive treats an executor silent for
``spark.adaptive.failure-detection.timeout`` (20s) as hung, which needs
heartbeats more often than Spark's default 10s (executors read the interval
when they start, so it cannot be changed later). The JVM's system properties
are read right after PySpark itself has connected to (or launched) the JVM in
``SparkContext.__init__`` (its ``_ensure_initialized``), so the hook never
launches a JVM of its own.

Spark Connect: a Connect client has no driver in its process, and a local
Connect server that PySpark starts in this process (``builder.remote("local")``,
``spark.api.mode=connect``) runs its sessions' queries in the JVM, past
PySpark. Either way spark-adaptive does nothing for the session; one warning
says so and why, and the server's SparkContext is not activated.

Set ``SPARK_ADAPTIVE_STARTUP=0`` to switch the hook off for a process.
"""

import _thread  # threading.local's C implementation; importing threading costs every process
import os
import sys
import time

_CONTEXTS = ("pyspark.core.context", "pyspark.context")
_CONNECT = "pyspark.sql.connect.session"
_TARGETS = (*_CONTEXTS, _CONNECT)
CONNECT_MESSAGE = (
    "spark.adaptive.enabled=true is set for a Spark Connect session, but spark-adaptive "
    "manages the queries a classic PySpark driver runs from its own Python process; a "
    "Connect session's queries are run by the Connect server in the driver JVM (also when "
    "PySpark starts that server in this process, as remote(\"local\") or "
    "spark.api.mode=connect do), so it does nothing for this session. Run the app as a "
    "classic PySpark app (spark-submit, or SparkSession.builder.master(...)) to have its "
    "streaming queries scaled.")
_connect_warned = False
_ENABLED = "spark.adaptive.enabled"
_HEARTBEAT = "spark.executor.heartbeatInterval"
HEARTBEAT_INTERVAL = "3s"
#: The Spark plugin that runs a Spark Connect server inside a SparkContext.
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
# The context each thread's wrapped __init__ is building (None when it was given a jsc).
_building = _thread._local()
#: The options PySpark passed the driver JVM as it launched it in this process (the first
#: session's, as ``--conf``), as (key, value) pairs: the JVM keeps them as system
#: properties, and every SparkConf made later in the process loads them. None: no wrapped
#: context launched it (spark-submit's JVM, PYSPARK_GATEWAY_PORT, takes no options).
launch_options = None


def _get(conf, key):
    try:
        value = conf.get(key, None)
    except Exception:  # not a SparkConf
        return None
    return None if value is None else str(value)


def _enabled_value(conf):
    """``spark.adaptive.enabled`` as Spark reads a boolean (trimmed, any case); None when
    the key is not set."""
    value = None if conf is None else _get(conf, _ENABLED)
    return None if value is None else value.strip().lower()


def _connect_server(conf):
    """Whether this context runs a Spark Connect server for this process (a local Connect
    session): PySpark marks it with ``SPARK_LOCAL_REMOTE`` and gives it the Connect plugin."""
    if "SPARK_LOCAL_REMOTE" in os.environ:
        return True
    if conf is None:
        return False
    plugins = (_get(conf, "spark.plugins") or "").split(",")
    return (CONNECT_PLUGIN in (p.strip() for p in plugins)
            or (_get(conf, "spark.api.mode") or "").strip().lower() == "connect")


def _prepare(cls, conf):
    """Set what spark-adaptive needs before the context starts (only when it is enabled),
    right after PySpark has connected to the driver JVM. Returns the JVM's ``System`` when
    the heartbeat was set as a system property (to be cleared once the context has read
    it, so no later context of the process inherits it), else None.

    The context's conf is ``conf`` itself when it was made with the JVM up (PySpark then
    uses it as it is), else the JVM's system properties overlaid with ``conf``."""
    if _connect_server(conf):
        return None
    system = None
    if conf is None or getattr(conf, "_jconf", None) is None:
        system = cls._jvm.java.lang.System

    def value(key):
        if conf is not None and conf.contains(key):
            return _get(conf, key)
        return None if system is None else system.getProperty(key)

    if str(value(_ENABLED)).strip().lower() != "true" or value(_HEARTBEAT) is not None:
        return None
    if conf is not None:
        conf.set(_HEARTBEAT, HEARTBEAT_INTERVAL)
        return None
    system.setProperty(_HEARTBEAT, HEARTBEAT_INTERVAL)
    return system


def _ensure_initialized_then_prepare(original):
    """``SparkContext._ensure_initialized`` (PySpark's connection to the driver JVM, the
    first step of ``__init__``), followed by :func:`_prepare` when it is called for the
    context a wrapped ``__init__`` is building."""

    def _ensure_initialized(klass, instance=None, gateway=None, conf=None):
        global launch_options
        launching = (gateway is None and not getattr(klass, "_gateway", None)
                     and "PYSPARK_GATEWAY_PORT" not in os.environ)
        original.__get__(None, klass)(instance, gateway, conf)
        if launching and conf is not None and getattr(klass, "_gateway", None):
            try:
                launch_options = tuple(conf.getAll())
            except Exception:
                pass  # a conf without getAll: nothing is known of the launch
        building = getattr(_building, "context", None)
        if instance is None or instance is not building:
            return
        _building.context = None
        try:
            _building.system = _prepare(klass, conf)
        except Exception:
            pass  # a conf without these methods, or a JVM going away: leave it as it is

    _ensure_initialized._spark_adaptive = True
    _ensure_initialized.__wrapped__ = original.__func__
    _ensure_initialized.__doc__ = original.__func__.__doc__
    return classmethod(_ensure_initialized)


def _warn_connect_once():
    global _connect_warned
    if not _connect_warned:
        _connect_warned = True
        when = time.strftime("%y/%m/%d %H:%M:%S")
        sys.stderr.write(f"{when} WARN SparkAdaptive: {CONNECT_MESSAGE}\n")


def _warn_connect(options):
    try:
        enabled = str(options.get(_ENABLED, "false")).strip().lower() == "true"
    except Exception:
        enabled = False
    if enabled:
        _warn_connect_once()


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
        # A context wrapping a running JVM one (jsc) has its conf already: nothing to set.
        given_jsc = kwargs.get("jsc", args[9] if len(args) > 9 else None) is not None
        _building.context, _building.system = (None if given_jsc else self), None
        try:
            original(self, *args, **kwargs)
        finally:
            system, _building.context, _building.system = _building.system, None, None
            if system is not None:
                try:
                    system.clearProperty(_HEARTBEAT)
                except Exception:
                    pass  # the JVM is gone with the failed start
        value = _enabled_value(getattr(self, "_conf", None))
        if value is None or value == "false":
            return
        if value == "true" and _connect_server(self._conf):
            _warn_connect_once()
            return
        from spark_adaptive.activation import activate_context

        try:
            # also refuses a value of the key other than true/false
            activate_context(self, at_start=True)
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
    ensure = cls.__dict__.get("_ensure_initialized")
    if isinstance(ensure, classmethod):
        cls._ensure_initialized = _ensure_initialized_then_prepare(ensure)


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
