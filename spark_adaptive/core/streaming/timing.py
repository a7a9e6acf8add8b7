"""When to act on a change of resources: the rescale-timing machine.

This is Flink's ``DefaultStateTransitionManager``, one instance per scheduler
state that can move on (``WaitingForResources`` and ``Executing``). It only
knows *when*; *whether* and *where to* come from its :class:`TimingContext`.
Two events drive it:

* :meth:`TransitionTiming.on_change`: the environment changed in a way that a
  transition could be considered (executors came or went, requirements
  changed);
* :meth:`TransitionTiming.on_trigger`: a good moment to act has come (a
  micro-batch completed, which is Spark's checkpoint, or the query is idle).

::

    enter state
        |
        v
    Cooldown --- cooldown over, no sufficient change seen ---> Idling <-------+
        |                                                        |           |
        | cooldown over, a sufficient                            |           |
        | change was seen                  on_change, sufficient |           |
        v                                  resources             |           |
    Stabilizing <-----------------------------------------------+           |
        |   |                                                               |
        |   +-- on_trigger or evaluation (last change + max delay),         |
        |       desired resources --------------------+                     |
        |                                             v                     |
        | first change +                       Transitioning                |
        | stabilization timeout                (terminal: calls             |
        v                                      transition_to_               |
    Stabilized -- on_trigger (at the latest    subsequent_state)            |
        |         first change + max delay),          ^                     |
        |         sufficient resources ---------------+                     |
        |                                                                   |
        +-- on_trigger, resources no longer sufficient ---------------------+

Timing rules, exactly as Flink's:

* the cooldown counts from the creation of the machine, i.e. from entering
  the owning state;
* the stabilization deadline is *first change + timeout*; later changes do not
  move it;
* each change seen in Stabilizing schedules one evaluation at *that change +
  max trigger delay*;
* Stabilized schedules a trigger at *first change + max trigger delay* (at
  once if that is past).

Every timer goes through :meth:`TimingContext.schedule` (the owning state's
``run_if_state``) and through :func:`run_if_phase` here, so a timer of a phase
that has been left does nothing. :meth:`TransitionTiming.close` cancels them all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol

from spark_adaptive.core.clock import Action, Cancellable

log = logging.getLogger(__name__)


class TimingContext(Protocol):
    """What the timing machine asks of the state that owns it."""

    def has_sufficient_resources(self) -> bool:
        """A transition would be possible now (and, when running, would change something)."""
        ...

    def has_desired_resources(self) -> bool:
        """Everything the query asked for is there: act without waiting for stabilization."""
        ...

    def transition_to_subsequent_state(self) -> None:
        """Leave the owning state; called once, from the Transitioning phase."""
        ...

    def schedule(self, action: Action, delay: float) -> Cancellable:
        """Run ``action`` after ``delay`` seconds, only while the owning state is current."""
        ...


class Phase:
    """One phase of the machine. Events a phase does not override are ignored."""

    def __init__(self, machine: TransitionTiming) -> None:
        self._machine = machine

    @property
    def name(self) -> str:
        return type(self).__name__

    def on_change(self) -> None:
        """Resources or requirements changed. Ignored unless a phase says otherwise."""

    def on_trigger(self) -> None:
        """A moment to act. Ignored unless a phase says otherwise."""


class Cooldown(Phase):
    """Right after entering the owning state: no transition yet.

    ``on_change`` with sufficient resources records the first such change.
    ``on_trigger`` events are ignored. At the end of the cooldown the machine goes
    to Stabilizing (a change was recorded) or Idling (none was).
    """

    def __init__(self, machine: TransitionTiming, cooldown: float) -> None:
        super().__init__(machine)
        self.first_change: float | None = None
        machine.schedule_relative(self, self._finish, machine.now(), cooldown)

    def on_change(self) -> None:
        if self.first_change is None and self._machine.ctx.has_sufficient_resources():
            self.first_change = self._machine.now()

    def _finish(self) -> None:
        if self.first_change is None:
            self._machine.progress_to_idling()
        else:
            self._machine.progress_to_stabilizing(self.first_change)


class Idling(Phase):
    """Nothing to do until a change brings sufficient resources.

    ``on_change`` with sufficient resources → Stabilizing (first change = now).
    ``on_trigger`` events are ignored.
    """

    def on_change(self) -> None:
        if self._machine.ctx.has_sufficient_resources():
            self._machine.progress_to_stabilizing(self._machine.now())


class Stabilizing(Phase):
    """Resources are sufficient; wait for them to settle unless they are desired.

    Goes to Stabilized at *first change + stabilization timeout*, whatever
    happens meanwhile. ``on_change`` schedules an evaluation at *this change +
    max trigger delay* (one at a time). ``on_trigger`` and that evaluation
    transition only when the desired resources are there; otherwise they do
    nothing.
    """

    def __init__(
        self, machine: TransitionTiming, first_change: float, stabilization: float
    ) -> None:
        super().__init__(machine)
        self.first_change = first_change
        self._last_change = first_change
        self._evaluation_scheduled = False
        self._schedule_evaluation()
        machine.schedule_relative(
            self, lambda: machine.progress_to_stabilized(first_change), first_change, stabilization
        )

    def on_change(self) -> None:
        self._last_change = self._machine.now()
        self._schedule_evaluation()

    def on_trigger(self) -> None:
        self._transition_if_desired()

    def _schedule_evaluation(self) -> None:
        if self._evaluation_scheduled:
            return
        self._evaluation_scheduled = True

        def evaluate() -> None:
            self._evaluation_scheduled = False
            self._transition_if_desired()

        self._machine.schedule_relative(
            self, evaluate, self._last_change, self._machine.max_trigger_delay
        )

    def _transition_if_desired(self) -> None:
        if self._machine.ctx.has_desired_resources():
            self._machine.trigger_transition()
        else:
            log.debug("%s: desired resources not met; no transition yet", self._machine.label)


class Stabilized(Phase):
    """Resources held long enough; act at the next trigger.

    Schedules ``on_trigger`` at *first change + max trigger delay*, so it does
    not wait for a micro-batch longer than that. ``on_trigger``: sufficient
    resources → Transitioning, else back to Idling. ``on_change`` events are
    ignored (the next trigger looks at the resources as they are then).
    """

    def __init__(self, machine: TransitionTiming, first_change: float) -> None:
        super().__init__(machine)
        machine.schedule_relative(self, self.on_trigger, first_change, machine.max_trigger_delay)

    def on_trigger(self) -> None:
        if self._machine.ctx.has_sufficient_resources():
            self._machine.trigger_transition()
        else:
            self._machine.progress_to_idling()


class Transitioning(Phase):
    """Terminal: the transition has been asked for. Every event is ignored."""


class TransitionTiming:
    """The machine. Construct it when entering a state; :meth:`close` it on leaving.

    ``cooldown``, ``stabilization`` and ``max_trigger_delay`` are seconds;
    ``math.inf`` means the corresponding timer never fires.
    """

    def __init__(
        self,
        ctx: TimingContext,
        now: Callable[[], float],
        *,
        cooldown: float,
        stabilization: float,
        max_trigger_delay: float,
        label: str = "",
    ) -> None:
        for what, value in (("cooldown", cooldown), ("stabilization", stabilization),
                            ("max_trigger_delay", max_trigger_delay)):
            if value < 0:
                raise ValueError(f"{what} must be >= 0, got {value}")
        self.ctx = ctx
        self.now = now
        self.stabilization = stabilization
        self.max_trigger_delay = max_trigger_delay
        self.label = label or "timing"
        self._timers: list[Cancellable] = []
        self._closed = False
        self.phase: Phase = Cooldown(self, cooldown)

    # -- the two events ---------------------------------------------------------------
    def on_change(self) -> None:
        self.phase.on_change()

    def on_trigger(self) -> None:
        self.phase.on_trigger()

    def close(self) -> None:
        """Cancel every timer; the machine does nothing afterwards."""
        self._closed = True
        self._cancel_timers()

    def _cancel_timers(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()

    # -- phase changes --------------------------------------------------------------
    def progress_to_idling(self) -> None:
        self._progress(lambda: Idling(self))

    def progress_to_stabilizing(self, first_change: float) -> None:
        self._progress(lambda: Stabilizing(self, first_change, self.stabilization))

    def progress_to_stabilized(self, first_change: float) -> None:
        self._progress(lambda: Stabilized(self, first_change))

    def trigger_transition(self) -> None:
        self._progress(lambda: Transitioning(self))
        self.ctx.transition_to_subsequent_state()

    def _progress(self, build: Callable[[], Phase]) -> None:
        if isinstance(self.phase, Transitioning):
            raise RuntimeError("the state transition has already been triggered")
        # The old phase's timers could only be dropped by run_if_phase; cancelling
        # them here keeps the list of live timers bounded by one phase's worth.
        self._cancel_timers()
        old = self.phase
        self.phase = build()
        log.debug("%s: %s -> %s", self.label, old.name, self.phase.name)

    # -- timers -----------------------------------------------------------------------
    def schedule_relative(self, phase: Phase, action: Action, start: float, timeout: float) -> None:
        """Run ``action`` at ``start + timeout`` (at once if past), while ``phase`` is current."""
        if math.isinf(timeout) or self._closed:
            return
        delay = max(0.0, start + timeout - self.now())
        self._timers.append(self.ctx.schedule(lambda: self.run_if_phase(phase, action), delay))

    def run_if_phase(self, phase: Phase, action: Action) -> None:
        """Run ``action`` only if ``phase`` is still the current phase (stale timers drop)."""
        if self._closed or self.phase is not phase:
            log.debug("%s: ignoring a timer of phase %s, now in %s",
                      self.label, phase.name, self.phase.name)
            return
        action()
