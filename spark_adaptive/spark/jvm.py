"""Small py4j helpers. Everything that touches a JVM handle lives in this package.

Handles are ``_j``-prefixed where they are kept; nothing here returns a
``JavaObject`` to code outside :mod:`spark_adaptive.spark`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.options import PREFIX
from spark_adaptive.errors import ShimNotAvailableError

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

PACKAGED_SHIM = Path(__file__).resolve().parent.parent / "jars" / "spark-adaptive-shim.jar"
_loader_lock = threading.Lock()
_loaders: dict[tuple[int, str], Any] = {}


def jvm(sc: SparkContext) -> Any:
    """The py4j view of the driver JVM (typed ``Optional`` by pyspark; always set here)."""
    return sc._jvm


def gateway(sc: SparkContext) -> Any:
    return sc._gateway


def clear_system_properties(context: type[SparkContext],
                            properties: Iterable[tuple[str, str]]) -> None:
    """Clear each (key, value) of ``properties`` from the system properties of the driver
    JVM this process is connected to, if any, where the key still holds that value.
    ``context``: PySpark's ``SparkContext`` class, which holds the process's gateway."""
    gw = context._gateway
    if gw is None:
        return
    system = gw.jvm.java.lang.System
    for key, value in properties:
        if system.getProperty(key) == value:
            system.clearProperty(key)


def ensure_callback_server(sc: SparkContext) -> None:
    """Start py4j's callback server the way PySpark itself does, once."""
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(gateway(sc))  # type: ignore[no-untyped-call]


#: The keys outside ``spark.adaptive.*`` that spark-adaptive's settings are checked against
#: (:meth:`spark_adaptive.settings.Settings.from_conf`).
OTHER_KEYS = ("spark.master", "spark.dynamicAllocation.enabled",
              "spark.dynamicAllocation.testing")


def spark_conf(sc: SparkContext) -> dict[str, str]:
    """The SparkContext's ``spark.adaptive.*`` keys and the :data:`OTHER_KEYS` it sets, with
    their values as set.

    Read from the JVM's ``SparkConf`` itself, never from a rendering of it: Spark's own
    dumps (``toDebugString``, the UI, event logs) replace every value whose key or value
    matches ``spark.redaction.regex`` with ``*********(redacted)``, which would turn
    ``rest.token`` (and any path or class name containing "secret" or "token") into that
    mask."""
    jconf = sc._jsc.sc().conf()
    conf = {PREFIX + str(pair._1()): str(pair._2()) for pair in jconf.getAllWithPrefix(PREFIX)}
    for key in OTHER_KEYS:
        value = jconf.get(key, None)
        if value is not None:
            conf[key] = str(value)
    return conf


def persisted_rdd_count(sc: SparkContext) -> int:
    """RDDs the app holds persisted now, by Spark's own list (``JavaSparkContext.
    getPersistentRDDs``): every ``persist()``/``cache()`` until ``unpersist()``, a cached
    DataFrame's in-memory relation once built, and every ``localCheckpoint()`` (which
    persists its RDD). One py4j call to the driver JVM."""
    return int(sc._jsc.getPersistentRDDs().size())


def registered_executors(sc: SparkContext) -> int:
    """Executors registered with the driver now (the driver itself not counted)."""
    return len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1


def scala_string_seq(sc: SparkContext, items: list[str]) -> Any:
    return jvm(sc).PythonUtils.toSeq(list(items))


def empty_scala_map(sc: SparkContext) -> Any:
    return jvm(sc).PythonUtils.toScalaMap({})


def seq_to_list(jseq: Any) -> list[Any]:
    return [jseq.apply(i) for i in range(jseq.size())]


def shim_jar_path(configured: str = "") -> Path | None:
    """The shim jar to use: the configured path, else the packaged one, if it exists."""
    path = Path(configured) if configured else PACKAGED_SHIM
    return path if path.is_file() else None


def shim_class(sc: SparkContext, name: str, jar: Path) -> Any:
    """Load ``io.sparkadaptive.shim.<name>`` from the shim jar into the running driver.

    The driver JVM's class path is fixed by the time Python runs (spark-submit
    starts the JVM first), so the jar gets its own ``URLClassLoader`` whose
    parent is Spark's loader. py4j calls methods by reflection on the object's
    own class, so objects from that loader work like any other; the Python side
    only ever passes JDK and Spark types to them.
    """
    key = (id(sc._gateway), str(jar))
    with _loader_lock:
        loader = _loaders.get(key)
        if loader is None:
            j = jvm(sc)
            try:
                urls = gateway(sc).new_array(j.java.net.URL, 1)
                urls[0] = j.java.io.File(str(jar)).toURI().toURL()
                parent = j.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
                loader = j.java.net.URLClassLoader(urls, parent)
            except Exception as e:  # py4j errors carry the Java trace
                raise ShimNotAvailableError(f"could not open the shim jar {jar}: {e}") from e
            _loaders[key] = loader
    try:
        return loader.loadClass(f"io.sparkadaptive.shim.{name}")
    except Exception as e:
        raise ShimNotAvailableError(
            f"the shim jar {jar} has no class io.sparkadaptive.shim.{name} "
            "(rebuild it with jvm-shim/build.sh)"
        ) from e


def add_to_spark_class_loader(sc: SparkContext, jar: Path, class_name: str) -> str | None:
    """Put ``jar`` on the class loader Spark resolves class names with, so a conf that names
    one of its classes (``spark.sql.extensions``) finds it. Returns None when ``class_name``
    now loads by name, else why not.

    The driver runs with Spark's ``MutableURLClassLoader`` as its context class loader
    (spark-submit, and the JVM PySpark starts), which takes jars at run time; the py4j
    threads that build sessions inherit it.
    """
    j = jvm(sc)
    try:
        loader = j.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        if not loader.getClass().getName().startswith("org.apache.spark.util."):
            return f"the driver's class loader is {loader.getClass().getName()}, not Spark's"
        url = j.java.io.File(str(jar)).toURI().toURL()
        if url.toString() not in {u.toString() for u in loader.getURLs()}:
            loader.addURL(url)
        j.java.lang.Class.forName(class_name, False, loader)
    except Exception as e:  # py4j errors carry the Java trace
        return f"{class_name} does not load from {jar}: {str(e).splitlines()[0]}"
    return None


def new_shim_object(sc: SparkContext, name: str, jar: Path) -> Any:
    cls = shim_class(sc, name, jar)
    j, gw = jvm(sc), gateway(sc)
    return cls.getDeclaredConstructor(gw.new_array(j.java.lang.Class, 0)).newInstance(
        gw.new_array(j.java.lang.Object, 0)
    )


def error_text(e: BaseException) -> str:
    """What an error says in one line: the Java exception of a py4j error (its own first
    line, ``An error occurred while calling o42.repartition.``, says nothing), else the
    error's first line."""
    text = str(e)
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # the JVM is going: the Python text still says something
            pass
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith("Trace:"):  # py4j's own errors
        return lines[1]
    return lines[0] if lines else type(e).__name__
