"""How the reduce side of one RDD shuffle reads it: the plan the RDD helpers carry out.

An RDD helper (:mod:`spark_adaptive.batch.rdd`) writes its shuffle into
``batch.max-parallelism`` partitions (Flink's subpartitions) and runs the map
side. Then one of two planners here decides how many tasks read the shuffle
and which partitions each reads:

* :func:`plan_by_bytes`, when the per-map, per-partition sizes are known (the
  JVM shim reads them from Spark's map output statistics): ``p = ceil(total /
  V)`` within the bounds; skewed partitions are split by map ranges where the
  operation allows it (:func:`~.batch_ranges.split_skewed`), and the pieces
  are packed into at most ``p`` contiguous ranges, as even in bytes as
  contiguity allows. This is Flink's flexible subpartition mapping with
  auto-rebalancing, with the count held to the rule: a greedy packing at
  ``V`` alone runs up to twice ``p`` tasks when partitions are not much
  smaller than ``V``.
* :func:`plan_even`, when only the total is known (no shim): ``p`` from the
  total bytes (:func:`~.batch_decider.decide_parallelism`) and ranges of equal
  partition count, the mapping of Flink before auto-rebalancing.

A :class:`ShufflePlan` lists, per task, the :class:`ReadSlice` values it reads,
and which tasks read a piece of a split partition (their output needs the
operation's merge step). :meth:`ShufflePlan.spec` encodes the slices for the
shim's ``RangeShuffleRDD`` (syntax documented there and at :func:`encode`).
A join reads two shuffles in one plan (:mod:`~.batch_join`): each slice names
the shuffle it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_adaptive.core.batch.decider import decide_parallelism, format_bytes
from spark_adaptive.core.batch.ranges import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_THRESHOLD,
    Splitting,
    even_ranges,
    split_skewed,
)

#: ``ShufflePlan.method`` values.
BY_BYTES, EVEN_BY_COUNT = "bytes", "even"
#: The least a task reads when held slots raise a stage's parallelism: Spark AQE's
#: ``minPartitionSize`` default, lowered to V / 5 for small V as Spark's own tests do.
MIN_TASK_BYTES = 1 << 20


def subpartition_count(map_tasks: int, *, max_p: int, slots: int = 1,
                       per_map_task: int = 1) -> int:
    """How many partitions an RDD helper's map side writes (Flink's subpartitions: the most
    tasks its reduce side can get).

    ``max_p`` (``batch.max-parallelism``, Flink's rule), but no more than the map side
    has tasks (what PySpark's own operations write by default) and at least 2 per held
    task slot. In PySpark every partition costs each map task a Python bucket, a pickled
    chunk per flush and a file: in benchmarks/batch.py a 1 GB ``reduceByKey`` took longer
    the more partitions its map side wrote past one per map task, while its reduce side
    needed fewer tasks than that (measurements: docs/benchmarks.md, RDD helpers:
    partitions per map task and task sizes).
    Inputs whose map side multiplies the data get fewer, larger reduce tasks than the
    rule asks for, as they would in PySpark; a skewed partition is still split by map
    ranges.

    ``per_map_task``: partitions per map task, for a reduce side whose tasks read less
    than a map task does (the merging helpers' cap, ``plans.for_merging``): their own
    map side writes one pickled batch per partition, so a partition costs it a file.
    """
    if map_tasks < 0 or max_p < 1 or slots < 1 or per_map_task < 1:
        raise ValueError(f"need map_tasks >= 0, max_p >= 1, slots >= 1, per_map_task >= 1; "
                         f"got {map_tasks}, {max_p}, {slots}, {per_map_task}")
    return max(1, min(max_p, max(map_tasks * per_map_task, 2 * slots)))


def min_task_bytes(avg_bytes_per_task: int) -> int:
    return min(MIN_TASK_BYTES, max(1, avg_bytes_per_task // 5))


def slot_floor(total_bytes: int, slots: int, avg_bytes_per_task: int) -> int:
    """Tasks that keep ``slots`` held slots busy while each reads at least
    :func:`min_task_bytes`: ``min(slots, total // min_task_bytes)``, at least 1.

    The lower bound ``batch.use-held-slots`` adds to Flink's rule (what Spark AQE's
    ``parallelismFirst`` does with ``defaultParallelism``): a Spark application holds
    its executors for the whole job, so leaving a held slot idle saves nothing.
    """
    if slots <= 1 or total_bytes <= 0:
        return 1
    return max(1, min(slots, total_bytes // min_task_bytes(avg_bytes_per_task)))


@dataclass(frozen=True)
class ShuffleSizes:
    """``by_partition[j][m]``: bytes map task ``m`` wrote for reduce partition ``j``."""

    by_partition: tuple[tuple[int, ...], ...]

    @property
    def partitions(self) -> int:
        return len(self.by_partition)

    @property
    def maps(self) -> int:
        return len(self.by_partition[0]) if self.by_partition else 0

    @property
    def totals(self) -> tuple[int, ...]:
        return tuple(sum(row) for row in self.by_partition)

    @property
    def total(self) -> int:
        return sum(self.totals)


def parse_sizes(text: str) -> ShuffleSizes:
    """The shim's sizes text: ``"<partitions> <maps>"``, then one line of map sizes per partition.

    Raises ``ValueError`` when the text does not match its own header.
    """
    lines = text.split("\n")
    head = lines[0].split()
    if len(head) != 2:
        raise ValueError(f"bad shuffle sizes header {lines[0]!r}")
    partitions, maps = int(head[0]), int(head[1])
    rows = tuple(tuple(int(x) for x in line.split(",")) if maps else ()
                 for line in lines[1:1 + partitions])
    if len(rows) != partitions or any(len(r) != maps for r in rows):
        raise ValueError(f"shuffle sizes do not match their header {partitions} x {maps}")
    return ShuffleSizes(rows)


@dataclass(frozen=True)
class ReadSlice:
    """Partitions ``[start, end)`` from every map task, or from maps ``[map_start, map_end)``,
    of the plan's shuffle number ``shuffle`` (0 unless the plan reads several).

    A slice with a map range is always one partition (a piece of a split one).
    """

    start: int
    end: int
    map_start: int = 0
    map_end: int | None = None
    shuffle: int = 0

    @property
    def is_piece(self) -> bool:
        return self.map_end is not None

    def spec(self) -> str:
        prefix = f"{self.shuffle}:" if self.shuffle else ""
        if self.map_end is None:
            return f"{prefix}{self.start}-{self.end}"
        return f"{prefix}{self.start}@{self.map_start}-{self.map_end}"


def encode(tasks: Sequence[Sequence[ReadSlice]]) -> str:
    """Slices per task for the shim: tasks joined by ``;``, slices by ``,``
    (``"s-e"`` whole partitions, ``"j@a-b"`` partition ``j`` from maps ``[a, b)``), each
    prefixed ``"i:"`` when it reads shuffle ``i`` > 0 of the plan."""
    return ";".join(",".join(s.spec() for s in task) for task in tasks)


@dataclass(frozen=True)
class ShufflePlan:
    """Which partitions of one shuffle (or of a join's two) each reduce task reads, and why.

    ``maps`` counts the map tasks of the first shuffle; ``maps_by_shuffle`` those of
    each shuffle when the plan reads several. ``total_bytes`` is what the map sides
    wrote; ``bytes_per_task`` what each task reads: for a join, a partition read
    whole with each piece of the other side's counts once per such task.
    """

    operation: str
    partitions: int
    tasks: tuple[tuple[ReadSlice, ...], ...]
    bytes_per_task: tuple[int, ...] | None
    total_bytes: int | None
    method: str
    reason: str
    skewed: tuple[int, ...] = ()
    maps: int | None = None
    maps_by_shuffle: tuple[int, ...] = ()

    @property
    def parallelism(self) -> int:
        return len(self.tasks)

    @property
    def piece_tasks(self) -> tuple[int, ...]:
        """Tasks that read a piece of a split partition (with a merge step, their keys need it)."""
        return tuple(i for i, t in enumerate(self.tasks) if any(s.is_piece for s in t))

    def spec(self, tasks: Sequence[int] | None = None) -> str:
        """The shim's spec for all tasks, or for the tasks ``tasks`` in that order."""
        chosen = self.tasks if tasks is None else [self.tasks[i] for i in tasks]
        return encode(chosen)

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """``(first partition, end partition)`` each task touches."""
        return tuple((t[0].start, t[-1].end) for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation, "partitions": self.partitions, "maps": self.maps,
            "totalBytes": self.total_bytes, "parallelism": self.parallelism,
            "method": self.method, "skewedPartitions": list(self.skewed),
            "tasks": [[s.spec() for s in t] for t in self.tasks],
            "bytesPerTask": list(self.bytes_per_task) if self.bytes_per_task else None,
            "mapsByShuffle": list(self.maps_by_shuffle) or None,
            "reason": self.reason,
        }


def plan_by_bytes(
    operation: str,
    sizes: ShuffleSizes,
    splitting: Splitting,
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    skew_factor: float = DEFAULT_SKEW_FACTOR,
    skew_threshold: int = DEFAULT_SKEW_THRESHOLD,
    slots: int = 1,
) -> ShufflePlan:
    """At most ``p = ceil(total / V)`` (within ``[min_p, max_p]``) tasks reading byte-balanced
    contiguous ranges; skewed partitions split by map ranges first if ``splitting`` allows.

    The ranges are those of :func:`~.batch_ranges.split_skewed` with the bounds
    ``[min_p, p]``: greedy ranges at ``V`` when they are at most ``p``, else those of
    the smallest byte limit giving at most ``p`` (``p`` itself unless the count jumps
    over it), so the largest range is as small as contiguity allows. The reason says
    which applied.
    """
    if sizes.partitions == 0:
        raise ValueError("a shuffle has at least one partition")
    if sizes.maps == 0:
        # No map task ran (an empty input): nothing to balance, one task reads it all.
        task = (ReadSlice(0, sizes.partitions),)
        return ShufflePlan(operation, sizes.partitions, (task,), (0,), 0, BY_BYTES,
                           f"{operation}: the map side had no tasks, so one task reads the "
                           f"{sizes.partitions} empty partitions", maps=0)
    # The rule caps the count; when greedy ranges at V would exceed it (they run up to twice
    # as many tasks when partitions are not much smaller than V), the packer takes the
    # smallest byte limit that stays within it: the most even contiguous ranges.
    min_p, held = with_slots(min_p, max_p, sizes.total, slots, avg_bytes_per_task)
    rule = decide_parallelism(sizes.total, avg_bytes_per_task=avg_bytes_per_task, min_p=min_p,
                              max_p=max_p)
    skew = split_skewed(sizes.by_partition, avg_bytes_per_task=avg_bytes_per_task,
                        min_p=min_p, max_p=rule.parallelism, splitting=splitting,
                        skew_factor=skew_factor, skew_threshold=skew_threshold)
    tasks = []
    for start, end in skew.packing.ranges:
        out: list[ReadSlice] = []
        for piece in skew.slices[start:end]:
            whole = piece.map_start == 0 and piece.map_end == sizes.maps
            if whole and out and not out[-1].is_piece and out[-1].end == piece.partition:
                # Consecutive whole partitions are read by one shuffle reader.
                out[-1] = ReadSlice(out[-1].start, piece.partition + 1)
            elif whole:
                out.append(ReadSlice(piece.partition, piece.partition + 1))
            else:
                out.append(ReadSlice(piece.partition, piece.partition + 1,
                                     piece.map_start, piece.map_end))
        tasks.append(tuple(out))
    return ShufflePlan(operation, sizes.partitions, tuple(tasks), skew.packing.bytes_per_range,
                       sizes.total, BY_BYTES, f"{operation}: {rule.reason}{held}; {skew.reason}",
                       skew.skewed, sizes.maps)


def plan_even(
    operation: str,
    partitions: int,
    total_bytes: int,
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    why: str,
    slots: int = 1,
) -> ShufflePlan:
    """``p`` from the total bytes, then ranges of equal partition count (no sizes per partition).

    ``why`` says why sizes per partition are missing; it starts the reason.
    """
    min_p, held = with_slots(min_p, max_p, total_bytes, slots, avg_bytes_per_task)
    decision = decide_parallelism(total_bytes, avg_bytes_per_task=avg_bytes_per_task,
                                  min_p=min_p, max_p=max_p, vertex_max=partitions)
    even = even_ranges(partitions, decision.parallelism)
    tasks = tuple((ReadSlice(s, e),) for s, e in even.ranges)
    return ShufflePlan(operation, partitions, tasks, None, total_bytes, EVEN_BY_COUNT,
                       f"{operation}: {why}; {format_bytes(total_bytes)} in all: "
                       f"{decision.reason}{held}; {even.reason}")


def with_slots(min_p: int, max_p: int, total: int, slots: int, v: int) -> tuple[int, str]:
    """``min_p`` raised by :func:`slot_floor` (never above ``max_p``), and a note for the
    reason if it was (empty if not)."""
    floor = min(slot_floor(total, slots, v), max_p)
    if floor <= min_p:
        return min_p, ""
    return floor, f" (lower bound {floor}: {slots} task slots held)"
