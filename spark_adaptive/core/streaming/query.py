"""The scheduler of one streaming query: its current state and the one way to change it.

:class:`QueryScheduler` holds the query's :mod:`state <spark_adaptive.core.streaming.states>`
and implements every state's ``Context``. The states decide; this class
carries out, and enforces the rules of the state machine (Flink's
``AdaptiveScheduler.transitionToState`` / ``runIfState``):

* :meth:`QueryScheduler._transition` is the only place the state changes. It
  refuses a transition while another is in progress (so no constructor and
  no ``on_leave`` can transition) and a transition into the state's own
  class; it calls ``on_leave()`` on the old state first, which cancels that
  state's timers.
* :meth:`run_if_state` runs delayed work only if the state that scheduled it
  is still current; otherwise the work is dropped with a debug log.
* The driver's ``on_done`` callbacks may come from any thread: they are handed
  to the injected ``post`` (which runs them on the scheduler thread), then to
  the state that asked, only if it is still current.
* Every transition is a decision, logged once at INFO with its reason.
* The query's history continues the one saved beside its checkpoint, if any,
  and each change of it is handed to the
  :class:`~spark_adaptive.core.streaming.history_store.HistoryWriter`, which
  saves it without holding up this thread; one whose saved file could not be
  read (:class:`~spark_adaptive.core.streaming.history_store.UnreadHistory`) is
  kept in memory only, so that the file is not replaced.

All methods must be called on the scheduler thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from spark_adaptive.core.clock import Action, Cancellable, Timers
from spark_adaptive.core.events import (
    BATCH_BOUNDARIES,
    Event,
    QueryIdle,
    QueryProgress,
    QueryTerminated,
)
from spark_adaptive.core.ports import QueryDriver, RepartitionSupport, StartResult, StopResult
from spark_adaptive.core.streaming import restart
from spark_adaptive.core.streaming.allocator import FirstStart, RescaleDecision
from spark_adaptive.core.streaming.history import (
    Counters,
    Decision,
    DecisionLog,
    RescaleHistory,
    SavedHistory,
    Tallies,
    Trigger,
)
from spark_adaptive.core.streaming.history_store import HistoryWriter, UnreadHistory
from spark_adaptive.core.streaming.load import BatchLoad
from spark_adaptive.core.streaming.requirements import ResourceRequirements, ScalingTarget
from spark_adaptive.core.streaming.restart import Failure, FailureResult, RestartBackoffStrategy
from spark_adaptive.core.streaming.states import (
    Canceling,
    Created,
    CreatingExecutionGraph,
    Executing,
    Failing,
    Finished,
    FinishedStatus,
    Restarting,
    SchedulingParams,
    State,
    StateName,
    StopWithSavepoint,
    WaitingForResources,
)

log = logging.getLogger(__name__)

S = TypeVar("S", bound=State)
R = TypeVar("R")
Post = Callable[[Action], None]


class AppView(Protocol):
    """What one query's scheduler sees of the application it shares slots with."""

    def slot_share(self, key: str) -> int | None:
        """The slots the query runs on now (None: fewer than its lower bound)."""
        ...

    @property
    def slots(self) -> int:
        """The app's task slots counted now."""
        ...

    @property
    def executor_count(self) -> int: ...

    def released_slots(self) -> None:
        """The query's run uses fewer slots than before: it stopped, or it was rescaled
        live onto fewer. Executors held back for it may go now."""
        ...

    def warming_up(self) -> bool:
        """Executors that joined are being warmed up now."""
        ...

    def run_started_work(self, run_id: str) -> bool:
        """Whether a job of the run has started, so that its tasks may run on executors."""
        ...


@dataclass(frozen=True)
class StateChange:
    """A query moved from state ``old`` to state ``new`` (public state names)."""

    key: str
    old: StateName
    new: StateName
    reason: str


@dataclass(frozen=True)
class QuerySnapshot:
    """A query as the REST API and the CLI show it."""

    id: str
    key: str
    name: str | None
    state: StateName
    parallelism: int
    """Partitions of the running query; 0 while none runs."""
    slots: int
    """The slots the query runs on: its share, or while it runs below its lower bound, the
    app's slots; 0 while none runs and it has no share."""
    executors: int
    requirements: ResourceRequirements
    last_decision: Decision | None
    counters: Counters
    run_id: str | None = None
    status: FinishedStatus | None = None
    error: str | None = None
    error_class: str | None = None
    progress: QueryProgress | None = None
    """The query's last completed micro-batch (of any run)."""
    state_seconds: float = 0.0
    """Seconds since the query entered its current state."""
    tallies: Tallies = Tallies()
    """Its history's counts by kind, trigger and outcome, and rescale durations."""
    error_origin: str | None = None
    """Where the error that ended the query came from (``Failure.origin``): ``query`` or
    ``stop`` (its current run's own exception), ``start`` or ``resources`` (no run of it
    failed: the run the driver holds is an earlier one)."""


class _UnsavedHistory(RescaleHistory):
    """The history of a query whose saved history file could not be read as it started:
    kept in memory only (never written over that file), and handed on as an
    :class:`UnreadHistory` (:meth:`saved`) should the app start the query again, so that
    its next scheduler does not write it either."""

    def __init__(self, timers: Timers, limit: int, unread: UnreadHistory) -> None:
        super().__init__(timers, limit, saved=unread)
        self._problem = unread.problem

    def saved(self) -> SavedHistory:
        h = super().saved()
        return UnreadHistory(h.records, h.counters, h.tallies, h.next_id, problem=self._problem)


class QueryScheduler:
    """One managed query. Create it, then call :meth:`start_scheduling`."""

    def __init__(
        self,
        driver: QueryDriver,
        *,
        requirements: ResourceRequirements,
        params: SchedulingParams,
        strategy: RestartBackoffStrategy,
        timers: Timers,
        post: Post,
        app: AppView,
        history_limit: int = 100,
        autoscaled: bool = False,
        history: SavedHistory | None = None,
        history_writer: HistoryWriter | None = None,
    ) -> None:
        """``history``: the query's history as its earlier drivers left it, which this one
        continues; ``history_writer``: where each change of it goes to be saved beside the
        query's checkpoint (None: it is not saved)."""
        self._driver = driver
        self._autoscaled = autoscaled
        self.key = driver.info.key
        self.name = driver.info.name
        self._requirements = requirements
        self._params = params
        self._strategy = strategy
        self._timers = timers
        self._state_since = timers.now()
        self._post = post
        self._app = app
        self._history_writer = history_writer
        if isinstance(history, UnreadHistory):
            self.history: RescaleHistory = _UnsavedHistory(timers, history_limit, history)
        else:
            self.history = RescaleHistory(
                timers, history_limit, saved=history,
                on_change=None if history_writer is None else self._save_history)
        self._decisions = DecisionLog(timers, lambda: self.name or self.query_id or self.key)
        self._listeners: list[Callable[[StateChange], None]] = []
        self._transitioning = False
        self.query_id: str | None = None
        self.query_ids: set[str] = set()
        self.run_id: str | None = None
        self._running = False
        self._partitions: int | None = driver.info.state_partitions
        self._running_slots = 0
        # After a live rescale onto fewer slots, the batch running then may still use the
        # old ones: they are released once a micro-batch completes (see slots_in_use).
        self._slots_held = 0
        self._target: ScalingTarget | None = None
        self.observed_tasks: int | None = None
        """Tasks of its micro-batches' only stage, when they run in one (no shuffle)."""
        self._source_tasks: int | None = None
        """The most tasks a micro-batch of its ran in one stage."""
        self.own_bounds = False
        """Whether its bounds are the user's (put, persisted beside its checkpoint, or from
        spark.adaptive.parallelism.upper-bound) rather than the defaults."""
        self.boundary_seen = False
        """Whether what it runs is known at a batch boundary: it keeps state (its batches
        shuffle into its partitions), or a micro-batch of one stage that read rows showed
        its source's tasks (an empty one may run fewer: the rate source's first runs one),
        or a trigger found no data, or three micro-batches completed (a query with a
        shuffle but no state shows nothing more)."""
        self._progresses = 0
        self.last_batch: BatchLoad | None = None
        """What the stages of its last completed micro-batch cost."""
        self._stateful = driver.info.stateful or driver.info.state_partitions is not None
        # Whether its partition count can change: the driver's answer for the run and
        # statefulness it was asked about (it reads the checkpoint off this thread, and the
        # answer comes back as an event; until then the previous answer stands).
        self._support: RepartitionSupport | None = None
        self._support_asked: tuple[str | None, bool] | None = None
        self._repartition_failure: tuple[int | None, str] | None = None
        """(slot share then, why) of the last restart onto other partitions that came up
        at the old ones (its state could not be repartitioned, or its start failed)."""
        self._rescaled_from: int | None = None
        self._last_progress: QueryProgress | None = None
        self._state: State = Created(self)

    # -- public -----------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    @property
    def configured_partitions(self) -> int:
        return self._driver.info.configured_partitions

    @property
    def finished(self) -> bool:
        return isinstance(self._state, Finished)

    @property
    def restart_deferred(self) -> bool:
        """A restart rescale was decided and waits for new executors to be warmed up."""
        return isinstance(self._state, Executing) and self._state.restart_deferred

    @property
    def keeps_state(self) -> bool:
        """The query keeps state across micro-batches (a restart repartitions it)."""
        return self._stateful

    @property
    def checkpoint_location(self) -> str | None:
        return self._driver.info.checkpoint_location

    @property
    def tasks_follow_slots(self) -> bool:
        """Its source sizes its tasks by the cluster (see ``QueryInfo.tasks_follow_slots``)."""
        return self._driver.info.tasks_follow_slots

    @property
    def last_progress(self) -> QueryProgress | None:
        """The newest progress of the query's current run (or of the run before it)."""
        return self._last_progress

    def add_listener(self, listener: Callable[[StateChange], None]) -> None:
        """``listener`` hears of every state change, after it happened."""
        self._listeners.append(listener)

    def adopt_first_run(self, plan: FirstStart, result: StartResult) -> None:
        """Take over the query's first run, which the app's ``start()`` started at once
        (so that Spark analyses the query and raises its own errors without waiting for
        the scheduler): Created → Executing, recorded as the initial schedule."""
        if not isinstance(self._state, Created):
            raise RuntimeError(f"the first run is already taken over (state {self._state.name})")
        if not result.ok:
            raise ValueError("only a run that started can be taken over")
        if plan.support is not None:
            self._support = plan.support  # what the first start was planned with
        self._took_run(result)
        self.history.open(
            Trigger.INITIAL_SCHEDULE, "initial", from_parallelism=0,
            to_parallelism=result.parallelism, from_slots=0, to_slots=plan.slots,
            reason=plan.reason)
        self.history.update_pending(timings=result.timings)
        self._state.adopt(result, plan.slots,
                          f"started at {result.parallelism} partitions: {plan.reason}")

    def cancel(self) -> None:
        self._state.cancel()

    def stop_with_savepoint(self) -> None:
        self._state.stop_with_savepoint()

    def on_resources_changed(self) -> None:
        failure = self._repartition_failure
        if failure is not None and failure[0] != self.slot_share():
            self._repartition_failure = None  # its slots changed: a repartition is tried again
        self._state.on_resources_changed()

    def set_requirements(self, requirements: ResourceRequirements) -> bool:
        """Take new bounds; True if they differ. Call :meth:`on_requirements_changed` next,
        once the application's slot shares reflect them."""
        old, self._requirements = self._requirements, requirements
        if old == requirements:
            return False
        self._repartition_failure = None  # asked again: a repartition is tried again
        self.decide("update requirements",
                    f"[{old.lower}, {old.upper}] -> [{requirements.lower}, {requirements.upper}]")
        return True

    def on_requirements_changed(self, *, autoscaler: bool = False) -> None:
        self._state.on_requirements_changed(autoscaler=autoscaler)

    @property
    def target(self) -> ScalingTarget | None:
        """The autoscaler's target for the query, if it set one."""
        return self._target

    def set_target(self, target: ScalingTarget | None) -> bool:
        """Take the autoscaler's target (None: none); True if it differs. Call
        :meth:`on_requirements_changed` next, once the slot shares reflect it."""
        if target == self._target:
            return False
        self._target = target
        self._repartition_failure = None
        if target is not None:
            self.decide("autoscaler target", f"{target.slots} slots, {target.partitions} "
                                             "partitions")
        return True

    @property
    def slot_upper(self) -> int:
        """The most slots the query may be given: its upper bound, or, when it keeps no
        state and its micro-batches run more tasks of its source's (:attr:`source_tasks`),
        those (never above max-parallelism), unless its bounds are the user's own (put,
        persisted, or spark.adaptive.parallelism.upper-bound set): plain Spark runs such
        tasks on as many executors, and a default bound (its configured partitions) does
        not say otherwise."""
        upper = self._requirements.upper
        tasks = self.source_tasks_above(upper)
        return upper if tasks is None else max(upper, min(tasks, self._params.max_parallelism))

    def source_tasks_above(self, upper: int) -> int | None:
        """:attr:`source_tasks` when they are more than ``upper`` and the query's bounds are
        not the user's own (their upper one is then kept to: it is how executors are given
        back); else None."""
        tasks = self.source_tasks
        if tasks is not None and tasks > upper and not self.own_bounds:
            return tasks
        return None

    @property
    def allocation(self) -> ResourceRequirements:
        """What the application's slots are shared by: the bounds; with the autoscaler, the
        upper one at the autoscaler's slots when it set a target, at most :attr:`slot_upper`,
        and at that before its first target (a stateless query's source tasks past a
        default bound run on as many slots). Without the autoscaler those tasks count for
        the executors declared only (``QueryDemand.source_tasks``)."""
        r = self._requirements
        if self._target is not None:
            upper = max(r.lower, min(self.slot_upper, self._target.slots))
        else:
            upper = self.slot_upper if self._autoscaled else r.upper
        return r if upper == r.upper else ResourceRequirements(r.lower, upper)

    @property
    def target_partitions(self) -> int | None:
        """The autoscaler's partition count within the bounds, when it set a target. Until
        its first target, an autoscaled query keeps the partitions it runs: the autoscaler
        owns the partition count, and executors coming and going are followed live (a
        restart to balance them before the autoscaler has seen one batch would be wasted)."""
        if self._target is None:
            if not self._autoscaled or not self._partitions:
                return None
            target = self._partitions
        else:
            target = self._target.partitions
        r = self._requirements
        return max(r.lower, min(r.upper, target))

    def on_query_event(self, event: Event) -> None:
        """An event of this query's current run (others are dropped)."""
        if getattr(event, "run_id", None) != self.run_id:
            log.debug("query %s: dropping %s of run %s (current run %s)", self.key,
                      type(event).__name__, getattr(event, "run_id", None), self.run_id)
            return
        if isinstance(event, QueryProgress):
            self._last_progress = event
            if event.state_operators and not self._stateful:
                self._stateful = True
                self._ask_support()  # a state store: its provider decides
            self._progresses += 1
        if isinstance(event, QueryIdle) or (isinstance(event, QueryProgress) and (
                self._progresses >= 3 or self._stateful
                or (event.num_input_rows > 0 and self._source_tasks is not None))):
            self.boundary_seen = True
        if isinstance(event, BATCH_BOUNDARIES) and self._slots_held > self._running_slots:
            # A micro-batch completed (or, QueryIdle, none runs: the trigger found no new
            # data) after a live rescale onto fewer slots: the surplus executors are free.
            self._slots_held = 0
            self._app.released_slots()
        if isinstance(event, QueryTerminated):
            self._stopped_running()
        self._state.on_query_event(event)

    def snapshot(self) -> QuerySnapshot:
        st = self._state
        failure = st.failure if isinstance(st, Finished) else None
        return QuerySnapshot(
            id=self.query_id or self.key, key=self.key, name=self.name, state=st.name,
            parallelism=(self._partitions or 0) if self._running else 0,
            slots=self.slot_share() or (self._app.slots if self._running else 0),
            executors=self._app.executor_count,
            requirements=self._requirements, last_decision=self._decisions.last,
            counters=self.history.counters, run_id=self.run_id,
            status=st.status if isinstance(st, Finished) else None,
            error=None if failure is None else failure.message,
            error_class=None if failure is None else failure.error_class,
            error_origin=None if failure is None else failure.origin,
            progress=self._last_progress, state_seconds=self._timers.now() - self._state_since,
            tallies=self.history.tallies)

    def _save_history(self, history: SavedHistory) -> None:
        """Hand the changed history to its writer (a query without a checkpoint keeps it in
        memory only)."""
        checkpoint = self._driver.info.checkpoint_location
        if checkpoint is None or self._history_writer is None:
            return
        try:
            self._history_writer.write(checkpoint, self.name or self.query_id or self.key,
                                       history)
        except Exception:  # the writer's bug must not stop the scheduler
            log.exception("query %s: handing its rescale history to the writer failed",
                          self.key)

    # -- the one way to change state ----------------------------------------------------
    def _transition(self, cls: type[S], build: Callable[[], S], reason: str,
                    level: int = logging.INFO) -> None:
        if self._transitioning:
            raise RuntimeError("state transitions must not be triggered while another state "
                               "transition is in progress")
        if type(self._state) is cls:
            raise RuntimeError(f"attempted to transition into the very state the query is "
                               f"already in ({cls.name})")
        old = self._state
        self._transitioning = True
        try:
            old.on_leave()
            self._decisions.decide(f"{old.name} -> {cls.name}", reason, level)
            self._state = build()
            self._state_since = self._timers.now()
        finally:
            self._transitioning = False
        change = StateChange(self.key, old.name, cls.name, reason)
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("query %s: a state listener failed on %s", self.key, change)

    def run_if_state(self, state: State, action: Action, delay: float) -> Cancellable:
        def guarded() -> None:
            state.untrack(timer)
            self._if_state(state, action)

        timer = state.track(self._timers.call_later(delay, guarded))
        return timer

    def _if_state(self, state: State, action: Action) -> None:
        if self._state is state:
            action()
        else:
            log.debug("query %s: ignoring an action of state %s, now in %s",
                      self.key, state.name, self._state.name)

    def now(self) -> float:
        return self._timers.now()

    # -- transitions (the capabilities of the states' contexts) ------------------------
    def go_to_waiting_for_resources(self, reason: str) -> None:
        self._transition(WaitingForResources, lambda: WaitingForResources(self), reason)

    def go_to_creating_execution_graph(
        self, reason: str, *, fail_without_resources: bool = False
    ) -> None:
        self._transition(CreatingExecutionGraph,
                         lambda: CreatingExecutionGraph(self, fail_without_resources), reason)

    def go_to_executing(self, result: StartResult, slots: int, reason: str, *,
                        initial: bool = False) -> None:
        self._running_slots = slots
        self._transition(Executing, lambda: Executing(self, result.parallelism, slots,
                                                      initial=initial), reason)

    def go_to_restarting(
        self,
        reason: str,
        *,
        backoff: float,
        trigger: Trigger,
        target_parallelism: int | None = None,
        target_slots: int | None = None,
        failure: Failure | None = None,
    ) -> None:
        if failure is not None:
            self.history.fail_pending()
        current = self._partitions or 0
        # A rescale's start that fails is retried outside the restart strategy (see
        # CreatingExecutionGraph); a failure's restart is the strategy's.
        self._rescaled_from = (current or None) if failure is None else None
        self.history.open(
            trigger, "restart", from_parallelism=current,
            to_parallelism=target_parallelism if target_parallelism is not None else current,
            from_slots=self._running_slots,
            to_slots=target_slots if target_slots is not None else self._running_slots,
            reason=reason)
        self._transition(Restarting, lambda: Restarting(self, backoff, target_parallelism),
                         reason, logging.INFO if failure is None else logging.WARNING)

    def go_to_stop_with_savepoint(self, reason: str) -> None:
        self.history.supersede_pending()
        self._transition(StopWithSavepoint, lambda: StopWithSavepoint(self), reason)

    def go_to_canceling(self, reason: str) -> None:
        self.history.supersede_pending()
        self._transition(Canceling, lambda: Canceling(self), reason)

    def go_to_failing(self, failure: Failure, reason: str) -> None:
        self.history.fail_pending()
        self._transition(Failing, lambda: Failing(self, failure), reason, logging.ERROR)

    def go_to_finished(
        self, status: FinishedStatus, reason: str, failure: Failure | None = None
    ) -> None:
        if status == "FAILED":
            self.history.fail_pending()
        else:
            self.history.supersede_pending()
        # A failure the query does not survive is logged at ERROR once: by Failing, or here
        # when it fails without going through Failing.
        failed_here = status == "FAILED" and not isinstance(self._state, Failing)
        self._transition(Finished, lambda: Finished(status, failure), reason,
                         logging.ERROR if failed_here else logging.INFO)

    # -- the running query ------------------------------------------------------------
    @property
    def query_running(self) -> bool:
        return self._running

    @property
    def partitions(self) -> int:
        """Partitions of the query's current (or last) run; 0 before its first start."""
        return self._partitions or 0

    @property
    def running_slots(self) -> int:
        """The slots the query's run was started on or last rescaled live onto."""
        return self._running_slots

    @property
    def trigger_interval(self) -> float:
        return self._driver.info.trigger_interval

    @property
    def stateful(self) -> bool:
        return self._stateful

    @property
    def slots_in_use(self) -> int:
        """Slots the query's Spark run is using now: those it started or was last rescaled
        live onto while a run is active, else 0. Executors under a running micro-batch are
        not released before this drops (a batch losing tasks must re-run them)."""
        return max(self._running_slots, self._slots_held) if self._running else 0

    def _stopped_running(self) -> None:
        was = self.slots_in_use
        self._running = False
        self._slots_held = 0
        if was:
            self._app.released_slots()

    def start_query(
        self, state: State, parallelism: int, on_done: Callable[[StartResult], None]
    ) -> None:
        def started(result: StartResult) -> None:
            if result.ok:
                self._took_run(result)
            self._if_state(state, lambda: on_done(result))

        try:
            self._driver.start(parallelism, self._once(started))
        except Exception as e:  # a broken driver must not leave the state machine waiting
            log.exception("query %s: the driver's start raised", self.key)
            failed = StartResult(ok=False, error=f"{type(e).__name__}: {e}")
            self._post(lambda: started(failed))

    def repartition_failed(self, target: int, error: str) -> None:
        self._repartition_failure = (
            self.slot_share(), f"repartitioning its state to {target} partitions failed "
                               f"({error})")

    def start_failed(self, target: int, error: str) -> None:
        self._repartition_failure = (
            self.slot_share(), f"starting it at {target} partitions failed ({error})")

    @property
    def rescaled_from(self) -> int | None:
        return self._rescaled_from

    def _took_run(self, result: StartResult) -> None:
        self._running = True
        self._rescaled_from = None
        self._partitions = result.parallelism
        self.run_id = result.run_id
        if result.query_id:
            self.query_id = result.query_id
            self.query_ids.add(result.query_id)
        self._ask_support()

    def _ask_support(self) -> None:
        """Ask the driver again whether the partition count can change, once per run and
        statefulness. It may answer at once on this thread (nothing to read), or later from
        another (its checkpoint read), posted back here."""
        asked = (self.run_id, self._stateful)
        if self._support_asked == asked:
            return
        self._support_asked = asked
        here = threading.get_ident()

        def took(support: RepartitionSupport) -> None:
            if self._support_asked != asked:
                return  # an answer for a run or statefulness that is gone
            changed = self._support is None or self._support.possible != support.possible
            self._support = support
            if changed and not self._transitioning:
                self._state.on_resources_changed()  # what it may do changed: decide again

        def on_done(support: RepartitionSupport) -> None:  # any thread
            if threading.get_ident() == here:
                took(support)
            else:
                self._post(lambda: took(support))

        try:
            self._driver.repartition_support(self._stateful, on_done)
        except Exception:  # a broken driver: the answer before stands; asked again later
            self._support_asked = None
            log.exception("query %s: asking whether its partitions can change failed",
                          self.key)

    def stop_query(self, state: State, clean: bool, on_done: Callable[[StopResult], None]) -> None:
        def stopped(result: StopResult) -> None:
            self._stopped_running()
            self._if_state(state, lambda: on_done(result))

        try:
            self._driver.stop(clean, self._once(stopped))
        except Exception as e:
            log.exception("query %s: the driver's stop raised", self.key)
            failed = StopResult(clean=False, error=f"{type(e).__name__}: {e}")
            self._post(lambda: stopped(failed))

    def _once(self, callback: Callable[[R], None]) -> Callable[[R], None]:
        """``on_done`` for the driver: posted to the scheduler thread, honoured once."""
        called = False

        def on_done(result: R) -> None:  # any thread
            nonlocal called
            if called:
                log.warning("query %s: the driver reported twice; ignoring %r", self.key, result)
                return
            called = True
            self._post(lambda: callback(result))

        return on_done

    # -- what the states ask ----------------------------------------------------------
    @property
    def params(self) -> SchedulingParams:
        return self._params

    @property
    def requirements(self) -> ResourceRequirements:
        return self._requirements

    def slot_share(self) -> int | None:
        return self._app.slot_share(self.key)

    def warming_up(self) -> bool:
        return self._app.warming_up()

    def on_warm_up_ended(self) -> None:
        self._state.on_warm_up_ended()

    def observe_batch(self, batch: BatchLoad) -> None:
        """The stages of the micro-batch whose progress comes next. A batch of one stage has
        no shuffle: its tasks are its source's partitions, whatever the partition count."""
        self.last_batch = batch
        if batch.stages == 1 and batch.tasks:
            self.observed_tasks = batch.tasks
            self._source_tasks = max(self._source_tasks or 0, batch.tasks)
        elif batch.stages > 1:
            self.observed_tasks = None

    @property
    def source_tasks(self) -> int | None:
        """When it keeps no state, the most tasks a micro-batch of its ran in one stage: its
        source's partitions, whatever its partition count. The most, as a source may run
        fewer in a batch (Kafka drops empty offset ranges, a file source runs one task per
        split), and plain Spark keeps the executors all the same; kept across a batch of
        more stages (an extra job of foreachBatch's)."""
        return None if self._stateful else self._source_tasks

    def repartition_support(self) -> RepartitionSupport:
        """Whether the query's partition count can change by a restart, and why not (read
        only: the facts change in the event handlers)."""
        if self.observed_tasks is not None and not self._stateful:
            return RepartitionSupport(
                False, f"its micro-batches run in one stage (no shuffle, no state): their "
                       f"{self.observed_tasks} tasks are its source's partitions whatever its "
                       "partition count, so a restart would change nothing")
        failure = self._repartition_failure
        if failure is not None and self.slot_share() == failure[0]:
            return RepartitionSupport(
                False, f"{failure[1]}; it keeps its partitions until its bounds, the "
                       "autoscaler's target or its slots change")
        if self._support is None:
            return RepartitionSupport(False, "whether its state can be repartitioned is being "
                                             "read from its checkpoint")
        return self._support

    def _fixed_partitions(self) -> tuple[int, str] | None:
        """The partitions the query must keep, when its partition count cannot change.

        A query that can never be restart-rescaled keeps the partition count of its
        first start for good, so that start uses the partitions the app configured
        (``spark.sql.shuffle.partitions``, within the query's bounds): it then runs as
        it would without spark-adaptive, and only live rescales apply to it. (Not the
        upper bound: in reactive mode that is max-parallelism.)
        """
        support = self.repartition_support()
        if support.possible:
            return None
        if self._partitions is None:
            r = self._requirements
            configured = min(max(self.configured_partitions, r.lower), r.upper)
            return configured, (f"{support.reason}; so it starts at its configured "
                                f"{configured} partitions and is only rescaled live")
        return self._partitions, support.reason

    def start_parallelism(self, share: int) -> tuple[int, str]:
        fixed = self._fixed_partitions()
        if fixed is not None:
            return fixed[0], f"keeps {fixed[0]} partitions ({fixed[1]}); {share} slots available"
        target = self.target_partitions
        if target is not None:
            whose = "the autoscaler's" if self._target is not None else "keeps its"
            return target, f"{whose} {target} partitions; {share} slots available"
        bounds = f"[{self._requirements.lower}, {self._requirements.upper}]"
        return share, f"{share} slots available within bounds {bounds}"

    def has_desired_share(self, share: int | None) -> bool:
        if share is None:
            return False
        fixed = self._fixed_partitions()
        return share >= (fixed[0] if fixed is not None else self.allocation.upper)

    def handle_failure(self, failure: Failure) -> FailureResult:
        self._rescaled_from = None  # whatever restart follows is this failure's
        self.history.count_failure()
        return restart.handle_failure(self._strategy, failure, self._timers.now())

    def decide(self, action: str, reason: str) -> None:
        self._decisions.decide(action, reason)

    def record_live_rescale(self, decision: RescaleDecision, trigger: Trigger) -> None:
        pending = self.history.pending
        if decision.current_slots == 0 or (pending is not None and pending.kind == "initial"):
            # Executors registering while the first run has not completed a micro-batch
            # yet (an app's executors come seconds after it starts): the initial schedule
            # gets its slots, no rescale happened.
            if pending is not None and pending.kind == "initial":
                self.history.update_pending(to_slots=decision.target_slots)
            self._hold_running_slots(decision.target_slots)
            self.decide("slots available", decision.reason)
            return
        self.history.open(
            trigger, "live", from_parallelism=decision.current_parallelism,
            to_parallelism=decision.target_parallelism, from_slots=decision.current_slots,
            to_slots=decision.target_slots, reason=decision.reason)
        self._hold_running_slots(decision.target_slots)
        self.decide("live rescale", decision.reason)

    def _hold_running_slots(self, target_slots: int) -> None:
        """The run goes on on ``target_slots`` from now. Fewer than it had: the micro-batch
        running now (the first one too) may still use the old ones, so they stay held
        until a micro-batch boundary (see :meth:`on_query_event`), as Flink releases only
        free slots. A run none of whose jobs has started yet (a first micro-batch still
        being planned) has no task anywhere: the old slots go at once, and its first
        micro-batch runs on the new ones. (A job that started just before, whose start
        has not reached here yet, loses the tasks it gave the executors that go; Spark
        runs them again elsewhere, and an executor the driver released does not count
        as a task failure.)"""
        fewer = target_slots < self._running_slots and self._running
        held = fewer and (self.run_id is None or self._app.run_started_work(self.run_id))
        if held:
            self._slots_held = max(self._slots_held, self._running_slots)
        self._running_slots = target_slots
        if fewer and not held:
            self._app.released_slots()
