"""The JVM side of an RDD shuffle for the batch helpers: run the map side, read sizes, read ranges.

Two paths, chosen once per SparkContext:

* **shim** (:class:`ShimShuffles`): ``io.sparkadaptive.shim.ShuffleSizes`` runs
  the map side (``SparkContext.submitMapStage``, what Spark SQL's adaptive
  execution uses) and returns the bytes each map task wrote for each reduce
  partition, from the driver's ``MapOutputTrackerMaster``;
  ``RangeShuffleRDD`` then reads the shuffle (or a join's two shuffles, whose
  map sides run at once) in the planned ranges and pieces.
  Its classes run in the executors too, so the jar is added to the
  application (``SparkContext.addJar``) the first time.
* **fallback** (:class:`SparkShuffles`, no shim jar): the same map stage
  through py4j, but only the total bytes are read (``MapOutputStatistics``);
  the caller then coalesces with Spark's own ``RDD.coalesce``, which groups
  whole partitions evenly by count (by executor locality once the map outputs
  exist, so not necessarily adjacent ones).

Only JDK and Spark objects cross into the shim's classes; JVM handles stay in
this module (``_j`` names) and leave it as plain Python values or PySpark RDDs.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.batch.shuffle import ShufflePlan, ShuffleSizes, parse_sizes
from spark_adaptive.errors import ShimNotAvailableError
from spark_adaptive.spark.jvm import gateway, jvm, seq_to_list, shim_class
from spark_adaptive.spark.lines import CHUNK_BYTES, LineChunks

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

log = logging.getLogger(__name__)

_lock = threading.Lock()
#: Each SparkContext's instances, by jar. Held weakly by the context, and a stopped context's
#: are dropped at the next look-up: a context that is gone keeps nothing alive here.
_instances: weakref.WeakKeyDictionary[SparkContext, dict[str, ShimShuffles]] = (
    weakref.WeakKeyDictionary())


def shuffle_dependency(rdd: RDD[Any]) -> Any:
    """The ShuffleDependency (JVM handle) a PySpark ``partitionBy`` result reads: a lineage walk."""
    sc = rdd.context
    shuffle_cls = jvm(sc).java.lang.Class.forName("org.apache.spark.ShuffleDependency")
    todo, seen = [rdd._jrdd.rdd()], set()
    while todo:
        j = todo.pop()
        if j.id() in seen:
            continue
        seen.add(j.id())
        for dep in seq_to_list(j.dependencies()):
            if shuffle_cls.isInstance(dep):
                return dep
            todo.append(dep.rdd())
    raise ValueError(f"{rdd} reads no shuffle")


def python_partitioned(keyed: RDD[Any], partitions: int, hashing: Any) -> RDD[Any]:
    """``keyed``'s records shuffled into ``partitions`` as PySpark's ``partitionBy`` does:
    ``keyed`` yields what PySpark's own map side yields (``pack_long(partition)`` and a
    pickled batch, alternately), which goes through a ``PairwiseRDD`` and a
    ``PythonPartitioner`` keyed by ``id(hashing)``; the result's elements are the pickled
    batches, and it carries PySpark's ``Partitioner(partitions, hashing)``."""
    from pyspark.rdd import RDD as PyRDD
    from pyspark.rdd import Partitioner
    from pyspark.traceback_utils import SCCallSiteSync

    sc = keyed.context
    keyed._bypass_serializer = True  # type: ignore[attr-defined]
    j = jvm(sc)
    with SCCallSiteSync(sc):  # type: ignore[no-untyped-call]
        pairs = j.PairwiseRDD(keyed._jrdd.rdd()).asJavaPairRDD()
        partitioner = j.PythonPartitioner(partitions, id(hashing))
    jrdd = j.PythonRDD.valueOfPair(pairs.partitionBy(partitioner))
    out: RDD[Any] = PyRDD(jrdd, sc, sc._unbatched_serializer)
    out.partitioner = Partitioner(partitions, hashing)
    return out


class ShimShuffles:
    """Shuffle sizes and range reads through the JVM shim."""

    def __init__(self, sc: SparkContext, jar: Path) -> None:
        self._sc_ref = weakref.ref(sc)  # the instances of a context are kept by the context
        self._jsizes = shim_class(sc, "ShuffleSizes", jar)
        self._jranges = shim_class(sc, "RangeShuffleRDD", jar)
        self._jinputs = shim_class(sc, "InputSizes", jar)
        self._jchunks = shim_class(sc, "LineChunksRDD", jar)
        self._jar = jar
        self._jar_shipped = False
        self._methods: dict[tuple[str, str, int], Any] = {}

    @property
    def _sc(self) -> SparkContext:
        sc = self._sc_ref()
        if sc is None:
            raise ShimNotAvailableError("the SparkContext of these shim shuffles is gone")
        return sc

    def run_map_stage(self, jdep: Any) -> int:
        """Run the map side of ``jdep`` (Spark skips it if done); returns the bytes written."""
        return int(self._static(self._jsizes, "runMapStage", self._sc._jsc.sc(), jdep))

    def run_map_stages(self, jdeps: Sequence[Any]) -> list[int]:
        """Run the map sides of ``jdeps`` at once; returns the bytes each wrote."""
        totals = self._static(self._jsizes, "runMapStages", self._sc._jsc.sc(),
                              self._deps_array(jdeps))
        return [int(t) for t in totals]

    def split_bytes(self, rdd: Any) -> int:
        """The bytes a PySpark RDD made by ``sc.textFile`` reads: its ``HadoopRDD``'s
        splits, listed once and kept by that RDD for the job (one py4j call). Raises
        py4j's error when the path matches nothing."""
        return int(self._static(self._jinputs, "splitBytes", rdd._jrdd.rdd()))

    def line_chunks(self, rdd: RDD[Any], use_unicode: bool) -> RDD[Any]:
        """The lines of ``rdd`` (made by ``sc.textFile``, same splits) sent to Python in
        chunks (:mod:`spark_adaptive.spark.lines`). Raises py4j's error when ``rdd`` is
        not ``sc.textFile``'s map over a ``HadoopRDD``."""
        from pyspark import RDD as PyRDD

        self._ship_jar()
        jrdd = self._static(self._jchunks, "of", rdd._jrdd.rdd(), CHUNK_BYTES)
        return PyRDD(jrdd, self._sc, LineChunks(use_unicode))

    def sizes(self, jdep: Any) -> ShuffleSizes:
        """Bytes per (partition, map task) of the finished shuffle ``jdep``.

        A map side without tasks (an empty input) has no map output to ask about:
        every partition's row is empty. Raises py4j's error when Spark no longer
        has every map output (an executor was lost since): the caller falls back
        to even ranges.
        """
        partitions = int(jdep.partitioner().numPartitions())
        if len(jdep.rdd().partitions()) == 0:
            return ShuffleSizes(((),) * partitions)
        text = self._static(self._jsizes, "sizes", jdep.shuffleId(), partitions)
        return parse_sizes(str(text))

    def read(self, shuffled: RDD[Any], jdeps: Sequence[Any], plan: ShufflePlan,
             tasks: list[int] | None = None) -> RDD[Any]:
        """A PySpark RDD whose task ``i`` reads the slices of ``plan``'s task ``tasks[i]``.

        ``jdeps`` are the shuffles the plan's slices number (one, or a join's two);
        ``shuffled`` gives the deserializer, which they all share.
        """
        from pyspark import RDD as PyRDD

        self._ship_jar()
        if len(jdeps) == 1:
            jrdd = self._static(self._jranges, "of", jdeps[0], plan.spec(tasks))
        else:
            jrdd = self._static(self._jranges, "ofShuffles", self._deps_array(jdeps),
                                plan.spec(tasks))
        return PyRDD(jrdd, self._sc, shuffled._jrdd_deserializer)

    def _deps_array(self, jdeps: Sequence[Any]) -> Any:
        j = jvm(self._sc)
        arr = gateway(self._sc).new_array(j.org.apache.spark.ShuffleDependency, len(jdeps))
        for i, d in enumerate(jdeps):
            arr[i] = d
        return arr

    def _ship_jar(self) -> None:
        # Executors deserialize RangeShuffleRDD in every task: they need the jar too (once per
        # context: this instance is the context's for this jar).
        with _lock:
            if not self._jar_shipped:
                self._sc._jsc.sc().addJar(str(self._jar))
                self._jar_shipped = True

    def _static(self, jcls: Any, name: str, *args: Any) -> Any:
        # Classes from the shim's own class loader are not visible to py4j by name, so
        # their static methods are called by reflection.
        key = (str(jcls.getName()), name, len(args))
        method = self._methods.get(key)
        if method is None:
            found = [m for m in jcls.getMethods()
                     if m.getName() == name and len(m.getParameterTypes()) == len(args)]
            if not found:
                raise ShimNotAvailableError(f"the shim has no {key[0]}.{name}; rebuild it")
            method = self._methods[key] = found[0]
        jargs = gateway(self._sc).new_array(jvm(self._sc).java.lang.Object, len(args))
        for i, a in enumerate(args):
            jargs[i] = a
        return method.invoke(None, jargs)


class SparkShuffles:
    """The fallback without the shim: Spark's own calls only."""

    def __init__(self, sc: SparkContext) -> None:
        self._sc = sc

    def run_map_stage_total(self, jdep: Any) -> int:
        """Run the map side of ``jdep`` (Spark skips it if done); returns the bytes written."""
        if len(jdep.rdd().partitions()) == 0:
            return 0
        sizes = self._sc._jsc.sc().submitMapStage(jdep).get().bytesByPartitionId()
        # One py4j call per partition: a few hundred at most (batch.max-parallelism).
        return sum(int(sizes[i]) for i in range(len(sizes)))


def shim_shuffles(sc: SparkContext, jar: Path | None) -> ShimShuffles | None:
    """The shim path for ``sc``, or None (logged by the caller) when the jar is missing or bad.

    One instance per SparkContext and jar: it keeps the reflected Java methods, whose
    look-up over py4j is a sizeable part of a small helper call (measurements:
    docs/benchmarks.md, RDD helpers: partitions per map task and task sizes). It lives
    as long as its context runs: a stopped context's are dropped here, and a context
    that is gone takes its own along."""
    if jar is None:
        return None
    with _lock:
        for stopped in [c for c in _instances if c is not sc and _stopped(c)]:
            del _instances[stopped]
        cached = _instances.get(sc, {}).get(str(jar))
    if cached is not None:
        return cached
    try:
        made = ShimShuffles(sc, jar)
    except ShimNotAvailableError as e:
        log.debug("shim shuffles unavailable: %s", e)
        return None
    with _lock:
        return _instances.setdefault(sc, {}).setdefault(str(jar), made)


def _stopped(sc: SparkContext) -> bool:
    """Whether ``sc`` has stopped (PySpark lets go of its JVM context then)."""
    return getattr(sc, "_jsc", None) is None
