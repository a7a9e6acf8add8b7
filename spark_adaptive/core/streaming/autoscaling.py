"""The autoscaler at work: one policy per managed query, fed and carried out here.

:class:`Autoscaling` subscribes to the event bus beside the scheduler. For each
managed query it keeps a :class:`~spark_adaptive.core.autoscaler.QueryAutoscaler`
(the pure policy), and

* turns every completed micro-batch into a
  :class:`~spark_adaptive.core.autoscaler.LoadSample`: Spark's rates and batch
  duration, the source's backlog (:func:`~spark_adaptive.core.streaming.load.backlog_rows`),
  and the batch's busy time and task count
  (:class:`~spark_adaptive.core.streaming.load.LoadTracker`);
* tells the policy what the batch that just started reads, from the query's
  offset log (:func:`~spark_adaptive.core.streaming.load.started_batch_rate`), at
  the first job of each batch: a jump in load makes the batch that reads it long,
  and its progress would show the jump only once it completes;
* tells the policy when a rescale completed (its window starts again after it);
* with ``autoscaler.forecast.enabled``, keeps each query's input rate per bucket of
  its period (:class:`~spark_adaptive.core.autoscaler.forecast.LoadRecurrence`, under
  the query's key, so a run started again from its checkpoint goes on with it), saves
  it with the query's rescale history beside its checkpoint once per bucket, and puts
  the forecast over the horizon (at least the query's executor start-up plus an
  evaluation interval) in the view; a scale-up it takes ahead of a rise carries the
  trigger ``FORECAST``;
* gives a query ``autoscaler.initial-slots`` as soon as the scheduler takes it
  over, before its first micro-batch has a task running (the executors beyond go
  then, and do not run a part of that batch they would hold until it completes);
* evaluates every query each ``autoscaler.evaluation.interval``, from a
  :class:`~spark_adaptive.core.autoscaler.QueryView` of the query as the
  scheduler has it, and carries an actionable decision out through the same path
  as a change of requirements (:meth:`AdaptiveScheduler.set_scaling_target`), so
  the state machine, its timing rules, the clean restart and the history apply
  unchanged.

A target the cluster does not meet (executors asked for that do not come: no free
worker, a cap) is not retried in a loop: once no executor has joined it for the
resource wait (``scheduler.executing.resource-stabilization-timeout``), the
slots the query has are taken as the most the cluster gives it (the view's
``cluster_max_slots``) until an executor joins or leaves; the query's status
says it waits for resources. Every decision that changes something, and every
change of outcome, is one INFO line with its reason. An evaluation that raises (a
policy's bug) leaves its query as it is, with the target it had, while the other
queries are evaluated all the same; it is one ERROR line, not repeated until that
query's evaluation succeeds again or fails otherwise.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from spark_adaptive.core.autoscaler import (
    AutoscalerConfig,
    LoadSample,
    QueryAutoscaler,
    QueryView,
    ScalingDecision,
)
from spark_adaptive.core.autoscaler.forecast import Forecast, LoadRecurrence
from spark_adaptive.core.clock import Cancellable, Timers
from spark_adaptive.core.events import (
    Event,
    ExecutorAdded,
    ExecutorRemoved,
    JobStarted,
    QueryIdle,
    QueryProgress,
)
from spark_adaptive.core.ports import OffsetLog, StartedBatch
from spark_adaptive.core.streaming.history import LOGGER_NAME, Trigger
from spark_adaptive.core.streaming.load import BatchLoad, backlog_rows, started_batch_rate
from spark_adaptive.core.streaming.query import QueryScheduler, StateChange
from spark_adaptive.core.streaming.requirements import ScalingTarget
from spark_adaptive.core.streaming.scheduler import AdaptiveScheduler
from spark_adaptive.core.streaming.states import StateName

log = logging.getLogger(__name__)
decision_log = logging.getLogger(LOGGER_NAME)


@dataclass(frozen=True)
class AutoscalerStatus:
    """One query's autoscaler as ``GET /queries/{id}/autoscaler`` shows it."""

    query_id: str
    enabled: bool
    scaling_enabled: bool
    metrics_window: float
    evaluation_interval: float
    next_evaluation: float | None
    """Seconds from now, None when no evaluation is scheduled."""
    waiting_for_resources: bool
    decision: ScalingDecision | None
    policy: dict[str, object]
    decisions: tuple[tuple[str, int], ...] = ()
    """Evaluations by outcome, of every run of the query under its key (one started again
    from its checkpoint counts on), finished ones included."""
    forecast: Forecast | None = None
    """The newest forecast of its recurring load; None with forecast.enabled=false."""
    ahead: int = 0
    """Scale-ups taken ahead of a forecast rise, under its key, by this driver."""


class _Watched:
    """What :class:`Autoscaling` keeps per query besides its policy."""

    def __init__(self, policy: QueryAutoscaler, query: QueryScheduler,
                 outcomes: dict[str, int]) -> None:
        self.policy = policy
        self.query = query  # a query started again under the same key is another one
        self.seen_record = 0  # the id of the last rescale record told to the policy
        self.unmet_since: float | None = None  # since when its target's slots are missing
        self.unmet_share = 0  # the slots it had then
        self.last_logged: tuple[str, int, int] | None = None
        self.outcomes = outcomes  # evaluations by outcome, of every run under its key
        self.started = False  # autoscaler.initial-slots was considered for it
        self.read_batch: int | None = None  # the newest batch looked up in its offset log
        self.asked: tuple[float, int] | None = None  # a live scale-up's time and slots
        # The slots the cluster gave it when no executor came for resource-wait; until an
        # executor joins or leaves, what the policy may plan with (its own, not another's).
        self.cluster_max_slots: int | None = None
        # The tasks of its one stage when they were last fewer or more than its slots:
        # a cap that still holds once the slots have come to match it (see _useful_slots).
        self.useful: int | None = None


class _Recurring:
    """A query's recurring load, kept under its key for the life of the driver."""

    def __init__(self, recurrence: LoadRecurrence) -> None:
        self.recurrence = recurrence
        self.run: str | None = None  # the run whose batches it reads now
        self.batches = 0  # how many of that run's batches it has read
        self.last_start = 0.0  # the wall time that run's last batch started
        self.saved_bucket: int | None = None  # the bucket it was last saved in
        self.forecast: Forecast | None = None  # the newest one read
        self.ahead = 0  # scale-ups taken ahead of a forecast rise


class Autoscaling:
    """Every managed query's autoscaler; all on the scheduler thread."""

    def __init__(self, config: AutoscalerConfig, scheduler: AdaptiveScheduler,
                 timers: Timers, *, resource_wait: float = 60.0,
                 offsets: OffsetLog | None = None,
                 post: Callable[[Callable[[], None]], None] | None = None) -> None:
        """``offsets`` reads what each batch reads as it starts; ``post`` runs its answers
        on the scheduler thread (None: at once, for a log that answers on that thread)."""
        self.config = config
        self._offsets = offsets
        self._post = post
        self._sched = scheduler
        self._timers = timers
        self._resource_wait = resource_wait
        self._queries: dict[str, _Watched] = {}
        self._failing: dict[str, str] = {}  # query key -> the error its evaluation raised
        # Evaluations by outcome per query key, for as long as the scheduler manages a query
        # under that key: a query started again from its checkpoint (the same key) counts on,
        # as a counter exported for the life of the driver must.
        self._outcomes: dict[str, dict[str, int]] = {}
        self._recurring: dict[str, _Recurring] = {}  # per query key, forecast.enabled only
        self._timer: Cancellable | None = None
        self._next_at: float | None = None
        scheduler.add_listener(self._on_state_change)
        self._schedule()

    # -- events ------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """A bus subscriber: samples from progress, task costs from stages."""
        if isinstance(event, (ExecutorAdded, ExecutorRemoved)):
            for watched in self._queries.values():  # the cluster changed: what it gives may
                watched.cluster_max_slots = None
            return
        if isinstance(event, JobStarted):
            self._batch_started(event)
            return
        if isinstance(event, QueryIdle):
            idle = self._sched.query_of_run(event.run_id)
            if idle is not None and not idle.finished:
                self._learn(idle, event.run_id, 0, 0.0, 0.0)
            return
        if not isinstance(event, QueryProgress):
            return
        q = self._sched.query_of_run(event.run_id)
        if q is None or q.finished:
            return
        watched = self._watch(q)
        self._tell_rescales(q, watched)
        batch = q.last_batch or BatchLoad(None, None)  # the scheduler took it just before
        sample = LoadSample.from_progress(
            event, time=self._timers.now(), slots=max(1, q.running_slots),
            partitions=max(1, q.partitions), trigger_interval=q.trigger_interval,
            backlog=backlog_rows(event), busy_time=batch.busy_time,
            tasks=batch.task_total or None,
            stage_tasks=(batch.tasks or None) if batch.stages == 1 else None)
        watched.policy.observe(sample)
        self._learn(q, event.run_id, event.num_input_rows, event.input_rows_per_second,
                    event.batch_duration)

    def _recurrence(self, q: QueryScheduler) -> _Recurring | None:
        """The query's recurring load (None with forecast.enabled=false), continued from the
        one saved with its history when this driver first sees its key."""
        cfg = self.config
        if not cfg.forecast_enabled:
            return None
        r = self._recurring.get(q.key)
        if r is None:
            r = self._recurring[q.key] = _Recurring(LoadRecurrence(
                cfg.forecast_period, cfg.forecast_bucket, cfg.forecast_periods,
                cfg.forecast_min_coverage, cfg.forecast_max_error, saved=q.history.load))
        return r

    def _learn(self, q: QueryScheduler, run: str, rows: int, rate: float,
               duration: float) -> None:
        """A batch of ``run`` read ``rows`` (0 and no batch: the query idles): into its
        recurring load. Its rows arrived between the start of the batch before and its own
        start (``duration`` before now), Spark's ``inputRowsPerSecond`` over that time.
        A run's first two batches are no rate: the first reads what piled up while no run
        planned batches, or is the batch the run before planned and did not commit, run
        again (Spark's offset log); then the second reads what arrived since that earlier
        plan, not since the first's start. Saved once per bucket."""
        r = self._recurrence(q)
        if r is None:
            return
        wall = self._timers.wall()
        end = wall - max(0.0, duration) if math.isfinite(duration) else wall
        if r.run != run:
            r.run, r.batches = run, 0
        r.batches += 1
        if r.batches > 2:
            seconds = rows / rate if rows > 0 and rate > 0 and math.isfinite(rate) \
                else end - r.last_start
            r.recurrence.observe(end, float(rows), seconds)
        r.last_start = end
        bucket = int(wall // r.recurrence.bucket)
        if r.saved_bucket != bucket:
            r.saved_bucket = bucket
            q.history.keep_load(r.recurrence.saved())

    def _on_state_change(self, change: StateChange) -> None:
        """A query the scheduler has just taken over starts small at once (after the
        transition, on the scheduler thread), not at the next evaluation."""
        if change.old is StateName.CREATED and change.new is StateName.EXECUTING:
            self._timers.call_later(0.0, lambda: self._start_taken_over(change.key))

    def _start_taken_over(self, key: str) -> None:
        q = self._sched.query_by_key(key)
        if q is None or q.finished or q.state.name is not StateName.EXECUTING:
            return
        watched = self._watch(q)
        if not watched.started:
            watched.started = True
            self._start_small(q)

    def _batch_started(self, event: JobStarted) -> None:
        """The first job of a run's next batch: tell the policy a batch runs, read what
        that batch reads from the offset log (once per batch) and tell it its input rate."""
        if not event.job_group:
            return
        q = self._sched.query_of_run(event.job_group)
        if q is None or q.finished:
            return
        watched = self._watched(q)
        last = q.last_progress
        if watched is None or last is None or last.run_id != event.job_group:
            return
        batch = last.batch_id + 1
        if watched.read_batch == batch:
            return
        watched.read_batch = batch
        watched.policy.observe_started(batch)
        location = q.checkpoint_location
        if self._offsets is None or location is None:
            return
        post = self._post

        def read(started: StartedBatch | None) -> None:
            if post is None:
                self._tell_started(q, last, started)
            else:
                post(lambda: self._tell_started(q, last, started))

        self._offsets.read(location, batch, read)

    def _tell_started(self, q: QueryScheduler, last: QueryProgress,
                      started: StartedBatch | None) -> None:
        """On the scheduler thread: the input rate of the batch after ``last`` to the policy,
        and an evaluation at once when it shows a rise under way."""
        watched = self._watched(q)
        if watched is None or q.finished or started is None:
            return
        rate = started_batch_rate(last, started)
        if rate is not None and watched.policy.observe_start(started.batch_id, rate) \
                and watched.policy.rising:
            self._evaluate_guarded(q)  # a rise under way: not at the next interval

    def _watched(self, q: QueryScheduler) -> _Watched | None:
        """What is kept for ``q``; None for a query not seen yet, or when what is kept under
        its key belongs to the query it replaced (stopped and started again from the same
        checkpoint, within an evaluation interval)."""
        watched = self._queries.get(q.key)
        return watched if watched is not None and watched.query is q else None

    def _watch(self, q: QueryScheduler) -> _Watched:
        watched = self._watched(q)
        if watched is None:
            policy = QueryAutoscaler(self.config, query=q.name or q.key,
                                     started_at=self._timers.now())
            outcomes = self._outcomes.setdefault(q.key, {})
            watched = self._queries[q.key] = _Watched(policy, q, outcomes)
            watched.seen_record = max((r.id for r in q.history.records()), default=0)
            self._failing.pop(q.key, None)
        return watched

    def _tell_rescales(self, q: QueryScheduler, watched: _Watched) -> None:
        """Completed rescales the policy has not heard of: its window starts after each."""
        for record in q.history.records():
            if record.id <= watched.seen_record or record.outcome == "pending":
                continue
            watched.seen_record = record.id
            if record.outcome != "completed" or record.kind == "initial":
                continue
            # A restart after a failure waited for its restart strategy (its delay): that is
            # not what a rescale's restart costs (left out of the view's downtimes too).
            downtime = (record.duration if record.kind == "restart"
                        and record.trigger is not Trigger.FAILURE else None)
            done = record.started + (record.duration or 0.0)
            startup = None
            asked = watched.asked
            if record.kind == "live" and asked is not None and record.to_slots >= asked[1]:
                # The executors it asked for run the query's tasks: their start-up, unless
                # they came only after the resource wait (a full cluster, not a start-up).
                watched.asked = None
                if done - asked[0] <= self._resource_wait:
                    startup = done - asked[0]
            watched.policy.on_rescale_completed(
                done, slots=record.to_slots, partitions=record.to_parallelism,
                kind=record.kind, downtime=downtime, startup=startup)

    # -- evaluation --------------------------------------------------------------------
    def _schedule(self) -> None:
        delay = self.config.evaluation_interval
        self._next_at = self._timers.now() + delay
        self._timer = self._timers.call_later(delay, self._evaluate_all)

    def _evaluate_all(self) -> None:
        try:
            managed = {q.key for q in self._sched.queries()}
            for key in [k for k in self._queries if k not in managed]:
                del self._queries[key]  # the scheduler forgot the query
            for key in [k for k in self._outcomes if k not in managed]:
                del self._outcomes[key]
            for key in [k for k in self._recurring if k not in managed]:
                del self._recurring[key]
            for key in [k for k in self._failing if k not in managed]:
                del self._failing[key]
            for q in self._sched.queries():
                if q.finished:
                    if self._watched(q) is not None:
                        del self._queries[q.key]
                        self._failing.pop(q.key, None)
                    continue
                self._evaluate_guarded(q)
        except Exception:  # a bug outside the policies must not stop the timers either
            log.exception("the autoscaler's evaluation failed; the queries run on unchanged")
        finally:
            self._schedule()

    def _evaluate_guarded(self, q: QueryScheduler) -> None:
        """Evaluate one query; a failure (a policy's bug) leaves that query as it is, the
        others are evaluated all the same, and it is said once (with its traceback) until
        the query's evaluation succeeds again or fails otherwise."""
        try:
            self.evaluate(q)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            if self._failing.get(q.key) != error:
                self._failing[q.key] = error
                log.exception("query %s: the autoscaler's evaluation failed (%s); the query "
                              "runs on unchanged, with the target it had (said once until "
                              "the evaluation succeeds again)", q.name or q.query_id or q.key,
                              error)
            else:
                log.debug("query %s: the autoscaler's evaluation failed again (%s)",
                          q.name or q.query_id or q.key, error)
            return
        if self._failing.pop(q.key, None) is not None:
            log.info("query %s: the autoscaler's evaluation succeeds again",
                     q.name or q.query_id or q.key)

    def evaluate(self, q: QueryScheduler) -> ScalingDecision | None:
        """Evaluate one query now, and carry out an actionable decision."""
        if q.state.name is not StateName.EXECUTING or not q.query_running:
            return None
        watched = self._watch(q)
        if not watched.started:
            watched.started = True
            if self._start_small(q):
                return None
        self._tell_rescales(q, watched)
        view = self._view(q, watched)
        decision = watched.policy.evaluate(view)
        watched.outcomes[decision.outcome] = watched.outcomes.get(decision.outcome, 0) + 1
        self._log(q, watched, decision)
        if decision.actionable:
            watched.asked = None
            if decision.kind == "live" and decision.target_slots > view.slots:
                watched.asked = (view.now, decision.target_slots)
            recurring = self._recurring.get(q.key)
            if decision.ahead and recurring is not None:
                recurring.ahead += 1
            target = ScalingTarget(decision.target_slots, decision.target_partitions,
                                   decision.ahead)
            self._sched.set_scaling_target(q.key, target)
        return decision

    def _start_small(self, q: QueryScheduler) -> bool:
        """Give a query ``autoscaler.initial-slots`` (within its bounds and partitions) as
        the scheduler takes it over (or at its first evaluation), before its load is known;
        True if it set the query's target."""
        initial = self.config.start_slots
        if initial is None or q.target is not None:
            return False
        r = q.requirements
        slots = max(r.lower, min(initial, r.upper, max(1, q.partitions)))
        # A target even when the query runs on that many slots already: executors that
        # register later are then given back instead of being taken.
        decision_log.info("query %s: runs on %d slots (autoscaler.initial-slots=%d) until "
                          "its load is measured; it ran on %d", q.name or q.query_id or q.key,
                          slots, initial, q.running_slots)
        self._sched.set_scaling_target(q.key, ScalingTarget(slots, max(1, q.partitions)))
        return True

    def _view(self, q: QueryScheduler, watched: _Watched) -> QueryView:
        now = self._timers.now()
        share = q.slot_share() or 0
        slot_upper = q.slot_upper
        waiting = _short_of_target(q, share, slot_upper)
        if waiting and (watched.unmet_since is None or share != watched.unmet_share):
            watched.unmet_since, watched.unmet_share = now, share  # executors still come
        elif not waiting:
            watched.unmet_since = None
        gave_up = (watched.unmet_since is not None
                   and now - watched.unmet_since >= self._resource_wait)
        if gave_up:
            # No executor came for resource-wait: what the query has is what the cluster
            # gives it (until an executor joins or leaves), and the policy decides again.
            watched.cluster_max_slots = max(1, share)
        completed = [r for r in q.history.records() if r.outcome == "completed"]
        last = completed[-1] if completed else None
        r = q.requirements
        return QueryView(
            now=now, slots=max(1, q.running_slots), partitions=max(1, q.partitions),
            lower=r.lower, upper=r.upper,
            slot_upper=slot_upper if slot_upper > r.upper else None,
            max_useful_slots=_useful_slots(q, watched),
            can_restart=q.repartition_support().possible,
            restart_downtimes=tuple(x.duration for x in completed
                                    if x.kind == "restart" and x.trigger is not Trigger.FAILURE
                                    and x.duration is not None),
            rescale_in_flight=(q.history.pending is not None or q.restart_deferred
                               or (waiting and not gave_up)),
            last_rescale_completed=None if last is None or last.duration is None
            else last.started + last.duration,
            slots_per_executor=self._sched.resources.slots_per_executor(1) or 1,
            cluster_max_slots=watched.cluster_max_slots,
            forecast=self._forecast(q, watched))

    def _forecast(self, q: QueryScheduler, watched: _Watched) -> Forecast | None:
        """The query's forecast over the horizon: ``forecast.horizon``, and at least its
        executors' start-up (as tracked) plus an evaluation interval, so that the executors
        asked for run when the rise comes."""
        r = self._recurrence(q)
        if r is None:
            return None
        cfg = self.config
        horizon = max(cfg.forecast_horizon,
                      watched.policy.executor_startup + cfg.evaluation_interval)
        r.forecast = r.recurrence.forecast(self._timers.wall(), horizon)
        return r.forecast

    def _log(self, q: QueryScheduler, watched: _Watched, d: ScalingDecision) -> None:
        key = (d.outcome, d.target_slots, d.target_partitions)
        if key == watched.last_logged:
            return
        watched.last_logged = key
        level = logging.INFO if d.outcome != "not-ready" else logging.DEBUG
        decision_log.log(level, "query %s: %s", q.name or q.query_id or q.key, d.log_line())

    # -- reading -----------------------------------------------------------------------
    def status(self, q: QueryScheduler) -> AutoscalerStatus:
        watched = self._watched(q)
        share = q.slot_share() or 0
        # A finished query waits for nothing (its target, if any, asks for nothing any more).
        waiting = not q.finished and _short_of_target(q, share, q.slot_upper)
        cfg = self.config
        outcomes = self._outcomes.get(q.key, {})
        recurring = self._recurring.get(q.key)
        return AutoscalerStatus(
            query_id=q.query_id or q.key, enabled=cfg.enabled, scaling_enabled=cfg.scaling_enabled,
            metrics_window=cfg.metrics_window, evaluation_interval=cfg.evaluation_interval,
            next_evaluation=None if self._next_at is None
            else max(0.0, self._next_at - self._timers.now()),
            waiting_for_resources=waiting,
            decision=None if watched is None else watched.policy.last_decision,
            policy={} if watched is None else watched.policy.snapshot(),
            decisions=tuple(sorted(outcomes.items())),
            forecast=None if recurring is None else recurring.forecast,
            ahead=0 if recurring is None else recurring.ahead)

    def forecast_rate(self, key: str) -> float | None:
        """The newest forecast rate of the query under ``key``, if any (for the samples)."""
        r = self._recurring.get(key)
        return None if r is None or r.forecast is None else r.forecast.rate

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _short_of_target(q: QueryScheduler, share: int, slot_upper: int) -> bool:
    """The query's ``share`` holds fewer slots than its autoscaler's target asks for (at
    most ``slot_upper``, :attr:`QueryScheduler.slot_upper`): it waits for executors."""
    target = q.target
    return target is not None and share < min(target.slots, slot_upper)


def _useful_slots(q: QueryScheduler, watched: _Watched) -> int | None:
    """The most slots a query without a shuffle can use: the tasks of its one stage, its
    source's partitions (Kafka's, the rate source's, a Python data source's), even when
    they are as many as its slots. A source that sizes its tasks by the cluster (the file
    source splits by the default parallelism: ``tasks_follow_slots``) runs as many as there
    are slots, and capping it there would keep it from ever growing: its cap is known only
    when it ran fewer tasks than it had slots, or more. A cap seen
    before still holds when the slots have come to match it (the autoscaler gave the
    query as many slots as its source has partitions): without it the policy would size
    the query on its partitions again, and take back slots that run its tasks. So does it
    across a batch of more stages (an extra job of a stateless query's, as foreachBatch
    runs): without it, the slots beyond its partitions would look idle and be given back,
    and taken again at its next batch of one stage."""
    tasks = q.observed_tasks
    if tasks is None:
        return watched.useful
    if tasks != q.running_slots or not q.tasks_follow_slots:
        watched.useful = tasks
        return tasks
    return tasks if watched.useful == tasks else None
