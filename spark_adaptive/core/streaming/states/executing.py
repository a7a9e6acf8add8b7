"""Executing: the query runs; rescale it when its share changes, handle its end.

Resource and requirement changes feed the rescale rule
(:func:`~spark_adaptive.core.streaming.allocator.decide_rescale`):

* a **live** rescale (the partitions stay, the slots change) is carried out at
  once: it is recorded and the query keeps running. Live rescales are free (no
  stop, no replay), so they are not gated by the cooldown or the
  stabilization timeout; gating them would only leave the query on stale slot
  accounting;
* a **restart** rescale goes through this state's
  :class:`~spark_adaptive.core.streaming.timing.TransitionTiming` (cooldown after
  rescaling, executing stabilization timeout, rescale-trigger max delay) and
  then → Restarting(backoff 0, target parallelism).

Every completed micro-batch (``QueryProgress``) and ``QueryIdle`` is an
``on_trigger``: Spark commits a micro-batch the way Flink completes a
checkpoint, so this is Flink's FLIP-461 "rescale on a completed checkpoint".
The first completed micro-batch also completes a pending rescale record.

The query's first run (``initial``: the app's ``start()`` started it at once)
is timed as Flink times a job waiting for resources at submission: no
cooldown, and ``submission.resource-stabilization-timeout`` instead of the
executing one, so that it reaches the parallelism its resources allow about
as soon as a submission would have, while it already runs.

A restart onto more slots than the query runs on waits while executors that
joined are being warmed up (``scheduler.warm-up-new-executors``): the query
goes on running where it is meanwhile, and the restart follows at the first
completed micro-batch after the warm-up ended (at the latest the rescale
trigger's max delay later), so that its state repartition and first
micro-batch run on warm executors, its stop meets a batch boundary, and the
warm-up costs no downtime. A change meanwhile is decided afresh: a restart
onto fewer slots goes at once, and one no longer needed is dropped.

A scale-up smaller than ``min-parallelism-increase`` is held back; with
``scaling-interval.max`` set, it becomes a change like any other that long
after it was first seen (the timing machine still applies).

The query ends by itself: with an exception → restart strategy (Restarting or
Failing); without → Finished(FINISHED). ``cancel`` → Canceling;
stop-with-savepoint → StopWithSavepoint.
"""

from __future__ import annotations

import logging
from typing import Protocol

from spark_adaptive.core.clock import Action, Cancellable
from spark_adaptive.core.events import Event, QueryIdle, QueryProgress, QueryTerminated
from spark_adaptive.core.streaming.allocator import RescaleDecision, decide_rescale
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states.base import (
    HandlesFailures,
    HasHistory,
    HasParams,
    RunsIfState,
    SeesResources,
    State,
    StateName,
    ToCanceling,
    ToFailing,
    ToFinished,
    ToRestarting,
    ToStopWithSavepoint,
    restart_or_fail,
)
from spark_adaptive.core.streaming.timing import TransitionTiming

log = logging.getLogger(__name__)


class Context(ToRestarting, ToFailing, ToCanceling, ToStopWithSavepoint, ToFinished,
              RunsIfState, SeesResources, HasParams, HasHistory, HandlesFailures, Protocol):
    def record_live_rescale(self, decision: RescaleDecision, trigger: Trigger) -> None:
        """The query now runs its partitions on ``decision.target_slots`` slots."""
        ...


class Executing(State):
    name = StateName.EXECUTING

    def __init__(self, ctx: Context, parallelism: int, slots: int, *,
                 initial: bool = False) -> None:
        super().__init__()
        self._ctx = ctx
        self.parallelism = parallelism
        self.slots = slots
        self.initial = initial
        self._changed_by: Trigger | None = None  # REQUIREMENTS_CHANGED or AUTOSCALER
        self._held_back_since: float | None = None
        # A restart onto more slots deferred for a warm-up: "warming" until it ends, then
        # "next batch" until the next completed micro-batch (or the fallback timer).
        self._deferred: str | None = None
        self._deferred_timer: Cancellable | None = None
        self.timing = self._new_timing()
        # Changes that happened while the query was starting count now (Flink runs
        # onChange and onTrigger once on entry); not from the constructor, though.
        ctx.run_if_state(self, self._on_entry, 0.0)

    def _new_timing(self) -> TransitionTiming:
        p = self._ctx.params
        if self.initial:
            return TransitionTiming(
                self, self._ctx.now, cooldown=0.0, stabilization=p.submission_stabilization,
                max_trigger_delay=p.trigger_max_delay, label="Executing (first run)")
        return TransitionTiming(
            self, self._ctx.now, cooldown=p.cooldown, stabilization=p.executing_stabilization,
            max_trigger_delay=p.trigger_max_delay, label="Executing")

    def on_leave(self) -> None:
        self.timing.close()
        super().on_leave()

    def _on_entry(self) -> None:
        self.on_resources_changed()
        self.timing.on_trigger()

    # -- changes ----------------------------------------------------------------------
    def on_resources_changed(self) -> None:
        decision = self.decide()
        if decision.kind == "live":
            self._ctx.record_live_rescale(decision, self._trigger(decision))
            self.slots = decision.target_slots
            self._changed_by = None
        self._track_held_back(decision)
        if self._deferred is not None:
            if decision.kind != "restart" or decision.target_slots <= self.slots:
                self._end_deferral()
                self.transition_to_subsequent_state()  # decided afresh, now
            return
        self.timing.on_change()

    def on_requirements_changed(self, *, autoscaler: bool = False) -> None:
        self._changed_by = (self._autoscaler_trigger() if autoscaler
                            else Trigger.REQUIREMENTS_CHANGED)
        self.on_resources_changed()

    def decide(self) -> RescaleDecision:
        """The rescale rule applied to the query as it runs now."""
        p = self._ctx.params
        return decide_rescale(
            parallelism=self.parallelism, slots=self.slots, share=self._ctx.slot_share(),
            requirements=self._ctx.requirements, repartition=self._ctx.repartition_support(),
            min_parallelism_increase=p.min_parallelism_increase,
            held_back_since=self._held_back_since, now=self._ctx.now(),
            scaling_interval_max=p.scaling_interval_max,
            target_partitions=self._ctx.target_partitions)

    def _track_held_back(self, decision: RescaleDecision) -> None:
        if not (decision.held_back or decision.forced):
            self._held_back_since = None
            return
        if self._held_back_since is not None:
            return
        self._held_back_since = self._ctx.now()
        self._ctx.decide("hold back scale-up", decision.reason)
        limit = self._ctx.params.scaling_interval_max
        if limit is not None:
            self._ctx.run_if_state(self, self.on_resources_changed, limit)

    def _trigger(self, d: RescaleDecision) -> Trigger:
        """Why this rescale happens. A change of requirements or of the autoscaler's target
        is its trigger only for a rescale toward what that change asked for (the bounds'
        upper one, or the target's slots); a rescale away from it (an executor lost while
        the executors a scale-up asked for have not come) is the resources' doing, as in
        Flink, where a rescale carries the cause of the change that started it."""
        target = self._ctx.target
        if self._changed_by is not None and _toward(d, self._asked()):
            return self._changed_by
        if target is not None and (d.current_slots < d.target_slots <= target.slots
                                   or d.current_slots > d.target_slots >= target.slots):
            # Executors the autoscaler asked for join (or leave) one by one: each step
            # toward its target is its rescale.
            return self._autoscaler_trigger()
        if d.target_slots != d.current_slots:
            grew = d.target_slots > d.current_slots
        else:
            grew = d.target_parallelism > d.current_parallelism
        return Trigger.NEW_RESOURCES if grew else Trigger.RESOURCES_LOST

    def _autoscaler_trigger(self) -> Trigger:
        """FORECAST for a target set ahead of a forecast rise, else AUTOSCALER."""
        target = self._ctx.target
        return Trigger.FORECAST if target is not None and target.ahead else Trigger.AUTOSCALER

    def _asked(self) -> tuple[int, int]:
        """The slots and partitions the query's requirements and target ask for now: the
        upper bound, or the target's slots within [lower, QueryScheduler.slot_upper] (a
        change of either resets ``_changed_by``, so this is what the last change asked
        for)."""
        slots = self._ctx.allocation.upper
        partitions = self._ctx.target_partitions
        return slots, slots if partitions is None else partitions

    @property
    def restart_deferred(self) -> bool:
        """A restart onto more slots was decided and waits for a warm-up to end."""
        return self._deferred is not None

    def on_warm_up_ended(self) -> None:
        if self._deferred != "warming":
            return
        self._deferred = "next batch"
        self._deferred_timer = self._ctx.run_if_state(
            self, self._after_warm_up, self._ctx.params.trigger_max_delay)

    def _after_warm_up(self) -> None:
        if self._deferred == "next batch":
            self._end_deferral()
            self.transition_to_subsequent_state()

    def _end_deferral(self) -> None:
        self._deferred = None
        if self._deferred_timer is not None:
            self._deferred_timer.cancel()
            self._deferred_timer = None

    # -- the query's own events --------------------------------------------------------
    def on_query_event(self, event: Event) -> None:
        if isinstance(event, QueryProgress):
            self._ctx.history.complete_pending()
            self.timing.on_trigger()
            self._after_warm_up()
        elif isinstance(event, QueryIdle):
            self.timing.on_trigger()
            self._after_warm_up()
        elif isinstance(event, QueryTerminated):
            if event.exception is None:
                self._ctx.go_to_finished("FINISHED", "the query ended by itself")
            else:
                failure = Failure(event.exception, event.error_class, origin="query")
                restart_or_fail(self._ctx, failure, "the query failed")

    def cancel(self) -> None:
        self._ctx.go_to_canceling("cancel requested")

    def stop_with_savepoint(self) -> None:
        self._ctx.go_to_stop_with_savepoint("stop with savepoint requested")

    # -- TimingContext ----------------------------------------------------------------
    def has_sufficient_resources(self) -> bool:
        return self.decide().kind == "restart"

    def has_desired_resources(self) -> bool:
        return self.has_sufficient_resources() and self._ctx.has_desired_share(
            self._ctx.slot_share())

    def transition_to_subsequent_state(self) -> None:
        d = self.decide()
        if d.kind != "restart":  # the checks before this one ran on this same thread
            log.info("no restart rescale to carry out after all (%s); timing starts over",
                     d.reason)
            self.timing.close()
            self.timing = self._new_timing()
            return
        if d.target_slots > self.slots and self._ctx.warming_up():
            self._deferred = "warming"
            self._ctx.decide("wait for warm-up", (
                f"{d.reason}; executors that joined are being warmed up: the query runs on "
                f"at {self.parallelism} partitions until they are"))
            return
        self._ctx.go_to_restarting(
            d.reason, backoff=0.0, trigger=self._trigger(d),
            target_parallelism=d.target_parallelism, target_slots=d.target_slots)

    def schedule(self, action: Action, delay: float) -> Cancellable:
        return self._ctx.run_if_state(self, action, delay)


def _toward(d: RescaleDecision, asked: tuple[int, int]) -> bool:
    """``d`` moves the slots toward ``asked``'s slots, or the partitions toward its
    partitions, without passing them (a restart onto the partitions asked for is that
    change's even on fewer slots than before)."""
    slots, partitions = asked

    def moves(now: int, to: int, goal: int) -> bool:
        return now < to <= goal or now > to >= goal

    return (moves(d.current_slots, d.target_slots, slots)
            or moves(d.current_parallelism, d.target_parallelism, partitions))
