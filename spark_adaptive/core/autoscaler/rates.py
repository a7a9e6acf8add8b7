"""Steps 2 to 4 of an evaluation (see :mod:`.policy`) as values: the rates one window reads,
the capacity an input rate needs, and the band the capacity is judged against.

:class:`Rates` (step 2) is read from a :class:`.window.MetricsWindow` and the batch
running now; :class:`Target` (step 3) turns an input rate into the live and the restart
target capacity; :class:`Band` (step 4) holds the capacities below which a query scales up
and above which it scales down, and the input rates each edge was read from. All three are
frozen and pure, so the policy's decision can be followed from them step by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spark_adaptive.core.autoscaler.config import AutoscalerConfig
from spark_adaptive.core.autoscaler.decision import DecisionInputs
from spark_adaptive.core.autoscaler.window import MetricsWindow

SETTLED = 0.9
"""The input is still falling while the newest seconds' rate is below this fraction of the
window's: the window mixes in a higher rate. A scale-down is then sized on the newest
seconds' rate if it is live, and waits for the window to settle if it restarts."""

OVERLOAD = 1.1
"""An input rate this far above the capacity measured counts as falling behind: on a window
not yet full a scale-up, and only that, may then be decided, and the newest seconds' rate
alone may decide it on a full one. Beyond batch-to-batch noise, and a backlog grows at the
excess from now on."""

JUMP = 1.25
"""The newest batch alone sets the input rate when it is this much above the newest
seconds' rate: far beyond batch-to-batch noise, so only a real jump does it."""


@dataclass(frozen=True, slots=True)
class Rates:
    """What one window reads (step 2): rows per second, but ``backlog`` (rows).

    ``input`` is the rate decided on: the higher of ``window`` and ``recent``, so a rise is
    seen at once and a fall only once the whole window shows it; ``newest`` instead when it
    reads :data:`JUMP` times more, and ``started`` (the batch running now) when it reads
    :data:`JUMP` times more than that. None where the window cannot tell.
    """

    window: float | None  # arrival rate over the whole window
    recent: float | None  # over its newest seconds (at least two batches)
    newest: float | None  # read by the newest batch alone
    started: float | None  # read by the batch running now; None unless it set ``input``
    input: float | None  # the input rate decided on
    backlog: float  # rows waiting now: the newest reported plus the batch overrun
    catch_up: float  # rows/s that drain the backlog within catch-up.duration
    per_slot: float | None  # true processing rate per slot, at input plus catch-up
    source: str  # where ``per_slot`` came from (or why there is none)
    span: float  # seconds between the window's first and last batch
    count: int  # batches in the window

    @classmethod
    def of(cls, w: MetricsWindow, running: float | None, now: float, batch_running: bool,
           catch_up_duration: float) -> Rates:
        """The rates ``w`` reads at ``now``, with ``running`` the input rate of the batch
        running now (None unless it started after the newest sample) and ``batch_running``
        whether a batch runs (whose wait for completion counts as backlog)."""
        lam_w, lam_r = w.window_arrival_rate(), w.recent_arrival_rate()
        rates = [x for x in (lam_w, lam_r) if x is not None]
        lam = max(rates) if rates else None
        lam_n = w.newest_arrival_rate()
        if lam_n is not None and (lam is None or lam_n > JUMP * lam):
            lam = lam_n  # a jump under way: the newest batch already shows it
        lam_s = running
        if lam_s is not None and lam is not None and lam_s > JUMP * lam:
            lam = lam_s  # ... or the batch running now, from what it reads
        else:
            lam_s = None
        backlog = w.backlog(now, lam or 0.0, batch_running) or 0.0
        cu = catch_up_duration
        catch = backlog / cu if cu > 0 else 0.0
        # The rate per slot at the load to be processed: a batch's fixed cost is spread over
        # the rows of the input and of the backlog being caught up.
        rate, rate_src = w.rate_per_slot_at((lam or 0.0) + catch)
        return cls(lam_w, lam_r, lam_n, lam_s, lam, backlog, catch, rate, rate_src,
                   (w.last_time or 0.0) - (w.first_time or 0.0), w.count)

    def inputs(self, *, capacity: float | None = None, target_rate: float | None = None,
               utilization: float | None = None, recommended_slots: float | None = None,
               scalability_coefficient: float | None = None,
               restart_downtime: float | None = None, executor_startup: float | None = None,
               forecast_rate: float | None = None) -> DecisionInputs:
        """The figures a decision is computed from: these rates, and what steps 3 to 5 made
        of them once the rates allowed it (else None)."""
        return DecisionInputs(window_span=self.span, sample_count=self.count,
                              input_rate=self.input, input_rate_window=self.window,
                              input_rate_recent=self.recent, input_rate_started=self.started,
                              backlog=self.backlog, true_rate_per_slot=self.per_slot,
                              rate_source=self.source, capacity=capacity,
                              target_rate=target_rate, utilization=utilization,
                              recommended_slots=recommended_slots,
                              scalability_coefficient=scalability_coefficient,
                              restart_downtime=restart_downtime,
                              executor_startup=executor_startup,
                              forecast_rate=forecast_rate)


@dataclass(frozen=True, slots=True)
class Target:
    """The capacity an input rate needs (step 3), in rows per second.

    ``rate / utilization.target + backlog / catch-up``, plus the rows that arrive beyond
    the capacity until the executors asked for now run (:meth:`piled`) over the catch-up
    duration; a restart adds ``rate x downtime / catch-up`` (Flink's terms).
    """

    utilization: float  # utilization.target
    catch_up: float  # rows/s that drain the backlog (Rates.catch_up)
    duration: float  # catch-up.duration, seconds
    downtime: float  # a restart's, seconds
    # The capacity until the executors asked for now run, as (rows/s, seconds) stretches.
    stretches: tuple[tuple[float, float], ...]

    def piled(self, rate_in: float) -> float:
        """Rows of an input of ``rate_in`` that arrive beyond the capacity meanwhile."""
        return sum(max(0.0, rate_in - c) * t for c, t in self.stretches)

    def needs(self, rate_in: float) -> tuple[float, float]:
        """The live and the restart target capacity for an input of ``rate_in``."""
        cu = self.duration
        pile = self.piled(rate_in) / cu if cu > 0 else 0.0
        live = rate_in / self.utilization + self.catch_up + pile
        return live, live + (rate_in * self.downtime / cu if cu > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class Band:
    """The band a capacity is judged against (step 4): a scale-up below ``up_at``, a
    scale-down above ``down_at``; each edge is ``rate / utilization + backlog / catch-up``
    for the input rate it was read from."""

    up_rate: float  # the input rate whether to scale up is read from
    up_at: float
    down_rate: float  # ... and whether to scale down
    down_at: float
    falling: bool  # the newest seconds read below SETTLED times the window: down_rate is theirs

    @classmethod
    def of(cls, cfg: AutoscalerConfig, r: Rates, lam: float, cap: float, urgent: bool
           ) -> Band:
        """The band for an input of ``lam`` (``r.input``) on a capacity ``cap``; ``urgent``:
        the query falls behind, or outgrew the last scale-up (step 1)."""
        lam_w, lam_r = r.window, r.recent
        # Whether to scale up is read from the window's input rate (Flink's rule), or from the
        # newest seconds' rate (or the newest batch's) only once it shows the query falling
        # behind: those few batches are noisy, and over the hundreds of evaluations a level
        # lasts, their upward deviations would cross the band's edge of a query settled near
        # the target, and the scale-down that follows would flap it. The target of a scale-up
        # still uses the higher rate, so that one rescale reaches a rise.
        lam_up = lam
        if lam_w is not None and lam_w < lam and not urgent and lam <= OVERLOAD * cap:
            lam_up = lam_w
        up_at = lam_up / cfg.utilization_max + r.catch_up
        # While the input falls, the window still averages in the higher rate of a while
        # ago: whether to scale down is read from the newest seconds (see the policy's
        # _scale_down).
        falling = (lam_w is not None and lam_r is not None and lam_r < SETTLED * lam_w
                   and lam <= lam_w)
        lam_down = lam_r if falling and lam_r is not None else lam
        down_at = (lam_down / cfg.utilization_min + r.catch_up if cfg.utilization_min > 0
                   else math.inf)
        return cls(lam_up, up_at, lam_down, down_at, falling)
