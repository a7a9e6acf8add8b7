"""Decisions as values: what the autoscaler concluded for one query, and from what.

A :class:`ScalingDecision` is frozen and made of plain fields (numbers,
strings, booleans, None), so the REST API can show it with
:meth:`ScalingDecision.as_dict` and a log line can quote its ``reason``.

Outcomes
--------
``not-ready``
    Nothing could be decided: stabilizing after a rescale, the window is not
    full yet, a rescale is in flight, or the inputs are missing or bad. The
    reason says which.
``no-change``
    The query's utilization is within the band, or no better slot count exists.
``scale-up`` / ``scale-down``
    A rescale to ``target_slots`` (and ``target_partitions``); ``kind`` is
    ``live`` (partitions kept, no restart) or ``restart`` (the partition count
    changes: stop, repartition the state, restart from the checkpoint).
``scale-down-pending``
    A scale-down is recommended but waits for ``scale-down.interval``; the
    target shown is the highest recommended so far.
``blocked``
    A scale-up was wanted but the effectiveness detection blocks it.

``applied`` is false for every outcome but ``scale-up``/``scale-down``, and for
those too in recommend-only mode (``autoscaler.scaling.enabled=false``). The
wiring rescales only when :attr:`ScalingDecision.actionable` is true.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal[
    "not-ready", "no-change", "scale-up", "scale-down", "scale-down-pending", "blocked"]
Kind = Literal["none", "live", "restart"]


@dataclass(frozen=True, slots=True)
class DecisionInputs:
    """The figures a decision was computed from; None where they were not available.

    Rates are rows per second, backlog in rows, times in seconds.
    """

    window_span: float = 0.0
    sample_count: int = 0
    input_rate: float | None = None
    input_rate_window: float | None = None
    input_rate_recent: float | None = None
    #: The input rate of the batch running now, from its offsets, when it set input_rate.
    input_rate_started: float | None = None
    backlog: float | None = None
    true_rate_per_slot: float | None = None
    rate_source: str = ""
    capacity: float | None = None
    target_rate: float | None = None
    utilization: float | None = None
    recommended_slots: float | None = None
    scalability_coefficient: float | None = None
    restart_downtime: float | None = None
    #: Seconds new executors are expected to take (tracked from live scale-ups).
    executor_startup: float | None = None
    #: The highest input rate forecast over the horizon ahead, when the forecast is in use
    #: (:mod:`.forecast`).
    forecast_rate: float | None = None


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """One evaluation's result for one query."""

    time: float
    outcome: Outcome
    kind: Kind
    current_slots: int
    target_slots: int
    current_partitions: int
    target_partitions: int
    reason: str
    applied: bool = False
    inputs: DecisionInputs = DecisionInputs()
    ahead: bool = False
    """A scale-up taken ahead of a forecast rise: its rescales carry the trigger FORECAST."""

    @property
    def actionable(self) -> bool:
        """The wiring should carry this decision out now."""
        return self.applied and self.outcome in ("scale-up", "scale-down")

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields, camelCase like the rest of the REST API."""
        out = {_camel(k): v for k, v in _shallow(self).items() if k != "inputs"}
        out["inputs"] = {_camel(k): v for k, v in _shallow(self.inputs).items()}
        return out

    def log_line(self) -> str:
        """The one INFO line each decision is logged as."""
        move = ""
        if self.target_slots != self.current_slots or (
                self.target_partitions != self.current_partitions):
            move = (f" {self.current_slots}->{self.target_slots} slots, "
                    f"{self.current_partitions}->{self.target_partitions} partitions"
                    f" ({self.kind})")
        flag = "" if self.applied or self.outcome not in ("scale-up", "scale-down") else (
            " [not applied]")
        return f"autoscaler {self.outcome}{move}{flag}: {self.reason}"


def make_decision(now: float, outcome: Outcome, kind: Kind, slots: int, partitions: int,
                  reason: str, inputs: DecisionInputs, target: tuple[int, int] | None,
                  scaling_enabled: bool, ahead: bool = False) -> ScalingDecision:
    """A decision at ``now``; one that would rescale is applied only when
    ``autoscaler.scaling.enabled``, else flagged as a recommendation in its reason."""
    acts = outcome in ("scale-up", "scale-down")
    applied = acts and scaling_enabled
    if acts and not applied:
        reason = f"recommend only (autoscaler.scaling.enabled=false): {reason}"
    ts, tp = target if target is not None else (slots, partitions)
    return ScalingDecision(now, outcome, kind, slots, ts, partitions, tp, reason, applied,
                           inputs, ahead and outcome == "scale-up")


def _shallow(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)
