"""WaitingForResources: the query does not run; wait until its share is worth starting.

Entered after a restart whose target parallelism is no longer available (a
query's first run never waits: the app's ``start()`` starts it at once). Driven
by its own :class:`~spark_adaptive.core.streaming.timing.TransitionTiming` with
the submission parameters: no cooldown,
``submission.resource-stabilization-timeout``, no trigger delay. So:

* desired resources (the share reaches the upper bound) start the query at once;
* merely sufficient ones (any share) start it once they held for the
  stabilization timeout;
* ``submission.resource-wait-timeout`` starts it anyway (CreatingExecutionGraph
  then fails the query if there is no share at all, as Flink does). Reactive
  mode waits forever.

Every resource or requirement change is an ``on_change`` followed by an
``on_trigger`` (there is no micro-batch to wait for). ``cancel`` →
Finished(CANCELED): no query runs.
"""

from __future__ import annotations

import math
from typing import Protocol

from spark_adaptive.core.clock import Action, Cancellable
from spark_adaptive.core.streaming.states.base import (
    HasParams,
    RunsIfState,
    SeesResources,
    State,
    StateName,
    ToCreatingExecutionGraph,
    ToFinished,
)
from spark_adaptive.core.streaming.timing import TransitionTiming


class Context(ToCreatingExecutionGraph, ToFinished, RunsIfState, SeesResources, HasParams,
              Protocol):
    pass


class WaitingForResources(State):
    name = StateName.WAITING_FOR_RESOURCES

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx
        p = ctx.params
        self.timing = TransitionTiming(
            self, ctx.now, cooldown=0.0, stabilization=p.submission_stabilization,
            max_trigger_delay=0.0, label="WaitingForResources")
        # State transitions are not allowed in constructors: look at the resources later.
        ctx.run_if_state(self, self.on_resources_changed, 0.0)
        if not math.isinf(p.resource_wait_timeout):
            ctx.run_if_state(self, self._resource_wait_timeout, p.resource_wait_timeout)

    def on_leave(self) -> None:
        self.timing.close()
        super().on_leave()

    def on_resources_changed(self) -> None:
        self.timing.on_change()
        self.timing.on_trigger()

    def on_requirements_changed(self, *, autoscaler: bool = False) -> None:
        self.on_resources_changed()

    def cancel(self) -> None:
        self._ctx.go_to_finished("CANCELED", "canceled while waiting for resources")

    def _resource_wait_timeout(self) -> None:
        self._ctx.go_to_creating_execution_graph(
            f"resource wait timeout ({self._ctx.params.resource_wait_timeout:g}s) reached with "
            f"a share of {self._ctx.slot_share()} slots", fail_without_resources=True)

    # -- TimingContext --------------------------------------------------------------
    def has_sufficient_resources(self) -> bool:
        return self._ctx.slot_share() is not None

    def has_desired_resources(self) -> bool:
        return self._ctx.has_desired_share(self._ctx.slot_share())

    def transition_to_subsequent_state(self) -> None:
        share = self._ctx.slot_share()
        if self._ctx.has_desired_share(share):
            why = f"desired resources available ({share} slots)"
        else:
            why = (f"sufficient resources ({share} slots) stable for "
                   f"{self._ctx.params.submission_stabilization:g}s")
        self._ctx.go_to_creating_execution_graph(why)

    def schedule(self, action: Action, delay: float) -> Cancellable:
        return self._ctx.run_if_state(self, action, delay)
