"""The executors an application asks for: one pure function of a few facts.

Spark's ``ExecutorAllocationManager`` keeps one target recomputed from a few facts;
Flink's adaptive scheduler computes its desired resources as one function and hands them
to a pool that reconciles. spark-adaptive does the same: :func:`executor_demand` turns the
facts of one moment (:class:`DemandInputs`) into the total to declare and why
(:class:`Demand`), and :class:`~spark_adaptive.core.executors.reconciler.Reconciler` sends
it when it differs from the total sent last.

The model in a paragraph. While managed streaming queries run, the app asks for the slots
its queries want (each query's upper bound, the autoscaler's target, or, for a query the
autoscaler has not decided for yet, the most slots it has run on), in executors, oldest
first; it never asks below the slots its running micro-batches use, and executors a
running stage may have tasks on are kept (never asked for) until it completes. Executors
beyond the total go at once when the total drops, and otherwise (one that joined late, a
release Spark refused) only at a micro-batch boundary. With no managed query the app holds
what it would hold without spark-adaptive: the start's hold, the batch part's demand, or
the baseline it went back to when its last query ended.

The rows (each one is a case of ``tests/unit/test_executor_demand.py``):

=====  ==================================================================================
row    rule
=====  ==================================================================================
Q1     a fixed pool (local mode) declares nothing
Q2     autoscaled, before its first decision: nothing (the app keeps what Spark gave it)
Q3     the queries want the sum of their slots, capped by max-parallelism; a stateless
       query that runs more source tasks than its bounds counts those (without the
       autoscaler; with it, its target already does)
Q4     never below the slots the running queries use (the in-use floor); it only keeps
       executors counted, never asks for more
Q5     slots become executors: the fewest alive, oldest first, whose slots reach them,
       then the rest at the most common size; none while no size is known
Q6     a running stage with more tasks than its query's slots holds the executors it may
       run on (never above the total sent or alive) until it completes or a boundary
Q7     adaptive mode without the autoscaler: nothing is released before every query's
       first boundary said what it runs
Q8     executors beyond a lower total go at once (the rows above keep what runs); beyond
       a higher or unchanged one (a late executor, a refused release), only at a
       micro-batch boundary while a query runs or a release was refused; a boundary while
       another query's stage runs counts only after SURPLUS_WAIT
N1     with no managed query, the batch part's decision (its own work runs); executors
       beyond it go only when its idle decision releases them
N2     before the first query, the start's hold trims to the executors of its slots (at
       once, never asking for more; a refused release is not retried)
N3     else the baseline the app went back to (its hold undone, its last query ended);
       what is beyond it goes with it, not later
N4     else nothing: the app keeps what Spark gave it
=====  ==================================================================================
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal

SURPLUS_WAIT = 60.0
"""Seconds a surplus executor waits for a moment when no managed query's micro-batch runs;
after that it goes at the next batch boundary of any query (a batch of another query that
loses tasks there runs them again, as Spark does for an executor lost)."""

Source = Literal["none", "queries", "hold", "batch", "baseline"]
Sizing = Literal["bounds", "autoscaler", "undecided"]


@dataclass(frozen=True)
class PoolExecutor:
    """One live executor: its id and task slots."""

    executor_id: str
    slots: int


@dataclass(frozen=True)
class Pool:
    """The app's executors as the demand sees them."""

    executors: tuple[PoolExecutor, ...] = ()
    """Live executors (not released, not hung, not lost), oldest first by when Spark added
    them: a lower total releases the newest, so the oldest are those that stay."""
    slots: int = 0
    """Slots counted: live executors and lost ones still in their loss grace."""
    default_slots_per_executor: int | None = None
    """The size of executors to come while none is alive (``spark.executor.cores``)."""
    lost: int = 0
    """Executors lost and still in their loss grace: they count (a lost executor often
    comes back or is replaced at once), but cannot be released."""

    @property
    def alive(self) -> int:
        """Live executors: those a total below them releases."""
        return len(self.executors)

    @property
    def counted(self) -> int:
        """Live executors and those in their loss grace: what a hold keeps at most."""
        return len(self.executors) + self.lost

    @functools.cached_property
    def _per_executor(self) -> int | None:
        counts = Counter(e.slots for e in self.executors if e.slots > 0)
        if not counts:
            return self.default_slots_per_executor
        top = max(counts.values())
        return min(s for s, n in counts.items() if n == top)

    def slots_per_executor(self) -> int | None:
        """The most common slot count of live executors (the smaller on a tie), else the
        default."""
        return self._per_executor

    def executors_for(self, slots: int) -> int | None:
        """Executors to declare for ``slots`` slots: the fewest live ones, oldest first,
        whose slots reach it, and beyond all of them as many more as the rest needs at the
        most common size. None while no size is known."""
        per = self.slots_per_executor()
        if per is None:
            return None
        kept = 0
        for count, executor in enumerate(self.executors):
            if kept >= slots:
                return count
            kept += executor.slots
        return len(self.executors) + max(0, math.ceil((slots - kept) / per))

    def sizes_text(self) -> str:
        per = self.slots_per_executor()
        sizes = sorted({e.slots for e in self.executors if e.slots > 0})
        if len(sizes) < 2:
            return f"{per} slots per executor"
        return f"executors of {sizes[0]}-{sizes[-1]} slots (any more at {per})"


@dataclass(frozen=True)
class QueryDemand:
    """What one managed streaming query (not finished) asks of the executors."""

    key: str
    slots: int
    """The slots it wants: its allocation's upper bound (its bounds, or the autoscaler's
    target within them), or, autoscaled but not decided for yet, the most it has run on."""
    in_use: int = 0
    """Slots its run uses now (0 while none runs)."""
    running_tasks: int = 0
    """Tasks of its run's stages submitted and not completed."""
    boundary_seen: bool = True
    """What it runs is known at a batch boundary (see ``QueryScheduler.boundary_seen``)."""
    source_tasks: int | None = None
    """Its source's tasks when they are more than ``slots`` and plain Spark would run them on
    as many executors (stateless, one stage, bounds not the user's; without the autoscaler)."""

    @property
    def counted(self) -> int:
        return max(self.slots, self.source_tasks or 0)


@dataclass(frozen=True)
class Baseline:
    """A total the app holds with no managed query, and why."""

    total: int
    reason: str
    release_surplus: bool = False
    """Executors alive beyond it go now (the batch part found the app idle, with nothing
    persisted): only the decision of the moment releases, never a later event."""


@dataclass(frozen=True)
class DemandInputs:
    """Every fact the executor total depends on, at one moment."""

    pool: Pool
    queries: tuple[QueryDemand, ...] = ()
    """The managed queries that have not finished."""
    fixed: bool = False
    """A fixed pool of slots (local mode): nothing can be asked for or released."""
    sizing: Sizing = "bounds"
    """How the queries are sized: by their bounds; by the autoscaler's targets; or not yet
    (autoscaled, and the autoscaler has decided for no query since the app went idle)."""
    first_boundary: bool = False
    """Adaptive mode without the autoscaler: nothing is released before every query's first
    batch boundary (Q7)."""
    max_parallelism: int = 32768
    hold_slots: int | None = None
    """The start's hold: the slots whose executors the app keeps before its first query."""
    batch: Baseline | None = None
    """The batch part's demand, while it sizes the app (no managed query)."""
    baseline: Baseline | None = None
    """What the app went back to with no managed query (its hold undone, its last query
    ended)."""
    sent: int | None = None
    """The total sent last (None: never)."""
    refused: bool = False
    """A release was refused since the last total was sent."""
    at_boundary: bool = False
    """This moment is a micro-batch boundary of a managed query (a progress or idle report)."""
    surplus_wait_over: bool = False
    """Executors beyond the total have waited :data:`SURPLUS_WAIT` or longer."""


@dataclass(frozen=True)
class Demand:
    """The total to declare (None: declare nothing, the app keeps what it has), why, and
    what becomes of executors alive beyond it."""

    total: int | None
    reason: str
    source: Source = "none"
    release_surplus: bool = False
    """Executors alive beyond ``total`` go now. Otherwise they go with a lower total only
    (one the queries' rules already hold what runs for), never with a higher or an
    unchanged one."""
    waits: bool = False
    """Executors beyond what the queries want are kept until a micro-batch boundary."""


def executor_demand(i: DemandInputs) -> Demand:
    """The executors to declare, from the facts of one moment (the rows in the module doc)."""
    if i.fixed:
        return Demand(None, "a fixed pool of slots: nothing to ask for or release")  # Q1
    if i.queries:
        return _for_queries(i)
    return _without_queries(i)


def _without_queries(i: DemandInputs) -> Demand:
    if i.batch is not None:  # N1
        return Demand(i.batch.total, i.batch.reason, "batch",
                      release_surplus=i.batch.release_surplus)
    if i.hold_slots is not None:  # N2
        total = i.pool.executors_for(i.hold_slots)
        if total is None or i.pool.alive <= total:
            return Demand(None, "the start's hold: nothing to trim")
        return Demand(total, f"no streaming query has started yet; the app holds the "
                             f"executors of autoscaler.initial-slots={i.hold_slots} until its "
                             f"first query (or a job of its own) starts; {i.pool.alive} alive",
                      "hold", release_surplus=not i.refused)
    if i.baseline is not None:  # N3: what is beyond it goes with it, not later
        return Demand(i.baseline.total, i.baseline.reason, "baseline",
                      release_surplus=i.baseline.total != i.sent)
    return Demand(None, "no managed query: the app keeps what Spark gave it")  # N4


def _for_queries(i: DemandInputs) -> Demand:
    if i.sizing == "undecided":  # Q2
        return Demand(None, "the autoscaler has decided for no query yet: the app keeps what "
                            "Spark gave it")
    qs = i.queries
    wanted = min(sum(q.counted for q in qs), i.max_parallelism)  # Q3
    in_use = sum(q.in_use for q in qs)
    slots = max(wanted, min(in_use, i.pool.slots))  # Q4
    total = i.pool.executors_for(slots)  # Q5
    if total is None:
        return Demand(None, "no executor size is known yet")
    alive = i.pool.alive
    running = any(q.in_use and q.running_tasks for q in qs)
    between = i.at_boundary and (not running or i.surplus_wait_over)
    held = in_use if between else _held_by_running_stages(qs, in_use, i.pool.slots)
    note = (f"; the running queries still use {in_use} slots, the rest are released when "
            "they let go" if in_use > wanted else "")
    waits = False
    counted = i.pool.counted  # a loss within its grace moves no total
    if held > slots:  # Q6
        kept = i.pool.executors_for(held) or 0
        kept = min(kept, counted if i.sent is None else min(counted, i.sent))
        if kept > total:
            total, waits = kept, True
            note = (f"; a running micro-batch's stage may use {held} slots, the rest are "
                    "released once it has completed")
    if i.first_boundary and total < counted and any(not q.boundary_seen for q in qs):  # Q7
        total, waits = counted, True
        note = "; nothing is released before each query's first micro-batch has said what it runs"
    # Q8: beyond a lower total (the rules above keep what runs) executors go at once;
    # beyond a higher or unchanged one, at a boundary while a query runs or a release was
    # refused.
    lower = i.sent is None or total < i.sent
    release_surplus = lower or between or not (in_use or i.refused)
    if alive > total and not release_surplus:
        waits = True
    whose = "the autoscaler's targets" if i.sizing == "autoscaler" else "the queries' upper bounds"
    if any(q.source_tasks is not None for q in qs):
        whose += " (a query without state that runs its source's partitions as its tasks: those)"
    reason = f"{whose} want {wanted} slots, {i.pool.sizes_text()}{note}"
    return Demand(total, reason, "queries", release_surplus=release_surplus, waits=waits)


def _held_by_running_stages(qs: tuple[QueryDemand, ...], in_use: int, alive: int) -> int:
    """``in_use`` raised to the slots the queries' running stages may run tasks on: a stage
    of more tasks than its query's slots (a source's partitions) runs on every executor
    with a free slot, and an executor released under it loses those tasks (Spark's
    killExecutors does not wait for them). Never more than are counted."""
    spread = sum(max(0, min(q.running_tasks, alive) - q.in_use) for q in qs if q.in_use)
    return max(in_use, min(in_use + spread, alive))
