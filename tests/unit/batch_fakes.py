"""Hand-written stand-ins for the driver JVM objects the batch wing's Spark side talks to.

Only what the code under test calls, shaped as py4j shows it: a ``SparkConf`` with
``contains``/``get``/``set``/``getAllWithPrefix``/``toDebugString``,
``JavaSparkContext.getPersistentRDDs`` as a Java map, the default session's runtime and
shared-state confs, and JVM RDDs with ``partitions``/``dependencies``/
``preferredLocations``. No Spark is started.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class Tuple2:
    """A Scala pair as py4j shows it."""

    def __init__(self, first: str, second: str) -> None:
        self.first, self.second = first, second

    def _1(self) -> str:
        return self.first

    def _2(self) -> str:
        return self.second


#: Spark's default ``spark.redaction.regex``.
REDACTION = re.compile(r"(?i)secret|password|token|access[.]?key")


class LiveConf:
    """The SparkContext's own ``SparkConf`` (``sc._jsc.sc().conf()``); its debug string masks
    what ``spark.redaction.regex`` matches, as Spark's does."""

    def __init__(self, entries: Mapping[str, str] | None = None) -> None:
        self.entries = dict(entries or {})

    def contains(self, key: str) -> bool:
        return key in self.entries

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.entries.get(key, default)

    def set(self, key: str, value: str) -> LiveConf:
        self.entries[key] = value
        return self

    def getAllWithPrefix(self, prefix: str) -> list[Tuple2]:
        return [Tuple2(k[len(prefix):], v) for k, v in self.entries.items()
                if k.startswith(prefix)]

    def toDebugString(self) -> str:
        return "\n".join(f"{k}=*********(redacted)" if REDACTION.search(k) or
                         REDACTION.search(v) else f"{k}={v}" for k, v in self.entries.items())


class JavaMap:
    def __init__(self, entries: Mapping[Any, Any]) -> None:
        self._entries = dict(entries)

    def size(self) -> int:
        return len(self._entries)


class FakeSession:
    """A default SparkSession: its runtime conf (``spark.conf``) and shared state's conf."""

    def __init__(self, runtime: Mapping[str, str] | None = None) -> None:
        self.runtime = LiveConf(runtime)
        self.shared = LiveConf()

    def conf(self) -> LiveConf:
        return self.runtime

    def sharedState(self) -> Any:
        shared = self.shared

        class SharedState:
            def conf(self) -> LiveConf:
                return shared

        return SharedState()

    def sparkContext(self) -> Any:
        class Context:
            def isStopped(self) -> bool:
                return False

        return Context()


class _Option:
    def __init__(self, value: Any) -> None:
        self._value = value

    def isDefined(self) -> bool:
        return self._value is not None

    def get(self) -> Any:
        return self._value


class FakeJvm:
    """``sc._jvm``: only the classic SparkSession class and its default session."""

    def __init__(self, session: FakeSession | None) -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:
        if name != "org.apache.spark.sql.classic.SparkSession":
            raise AttributeError(name)
        session = self._session

        class SparkSessionClass:
            @staticmethod
            def getDefaultSession() -> _Option:
                return _Option(session)

        return SparkSessionClass


class FakeJavaSparkContext:
    """``sc._jsc``; ``sc()`` (the Scala SparkContext) is itself, for ``conf()``."""

    def __init__(self, conf: LiveConf) -> None:
        self._conf = conf
        self.persisted: dict[int, str] = {}
        self.persisted_error: Exception | None = None

    def sc(self) -> FakeJavaSparkContext:
        return self

    def conf(self) -> LiveConf:
        return self._conf

    def getPersistentRDDs(self) -> JavaMap:
        if self.persisted_error is not None:
            raise self.persisted_error
        return JavaMap(self.persisted)


class PySparkConf:
    """PySpark's ``sc._conf``."""

    def __init__(self, live: LiveConf) -> None:
        self._live = live

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._live.get(key, default)


class FakeSC:
    """A SparkContext as the batch wing's Spark side uses it."""

    defaultParallelism = 4
    master = "spark://fake:7077"

    def __init__(self, conf: Mapping[str, str] | None = None,
                 session: FakeSession | None = None) -> None:
        self.live = LiveConf(conf)
        self._jsc = FakeJavaSparkContext(self.live)
        self._jvm = FakeJvm(session)
        self._conf = PySparkConf(self.live)


# -- JVM RDDs -----------------------------------------------------------------------
class ScalaSeq:
    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def length(self) -> int:
        return len(self._items)

    def apply(self, i: int) -> Any:
        return self._items[i]

    def isEmpty(self) -> bool:
        return not self._items


class Dependency:
    def __init__(self, rdd: JvmRDD, kind: str = "org.apache.spark.OneToOneDependency") -> None:
        self._rdd, self._kind = rdd, kind

    def rdd(self) -> JvmRDD:
        return self._rdd

    def getClass(self) -> Any:
        kind = self._kind

        class Class:
            def getName(self) -> str:
                return kind

        return Class()


class JvmRDD:
    """An RDD with ``len(hosts)`` partitions, partition ``i`` preferring ``hosts[i]``."""

    def __init__(self, hosts: list[list[str]], parents: list[Dependency] | None = None) -> None:
        self.hosts = hosts
        self.parents = parents or []
        self.looked_at = 0

    def partitions(self) -> list[int]:
        return list(range(len(self.hosts)))

    def dependencies(self) -> ScalaSeq:
        return ScalaSeq(self.parents)

    def preferredLocations(self, split: int) -> ScalaSeq:
        self.looked_at += 1
        return ScalaSeq(self.hosts[split])


class PyRDD:
    """A PySpark RDD over ``jrdd``: ``_jrdd.rdd()``, ``getNumPartitions``, ``coalesce``."""

    def __init__(self, jrdd: JvmRDD) -> None:
        self.jrdd = jrdd
        self.coalesced_to: int | None = None

        class JavaRDD:
            def rdd(self) -> JvmRDD:
                return jrdd

        self._jrdd = JavaRDD()

    def getNumPartitions(self) -> int:
        return len(self.jrdd.hosts)

    def coalesce(self, n: int) -> PyRDD:
        self.coalesced_to = n
        return self

    def setName(self, name: str) -> PyRDD:
        self.name = name
        return self
