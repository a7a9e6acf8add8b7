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

The REST API reads its JSON body (:mod:`spark_adaptive.rest.wire`) and hands
the bounds it found to :func:`validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_adaptive.errors import RequirementsError

DEFAULT = -1
"""The bound value that means "the default"."""

INCOMPLETE = "The resource requirements are incomplete."
"""The reason :func:`validate` gives when a bound could not be read at all (the caller
knows why, and reports that instead)."""


@dataclass(frozen=True)
class ResourceRequirements:
    """Validated bounds: ``1 <= lower <= upper``."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not 1 <= self.lower <= self.upper:
            raise RequirementsError([f"invalid bounds [{self.lower}, {self.upper}]"])


@dataclass(frozen=True)
class ScalingTarget:
    """What the autoscaler wants of a query, within its bounds: the task slots to run on,
    and the partition count a restart rescale goes to (kept when it equals the current
    one: then the query is rescaled live)."""

    slots: int
    partitions: int
    ahead: bool = field(default=False, compare=False)
    """Set ahead of a rise the autoscaler's forecast shows: its rescales carry the trigger
    FORECAST. Not part of what the target is (the same slots and partitions are the same
    target)."""

    def __post_init__(self) -> None:
        if self.slots < 1 or self.partitions < 1:
            raise ValueError(f"invalid scaling target {self.slots} slots, "
                             f"{self.partitions} partitions")

    def within(self, bounds: ResourceRequirements, slot_upper: int,
               running_partitions: int) -> ScalingTarget:
        """This target brought within new ``bounds``: its slots between the lower bound and
        ``slot_upper`` (the most the query may be given), its partitions kept when the
        bounds hold them, else the ``running_partitions`` brought within them, so that
        new bounds restart the query only where the target already would have."""
        partitions = self.partitions
        if not bounds.lower <= partitions <= bounds.upper:
            partitions = max(bounds.lower, min(running_partitions, bounds.upper))
        return ScalingTarget(max(bounds.lower, min(self.slots, slot_upper)), partitions,
                             self.ahead)


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
        raise RequirementsError(reasons or [INCOMPLETE])
    return ResourceRequirements(lo, hi)
