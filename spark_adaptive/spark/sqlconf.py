"""Spark SQL settings where sessions read them: the SparkContext's live conf, the shared
state of the default session, and its runtime conf (py4j).

:mod:`spark_adaptive.batch.sql` decides what to set; this module only reads and writes
it in the driver JVM.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

AQE_ENABLED = "spark.sql.adaptive.enabled"


def byte_string_as_bytes(sc: SparkContext, text: str) -> int:
    """A size written as Spark writes it (``128m``, ``1g``), read by Spark's own parser;
    raises ``ValueError`` when Spark does not take it."""
    jvm: Any = sc._jvm
    try:
        return int(jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(text))
    except Exception as e:  # py4j's error carries Spark's NumberFormatException
        raise ValueError(f"{text!r} is not a size") from e


def explicit_confs(sc: SparkContext, keys: Iterable[str]) -> dict[str, str]:
    """Those of ``keys`` the app set itself, with its values: in the SparkContext's live conf
    (the SparkConf the app started with: its own ``SparkConf`` or session builder,
    ``spark-submit --conf``, ``spark-defaults.conf``; Spark puts no SQL default there), or
    in the runtime conf of the default session, if one exists (``spark.conf.set``). Read
    before spark-adaptive sets anything, so none of them is spark-adaptive's own."""
    live = sc._jsc.sc().conf()
    wanted = list(dict.fromkeys(keys))
    found = {k: str(live.get(k)) for k in wanted if live.contains(k)}
    session = _default_session(sc)
    if session is not None:
        runtime = session.conf()
        for k in wanted:
            if k not in found:
                value = runtime.get(k, None)  # None: unset (a SQL default is not "set")
                if value is not None:
                    found[k] = str(value)
    return found


@dataclass(frozen=True)
class Applied:
    """What :func:`set_everywhere` did: the keys it left as the app had set them (with the
    app's values), whether adaptive query execution is on where sessions read it, whether a
    session existed already."""

    kept: dict[str, str]
    aqe_on: bool
    session_exists: bool


def set_everywhere(sc: SparkContext, confs: Mapping[str, str]) -> Applied:
    """Set ``confs`` in the SparkContext's live conf (sessions created later copy it) and in
    the default session's shared state and runtime conf, if one exists already, except the
    keys the app set itself (:func:`explicit_confs`), which stay as they are everywhere."""
    kept = explicit_confs(sc, confs)
    live = sc._jsc.sc().conf()
    for k, v in confs.items():
        if k not in kept:
            live.set(k, v)
    session = _default_session(sc)
    aqe_on = str(live.get(AQE_ENABLED, "true")).lower() == "true"
    if session is not None:
        shared = session.sharedState().conf()
        runtime = session.conf()
        for k, v in confs.items():
            if k not in kept:
                shared.set(k, v)
                runtime.set(k, v)
        aqe_on = str(runtime.get(AQE_ENABLED, "true")).lower() == "true"
    return Applied(kept, aqe_on, session is not None)


def set_live(sc: SparkContext, key: str, value: str) -> None:
    """Set ``key`` in the SparkContext's live conf, which sessions created from now on copy."""
    sc._jsc.sc().conf().set(key, value)


def mark_own_initial_partition_num(sc: SparkContext, rule_class: str, n: int) -> str | None:
    """Tell the shim's query-stage rule (``rule_class``, as Spark's class loader loads it for
    ``spark.sql.extensions``) that spark-adaptive, not the app, set ``initialPartitionNum``
    to ``n`` for the sessions of ``sc`` (its static ``setOwnInitialPartitionNum``). None when
    done, else why not."""
    j: Any = sc._jvm
    gw: Any = sc._gateway
    try:
        loader = j.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        rule = j.java.lang.Class.forName(rule_class, True, loader)
        types = gw.new_array(j.java.lang.Class, 2)
        types[0] = j.java.lang.Class.forName("org.apache.spark.SparkContext")
        types[1] = j.java.lang.Integer.TYPE
        args = gw.new_array(j.java.lang.Object, 2)
        args[0] = sc._jsc.sc()
        args[1] = j.java.lang.Integer.valueOf(n)
        rule.getMethod("setOwnInitialPartitionNum", types).invoke(None, args)
    except Exception as e:  # py4j errors carry the Java trace
        text = str(e).strip()
        return f"{rule_class}.setOwnInitialPartitionNum: {text.splitlines()[0] if text else e!r}"
    return None


def append_to_list_conf(sc: SparkContext, key: str, value: str) -> None:
    """Add ``value`` to the comma-separated list ``key`` of the live conf, once."""
    live = sc._jsc.sc().conf()
    named = [c.strip() for c in str(live.get(key, "")).split(",") if c.strip()]
    if value not in named:
        live.set(key, ",".join([*named, value]))


def _default_session(sc: SparkContext) -> Any:
    """The JVM's default SparkSession of ``sc``, or None (the zero-code path: not created yet)."""
    try:
        cls = getattr(sc._jvm, "org.apache.spark.sql.classic.SparkSession")
        opt = cls.getDefaultSession()
        if opt.isDefined() and not opt.get().sparkContext().isStopped():
            return opt.get()
    except Exception as e:  # a pyspark without the classic session class
        log.debug("no default SparkSession to steer: %s", e)
    return None
