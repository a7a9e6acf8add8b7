"""A fake streaming query on virtual time that feeds an autoscaler policy.

Every trigger interval it completes one micro-batch whose figures follow from
the load and the query's capacity, exactly, so tests can assert exact targets:

* ``rate`` rows/s arrive; a batch reads ``rate x trigger`` rows (plus any
  ``extra_rows``);
* each busy slot processes ``per_slot(s)`` rows/s (``per_slot`` may be a
  number or a function of the effective slots, for sub-linear scaling);
* busy time is rows / per-slot rate; the batch takes rows / capacity seconds
  (never less than ``min_duration``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_adaptive.core.autoscaler import (
    AutoscalerConfig,
    LoadSample,
    QueryAutoscaler,
    QueryView,
    ScalingDecision,
)
from spark_adaptive.core.autoscaler.window import effective_slots

#: Round numbers, so that expected targets can be computed by hand.
BASE: dict[str, Any] = dict(
    enabled=True, evaluation_interval=10.0, metrics_window=60.0, stabilization_interval=30.0,
    utilization_target=0.8, utilization_min=0.5, utilization_max=0.9,
    scale_down_interval=120.0, catch_up_duration=100.0, restart_time=10.0,
    executor_startup_time=0.0, restart_time_tracking=False, observed_scalability=False,
    effectiveness_detection=False,
    scale_down_max_factor=0.9)


def config(**overrides: Any) -> AutoscalerConfig:
    return AutoscalerConfig(**{**BASE, **overrides})


@dataclass
class FakeQuery:
    policy: QueryAutoscaler
    rate: float
    per_slot: float | Callable[[float], float]
    slots: int
    partitions: int
    trigger: float = 5.0
    t: float = 0.0
    backlog: float | None = None  # reported with every batch when not None
    busy: bool = True
    lower: int = 1
    upper: int = 240
    can_restart: bool = True
    max_useful_slots: int | None = None
    slots_per_executor: int = 1
    cluster_max_slots: int | None = None
    downtimes: list[float] = field(default_factory=list)
    batch: int = 0
    decisions: list[ScalingDecision] = field(default_factory=list)

    def busy_slots(self) -> float:
        """A stateless query runs its source's partitions' tasks, whatever its partitions."""
        cap = self.max_useful_slots
        return effective_slots(self.slots, self.partitions if cap is None else cap)

    def rate_per_slot(self) -> float:
        eff = self.busy_slots()
        return self.per_slot(eff) if callable(self.per_slot) else self.per_slot

    def capacity(self) -> float:
        return self.rate_per_slot() * self.busy_slots()

    def sample(self, **overrides: Any) -> LoadSample:
        rows = self.rate * self.trigger
        r = self.rate_per_slot()
        duration = max(0.5, rows / self.capacity())
        fields: dict[str, Any] = dict(
            time=self.t, slots=self.slots, partitions=self.partitions, batch_id=self.batch,
            num_input_rows=rows, input_rows_per_second=self.rate,
            processed_rows_per_second=rows / duration, batch_duration=duration,
            trigger_interval=self.trigger, backlog=self.backlog,
            busy_time=rows / r if self.busy else None)
        fields.update(overrides)
        return LoadSample(**fields)

    def run(self, seconds: float, **overrides: Any) -> None:
        """Complete one batch per trigger for ``seconds`` of virtual time."""
        end = self.t + seconds
        while self.t + self.trigger <= end + 1e-9:
            self.t += self.trigger
            self.batch += 1
            self.policy.observe(self.sample(**overrides))
        self.t = end

    def view(self, **overrides: Any) -> QueryView:
        fields: dict[str, Any] = dict(
            now=self.t, slots=self.slots, partitions=self.partitions, lower=self.lower,
            upper=self.upper, max_useful_slots=self.max_useful_slots,
            can_restart=self.can_restart, restart_downtimes=tuple(self.downtimes),
            slots_per_executor=self.slots_per_executor,
            cluster_max_slots=self.cluster_max_slots)
        fields.update(overrides)
        return QueryView(**fields)

    def evaluate(self, **overrides: Any) -> ScalingDecision:
        d = self.policy.evaluate(self.view(**overrides))
        self.decisions.append(d)
        return d

    def run_and_evaluate(self, seconds: float, every: float = 10.0) -> list[ScalingDecision]:
        """Alternate ``every`` seconds of batches with one evaluation."""
        out = []
        end = self.t + seconds
        while self.t + every <= end + 1e-9:
            self.run(every)
            out.append(self.evaluate())
        return out

    def apply(self, d: ScalingDecision, downtime: float = 3.0,
              startup: float | None = None) -> None:
        """Carry a decision out at once and tell the policy it completed (a live one whose
        executors took ``startup`` seconds, if given)."""
        self.slots, self.partitions = d.target_slots, d.target_partitions
        if d.kind == "restart":
            self.downtimes.append(downtime)
        self.policy.on_rescale_completed(self.t, slots=self.slots, partitions=self.partitions,
                                         kind=d.kind, downtime=downtime, startup=startup)


def make(cfg: AutoscalerConfig | None = None, **kw: Any) -> FakeQuery:
    policy = QueryAutoscaler(cfg or config(), "q", started_at=0.0)
    return FakeQuery(policy=policy, **kw)


def first_action(decisions: list[ScalingDecision]) -> ScalingDecision | None:
    return next((d for d in decisions if d.outcome in ("scale-up", "scale-down")), None)
