"""Plans for reading a join's two shuffles: skewed partitions split into pieces, each read
with the other side's whole partition (or every piece of it), the rest in byte-balanced ranges."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence

import pytest

from spark_adaptive.core.batch.join import (
    LEFT,
    RIGHT,
    cut_side,
    plan_join,
    plan_join_even,
    smaller_side_first,
)
from spark_adaptive.core.batch.ranges import Splitting
from spark_adaptive.core.batch.shuffle import (
    BY_BYTES,
    EVEN_BY_COUNT,
    ReadSlice,
    ShufflePlan,
    ShuffleSizes,
    encode,
    plan_by_bytes,
)

KiB = 1024


def sizes_of(rows: Sequence[Sequence[int]]) -> ShuffleSizes:
    return ShuffleSizes(tuple(tuple(r) for r in rows))


def cells(plan: ShufflePlan, sizes: tuple[ShuffleSizes, ShuffleSizes]
          ) -> list[dict[int, set[tuple[int, int]]]]:
    """Per task, per shuffle: the (partition, map) cells it reads."""
    out = []
    for task in plan.tasks:
        read: dict[int, set[tuple[int, int]]] = {LEFT: set(), RIGHT: set()}
        for s in task:
            maps = sizes[s.shuffle].maps
            end = s.map_end if s.map_end is not None else maps
            assert s.map_end is None or s.end == s.start + 1, "a piece is one partition"
            for j in range(s.start, s.end):
                cell = {(j, m) for m in range(s.map_start, end)}
                assert not cell & read[s.shuffle], "a task reads a cell once"
                read[s.shuffle] |= cell
        out.append(read)
    return out


def check_join(plan: ShufflePlan, left: ShuffleSizes, right: ShuffleSizes) -> None:
    """Every (left map, right map) pair of every partition meets in exactly one task, every
    cell is read, and the bytes per task are those of the cells read."""
    read = cells(plan, (left, right))
    meetings: Counter[tuple[int, int, int]] = Counter()
    seen: dict[int, set[tuple[int, int]]] = {LEFT: set(), RIGHT: set()}
    for task, r in zip(plan.tasks, read, strict=True):
        for side in (LEFT, RIGHT):
            seen[side] |= r[side]
        by_partition: dict[int, list[int]] = defaultdict(list)
        for j, m in r[RIGHT]:
            by_partition[j].append(m)
        for j, m in r[LEFT]:
            meetings.update((j, m, m2) for m2 in by_partition[j])
        # A task that reads part of a partition on one side reads it on the other too.
        assert {j for j, _ in r[LEFT]} == {j for j, _ in r[RIGHT]} or not left.maps \
            or not right.maps, task
    n = left.partitions
    assert seen[LEFT] == {(j, m) for j in range(n) for m in range(left.maps)}
    assert seen[RIGHT] == {(j, m) for j in range(n) for m in range(right.maps)}
    expected = {(j, m, m2) for j in range(n) for m in range(left.maps)
                for m2 in range(right.maps)}
    assert set(meetings) == expected and all(c == 1 for c in meetings.values())
    assert plan.bytes_per_task == tuple(
        sum(left.by_partition[j][m] for j, m in r[LEFT])
        + sum(right.by_partition[j][m] for j, m in r[RIGHT]) for r in read)
    firsts = [min(s.start for s in t) for t in plan.tasks]
    assert firsts == sorted(firsts), "tasks in partition order"


def range_tasks(plan: ShufflePlan) -> list[list[int]]:
    """The partitions each task without a piece reads, in task order."""
    return [[j for s in t if s.shuffle == LEFT for j in range(s.start, s.end)]
            for t in plan.tasks if not any(s.is_piece for s in t)]


def test_encode_prefixes_the_shuffle_of_a_slice() -> None:
    tasks = [(ReadSlice(0, 3), ReadSlice(0, 3, shuffle=1)),
             (ReadSlice(3, 4, 0, 2), ReadSlice(3, 4, 1, 5, shuffle=1))]
    assert encode(tasks) == "0-3,1:0-3;3@0-2,1:3@1-5"


def test_a_skewed_left_partition_is_read_in_pieces_each_with_the_whole_right_one() -> None:
    left = [[1 * KiB] * 8 for _ in range(16)]
    left[2] = [24 * KiB] * 8  # 192 KiB against a median of 8 KiB
    right = [[KiB // 2] * 2 for _ in range(16)]
    plan = plan_join(sizes_of(left), sizes_of(right), avg_bytes_per_task=32 * KiB, min_p=1,
                     max_p=16, skew_threshold=0)
    check_join(plan, sizes_of(left), sizes_of(right))
    assert plan.method == BY_BYTES and plan.skewed == (2,) and plan.maps_by_shuffle == (8, 2)
    pieces = [t for t in plan.tasks if any(s.is_piece for s in t)]
    # Greedy map ranges of about 32 KiB: one 24 KiB map output each.
    assert [(t[0].map_start, t[0].map_end) for t in pieces] == [(m, m + 1) for m in range(8)]
    assert all(t[1] == ReadSlice(2, 3, shuffle=RIGHT) for t in pieces)
    assert plan.piece_tasks == tuple(range(1, 9))
    assert "partition 2 in 8 tasks (8 left pieces, each with the right side's whole " \
           "partition)" in plan.reason
    # The other 15 partitions (9 KiB each): ceil(135 KiB / 32 KiB) = 5 ranges of 3, the
    # first stepping over partition 2.
    assert "the other 15 partitions, with the bounds less the 8 piece tasks: " \
           "ceil(135 KiB / 32 KiB) = 5, within [1, 8]" in plan.reason
    assert range_tasks(plan) == [[0, 1, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]
    assert plan.tasks[0] == (ReadSlice(0, 2), ReadSlice(3, 4), ReadSlice(0, 2, shuffle=1),
                             ReadSlice(3, 4, shuffle=1))
    # Unsplit, partition 2 alone would be a task of 193 KiB; now a piece reads 24 + 1 KiB.
    assert plan.parallelism == 13 and plan.bytes_per_task is not None
    assert set(plan.bytes_per_task) == {25 * KiB, 27 * KiB}


def test_both_sides_skewed_meet_as_the_cartesian_product_of_their_pieces() -> None:
    left = [[KiB] * 4 for _ in range(8)]
    right = [[KiB] * 3 for _ in range(8)]
    left[2], right[2] = [40 * KiB] * 4, [40 * KiB] * 3
    plan = plan_join(sizes_of(left), sizes_of(right), avg_bytes_per_task=40 * KiB, min_p=1,
                     max_p=64, skew_threshold=0)
    check_join(plan, sizes_of(left), sizes_of(right))
    pairs = [(t[0].map_start, t[1].map_start) for t in plan.tasks if t[0].start == 2]
    assert pairs == [(a, b) for a in range(4) for b in range(3)]
    assert "partition 2 in 12 tasks (4 left pieces x 3 right pieces)" in plan.reason


@pytest.mark.parametrize("how, split_side", [("left_outer", LEFT), ("rightouter", RIGHT),
                                             ("full", None)])
def test_a_side_that_may_not_be_split_stays_whole(how: str, split_side: int | None) -> None:
    left = [[KiB] * 4 for _ in range(8)]
    right = [[KiB] * 4 for _ in range(8)]
    left[3], right[6] = [50 * KiB] * 4, [50 * KiB] * 4
    plan = plan_join(sizes_of(left), sizes_of(right), how, avg_bytes_per_task=50 * KiB, min_p=1,
                     max_p=64, skew_threshold=0)
    check_join(plan, sizes_of(left), sizes_of(right))
    assert plan.skewed == (3, 6)
    split = {(s.shuffle, s.start) for t in plan.tasks for s in t if s.is_piece}
    assert split == ({(split_side, 3 if split_side == LEFT else 6)} if split_side is not None
                     else set())
    assert "may not be split (no)" in plan.reason


def test_without_a_split_the_ranges_are_those_of_the_summed_sizes() -> None:
    rng = random.Random(7)
    compared: list[bool] = []
    for _ in range(40):
        n = rng.randint(1, 48)
        left = [[rng.randint(0, 4000) for _ in range(3)] for _ in range(n)]
        right = [[rng.randint(0, 4000) for _ in range(2)] for _ in range(n)]
        if rng.random() < 0.5:
            left[rng.randrange(n)] = [50_000] * 3
        kw = dict(avg_bytes_per_task=rng.randint(1000, 30000), min_p=rng.randint(1, 3),
                  max_p=rng.randint(3, 40), slots=rng.choice([1, 4]))
        how = rng.choice(["inner", "full"])  # full: skewed partitions exist but stay whole
        plan = plan_join(sizes_of(left), sizes_of(right), how, skew_threshold=0, **kw)
        if plan.piece_tasks:
            continue
        compared.append(bool(plan.skewed))
        summed = [[*a, *b] for a, b in zip(left, right, strict=True)]
        single = plan_by_bytes("join", sizes_of(summed), Splitting.NO, **kw)
        assert [(t[0].start, t[-1].end) for t in plan.tasks] == list(single.ranges())
        assert plan.bytes_per_task == single.bytes_per_task
        check_join(plan, sizes_of(left), sizes_of(right))
    assert len(compared) >= 20 and any(compared), "some plans had skew that stayed whole"


@pytest.mark.parametrize("seed", range(25))
def test_random_joins_meet_every_pair_once_within_the_bounds(seed: int) -> None:
    rng = random.Random(seed)
    n, lm, rm = rng.randint(1, 40), rng.randint(0, 6), rng.randint(1, 6)
    left = [[rng.randint(0, 3000) for _ in range(lm)] for _ in range(n)]
    right = [[rng.randint(0, 3000) for _ in range(rm)] for _ in range(n)]
    # Hot partitions, each hot on one side or on both (then an inner join cuts both).
    for j in rng.sample(range(n), min(n, rng.randint(0, 3))):
        for rows, maps in ((left, lm), (right, rm)):
            if rng.random() < 0.7:
                rows[j] = [rng.randint(10_000, 90_000) for _ in range(maps)]
    v, lo, hi = rng.randint(2000, 60000), rng.randint(1, 4), rng.randint(4, 64)
    how = rng.choice(["inner", "inner", "left", "right_outer", "fullouter", "cross"])
    plan = plan_join(sizes_of(left), sizes_of(right), how, avg_bytes_per_task=v, min_p=lo,
                     max_p=hi, skew_threshold=rng.choice([0, 20_000, 1 << 30]))
    check_join(plan, sizes_of(left), sizes_of(right))
    k = len(plan.piece_tasks)
    # The tasks not reading a piece read contiguous runs of the partitions not split ...
    split = sorted({s.start for t in plan.tasks for s in t if s.is_piece})
    whole = [j for j in range(n) if j not in split]
    ranges = range_tasks(plan)
    assert [j for r in ranges for j in r] == whole
    # ... as many as the rule gives for their bytes, within the bounds less the piece tasks.
    rest = sum(left[j][m] for j in whole for m in range(lm)) + \
        sum(right[j][m] for j in whole for m in range(rm))
    top = max(1, hi - k)
    bottom = min(max(1, lo - k), top)
    assert len(ranges) <= min(max(math.ceil(rest / v), bottom), top)
    assert len(ranges) >= min(bottom, len(whole))
    assert plan.parallelism <= max(hi, k + 1)


def test_pieces_cover_each_split_partition_once_per_side() -> None:
    rows = [[KiB] * 6 for _ in range(10)]
    rows[4] = [30 * KiB, 1, 30 * KiB, 30 * KiB, 0, 10 * KiB]
    cut = cut_side(sizes_of(rows), "inner", "right", avg_bytes_per_task=32 * KiB,
                   skew_threshold=0)
    assert cut.splitting is Splitting.REPLICATE_OTHER_SIDE and cut.skewed == (4,)
    assert cut.ranges(4) == ((0, 2), (2, 3), (3, 5), (5, 6)) and cut.ranges(0) == ((0, 6),)
    assert "4 into 4" in cut.reason and "greedy" not in cut.reason, "no packing in the reason"
    kept = cut_side(sizes_of(rows), "leftouter", "right", avg_bytes_per_task=32 * KiB,
                    skew_threshold=0)
    assert kept.skewed == (4,) and not kept.pieces


def test_a_capped_count_makes_the_pieces_bigger() -> None:
    # 1036 KiB in all at V = 8 KiB would be 130 tasks; max-parallelism 8 makes each read
    # 129.5 KiB, so the 512 KiB partition (64 maps of 8 KiB) is cut into 4 pieces, not 64.
    left = [[64] * 64 for _ in range(16)]
    left[0] = [8 * KiB] * 64
    right = [[29 * KiB]] * 16
    plan = plan_join(sizes_of(left), sizes_of(right), avg_bytes_per_task=8 * KiB, min_p=1,
                     max_p=8, skew_threshold=0)
    check_join(plan, sizes_of(left), sizes_of(right))
    assert len(plan.piece_tasks) == 4 and plan.parallelism == 8
    assert "pieces hold at least 129.5 KiB" in plan.reason


def test_pieces_reaching_max_parallelism_leave_one_task_for_the_rest() -> None:
    left = [[KiB] * 8 for _ in range(6)]
    left[0] = [200 * KiB] * 8  # 1646 KiB in all, 411.5 KiB per task: pieces of 2 map outputs
    plan = plan_join(sizes_of(left), sizes_of([[KiB]] * 6), avg_bytes_per_task=64 * KiB,
                     min_p=1, max_p=4, skew_threshold=0)
    check_join(plan, sizes_of(left), sizes_of([[KiB]] * 6))
    assert len(plan.piece_tasks) == 4 and plan.parallelism == 5
    assert "less the 4 piece tasks: ceil(45 KiB / 64 KiB) = 1, within [1, 1]" in plan.reason


def test_empty_sides() -> None:
    none = plan_join(sizes_of([[]] * 4), sizes_of([[]] * 4), avg_bytes_per_task=KiB, min_p=1,
                     max_p=4)
    assert none.tasks == ((ReadSlice(0, 4), ReadSlice(0, 4, shuffle=1)),)
    one = plan_join(sizes_of([[]] * 4), sizes_of([[3 * KiB]] * 4), avg_bytes_per_task=KiB,
                    min_p=1, max_p=4, skew_threshold=0)
    check_join(one, sizes_of([[]] * 4), sizes_of([[3 * KiB]] * 4))
    assert one.parallelism == 4
    with pytest.raises(ValueError):
        plan_join(sizes_of([[1]] * 4), sizes_of([[1]] * 3), avg_bytes_per_task=1, min_p=1,
                  max_p=4)
    with pytest.raises(ValueError):
        plan_join(sizes_of([[1]]), sizes_of([[1]]), "sideways", avg_bytes_per_task=1, min_p=1,
                  max_p=4)


def test_even_join_plan_reads_the_same_ranges_from_both_shuffles() -> None:
    plan = plan_join_even(32, 76 * KiB, avg_bytes_per_task=8 * KiB, min_p=1, max_p=32,
                          why="sizes per partition unavailable")
    assert plan.method == EVEN_BY_COUNT and plan.parallelism == 10
    assert all(t == (ReadSlice(t[0].start, t[0].end),
                     ReadSlice(t[0].start, t[0].end, shuffle=1)) for t in plan.tasks)
    assert plan.reason.startswith("join: sizes per partition unavailable")
    assert plan.to_json()["tasks"][0] == ["0-3", "1:0-3"]


def test_smaller_side_first_orders_each_task_by_its_own_bytes() -> None:
    # Partition 2 is a hot left partition (split into pieces); partition 5's right side is
    # bigger than its left side, so the task reading it keeps its left side in memory.
    left = [[KiB] * 4 for _ in range(8)]
    left[2] = [40 * KiB] * 4
    right = [[KiB // 4] * 2 for _ in range(8)]
    right[5] = [20 * KiB] * 2
    ls, rs = sizes_of(left), sizes_of(right)
    plan = plan_join(ls, rs, avg_bytes_per_task=48 * KiB, min_p=1, max_p=8, skew_threshold=0)
    ordered, small = smaller_side_first(plan, ls, rs)
    check_join(ordered, ls, rs)  # the same cells, pairs and bytes per task
    assert ordered.reason == plan.reason and ordered.parallelism == plan.parallelism
    for before, after, kept in zip(plan.tasks, ordered.tasks, small, strict=True):
        assert sorted(before, key=repr) == sorted(after, key=repr), "only the order changes"
        sides = [s.shuffle for s in after]
        assert sides == sorted(sides, key=lambda x: x != sides[0]), "one side, then the other"
        per_side = {side: sum(sum(ls.by_partition[j][m] if side == LEFT
                                  else rs.by_partition[j][m] for m in r)
                              for j, r in _cells(after, side, ls, rs).items())
                    for side in (LEFT, RIGHT)}
        assert kept == per_side[sides[0]] == min(per_side.values())
    pieces = [t for t in ordered.tasks if any(s.is_piece for s in t)]
    assert pieces and all(t[0].shuffle == RIGHT for t in pieces), "the hot side streams"
    hot5 = next(t for t in ordered.tasks if any(s.start <= 5 < s.end for s in t))
    assert hot5[0].shuffle == LEFT, "partition 5's right side is the bigger one"


def test_smaller_side_first_on_a_tie_puts_the_right_side_first() -> None:
    rows = sizes_of([[KiB] * 2 for _ in range(4)])
    plan = plan_join(rows, rows, avg_bytes_per_task=64 * KiB, min_p=1, max_p=4)
    ordered, small = smaller_side_first(plan, rows, rows)
    assert [s.shuffle for s in ordered.tasks[0]] == [RIGHT, LEFT]
    assert small == (8 * KiB,)


def _cells(task: Sequence[ReadSlice], side: int, ls: ShuffleSizes, rs: ShuffleSizes
           ) -> dict[int, range]:
    maps = (ls, rs)[side].maps
    return {j: range(s.map_start, maps if s.map_end is None else s.map_end)
            for s in task if s.shuffle == side for j in range(s.start, s.end)}
