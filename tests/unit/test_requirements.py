"""Resource requirements: Flink's REST validation rules, every reason at once."""

from __future__ import annotations

from typing import Any

import pytest

from spark_adaptive.core.streaming.requirements import (
    ResourceRequirements,
    ScalingTarget,
    validate,
)
from spark_adaptive.errors import RequirementsError


def check(lower: int | None, upper: int | None, max_p: int = 128,
          default_upper: int = 8) -> ResourceRequirements:
    return validate(lower, upper, max_parallelism=max_p, default_upper=default_upper)


def reasons(fn: Any, *args: Any, **kw: Any) -> list[str]:
    with pytest.raises(RequirementsError) as e:
        fn(*args, **kw)
    return e.value.reasons


def test_valid_bounds() -> None:
    assert check(2, 6) == ResourceRequirements(2, 6)


def test_minus_one_means_defaults() -> None:
    assert check(-1, -1) == ResourceRequirements(1, 8)
    assert check(-1, 5) == ResourceRequirements(1, 5)


def test_default_upper_never_exceeds_max_parallelism() -> None:
    assert check(-1, -1, max_p=4, default_upper=8) == ResourceRequirements(1, 4)


@pytest.mark.parametrize(("lower", "upper", "fragment"), [
    (0, 4, "lower bound must be greater than 0"),
    (-5, 4, "lower bound must be greater than 0"),
    (1, 0, "upper bound must be greater than 0"),
    (5, 4, "lower bound 5 is greater than the upper bound 4"),
    (1, 200, "upper bound 200 exceeds the max parallelism 128"),
    (-1, 200, "upper bound 200 exceeds the max parallelism 128"),
])
def test_each_rule(lower: int, upper: int, fragment: str) -> None:
    found = reasons(check, lower, upper)
    assert any(fragment in r for r in found), found


def test_every_reason_is_reported() -> None:
    found = reasons(check, 0, 500)
    assert len(found) == 2
    assert "lower bound must be greater than 0" in found[0]
    assert "exceeds the max parallelism" in found[1]


def test_error_message_joins_reasons_with_newlines() -> None:
    with pytest.raises(RequirementsError) as e:
        check(300, 200)
    assert str(e.value) == "\n".join(e.value.reasons)
    assert len(e.value.reasons) == 3  # lower > max, upper > max, lower > upper


def test_requirements_value_refuses_invalid_bounds() -> None:
    with pytest.raises(RequirementsError):
        ResourceRequirements(3, 2)


@pytest.mark.parametrize("target, bounds, slot_upper, running, expected", [
    # within the bounds already: unchanged
    (ScalingTarget(4, 8), ResourceRequirements(1, 8), 8, 8, ScalingTarget(4, 8)),
    # slots above the new upper bound come down to it; partitions within it are kept
    (ScalingTarget(6, 4), ResourceRequirements(1, 4), 4, 8, ScalingTarget(4, 4)),
    # slots below the new lower bound come up to it
    (ScalingTarget(1, 8), ResourceRequirements(3, 8), 8, 8, ScalingTarget(3, 8)),
    # slots up to slot_upper (a stateless query's source tasks), not the bound's upper
    (ScalingTarget(20, 8), ResourceRequirements(1, 8), 16, 8, ScalingTarget(16, 8)),
    # partitions outside the bounds: the running ones, brought within them
    (ScalingTarget(16, 16), ResourceRequirements(1, 12), 12, 8, ScalingTarget(12, 8)),
    (ScalingTarget(16, 16), ResourceRequirements(1, 6), 6, 8, ScalingTarget(6, 6)),
    (ScalingTarget(2, 2), ResourceRequirements(4, 12), 12, 3, ScalingTarget(4, 4)),
])
def test_a_target_is_brought_within_new_bounds(
        target: ScalingTarget, bounds: ResourceRequirements, slot_upper: int, running: int,
        expected: ScalingTarget) -> None:
    assert target.within(bounds, slot_upper, running) == expected
