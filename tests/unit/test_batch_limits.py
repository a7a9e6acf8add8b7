"""Per-call limits of the RDD helpers are checked before anything runs, and every error
names the limit (docs/batch.md: a limit at 0, or one that is not an integer, raises a
ValueError naming it; skew_factor is a number >= 1, as batch.skewed-factor)."""

from __future__ import annotations

from typing import Any

import pytest
from batch_fakes import FakeSC

from spark_adaptive.batch import plans, sources

COUNTS = ("avg_bytes_per_task", "min_parallelism", "max_parallelism", "skew_threshold")


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("value", [1.5, 2.7, 2.0, "3", True, [2]])
def test_a_count_that_is_not_an_integer_is_refused_not_truncated(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"{name} must be an integer"):
        plans.settings_for(FakeSC(), {name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("value", [0, -3])
def test_a_count_below_one_is_refused(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"{name} must be >= 1, got {value}"):
        plans.settings_for(FakeSC(), {name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, 0.5, -1, float("nan"), float("inf"), "high", True])
def test_a_skew_factor_that_is_not_a_number_of_at_least_one_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="skew_factor must be a"):
        plans.settings_for(FakeSC(), {"skew_factor": value})  # type: ignore[arg-type]


def test_valid_limits_apply_and_none_is_the_setting() -> None:
    p = plans.settings_for(FakeSC(), {  # type: ignore[arg-type]
        "avg_bytes_per_task": 1 << 20, "max_parallelism": 8, "skew_factor": 2,
        "skew_threshold": 4096, "min_parallelism": None})
    assert (p.avg_bytes_per_task, p.max_p, p.skew_factor, p.skew_threshold, p.min_p) == (
        1 << 20, 8, 2.0, 4096, 1)
    with pytest.raises(ValueError, match="min_parallelism must be <= max_parallelism"):
        plans.settings_for(FakeSC(), {"min_parallelism": 9, "max_parallelism": 8})  # type: ignore[arg-type]


def test_text_files_split_size_is_checked_too() -> None:
    with pytest.raises(ValueError, match="source_split_size must be an integer"):
        plans.settings_for(FakeSC(), {"source_split_size": 1.5},  # type: ignore[arg-type]
                           sources._SOURCE_LIMITS)
