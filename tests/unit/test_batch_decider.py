"""Adaptive Batch Scheduler parallelism rules: Flink's formula, bounds, options, sources."""

from __future__ import annotations

import math
import random

import pytest

from spark_adaptive.core.batch.decider import (
    BLOG_BROADCAST_RATIO_CAP,
    MIN_SPLIT_BYTES,
    ParallelismDecision,
    decide_parallelism,
    format_bytes,
    infer_source_parallelism,
    split_bytes_for,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
V = 64 * MiB


def decide(consumed: int, broadcast: int = 0, **kw: object) -> ParallelismDecision:
    args: dict[str, object] = {"avg_bytes_per_task": V, "min_p": 1, "max_p": 128}
    args.update(kw)
    return decide_parallelism(consumed, broadcast, **args)  # type: ignore[arg-type]


# -- Flink's formula and bounds ----------------------------------------------------
def test_ceil_of_bytes_over_volume_within_bounds() -> None:
    d = decide(int(1.2 * GiB))
    assert d.parallelism == 20
    assert d.computed == 20
    assert d.reason == "ceil(1.2 GiB / 64 MiB) = 20, within [1, 128]"
    assert (d.lower, d.upper, d.consumed_bytes) == (1, 128, int(1.2 * GiB))


def test_exact_multiple_does_not_round_up_one_byte_more_does() -> None:
    assert decide(2 * V).parallelism == 2
    assert decide(2 * V + 1).parallelism == 3
    assert decide(1).parallelism == 1


def test_clamped_to_max_parallelism() -> None:
    d = decide(20 * GiB)
    assert (d.parallelism, d.computed) == (128, 320)
    assert "clamped to max-parallelism 128" in d.reason


def test_raised_to_min_parallelism() -> None:
    d = decide(10 * MiB, min_p=4)
    assert (d.parallelism, d.computed) == (4, 1)
    assert "raised to min-parallelism 4" in d.reason


def test_stage_max_below_max_lowers_the_upper_bound() -> None:
    d = decide(20 * GiB, vertex_max=50)
    assert (d.parallelism, d.lower, d.upper) == (50, 1, 50)
    assert "stage max-parallelism 50 lowered the upper bound from 128" in d.reason


def test_stage_max_below_min_lowers_both_bounds() -> None:
    # Flink: vertexMax < min makes min = vertexMax, so the bounds never cross.
    d = decide(0, min_p=8, vertex_max=3)
    assert (d.parallelism, d.lower, d.upper) == (3, 3, 3)
    assert decide(GiB, min_p=8, vertex_max=3).parallelism == 3
    assert "and the lower bound from 8" in d.reason


def test_stage_max_above_max_changes_nothing() -> None:
    assert decide(20 * GiB, vertex_max=1000).parallelism == 128


def test_all_inputs_broadcast_gives_min() -> None:
    d = decide(0, 500 * MiB, min_p=2)
    assert d.parallelism == 2
    assert d.reason == "only broadcast input (500 MiB): min-parallelism 2"
    assert decide(0, 0, min_p=3).reason == "no input bytes: min-parallelism 3"


def test_broadcast_bytes_are_ignored_by_default() -> None:
    # Current Flink (FLINK-30670) counts only non-broadcast bytes.
    assert decide(100 * MiB, 10 * GiB).parallelism == 2


# -- the blog's broadcast cap ------------------------------------------------------
def test_broadcast_below_the_cap_is_charged_to_each_task() -> None:
    # Each task reads the 16 MiB broadcast side too, so 48 MiB remain per task.
    d = decide(96 * MiB, 16 * MiB, broadcast_ratio_cap=BLOG_BROADCAST_RATIO_CAP)
    assert d.parallelism == 2
    assert d.reason.startswith("ceil(96 MiB / (64 MiB - 16 MiB broadcast)) = 2")


def test_broadcast_above_the_cap_counts_only_up_to_cap_times_v() -> None:
    d = decide(96 * MiB, 48 * MiB, broadcast_ratio_cap=0.5)
    assert d.parallelism == 3  # 96 / (64 - 32)
    assert "capped at 0.5 x 64 MiB" in d.reason
    # However big the broadcast side, a task still reads (1 - cap) x V.
    assert decide(96 * MiB, 100 * GiB, broadcast_ratio_cap=0.5).parallelism == 3
    assert decide(96 * MiB, 100 * GiB, broadcast_ratio_cap=0.75).parallelism == 6


def test_cap_zero_is_the_same_as_no_cap() -> None:
    assert decide(96 * MiB, GiB, broadcast_ratio_cap=0.0).parallelism == 2


def test_cap_property_between_plain_and_reduced_budget() -> None:
    rng = random.Random(7)
    for _ in range(500):
        b, bc = rng.randrange(0, 50 * GiB), rng.randrange(0, 4 * GiB)
        cap = rng.choice([0.1, 0.25, 0.5, 0.9])
        got = decide(b, bc, max_p=10**6, broadcast_ratio_cap=cap).computed
        assert got is not None
        assert math.ceil(b / V) <= got <= math.ceil(b / (V - math.ceil(cap * V)))


# -- power-of-two normalization ----------------------------------------------------
@pytest.mark.parametrize(
    ("computed_bytes", "expected"),
    [(1, 1), (2 * V, 2), (3 * V, 4), (5 * V, 4), (6 * V, 8), (7 * V, 8), (20 * V, 16),
     (24 * V, 32), (23 * V, 16), (12 * V, 16), (11 * V, 8)],
)
def test_normalized_to_the_closest_power_of_two_ties_up(computed_bytes: int, expected: int) -> None:
    assert decide(computed_bytes, normalize_power_of_two=True).parallelism == expected


def test_blog_figure_4_three_tasks_over_four_partitions_become_four() -> None:
    d = decide(3 * V, max_p=4, normalize_power_of_two=True)
    assert d.parallelism == 4
    assert "normalized to the power of two 4" in d.reason


def test_normalization_rounds_the_bounds_inwards() -> None:
    d = decide(1300 * MiB, min_p=3, max_p=100, normalize_power_of_two=True)
    assert (d.lower, d.upper, d.parallelism) == (4, 64, 16)
    assert decide(100 * GiB, max_p=100, normalize_power_of_two=True).parallelism == 64
    assert decide(1, min_p=3, normalize_power_of_two=True).parallelism == 4


def test_normalization_skipped_when_no_power_of_two_fits() -> None:
    d = decide(GiB, min_p=5, max_p=7, normalize_power_of_two=True)
    assert (d.parallelism, d.lower, d.upper) == (7, 5, 7)
    assert "no power of two within [5, 7]" in d.reason


def test_normalization_property() -> None:
    rng = random.Random(11)
    for _ in range(1000):
        lo = rng.randint(1, 40)
        hi = rng.randint(lo, 300)
        d = decide(rng.randrange(0, 40 * GiB), min_p=lo, max_p=hi, normalize_power_of_two=True,
                   vertex_max=rng.choice([None, rng.randint(1, 300)]))
        assert d.lower <= d.parallelism <= d.upper
        if d.lower & (d.lower - 1) == 0 and "no power of two" not in d.reason:
            assert d.parallelism & (d.parallelism - 1) == 0, d


# -- general properties ------------------------------------------------------------
def test_random_cases_match_the_rule() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        v = rng.choice([1, 1000, 16 * MiB, V])
        lo = rng.randint(1, 20)
        hi = rng.randint(lo, 200)
        vmax = rng.choice([None, rng.randint(1, 250)])
        b = rng.randrange(0, 300 * v)
        d = decide_parallelism(b, avg_bytes_per_task=v, min_p=lo, max_p=hi, vertex_max=vmax)
        upper = hi if vmax is None else min(hi, vmax)
        lower = lo if vmax is None else min(lo, vmax)
        assert (d.lower, d.upper) == (lower, upper)
        assert d.parallelism == min(max(math.ceil(b / v), lower), upper)
        # Each task reads at most V unless clamped at the top, and no task
        # could be dropped unless the floor demanded it.
        if d.parallelism < upper:
            assert d.parallelism * v >= b
        if d.parallelism > lower:
            assert (d.parallelism - 1) * v < b
        # More bytes never mean fewer tasks.
        more = decide_parallelism(b + v, avg_bytes_per_task=v, min_p=lo, max_p=hi,
                                  vertex_max=vmax)
        assert more.parallelism >= d.parallelism


@pytest.mark.parametrize(
    "kw",
    [{"avg_bytes_per_task": 0}, {"min_p": 0}, {"min_p": 5, "max_p": 4}, {"vertex_max": 0},
     {"broadcast_ratio_cap": 1.0}, {"broadcast_ratio_cap": -0.1}],
)
def test_invalid_arguments_raise(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        decide(GiB, 0, **kw)


def test_negative_bytes_raise() -> None:
    with pytest.raises(ValueError, match="consumed_bytes"):
        decide(-1)
    with pytest.raises(ValueError, match="broadcast_bytes"):
        decide(1, -1)


def test_decision_is_frozen() -> None:
    d = decide(GiB)
    with pytest.raises(AttributeError):
        d.parallelism = 3  # type: ignore[misc]


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(64 * MiB) == "64 MiB"
    assert format_bytes(1536 * KiB) == "1.5 MiB"
    assert format_bytes(int(1.2 * GiB)) == "1.2 GiB"
    assert format_bytes(3 << 40) == "3 TiB"
    assert format_bytes(5000 << 40) == "5000 TiB"


# -- sources -----------------------------------------------------------------------
def src(b: int | None, upper: int = 128, default: int | None = None) -> ParallelismDecision:
    return infer_source_parallelism(b, avg_bytes_per_task=V, upper_bound=upper,
                                    default_source_parallelism=default)


def test_source_with_known_size() -> None:
    d = src(int(1.2 * GiB))
    assert (d.parallelism, d.computed, d.upper) == (20, 20, 128)
    assert d.reason == "source: ceil(1.2 GiB / 64 MiB) = 20, within [1, 128]"


def test_source_size_is_capped_by_default_source_parallelism() -> None:
    # Flink's inference upper bound is min(default source parallelism, max).
    d = src(10 * GiB, default=8)
    assert (d.parallelism, d.upper) == (8, 8)
    assert "capped at default source parallelism 8" in d.reason


def test_source_size_capped_by_max_when_default_is_higher() -> None:
    d = src(100 * GiB, upper=128, default=500)
    assert d.parallelism == 128
    assert "max-parallelism 128 (below default source parallelism 500)" in d.reason


def test_empty_source_gets_one_task() -> None:
    d = src(0)
    assert d.parallelism == 1
    assert d.reason.endswith("raised to 1")


def test_source_of_unknown_size_gets_default_then_max() -> None:
    assert src(None, default=16).parallelism == 16
    assert src(None, default=16).reason == "source size unknown: default source parallelism 16"
    assert src(None).parallelism == 128
    assert src(None).reason == "source size unknown: max-parallelism 128"
    assert src(None, upper=10, default=16).parallelism == 10
    assert src(None).consumed_bytes is None and src(None).computed is None


def test_source_invalid_arguments_raise() -> None:
    with pytest.raises(ValueError):
        src(GiB, upper=0)
    with pytest.raises(ValueError):
        src(GiB, default=0)
    with pytest.raises(ValueError):
        src(-1)
    with pytest.raises(ValueError):
        infer_source_parallelism(1, avg_bytes_per_task=0, upper_bound=1,
                                 default_source_parallelism=None)


# -- split size for file sources ---------------------------------------------------
def test_split_bytes_for() -> None:
    assert split_bytes_for(10 * GiB, 160) == V
    assert split_bytes_for(10 * GiB + 1, 160) == V + 1
    assert split_bytes_for(10 * MiB, 100) == MIN_SPLIT_BYTES
    assert split_bytes_for(0, 1) == MIN_SPLIT_BYTES
    with pytest.raises(ValueError):
        split_bytes_for(GiB, 0)
    with pytest.raises(ValueError):
        split_bytes_for(-1, 1)


def test_split_bytes_round_trip_from_source_decision() -> None:
    rng = random.Random(5)
    for _ in range(1000):
        b = rng.randrange(0, 200 * GiB)
        p = src(b, upper=rng.randint(1, 512)).parallelism
        split = split_bytes_for(b, p)
        assert split >= MIN_SPLIT_BYTES
        # Never more splits than tasks decided; exactly as many unless the floor applies.
        splits = max(1, math.ceil(b / split))
        assert splits <= p
        if b // p >= MIN_SPLIT_BYTES:
            assert splits == p
