"""Plans for reading an RDD shuffle: the rule's count, byte-balanced ranges, skew pieces."""

from __future__ import annotations

import math
import random

import pytest

from spark_adaptive.core.batch.ranges import Splitting
from spark_adaptive.core.batch.shuffle import (
    BY_BYTES,
    EVEN_BY_COUNT,
    ReadSlice,
    ShuffleSizes,
    encode,
    parse_sizes,
    plan_by_bytes,
    plan_even,
    slot_floor,
)

KiB = 1024


def sizes_of(rows: list[list[int]]) -> ShuffleSizes:
    return ShuffleSizes(tuple(tuple(r) for r in rows))


def covered(plan_tasks: tuple[tuple[ReadSlice, ...], ...], partitions: int, maps: int) -> None:
    """Every (partition, map) is read by exactly one task, and tasks go left to right."""
    seen: dict[tuple[int, int], int] = {}
    last = (-1, -1)
    for t, task in enumerate(plan_tasks):
        for s in task:
            assert (s.start, s.map_start) > last, "slices in partition, then map order"
            last = (s.start, s.map_start)
            for j in range(s.start, s.end):
                for m in range(s.map_start, s.map_end if s.map_end is not None else maps):
                    assert (j, m) not in seen
                    seen[(j, m)] = t
    assert len(seen) == partitions * maps


def test_parse_sizes_reads_the_shim_format_and_checks_it() -> None:
    s = parse_sizes("3 2\n1,2\n0,0\n5,7")
    assert s.by_partition == ((1, 2), (0, 0), (5, 7))
    assert (s.partitions, s.maps, s.totals, s.total) == (3, 2, (3, 0, 12), 15)
    assert parse_sizes("2 0\n\n").maps == 0
    with pytest.raises(ValueError):
        parse_sizes("3 2\n1,2\n0,0")
    with pytest.raises(ValueError):
        parse_sizes("2 2\n1,2\n0")


def test_encode_matches_the_shim_syntax() -> None:
    tasks = [(ReadSlice(0, 3),), (ReadSlice(3, 4, 0, 2),), (ReadSlice(3, 4, 2, 5), ReadSlice(4, 6))]
    assert encode(tasks) == "0-3;3@0-2;3@2-5,4-6"


def test_count_follows_the_rule_when_greedy_would_run_twice_as_many() -> None:
    # 128 partitions of 0.55 V each: greedy at V keeps each alone (128 tasks). The rule
    # says ceil(70.4) = 71; with equal partitions no contiguous packing has a smaller
    # largest range than pairs, so the plan runs 64 tasks of two partitions.
    v = 100 * KiB
    rows = [[55 * KiB // 4] * 4 for _ in range(128)]
    plan = plan_by_bytes("reduceByKey", sizes_of(rows), Splitting.MERGE,
                         avg_bytes_per_task=v, min_p=1, max_p=128)
    total = sum(map(sum, rows))
    assert plan.method == BY_BYTES and plan.total_bytes == total
    assert math.ceil(total / v) == 71 and plan.parallelism == 64
    covered(plan.tasks, 128, 4)
    assert plan.bytes_per_task == (2 * 4 * (55 * KiB // 4),) * 64


@pytest.mark.parametrize("seed", range(20))
def test_random_sizes_give_contiguous_cover_within_bounds(seed: int) -> None:
    rng = random.Random(seed)
    n, maps = rng.randint(1, 64), rng.randint(1, 6)
    rows = [[rng.choice([0, rng.randint(0, 5000)]) for _ in range(maps)] for _ in range(n)]
    v, lo, hi = rng.randint(500, 20000), rng.randint(1, 3), rng.randint(3, 80)
    plan = plan_by_bytes("groupByKey", sizes_of(rows), Splitting.MERGE, avg_bytes_per_task=v,
                         min_p=lo, max_p=hi, skew_threshold=rng.choice([0, 1 << 30]))
    covered(plan.tasks, n, maps)
    total = sum(map(sum, rows))
    rule = min(max(math.ceil(total / v), lo), hi)
    assert plan.parallelism <= max(rule, 1)
    assert plan.piece_tasks == tuple(i for i, t in enumerate(plan.tasks)
                                     if any(s.is_piece for s in t))


def test_a_skewed_partition_is_split_by_map_ranges_when_the_operation_merges() -> None:
    rows = [[1 * KiB] * 8 for _ in range(16)]
    rows[5] = [64 * KiB] * 8  # 512 KiB against a median of 8 KiB
    plan = plan_by_bytes("reduceByKey", sizes_of(rows), Splitting.MERGE,
                         avg_bytes_per_task=64 * KiB, min_p=1, max_p=16, skew_threshold=0)
    assert plan.skewed == (5,)
    pieces = [s for t in plan.tasks for s in t if s.is_piece]
    assert len(pieces) > 1 and all(s.start == 5 for s in pieces)
    assert plan.piece_tasks
    covered(plan.tasks, 16, 8)
    assert "split skewed partitions" in plan.reason

    unsplit = plan_by_bytes("join", sizes_of(rows), Splitting.NO,
                            avg_bytes_per_task=64 * KiB, min_p=1, max_p=16, skew_threshold=0)
    assert unsplit.skewed == (5,) and not unsplit.piece_tasks
    assert "may not be split" in unsplit.reason


def test_empty_map_side_is_one_task() -> None:
    plan = plan_by_bytes("sortByKey", sizes_of([[] for _ in range(8)]), Splitting.NO,
                         avg_bytes_per_task=KiB, min_p=1, max_p=8)
    assert plan.parallelism == 1 and plan.tasks == ((ReadSlice(0, 8),),)


def test_even_plan_sizes_from_the_total_and_splits_by_count() -> None:
    plan = plan_even("reduceByKey", 32, 76 * KiB, avg_bytes_per_task=8 * KiB, min_p=1,
                     max_p=32, why="no JVM shim")
    assert plan.method == EVEN_BY_COUNT and plan.parallelism == 10
    lengths = [t[0].end - t[0].start for t in plan.tasks]
    assert sum(lengths) == 32 and max(lengths) - min(lengths) <= 1
    assert plan.reason.startswith("reduceByKey: no JVM shim")
    assert plan_even("x", 4, 10**9, avg_bytes_per_task=1, min_p=1, max_p=128,
                     why="w").parallelism == 4  # never more tasks than partitions


def test_plan_json_names_every_task_slice() -> None:
    plan = plan_even("sortByKey", 4, 0, avg_bytes_per_task=1, min_p=1, max_p=4, why="w")
    data = plan.to_json()
    assert data["tasks"] == [["0-4"]] and data["parallelism"] == 1 and data["method"] == "even"


def test_held_slots_raise_the_count_while_each_task_reads_a_mebibyte() -> None:
    assert slot_floor(10 << 20, 4, 64 << 20) == 4
    assert slot_floor(3 << 20, 4, 64 << 20) == 3, "never below 1 MiB per task"
    assert slot_floor(3 * KiB, 4, 10 * KiB) == 1, "V / 5 when V is small: 2 KiB"
    assert slot_floor(0, 8, KiB) == 1 and slot_floor(1 << 30, 1, KiB) == 1
    rows = [[256 * KiB] * 2 for _ in range(32)]  # 16 MiB, V 64 MiB: the rule says 1
    plan = plan_by_bytes("reduceByKey", sizes_of(rows), Splitting.MERGE,
                         avg_bytes_per_task=64 << 20, min_p=1, max_p=128, slots=4)
    assert plan.parallelism == 4 and "4 task slots held" in plan.reason
    even = plan_even("reduceByKey", 32, 16 << 20, avg_bytes_per_task=64 << 20, min_p=1,
                     max_p=128, why="w", slots=4)
    assert even.parallelism == 4


def test_subpartitions_follow_max_parallelism_but_at_most_one_per_map_task() -> None:
    from spark_adaptive.core.batch.shuffle import subpartition_count

    assert subpartition_count(2, max_p=128, slots=2) == 4  # a 10 MB text file's 2 splits
    assert subpartition_count(34, max_p=128, slots=2) == 34  # a 1 GB one's: as PySpark
    assert subpartition_count(200, max_p=128, slots=2) == 128  # Flink's rule once it binds
    assert subpartition_count(1, max_p=128, slots=16) == 32  # 2 per held slot at least
    assert subpartition_count(0, max_p=128) == 2  # an empty map side still has partitions
    assert subpartition_count(5, max_p=4) == 4  # never above max-parallelism
    assert subpartition_count(2, max_p=128, slots=2, per_map_task=4) == 8
    assert subpartition_count(40, max_p=128, slots=2, per_map_task=4) == 128
    with pytest.raises(ValueError):
        subpartition_count(1, max_p=0)
    with pytest.raises(ValueError, match="per_map_task"):
        subpartition_count(1, max_p=8, per_map_task=0)
