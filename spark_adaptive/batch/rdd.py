"""RDD operations whose reduce side is sized by the bytes it reads (Flink's adaptive batch rule).

PySpark's shuffling operations take a partition count the user must guess.
These helpers take none:

1. the map side writes ``batch.max-parallelism`` partitions (Flink's
   subpartitions), at most one per map task
   (:func:`~spark_adaptive.core.batch.shuffle.subpartition_count`), with the
   same hashing as PySpark's own operation (:func:`partition_hash`), and
   for :func:`reduce_by_key` and :func:`combine_by_key` ``ceil(S / V)`` per map
   task, ``S`` being the source split size, so that their reduce tasks can read
   ``V`` (at most the cap below);
   :func:`reduce_by_key` and :func:`combine_by_key` combine locally first,
   the grouping ones do not (as Spark's own ``groupByKey``: lists shuffle no
   fewer bytes);
2. the map side runs at once, when the helper is called (as ``sortByKey``
   runs its sampling job at once), so that the bytes are known;
3. the reduce side gets ``p = ceil(bytes / V)`` tasks within the batch bounds
   (at least one per held task slot with ``batch.use-held-slots``, as long as
   each reads 1 MiB), each reading a contiguous range of partitions balanced
   by bytes (:func:`~spark_adaptive.core.batch.shuffle.plan_by_bytes`); the
   grouping ones (:func:`group_by_key`, the joins), whose tasks hold each key's
   values as Python lists, read at most ``spark.python.worker.memory / 16``
   per task (:func:`~spark_adaptive.batch.plans.for_grouping`), and the
   merging ones (:func:`reduce_by_key`, :func:`combine_by_key`), whose tasks
   merge combiners in a dict that gets slower per record as it grows, at most
   16 MiB (:func:`~spark_adaptive.batch.plans.for_merging`). For operations
   with a merge step (:func:`reduce_by_key`, :func:`group_by_key`,
   :func:`combine_by_key`) a skewed partition is split by map ranges; the
   tasks that read pieces feed a small second shuffle that merges the pieces
   of each key. :func:`join` and :func:`left_outer_join` shuffle each side on
   its own and split a skewed partition of a side that may be split into
   pieces, each joined with the other side's whole partition
   (:func:`~spark_adaptive.core.batch.join.plan_join`).

Sizes per partition come from Spark's map output statistics through the JVM
shim. Without the shim the helpers still work: ``p`` comes from the total
bytes, and Spark's ``coalesce`` groups whole partitions evenly by count; a
sort then reads one partition per task, since Spark may group non-adjacent
partitions; a join shuffles both sides as one, as PySpark does, and splits
nothing. This is logged once per application.

Results equal PySpark's own operations (values of :func:`group_by_key` are
``ResultIterable`` as there; the order of values within a group is not
defined, as in PySpark). :func:`decision_of` gives the plan behind a result.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from spark_adaptive.batch import plans
from spark_adaptive.core.batch.decider import format_bytes
from spark_adaptive.core.batch.ranges import Splitting
from spark_adaptive.core.batch.shuffle import ShufflePlan
from spark_adaptive.spark.shuffle import python_partitioned

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
C = TypeVar("C")

_decisions: weakref.WeakKeyDictionary[Any, ShufflePlan] = weakref.WeakKeyDictionary()


def decision_of(rdd: RDD[Any]) -> ShufflePlan | None:
    """The shuffle plan behind an RDD a helper returned (None for any other RDD)."""
    return _decisions.get(rdd)


def reduce_by_key(rdd: RDD[tuple[K, V]], func: Callable[[V, V], V], *,
                  partition_func: Callable[[Any], int] | None = None,
                  **limits: Any) -> RDD[tuple[K, V]]:
    """``rdd.reduceByKey(func)`` with the reduce side sized by bytes; see the module doc.

    ``limits`` override the settings for this call: ``avg_bytes_per_task``,
    ``min_parallelism``, ``max_parallelism``, ``skew_factor``, ``skew_threshold``.
    """
    return _combine(rdd, None, func, func, partition_func, "reduceByKey", limits)


def combine_by_key(rdd: RDD[tuple[K, V]], create: Callable[[V], C],
                   merge_value: Callable[[C, V], C], merge_combiners: Callable[[C, C], C], *,
                   partition_func: Callable[[Any], int] | None = None,
                   operation: str = "combineByKey", **limits: Any) -> RDD[tuple[K, C]]:
    """``rdd.combineByKey(create, merge_value, merge_combiners)``, sized by bytes.

    Every map task combines all its records, as PySpark's, and writes its shuffle
    itself (:func:`_combine_and_write`): one dict, then one pickled batch per
    partition, where PySpark combines in an ``ExternalMerger`` and then buckets and
    pickles the combined records again, in batches that start at ten records per
    partition. When the task's Python process passes ``spark.python.worker.memory``
    (x 0.9), the combined records so far go to the shuffle and combining starts again,
    where PySpark spills them to local disk and reads them back: the reduce side merges
    them either way. Reduce tasks merge those batches a list at a time
    (:func:`_merge_batches`). Both sides cost Python less per record than PySpark's
    (measurements: docs/benchmarks.md, RDD costs per record).

    Flink's adaptive local hash aggregate (stop combining once a sample of 500,000
    records is mostly distinct keys) was tried in benchmarks/batch.py's 1 GB
    ``reduceByKey``, whose map tasks see mostly distinct keys, and dropped: the map side
    saved less task time than the reduce side added, more bytes were shuffled and the job
    took longer. Merging on the reduce side costs Python as much per record as combining
    on the map side, so passing records through only moves the work and adds bytes
    (measurements: docs/benchmarks.md, RDD costs per record).
    """
    return _combine(rdd, create, merge_value, merge_combiners, partition_func, operation,
                    limits)


def _combine(rdd: RDD[Any], create: Callable[[Any], Any] | None,
             merge_value: Callable[[Any, Any], Any], merge_combiners: Callable[[Any, Any], Any],
             partition_func: Callable[[Any], int] | None, operation: str,
             limits: dict[str, Any]) -> RDD[Any]:
    """:func:`combine_by_key`; ``create`` None: a value is its own combiner."""
    from pyspark.shuffle import Aggregator

    sc = rdd.context
    memory, serializer = plans.memory_limit_mb(sc), sc.serializer
    agg = Aggregator(create or _itself, merge_value, merge_combiners)
    pickler = sc._unbatched_serializer

    def map_side(partitions: int, hashing: Callable[[Any], int]) -> _Writer:
        def write(_: int, records: Iterable[Any]) -> Iterator[bytes]:
            return _combine_and_write(records, create, merge_value, partitions, hashing,
                                      pickler, memory * 0.9)
        return write

    def merge(batches: Iterable[Any]) -> Iterator[Any]:
        return _merge_batches(batches, merge_combiners, agg, memory, serializer)

    def merge_pieces(partial: RDD[Any], partitions: int) -> RDD[Any]:
        # Each key of a split partition was reduced by several tasks: combine those partials.
        return partial.combineByKey(lambda c: c, merge_combiners, merge_combiners, partitions)

    return _reduce(rdd, operation, Splitting.MERGE, merge, merge_pieces, partition_func, limits,
                   merging=True, map_side=map_side)


def _itself(v: Any) -> Any:
    return v


_Writer = Callable[[int, Iterable[Any]], Iterator[bytes]]

#: Records between two looks at the Python process's memory on the map side of a combine.
MEMORY_CHECK_RECORDS = 10_000
#: Most records in one pickled batch of the shuffle: PySpark's reduce side unpickles a
#: batch at once, so a map task's partition of millions of records goes in several.
BATCH_RECORDS = 65_536


def _combine_and_write(records: Iterable[Any], create: Callable[[Any], Any] | None,
                       merge_value: Callable[[Any, Any], Any], partitions: int,
                       hashing: Callable[[Any], int], pickler: Any,
                       limit_mb: float) -> Iterator[bytes]:
    """One map task of :func:`combine_by_key`: combine by key, then write PySpark's shuffle
    records (a partition number from ``pack_long``, then a pickled list of ``(key,
    combiner)``), as ``RDD.partitionBy``'s ``add_shuffle_key`` does. ``create`` None: a
    value is its own combiner (:func:`reduce_by_key`), with no call per key. Past
    ``limit_mb`` of used memory the combined records are written and combining starts
    again (at most once per 5% more memory, as PySpark's ``ExternalMerger`` raises its
    limit after a spill)."""
    from pyspark.serializers import pack_long
    from pyspark.shuffle import get_used_memory

    def written(combined: dict[Any, Any]) -> Iterator[bytes]:
        buckets: list[list[tuple[Any, Any]]] = [[] for _ in range(partitions)]
        if hashing is partition_hash:  # inlined for the keys it hashes itself
            for kc in combined.items():
                k = kc[0]
                t = type(k)
                h = hash(k) if t is int or t is float else partition_hash(k)
                buckets[h % partitions].append(kc)
        else:
            for kc in combined.items():
                buckets[hashing(kc[0]) % partitions].append(kc)
        for p, items in enumerate(buckets):
            for start in range(0, len(items), BATCH_RECORDS):
                yield pack_long(p)  # type: ignore[no-untyped-call]
                yield pickler.dumps(items[start:start + BATCH_RECORDS])

    combined: dict[Any, Any] = {}
    it, missing = iter(records), object()
    while True:
        _fold(itertools.islice(it, MEMORY_CHECK_RECORDS), combined, create, merge_value)
        head = next(it, missing)
        if head is missing:
            break
        used = get_used_memory()
        if used > limit_mb:
            yield from written(combined)
            combined = {}
            limit_mb = max(limit_mb, used * 1.05)
        _fold((head,), combined, create, merge_value)
    yield from written(combined)


def _fold(records: Iterable[Any], combined: dict[Any, Any],
          create: Callable[[Any], Any] | None, merge: Callable[[Any, Any], Any]) -> None:
    """Merge ``(key, value)`` records into ``combined``; ``create`` None: values are their own
    combiners (one loop each, so the common case makes no call per new key)."""
    if create is None:
        for k, v in records:
            if k in combined:
                combined[k] = merge(combined[k], v)
            else:
                combined[k] = v
    else:
        for k, v in records:
            if k in combined:
                combined[k] = merge(combined[k], v)
            else:
                combined[k] = create(v)


def _merge_batches(batches: Iterable[list[tuple[Any, Any]]],
                   merge_combiners: Callable[[Any, Any], Any], agg: Any, memory_mb: float,
                   serializer: Any) -> Iterator[tuple[Any, Any]]:
    """The reduce side of :func:`combine_by_key`: merge the map side's pickled batches of
    ``(key, combiner)`` as they come, a list at a time, where PySpark flattens them into
    records for an ``ExternalMerger``. Once the process passes ``memory_mb`` (looked at
    after every :data:`MEMORY_CHECK_RECORDS` records), what is merged so far and the rest
    go to an ``ExternalMerger``, which spills to local disk as PySpark's reduce side does."""
    from pyspark.shuffle import ExternalMerger, get_used_memory

    combined: dict[Any, Any] = {}
    it = iter(batches)
    seen = 0
    for batch in it:
        _fold(batch, combined, None, merge_combiners)
        seen += len(batch)
        if seen >= MEMORY_CHECK_RECORDS:
            seen = 0
            if get_used_memory() > memory_mb:
                merger: Any = ExternalMerger(agg, memory_mb, serializer)
                merger.data = combined
                merger.mergeCombiners(itertools.chain.from_iterable(it))
                return merger.items()  # type: ignore[no-any-return]
    return iter(combined.items())


def partition_hash(key: Any) -> int:
    """PySpark's ``portable_hash`` (the helpers' default partitioning, as PySpark's own
    operations'), with its per-call environment check skipped for ``int`` and ``float``
    keys, whose hash needs no seed: the same partition for every key."""
    t = type(key)
    if t is int or t is float:
        return hash(key)
    return (_portable or _load_portable())(key)


_portable: Callable[[Any], int] | None = None


def _load_portable() -> Callable[[Any], int]:
    global _portable
    from pyspark.rdd import portable_hash

    _portable = portable_hash
    return _portable


def group_by_key(rdd: RDD[tuple[K, V]], *, partition_func: Callable[[Any], int] | None = None,
                 **limits: Any) -> RDD[tuple[K, Iterable[V]]]:
    """``rdd.groupByKey()`` with the reduce side sized by bytes; see the module doc."""
    return _group(rdd, "groupByKey", Splitting.MERGE, partition_func, limits)


def join(left: RDD[tuple[K, V]], right: RDD[tuple[K, Any]], *,
         partition_func: Callable[[Any], int] | None = None,
         **limits: Any) -> RDD[tuple[K, tuple[V, Any]]]:
    """``left.join(right)`` (inner) with the reduce side sized by bytes.

    Each side is shuffled on its own, with the same partition count and hash,
    and both map sides run at once. A partition skewed on one side is read in
    pieces of map ranges, each with the other side's whole partition; skewed
    on both, every left piece meets every right piece (Spark AQE's skew join).
    Without the shim both sides go through one shuffle, as in PySpark, and no
    partition is split.
    """
    return _join(left, right, "inner", partition_func, limits)


def left_outer_join(left: RDD[tuple[K, V]], right: RDD[tuple[K, Any]], *,
                    partition_func: Callable[[Any], int] | None = None,
                    **limits: Any) -> RDD[tuple[K, tuple[V, Any]]]:
    """``left.leftOuterJoin(right)`` with the reduce side sized by bytes, as :func:`join`.

    Only the left side is ever split: a left row read with a part of the right side
    could not tell whether another part matches it, so its ``(v, None)`` pair would be
    wrong or repeated.
    """
    return _join(left, right, "leftouter", partition_func, limits)


def sort_by_key(rdd: RDD[tuple[K, V]], ascending: bool = True,
                keyfunc: Callable[[Any], Any] = lambda k: k, **limits: Any) -> RDD[tuple[K, V]]:
    """``rdd.sortByKey(ascending, keyfunc=keyfunc)``: range-partitioned into max-parallelism
    partitions from a sample (like PySpark), read in byte-balanced contiguous ranges, which
    evens out what the sample got wrong."""
    from pyspark.shuffle import ExternalSorter

    sc = rdd.context
    settings = plans.settings_for(sc, limits)
    n = plans.subpartitions(rdd.getNumPartitions(), settings)
    memory, serializer = plans.memory_limit_mb(sc), rdd._jrdd_deserializer

    def sort_partition(it: Iterable[Any]) -> Iterator[Any]:
        ordered: Any = ExternalSorter(memory * 0.9, serializer).sorted
        return iter(ordered(it, key=lambda kv: keyfunc(kv[0]), reverse=not ascending))

    # Range bounds from a sample of about 20 keys per partition, as PySpark does.
    size = rdd.count()
    fraction = min(n * 20.0 / max(size, 1), 1.0)
    samples = sorted(keyfunc(k) for k in rdd.sample(False, fraction, 1).keys().collect())
    bounds = [samples[int(len(samples) * (i + 1) / n)] for i in range(n - 1)] if samples else []

    def range_partition(key: Any) -> int:
        p = bisect.bisect_left(bounds, keyfunc(key))
        return p if ascending else n - 1 - p

    return _reduce(rdd, "sortByKey", Splitting.NO, sort_partition, None, range_partition,
                   limits, keep_order=True)


# -- internals ---------------------------------------------------------------------------------
_JOIN_OPERATIONS = {"inner": "join", "leftouter": "leftOuterJoin"}


def _join(left: RDD[tuple[K, V]], right: RDD[tuple[K, Any]], how: str,
          partition_func: Callable[[Any], int] | None, limits: dict[str, Any]) -> RDD[Any]:
    """Tag each side's values (1 left, 2 right), shuffle, group each key's tagged values
    in one task, pair them. With the shim, the sides are two shuffles read per
    :func:`~spark_adaptive.core.batch.join.plan_join`; a task yields both sides' records
    of its slices one after another, which the tags tell apart."""
    sc, operation = left.context, _JOIN_OPERATIONS[how]
    settings = plans.settings_for(sc, limits)
    tagged = (left.mapValues(lambda v: (1, v)), right.mapValues(lambda w: (2, w)))
    outer_left = how == "leftouter"
    pairs = _pairs(outer_left)
    if not plans.can_plan_join(sc, settings):  # _group caps the volume for grouping itself
        grouped = _group(tagged[0].union(tagged[1]), operation, Splitting.NO, partition_func,
                         limits)
        out = grouped.flatMapValues(pairs)
        _remember(out, decision_of(grouped))
        return out
    settings = plans.for_grouping(sc, settings, operation)
    group, _ = _list_grouping(sc, tagged[0]._jrdd_deserializer)
    hashing = partition_func or partition_hash
    n = plans.subpartitions(left.getNumPartitions() + right.getNumPartitions(), settings)
    shuffled = [t.partitionBy(n, hashing) for t in tagged]
    planned = plans.plan_join_read(shuffled[0], shuffled[1], how, settings, operation=operation)
    budget = (plans.memory_limit_mb(sc) << 20) // HASH_SIDE_SHARE
    first = planned.first_side_bytes
    in_memory = tuple(b <= budget for b in first) if first is not None else ()
    plans.decision_log.info(
        "batch: %s (%s): %d of %d task(s) keep their smaller side in memory (at most %s of "
        "shuffle bytes, spark.python.worker.memory / %d) and stream the other past it; the "
        "rest group both sides", operation, planned.plan_id, sum(in_memory),
        planned.plan.parallelism, format_bytes(budget), HASH_SIDE_SHARE)

    def join_task(index: int, records: Iterable[Any]) -> Iterator[Any]:
        if index < len(in_memory) and in_memory[index]:
            return _hash_join(records, outer_left)
        return ((k, pair) for k, values in group(records) for pair in pairs(values))

    out = planned.read().mapPartitionsWithIndex(join_task)
    _remember(out, planned.plan)
    return out


#: A join task keeps its smaller side in memory by key and streams the other past it when
#: that side is at most ``spark.python.worker.memory / 64`` of shuffle bytes (8 MiB at
#: PySpark's 512m; as Python objects it takes several times that, and nothing spills);
#: otherwise it groups both sides as PySpark's join does (``ExternalGroupBy``, which spills).
HASH_SIDE_SHARE = 64


def _hash_join(records: Iterable[Any], outer_left: bool) -> Iterator[Any]:
    """One join task whose records are one side's, then the other's: the first side by key
    in memory, the second streamed past it. A skewed key of the streamed side costs no
    memory, where grouping holds all its values at once."""
    it = iter(records)
    table: dict[Any, list[Any]] = {}
    kept = 0  # the tag (1 left, 2 right) of the side held in memory
    head: list[tuple[Any, Any]] = []
    for k, (tag, value) in it:
        if not kept:
            kept = tag
        elif tag != kept:
            head.append((k, value))
            break
        held = table.get(k)
        if held is None:
            table[k] = [value]
        else:
            held.append(value)
    streamed = itertools.chain(head, ((k, value) for k, (_, value) in it))
    if kept == 2:  # right in memory: each left value meets its key's right values
        for k, v in streamed:
            ws = table.get(k)
            if ws:
                for w in ws:
                    yield k, (v, w)
            elif outer_left:
                yield k, (v, None)
        return
    matched: set[Any] = set()
    for k, w in streamed:  # left in memory (or nothing at all)
        vs = table.get(k)
        if vs:
            for v in vs:
                yield k, (v, w)
            if outer_left:
                matched.add(k)
    if outer_left:
        for k, vs in table.items():
            if k not in matched:
                for v in vs:
                    yield k, (v, None)


def _pairs(outer_left: bool) -> Callable[[Iterable[tuple[int, Any]]], Iterator[tuple[Any, Any]]]:
    """A key's tagged values to its joined pairs (PySpark's ``python_join`` dispatch)."""

    def pairs(values: Iterable[tuple[int, Any]]) -> Iterator[tuple[Any, Any]]:
        lefts: list[Any] = []
        rights: list[Any] = []
        for side, value in values:
            (lefts if side == 1 else rights).append(value)
        if outer_left and not rights:
            rights.append(None)
        return ((v, w) for v in lefts for w in rights)

    return pairs


_Step = Callable[[Iterable[Any]], Iterator[Any]]


def _list_grouping(sc: SparkContext, serializer: Any
                   ) -> tuple[_Step, Callable[[list[Any], list[Any]], list[Any]]]:
    """The reduce side of a grouping: a task's ``(key, value)`` records to ``(key, list)``
    (PySpark's ``ExternalGroupBy``, which spills past ``spark.python.worker.memory`` and
    groups even one huge key by sorting), and the merge of two lists.

    Nothing is combined on the map side, as in Spark's own ``groupByKey`` and ``cogroup``
    (``mapSideCombine = false``): lists of values shuffle no fewer bytes than the values,
    and building them costs a hash map of every value in the map task. PySpark's
    ``groupByKey`` builds them; in benchmarks/batch.py a skewed join's map tasks spilled
    them and took far more time per byte than the same tasks without them (measurements:
    docs/benchmarks.md, RDD helpers: partitions per map task and task sizes)."""
    from pyspark.shuffle import Aggregator, ExternalGroupBy

    memory = plans.memory_limit_mb(sc)

    def create(x: Any) -> list[Any]:
        return [x]

    def append(xs: list[Any], x: Any) -> list[Any]:
        xs.append(x)
        return xs

    def extend(a: list[Any], b: list[Any]) -> list[Any]:
        a.extend(b)
        return a

    agg: Any = Aggregator(create, append, extend)

    def group(it: Iterable[Any]) -> Iterator[Any]:
        merger: Any = ExternalGroupBy(agg, memory, serializer)
        merger.mergeValues(it)
        return merger.items()  # type: ignore[no-any-return]

    return group, extend


def _group(rdd: RDD[tuple[K, V]], operation: str, splitting: Splitting,
           partition_func: Callable[[Any], int] | None, limits: dict[str, Any]) -> RDD[Any]:
    from pyspark.resultiterable import ResultIterable

    group, extend = _list_grouping(rdd.context, rdd._jrdd_deserializer)

    def merge_pieces(partial: RDD[Any], partitions: int) -> RDD[Any]:
        return partial.combineByKey(list, extend, extend, partitions)

    grouped = _reduce(rdd, operation, splitting, group, merge_pieces, partition_func, limits,
                      grouping=True)
    out = grouped.mapValues(ResultIterable)
    _remember(out, decision_of(grouped))
    return out


def _reduce(rdd: RDD[Any], operation: str, splitting: Splitting,
            reduce_partition: Callable[[Iterable[Any]], Iterator[Any]],
            merge_pieces: Callable[[RDD[Any], int], RDD[Any]] | None,
            partition_func: Callable[[Any], int] | None, limits: dict[str, Any],
            keep_order: bool = False, grouping: bool = False, merging: bool = False,
            map_side: Callable[[int, Callable[[Any], int]], _Writer] | None = None) -> RDD[Any]:
    """Shuffle ``rdd`` into max-parallelism partitions, plan the read, reduce each task.

    ``grouping``: tasks hold their keys' values as lists (:func:`plans.for_grouping`);
    ``merging``: tasks merge combiners in a dict (:func:`plans.for_merging`).
    ``map_side(partitions, hashing)``: the writer of each map task's shuffle records, in
    place of ``RDD.partitionBy``'s (:func:`_written_shuffle`)."""
    settings = plans.settings_for(rdd.context, limits)
    per_map_task = 1
    if grouping:
        settings = plans.for_grouping(rdd.context, settings, operation)
    elif merging:
        settings, per_map_task = plans.for_merging(rdd.context, settings, operation)
    partitions = plans.subpartitions(rdd.getNumPartitions(), settings, per_map_task)
    hashing = partition_func or partition_hash
    shuffled = (rdd.partitionBy(partitions, hashing) if map_side is None
                else _written_shuffle(rdd, partitions, hashing, map_side(partitions, hashing)))
    planned = plans.plan_read(shuffled, operation, splitting, settings, keep_order=keep_order)
    plan = planned.plan
    pieces = plan.piece_tasks if merge_pieces is not None else ()
    if not pieces:
        out = planned.read().mapPartitions(reduce_partition, preservesPartitioning=False)
    else:
        whole = [i for i in range(plan.parallelism) if i not in set(pieces)]
        partial = planned.read(list(pieces)).mapPartitions(reduce_partition)
        assert merge_pieces is not None
        merged = merge_pieces(partial, max(1, len(plan.skewed)))
        out = merged if not whole else \
            planned.read(whole).mapPartitions(reduce_partition).union(merged)
    _remember(out, plan)
    return out


def _written_shuffle(rdd: RDD[Any], partitions: int, hashing: Callable[[Any], int],
                     write: _Writer) -> RDD[Any]:
    """``rdd.partitionBy(partitions, hashing)`` whose map tasks write their shuffle records
    with ``write(split, records)`` (:func:`~spark_adaptive.spark.shuffle.python_partitioned`:
    PySpark's own wiring and partitioner). Its elements are the pickled batches themselves
    (lists of records), which the reduce side merges a list at a time
    (:func:`_merge_batches`), where ``partitionBy``'s result yields their records one by
    one."""
    keyed = rdd.mapPartitionsWithIndex(write, preservesPartitioning=True)
    return python_partitioned(keyed, partitions, hashing)


def _remember(rdd: RDD[Any], plan: ShufflePlan | None) -> None:
    if plan is not None:
        _decisions[rdd] = plan
