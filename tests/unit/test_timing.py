"""The rescale-timing machine (Flink's DefaultStateTransitionManager) on virtual time."""

from __future__ import annotations

import pytest

from spark_adaptive.core.clock import Action, Cancellable, VirtualTime
from spark_adaptive.core.streaming.timing import (
    Cooldown,
    Idling,
    Stabilized,
    Stabilizing,
    Transitioning,
    TransitionTiming,
)


class Ctx:
    """A TimingContext whose resources the test sets; counts transitions."""

    def __init__(self, vt: VirtualTime) -> None:
        self.vt = vt
        self.sufficient = False
        self.desired = False
        self.transitions: list[float] = []

    def has_sufficient_resources(self) -> bool:
        return self.sufficient

    def has_desired_resources(self) -> bool:
        return self.desired

    def transition_to_subsequent_state(self) -> None:
        self.transitions.append(self.vt.now())

    def schedule(self, action: Action, delay: float) -> Cancellable:
        return self.vt.call_later(delay, action)

    def sufficient_change(self) -> None:
        self.sufficient, self.desired = True, False

    def desired_change(self) -> None:
        self.sufficient, self.desired = True, True


def machine(vt: VirtualTime, ctx: Ctx, *, cooldown: float = 30.0, stabilization: float = 60.0,
            max_delay: float = 0.0) -> TransitionTiming:
    return TransitionTiming(ctx, vt.now, cooldown=cooldown, stabilization=stabilization,
                            max_trigger_delay=max_delay)


@pytest.fixture
def ctx(vt: VirtualTime) -> Ctx:
    return Ctx(vt)


# -- Cooldown ---------------------------------------------------------------------------
def test_starts_in_cooldown_and_ignores_triggers(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx)
    ctx.desired_change()
    m.on_change()
    m.on_trigger()
    vt.advance(29.9)
    assert isinstance(m.phase, Cooldown)
    assert ctx.transitions == []


def test_cooldown_without_change_goes_idling(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx)
    vt.advance(30)
    assert isinstance(m.phase, Idling)


def test_insufficient_change_in_cooldown_is_not_recorded(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx)
    m.on_change()  # not sufficient
    vt.advance(30)
    assert isinstance(m.phase, Idling)


def test_cooldown_counts_from_entering_and_first_change_keeps_its_time(
        vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=30, stabilization=60)
    vt.advance(10)
    ctx.sufficient_change()
    m.on_change()  # first change at t=10
    vt.advance(20)  # t=30: cooldown over
    assert isinstance(m.phase, Stabilizing)
    assert m.phase.first_change == 10
    vt.advance(39.9)  # t=69.9: 10 + 60 not reached yet
    assert isinstance(m.phase, Stabilizing)
    vt.advance(0.1)  # t=70
    # Stabilized schedules the trigger at first change + max delay (past), so at once.
    assert ctx.transitions == [70]


def test_desired_change_in_cooldown_transitions_right_after_it(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=30)
    vt.advance(5)
    ctx.desired_change()
    m.on_change()
    vt.advance(25)
    assert ctx.transitions == [30]
    assert isinstance(m.phase, Transitioning)


# -- Idling -----------------------------------------------------------------------------
def test_idling_goes_stabilizing_on_sufficient_change_only(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0)
    vt.run_pending()
    m.on_change()
    m.on_trigger()
    assert isinstance(m.phase, Idling)
    ctx.sufficient_change()
    m.on_change()
    assert isinstance(m.phase, Stabilizing)
    assert m.phase.first_change == 0


# -- Stabilizing ------------------------------------------------------------------------
def test_stabilizing_transitions_on_trigger_only_with_desired_resources(
        vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, max_delay=100)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()
    m.on_trigger()
    assert ctx.transitions == []
    ctx.desired = True
    vt.advance(1)
    m.on_trigger()
    assert ctx.transitions == [1]


def test_stabilization_deadline_is_not_moved_by_later_changes(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=60, max_delay=0)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()  # first change t=0
    for _ in range(5):
        vt.advance(10)
        m.on_change()
    vt.advance(10)  # t=60
    assert ctx.transitions == [60]


def test_each_change_schedules_an_evaluation_at_change_plus_max_delay(
        vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=1000, max_delay=6)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()  # t=0, evaluation at 6
    vt.advance(4)
    ctx.desired = True
    m.on_change()  # t=4; the t=6 evaluation is still pending, no second one yet
    vt.advance(1.9)
    assert ctx.transitions == []
    vt.advance(0.1)  # t=6: the evaluation sees desired resources
    assert ctx.transitions == [6]


def test_evaluation_after_the_pending_one_uses_the_last_change(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=1000, max_delay=6)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()  # t=0, evaluation at 6 (not desired then)
    vt.advance(6)
    vt.advance(1)
    ctx.desired = True
    m.on_change()  # t=7 -> evaluation at 13
    vt.advance(5.9)
    assert ctx.transitions == []
    vt.advance(0.1)
    assert ctx.transitions == [13]


def test_revoked_change_in_stabilizing_then_sufficient_in_stabilized(
        vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=60, max_delay=10)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()
    vt.advance(20)
    ctx.sufficient = False  # the resources went away again
    m.on_change()
    vt.advance(40)  # t=60: Stabilized, trigger due at 0 + 10 (past): not sufficient -> Idling
    assert isinstance(m.phase, Idling)
    assert ctx.transitions == []
    ctx.sufficient_change()
    m.on_change()
    assert isinstance(m.phase, Stabilizing)
    assert m.phase.first_change == 60


# -- Stabilized -------------------------------------------------------------------------
def test_stabilized_waits_for_trigger_up_to_first_change_plus_max_delay(
        vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=10, max_delay=30)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()  # t=0
    vt.advance(10)
    assert isinstance(m.phase, Stabilized)
    m.on_change()  # ignored in Stabilized
    vt.advance(19.9)
    assert ctx.transitions == []
    vt.advance(0.1)  # t=30 = first change + max delay
    assert ctx.transitions == [30]


def test_stabilized_trigger_transitions_early(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=10, max_delay=30)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()
    vt.advance(12)
    m.on_trigger()  # a micro-batch completed
    assert ctx.transitions == [12]


def test_stabilized_trigger_without_sufficient_resources_goes_idling(
        vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=10, max_delay=30)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()
    vt.advance(10)
    ctx.sufficient = False
    m.on_trigger()
    assert isinstance(m.phase, Idling)
    vt.advance(100)
    assert ctx.transitions == []


# -- Transitioning, stale timers, close --------------------------------------------------
def test_transitioning_is_terminal(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0)
    vt.run_pending()
    ctx.desired_change()
    m.on_change()
    vt.run_pending()
    assert ctx.transitions == [0]
    m.on_change()
    m.on_trigger()
    vt.advance(1000)
    assert ctx.transitions == [0]
    with pytest.raises(RuntimeError, match="already been triggered"):
        m.progress_to_idling()


def test_timer_of_a_left_phase_does_nothing(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=0, stabilization=10, max_delay=5)
    vt.run_pending()
    ctx.sufficient_change()
    m.on_change()
    vt.advance(10)  # Stabilized; its trigger is due at 5 -> at once
    stale = Stabilizing(m, 0.0, 10.0)  # a phase object that is not current
    ran: list[bool] = []
    m.run_if_phase(stale, lambda: ran.append(True))
    assert ran == []


def test_close_cancels_every_timer(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=30)
    ctx.desired_change()
    m.on_change()
    m.close()
    vt.advance(1000)
    assert ctx.transitions == []
    assert vt.pending() == []


def test_infinite_timeouts_never_fire(vt: VirtualTime, ctx: Ctx) -> None:
    m = machine(vt, ctx, cooldown=float("inf"))
    ctx.desired_change()
    m.on_change()
    vt.advance(1e9)
    assert isinstance(m.phase, Cooldown)
    assert vt.pending() == []


def test_negative_parameters_are_refused(vt: VirtualTime, ctx: Ctx) -> None:
    with pytest.raises(ValueError, match="cooldown"):
        machine(vt, ctx, cooldown=-1)
