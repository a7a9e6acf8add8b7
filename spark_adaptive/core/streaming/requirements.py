"""A query's resource requirements: the bounds its parallelism must stay within.

Flink's per-vertex ``[lowerBound, upperBound]`` (FLIP-291), per query here.
The validation rules are Flink's REST rules for
``PUT /jobs/:id/resource-requirements``:

* ``-1`` means the default: 1 for the lower bound, the query's default upper
  bound for the upper bound;
* both bounds must be > 0;
* lower ≤ upper;
* upper ≤ max-parallelism.

Every broken rule is reported, not only the first: :class:`RequirementsError`
carries them all (the REST layer answers 400 with them).

:func:`parse_body` reads the JSON-decoded REST body
``{"parallelism": {"lowerBound": L, "upperBound": U}}``, again reporting every
problem at once; :func:`from_body` parses and validates in one go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_adaptive.errors import RequirementsError

DEFAULT = -1
"""The bound value that means "the default"."""

EMPTY_BODY = "Request body does not specify resource requirements."
_INCOMPLETE = "The resource requirements are incomplete."


@dataclass(frozen=True)
class ResourceRequirements:
    """Validated bounds: ``1 <= lower <= upper``."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not 1 <= self.lower <= self.upper:
            raise RequirementsError([f"invalid bounds [{self.lower}, {self.upper}]"])

    def to_dict(self) -> dict[str, dict[str, int]]:
        """The REST form, as GET returns it and PUT takes it."""
        return {"parallelism": {"lowerBound": self.lower, "upperBound": self.upper}}


def _bound_reasons(name: str, value: int, max_parallelism: int) -> list[str]:
    reasons = []
    if value <= 0 and value != DEFAULT:
        reasons.append(f"The {name} bound must be greater than 0 (or -1 for the default), "
                       f"got {value}.")
    if value > max_parallelism:
        reasons.append(f"The {name} bound {value} exceeds the max parallelism "
                       f"{max_parallelism}.")
    return reasons


def validate(
    lower: int | None,
    upper: int | None,
    *,
    max_parallelism: int,
    default_upper: int,
) -> ResourceRequirements:
    """Resolve ``-1`` defaults and check Flink's rules; raise with every reason.

    ``None`` stands for a bound that could not be read at all (its reason is
    already known to the caller); the other bound is still checked so that the
    caller can report everything at once. Any ``None`` makes this raise.
    """
    reasons: list[str] = []
    if lower is not None:
        reasons += _bound_reasons("lower", lower, max_parallelism)
    if upper is not None:
        reasons += _bound_reasons("upper", upper, max_parallelism)
    lo = 1 if lower == DEFAULT else lower
    hi = min(default_upper, max_parallelism) if upper == DEFAULT else upper
    if lo is not None and hi is not None and lo > 0 and hi > 0 and lo > hi:
        reasons.append(f"The lower bound {lo} is greater than the upper bound {hi}.")
    if reasons or lo is None or hi is None:
        raise RequirementsError(reasons or [_INCOMPLETE])
    return ResourceRequirements(lo, hi)


_FIELDS = ("lowerBound", "upperBound")


def parse_body(body: Any) -> tuple[int | None, int | None, list[str]]:
    """Read the bounds from a JSON-decoded body; return ``(lower, upper, reasons)``.

    A bound that is missing or of the wrong type comes back as ``None`` with its
    reason. JSON booleans are not integers, and neither is ``3.0``.
    """
    if body is None or body == "" or (isinstance(body, dict) and not body):
        return None, None, [EMPTY_BODY]
    if not isinstance(body, dict):
        return None, None, [f"The request body must be a JSON object, got {_json_type(body)}."]
    reasons = [f"Unknown field {key!r}; the body holds only 'parallelism'."
               for key in body if key != "parallelism"]
    if "parallelism" not in body:
        return None, None, [*reasons, "Missing field 'parallelism'."]
    inner = body["parallelism"]
    if not isinstance(inner, dict):
        return None, None, [*reasons, "Field 'parallelism' must be a JSON object with "
                            f"'lowerBound' and 'upperBound', got {_json_type(inner)}."]
    reasons += [f"Unknown field 'parallelism.{key}'; expected 'lowerBound' and 'upperBound'."
                for key in inner if key not in _FIELDS]
    values: list[int | None] = []
    for name in _FIELDS:
        if name not in inner:
            reasons.append(f"Missing field 'parallelism.{name}'.")
            values.append(None)
            continue
        v = inner[name]
        if isinstance(v, bool) or not isinstance(v, int):
            reasons.append(f"Field 'parallelism.{name}' must be an integer, got {_json_type(v)}.")
            values.append(None)
            continue
        values.append(v)
    return values[0], values[1], reasons


def from_body(body: Any, *, max_parallelism: int, default_upper: int) -> ResourceRequirements:
    """Parse and validate a REST body; raise :class:`RequirementsError` with every reason."""
    lower, upper, reasons = parse_body(body)
    try:
        requirements = validate(lower, upper, max_parallelism=max_parallelism,
                                default_upper=default_upper)
    except RequirementsError as e:
        raise RequirementsError([*reasons, *(r for r in e.reasons if r != _INCOMPLETE)]) from None
    if reasons:  # e.g. an unknown field beside two good bounds
        raise RequirementsError(reasons)
    return requirements


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, (int, float)):
        return f"a number ({v!r})"
    if isinstance(v, str):
        return f"a string ({v!r})"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__
