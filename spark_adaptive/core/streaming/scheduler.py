"""The application's adaptive scheduler: wires resources, slot shares and queries.

:class:`AdaptiveScheduler` is thin on purpose: the states decide. It

* counts executors and slots in the app's one
  :class:`~spark_adaptive.core.executors.inventory.ExecutorInventory` (with the
  executor-loss grace and hang detection);
* says on how many slots each managed query runs and tells each query whose share
  changed: all the app's slots within its bounds, as the queries of one app share them in
  time (:func:`~spark_adaptive.core.streaming.allocator.share_slots`); with the autoscaler,
  the part of them asked for its target
  (:func:`~spark_adaptive.core.streaming.allocator.reserve_slots`);
* hands the facts of the executor demand (each query's slots, slots in use, running stages;
  the start's hold; the baseline once no managed query remains) to the
  :class:`~spark_adaptive.core.executors.reconciler.Reconciler`, which alone declares and
  releases executors, after every event it has handled
  (:mod:`~spark_adaptive.core.executors.demand` says the rules);
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
    ExecutorHeartbeat,
    QueryProgress,
    QueryStarted,
    QueryTerminated,
)
from spark_adaptive.core.executors.demand import Baseline, DemandInputs, QueryDemand, Sizing
from spark_adaptive.core.executors.inventory import ExecutorInventory, SlotChange
from spark_adaptive.core.executors.reconciler import Reconciler
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
    first_start,
    reserve_slots,
    share_slots,
)
from spark_adaptive.core.streaming.history import RescaleRecord, SavedHistory
from spark_adaptive.core.streaming.history_store import HistoryWriter
from spark_adaptive.core.streaming.load import LoadTracker
from spark_adaptive.core.streaming.query import (
    Post,
    QueryScheduler,
    QuerySnapshot,
    StateChange,
)
from spark_adaptive.core.streaming.restart import strategy_from_settings
from spark_adaptive.core.streaming.settings import RestartStrategySettings, SchedulerSettings
from spark_adaptive.core.streaming.start_hold import StartHold
from spark_adaptive.core.streaming.states import SchedulingParams, StateName
from spark_adaptive.errors import ConflictError, RequirementsError, UnknownQueryError

log = logging.getLogger(__name__)

REACTIVE_REQUIREMENTS = "Cannot change the parallelism of a job running in reactive mode."
LOCAL_MODE_REQUIREMENTS = ("Cannot change the parallelism of a query in local mode: its task "
                           "slots are the local cores, and queries are not rescaled there.")
RETAINED_FINISHED = 100
"""Finished queries kept (their ends, histories and figures readable), as Spark's UI keeps 100
(spark.sql.streaming.ui.retainedQueries): those that finished first are forgotten beyond, as
queries start."""

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
        self._timers = timers
        self._post = post
        self._default_slots_per_executor = default_slots_per_executor
        self._random = random
        self._history_writer = history_writer
        self._warming = warming
        self.resources = ExecutorInventory(
            timers, loss_grace=settings.executor_loss_grace,
            failure_detection_timeout=settings.failure_detection_timeout
            if fixed_slots is not None else failure_detection_timeout(
                settings.failure_detection_timeout, heartbeat_interval),
            first_heartbeat_grace=2 * heartbeat_interval, task_cpus=task_cpus,
            on_change=self._on_slots_changed, on_hung=self._on_hung, fixed_slots=fixed_slots)
        self.executors = Reconciler(actuator, self.resources, timers, self._demand_inputs)
        """The one owner of the executor total (the batch part adds its demand to it)."""
        self._queries: dict[str, QueryScheduler] = {}
        self._shares: dict[str, int] = {}
        self._idle_executors = idle_executors
        # Before the first query: the start's hold (None once a query is taken over or the
        # hold is undone).
        self._start = None if start_slots is None or fixed_slots is not None else StartHold(
            start_slots, timers, undo=self._undo_hold)
        # What the app holds with no managed query: its hold undone, its last query ended
        # (None while a query is managed, or nothing was ever declared).
        self._baseline: Baseline | None = None
        # Once the autoscaler has decided for a query (since the app went idle): the slots
        # each query it has not decided for yet is counted on (the most it has run on
        # since), and the order in which queries finished (the oldest forgotten first).
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
        hold = self._start
        if hold is not None and (hold.slots is not None or self.executors.sent is not None):
            hold.on_event(event)  # trimming, or what it trimmed may be given back
        if self.resources.handle(event):
            if not isinstance(event, ExecutorHeartbeat):
                self._reconcile()  # a loss in its grace, or its replacement: slots unchanged
            return
        self.load.on_event(event)
        if not isinstance(event, QUERY_EVENTS):
            run = self.load.run_of(event)
            if run is not None and self.query_of_run(run) is not None:
                self._reconcile()  # a stage of a managed query's run: it may hold executors
            return
        q = self.query_of_run(event.run_id)
        if q is None:
            # Spark reports a run's first events before its start returns to us: keep them
            # until a query's run with this id starts (or newer runs push them out).
            self._keep_early(event.run_id, event)
            while len(self._early) > _EARLY_LIMIT:
                self._early.popitem(last=False)
            log.debug("no managed query runs %s yet; keeping %s", event.run_id,
                      type(event).__name__)
            return
        allocation = q.allocation
        if isinstance(event, QueryProgress):
            q.observe_batch(self.load.take(event.run_id))
        q.on_query_event(event)
        if q.allocation != allocation:  # a target past its upper bound: slot_upper moved
            self._reallocate(f"the slots query {q.key} is counted on changed")
        # A progress or idle report is between the micro-batches of its own query.
        self._reconcile(at_boundary=isinstance(event, BATCH_BOUNDARIES))

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
        self._reconcile()

    def _on_hung(self, executor_id: str, silent: float) -> None:
        self.executors.hung(executor_id, silent)

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
            self._post(lambda: self._reallocate(f"query {change.key} finished", reconcile=True))
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("a state listener failed on %s", change)

    # -- slot shares and executors ------------------------------------------------------
    def _active(self) -> dict[str, req.ResourceRequirements]:
        """What each query that has not finished is counted on: its allocation, or, once the
        autoscaler has decided for a query, for one it has not decided for yet (its load
        within the band since it started), the slots it keeps (:meth:`_note_runs`): neither
        waits for the other's decision, nor takes the executors asked for the other."""
        active = {k: q.allocation for k, q in self._queries.items() if not q.finished}
        if self._autoscaled and self._decided:
            active = {k: r if self._queries[k].target is not None
                      else req.ResourceRequirements(r.lower, self._undecided_slots.get(
                          k, self._as_run(k, r)))
                      for k, r in active.items()}
        return active

    def _note_runs(self) -> None:
        """Once the autoscaler has decided for a query: raise the mark of slots each query
        without a target is counted on to what it runs on now (:meth:`_as_run`)."""
        if not (self._autoscaled and self._decided):
            return
        for key, q in self._queries.items():
            if not q.finished and q.target is None:
                self._undecided_slots[key] = self._as_run(key, q.allocation)

    def _as_run(self, key: str, r: req.ResourceRequirements) -> int:
        """The most slots the query has run on since the autoscaler first decided for a query
        (its share while it is not running), within its bounds as they are now (bounds
        lowered and raised again do not bring back a mark from before)."""
        q = self._queries[key]
        slots = max(q.running_slots, q.slots_in_use) or self._shares.get(key) or r.lower
        # The most it ran on since: an executor lost shrinks it live, and the total declared
        # still asks for its replacement.
        slots = max(slots, self._undecided_slots.get(key, 0))
        return max(r.lower, min(r.upper, slots))

    def _reallocate(self, reason: str, *, quiet: str | None = None,
                    reconcile: bool = False) -> None:
        """Recompute every share and tell each query whose share changed (but ``quiet``);
        ``reconcile``: then send the executor total, if it changed."""
        self._note_runs()
        active = self._active()
        old = self._shares
        self._shares = self._share(active)
        log.debug("slot shares %s -> %s (%s)", old, self._shares, reason)
        for key in active:
            before = None if old is None else old.get(key)
            if key != quiet and self.slot_share(key) != before:
                self._queries[key].on_resources_changed()
        if reconcile:
            self._reconcile()

    def _reconcile(self, *, at_boundary: bool = False) -> None:
        """The facts changed: note what the queries run on and whether the app went idle,
        then let the reconciler send the executor total if it changed."""
        self._note_runs()
        self._note_idle()
        self.executors.reconcile(at_boundary=at_boundary)

    def _note_idle(self) -> None:
        """Once no managed query remains (and no run of one is still stopping), the app goes
        back to what it would hold without spark-adaptive (``idle_executors``: with dynamic
        allocation off, its initial executors), or, when that is not known, the executors
        alive now (never more than were declared): nothing is asked for any more, and
        nothing that is alive goes. An app whose total spark-adaptive never declared keeps
        what Spark gave it. A query started from here is taken over as in a new app."""
        sent = self.executors.sent
        if (self._baseline is not None or self._start is not None or sent is None
                or self.executors.sent_by == "batch"  # the batch part decides
                or any(not q.finished or q.slots_in_use for q in self._queries.values())):
            return
        self._decided = False
        self._undecided_slots.clear()
        alive = len(self.resources.executors)
        if self._idle_executors is not None:
            total = self._idle_executors
            why = "the app's initial executors, as without spark-adaptive"
        else:
            total = min(sent, alive)
            why = f"the {alive} alive, no more asked for"
        self._baseline = Baseline(total, f"no managed query remains ({sent} were declared for "
                                         f"the queries); {why}")

    def _demand_inputs(self) -> DemandInputs:
        """The facts of the executor demand now (read only)."""
        sizing: Sizing = ("bounds" if not self._autoscaled
                          else "autoscaler" if self._decided else "undecided")
        hold = self._start
        return DemandInputs(
            pool=self.resources.pool(self._default_slots_per_executor),
            queries=tuple(self._query_demand(k, r) for k, r in self._active().items()),
            fixed=self.resources.fixed_slots is not None, sizing=sizing,
            first_boundary=not self._autoscaled and self.settings.mode == "adaptive",
            max_parallelism=self.settings.max_parallelism,
            hold_slots=None if hold is None else hold.slots, baseline=self._baseline)

    def _query_demand(self, key: str, r: req.ResourceRequirements) -> QueryDemand:
        q = self._queries[key]
        running = 0 if q.run_id is None else self.load.running_tasks(q.run_id)
        # Without the autoscaler, a query without state that runs its source's partitions as
        # its tasks keeps as many executors as plain Spark gives them (for the executors
        # declared only: its share, and the other queries', are those of its bounds). Bounds
        # of the user's own rule: they are how executors are given back. (With the
        # autoscaler, its slots go up to those tasks already: QueryScheduler.slot_upper.)
        source = None if self._autoscaled else q.source_tasks_above(r.upper)
        return QueryDemand(key, r.upper, q.slots_in_use, running, q.boundary_seen, source)

    def _undo_hold(self, reason: str) -> None:
        """Undo the start's hold before any query is taken over (``reason``: batch work, a
        query left unmanaged): the app gets back what it holds without spark-adaptive."""
        hold = self._start
        if self._queries or hold is None:
            return  # a query was taken over (the autoscaler decides), or nothing is held
        self._start = None
        self._baseline = hold.undo(reason, self._idle_executors, self.executors.sent)
        self._reconcile()

    def release_refused(self, executor_ids: Sequence[str], reason: str) -> None:
        """Spark refused to release these executors, or releasing them failed (the
        boundary reports it: ``killExecutors`` answered false or raised): they are alive
        and get tasks, so they count again, slots and all. Their release is tried again
        at the next micro-batch boundary, or by the next lower total declared."""
        self.executors.release_refused(executor_ids, reason)

    def released_slots(self) -> None:
        """A query's run uses fewer slots now: declare what is wanted without them."""
        self._reconcile()

    def slot_share(self, key: str) -> int | None:
        """The slots the query runs on (None: fewer than its lower bound)."""
        return self._shares.get(key)

    def _share(self, active: dict[str, req.ResourceRequirements]) -> dict[str, int]:
        """The slots each query runs on: with the autoscaler, the part of the slots asked
        for its target (the executors asked for sum the targets); else all the app's slots
        within its bounds (the queries share them in time)."""
        rule = reserve_slots if self._autoscaled else share_slots
        return rule(self.resources.slots, active)

    @property
    def slots(self) -> int:
        """The app's task slots counted now."""
        return self.resources.slots

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
        shares = self._share(active)
        share = None if self._autoscaled else shares.get(info.key)
        plan = first_start(
            configured_partitions=info.configured_partitions,
            state_partitions=info.state_partitions,
            share=share, requirements=requirements, repartition=support,
            app_slots=self.resources.slots)
        if self._autoscaled and plan.slots == 0:
            # The autoscaler sizes the query's slots from its load; its partitions are the
            # app's, so that most slot counts up to them run it live.
            return FirstStart(plan.parallelism, shares.get(info.key) or 0,
                              f"starts at its configured {plan.parallelism} partitions: the "
                              "autoscaler sizes its slots from its load", plan.support)
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
        # The streaming scheduler sizes the app from here: the start's hold ends, and so do
        # the baseline of an idle app and the batch part's demand.
        self._start, self._baseline = None, None
        self.executors.set_batch_demand(None, reconcile=False)
        self._queries[info.key] = q
        q.adopt_first_run(plan, result)
        self._reallocate(f"query {info.key} started", reconcile=True)
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
            self._reconcile()
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
        self._reallocate(f"autoscaler target of {q.key}", quiet=q.key)
        q.on_requirements_changed(autoscaler=True)
        # Declared once the query has acted on it: a run rescaled live onto fewer slots
        # before any of its tasks runs lets the others go at once.
        self._reconcile()

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
            "declaredExecutors": self.executors.sent,
            "queries": len(self._queries),
        }

    def close(self) -> None:
        """Cancel the resource tracker's timers (the queries are left as they are)."""
        self.resources.close()
