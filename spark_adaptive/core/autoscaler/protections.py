"""Flink's two protections, and one of ours, as small state machines of one query.

:class:`DelayedScaleDown` (Flink's ``DelayedScaleDown``)
    The first scale-down recommendation starts a wait of
    ``scale-down.interval``; every later one within it is merged by keeping the
    **highest** recommended slots (for the live and the restart need apart);
    when the wait is over, that maximum is applied. Whoever sees a scale-up, an
    in-band evaluation, a rescale, or an interval whose maximum keeps the
    current slots calls :meth:`DelayedScaleDown.clear`.

:class:`EffectivenessGuard` (Flink's ineffective scale-up detection)
    An applied scale-up is remembered (:meth:`EffectivenessGuard.expect`); the
    rescale that reaches its target arms it (:meth:`~EffectivenessGuard.on_rescale`);
    the first full window afterwards judges it (:meth:`~EffectivenessGuard.judge`):
    when the capacity gained is below ``threshold`` of the gain predicted for the
    slots reached (predicted when the scale-up is decided, as Flink records its
    expected processing rate, and not from a fit that already holds the
    outcome), the same step (more slots on the same partitions) is blocked.
    Unlike Flink's, the block expires (``expiry``) and lifts as soon as the query
    falls behind, and a step at other partitions is not blocked, so a false positive
    can neither block a needed scale-up for long nor build a backlog (FLINK-35814).
    The prediction is made for the slots actually reached, after every cap and
    rounding (FLINK-39743 judged against the unconstrained target).

:class:`ShortfallMemory` (the scale-down's counterpart; Flink has none)
    Every applied scale-up from slots that ran above ``utilization.target``
    records that they fell short, on the partitions they ran, at the input rate
    it was decided at (a scale-up that only the catch-up of a backlog asked for,
    from slots below the target, records nothing). A later scale-down onto as
    many effective slots or fewer on those partitions, or more, is refused while
    the input is at least ``utilization.target`` times that rate, for
    :data:`SHORTFALL_EXPIRY`; the policy then looks for a smaller count above
    them. A count on fewer partitions is not refused: what slots carry depends
    on the partitions they run (a task's fixed cost is paid once per wave, so
    2 slots run 12 partitions far faster than 200, and never slower than 24).
    The capacity a scale-down predicts comes from rates measured at other slot
    counts, with their noise; a count that already fell behind at this load has
    shown what it carries, and a scale-down onto it
    would build a backlog and a scale-up back, over and over (a flap no
    ``scale-down.interval`` prevents, as each round lasts longer than it).
"""

from __future__ import annotations

from dataclasses import dataclass

SHORTFALL_EXPIRY = 3600.0
"""Seconds a slot count that fell short is remembered: long enough to outlast the rounds of
a flap (a scale-down, a backlog growing for a while, a scale-up back), short enough that a
query whose rate per slot has changed is not kept above what it needs for long."""


class DelayedScaleDown:
    """The pending scale-down of one query: since when, the highest needs seen, and whether
    any was (an interval can start before the first recommendation is sized)."""

    __slots__ = ("since", "x_live", "x_restart", "sized")

    def __init__(self) -> None:
        self.since: float | None = None
        self.x_live = self.x_restart = 0.0
        self.sized = False

    def merged(self, now: float, x_live: float, x_restart: float
               ) -> tuple[float, float, float]:
        """``(since, highest live, highest restart)`` with one more recommendation (slots
        for the live and the restart need, never negative: an unsized interval's zeros
        leave them as they are), without recording it."""
        if self.since is None:
            return now, x_live, x_restart
        return self.since, max(self.x_live, x_live), max(self.x_restart, x_restart)

    def record(self, now: float, x_live: float, x_restart: float) -> tuple[float, float, float]:
        """Merge one recommendation; returns what :meth:`merged` does."""
        self.since, self.x_live, self.x_restart = self.merged(now, x_live, x_restart)
        self.sized = True
        return self.since, self.x_live, self.x_restart

    def start(self, now: float) -> None:
        """Start the interval at ``now`` unless it runs, before any recommendation is sized
        (the query reads below the band, but how far is not yet known)."""
        if self.since is None:
            self.since = now

    def clear_unsized(self) -> None:
        """Undo a :meth:`start` that no recommendation followed."""
        if not self.sized:
            self.clear()

    def clear(self) -> None:
        self.since = None
        self.x_live = self.x_restart = 0.0
        self.sized = False


@dataclass(frozen=True, slots=True)
class Block:
    """More slots than ``slots`` on ``partitions`` partitions are blocked until ``until``."""

    partitions: int
    slots: int
    until: float


@dataclass(frozen=True, slots=True)
class _Expectation:
    to_slots: int
    partitions: int
    cap_before: float
    predicted: float  # the capacity the scale-up was expected to reach, when decided
    armed: bool = False


class EffectivenessGuard:
    """Judges scale-ups by what they gained; blocks repeating an ineffective one."""

    def __init__(self, enabled: bool, threshold: float, expiry: float) -> None:
        self.enabled, self.threshold, self.expiry = enabled, threshold, expiry
        self._expect: _Expectation | None = None
        self.block: Block | None = None

    def expect(self, to_slots: int, partitions: int, cap_before: float,
               predicted: float) -> None:
        """An applied scale-up to ``to_slots`` slots from a capacity of ``cap_before``,
        expected to reach ``predicted`` (frozen now: a prediction made after the outcome
        is measured would already contain it)."""
        self._expect = _Expectation(to_slots, partitions, cap_before, predicted)

    def on_rescale(self, slots: int | None) -> None:
        """A rescale completed on ``slots`` slots: it arms the expected scale-up if it
        reached it; any later rescale drops an armed one (nothing left to judge)."""
        e = self._expect
        if e is None:
            return
        if not e.armed and slots == e.to_slots:
            self._expect = _Expectation(e.to_slots, e.partitions, e.cap_before, e.predicted,
                                        armed=True)
        elif e.armed:
            self._expect = None

    def judge(self, cap_now: float, now: float) -> None:
        """Called with the capacity of each full window; judges an armed scale-up once
        (Flink: the processing rate gained against the one the scale-up expected)."""
        e = self._expect
        if e is None or not e.armed:
            return
        self._expect = None
        gain = e.predicted - e.cap_before
        if not self.enabled or gain <= 0:
            return
        if (cap_now - e.cap_before) / gain < self.threshold:
            self.block = Block(e.partitions, e.to_slots, now + self.expiry)

    def blocks(self, kind: str, partitions: int, slots: int, now: float, behind: bool) -> bool:
        """Whether a scale-up to ``slots`` (``kind``, ``partitions``) repeats a blocked step."""
        b = self.block
        if b is None:
            return False
        if now >= b.until or behind:
            self.block = None
            return False
        return kind == "live" and partitions == b.partitions and slots >= b.slots


@dataclass(frozen=True, slots=True)
class Shortfall:
    """``slots`` effective slots on ``partitions`` fell behind at ``rate`` rows/s; remembered
    until ``until``."""

    slots: float
    partitions: int
    rate: float
    until: float


class ShortfallMemory:
    """Slot counts that fell short of an input rate, per query (see the module doc)."""

    __slots__ = ("_kept",)

    KEPT = 32  # the newest shortfalls kept; a scale-up at most every stabilization interval

    def __init__(self) -> None:
        self._kept: list[Shortfall] = []

    def __len__(self) -> int:
        return len(self._kept)

    def record(self, slots: float, partitions: int, rate: float, now: float) -> None:
        """A scale-up from ``slots`` effective slots on ``partitions`` was applied at an
        input of ``rate``. Each is kept on its own: a later one of the same count at a
        higher rate does not make the earlier one, at a lower rate, any less true."""
        if not (slots > 0 and rate > 0 and partitions > 0):
            return
        self._kept = [k for k in self._kept if k.until > now][-(self.KEPT - 1):]
        self._kept.append(Shortfall(slots, partitions, rate, now + SHORTFALL_EXPIRY))

    def refuses(self, slots: float, partitions: int, rate: float, target: float, now: float
                ) -> Shortfall | None:
        """The shortfall that rules out going down to ``slots`` effective slots on
        ``partitions`` at an input of ``rate`` (at least ``target`` times the rate they fell
        short of, on as many partitions or fewer), if any: of those, the one of the most
        slots."""
        self._kept = [k for k in self._kept if k.until > now]
        found = [k for k in self._kept if partitions >= k.partitions
                 and slots <= k.slots + 1e-9 and rate >= target * k.rate]
        return max(found, key=lambda k: k.slots, default=None)

    def clear(self) -> None:
        self._kept = []
