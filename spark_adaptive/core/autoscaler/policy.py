"""The autoscaler policy of one streaming query: Flink's algorithm, adapted to Spark.

Use
---
One :class:`QueryAutoscaler` per managed query::

    policy = QueryAutoscaler(config, query="q1", started_at=clock.now())
    policy.observe(LoadSample(...))              # every completed micro-batch
    decision = policy.evaluate(QueryView(...))   # every evaluation.interval
    if decision.actionable: ...                  # rescale; then, once it completed:
    policy.on_rescale_completed(t, slots=..., partitions=..., kind=..., downtime=...)

Nothing here raises on bad input or blocks; time comes only from the samples
and views (the injected clock), so everything runs on virtual time.

Each evaluation, in order (Flink's operator, ``ScalingMetricCollector`` ->
``ScalingMetricEvaluator`` -> ``JobVertexScaler``, with the differences noted):

1. **Not now** while a rescale is in flight, during ``stabilization.interval``
   after each completed rescale (its samples are not even kept), and until the
   window has collected for ``metrics.window`` and three batches (the window
   spans three trigger intervals when they are longer, so that a long trigger
   still fills one), unless
   the query is falling behind (backlog older than
   ``backlog-processing.lag-threshold``, or, from two batches on, an input rate
   :data:`OVERLOAD` times its capacity): then a scale-up, and only that, may
   be decided on a partial window. Falling behind is not noise, and a query
   whose batches grew long completes few of them. Nor is a rise that the last
   scale-up fell short of: in the first window after a scale-up, from two
   batches on, an input rate above ``utilization.max`` of the capacity reached,
   and above the rate the scale-up was sized for by more than ``utilization.max
   / utilization.target``, scales up again (the batch that decided it
   straddled the rise). The same rise read by the batch that starts while the
   scale-up is still in flight, or stabilizing, decides it again at once
   (:meth:`_again`), and so does a forecast in use that reads more than a
   scale-up taken ahead of it was sized for.
2. **Rates.** Arrival rate = consumption + backlog growth, over the window and
   over its newest batches; the higher one is used, so a rise is seen at once
   and a fall only once the whole window shows it; the newest batch alone sets
   it when it reads :data:`JUMP` times more, and so does the batch running now
   (:meth:`QueryAutoscaler.observe_start`: what it reads is known when it starts,
   and a batch that a jump made long would otherwise hide the jump until it
   completes). Backlog is the newest one plus the
   batch overrun (see :mod:`.window`), never a window mean.
   True rate per slot from busy time, else from ``processedRowsPerSecond``; with
   a batch's fixed cost separated from its cost per row where the window allows
   (:meth:`.window.MetricsWindow.rate_per_slot_at`), at the load to be processed.
3. **Target.** ``capacity = input / utilization.target + backlog / catch-up``,
   plus ``input x restart time / catch-up`` for a restart (Flink's terms), plus
   ``(input - capacity now) x executor start-up / catch-up`` when the input
   exceeds the capacity: the backlog that grows until the new executors run
   (``executor-startup.time``, tracked from the query's live scale-ups). Decided
   again while the last scale-up's executors start, the capacity now counts only
   until those run, and theirs from then on.
   **3b. Forecast** (``forecast.enabled``, :mod:`.forecast`): while the view's
   forecast is in use and reads a rate above the input within the horizon, the
   target is at least that rate's (at ``utilization.target``, with no start-up
   term: the rise is not under way). Its capacity above ``utilization.max`` is a
   scale-up ahead of the rise, on a partial window too; a scale-down never goes
   below it. A forecast below the input changes nothing.
4. **Band.** Scale up when the capacity is below ``input / utilization.max +
   backlog / catch-up``; scale down when above ``input / utilization.min +
   backlog / catch-up``, never while catching up (backlog older than
   ``backlog-processing.lag-threshold``). Otherwise nothing changes. Whether to
   scale up is read from the window's input rate (Flink's rule); the newest
   seconds' (or batch's) higher rate decides it alone only when the query is
   falling behind (it exceeds :data:`OVERLOAD` times the capacity, or the
   backlog is old): a few batches are noisy, and their upward deviations would
   otherwise flap a query settled near the target. A scale-up's target uses
   the higher rate either way.
5. **Slots.** The needed slots follow the observed scalability
   (:mod:`.scalability`), clamped by the max factors, then
   :func:`.planning.choose` picks a live or a restart target.
6. **Scale-down delay.** The first scale-down recommendation starts a wait of
   ``scale-down.interval``; then the highest recommendation seen meanwhile is
   applied. A scale-up or an in-band evaluation cancels it (Flink's rule), and
   so does an interval whose highest recommendation keeps the current slots.
   While the input is still falling (:data:`SETTLED`), whether to scale down
   is read from the newest seconds' rate, and a live scale-down is sized on it
   once the newest batch agrees with it; one that restarts is recommended only
   once the window has settled. Nor does a query go down, for an hour, onto as
   many effective slots or fewer than a scale-up from above ``utilization.target``
   left, while its input is at least ``utilization.target`` times the rate they
   fell short of: it stops at the smallest count above them that meets the need
   (:class:`.protections.ShortfallMemory`).
7. **Effectiveness.** The first full window after a scale-up compares the
   capacity gained with the gain expected from the target actually reached;
   below the threshold the same step (more slots on the same partitions) is
   blocked, until the block expires or the query falls behind.

In the code: step 1 is :meth:`QueryAutoscaler.evaluate` (its exception for a query
falling behind, ``_falling_behind``, needs step 2's rates); ``_decide`` reads steps 2 to
4 as the values of :mod:`.rates` (:class:`~.rates.Rates`, :class:`~.rates.Target`,
:class:`~.rates.Band`) and hands steps 5 and 6 to ``_scale_up`` and ``_scale_down``;
step 7's judgement is made in ``_decide``, its block applied in ``_scale_up``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

from spark_adaptive.core.autoscaler.config import AutoscalerConfig
from spark_adaptive.core.autoscaler.decision import (
    DecisionInputs,
    Kind,
    Outcome,
    ScalingDecision,
    make_decision,
)
from spark_adaptive.core.autoscaler.forecast import Forecast, periods_phrase
from spark_adaptive.core.autoscaler.planning import (
    Choice,
    Plan,
    busy_slots,
    choose,
    restart_downtime,
    tasks_phrase,
)
from spark_adaptive.core.autoscaler.protections import (
    SHORTFALL_EXPIRY,
    DelayedScaleDown,
    EffectivenessGuard,
    Shortfall,
    ShortfallMemory,
)
from spark_adaptive.core.autoscaler.rates import JUMP, OVERLOAD, SETTLED, Band, Rates, Target
from spark_adaptive.core.autoscaler.samples import LoadSample, QueryView, clean
from spark_adaptive.core.autoscaler.scalability import ScalabilityModel
from spark_adaptive.core.autoscaler.window import MIN_BATCHES, MetricsWindow, entry_from

STARTUPS_KEPT = 5
"""Live scale-ups whose executor start-up is remembered; the longest of them is used."""


class _Again(NamedTuple):
    """What a scale-up decided again (:meth:`QueryAutoscaler._again`) is decided on."""

    window: MetricsWindow  # in flight, the query's own; stabilizing, the one before it
    slots: int  # the slots the scale-up reaches: only more is carried out
    in_flight: bool  # else its window's rate per slot was told to the model already


class _Sized(NamedTuple):
    """A scale-down's target once raised past the slots that fell short at this load
    (:meth:`QueryAutoscaler._past_shortfalls`)."""

    choice: Choice | None
    live: float  # the live need in slots, raised past them
    restart: float  # the restart need in slots, likewise
    floor: float  # the slots they were raised past (0 if none)
    fell: Shortfall | None  # the last shortfall they were raised past
    refused: Shortfall | None  # one the target still goes onto: no smaller count above it


class QueryAutoscaler:
    """Flink's autoscaler algorithm for one query, live first (see the module doc)."""

    def __init__(self, config: AutoscalerConfig, query: str = "",
                 started_at: float | None = None) -> None:
        self.config = config
        self.query = query
        self._window = MetricsWindow(config.metrics_window)
        self._model = ScalabilityModel(config.observed_scalability_min_observations,
                                       config.observed_scalability_coefficient_min,
                                       enabled=config.observed_scalability)
        self._stable_from: float | None = None
        self._known_rescale: float | None = None
        if started_at is not None and math.isfinite(started_at):
            self._stable_from = started_at + config.stabilization_interval
            self._known_rescale = started_at
        self._last_batch: int | None = None
        # The batch running now, as its start showed it: (batch id, its input rate).
        self._running: tuple[int, float] | None = None
        self._started: int | None = None  # the newest batch known to have started
        self._last_eval: float | None = None
        self._pending_down = DelayedScaleDown()
        self._guard = EffectivenessGuard(config.effectiveness_detection,
                                         config.effectiveness_threshold,
                                         config.effectiveness_expiry)
        self._floor: tuple[tuple[object, ...], float, float, str] | None = None
        self._short = ShortfallMemory()
        # The last scale-up applied: its slots, the input rate it was sized for and when it
        # was decided (its executors were asked for then); and that rate while the window is
        # the first one after the scale-up reached them.
        self._scaled_up: tuple[int, float, float] | None = None
        self._before: MetricsWindow | None = None  # the window a completed scale-up left
        self._after_up: float | None = None
        # The last restarts' downtimes, beside the view's: the rescale history the view is
        # built from keeps its newest records only, and many live rescales push an old
        # restart out of it while its price still holds.
        self._downtimes: deque[float] = deque(maxlen=STARTUPS_KEPT)
        self._startups: deque[float] = deque(maxlen=STARTUPS_KEPT)
        self._per_partition = 0.0
        self._tasks: int | None = None  # tasks of the newest batch's stages, when known
        self._useful: int | None = None  # the newest view's max_useful_slots
        self.rejected = 0
        self.last_rejection = ""
        self._last: ScalingDecision | None = None

    # -- inputs ---------------------------------------------------------------------------
    def observe(self, sample: LoadSample) -> bool:
        """Add one completed micro-batch; False (and why, in ``last_rejection``) if unused."""
        try:
            return self._observe(sample)
        except (TypeError, ValueError, AttributeError) as e:  # a malformed sample
            return self._reject(f"malformed sample: {e}")

    def _observe(self, sample: LoadSample) -> bool:
        t, slots, partitions = sample.time, sample.slots, sample.partitions
        if not -math.inf < t < math.inf or slots < 1 or partitions < 1:
            return self._reject(f"batch at time {t!r} on {slots} slots, {partitions} partitions")
        if self._stable_from is None:  # first sight of the query: its start
            self._stable_from = t + self.config.stabilization_interval
            self._known_rescale = t
        batch = sample.batch_id
        if batch is not None and batch == self._last_batch:
            return self._reject(f"batch {batch} seen twice")
        self._last_batch = batch
        w = self._window
        last = w.last_time
        if last is not None and t < last:  # nothing measured before can be trusted
            self._forget_times(t)
            return self._reject(f"clock went back from {last:.3f}s to {t:.3f}s; metrics are "
                                "collected again after a stabilization interval")
        if t < self._stable_from:
            return False  # stabilizing: not an error, just not used
        # A batch of one stage ran its own tasks, whatever the newest view's cap (that of
        # the newest batch: a source whose partition count changes mixes them); one of more
        # stages is read over the view's (a stateless query's extra job, as foreachBatch
        # runs, adds tasks of its own).
        one = sample.stage_tasks
        w.add(entry_from(sample, last, one if isinstance(one, int) and one > 0
                         else self._useful))
        if isinstance(sample.tasks, int) and sample.tasks > 0:
            self._tasks = sample.tasks
        return True

    def observe_start(self, batch_id: int, input_rate: float) -> bool:
        """A micro-batch started that reads ``input_rate`` rows per second of arrivals
        (its offsets against the last batch's, over the time between their starts). Until
        it completes, a rate :data:`JUMP` times above the window's is a rise under way,
        seen a whole batch before the batch's progress shows it. False if unused."""
        rate = clean(input_rate)
        if rate is None or not isinstance(batch_id, int) or isinstance(batch_id, bool):
            return self._reject(f"started batch {batch_id!r} at {input_rate!r} rows/s")
        if self._last_batch is not None and batch_id <= self._last_batch:
            return False  # it completed already: its sample says more
        self._running = (batch_id, rate)
        self._started = batch_id
        return True

    def observe_started(self, batch_id: int) -> bool:
        """Micro-batch ``batch_id`` started (its first job ran), what it reads unknown.

        Only a batch known to run can hold the query up: with none, a query whose last
        batch completed long ago has had no input since (Spark runs no batch then), not
        a stuck batch. False if unused."""
        if not isinstance(batch_id, int) or isinstance(batch_id, bool):
            return self._reject(f"started batch {batch_id!r}")
        if self._last_batch is not None and batch_id <= self._last_batch:
            return False
        self._started = batch_id
        return True

    def _batch_running(self) -> bool:
        """Whether a batch started after the newest completed one."""
        b = self._started
        return b is not None and (self._last_batch is None or b > self._last_batch)

    @property
    def rising(self) -> bool:
        """The batch running now reads :data:`JUMP` times the window's input rate: worth
        evaluating at once rather than at the next interval."""
        lam_s = self._running_rate()
        if lam_s is None:
            return False
        w = self._window
        rates = [x for x in (w.window_arrival_rate(), w.recent_arrival_rate()) if x is not None]
        if rates:
            return lam_s > JUMP * max(rates)
        return self._again_basis() is not None  # stabilizing after a scale-up it outgrew

    def _running_rate(self) -> float | None:
        """The input rate of the batch running now, if it started after the newest sample."""
        r = self._running
        if r is None or (self._last_batch is not None and r[0] <= self._last_batch):
            return None
        return r[1]

    def on_rescale_completed(self, time: float, *, slots: int, partitions: int,
                             kind: Kind = "live", downtime: float | None = None,
                             startup: float | None = None) -> None:
        """A rescale (of any cause) completed at ``time``: restart the window after it.

        ``downtime`` is a restart's measured downtime, ``startup`` the time a live
        rescale's new executors took to join (both used with time tracking).
        """
        if not isinstance(time, (int, float)) or not math.isfinite(time):
            return
        d = clean(downtime)
        if kind == "restart" and d is not None:
            self._downtimes.append(d)
        u = clean(startup)
        if kind == "live" and u is not None:
            self._startups.append(u)
        self._after_rescale(time, slots)

    def _after_rescale(self, time: float, slots: int | None) -> None:
        up = self._scaled_up
        reached = up is not None and slots == up[0]
        # The samples before a scale-up it reached are kept aside, only to decide it again
        # while stabilizing (see _again); every other rescale starts from nothing.
        self._before = self._window if reached else None
        self._window = MetricsWindow(self.config.metrics_window)
        self._stable_from = time + self.config.stabilization_interval
        self._known_rescale = time
        self._pending_down.clear()
        self._guard.on_rescale(slots)
        self._after_up = up[1] if up is not None and reached else None
        self._scaled_up = None

    # -- evaluation ---------------------------------------------------------------------
    @property
    def executor_startup(self) -> float:
        """Seconds new executors are expected to take to run the query's tasks: what a
        forecast must look ahead at least."""
        return self._startup()

    @property
    def last_decision(self) -> ScalingDecision | None:
        return self._last

    def evaluate(self, view: QueryView) -> ScalingDecision:
        """Decide for the query as ``view`` shows it now. Never raises."""
        cfg = self.config
        problem = view.problem()
        if problem is not None:
            return self._not_ready(view, f"cannot evaluate: {problem}")
        now = view.now
        if not cfg.enabled:
            return self._not_ready(view, "autoscaler.enabled=false")
        if self._last_eval is not None and now < self._last_eval:
            before, self._last_eval = self._last_eval, now
            self._forget_times(now)
            return self._not_ready(view, f"the clock went back from {before:.3f}s to "
                                         f"{now:.3f}s; metrics are collected again")
        self._last_eval = now
        self._useful = view.max_useful_slots
        lr = view.last_rescale_completed
        if lr is not None and math.isfinite(lr) and (
                self._known_rescale is None or lr > self._known_rescale):
            self._after_rescale(lr, view.slots)
        if self._stable_from is None:
            self._stable_from = now + cfg.stabilization_interval
            self._known_rescale = now
        if view.rescale_in_flight:
            return self._in_flight(view)
        if now < self._stable_from:
            return self._again(view, f"stabilizing after the last rescale for another "
                                     f"{self._stable_from - now:.0f}s")
        count = self._window.count
        if count == 0:
            return self._collecting(view)
        # Fewer batches than MIN_BATCHES or a window not yet full: only a query falling
        # behind may act (upwards), e.g. one whose batches grew too long to complete often.
        full = count >= MIN_BATCHES and now - self._stable_from >= cfg.metrics_window
        return self._decide(view, full)

    def _in_flight(self, view: QueryView) -> ScalingDecision:
        return self._again(view, "a rescale is in flight", in_flight=True)

    def _again_basis(self, in_flight: bool = False, forecast: Forecast | None = None
                     ) -> tuple[int, MetricsWindow] | None:
        """The slots a scale-up reaches and the window to decide it again on, when the rate
        read now (the batch running now's, or a ``forecast`` in use, whichever is higher)
        is more than that scale-up's headroom covers (``utilization.max /
        utilization.target`` times the rate it was sized for); else None."""
        cfg = self.config
        read = [x for x in (self._running_rate(), _in_use(forecast)) if x is not None]
        if not read:
            return None
        lam_s = max(read)
        up, before, after = self._scaled_up, self._before, self._after_up
        if in_flight and up is not None:
            (slots, sized, _), w = up, self._window
        elif not in_flight and before is not None and after is not None:
            slots, sized, w = -1, after, before
        else:
            return None
        if w.count == 0 or lam_s <= sized * cfg.utilization_max / cfg.utilization_target:
            return None
        return slots, w

    def _again(self, view: QueryView, waiting: str, in_flight: bool = False
               ) -> ScalingDecision:
        """Nothing is decided while a rescale is in flight or stabilizing, but for one case:
        the last scale-up was sized on a batch that straddled a rise (it read part of it),
        or on a forecast that read its start only (the rise's first bucket), and the batch
        started since, or the forecast, reads more than its headroom covers. Waiting for its
        executors, a stabilization interval and two batches before the next step would
        leave the query short all that time, so the scale-up is decided again now: in
        flight on the slots running and the window it was decided on, carried out only
        when it asks for more slots than the one in flight; once completed, on the window
        it was decided on (its rate per slot, which the scalability model is not told
        again) and the slots it reached."""
        basis = self._again_basis(in_flight, view.forecast)
        if basis is None:
            return self._not_ready(view, waiting)
        slots, window = basis
        d = self._decide(view, full=False,
                         again=_Again(window, slots if in_flight else view.slots, in_flight))
        if d.outcome == "scale-up":
            return d
        if in_flight:
            waiting = f"a rescale to {slots} slots is in flight"
        return self._not_ready(view, waiting, d.inputs)

    def _collecting(self, view: QueryView, inputs: DecisionInputs | None = None
                    ) -> ScalingDecision:
        since = self._stable_from if self._stable_from is not None else view.now
        return self._not_ready(view, f"collecting metrics: {view.now - since:.0f}s of "
                                     f"{self.config.metrics_window:.0f}s, "
                                     f"{self._window.count} batches", inputs)

    def _decide(self, view: QueryView, full: bool, again: _Again | None = None
                ) -> ScalingDecision:
        """Decide on the query's own window, or with ``again`` on the basis of a scale-up
        decided again (:meth:`_again`): the module doc's steps, in its order but for one.
        Step 1 is :meth:`evaluate`'s but for its exception, a query falling behind on a
        partial window, which is read from step 2's rates and so follows them here."""
        cfg, now = self.config, view.now
        w = again.window if again is not None else self._window
        # 2. Rates.
        r = Rates.of(w, self._running_rate(), now, self._batch_running(), cfg.catch_up_duration)
        self._per_partition = _per_partition(w, self._tasks or view.partitions)
        # 1. Not on a partial window, unless the query falls behind or outgrew a scale-up.
        behind, short = self._falling_behind(view, r, full)
        if full:
            self._after_up = None
        ahead = _ahead(view.forecast, r.input)
        if not full and not behind and not short and ahead is None:
            return self._collecting(view)
        lam, rate = r.input, r.per_slot
        if lam is None:
            return self._not_ready(view, "no input rate: batches reported neither input rows "
                                         "nor elapsed time", r.inputs())
        if lam <= 0 and r.backlog <= 0:
            return self._result(view, "no-change", "none", view.slots, view.partitions,
                                "no input in the metrics window; nothing to scale on",
                                r.inputs())
        if rate is None:
            return self._not_ready(view, f"no processing rate: {r.source}", r.inputs())
        s, p = view.slots, view.partitions
        eff = busy_slots(s, p, view.max_useful_slots)
        cap = rate * eff
        # What the window measured goes to the observed scalability (step 5; a borrowed
        # window's rate was recorded already) and, once full, judges the last scale-up
        # (step 7: on the first full window after it, not on two batches).
        if again is None or again.in_flight:
            self._model.record(eff, rate, now, p)
        if full:
            self._guard.judge(cap, now)
        # 3. Target: input above the capacity grows a backlog until the new executors run;
        # the target drains it within the catch-up duration as well (restart.time's term,
        # for the executors' start-up that a live scale-up waits for).
        startup = self._startup()
        target = Target(cfg.utilization_target, r.catch_up, cfg.catch_up_duration,
                        self._downtime(view), self._stretches(view, rate, startup, again))
        need_live, need_restart = target.needs(lam)
        # 3b. A rise forecast within the horizon: the target holds what it needs (the rise
        # is not under way, so nothing piles up meanwhile), never less than the measured
        # input needs. A forecast below the input changes nothing.
        held = (0.0, 0.0) if ahead is None else Target(
            cfg.utilization_target, r.catch_up, cfg.catch_up_duration, target.downtime,
            ()).needs(ahead)
        need_live, need_restart = max(need_live, held[0]), max(need_restart, held[1])
        # 4. Band.
        band = Band.of(cfg, r, lam, cap, behind or short)
        x_live = self._model.slots_for(need_live, eff, rate)
        inputs = r.inputs(
            capacity=cap, target_rate=need_live, utilization=lam / cap, recommended_slots=x_live,
            scalability_coefficient=self._model.coefficient(eff, max(x_live, 1e-9)),
            restart_downtime=target.downtime, executor_startup=startup, forecast_rate=ahead)
        # 5. and 6.: the slots, in the direction the band shows.
        if cap < band.up_at:
            return self._scale_up(view, inputs, rate, need_live, need_restart, target.downtime,
                                  again.slots if again is not None else None,
                                  (target.piled(lam), target.stretches))
        if ahead is not None:
            # sized at the rate per slot of the load forecast: a batch's fixed cost, which
            # dominates a light load's, is spread over the rise's rows
            at, _ = w.rate_per_slot_at(ahead + r.catch_up)
            rate_ahead = at if at is not None and at > rate else rate
            if rate_ahead * eff < ahead / cfg.utilization_max + r.catch_up:
                return self._scale_up(view, inputs, rate_ahead, need_live, need_restart,
                                      target.downtime,
                                      again.slots if again is not None else None, ahead=True)
        if not full:  # only falling behind may cut the collection short, and only upwards
            return self._collecting(view, inputs)
        if cap > band.down_at and not behind:
            # falling: sized on the newest seconds' rate (a live scale-down, see there), and
            # never below a forecast rise's need
            fell = target.needs(band.down_rate)
            needs = ((max(fell[0], held[0]), max(fell[1], held[1])) if band.falling
                     else (need_live, need_restart))
            return self._scale_down(view, inputs, rate, *needs, target.downtime, band.falling)
        if eff < s and not behind:
            # Slots the partitions leave without a task (more slots than tasks, or a count
            # that does not divide them): fewer run them in as many waves. Released like any
            # scale-down, sized on the need but never on more than the capacity the query
            # has now (below it when the need is, as for any scale-down within the band).
            return self._scale_down(view, inputs, rate, min(need_live, cap),
                                    min(need_restart, cap), target.downtime, False, idle=True)
        return self._in_band(view, inputs, r, band, lam, cap)

    def _falling_behind(self, view: QueryView, r: Rates, full: bool) -> tuple[bool, bool]:
        """Step 1's exception: whether the query falls behind, and whether its input is a
        rise the last scale-up fell short of (on a partial window only).

        Behind is a backlog older than ``backlog-processing.lag-threshold``; on a partial
        window of two batches or more, also an input :data:`OVERLOAD` times the capacity."""
        cfg, lam, rate = self.config, r.input, r.per_slot
        behind = r.backlog > 0 and (not lam or r.backlog / lam > cfg.backlog_lag_threshold)
        if full or behind or rate is None or lam is None or r.count < 2:
            return behind, False
        # Input above what the query can process grows a backlog from now on, whatever
        # the source reports (many report none): that is falling behind too.
        cap_now = rate * busy_slots(view.slots, view.partitions, view.max_useful_slots)
        # Right after a scale-up, input above the band and above the rate the scale-up
        # was sized for, by more than the band's headroom, is a rise it under-read (its
        # newest batch straddled the rise), not noise; and not an ineffective scale-up,
        # whose input stays where it was. The next step is decided on the first batches
        # at the new slots, not a full window later.
        sized = self._after_up
        short = (sized is not None and lam > cfg.utilization_max * cap_now
                 and lam > sized * cfg.utilization_max / cfg.utilization_target)
        return lam > OVERLOAD * cap_now, short

    def _stretches(self, view: QueryView, rate: float, startup: float, again: _Again | None
                   ) -> tuple[tuple[float, float], ...]:
        """The capacity until the executors asked for now run, as (rows/s, seconds)
        stretches: the current one for the whole ``startup``; deciding again while a
        scale-up's executors start, the current one only until those run (the start-up left
        since it asked for them; none once they are late) and then theirs."""
        eff = busy_slots(view.slots, view.partitions, view.max_useful_slots)
        cap, up = rate * eff, self._scaled_up
        if again is None or not again.in_flight or up is None:
            return ((cap, startup),)
        waited = min(startup, max(0.0, view.now - up[2]))
        cap_up = self._model.capacity(busy_slots(again.slots, view.partitions,
                                                 view.max_useful_slots), eff, rate)
        return ((cap, startup - waited), (cap_up, waited))

    def _in_band(self, view: QueryView, inputs: DecisionInputs, r: Rates, band: Band,
                 lam: float, cap: float) -> ScalingDecision:
        """No change (a pending scale-down is cancelled): the utilization is within the
        band, or only the newest seconds read above it, or a backlog is being caught up."""
        cfg = self.config
        self._pending_down.clear()
        util = lam / cap
        why = (f"utilization {util:.2f} within [{cfg.utilization_min:g}, "
               f"{cfg.utilization_max:g}]")
        if cap < lam / cfg.utilization_max + r.catch_up:  # only the newest seconds are above it
            why = (f"utilization {band.up_rate / cap:.2f} over the window, within "
                   f"[{cfg.utilization_min:g}, {cfg.utilization_max:g}]; the newest seconds read "
                   f"{util:.2f}, which alone scales up only above {OVERLOAD:g} (falling behind)")
        if cap > band.down_at:
            # No input at all leaves the backlog undrained by arrivals: its lag is unbounded.
            held = (f"{r.backlog / lam:.0f}s of input" if lam > 0
                    else f"{r.backlog:.0f} rows while no input arrives")
            why = (f"catching up a backlog of {held}; no scale-down while it exceeds "
                   f"{cfg.backlog_lag_threshold:g}s")
        elif r.backlog > 0 and r.catch_up > 0:
            why += f" (backlog {r.backlog:.0f} rows included)"
        return self._result(view, "no-change", "none", view.slots, view.partitions, why, inputs)

    # -- directions -----------------------------------------------------------------------
    def _scale_up(self, view: QueryView, inputs: DecisionInputs, rate: float,
                  need_live: float, need_restart: float, downtime: float,
                  reached: int | None = None,
                  pile: tuple[float, tuple[tuple[float, float], ...]] = (0.0, ()),
                  ahead: bool = False) -> ScalingDecision:
        """Step 5 upwards, unless step 7's block holds it back.

        ``reached``: deciding again, the slots the last scale-up reaches (or reached);
        only more than those is carried out. ``pile``: the rows that arrive beyond the
        capacity until the executors asked for now run, and the capacity stretches they
        were counted over (:meth:`_stretches`). ``ahead``: the measured input is within
        the band, a rise forecast within the horizon is not (step 3b): neither a
        shortfall nor a step the effectiveness guard can judge at this load."""
        cfg, s, p, lam = self.config, view.slots, view.partitions, inputs.input_rate or 0.0
        self._pending_down.clear()
        eff = busy_slots(s, p, view.max_useful_slots)
        hi = max(eff * (1 + cfg.scale_up_max_factor), 1.0)
        nl = self._model.clamp(need_live, eff, rate, 0.0, hi)
        nr = self._model.clamp(need_restart, eff, rate, 0.0, hi)
        backlog = inputs.backlog or 0.0
        behind = backlog > 0 and (lam <= 0 or backlog / lam > cfg.backlog_lag_threshold)
        urgent = behind or lam >= (inputs.capacity or 0.0)
        choice = choose(Plan.of(view, cfg, rate, lam, nl, nr, downtime, urgent,
                                self._per_partition), self._model)
        util = inputs.utilization or 0.0
        head = f"utilization {util:.2f} above {cfg.utilization_max:g}"
        if inputs.input_rate_started is not None:
            done = max(inputs.input_rate_window or 0.0, inputs.input_rate_recent or 0.0)
            head += (f" (input {lam:.0f} rows/s, read by the batch that started; the completed "
                     f"ones read {done:.0f})")
        if util <= cfg.utilization_max:  # the backlog's catch-up term made it a scale-up
            head = (f"utilization {util:.2f}, but a backlog of {backlog:.0f} rows is to be "
                    f"caught up within {cfg.catch_up_duration:g}s")
        if ahead:
            head = _ahead_head(view, inputs, cfg.utilization_max)
        startup = inputs.executor_startup or 0.0
        rows, stretches = pile
        if rows > 0 and cfg.catch_up_duration > 0:
            during = f"during the executors' {startup:.1f}s start-up"
            if len(stretches) > 1:  # decided again while the last scale-up's executors start
                (_, left), (_, waited) = stretches
                parts = ([f"{left:.1f}s more on the slots running"] if left > 0 else []) + (
                    [f"{waited:.1f}s on the {reached} slots of the scale-up in flight"]
                    if waited > 0 else [])
                during = "until the executors asked for now run: " + ", then ".join(parts)
            head += (f"; the target adds the {rows:.0f} rows that arrive beyond the capacity "
                     f"{during}")
        if choice is None or choice.slots <= s and choice.partitions == p:
            why = choice.reason if choice is not None else "no slot count helps"
            return self._result(view, "no-change", "none", s, p,
                                f"{head}, but nothing better is possible: {why}", inputs)
        if reached is not None and choice.slots <= reached:
            return self._result(view, "no-change", "none", s, p,
                                f"{head}, but the {reached} slots of the last "
                                "scale-up reach it", inputs)
        block = self._guard.block
        if block is not None and not ahead and self._guard.blocks(choice.kind,
                                                                  choice.partitions,
                                                    choice.slots, view.now, behind):
            return self._result(
                view, "blocked", choice.kind, s, p,
                f"{head}; the last scale-up to {block.slots} slots on {p} partitions was "
                f"ineffective, so more slots on the same partitions are blocked for another "
                f"{max(0.0, block.until - view.now):.0f}s (or until the query falls behind)",
                inputs,
                target=(choice.slots, choice.partitions))
        d = self._result(view, "scale-up", choice.kind, s, p, f"{head}: {choice.reason}",
                         inputs, target=(choice.slots, choice.partitions), ahead=ahead)
        if d.applied and ahead:
            self._scaled_up = (choice.slots, inputs.forecast_rate or lam, view.now)
        elif d.applied:
            self._guard.expect(choice.slots, choice.partitions, inputs.capacity or 0.0,
                               self._model.capacity(busy_slots(choice.slots,
                                                               choice.partitions,
                                                               view.max_useful_slots),
                                                    eff, rate))
            self._scaled_up = (choice.slots, lam, view.now)
            if util > cfg.utilization_target:  # not a backlog's catch-up alone
                self._short.record(eff, p, lam, view.now)
        return d

    def _scale_down(self, view: QueryView, inputs: DecisionInputs, rate: float,
                    need_live: float, need_restart: float, downtime: float,
                    falling: bool, idle: bool = False) -> ScalingDecision:
        """Steps 5 and 6 downwards: the slots, past those that fell short, then the wait.

        ``falling``: the newest seconds' input rate is below :data:`SETTLED` times the
        window's, it is theirs that is below the band, and the needs are sized on it.
        ``idle``: the utilization is in the band, but some slots get no task."""
        now, s, p = view.now, view.slots, view.partitions
        head = self._down_head(view, inputs, falling, idle)
        lam = inputs.input_rate or 0.0
        if falling:
            dropping = self._still_dropping(view, inputs, head)
            if dropping is not None:
                return dropping
            lam = inputs.input_rate_recent or 0.0
        x_live, x_rst = self._down_slots(view, rate, need_live, need_restart)
        _, xl, xr = self._pending_down.merged(now, x_live, x_rst)
        # A need that could not go below the current slots cannot when it is higher: the
        # choice is monotone in the need, so that answer is reused (queries that sit below the
        # band on their smallest useful slot count are common and evaluated every interval).
        key = self._floor_key(view, downtime)
        floor = self._floor
        if floor is not None and floor[0] == key and xl >= floor[1] and xr >= floor[2]:
            self._pending_down.clear()
            return self._result(view, "no-change", "none", s, p, f"{head}{floor[3]}", inputs)
        sized = self._past_shortfalls(view, rate, lam, downtime, idle, xl, xr)
        choice, fell = sized.choice, sized.fell
        if fell is not None:
            short = self._shortfall_phrase(fell, lam, now)
            if choice is None or choice.slots >= s or sized.refused is not None:
                self._pending_down.clear()
                return self._result(view, "no-change", "none", s, p,
                                    f"{head}, but not onto {fell.slots:g} slots or fewer: "
                                    f"{short}", inputs)
            head = f"{head} (not onto {fell.slots:g} slots or fewer: {short})"
        if choice is not None and choice.slots < s and choice.kind != "live":
            # A restart's interval starts with its first recommendation, once the window has
            # settled, not with a reading below the band while the input still fell.
            self._pending_down.clear_unsized()
            if falling:
                lam_w = inputs.input_rate_window or 0.0
                return self._result(
                    view, "scale-down-pending", "none", s, p,
                    f"{head}, but the input is still falling ({lam:.0f} rows/s newest, "
                    f"{lam_w:.0f} over the window); a scale-down that restarts is recommended "
                    "once the window has settled", inputs)
        since = self._pending_down.record(now, max(x_live, sized.floor),
                                          max(x_rst, sized.floor))[0]
        if choice is None or choice.slots >= s:
            # The interval's highest recommendation keeps the current slots: it is spent, and
            # a new interval starts with the next recommendation (Flink: "no change" clears).
            self._pending_down.clear()
            why = choice.reason if choice is not None else "no smaller slot count"
            tail = f", but no smaller target keeps up: {why}"
            self._floor = (key, sized.live, sized.restart, tail)
            return self._result(view, "no-change", "none", s, p, f"{head}{tail}", inputs)
        return self._down_once_waited(view, inputs, head, choice, since)

    def _down_head(self, view: QueryView, inputs: DecisionInputs, falling: bool,
                   idle: bool) -> str:
        """A scale-down reason's opening: the utilization below the band, over the window or
        (``falling``) in the newest seconds; or (``idle``) in the band, with slots that get
        no task."""
        cfg, s, p = self.config, view.slots, view.partitions
        util = inputs.utilization or 0.0
        if falling:
            cap = inputs.capacity or math.inf
            return (f"utilization {(inputs.input_rate_recent or 0.0) / cap:.2f} in the newest "
                    f"seconds ({util:.2f} over the window) below {cfg.utilization_min:g}")
        if idle:
            eff = busy_slots(s, p, view.max_useful_slots)
            return (f"utilization {util:.2f} in the band, but {s} slots run the "
                    f"{tasks_phrase(p, view.max_useful_slots)} only as fast as {eff:g} would")
        return f"utilization {util:.2f} below {cfg.utilization_min:g}"

    def _still_dropping(self, view: QueryView, inputs: DecisionInputs, head: str
                        ) -> ScalingDecision | None:
        """A falling input's scale-down waits (and its interval starts) while the newest
        batch reads far less than the newest seconds; else None.

        The window still averages in the higher rate of a while ago. A restart sized on it
        would be kept as the interval's maximum and cost a second restart, so a restart
        waits for the window to settle (:meth:`_scale_down`). A live scale-down is sized on
        the newest seconds' rate: it costs nothing to repeat as the input falls on, while
        waiting for the window would keep the slots it no longer needs. Not while the newest
        batch reads far less than the newest seconds: they still mix in the rate from before
        a drop, and the interval would keep what they need. The interval runs from the first
        reading below the band, so that the wait for the newest seconds to settle is not paid
        on top of it; its maximum is taken over the settled recommendations only."""
        lam_w, lam_r = inputs.input_rate_window or 0.0, inputs.input_rate_recent or 0.0
        lam_n = self._window.newest_arrival_rate()
        if lam_n is None or lam_n < SETTLED * lam_r:
            self._pending_down.start(view.now)
            return self._result(
                view, "scale-down-pending", "none", view.slots, view.partitions,
                f"{head}, but the input is still dropping ({lam_n or 0:.0f} rows/s in the "
                f"newest batch, {lam_r:.0f} in the newest seconds, {lam_w:.0f} over the "
                "window); the scale-down is recommended once the newest seconds have "
                "settled", inputs)
        return None

    def _down_slots(self, view: QueryView, rate: float, need_live: float,
                    need_restart: float) -> tuple[float, float]:
        """The slots a scale-down's live and restart needs take (step 5). Flink floors a scale-down
        at (1 - max-factor) times the current parallelism: here the current slots, in the
        effective slots the model sizes in."""
        s, m = view.slots, self._model
        eff = busy_slots(s, view.partitions, view.max_useful_slots)
        lo = min(eff, s * (1 - self.config.scale_down_max_factor))
        return (m.slots_for(m.clamp(need_live, eff, rate, lo, math.inf), eff, rate),
                m.slots_for(m.clamp(need_restart, eff, rate, lo, math.inf), eff, rate))

    def _floor_key(self, view: QueryView, downtime: float) -> tuple[object, ...]:
        """What a scale-down's choice depends on but its needs: a cached "no smaller target"
        holds while this stays the same."""
        return (view.slots, view.partitions, view.lower, view.upper, view.slot_upper,
                view.can_restart, view.max_useful_slots, view.slots_per_executor,
                view.cluster_max_slots, downtime, self._model.fit())

    def _past_shortfalls(self, view: QueryView, rate: float, lam: float, downtime: float,
                         idle: bool, xl: float, xr: float) -> _Sized:
        """The target for live and restart needs of ``xl`` and ``xr`` slots at an input of
        ``lam``, raised past slots that fell short at this load (:class:`.protections.
        ShortfallMemory`): those are not gone back to, though a smaller count above them may
        still do. Releasing slots that get no task (``idle``), at no loss of capacity, is
        not a shortfall's business."""
        cfg, now, m, s = self.config, view.now, self._model, view.slots
        eff = busy_slots(s, view.partitions, view.max_useful_slots)

        def pick(x_l: float, x_r: float) -> Choice | None:
            """The target for live and restart needs of ``x_l`` and ``x_r`` slots."""
            return choose(Plan.of(view, cfg, rate, lam, m.capacity(x_l, eff, rate),
                                  m.capacity(x_r, eff, rate), downtime,
                                  per_partition=self._per_partition), m)

        def refusing(c: Choice | None) -> Shortfall | None:
            if c is None or c.slots >= s:
                return None
            c_eff = busy_slots(c.slots, c.partitions, view.max_useful_slots)
            if idle and c_eff >= eff - 1e-9:
                return None
            return self._short.refuses(c_eff, c.partitions, lam, cfg.utilization_target,
                                       now)

        choice = pick(xl, xr)
        fell, floor_x = None, 0.0
        f = refusing(choice)
        for _ in range(len(self._short)):
            if f is None:
                break
            # past the planner's tolerance on slot counts
            fell, floor_x = f, max(floor_x, f.slots + 1e-3)
            xl, xr = max(xl, floor_x), max(xr, floor_x)
            choice = pick(xl, xr)
            f = refusing(choice)
        return _Sized(choice, xl, xr, floor_x, fell, f)

    def _shortfall_phrase(self, fell: Shortfall, lam: float, now: float) -> str:
        """Why a scale-down stops above ``fell``'s slots, at an input of ``lam``."""
        return (f"{fell.slots:g} slots fell short of {fell.rate:.0f} rows/s on "
                f"{fell.partitions} partitions "
                f"{SHORTFALL_EXPIRY - (fell.until - now):.0f}s ago (a scale-up left "
                f"them), and the input, {lam:.0f} rows/s, is at least "
                f"{self.config.utilization_target:g} of that")

    def _down_once_waited(self, view: QueryView, inputs: DecisionInputs, head: str,
                          choice: Choice, since: float) -> ScalingDecision:
        """Step 6: a scale-down to ``choice``, recommended first at ``since``, waits out
        ``scale-down.interval``; then it is applied."""
        cfg, now, s, p = self.config, view.now, view.slots, view.partitions
        target = (choice.slots, choice.partitions)
        waited = now - since
        if waited < cfg.scale_down_interval:
            return self._result(
                view, "scale-down-pending", choice.kind, s, p,
                f"{head}; scale-down to {choice.slots} slots waits "
                f"{cfg.scale_down_interval - waited:.0f}s more (scale-down.interval keeps the "
                f"highest recommendation meanwhile)", inputs, target=target)
        self._pending_down.clear()
        d = self._result(view, "scale-down", choice.kind, s, p, f"{head}: {choice.reason}",
                         inputs, target=target)
        if d.applied:
            self._scaled_up = None  # a scale-up that never completed is not waited for now
        return d

    # -- helpers and results ----------------------------------------------------------------
    def _downtime(self, view: QueryView) -> float:
        cfg = self.config
        return restart_downtime(cfg.restart_time_tracking, cfg.restart_time,
                                cfg.restart_time_tracking_limit,
                                (*view.restart_downtimes, *self._downtimes))

    def _startup(self) -> float:
        """Seconds new executors are expected to take: the longest of the last live
        scale-ups' (capped like a restart's downtime) with time tracking, else the key."""
        cfg = self.config
        return restart_downtime(cfg.restart_time_tracking, cfg.executor_startup_time,
                                cfg.restart_time_tracking_limit, tuple(self._startups))

    def _forget_times(self, now: float) -> None:
        """The clock went back to ``now``: what was measured or started on the old clock
        (the window, a pending scale-down's start, a block's or a shortfall's end) cannot be
        compared with the new one, so it is dropped and the query is watched again after
        stabilizing. A scale-up still in flight counts as asked for now: its executors'
        whole start-up is ahead again."""
        self._window.clear()
        self._after_up = self._before = None
        self._pending_down.clear()
        self._guard.block = None
        self._short.clear()
        self._stable_from = now + self.config.stabilization_interval
        if self._scaled_up is not None:
            self._scaled_up = (*self._scaled_up[:2], now)

    def _reject(self, why: str) -> bool:
        self.rejected += 1
        self.last_rejection = why
        return False

    def _not_ready(self, view: QueryView, reason: str,
                   inputs: DecisionInputs | None = None) -> ScalingDecision:
        if inputs is None:
            w = self._window
            inputs = DecisionInputs((w.last_time or 0.0) - (w.first_time or 0.0), w.count)
        return self._result(view, "not-ready", "none", view.slots, view.partitions, reason,
                            inputs)

    def _result(self, view: QueryView, outcome: Outcome, kind: Kind, slots: int,
                partitions: int, reason: str, inputs: DecisionInputs,
                target: tuple[int, int] | None = None, ahead: bool = False
                ) -> ScalingDecision:
        self._last = make_decision(view.now, outcome, kind, slots, partitions, reason, inputs,
                                   target, self.config.scaling_enabled, ahead)
        return self._last

    def snapshot(self) -> dict[str, object]:
        """The policy's state for ``GET /queries/{id}/autoscaler`` (plain values)."""
        fit = self._model.fit()
        return {
            "query": self.query,
            "stabilizedAt": self._stable_from,
            "windowSamples": self._window.count,
            "pendingScaleDownSince": self._pending_down.since,
            "blockedUntil": self._guard.block.until if self._guard.block else None,
            "scalabilityObservations": self._model.observations,
            "scalabilityFit": list(fit) if fit else None,
            "rejectedSamples": self.rejected,
            "lastRejection": self.last_rejection,
            "lastDecision": self._last.as_dict() if self._last else None,
        }


def _in_use(forecast: Forecast | None) -> float | None:
    """The rate a forecast reads ahead, when the policy may act on it."""
    return forecast.rate if forecast is not None and forecast.in_use else None


def _ahead(forecast: Forecast | None, lam: float | None) -> float | None:
    """The rate a forecast in use reads ahead, when above the measured input ``lam``."""
    rate = _in_use(forecast)
    return rate if rate is not None and lam is not None and rate > lam else None


def _ahead_head(view: QueryView, inputs: DecisionInputs, utilization_max: float) -> str:
    """A scale-up ahead of a forecast rise: its reason's opening."""
    f, cap = view.forecast, inputs.capacity or math.inf
    rate = inputs.forecast_rate or 0.0
    conf = f.confidence if f is not None and f.confidence is not None else 0.0
    return (f"a rise to {rate:.0f} rows/s is forecast within {f.horizon if f else 0:.0f}s "
            f"(confidence {conf:.2f}, {periods_phrase(f.periods if f else 0)} back; input now "
            f"{inputs.input_rate or 0:.0f} rows/s): on the capacity now that is utilization "
            f"{rate / cap:.2f}, above {utilization_max:g}, so the executors are asked for "
            "before it comes")


def _per_partition(window: MetricsWindow, tasks: int) -> float:
    """Slots one partition's fixed task cost keeps busy: the fixed part of a batch's busy
    time (:meth:`.window.MetricsWindow.batch_cost`, all of it taken as per-task) over the
    ``tasks`` a batch runs (every stage's; the partitions when that is unknown) and the
    batch interval; 0 while the window cannot tell. Rounded to two significant digits, so
    that the restart planner's cache sees few distinct values."""
    cost, interval = window.batch_cost(), window.batch_interval()
    if cost is None or not interval or tasks < 1:
        return 0.0
    return float(f"{cost[0] / (tasks * interval):.2g}")
