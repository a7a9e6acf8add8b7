"""The application's adaptive scheduler: wires resources, slot shares and queries.

:class:`AdaptiveScheduler` is thin on purpose: the states decide. It

* counts executors and slots (:class:`~spark_adaptive.core.streaming.resources.ResourceTracker`,
  with the executor-loss grace and hang detection);
* shares the slots among the managed queries
  (:func:`~spark_adaptive.core.streaming.allocator.determine_parallelism`) and tells each
  query whose share changed;
* declares the executors the queries want through
  :meth:`ExecutorActuator.request_total_executors`: the sum of the active
  queries' upper bounds in slots, capped by max-parallelism, in executors
  (reactive mode: upper bound = max-parallelism, so it asks for all it may); once
  no managed query remains, what the app holds without spark-adaptive; before the
  first one, the start's hold
  (:class:`~spark_adaptive.core.streaming.start_hold.StartHold`) decides;
* kills executors found hung;
* routes each query event to the query whose current run it belongs to;
* answers the REST API and the CLI: look-up by id or name, snapshots,
  requirements, cancel, stop-with-savepoint.

Threading: every method runs on the scheduler thread (the boundary submits to
:class:`~spark_adaptive.core.loop.EventLoop` or uses its ``call_sync``).
``post`` is how work gets back onto that thread from elsewhere (``loop.submit``
in production, ``lambda fn: timers.call_later(0, fn)`` on virtual time).
"""

from __future__ import annotations

import functools
import logging
import random as _random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from spark_adaptive.core.clock import Timers
from spark_adaptive.core.events import (
    BATCH_BOUNDARIES,
    QUERY_EVENTS,
    Event,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
)
from spark_adaptive.core.ports import (
    ExecutorActuator,
    QueryDriver,
    QueryInfo,
    RepartitionSupport,
    StartResult,
)
from spark_adaptive.core.streaming import requirements as req
from spark_adaptive.core.streaming.allocator import (
    FirstStart,
    desired_slots,
    determine_parallelism,
    first_start,
)
from spark_adaptive.core.streaming.history import LOGGER_NAME, RescaleRecord, SavedHistory
from spark_adaptive.core.streaming.history_store import HistoryWriter
from spark_adaptive.core.streaming.load import LoadTracker
from spark_adaptive.core.streaming.query import (
    Post,
    QueryScheduler,
    QuerySnapshot,
    StateChange,
)
from spark_adaptive.core.streaming.resources import ResourceTracker, SlotChange
from spark_adaptive.core.streaming.restart import strategy_from_settings
from spark_adaptive.core.streaming.settings import RestartStrategySettings, SchedulerSettings
from spark_adaptive.core.streaming.start_hold import StartHold
from spark_adaptive.core.streaming.states import SchedulingParams, StateName
from spark_adaptive.errors import ConflictError, RequirementsError, UnknownQueryError

log = logging.getLogger(__name__)
decision_log = logging.getLogger(LOGGER_NAME)

REACTIVE_REQUIREMENTS = "Cannot change the parallelism of a job running in reactive mode."
LOCAL_MODE_REQUIREMENTS = ("Cannot change the parallelism of a query in local mode: its task "
                           "slots are the local cores, and queries are not rescaled there.")
RETAINED_FINISHED = 100
"""Finished queries kept (their ends, histories and figures readable), as Spark's UI keeps 100
(spark.sql.streaming.ui.retainedQueries): those that finished first are forgotten beyond, as
queries start."""

SURPLUS_WAIT = 60.0
"""Seconds a surplus executor waits for a moment when no managed query's micro-batch runs;
after that it goes at the next batch boundary of any query (a batch of another query that
loses tasks there runs them again, as Spark does for an executor lost)."""

_EARLY_LIMIT = 64

#: A timeout shorter than this many heartbeat intervals would take a late heartbeat for a hang.
MIN_HEARTBEATS_PER_TIMEOUT = 3


def failure_detection_timeout(configured: float, heartbeat_interval: float) -> float:
    """The silence after which an executor counts as hung: the configured timeout, but never
    less than three heartbeat intervals (warned about: lower the interval instead)."""
    floor = MIN_HEARTBEATS_PER_TIMEOUT * heartbeat_interval
    if configured >= floor:
        return configured
    log.warning("failure-detection.timeout %gs is under %d heartbeat intervals "
                "(spark.executor.heartbeatInterval=%gs); using %gs. Set "
                "spark.executor.heartbeatInterval to at most %gs to detect hung executors "
                "within %gs.", configured, MIN_HEARTBEATS_PER_TIMEOUT, heartbeat_interval,
                floor, configured / MIN_HEARTBEATS_PER_TIMEOUT, configured)
    return floor


class AdaptiveScheduler:
    """Every managed streaming query of one application, and the slots they share."""

    def __init__(
        self,
        settings: SchedulerSettings,
        actuator: ExecutorActuator,
        timers: Timers,
        post: Post,
        *,
        task_cpus: int = 1,
        default_slots_per_executor: int | None = None,
        heartbeat_interval: float = 10.0,
        random: Callable[[], float] = _random.random,
        fixed_slots: int | None = None,
        restart: RestartStrategySettings | None = None,
        autoscaled: bool = False,
        history_writer: HistoryWriter | None = None,
        warming: Callable[[], bool] | None = None,
        idle_executors: int | None = None,
        start_slots: int | None = None,
    ) -> None:
        """``default_slots_per_executor`` sizes executor requests until one executor is seen
        (``spark.executor.cores // spark.task.cpus`` when the app sets it);
        ``heartbeat_interval`` is ``spark.executor.heartbeatInterval`` in seconds; ``random``
        feeds the exponential-delay jitter. ``fixed_slots`` makes the application a fixed
        pool of that many slots (local mode): no executor is requested or released, and
        bounds cannot change. ``restart``: the restart strategy's settings (none by
        default). ``autoscaled``: the autoscaler sizes the queries from their load, so a
        first run starts at its configured partitions rather than at the slots there are.
        ``history_writer``: where the queries' histories go to be saved beside their
        checkpoints (None: they last as long as the driver). ``warming()``: executors that
        joined are being warmed up now (a restart onto more slots waits for them, see
        :meth:`warm_up_ended`). ``idle_executors``: the executors the app holds without
        spark-adaptive (``spark.executor.instances``, with dynamic allocation off), declared
        once no managed query remains; None: unknown, the executors alive then are kept and
        no more are asked for. ``start_slots`` (``autoscaler.initial-slots``): from the app's
        start until its first managed query, the app holds only the executors of that many
        slots (:mod:`~spark_adaptive.core.streaming.start_hold`); None: what Spark gives it."""
        self.settings = settings
        self._restart = restart if restart is not None else RestartStrategySettings()
        self._autoscaled = autoscaled
        self._actuator = actuator
        self._timers = timers
        self._post = post
        self._default_slots_per_executor = default_slots_per_executor
        self._random = random
        self._history_writer = history_writer
        self._warming = warming
        self.resources = ResourceTracker(
            timers, loss_grace=settings.executor_loss_grace,
            failure_detection_timeout=settings.failure_detection_timeout
            if fixed_slots is not None else failure_detection_timeout(
                settings.failure_detection_timeout, heartbeat_interval),
            first_heartbeat_grace=2 * heartbeat_interval, task_cpus=task_cpus,
            on_change=self._on_slots_changed, on_hung=self._on_hung, fixed_slots=fixed_slots)
        self._queries: dict[str, QueryScheduler] = {}
        self._shares: dict[str, int] | None = {}
        self._declared: int | None = None
        self._idle_executors = idle_executors
        # Before the first query: hold start_slots' executors (None: not holding, or no
        # longer; a hold that is over but still set does nothing).
        self._start = None if start_slots is None or fixed_slots is not None else StartHold(
            start_slots, timers, undo=self._undo_hold, query_started=self._stop_trimming)
        self._idle = False  # no managed query remains, and what the app holds is declared
        self._releasing = False
        self._surplus_waits = False
        self._surplus_since: float | None = None  # when a surplus executor began to wait
        self._release_refused = False  # a release was refused since the last declaration
        # Once the autoscaler has decided for a query: the slots each query it has not
        # decided for yet is counted on (the most it has run on since), and the order in
        # which queries finished (the oldest forgotten first).
        self._decided = False
        self._undecided_slots: dict[str, int] = {}
        self._finish_order: list[str] = []
        self._listeners: list[Callable[[StateChange], None]] = []
        # Events of runs whose start has not reported yet (see on_event), by run id.
        self._early: OrderedDict[str, list[Event]] = OrderedDict()
        self.load = LoadTracker()
        """What each run's micro-batches cost, from its jobs' stages."""

    # -- events -----------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """Feed one event (an :class:`~spark_adaptive.core.events.EventBus` subscriber)."""
        if self._start is not None and not self._start.over:
            self._start.on_event(event)
        if self.resources.handle(event):
            return
        self.load.on_event(event)
        if not isinstance(event, QUERY_EVENTS):
            return
        q = self.query_of_run(event.run_id)
        if q is not None:
            tasks, allocation = q.source_tasks, q.allocation
            if isinstance(event, QueryProgress):
                q.observe_batch(self.load.take(event.run_id))
            q.on_query_event(event)
            if q.allocation != allocation:  # a target past its upper bound: slot_upper moved
                self._reallocate(f"the slots query {q.key} is counted on changed")
            # A query that runs its source's partitions as its tasks keeps as many executors
            # (see _runs_source_tasks): declared again when they change.
            changed = q.source_tasks != tasks and not self._autoscaled
            if isinstance(event, BATCH_BOUNDARIES) and (self._surplus_waits or changed):
                # Between micro-batches (a QueryIdle: the trigger ran none): it may go now.
                self._surplus_waits = False
                self._declare(self._active(), between_batches=True)
            return
        # Spark reports a run's first events before its start returns to us: keep them
        # until a query's run with this id starts (or newer runs push them out).
        self._keep_early(event.run_id, event)
        while len(self._early) > _EARLY_LIMIT:
            self._early.popitem(last=False)
        log.debug("no managed query runs %s yet; keeping %s", event.run_id, type(event).__name__)

    def _keep_early(self, run_id: str, event: Event) -> None:
        """Keep an event of a run whose start has not reported yet, at most
        ``_EARLY_LIMIT`` per run. A full buffer makes room by dropping its oldest progress
        or idle event (a newer one supersedes it); the run's start and its end are always
        kept: a QueryTerminated dropped would leave the query Executing for good."""
        kept = self._early.setdefault(run_id, [])
        if len(kept) >= _EARLY_LIMIT:
            oldest = next((i for i, e in enumerate(kept)
                           if not isinstance(e, (QueryStarted, QueryTerminated))), None)
            if oldest is not None:
                del kept[oldest]
            elif not isinstance(event, QueryTerminated):
                return
        kept.append(event)

    def _on_slots_changed(self, change: SlotChange) -> None:
        self._reallocate(change.reason)

    def _on_hung(self, executor_id: str, silent: float) -> None:
        reason = f"no heartbeat for {silent:g}s"
        decision_log.info("release hung executor %s: %s", executor_id, reason)
        try:
            self._actuator.release_hung_executor(executor_id, f"spark-adaptive: {reason}")
        except Exception:
            log.exception("killing hung executor %s failed", executor_id)

    def _on_state_change(self, change: StateChange) -> None:
        q = self._queries[change.key]
        if change.new is StateName.EXECUTING and q.run_id is not None and q.run_id in self._early:
            for early in self._early.pop(q.run_id):
                self._post(functools.partial(self.on_event, early))
        if change.new is StateName.FINISHED:
            # Its target asks for nothing any more: it no longer waits for the slots of one.
            q.set_target(None)
            self._undecided_slots.pop(change.key, None)
            if change.key in self._finish_order:
                self._finish_order.remove(change.key)
            self._finish_order.append(change.key)
            self._post(lambda: self._reallocate(f"query {change.key} finished"))
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("a state listener failed on %s", change)

    # -- slot shares and executors ------------------------------------------------------
    def _active(self) -> dict[str, req.ResourceRequirements]:
        active = {k: q.allocation for k, q in self._queries.items() if not q.finished}
        if self._autoscaled and self._decided:
            # A query the autoscaler has not decided for yet (its load within the band since
            # it started) keeps what it runs on, and the others' targets are served: neither
            # waits for the other's decision, nor takes the executors asked for the other.
            active = {k: r if self._queries[k].target is not None else self._as_run(k, r)
                      for k, r in active.items()}
        return active

    def _reallocate(self, reason: str, *, quiet: str | None = None,
                    declare: bool = True) -> None:
        """Recompute every share; tell each query whose share changed (but ``quiet``);
        declare the executors wanted (unless the caller does, once ``quiet`` has acted)."""
        active = self._active()
        old = self._shares
        self._shares = determine_parallelism(self.resources.slots, active) if active else {}
        log.debug("slot shares %s -> %s (%s)", old, self._shares, reason)
        if declare:
            self._declare(active)
        for key in active:
            before = None if old is None else old.get(key)
            if key != quiet and self.slot_share(key) != before:
                self._queries[key].on_resources_changed()

    def _declare(self, active: dict[str, req.ResourceRequirements],
                 between_batches: bool = False) -> None:
        """Declare the executors the active queries want, but never fewer than their running
        micro-batches use: a lower total releases executors, and tasks lost under a running
        batch would have to run again (Flink, too, releases only free slots). What is held
        back is declared once the queries let go (:meth:`released_slots`); a running stage
        with more tasks than its query's slots holds the executors they may run on while
        it runs (:meth:`_held_by_running_batches`). An executor that joins after the
        declaration (the master launched it before it heard the total) is surplus: the
        same total is declared again, which releases it, but only at a micro-batch
        boundary (``between_batches``: a progress, or an idle report) if a query runs,
        since Spark may already have given it tasks of a running one; so is an executor
        whose release Spark refused (:meth:`release_refused`), whatever runs. Once no
        managed query remains, :meth:`_declare_idle` declares what the app holds without
        spark-adaptive."""
        if self.resources.fixed_slots is not None:
            return  # nothing can change; leave the executors alone
        if not active:
            if self._start is not None and self._start.slots is not None:
                self._hold(self._start.slots)
            else:
                self._declare_idle()
            return
        self._idle = False
        if self._autoscaled and not self._decided:
            # The autoscaler sizes the executors from the load; until it has decided for a
            # query, the app keeps what Spark gave it (see _active for the others).
            return
        counted = active if self._autoscaled else self._runs_source_tasks(active)
        wanted = desired_slots(counted, self.settings.max_parallelism)
        in_use = sum(q.slots_in_use for q in self._queries.values())
        # What the runs use keeps the executors counted (alive or in their loss grace) but
        # asks for no more: a share may be counted twice for a while (a query still on
        # slots it gave up live, until its micro-batch completes, and another already
        # rescaled onto them).
        slots = max(wanted, min(in_use, self.resources.slots))
        total = self.resources.executors_for(slots, self._default_slots_per_executor)
        if total is None:
            return
        alive = len(self.resources.executors)
        # A progress or idle report is between the micro-batches of its own query; another
        # query's batch may be running, on any executor with a free slot. Queries whose
        # batches overlap for good leave no such moment: after SURPLUS_WAIT it goes anyway.
        if between_batches and self._batch_running():
            since = self._surplus_since
            between_batches = since is not None and self._timers.now() - since >= SURPLUS_WAIT
        held = in_use if between_batches else self._held_by_running_batches(in_use)
        spread = False
        if held > slots:
            # The hold only delays a release: never more than declared (or alive, before
            # any declaration), so nothing is asked for on its account.
            kept = self.resources.executors_for(held, self._default_slots_per_executor) or 0
            kept = min(kept, alive if self._declared is None else min(alive, self._declared))
            if kept > total:
                total, spread = kept, True
                self._wait_for_boundary()  # released at the next micro-batch boundary
        first = (not self._autoscaled and self.settings.mode == "adaptive" and total < alive
                 and any(not self._queries[k].boundary_seen for k in active))
        if first:
            # Until what a query runs is known (QueryScheduler.boundary_seen: a query
            # without state may run more tasks than its partitions), nothing is released;
            # what is surplus then goes at a batch boundary.
            total = alive
            self._wait_for_boundary()
        if total == self._declared:
            if self._releasing or len(self.resources.executors) <= total:
                if not self._surplus_waits:
                    self._surplus_since = None  # nothing beyond the total waits any more
                return  # declared already, and no executor beyond it joined since
            if (in_use or self._release_refused) and not between_batches:
                self._wait_for_boundary()  # released at the next micro-batch boundary
                return
        per = self.resources.slots_per_executor(self._default_slots_per_executor)
        sizes = sorted({e.slots for e in self.resources.executors if e.slots > 0})
        per_text = (f"{per} slots per executor" if len(sizes) < 2 else
                    f"executors of {sizes[0]}-{sizes[-1]} slots (any more at {per})")
        held_text = (f"; the running queries still use {in_use} slots, the rest are released "
                     "when they let go" if in_use > wanted else "")
        if spread:
            held_text = (f"; a running micro-batch's stage may use {held} slots, the rest are "
                         "released once it has completed")
        if first:
            held_text = ("; nothing is released before each query's first micro-batch has "
                         "said what it runs")
        whose = "the autoscaler's targets" if self._autoscaled else "the queries' upper bounds"
        if counted != active:
            whose += (" (a query without state that runs its source's partitions as its "
                      "tasks: those)")
        decision_log.info("request %d executors in total: %s want %d slots, %s%s", total,
                          whose, wanted, per_text, held_text)
        self._surplus_since = None if not self._surplus_waits else self._surplus_since
        self._request(total)

    def _wait_for_boundary(self) -> None:
        """Executors beyond the total go at a micro-batch boundary: from when they wait."""
        self._surplus_waits = True
        if self._surplus_since is None:
            self._surplus_since = self._timers.now()

    def _batch_running(self) -> bool:
        """A stage of some managed query's micro-batch runs now."""
        return any(self.load.running_tasks(q.run_id) for q in self._queries.values()
                   if q.slots_in_use and q.run_id is not None)

    def _as_run(self, key: str, r: req.ResourceRequirements) -> req.ResourceRequirements:
        """``r`` with its upper bound at the most slots the query has run on since the
        autoscaler first decided for a query (its share while it is not running), within
        its bounds: what an autoscaled query without a target asks."""
        q = self._queries[key]
        slots = max(q.running_slots, q.slots_in_use) or (self._shares or {}).get(key) or r.lower
        # The most it ran on since: an executor lost shrinks it live, and the total declared
        # still asks for its replacement.
        slots = max(slots, self._undecided_slots.get(key, 0))
        # Within the bounds as they are now: bounds lowered and raised again do not bring
        # back a mark from before.
        slots = self._undecided_slots[key] = max(r.lower, min(r.upper, slots))
        return req.ResourceRequirements(r.lower, slots)

    def _held_by_running_batches(self, in_use: int) -> int:
        """``in_use`` (the slots the queries' runs are counted on) raised to the slots their
        micro-batches in flight may run tasks on: a stage of more tasks than the query's
        slots (a source's partitions) runs on every executor with a free slot, and an
        executor released under it loses those tasks (Spark's killExecutors does not wait
        for them). Never more than are alive: nothing is asked for on that account."""
        alive = self.resources.slots
        spread = 0
        for q in self._queries.values():
            if q.slots_in_use and q.run_id is not None:
                tasks = min(self.load.running_tasks(q.run_id), alive)
                spread += max(0, tasks - q.slots_in_use)
        return max(in_use, min(in_use + spread, alive))

    def _hold(self, slots: int) -> None:
        """Before its first query, an autoscaled app holds the executors of ``slots``
        (``autoscaler.initial-slots``) only (:mod:`.start_hold` says why and until when)."""
        assert self._start is not None
        if self._releasing:
            return  # declared already; each executor released meanwhile re-allocates
        total = self._start.trim(
            self.resources.executors_for(slots, self._default_slots_per_executor),
            len(self.resources.executors), self._declared, self._release_refused)
        if total is not None:
            self._request(total)

    def _stop_trimming(self) -> None:
        """A streaming query started: nothing is declared until it is taken over."""
        self._idle = True

    def _undo_hold(self, reason: str) -> None:
        """Undo the start's hold before any query is taken over (``reason``: batch work, a
        query left unmanaged), and declare what the app gets back."""
        hold = self._start
        if self._queries or hold is None or hold.over:
            return  # a query was taken over (the autoscaler decides), or nothing is held
        self._start = None
        self._idle = True  # what the app holds with no query is declared: nothing more
        total = hold.undo(reason, self._idle_executors, self._declared)
        if total is not None:
            self._request(total)

    def _declare_idle(self) -> None:
        """No managed query remains: declare, once, what the app would hold without
        spark-adaptive (``idle_executors``: with dynamic allocation off, its initial
        executors), or, when that is not known, the executors alive now (never more than
        were declared): nothing is asked for any more, and nothing that is alive goes.
        An app whose total spark-adaptive never declared keeps what Spark gave it."""
        if self._idle or self._declared is None:
            return
        if any(q.slots_in_use for q in self._queries.values()):
            return  # a run is still stopping: declared once it has (released_slots)
        self._idle = True
        self._surplus_waits, self._surplus_since = False, None
        # A query started from here is taken over as in a new app: the app keeps what it
        # is given until the autoscaler has decided for one again.
        self._decided = False
        self._undecided_slots.clear()
        alive = len(self.resources.executors)
        if self._idle_executors is not None:
            total = self._idle_executors
            why = "the app's initial executors, as without spark-adaptive"
        else:
            total = min(self._declared, alive)
            why = f"the {alive} alive, no more asked for"
        if total == self._declared:
            return
        decision_log.info("request %d executors in total: no managed query remains (%d were "
                          "declared for the queries); %s", total, self._declared, why)
        self._request(total)

    def _request(self, total: int) -> None:
        self._declared = total
        self._release_refused = False
        try:
            released = self._actuator.request_total_executors(total)
        except Exception:
            log.exception("requesting %d executors failed", total)
            return
        self.executors_released(released, f"{total} executors declared")

    def executors_released(self, executor_ids: Sequence[str], reason: str) -> None:
        """Executors released on spark-adaptive's request stop counting at once: Spark
        reports them removed only once their processes have exited, seconds later."""
        # Each release re-allocates; the executors still to be released are not surplus.
        outer, self._releasing = self._releasing, True
        try:
            for executor_id in executor_ids:
                self.resources.release(executor_id, reason)
        finally:
            self._releasing = outer

    def release_refused(self, executor_ids: Sequence[str], reason: str) -> None:
        """Spark refused to release these executors, or releasing them failed (the
        boundary reports it: ``killExecutors`` answered false or raised): they are alive
        and get tasks, so they count again, slots and all. Their release is tried again
        at the next micro-batch boundary, or by the next lower total declared."""
        outer, self._release_refused = self._release_refused, True  # before they count
        restored = [executor_id for executor_id in executor_ids
                    if self.resources.restore(executor_id, f"its release was refused: {reason}")]
        if not restored:  # none counted as released (a hung one, or already removed)
            self._release_refused = outer

    def released_slots(self) -> None:
        """A query's run uses fewer slots now: declare what is wanted without them."""
        self._declare(self._active())

    def forget_declared_executors(self) -> None:
        """Someone else (the batch part) declared a total: declare afresh at the next change."""
        self._declared = None

    def slot_share(self, key: str) -> int | None:
        return None if self._shares is None else self._shares.get(key)

    def warming_up(self) -> bool:
        """Executors that joined are being warmed up (a restart onto them waits)."""
        return self._warming is not None and self._warming()

    def run_started_work(self, run_id: str) -> bool:
        return self.load.started_work(run_id)

    def warm_up_ended(self) -> None:
        """No warm-up is in flight any more: restarts that waited for one go on."""
        for q in list(self._queries.values()):
            q.on_warm_up_ended()

    @property
    def executor_count(self) -> int:
        return self.resources.executor_count

    # -- queries ----------------------------------------------------------------------
    def default_requirements(self, info: QueryInfo) -> req.ResourceRequirements:
        """``parallelism.lower-bound`` and the query's default upper bound (its configured
        partitions; reactive: max-parallelism)."""
        return req.ResourceRequirements(
            self.settings.lower_bound,
            self.settings.effective_upper_bound(info.configured_partitions))

    def plan_first_start(self, info: QueryInfo, requirements: req.ResourceRequirements,
                         support: RepartitionSupport) -> FirstStart:
        """The partitions the query's first run starts with, from the resources known now
        (the share it would get among the managed queries); nothing waits.

        Raises :class:`RequirementsError` for bounds other than the defaults in reactive
        mode (every query there uses every slot)."""
        if self.settings.mode == "reactive" and requirements != self.default_requirements(info):
            raise RequirementsError([REACTIVE_REQUIREMENTS])
        active = self._active()
        active[info.key] = requirements
        shares = determine_parallelism(self.resources.slots, active)
        share = None if shares is None or self._autoscaled else shares.get(info.key)
        plan = first_start(
            configured_partitions=info.configured_partitions,
            state_partitions=info.state_partitions,
            share=share, requirements=requirements, repartition=support)
        if self._autoscaled and plan.slots == 0 and shares is not None:
            # The autoscaler sizes the query's slots from its load; its partitions are the
            # app's, so that most slot counts up to them run it live.
            return FirstStart(plan.parallelism, shares.get(info.key) or 0,
                              f"starts at its configured {plan.parallelism} partitions: the "
                              "autoscaler sizes its slots from its load")
        return plan

    def adopt_query(
        self, driver: QueryDriver, requirements: req.ResourceRequirements, plan: FirstStart,
        result: StartResult, *, history: SavedHistory | None = None, own_bounds: bool = False,
    ) -> QueryScheduler:
        """Manage a query whose first run the app's ``start()`` has just started at
        ``plan.parallelism``: it goes Created → Executing at once.

        ``requirements`` come from :meth:`default_requirements` or the persisted bounds;
        ``history`` is the one persisted beside the query's checkpoint, which its history
        continues (its initial schedule is recorded after it).
        """
        info = driver.info
        existing = self._queries.get(info.key)
        if existing is not None and not existing.finished:
            raise ValueError(f"a query with key {info.key!r} is already managed")
        if existing is not None:
            # The app started its query again from the same checkpoint (Spark gives it the
            # same id): the finished one it replaces is forgotten, but its history goes on,
            # from memory (its last write may not have reached the store yet).
            del self._queries[info.key]
            if info.checkpoint_location is not None:
                history = existing.history.saved()
        self._forget_finished(info.name)
        q = QueryScheduler(
            driver, requirements=requirements,
            params=SchedulingParams.of(self.settings, info.trigger_interval),
            strategy=strategy_from_settings(
                self._restart,
                info.checkpoint_location is not None and not info.non_replayable_sources,
                self._random),
            timers=self._timers, post=self._post, app=self, autoscaled=self._autoscaled,
            history=history, history_writer=self._history_writer)
        q.add_listener(self._on_state_change)
        q.own_bounds = own_bounds or self.settings.upper_bound is not None
        self._start = None  # the hold ends: the autoscaler sizes the app from here
        self._queries[info.key] = q
        q.adopt_first_run(plan, result)
        self._reallocate(f"query {info.key} started")
        return q

    def _forget_finished(self, name: str | None) -> None:
        """A query named ``name`` starts: of the finished queries of that name, the newest
        stays (its end, history and figures can still be read, next to the new one's); the
        older ones are forgotten, so that an app that starts a named query again and again
        does not grow the queries, their series and what is kept for them with each start.
        Of all finished queries, named or not, the newest :data:`RETAINED_FINISHED` stay.
        Their histories stay beside their checkpoints."""
        if name is not None:
            finished = [k for k, q in self._queries.items() if q.finished and q.name == name]
            for key in finished[:-1]:
                del self._queries[key]
                log.debug("query %s (%s) forgotten: a newer query of its name finished before",
                          key, name)
        self._finish_order = [k for k in self._finish_order
                              if k in self._queries and self._queries[k].finished]
        while len(self._finish_order) > RETAINED_FINISHED:
            key = self._finish_order.pop(0)
            del self._queries[key]
            log.debug("query %s forgotten: %d queries finished after it", key,
                      RETAINED_FINISHED)

    def query(self, ident: str) -> QueryScheduler:
        """The query with this key, Spark query id (current or past) or name."""
        if ident in self._queries:
            return self._queries[ident]
        for q in self._queries.values():
            if ident in q.query_ids:
                return q
        named = [q for q in self._queries.values() if q.name == ident]
        if named:  # a name may be reused by a later query: prefer a live one, then the newest
            live = [q for q in named if not q.finished]
            return (live or named)[-1]
        raise UnknownQueryError(ident)

    def query_by_key(self, key: str) -> QueryScheduler | None:
        """The query with this key, if the scheduler still has it."""
        return self._queries.get(key)

    def query_of_run(self, run_id: str) -> QueryScheduler | None:
        """The query whose current run this is, if any."""
        for q in self._queries.values():
            if q.run_id is not None and q.run_id == run_id:
                return q
        return None

    def queries(self) -> tuple[QueryScheduler, ...]:
        return tuple(self._queries.values())

    def cancel(self, ident: str) -> None:
        self.query(ident).cancel()

    def stop_with_savepoint(self, ident: str) -> None:
        """Stop the query cleanly for good; :class:`ConflictError` unless it is Executing."""
        self.query(ident).stop_with_savepoint()

    def requirements(self, ident: str) -> req.ResourceRequirements:
        return self.query(ident).requirements

    def update_requirements(self, ident: str, lower: int, upper: int) -> req.ResourceRequirements:
        """New bounds for a query (``-1``: the default), validated with Flink's rules.

        Raises :class:`UnknownQueryError`, :class:`RequirementsError` (every reason; also
        in reactive mode) or :class:`ConflictError` (the query has finished).
        """
        q = self.query(ident)
        new = self._validate(q, lambda default: req.validate(
            lower, upper, max_parallelism=self.settings.max_parallelism, default_upper=default))
        return self._apply(q, new)

    def check_requirements(self, ident: str, lower: int | None,
                           upper: int | None) -> req.ResourceRequirements:
        """Validate new bounds as :meth:`update_requirements` does, changing nothing (``None``:
        a bound the caller could not read). The REST API persists the result before it
        applies it (Flink's order), so it needs the validation on its own. Raises the same
        errors."""
        q = self.query(ident)
        return self._validate(q, lambda default: req.validate(
            lower, upper, max_parallelism=self.settings.max_parallelism, default_upper=default))

    def apply_requirements(self, ident: str,
                           requirements: req.ResourceRequirements) -> req.ResourceRequirements:
        """Give the query bounds that :meth:`check_requirements` accepted; they are checked
        once more (a query that finished meanwhile raises :class:`ConflictError`)."""
        return self.update_requirements(ident, requirements.lower, requirements.upper)

    def _validate(
        self, q: QueryScheduler, check: Callable[[int], req.ResourceRequirements]
    ) -> req.ResourceRequirements:
        if self.settings.mode == "reactive":
            raise RequirementsError([REACTIVE_REQUIREMENTS])
        if self.resources.fixed_slots is not None:
            raise RequirementsError([LOCAL_MODE_REQUIREMENTS])
        if q.finished:
            raise ConflictError(f"query {q.key} has finished; its requirements cannot change")
        default = self.settings.effective_upper_bound(q.configured_partitions)
        return check(default)

    def _runs_source_tasks(self, active: dict[str, req.ResourceRequirements]
                           ) -> dict[str, req.ResourceRequirements]:
        """``active`` with the upper bound of a query without state whose micro-batches run
        in one stage raised to its source's partitions when they are more: they are its
        tasks, whatever its partitions and bounds, and plain Spark runs them on as many
        executors, which spark-adaptive therefore keeps (for the executors it declares only:
        the query's share, and the other queries', are those of its bounds). Bounds of the
        user's own (put, persisted, or set with spark.adaptive.parallelism.upper-bound) are
        kept to: they are how executors are given back."""
        out = dict(active)
        for key, r in active.items():
            tasks = self._queries[key].source_tasks_above(r.upper)
            if tasks is not None:
                out[key] = req.ResourceRequirements(r.lower, tasks)
        return out

    def _apply(self, q: QueryScheduler, new: req.ResourceRequirements) -> req.ResourceRequirements:
        # Bounds put equal to the defaults still change what the query may be given: they
        # are the user's own from now (QueryScheduler.slot_upper).
        before = q.slot_upper
        q.own_bounds = True
        if q.set_requirements(new) or q.slot_upper != before:
            # The autoscaler decides again within the new bounds; until then its target is
            # brought within them, so that executors beyond them go (with no target, the
            # app would keep what it has until the query's next decision). Partitions
            # outside them become the ones it runs, within them: no restart nobody chose.
            t = q.target
            q.set_target(None if t is None
                         else t.within(new, q.slot_upper, q.partitions or new.lower))
            self._reallocate(f"requirements of {q.key} changed", quiet=q.key)
            q.on_requirements_changed()
        return new

    def set_scaling_target(self, ident: str, target: req.ScalingTarget | None) -> None:
        """The autoscaler's target for a query (None: none), applied through the same path
        as new bounds: the slots are shared anew and executors declared for it, and the
        query's state decides within its timing rules (rescales it causes are recorded
        with trigger ``AUTOSCALER``)."""
        q = self.query(ident)
        if q.finished or not q.set_target(target):
            return
        self._decided = self._decided or target is not None
        self._reallocate(f"autoscaler target of {q.key}", quiet=q.key, declare=False)
        q.on_requirements_changed(autoscaler=True)
        # Declared once the query has acted on it: a run rescaled live onto fewer slots
        # before any of its tasks runs lets the others go at once.
        self._declare(self._active())

    def add_listener(self, listener: Callable[[StateChange], None]) -> None:
        """``listener`` hears of every state change of every query (e.g. to wake
        ``awaitTermination()``), on the scheduler thread."""
        self._listeners.append(listener)

    def snapshot(self) -> list[QuerySnapshot]:
        return [q.snapshot() for q in self._queries.values()]

    def history(self, ident: str) -> tuple[RescaleRecord, ...]:
        return self.query(ident).history.records()

    def app_snapshot(self) -> dict[str, Any]:
        """Application-wide figures for the REST API."""
        return {
            "mode": self.settings.mode,
            "slots": self.resources.slots,
            "executors": self.resources.executor_count,
            "declaredExecutors": self._declared,
            "queries": len(self._queries),
        }

    def close(self) -> None:
        """Cancel the resource tracker's timers (the queries are left as they are)."""
        self.resources.close()
