"""Byte-balanced subpartition ranges and skew splitting (Flink's flexible subpartition mapping)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from spark_adaptive.core.batch.ranges import (
    BISECTION,
    EVEN,
    GREEDY,
    OPERATION_SPLITTING,
    RangeAssignment,
    SkewAssignment,
    Splitting,
    balanced_ranges,
    even_ranges,
    greedy_ranges,
    join_side_splitting,
    split_skewed,
)

MiB, GiB = 1 << 20, 1 << 30


def assign(sizes: Sequence[int], v: int, lo: int = 1, hi: int = 128) -> RangeAssignment:
    return balanced_ranges(sizes, avg_bytes_per_task=v, min_p=lo, max_p=hi)


def simple_greedy(sizes: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """An independent, obviously correct greedy packer to check against."""
    out: list[tuple[int, int]] = []
    start, acc = 0, 0
    for i, s in enumerate(sizes):
        if i > start and acc + s > limit:
            out.append((start, i))
            start, acc = i, 0
        acc += s
    if sizes:
        out.append((start, len(sizes)))
    return out


def check_invariants(a: RangeAssignment, sizes: Sequence[int], lo: int, hi: int) -> None:
    n = len(sizes)
    # Contiguous, non-overlapping, every partition exactly once, none empty.
    pos = 0
    for s, e in a.ranges:
        assert s == pos and e > s, a.ranges
        pos = e
    assert pos == n
    assert a.parallelism == len(a.ranges)
    assert a.bytes_per_range == tuple(sum(sizes[s:e]) for s, e in a.ranges)
    if n:
        assert min(lo, n) <= a.parallelism <= min(hi, n)
    if a.method in (GREEDY, BISECTION):
        assert a.limit is not None
        for i, (s, e) in enumerate(a.ranges):
            # Over the limit only as a single partition.
            assert sum(sizes[s:e]) <= a.limit or e - s == 1
            # Closed only because the next partition did not fit.
            if i + 1 < len(a.ranges):
                assert sum(sizes[s:e]) + sizes[e] > a.limit
        if a.limit > 0:
            assert a.parallelism <= 2 * sum(sizes) / a.limit + 1
    else:
        lengths = [e - s for s, e in a.ranges]
        assert max(lengths) - min(lengths) <= 1


# -- even split (the blog's range formula) -----------------------------------------
def test_blog_figure_4_even_ranges() -> None:
    assert even_ranges(4, 2).ranges == ((0, 2), (2, 4))
    assert even_ranges(4, 3).ranges == ((0, 1), (1, 2), (2, 4))
    assert even_ranges(4, 3).bytes_per_range is None


def test_even_ranges_never_more_than_n_and_lengths_differ_by_one() -> None:
    a = even_ranges(3, 10)
    assert a.ranges == ((0, 1), (1, 2), (2, 3))
    assert "lowered from 10 because there are only 3 partitions" in a.reason
    assert even_ranges(0, 5).ranges == ()
    for n in range(60):
        for p in range(1, 70):
            r = even_ranges(n, p).ranges
            assert [s for s, _ in r][1:] == [e for _, e in r][:-1]
            if r:
                lengths = [e - s for s, e in r]
                assert r[0][0] == 0 and r[-1][1] == n and max(lengths) - min(lengths) <= 1
    with pytest.raises(ValueError):
        even_ranges(4, 0)
    with pytest.raises(ValueError):
        even_ranges(-1, 1)


# -- greedy packer ---------------------------------------------------------------
def test_greedy_closes_a_range_when_the_next_partition_would_exceed() -> None:
    assert greedy_ranges([10, 20, 30, 40, 50, 60], 60) == ((0, 3), (3, 4), (4, 5), (5, 6))
    assert greedy_ranges([10, 20, 30, 40, 50, 60], 59) == ((0, 2), (2, 3), (3, 4), (4, 5), (5, 6))
    assert greedy_ranges([], 10) == ()
    with pytest.raises(ValueError):
        greedy_ranges([1], -1)


def test_balanced_by_bytes_not_by_count() -> None:
    # 8 partitions, sizes uneven: an even split by count would give 2 ranges of
    # 220 and 20 MiB; by bytes every range stays within 64 MiB.
    sizes = [100 * MiB, 60 * MiB, 30 * MiB, 30 * MiB, 5 * MiB, 5 * MiB, 5 * MiB, 5 * MiB]
    a = assign(sizes, 64 * MiB)
    assert a.method == GREEDY
    assert a.ranges == ((0, 1), (1, 2), (2, 4), (4, 8))
    assert a.bytes_per_range == (100 * MiB, 60 * MiB, 60 * MiB, 20 * MiB)
    assert a.reason == "8 partitions, 240 MiB: greedy at 64 MiB per task gives 4 ranges, " \
                       "within [1, 8]"
    check_invariants(a, sizes, 1, 128)


def test_single_huge_partition_sits_alone() -> None:
    sizes = [MiB] * 5 + [10 * GiB] + [MiB] * 5
    a = assign(sizes, 64 * MiB)
    assert a.ranges == ((0, 5), (5, 6), (6, 11))
    assert a.max_range_bytes == 10 * GiB
    check_invariants(a, sizes, 1, 128)


def test_empty_partitions_are_absorbed() -> None:
    sizes = [0, 0, 40, 0, 0, 40, 0, 30, 0]
    a = assign(sizes, 50)
    assert a.ranges == ((0, 5), (5, 7), (7, 9))
    assert a.bytes_per_range == (40, 40, 30)
    check_invariants(a, sizes, 1, 128)


def test_all_zero_sizes() -> None:
    a = assign([0] * 16, 64 * MiB)
    assert (a.ranges, a.method) == (((0, 16),), GREEDY)
    # Asking for more tasks than any byte limit can give: even split by count.
    b = assign([0] * 16, 64 * MiB, lo=4)
    assert (b.ranges, b.method, b.limit) == (((0, 4), (4, 8), (8, 12), (12, 16)), EVEN, None)
    assert "no byte limit gives a count within [4, 16]" in b.reason


def test_no_partitions() -> None:
    a = assign([], 10, lo=3)
    assert (a.ranges, a.parallelism, a.bytes_per_range) == ((), 0, ())


# -- bisection to a legal parallelism ----------------------------------------------
def test_too_many_ranges_bisects_up_to_the_smallest_limit_giving_max() -> None:
    sizes = [10, 20, 30, 40, 50, 60]
    a = assign(sizes, 60, hi=2)
    assert (a.method, a.ranges, a.limit) == (BISECTION, ((0, 4), (4, 6)), 110)
    assert len(simple_greedy(sizes, 109)) == 3  # 110 is the smallest limit giving 2
    assert "the smallest limit giving the closest legal count 2 is 110 B" in a.reason
    check_invariants(a, sizes, 1, 2)


def test_too_few_ranges_bisects_down_to_reach_min() -> None:
    sizes = [10, 20, 30, 40, 50, 60]
    a = assign(sizes, 1000, lo=4)
    assert (a.method, a.ranges, a.limit) == (BISECTION, ((0, 3), (3, 4), (4, 5), (5, 6)), 60)
    assert len(simple_greedy(sizes, 59)) == 5
    check_invariants(a, sizes, 4, 128)


def test_count_jumping_over_the_bounds_falls_back_to_even() -> None:
    # Limits >= 100 give 1 range, every smaller limit 2: 3 is out of reach.
    sizes = [100, 0, 0, 0]
    a = assign(sizes, 1000, lo=3)
    assert a.method == EVEN
    assert a.ranges == ((0, 1), (1, 2), (2, 4))
    assert a.bytes_per_range == (100, 0, 0)


def test_fewer_partitions_than_min_gives_one_task_per_partition() -> None:
    a = assign([5, 6, 7], 100, lo=8)
    assert a.ranges == ((0, 1), (1, 2), (2, 3))


def test_invalid_arguments_raise() -> None:
    for kw in ({"v": 0}, {"lo": 0}, {"lo": 3, "hi": 2}):
        args = {"v": 10, "lo": 1, "hi": 5, **kw}
        with pytest.raises(ValueError):
            assign([1, 2], args["v"], args["lo"], args["hi"])
    with pytest.raises(ValueError, match=r"sizes\[1\] is negative"):
        assign([1, -2], 10)


# -- properties --------------------------------------------------------------------
def test_against_brute_force_over_every_limit() -> None:
    rng = random.Random(2024)
    for _ in range(1500):
        n = rng.randint(1, 12)
        sizes = [rng.choice([0, 0, rng.randint(1, 20), rng.randint(1, 60)]) for _ in range(n)]
        v = rng.randint(1, 40)
        lo = rng.randint(1, 14)
        hi = rng.randint(lo, 16)
        a = assign(sizes, v, lo, hi)
        check_invariants(a, sizes, lo, hi)

        total = sum(sizes)
        counts = {limit: len(simple_greedy(sizes, limit)) for limit in range(total + 1)}
        # The claim bisection relies on: the count never grows with the limit.
        assert all(counts[x] >= counts[x + 1] for x in range(total))
        legal_lo, legal_hi = min(lo, n), min(hi, n)
        first = len(simple_greedy(sizes, v))
        legal = {c for c in counts.values() if legal_lo <= c <= legal_hi}
        if legal_lo <= first <= legal_hi:
            assert (a.method, list(a.ranges)) == (GREEDY, simple_greedy(sizes, v))
        elif legal:
            want = max(legal) if first > legal_hi else min(legal)
            smallest = min(x for x, c in counts.items() if c == want)
            assert (a.method, a.parallelism, a.limit) == (BISECTION, want, smallest), (sizes, v)
            assert list(a.ranges) == simple_greedy(sizes, smallest)
        else:
            assert a.method == EVEN
            assert a.parallelism == min(max(math.ceil(total / v), legal_lo), legal_hi)


def test_invariants_on_larger_random_shuffles() -> None:
    rng = random.Random(99)
    for _ in range(300):
        n = rng.randint(1, 600)
        # Heavy-tailed sizes with empty partitions, like real shuffles.
        sizes = [0 if rng.random() < 0.2 else int(rng.paretovariate(1.2) * MiB) for _ in range(n)]
        lo = rng.randint(1, 50)
        hi = rng.randint(lo, 400)
        a = assign(sizes, rng.choice([MiB, 8 * MiB, 64 * MiB]), lo, hi)
        check_invariants(a, sizes, lo, hi)


def test_max_parallelism_sized_shuffle_is_fast_enough() -> None:
    rng = random.Random(1)
    sizes = [rng.randint(0, 4 * MiB) for _ in range(32768)]
    a = assign(sizes, MiB, lo=1, hi=1000)  # greedy gives ~65k ranges: bisection
    assert a.method == BISECTION and a.parallelism <= 1000
    check_invariants(a, sizes, 1, 1000)


# -- skew ------------------------------------------------------------------------------
def skew(rows: Sequence[Sequence[int]], v: int = 64 * MiB, lo: int = 1, hi: int = 128,
         splitting: Splitting = Splitting.MERGE, **kw: int) -> SkewAssignment:
    return split_skewed(rows, avg_bytes_per_task=v, min_p=lo, max_p=hi, splitting=splitting,
                        **kw)


def check_skew(a: SkewAssignment, rows: Sequence[Sequence[int]], lo: int, hi: int) -> None:
    maps = len(rows[0]) if rows else 0
    # Slices in order cover every (partition, map) cell exactly once.
    expected = [(j, 0) for j in range(len(rows))]
    pos = 0
    for j in range(len(rows)):
        m = 0
        for s in a.slices[pos:]:
            if s.partition != j:
                break
            assert s.map_start == m and s.map_end > s.map_start or maps == 0
            assert s.bytes == sum(rows[j][s.map_start:s.map_end])
            m, pos = s.map_end, pos + 1
        assert m == maps, (j, a.slices)
    assert pos == len(a.slices) and len(a.slices) >= len(expected)
    check_invariants(a.packing, [s.bytes for s in a.slices], lo, hi)
    assert sum(len(a.task_slices(t)) for t in range(a.parallelism)) == len(a.slices)


def test_skewed_partition_is_split_by_map_ranges() -> None:
    # 9 partitions of 10 MiB, one of 2 GiB from 20 maps of ~100 MiB.
    rows = [[MiB // 2] * 20 for _ in range(9)] + [[100 * MiB] * 20]
    rows[9][0] = 2 * MiB  # a small map output, packed with the partitions before it
    a = skew(rows)
    assert a.skewed == (9,)
    assert a.threshold_bytes == 256 * MiB  # max(4 x 10 MiB, 256 MiB)
    assert a.target_bytes == 64 * MiB  # max(V, mean of the rest = 10 MiB)
    pieces = [s for s in a.slices if s.partition == 9]
    assert [(s.map_start, s.map_end) for s in pieces] == [(0, 1)] + [(m, m + 1)
                                                                     for m in range(1, 20)]
    assert "split skewed partitions by map ranges of about 64 MiB (merge): 9 into 20" in a.reason
    check_skew(a, rows, 1, 128)
    # Without the split the 2 GiB partition would be one task.
    assert a.packing.max_range_bytes == 100 * MiB
    assert a.packing.ranges[:2] == ((0, 6), (6, 10))
    assert [(s.partition, s.map_start) for s in a.task_slices(1)] == [(6, 0), (7, 0), (8, 0),
                                                                       (9, 0)]
    assert a.parallelism == 2 + 19


def test_target_is_the_mean_of_the_non_skewed_when_above_v() -> None:
    rows = [[100 * MiB // 16] * 16 for _ in range(9)] + [[40 * MiB] * 16]
    a = skew(rows, v=16 * MiB)
    assert a.skewed == (9,)
    assert a.target_bytes == 100 * MiB
    assert a.threshold_bytes == 400 * MiB  # 4 x median 100 MiB beats 256 MiB
    pieces = [s for s in a.slices if s.partition == 9]
    assert [(s.map_start, s.map_end, s.bytes) for s in pieces] == [
        (m, m + 2, 80 * MiB) for m in range(0, 16, 2)]
    check_skew(a, rows, 1, 128)


def test_factor_times_median_can_hide_a_partition_above_the_byte_threshold() -> None:
    rows = [[100 * MiB] for _ in range(9)] + [[300 * MiB]]
    a = skew(rows)
    assert a.threshold_bytes == 400 * MiB and a.skewed == ()
    assert "no partition is skewed" in a.reason


def test_skewed_means_strictly_above_the_threshold() -> None:
    rows = [[32 * MiB, 32 * MiB] for _ in range(9)] + [[128 * MiB, 128 * MiB]]
    assert skew(rows).threshold_bytes == 256 * MiB  # 4 x 64 MiB == 256 MiB
    assert skew(rows).skewed == ()
    rows[9][1] += 1
    assert skew(rows).skewed == (9,)


def test_median_of_an_even_count_averages_the_middle_two() -> None:
    rows = [[10 * MiB], [20 * MiB], [40 * MiB], [GiB]]
    a = skew(rows, skew_threshold=0)
    assert a.threshold_bytes == 120 * MiB  # 4 x (20 + 40) / 2
    assert skew([[0], [0], [0]], skew_threshold=0).threshold_bytes == 4  # median floored at 1


def test_not_splittable_keeps_partitions_whole() -> None:
    rows = [[MiB] * 4 for _ in range(9)] + [[GiB] * 4]
    a = skew(rows, splitting=Splitting.NO)
    assert a.skewed == (9,)
    assert all((s.map_start, s.map_end) == (0, 4) for s in a.slices)
    assert a.packing == balanced_ranges([sum(r) for r in rows], avg_bytes_per_task=64 * MiB,
                                        min_p=1, max_p=128, unit="slice")
    assert "may not be split (no)" in a.reason


def test_single_map_cannot_be_split() -> None:
    rows = [[MiB] for _ in range(9)] + [[GiB]]
    a = skew(rows)
    assert a.skewed == (9,) and len(a.slices) == 10
    assert "no map range to split at" in a.reason


def test_split_respects_max_parallelism() -> None:
    rows = [[MiB] * 50 for _ in range(3)] + [[100 * MiB] * 50]
    a = skew(rows, hi=4)
    assert a.parallelism <= 4
    check_skew(a, rows, 1, 4)


def test_skew_defaults_and_validation() -> None:
    a = skew([[1, 2], [3, 4]])
    assert a.threshold_bytes == 256 * MiB and a.skewed == ()
    assert skew([]).parallelism == 0
    with pytest.raises(ValueError, match="has 1 map sizes, expected 2"):
        skew([[1, 2], [3]])
    with pytest.raises(ValueError):
        skew([[1, -1]])
    with pytest.raises(ValueError):
        skew([[1]], skew_factor=-1)


def test_skew_random_properties() -> None:
    rng = random.Random(77)
    for _ in range(400):
        n, maps = rng.randint(1, 30), rng.randint(1, 12)
        rows = [[rng.randint(0, 5 * MiB) for _ in range(maps)] for _ in range(n)]
        for j in rng.sample(range(n), k=min(n, rng.randint(0, 3))):
            rows[j] = [rng.randint(0, 200 * MiB) for _ in range(maps)]
        lo = rng.randint(1, 10)
        hi = rng.randint(lo, 60)
        splitting = rng.choice(list(Splitting))
        a = skew(rows, v=rng.choice([4 * MiB, 16 * MiB]), lo=lo, hi=hi, splitting=splitting,
                 skew_threshold=rng.choice([0, 32 * MiB, 256 * MiB]))
        check_skew(a, rows, lo, hi)
        totals = [sum(r) for r in rows]
        assert a.skewed == tuple(j for j, t in enumerate(totals) if t > a.threshold_bytes)
        for s in a.slices:
            whole = (s.map_start, s.map_end) == (0, maps)
            if not whole:
                assert splitting is not Splitting.NO and s.partition in a.skewed
                # A piece exceeds the target only as a single map output.
                assert s.bytes <= a.target_bytes or s.map_end - s.map_start == 1


# -- which operations may split --------------------------------------------------------
def test_operation_table() -> None:
    assert OPERATION_SPLITTING["reduceByKey"] is Splitting.MERGE
    assert OPERATION_SPLITTING["groupByKey"] is Splitting.MERGE
    assert OPERATION_SPLITTING["repartition"] is Splitting.INDEPENDENT
    assert OPERATION_SPLITTING["join"] is Splitting.NO
    assert OPERATION_SPLITTING["sortByKey"] is Splitting.NO


@pytest.mark.parametrize(
    ("how", "side", "expected"),
    [("inner", "left", True), ("inner", "right", True), ("cross", "right", True),
     ("left_outer", "left", True), ("left", "right", False), ("leftsemi", "left", True),
     ("anti", "left", True), ("right_outer", "right", True), ("rightouter", "left", False),
     ("full_outer", "left", False), ("outer", "right", False)],
)
def test_join_side_splitting_follows_aqe(how: str, side: str, expected: bool) -> None:
    got = join_side_splitting(how, side)
    assert got is (Splitting.REPLICATE_OTHER_SIDE if expected else Splitting.NO)


def test_join_side_splitting_rejects_unknown() -> None:
    with pytest.raises(ValueError):
        join_side_splitting("sideways", "left")
    with pytest.raises(ValueError):
        join_side_splitting("inner", "middle")
