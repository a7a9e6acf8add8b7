"""The in-task hash join of :func:`spark_adaptive.batch.join`: one side in memory, the other
streamed, against a plain nested-loop join."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from spark_adaptive.batch.rdd import _hash_join

Pairs = list[tuple[int, Any]]


def reference(left: Pairs, right: Pairs, outer_left: bool) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for k, v in left:
        ws = [w for k2, w in right if k2 == k]
        for w in ws or ([None] if outer_left else []):
            out[(k, (v, w))] += 1
    return out


def task_records(left: Pairs, right: Pairs, right_first: bool) -> list[tuple[int, Any]]:
    tagged_left = [(k, (1, v)) for k, v in left]
    tagged_right = [(k, (2, w)) for k, w in right]
    return tagged_right + tagged_left if right_first else tagged_left + tagged_right


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("outer_left", [False, True])
@pytest.mark.parametrize("right_first", [False, True])
def test_equals_a_nested_loop_join(seed: int, outer_left: bool, right_first: bool) -> None:
    rng = random.Random(seed)
    keys = rng.randint(1, 20)
    # A hot key (0) on the left, duplicate keys on both sides, keys on one side only.
    left = [(0 if rng.random() < 0.3 else rng.randrange(keys), rng.random())
            for _ in range(rng.randint(0, 200))]
    right = [(rng.randrange(keys + 5), f"r{i}") for i in range(rng.randint(0, 40))]
    got = Counter(_hash_join(task_records(left, right, right_first), outer_left))
    assert got == reference(left, right, outer_left)


def test_one_side_alone() -> None:
    left = [(1, "a"), (2, "b"), (1, "c")]
    assert list(_hash_join(task_records(left, [], False), outer_left=False)) == []
    assert sorted(_hash_join(task_records(left, [], False), outer_left=True)) == [
        (1, ("a", None)), (1, ("c", None)), (2, ("b", None))]
    assert list(_hash_join(task_records([], [(1, "x")], True), outer_left=True)) == []
    assert list(_hash_join([], outer_left=True)) == []


def test_the_streamed_side_is_not_held() -> None:
    # A million left values of one key stream past one right value: nothing but the right
    # side is kept, so the join yields as it reads.
    def records() -> Any:
        yield 7, (2, "dim")
        for i in range(1_000_000):
            yield 7, (1, i)

    joined = _hash_join(records(), outer_left=False)
    assert next(joined) == (7, (0, "dim"))
    assert sum(1 for _ in joined) == 999_999
