"""The REST API's JSON shapes and Flink's PUT body, every reason at once."""

from __future__ import annotations

from typing import Any

import pytest

from spark_adaptive.core.streaming.requirements import ResourceRequirements, validate
from spark_adaptive.errors import RequirementsError
from spark_adaptive.rest.wire import (
    EMPTY_BODY,
    parse_requirements,
    requirements_from_body,
    requirements_json,
)


def from_body(body: Any, *, max_parallelism: int, default_upper: int) -> ResourceRequirements:
    """Read and validate a body with the core's rules, as the API does for a query."""
    return requirements_from_body(body, lambda lower, upper: validate(
        lower, upper, max_parallelism=max_parallelism, default_upper=default_upper))


def reasons(fn: Any, *args: Any, **kw: Any) -> list[str]:
    with pytest.raises(RequirementsError) as e:
        fn(*args, **kw)
    return e.value.reasons


def test_to_dict_is_the_rest_form() -> None:
    assert requirements_json(ResourceRequirements(2, 5)) == {
        "parallelism": {"lowerBound": 2, "upperBound": 5}}


# -- REST body ----------------------------------------------------------------------------
def body(lower: Any = 1, upper: Any = 4, **extra: Any) -> dict[str, Any]:
    return {"parallelism": {"lowerBound": lower, "upperBound": upper}, **extra}


def test_parse_good_body() -> None:
    assert parse_requirements(body(2, 3)) == (2, 3, [])
    assert from_body(body(2, 3), max_parallelism=128, default_upper=8) == ResourceRequirements(2, 3)


@pytest.mark.parametrize("empty", [None, {}, ""])
def test_empty_body(empty: Any) -> None:
    assert reasons(from_body, empty, max_parallelism=128, default_upper=8) == [EMPTY_BODY]


@pytest.mark.parametrize(("value", "what"), [
    ([1, 2], "must be a JSON object, got an array"),
    ("x", "must be a JSON object, got a string"),
    (7, "must be a JSON object, got a number"),
])
def test_body_not_an_object(value: Any, what: str) -> None:
    found = reasons(from_body, value, max_parallelism=128, default_upper=8)
    assert len(found) == 1 and what in found[0]


def test_missing_parallelism() -> None:
    found = reasons(from_body, {"other": 1}, max_parallelism=128, default_upper=8)
    assert found == ["Unknown field 'other'; the body holds only 'parallelism'.",
                     "Missing field 'parallelism'."]


def test_parallelism_not_an_object() -> None:
    found = reasons(from_body, {"parallelism": 3}, max_parallelism=128, default_upper=8)
    assert len(found) == 1 and "'parallelism' must be a JSON object" in found[0]


@pytest.mark.parametrize(("lower", "upper", "fragment"), [
    (True, 4, "'parallelism.lowerBound' must be an integer, got a boolean (true)"),
    (1, False, "'parallelism.upperBound' must be an integer, got a boolean (false)"),
    (1.0, 4, "'parallelism.lowerBound' must be an integer, got a number (1.0)"),
    ("2", 4, "'parallelism.lowerBound' must be an integer, got a string ('2')"),
    (None, 4, "'parallelism.lowerBound' must be an integer, got null"),
    ({}, 4, "'parallelism.lowerBound' must be an integer, got an object"),
])
def test_wrong_types(lower: Any, upper: Any, fragment: str) -> None:
    found = reasons(from_body, body(lower, upper), max_parallelism=128, default_upper=8)
    assert any(fragment in r for r in found), found


def test_missing_bounds_and_unknown_fields_all_reported() -> None:
    found = reasons(from_body, {"parallelism": {"lower": 1}, "x": 0},
                    max_parallelism=128, default_upper=8)
    assert found == [
        "Unknown field 'x'; the body holds only 'parallelism'.",
        "Unknown field 'parallelism.lower'; expected 'lowerBound' and 'upperBound'.",
        "Missing field 'parallelism.lowerBound'.",
        "Missing field 'parallelism.upperBound'.",
    ]


def test_type_error_and_rule_violation_of_the_other_bound_together() -> None:
    found = reasons(from_body, body(True, 500), max_parallelism=128, default_upper=8)
    assert len(found) == 2
    assert "must be an integer" in found[0]
    assert "exceeds the max parallelism" in found[1]


def test_unknown_field_beside_good_bounds_is_refused() -> None:
    found = reasons(from_body, body(1, 2, extra=1), max_parallelism=128, default_upper=8)
    assert found == ["Unknown field 'extra'; the body holds only 'parallelism'."]


def test_validation_reasons_from_a_well_formed_body() -> None:
    found = reasons(from_body, body(5, 2), max_parallelism=128, default_upper=8)
    assert found == ["The lower bound 5 is greater than the upper bound 2."]
