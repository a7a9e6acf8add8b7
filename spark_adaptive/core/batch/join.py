"""How the reduce side of an RDD join reads its two shuffles, with skewed partitions split.

The join helper (:func:`spark_adaptive.batch.rdd.join`) shuffles each side on
its own, with the same partitioner, so partition ``j`` of the left shuffle
and partition ``j`` of the right one hold the same keys. A task that reads
both sides' partition ``j`` can join it; :func:`plan_join` decides which
tasks read what, from both shuffles' sizes per (partition, map task):

1. **Bytes per task**: ``p = ceil((left + right bytes) / V)`` within the
   bounds (and the held-slot floor), as for any shuffle
   (:func:`~.batch_shuffle.plan_by_bytes`); a task reads about ``V``, or
   ``total / p`` when max-parallelism caps ``p``.
2. **Skew, per side**: each side's partitions are judged against that side's
   own threshold, and cut by map ranges of about the bytes per task, exactly
   as :func:`~.batch_ranges.split_skewed` does for one shuffle, where
   :func:`~.batch_ranges.join_side_splitting` lets that side be split (Spark
   AQE's rule: never a side whose rows an outer join must emit once).
3. **Split partitions** (Spark AQE's skew join, Flink's adaptive skewed
   join): every piece of one side is read with the other side's whole
   partition ``j``, which is thus read once per piece. When both sides of a
   partition are cut (inner join), every left piece meets every right piece:
   the cartesian product, so every pair of rows meets in exactly one task.
   Each such pair of pieces is one task; say there are ``k``.
4. **Other partitions**: Flink's rule again over their own bytes,
   ``ceil(bytes / V)`` within ``[min_p - k, max_p - k]`` (at least 1), so the
   stage stays within max-parallelism unless the pieces alone reach it; then
   packed into that many byte-balanced contiguous ranges of the partitions not
   split (a range may thus step over a split partition) by
   :func:`~.batch_ranges.balanced_ranges`, as :func:`~.batch_shuffle.plan_by_bytes`
   packs a shuffle.

Without a skewed partition to split, the ranges are those
:func:`~.batch_shuffle.plan_by_bytes` gives for the two sides' bytes per
partition added up (with ``Splitting.NO``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from spark_adaptive.core.batch.decider import decide_parallelism, format_bytes
from spark_adaptive.core.batch.ranges import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_THRESHOLD,
    Splitting,
    balanced_ranges,
    join_side_splitting,
    split_skewed,
)
from spark_adaptive.core.batch.shuffle import (
    BY_BYTES,
    ReadSlice,
    ShufflePlan,
    ShuffleSizes,
    plan_even,
    with_slots,
)

#: The shuffle numbers of the two sides in a join plan's slices.
LEFT, RIGHT = 0, 1
_SIDES = ("left", "right")


@dataclass(frozen=True)
class SideCut:
    """One side of a join: its skewed partitions and the map ranges of those it splits.

    ``pieces`` holds only partitions cut into more than one map range; any other
    partition is read whole (maps ``[0, maps)``). ``reason`` names the side's skew
    threshold and what was split, in :func:`~.batch_ranges.split_skewed`'s words.
    """

    side: str
    splitting: Splitting
    maps: int
    skewed: tuple[int, ...]
    pieces: Mapping[int, tuple[tuple[int, int], ...]]
    reason: str

    def ranges(self, partition: int) -> tuple[tuple[int, int], ...]:
        """The map ranges partition ``partition`` of this side is read in."""
        return self.pieces.get(partition, ((0, self.maps),))


def cut_side(sizes: ShuffleSizes, how: str, side: str, *, avg_bytes_per_task: int,
             skew_factor: float = DEFAULT_SKEW_FACTOR,
             skew_threshold: int = DEFAULT_SKEW_THRESHOLD) -> SideCut:
    """Where ``side`` (``"left"``/``"right"``) of a join of type ``how`` is cut.

    The cut is :func:`~.batch_ranges.split_skewed`'s for this shuffle alone, with
    the splitting :func:`~.batch_ranges.join_side_splitting` allows (its packing
    of the slices is not used: the join packs both sides together).
    """
    splitting = join_side_splitting(how, side)
    skew = split_skewed(sizes.by_partition, avg_bytes_per_task=avg_bytes_per_task, min_p=1,
                        max_p=max(1, sizes.partitions), splitting=splitting,
                        skew_factor=skew_factor, skew_threshold=skew_threshold)
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for s in skew.slices:
        by_partition.setdefault(s.partition, []).append((s.map_start, s.map_end))
    pieces = {j: tuple(r) for j, r in by_partition.items() if len(r) > 1}
    # split_skewed's reason is "<threshold>; <what was split>; <packing>".
    reason = skew.reason.removesuffix(f"; {skew.packing.reason}")
    return SideCut(side, splitting, sizes.maps, skew.skewed, MappingProxyType(pieces), reason)


def plan_join(
    left: ShuffleSizes,
    right: ShuffleSizes,
    how: str = "inner",
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    skew_factor: float = DEFAULT_SKEW_FACTOR,
    skew_threshold: int = DEFAULT_SKEW_THRESHOLD,
    slots: int = 1,
    operation: str = "join",
) -> ShufflePlan:
    """The plan reading a join's left (shuffle 0) and right (shuffle 1) shuffles.

    See the module docstring for the rule. Both shuffles must have the same
    partition count (the same partitioner). Every task reads, for each partition
    it touches, a part of the left side and a part of the right side, such that
    every (left map output, right map output) pair of every partition meets in
    exactly one task. Tasks are ordered by the first partition they read.
    ``how`` is any join type :func:`~.batch_ranges.join_side_splitting` accepts.
    Raises ``ValueError`` on mismatched or empty shuffles or an unknown ``how``.
    """
    n = left.partitions
    if n == 0 or right.partitions != n:
        raise ValueError(f"the two sides of a join need the same partition count (at least 1), "
                         f"got {n} and {right.partitions}")
    total = left.total + right.total
    maps = (left.maps, right.maps)
    if left.maps == 0 and right.maps == 0:
        # No map task ran on either side (empty inputs): one task reads it all.
        return ShufflePlan(operation, n, (_whole((0, n)),), (0,), 0, BY_BYTES,
                           f"{operation}: neither side's map side had tasks, so one task reads "
                           f"the {n} empty partitions", maps=0, maps_by_shuffle=maps)
    v = avg_bytes_per_task
    min_p, notes = with_slots(min_p, max_p, total, slots, v)
    rule = decide_parallelism(total, avg_bytes_per_task=v, min_p=min_p, max_p=max_p)
    # When max-parallelism caps the count, every task reads more than V: so do the pieces,
    # else they alone could outnumber the tasks max-parallelism allows.
    per_task = max(v, -(-total // rule.parallelism))
    cuts = tuple(cut_side(s, how, side, avg_bytes_per_task=per_task, skew_factor=skew_factor,
                          skew_threshold=skew_threshold)
                 for s, side in zip((left, right), _SIDES, strict=True))
    split = sorted(set(cuts[0].pieces) | set(cuts[1].pieces))
    if split and per_task > v:
        notes += f" (so pieces hold at least {format_bytes(per_task)}, as each task does)"

    # (first partition, slices, bytes) per task.
    tasks: list[tuple[int, tuple[ReadSlice, ...], int]] = []
    for j in split:
        for a, b in cuts[0].ranges(j):
            for c, d in cuts[1].ranges(j):
                pair = (_part(j, a, b, left.maps, LEFT), _part(j, c, d, right.maps, RIGHT))
                tasks.append((j, pair, sum(left.by_partition[j][a:b])
                              + sum(right.by_partition[j][c:d])))
    k = len(tasks)
    rest = sorted(set(range(n)) - set(split))
    rest_sizes = [left.totals[j] + right.totals[j] for j in rest]
    hi = max(1, max_p - k)
    lo = min(max(1, min_p - k), hi)
    # Without pieces this is the rule above: the ranges are plan_by_bytes's.
    rest_rule = decide_parallelism(sum(rest_sizes), avg_bytes_per_task=v, min_p=lo, max_p=hi)
    packing = balanced_ranges(rest_sizes, avg_bytes_per_task=v, min_p=lo,
                              max_p=rest_rule.parallelism)
    for (s, e), size in zip(packing.ranges, packing.bytes_per_range or (), strict=True):
        tasks.append((rest[s], _whole(*_runs(rest[s:e])), size))
    # Stable: the pieces of a partition keep their order, and no range starts at a split one.
    tasks.sort(key=lambda t: t[0])

    reason = (f"{operation} ({how}): left {format_bytes(left.total)} + right "
              f"{format_bytes(right.total)}: {rule.reason}{notes}; left: {cuts[0].reason}; "
              f"right: {cuts[1].reason}; "
              f"{_rest_text(split, cuts, rest, rest_rule.reason, packing.reason)}")
    skewed = tuple(sorted(set(cuts[0].skewed) | set(cuts[1].skewed)))
    return ShufflePlan(operation, n, tuple(t[1] for t in tasks), tuple(t[2] for t in tasks),
                       total, BY_BYTES, reason, skewed, left.maps, maps)


def plan_join_even(
    partitions: int,
    total_bytes: int,
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    why: str,
    slots: int = 1,
    operation: str = "join",
) -> ShufflePlan:
    """:func:`~.batch_shuffle.plan_even` for a join's two shuffles: each task reads the same
    range of partitions from both (no sizes per partition, so nothing is split)."""
    plan = plan_even(operation, partitions, total_bytes, avg_bytes_per_task=avg_bytes_per_task,
                     min_p=min_p, max_p=max_p, why=why, slots=slots)
    return replace(plan, tasks=tuple(_whole((t[0].start, t[0].end)) for t in plan.tasks))


def smaller_side_first(plan: ShufflePlan, left: ShuffleSizes, right: ShuffleSizes
                       ) -> tuple[ShufflePlan, tuple[int, ...]]:
    """``plan`` with each task's slices of the side it reads fewer bytes of first, and those
    bytes per task.

    A task reads its slices in order, so a task whose first side is small can keep that
    side in memory by key and stream the other past it (a hash join) instead of grouping
    both. Within a side the slices keep their order; on a tie the right side, by
    convention the smaller one (``big.join(small)``), comes first. ``left``/``right``
    are the sizes ``plan`` was made from (shuffles 0 and 1).
    """
    sides = (left, right)
    tasks: list[tuple[ReadSlice, ...]] = []
    small: list[int] = []
    for slices in plan.tasks:
        per_side = [0, 0]
        for s in slices:
            rows = sides[s.shuffle].by_partition[s.start:s.end]
            end = sides[s.shuffle].maps if s.map_end is None else s.map_end
            per_side[s.shuffle] += sum(sum(row[s.map_start:end]) for row in rows)
        first = LEFT if per_side[LEFT] < per_side[RIGHT] else RIGHT
        tasks.append(tuple(s for s in slices if s.shuffle == first)
                     + tuple(s for s in slices if s.shuffle != first))
        small.append(per_side[first])
    return replace(plan, tasks=tuple(tasks)), tuple(small)


# -- internals ---------------------------------------------------------------------------------
def _part(j: int, a: int, b: int, maps: int, shuffle: int) -> ReadSlice:
    """Partition ``j`` of one side from maps ``[a, b)``: a plain slice when that is all maps."""
    if (a, b) == (0, maps):
        return ReadSlice(j, j + 1, shuffle=shuffle)
    return ReadSlice(j, j + 1, a, b, shuffle=shuffle)


def _runs(partitions: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending partitions as runs ``[start, end)`` of consecutive ones."""
    out: list[tuple[int, int]] = []
    for j in partitions:
        if out and out[-1][1] == j:
            out[-1] = (out[-1][0], j + 1)
        else:
            out.append((j, j + 1))
    return out


def _whole(*runs: tuple[int, int]) -> tuple[ReadSlice, ...]:
    """Whole partitions ``runs`` from the left shuffle, then the same from the right one."""
    return tuple(ReadSlice(s, e, shuffle=side) for side in (LEFT, RIGHT) for s, e in runs)


def _rest_text(split: Sequence[int], cuts: Sequence[SideCut], rest: Sequence[int], rule: str,
               packing: str) -> str:
    """The end of the reason: the piece tasks of each split partition, then the count and
    packing of the other partitions (without pieces, the count is the stage's rule)."""
    if not split:
        return packing
    parts, k = [], 0
    for j in split:
        a, b = len(cuts[0].ranges(j)), len(cuts[1].ranges(j))
        if a > 1 and b > 1:
            what = f"{a} left pieces x {b} right pieces"
        else:
            piece, whole = (cuts[0], cuts[1]) if a > 1 else (cuts[1], cuts[0])
            what = f"{a * b} {piece.side} pieces, each with the {whole.side} side's whole partition"
        parts.append(f"partition {j} in {a * b} tasks ({what})")
        k += a * b
    head = "; ".join(parts)
    if not rest:
        return f"{head}; no other partition"
    return (f"{head}; the other {len(rest)} partitions, with the bounds less the {k} piece "
            f"tasks: {rule}; {packing}")
