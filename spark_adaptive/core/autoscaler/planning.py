"""Where to go: slot counts and partition counts for a needed capacity, live first.

Pure functions over a :class:`Plan` (what the policy measured and needs). The
rules, in the order they apply:

1. **Never more slots than tasks.** A query runs at most ``P`` tasks at once
   (a stateless query its source partitions, ``max_useful_slots``, fewer or
   more than ``P``; more only up to its upper bound, or ``slot_upper``); slots
   beyond that idle.
   Slot targets are whole executors, so the top is the executor count that
   hosts every task, and never above the cluster maximum.
2. **Live candidates** keep ``P`` and change the slots to a count at which the
   query's tasks run in balanced waves: a divisor of ``P`` (the project's live
   rule, ``P % s == 0``), with ``P`` within the query's bounds. A stateless
   query capped by its source partitions runs ``T = max_useful_slots`` tasks
   whatever ``P`` (such a query cannot restart: its micro-batches run in one
   stage): its candidates are the fewest whole executors for each number of
   waves, ``ceil(T / w)`` rounded up to whole executors (the divisors of ``T``
   and the counts between them that leave less than an executor idle). Their capacity
   is the rate per slot times ``T / ceil(T / s)`` busy slots
   (:func:`busy_slots`, ``T = P`` uncapped), bent by the observed scalability.
3. **The restart candidate** has the fewest whole executors whose capacity
   meets the need (with Flink's restart term in it), and a new partition count
   ``P'``: the multiple of ``S'`` (up to ``restart.max-partitions-per-slot``
   times, within the bounds) with the most balanced slot counts between
   ``S'/2`` and ``2 S'``, the smallest on ties. That makes the next rescales
   live; ``max-partitions-per-slot = 1`` gives Flink's ``P' = S'``.
4. **Choosing.** The smallest adequate live candidate wins when no restart
   would use fewer slots, when it keeps the utilization within the band (live
   first: no downtime, no risk), when it is a scale-up of a query falling
   behind (executors join as they start and nothing stops, which is what such a
   query needs; a later scale-down trims the excess), or when a restart would save a smaller
   fraction of its slots than the band is wide (``1 - min / target``: the
   waste the band tolerates anyway; without this rule a query whose load drifts
   would restart for every slot). Otherwise the restart is priced: its
   downtime times the slots held meanwhile (executor-seconds paid for no
   work), against the slots the live choice wastes times the horizon before a
   scale-down could correct it (stabilization + window + scale-down interval).
   The cheaper wins and the reason gives both figures. When no live candidate
   is adequate, a restart is taken if possible; otherwise the best live one.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

from spark_adaptive.core.autoscaler.config import AutoscalerConfig
from spark_adaptive.core.autoscaler.decision import Kind
from spark_adaptive.core.autoscaler.samples import QueryView, clean
from spark_adaptive.core.autoscaler.scalability import ScalabilityModel
from spark_adaptive.core.autoscaler.window import effective_slots, task_count


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """Divisors of ``n`` in ascending order."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return tuple(small + large[::-1])


def round_up(slots: float, per_executor: int) -> int:
    """Slots of the fewest whole executors holding at least ``slots`` (at least one)."""
    executors = max(1, math.ceil(slots / per_executor - 1e-9))
    return executors * per_executor


def round_down(slots: float, per_executor: int) -> int:
    """Slots of the most whole executors within ``slots`` (at least one executor)."""
    return max(1, math.floor(slots / per_executor + 1e-9)) * per_executor


FUTURE_WEIGHT = 2.0
"""How much the expected waste of later live rescales weighs against the slots needed now:
a partition count outlives many rescales, and each one its balanced counts miss would cost
another restart."""

FIT_POINTS = 12
"""Future needs sampled (log-spaced over ``[S/2, 2S]``) to score a partition count."""


def _smallest_at_least(options: tuple[int, ...], y: float) -> int | None:
    lo, hi = 0, len(options)
    while lo < hi:
        mid = (lo + hi) // 2
        if options[mid] < y - 1e-9:
            lo = mid + 1
        else:
            hi = mid
    return options[lo] if lo < len(options) else None


def balanced_slots(partitions: int, per_executor: int, cap: int) -> tuple[int, ...]:
    """Slot counts at which ``partitions`` run in balanced waves, ascending."""
    return tuple(d for d in divisors(partitions) if d % per_executor == 0 and d <= cap)


def expected_overshoot(partitions: int, slots: int, per_executor: int, cap: int) -> float:
    """Mean relative excess of the balanced slot count over a need near ``slots``.

    Needs are sampled log-evenly over ``[slots/2, 2 slots]``; a need above every
    balanced count would take another restart and counts as 100%.
    """
    options = balanced_slots(partitions, per_executor, cap)
    total = 0.0
    for i in range(FIT_POINTS):
        y = slots * 2.0 ** (2.0 * i / (FIT_POINTS - 1) - 1.0)
        d = _smallest_at_least(options, y)
        total += 1.0 if d is None else (d - y) / y
    return total / FIT_POINTS


def _smooth_numbers(limit: int) -> tuple[int, ...]:
    """Numbers up to ``limit`` whose prime factors are 2, 3 and 5, ascending."""
    out = []
    p2 = 1
    while p2 <= limit:
        p3 = p2
        while p3 <= limit:
            p5 = p3
            while p5 <= limit:
                out.append(p5)
                p5 *= 5
            p3 *= 3
        p2 *= 2
    return tuple(sorted(out))


SMOOTH = _smooth_numbers(1 << 20)
"""Partition counts a restart considers: they and all their divisors have only the prime
factors 2, 3 and 5, so balanced slot counts lie close together (60 runs balanced on 10, 12,
15, 20 and 30 slots); other numbers rarely score better and scanning every one would cost a
decision milliseconds."""


@functools.lru_cache(maxsize=4096)
def restart_target(need: int, lower: int, upper: int, per_slot_max: int, per_executor: int,
                   cap: int | None, limit: int, per_partition: float = 0.0) -> tuple[int, int]:
    """Slots and partitions ``(S', P')`` for a restart that needs ``need`` balanced slots.

    Each candidate ``P'`` within ``[max(lower, need), min(upper, per_slot_max need)]`` (the
    numbers of :data:`SMOOTH` there, and the range's ends) is scored by the slots it needs
    now (its smallest balanced count ``S' >= need``, whole executors, at most ``limit``) plus
    those slots times :data:`FUTURE_WEIGHT` times :func:`expected_overshoot`: what later
    live rescales near ``S'`` would waste; plus ``P' x per_partition``, the slots its tasks'
    fixed cost keeps busy (every task costs its slot a fixed time each micro-batch, whatever
    its rows). The cheapest wins, the fewer partitions on a tie. ``per_slot_max = 1`` gives
    Flink's ``P' = S'``.
    """
    need = max(1, need)
    s_top = min(limit, upper if cap is None else min(upper, cap))
    s_top = max(per_executor, s_top - s_top % per_executor)
    if need > s_top:  # the bounds or the cluster cannot give more
        s = s_top
        return s, min(upper, max(lower, s))
    lo_p = max(lower, need)
    hi_p = min(upper, per_slot_max * round_up(need, per_executor))
    i = bisect.bisect_left(SMOOTH, lo_p)
    j = bisect.bisect_right(SMOOTH, hi_p)
    candidates = sorted({lo_p, hi_p, *SMOOTH[i:j]}) if lo_p <= hi_p else []
    best: tuple[float, int, int] | None = None
    for p in candidates:
        t_cap = p if cap is None else min(p, cap)
        fit = _smallest_at_least(balanced_slots(p, per_executor, min(t_cap, limit)), need)
        if fit is None:
            continue
        cost = float(fit)
        if per_slot_max > 1:
            cost *= 1.0 + FUTURE_WEIGHT * expected_overshoot(p, fit, per_executor, t_cap)
        cost += p * per_partition
        if best is None or cost < best[0] - 1e-9:
            best = (cost, fit, p)
    if best is None:
        s = min(round_up(need, per_executor), s_top)
        return s, min(upper, max(lower, s))
    return best[1], best[2]


def restart_downtime(tracking: bool, assumed: float, limit: float,
                     observed: tuple[float, ...]) -> float:
    """The downtime a restart is priced at (or, with the start-ups observed and
    ``executor-startup.time`` assumed, a live scale-up's executor start-up): the longest
    observed one (capped by ``limit``) when ``tracking`` and one was observed, else the
    ``assumed`` ``restart.time``."""
    if tracking:
        usable = [x for x in observed if clean(x) is not None]
        if usable:
            return min(max(usable), limit)
    return assumed


@dataclass(frozen=True, slots=True)
class Plan:
    """What a choice is made from. Capacities and needs are rows per second."""

    slots: int
    partitions: int
    lower: int
    upper: int
    max_useful_slots: int | None
    can_restart: bool
    per_executor: int
    cluster_max_slots: int | None
    rate_per_slot: float  # measured now, per busy slot-second
    input_rate: float
    need_live: float
    need_restart: float
    downtime: float
    horizon: float
    utilization_min: float
    utilization_target: float
    per_slot_max: int
    urgent: bool = False  # falling behind: capacity below the input, or an old backlog
    per_partition: float = 0.0  # slots a partition's fixed task cost keeps busy
    slot_upper: int = 0  # most slots, when more than upper (QueryView.slot_upper)
    eff_now: float = 0.0  # effective slots now, computed from slots and partitions

    def __post_init__(self) -> None:
        object.__setattr__(self, "eff_now", effective_slots(self.slots,
                                                            self.task_cap(self.partitions)))

    @classmethod
    def of(cls, view: QueryView, cfg: AutoscalerConfig, rate: float, lam: float,
           need_live: float, need_restart: float, downtime: float,
           urgent: bool = False, per_partition: float = 0.0) -> Plan:
        """The plan for a query as ``view`` shows it, with the horizon and band of ``cfg``."""
        return cls(
            slots=view.slots, partitions=view.partitions, lower=view.lower, upper=view.upper,
            max_useful_slots=view.max_useful_slots, can_restart=view.can_restart,
            per_executor=view.slots_per_executor, cluster_max_slots=view.cluster_max_slots,
            rate_per_slot=rate, input_rate=lam, need_live=need_live, need_restart=need_restart,
            downtime=downtime,
            horizon=cfg.stabilization_interval + cfg.metrics_window + cfg.scale_down_interval,
            utilization_min=cfg.utilization_min, utilization_target=cfg.utilization_target,
            per_slot_max=cfg.restart_max_partitions_per_slot, urgent=urgent,
            per_partition=per_partition, slot_upper=view.slot_upper or 0)

    def task_cap(self, partitions: int) -> int:
        return task_count(partitions, self.max_useful_slots)

    def slot_limit(self, partitions: int) -> int:
        """Most slots worth giving at ``partitions`` partitions (rule 1). A stateless query
        whose source has more partitions than it has runs more tasks than ``partitions``,
        and the upper bound (or ``slot_upper``), not the partitions, keeps its slots in."""
        tasks = self.task_cap(partitions)
        if tasks > partitions:
            tasks = max(partitions, min(tasks, max(self.upper, self.slot_upper)))
        top = round_up(tasks, self.per_executor)
        if self.cluster_max_slots is not None:
            top = min(top, round_down(self.cluster_max_slots, self.per_executor))
        return top


@dataclass(frozen=True, slots=True)
class Choice:
    kind: Kind  # "live" keeps the partitions (may equal the current slots); "restart"
    slots: int
    partitions: int
    capacity: float
    adequate: bool
    reason: str


def tasks_phrase(partitions: int, max_useful_slots: int | None) -> str:
    """"P partitions", or "T tasks of its P partitions" for a stateless query whose source
    has fewer partitions, "T tasks of its source (P partitions)" for one whose has more
    (for reasons)."""
    tasks = task_count(partitions, max_useful_slots)
    if tasks == partitions:
        return f"{partitions} partitions"
    if tasks < partitions:
        return f"{tasks} tasks of its {partitions} partitions"
    return f"{tasks} tasks of its source ({partitions} partitions)"


def busy_slots(slots: int, partitions: int, max_useful_slots: int | None) -> float:
    """Slots that have a task on average: ``T / ceil(T / s)`` for the query's ``T`` tasks
    (:func:`task_count`)."""
    return effective_slots(slots, task_count(partitions, max_useful_slots))


def capacity(plan: Plan, model: ScalabilityModel, slots: int, partitions: int) -> float:
    eff = effective_slots(slots, plan.task_cap(partitions))
    return model.capacity(eff, plan.eff_now, plan.rate_per_slot)


def live_candidates(plan: Plan) -> tuple[int, ...]:
    """Slot counts reachable without a restart, ascending (empty if P is out of bounds)."""
    p = plan.partitions
    return _live_slots(p, plan.lower <= p <= plan.upper, plan.task_cap(p), plan.per_executor,
                       plan.slot_limit(p), plan.slots)


@functools.lru_cache(maxsize=4096)
def _live_slots(p: int, in_bounds: bool, cap: int, spe: int, limit: int,
                current: int) -> tuple[int, ...]:
    if not in_bounds:
        return ()
    if cap != p:
        # A stateless query runs its source's ``cap`` tasks whatever its partitions: the
        # fewest whole executors for each number of waves (the divisors of ``cap`` and the
        # counts between them, each leaving less than an executor idle), not only the
        # divisors.
        counts: tuple[int, ...] = tuple(sorted({round_up(-(-cap // w), spe)
                                                for w in range(1, cap + 1)}))
        out = [d for d in counts if d <= limit]
        balanced = current in counts or current >= cap
    else:
        counts = divisors(p)
        out = [d for d in counts if d % spe == 0 and d <= limit]
        balanced = p % min(current, cap) == 0
    top = round_up(cap, spe)
    if top <= limit and top not in out:
        out.append(top)  # whole executors hosting every task; the extra slots idle
    if current not in out and current <= limit and balanced:
        out.append(current)
    return tuple(sorted(out))


def restart_candidate(plan: Plan, model: ScalabilityModel) -> Choice | None:
    if not plan.can_restart or plan.max_useful_slots is not None:
        return None  # a stateless query's tasks are its source's, whatever its partitions
    x = model.slots_for(plan.need_restart, plan.eff_now, plan.rate_per_slot)
    limit = plan.upper
    if plan.cluster_max_slots is not None:
        limit = min(limit, round_down(plan.cluster_max_slots, plan.per_executor))
    x = min(x, float(limit)) if math.isfinite(x) else float(limit)
    need = max(1, math.ceil(x - 1e-9))
    # A limit above every partition count considered changes nothing: leaving it out of the
    # cache key keeps a cluster whose free slots move from defeating the cache.
    limit = min(limit, plan.per_slot_max * round_up(need, plan.per_executor))
    s, p = restart_target(need, plan.lower, plan.upper, plan.per_slot_max, plan.per_executor,
                          plan.max_useful_slots, limit, plan.per_partition)
    cap = capacity(plan, model, s, p)
    return Choice("restart", s, p, cap, cap >= plan.need_restart * (1 - 1e-9), "")


def choose(plan: Plan, model: ScalabilityModel) -> Choice | None:
    """The best target for the needed capacity (rule 4), or None when nothing is better."""
    p = plan.partitions
    cands = live_candidates(plan)
    live: Choice | None = None
    # Capacity grows with the slots, so the first adequate candidate is found by bisection
    # from the continuous need, then checked (the cap and rounding can shift it by one).
    x = model.slots_for(plan.need_live, plan.eff_now, plan.rate_per_slot)
    i = bisect.bisect_left(cands, x - 1e-6) if math.isfinite(x) else len(cands)
    i = max(0, i - 1)
    while i < len(cands):
        c = capacity(plan, model, cands[i], p)
        if c >= plan.need_live * (1 - 1e-9):
            live = Choice("live", cands[i], p, c, True, "")
            break
        i += 1
    if live is not None:
        util = plan.input_rate / live.capacity if live.capacity > 0 else math.inf
        head = (f"{live.slots} slots run the {tasks_phrase(p, plan.max_useful_slots)} "
                "balanced, no restart")
        if util >= plan.utilization_min or not plan.can_restart:
            # live first: within the band no restart is considered (nor priced)
            why = "" if plan.can_restart else " (the partition count cannot change)"
            return _with(live, f"live: {head}{why}")
        if live.slots > plan.slots and plan.urgent:
            return _with(live, f"live: {head}; utilization {util:.2f} will be below the band, "
                               "but a query falling behind is scaled up live (executors join "
                               "as they start, nothing stops); a scale-down may trim it later")
    restart = restart_candidate(plan, model)
    if restart is not None and restart.slots == plan.slots and restart.partitions == p:
        restart = None  # a restart onto the same configuration changes nothing
    if live is not None:
        if restart is None or not restart.adequate or restart.slots >= live.slots:
            return _with(live, f"live: {head}; utilization {util:.2f} is below the band, but a "
                               "restart would not need fewer slots")
        saved = live.slots - restart.slots
        band = 1.0 - plan.utilization_min / plan.utilization_target
        if saved < band * live.slots:
            return _with(live, f"live: {head}; a restart at {restart.slots} slots would save "
                               f"{saved} of {live.slots} ({saved / live.slots:.0%}), less than "
                               f"the band's width ({band:.0%}) tolerates")
        waste = saved * plan.horizon
        price = plan.downtime * max(plan.slots, restart.slots)
        figures = (f"live at {live.slots} slots would leave utilization {util:.2f} and waste "
                   f"{saved} slots x {plan.horizon:.0f}s = {waste:.0f} slot-s; the restart "
                   f"costs {plan.downtime:.1f}s downtime x {max(plan.slots, restart.slots)} "
                   f"slots = {price:.0f} slot-s")
        if waste > price:
            return _with(restart, f"restart at {restart.partitions} partitions: {figures}")
        return _with(live, f"live: {head}; {figures}")
    largest = cands[-1] if cands else None
    why_live = (f"no balanced slot count of the {tasks_phrase(p, plan.max_useful_slots)} "
                f"reaches {plan.need_live:.0f} rows/s" if cands else
                f"{p} partitions are outside the bounds [{plan.lower}, {plan.upper}]")
    best_live = None
    if largest is not None:
        best_live = Choice("live", largest, p, capacity(plan, model, largest, p), False, "")
    if restart is not None and (best_live is None or restart.capacity > best_live.capacity):
        tail = "" if restart.adequate else " (as far as the bounds and the cluster allow)"
        return _with(restart, f"restart at {restart.partitions} partitions: {why_live}{tail}")
    if best_live is not None:
        why = "" if plan.can_restart else "; the partition count cannot change"
        return _with(best_live, f"live: {why_live}{why}; {largest} slots is the most that "
                                "helps")
    return None


def _with(c: Choice, reason: str) -> Choice:
    return Choice(c.kind, c.slots, c.partitions, c.capacity, c.adequate, reason)
