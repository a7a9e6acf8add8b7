"""Which reduce task reads which shuffle partitions: byte-balanced contiguous ranges.

A shuffle is written with many partitions (``batch.max-parallelism``, Flink's
*subpartitions*); once its map stage has finished and the bytes of every
partition are known, the reduce stage reads them in contiguous ranges, one
range per task. This module decides the ranges (Flink's flexible subpartition
mapping with auto-rebalancing); :func:`split_skewed` first splits skewed
partitions into slices by map-task ranges, then packs the slices the same way.

Theory of operation (:func:`balanced_ranges`):

1. **Greedy packer** at limit ``V`` (``avg_bytes_per_task``): walk the
   partitions left to right and close the current range as soon as adding the
   next partition would take it over the limit. Every range holds at least one
   partition, so a partition bigger than the limit sits alone.
2. If the count falls outside the legal bounds ``[min(min_p, n), min(max_p,
   n)]`` (a task reads at least one partition), **bisect the limit**: the
   greedy count never grows with the limit, so bisection finds the legal count
   closest to the greedy one, then the smallest limit still yielding it (the
   smaller the limit, the more even the ranges). The search goes down to a
   limit of 0, below Flink's floor of the largest unit: the largest unit sits
   alone either way, and a lower floor reaches a legal count more often.
3. If no limit yields a legal count (counts can jump over the bounds; empty
   partitions merge at any limit), **split evenly by count**, ``start_i = i *
   n // p``, with ``p`` from :func:`~.batch_decider.decide_parallelism`.

Guarantees (tested): ranges are half-open, contiguous, non-overlapping and
cover ``[0, n)`` exactly once; their count lies within the legal bounds. After
steps 1 and 2, with ``limit`` the packer's limit: a range holds more than
``limit`` bytes only if it is a single partition, and a range plus the first
partition of the next exceeds ``limit`` (hence ``count <= 2 * total / limit +
1``). After step 3 range lengths differ by at most one; bytes are not bounded.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import accumulate
from types import MappingProxyType

from spark_adaptive.core.batch.decider import decide_parallelism, format_bytes

#: ``RangeAssignment.method`` values.
GREEDY, BISECTION, EVEN = "greedy", "bisection", "even"
#: A partition is skewed above max(median x factor, threshold); Flink's internal
#: defaults (Spark AQE uses 5.0 and the same 256 MiB), for direct callers: the
#: ``batch.skewed-threshold`` setting defaults to the volume per task instead.
DEFAULT_SKEW_FACTOR = 4.0
DEFAULT_SKEW_THRESHOLD = 256 << 20


@dataclass(frozen=True)
class RangeAssignment:
    """Contiguous half-open ranges ``[start, end)`` over ``n`` units, one per task.

    Units are shuffle partitions, or slices of them after a skew split.
    ``bytes_per_range`` is ``None`` only from :func:`even_ranges`, which has no
    sizes. ``limit`` is the byte limit the greedy packer used (``None`` for an
    even split); ``method`` is ``"greedy"``, ``"bisection"`` or ``"even"``.
    """

    ranges: tuple[tuple[int, int], ...]
    bytes_per_range: tuple[int, ...] | None
    parallelism: int
    method: str
    limit: int | None
    reason: str

    @property
    def max_range_bytes(self) -> int:
        return max(self.bytes_per_range or (0,))


def greedy_ranges(sizes: Sequence[int], limit: int) -> tuple[tuple[int, int], ...]:
    """Step 1 alone: the greedy ranges of ``sizes`` at byte limit ``limit`` (>= 0)."""
    _check_sizes(sizes)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return _greedy(_prefix(sizes), limit)


def even_ranges(n: int, p: int) -> RangeAssignment:
    """``n`` units in ``min(p, n)`` ranges of equal count (lengths differ by at most 1).

    The fallback when partition sizes are unknown (no JVM shim) and step 3 of
    :func:`balanced_ranges`. Raises ``ValueError`` if ``n < 0`` or ``p < 1``.
    """
    if n < 0 or p < 1:
        raise ValueError(f"need n >= 0 and p >= 1, got n={n}, p={p}")
    q = min(p, n)
    ranges = tuple((i * n // q, (i + 1) * n // q) for i in range(q))
    note = f", lowered from {p} because there are only {n} partitions" if q < p else ""
    return RangeAssignment(
        ranges, None, q, EVEN, None,
        f"{n} partitions split evenly by count into {q} ranges{note}")


def balanced_ranges(
    sizes: Sequence[int],
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    unit: str = "partition",
) -> RangeAssignment:
    """Byte-balanced contiguous ranges over ``sizes`` (bytes per unit, >= 0).

    See the module docstring for the algorithm and its guarantees. ``unit``
    only names the units in the reason. An empty ``sizes`` yields no ranges.
    Raises ``ValueError`` on negative sizes or invalid bounds.
    """
    _check_sizes(sizes)
    if avg_bytes_per_task < 1 or min_p < 1 or min_p > max_p:
        raise ValueError(f"need avg_bytes_per_task >= 1 and 1 <= min_p <= max_p, got "
                         f"{avg_bytes_per_task}, [{min_p}, {max_p}]")
    n = len(sizes)
    if n == 0:
        return RangeAssignment((), (), 0, GREEDY, avg_bytes_per_task, f"no {unit}s to read")
    prefix = _prefix(sizes)
    total, lo, hi = prefix[-1], min(min_p, n), min(max_p, n)
    head = f"{n} {unit}s, {format_bytes(total)}"

    def count(limit: int) -> int:
        return _count(prefix, limit, stop=hi + 1)

    limit = avg_bytes_per_task
    first = count(limit)
    if lo <= first <= hi:
        return _assignment(prefix, limit, GREEDY,
                           f"{head}: greedy at {format_bytes(limit)} per task gives "
                           f"{_count_text(first, hi)}, within [{lo}, {hi}]")
    found = _legal_limit(count, limit, first, lo, hi, total)
    if found is not None:
        got = count(found)
        return _assignment(prefix, found, BISECTION,
                           f"{head}: greedy at {format_bytes(limit)} per task gives "
                           f"{_count_text(first, hi)}, outside [{lo}, {hi}]; the smallest "
                           f"limit giving the closest legal count {got} is {format_bytes(found)}")
    decision = decide_parallelism(total, avg_bytes_per_task=avg_bytes_per_task, min_p=lo, max_p=hi)
    even = even_ranges(n, decision.parallelism)
    return RangeAssignment(
        even.ranges, tuple(prefix[e] - prefix[s] for s, e in even.ranges), even.parallelism,
        EVEN, None,
        f"{head}: no byte limit gives a count within [{lo}, {hi}] (greedy at "
        f"{format_bytes(limit)} gives {_count_text(first, hi)}); split evenly by count into "
        f"{decision.parallelism} ranges ({decision.reason})")


# -- internals ---------------------------------------------------------------------
def _check_sizes(sizes: Sequence[int]) -> None:
    for i, s in enumerate(sizes):
        if s < 0:
            raise ValueError(f"sizes[{i}] is negative ({s})")


def _prefix(sizes: Sequence[int]) -> list[int]:
    return [0, *accumulate(sizes)]


def _next_end(prefix: list[int], start: int, limit: int) -> int:
    # Largest end with prefix[end] - prefix[start] <= limit, but at least start + 1:
    # a range always takes its first unit, however big.
    end = bisect_right(prefix, prefix[start] + limit, lo=start + 1) - 1
    return max(end, start + 1)


def _greedy(prefix: list[int], limit: int) -> tuple[tuple[int, int], ...]:
    n, start, out = len(prefix) - 1, 0, []
    while start < n:
        end = _next_end(prefix, start, limit)
        out.append((start, end))
        start = end
    return tuple(out)


def _count(prefix: list[int], limit: int, stop: int) -> int:
    """The greedy count at ``limit``, or ``stop`` if it reaches ``stop`` (saves time)."""
    n, start, count = len(prefix) - 1, 0, 0
    while start < n and count < stop:
        start = _next_end(prefix, start, limit)
        count += 1
    return count


def _count_text(count: int, hi: int) -> str:
    if count > hi:
        return f"more than {hi} ranges"
    return "1 range" if count == 1 else f"{count} ranges"


def _legal_limit(
    count: Callable[[int], int], limit: int, first: int, lo: int, hi: int, total: int
) -> int | None:
    """The smallest limit yielding the legal count closest to ``first``, or ``None``.

    Relies on ``count`` never increasing as the limit grows: greedy is optimal
    for "fewest contiguous ranges each within the limit or a single unit", and
    a range that fits a limit fits any larger one.
    """
    if first > hi:
        # Too many ranges: the smallest larger limit with count <= hi. At the
        # total every unit fits one range, so the search always lands.
        found = _first_true(lambda x: count(x) <= hi, limit, max(limit, total))
    else:
        # Too few: the largest smaller limit with count >= lo gives the closest
        # legal count; then the smallest limit giving that same count.
        if count(0) < lo:
            return None
        below = _first_true(lambda x: count(x) < lo, 0, limit) - 1
        target = count(below)
        found = _first_true(lambda x: count(x) <= target, 0, below)
    return found if lo <= count(found) <= hi else None


def _first_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest ``x`` in ``[lo, hi]`` with ``pred(x)``, for a ``pred`` that stays true
    once true; ``pred(hi)`` must hold."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _assignment(prefix: list[int], limit: int, method: str, reason: str) -> RangeAssignment:
    ranges = _greedy(prefix, limit)
    return RangeAssignment(
        ranges, tuple(prefix[e] - prefix[s] for s, e in ranges), len(ranges), method, limit,
        reason)


# -- skew ----------------------------------------------------------------------------
class Splitting(Enum):
    """May a skewed partition be read by several tasks, each taking a range of map outputs?

    A piece holds every record of some map tasks for the partition's keys, so
    a key's records end up in several tasks. Whether that is correct depends on
    what the reduce side does with a key:

    * ``NO``: the consumer needs all records of a key in one task and nothing
      fixes it afterwards: ``sortByKey`` (one sorted run per range),
      ``partitionBy`` (the caller's partitioner is the contract), and a join or
      ``cogroup`` side whose partner is not replicated.
    * ``INDEPENDENT``: records carry no key grouping: ``repartition`` and
      Spark SQL's ``REBALANCE`` (AQE splits these too).
    * ``MERGE``: per-key partial results that a final merge step combines:
      ``reduceByKey``, ``aggregateByKey``, ``combineByKey``, ``foldByKey``,
      ``groupByKey``, ``distinct``. The wiring must add that merge step.
    * ``REPLICATE_OTHER_SIDE``: one side of a join; every piece is joined with
      the other side's whole partition, which the wiring reads once per piece
      (see :func:`join_side_splitting`). Its bytes are not counted here.
    """

    NO = "no"
    INDEPENDENT = "independent"
    MERGE = "merge"
    REPLICATE_OTHER_SIDE = "replicate-other-side"


#: How the RDD operations the wiring knows may be split (see :class:`Splitting`).
OPERATION_SPLITTING: Mapping[str, Splitting] = MappingProxyType({
    "repartition": Splitting.INDEPENDENT,
    "rebalance": Splitting.INDEPENDENT,
    **{op: Splitting.MERGE for op in (
        "reduceByKey", "aggregateByKey", "combineByKey", "foldByKey", "groupByKey", "distinct")},
    **{op: Splitting.NO for op in (
        "sortByKey", "partitionBy", "join", "leftOuterJoin", "rightOuterJoin", "fullOuterJoin",
        "cogroup")},
})


def join_side_splitting(how: str, side: str) -> Splitting:
    """Whether one side (``"left"``/``"right"``) of a join of type ``how`` may be split.

    Spark AQE's rule: a side may be split when each of its rows is emitted at
    most once however the other side is replicated, i.e. the left side of
    inner, cross, left outer, left semi and left anti joins and the right side
    of inner, cross and right outer joins. Accepts Spark's spellings of ``how``.
    """
    kind = how.lower().replace("_", "")
    kind = {"left": "leftouter", "right": "rightouter", "semi": "leftsemi", "anti": "leftanti",
            "outer": "fullouter", "full": "fullouter"}.get(kind, kind)
    sides = {"inner": ("left", "right"), "cross": ("left", "right"), "leftouter": ("left",),
             "leftsemi": ("left",), "leftanti": ("left",), "rightouter": ("right",),
             "fullouter": ()}
    if kind not in sides or side not in ("left", "right"):
        raise ValueError(f"unknown join type {how!r} or side {side!r}")
    return Splitting.REPLICATE_OTHER_SIDE if side in sides[kind] else Splitting.NO


@dataclass(frozen=True)
class Slice:
    """Map outputs ``[map_start, map_end)`` of one partition, ``bytes`` in all."""

    partition: int
    map_start: int
    map_end: int
    bytes: int


@dataclass(frozen=True)
class SkewAssignment:
    """Slices in partition order, then map order, and their packing into tasks.

    ``packing.ranges`` index ``slices``; an unsplit partition is one slice over
    all map tasks. A task may thus read the last pieces of one partition, whole
    partitions and the first pieces of the next: one shuffle read per slice.
    ``skewed`` lists the partitions above ``threshold_bytes`` (split only when
    ``splitting`` allows and more than one map wrote them).
    """

    slices: tuple[Slice, ...]
    packing: RangeAssignment
    skewed: tuple[int, ...]
    threshold_bytes: int
    target_bytes: int
    splitting: Splitting
    reason: str

    @property
    def parallelism(self) -> int:
        return self.packing.parallelism

    def task_slices(self, task: int) -> tuple[Slice, ...]:
        start, end = self.packing.ranges[task]
        return self.slices[start:end]


def split_skewed(
    sizes_by_map: Sequence[Sequence[int]],
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    splitting: Splitting,
    skew_factor: float = DEFAULT_SKEW_FACTOR,
    skew_threshold: int = DEFAULT_SKEW_THRESHOLD,
) -> SkewAssignment:
    """Split skewed partitions of one shuffle by map ranges, then balance the slices.

    ``sizes_by_map[j][m]`` is the bytes map task ``m`` wrote to partition ``j``
    (every row as long as the number of map tasks). A partition is skewed when
    its bytes exceed ``threshold = max(median x skew_factor, skew_threshold)``
    (the median of all partitions, at least 1 byte). Unless ``splitting`` is
    ``NO``, a skewed partition is cut into contiguous map ranges of about
    ``target = max(avg_bytes_per_task, mean of the non-skewed partitions)``
    bytes (the greedy packer over its map outputs); a single map output above
    the target stays whole, so a one-key hotspot remains. The slices are then
    packed by :func:`balanced_ranges`, with the same guarantees over slices.
    """
    maps = len(sizes_by_map[0]) if sizes_by_map else 0
    for j, row in enumerate(sizes_by_map):
        if len(row) != maps:
            raise ValueError(f"sizes_by_map[{j}] has {len(row)} map sizes, expected {maps}")
        _check_sizes(row)
    if skew_factor < 0 or skew_threshold < 0:
        raise ValueError("skew_factor and skew_threshold must be >= 0")
    totals = [sum(row) for row in sizes_by_map]
    threshold = max(int(_median(totals) * skew_factor), skew_threshold)
    skewed = tuple(j for j, t in enumerate(totals) if t > threshold)
    rest = [t for t in totals if t <= threshold]
    target = max(avg_bytes_per_task, sum(rest) // len(rest) if rest else 0)

    slices: list[Slice] = []
    pieces: dict[int, int] = {}
    for j, row in enumerate(sizes_by_map):
        if j in skewed and splitting is not Splitting.NO and maps > 1:
            ranges = greedy_ranges(row, target)
            slices.extend(Slice(j, a, b, sum(row[a:b])) for a, b in ranges)
            if len(ranges) > 1:
                pieces[j] = len(ranges)
        else:
            slices.append(Slice(j, 0, maps, totals[j]))
    packing = balanced_ranges([s.bytes for s in slices], avg_bytes_per_task=avg_bytes_per_task,
                              min_p=min_p, max_p=max_p, unit="slice")

    head = (f"skew threshold {format_bytes(threshold)} = max({skew_factor:g} x median "
            f"{format_bytes(_median(totals))}, {format_bytes(skew_threshold)})")
    if not skewed:
        what = "no partition is skewed"
    elif splitting is Splitting.NO:
        what = f"partitions {list(skewed)} are skewed but may not be split ({splitting.value})"
    elif not pieces:
        what = f"partitions {list(skewed)} are skewed but have no map range to split at"
    else:
        cut = ", ".join(f"{j} into {k}" for j, k in pieces.items())
        what = (f"split skewed partitions by map ranges of about {format_bytes(target)} "
                f"({splitting.value}): {cut}")
    return SkewAssignment(tuple(slices), packing, skewed, threshold, target, splitting,
                          f"{head}; {what}; {packing.reason}")


def _median(values: Sequence[int]) -> int:
    """The median, at least 1 (so a mostly empty shuffle still has a threshold)."""
    s, k = sorted(values), len(values) // 2
    return max((s[k] if len(s) % 2 else (s[k - 1] + s[k]) // 2) if s else 1, 1)
