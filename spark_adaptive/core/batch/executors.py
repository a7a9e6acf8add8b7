"""Executors that follow the parallelism of batch stages.

Flink's adaptive batch scheduler asks the resource manager for the slots of the
tasks it is about to deploy, and idle TaskManagers go away after
``resourcemanager.taskmanager-timeout``. :class:`ExecutorFollower` does the same
for Spark batch stages:

* **scale up at once**: when a stage is submitted, the running stages need
  ``ceil(tasks / slots per executor)`` executors, within
  ``[ceil(min-parallelism / slots), ceil(max-parallelism / slots)]``; if that
  is more than are alive (or were last declared), declare it;
* **never shrink mid-job**: a smaller stage leaves extra executors alone (their
  shuffle files and cached blocks may still be read);
* **release when idle**: once no job and no stage has run for ``idle_timeout``,
  declare the lower bound; the actuator releases the newest surplus executors.
  Idle means no *job* runs, not only no stage: between two stages of one job
  no stage runs for an instant, and a release then (``idle_timeout`` 0) would
  lose the map outputs the next stage reads;
* **never release persisted data**: before an idle release the follower asks
  how many RDDs the app holds persisted (``persisted_rdds``: cached RDDs and
  DataFrames, local checkpoints). While there are any (or it cannot tell), the
  executors stay, as in plain Spark, where static executors are never released
  and dynamic allocation keeps executors with cached blocks for good
  (``cachedExecutorIdleTimeout`` is infinite): releasing them would lose a
  local checkpoint for good (a later job fails) and recompute a cached
  non-deterministic DataFrame with other values. The reason is logged once;
  the check is repeated every :data:`PERSISTED_RECHECK` seconds (at least the
  idle timeout) while idle, so executors go once the app unpersists.
* **an end that never came does not keep executors**: a job or stage end can
  be lost before it gets here (Spark's listener bus drops events when its
  queue is full; a delivery to Python can fail). With ``spark_active`` (which
  jobs and stages Spark runs now, from its status store), every
  :data:`STALE_RECHECK` seconds while something runs, a job or stage held as
  running for that long that Spark no longer runs is taken as ended (logged).

Coordination with the streaming scheduler (the rule, in one place): the follower
is one source of the app's executor demand
(:func:`~spark_adaptive.core.executors.demand.executor_demand`, row N1): it hands
each decision to ``declare`` (the
:class:`~spark_adaptive.core.executors.reconciler.Reconciler`, which alone talks
to the cluster manager), and decides only while ``controls()`` is true, which
the wiring defines as "spark-adaptive manages no running streaming query".
Streaming queries hold long-lived state and declare their own upper bounds; a
batch job running beside them uses whatever executors exist and never declares
over them. Only the idle decision releases executors beyond its total; any other
keeps what runs.

Every method runs on the scheduler thread; timers come from the injected
:class:`~spark_adaptive.core.clock.Timers`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Hashable, Sequence

from spark_adaptive.core.clock import Cancellable, Timers
from spark_adaptive.core.executors.demand import Baseline

LOGGER_NAME = "spark_adaptive.batch"
decision_log = logging.getLogger(LOGGER_NAME)

#: Seconds between two looks at the app's persisted RDDs while they keep idle executors
#: (or the idle timeout, when longer).
PERSISTED_RECHECK = 60.0

#: Seconds between two looks at the jobs and stages Spark runs, while some are held as
#: running; one held for at least this long that Spark no longer runs has lost its end.
STALE_RECHECK = 60.0

#: What Spark runs now: the ids of its active jobs and of its active stages; None when that
#: cannot be told.
ActiveWork = Callable[[], tuple[Collection[int], Collection[int]] | None]


def executors_for_tasks(tasks: int, slots_per_executor: int, min_p: int, max_p: int
                        ) -> tuple[int, str]:
    """Executors to run ``tasks`` tasks at once, within the batch bounds, and why.

    ``ceil(tasks / slots)`` clamped to ``[ceil(min_p / slots), ceil(max_p / slots)]``
    and never below 1. Raises ``ValueError`` on ``slots_per_executor < 1``.
    """
    if slots_per_executor < 1:
        raise ValueError(f"slots_per_executor must be >= 1, got {slots_per_executor}")
    lo = max(1, math.ceil(min_p / slots_per_executor))
    hi = max(lo, math.ceil(max_p / slots_per_executor))
    raw = math.ceil(tasks / slots_per_executor)
    n = min(max(raw, lo), hi)
    text = f"ceil({tasks} tasks / {slots_per_executor} slots per executor) = {raw}"
    if n != raw:
        text += f", {'raised' if n > raw else 'clamped'} to {n} (bounds [{lo}, {hi}] from " \
                f"batch.min/max-parallelism {min_p}/{max_p})"
    return n, text


class ExecutorFollower:
    """Declares executors for the batch stages that run, and releases them when idle."""

    def __init__(
        self,
        declare: Callable[[Baseline], None],
        timers: Timers,
        *,
        min_p: int,
        max_p: int,
        idle_timeout: float,
        controls: Callable[[], bool],
        slots_per_executor: Callable[[], int | None],
        executors_alive: Callable[[], int],
        persisted_rdds: Callable[[], int | None],
        spark_active: ActiveWork | None = None,
    ) -> None:
        """``declare(demand)`` takes each decision: the total, why, and whether executors
        beyond it go now. ``persisted_rdds()``: how many RDDs the app holds persisted now
        (cached RDDs and DataFrames, local checkpoints), None when that cannot be told;
        executors are released only at 0. ``spark_active()``: the jobs and stages Spark runs
        now (job ids, and stage ids: a stage's key is ``(stage id, attempt)``), for the ends
        that never came (module doc); None (the default) trusts the ends to come. It may
        also be set later, as :attr:`spark_active`."""
        self._declare_to = declare
        self._timers = timers
        self._min_p, self._max_p = min_p, max_p
        self._idle_timeout = idle_timeout
        self._controls = controls
        self._slots = slots_per_executor
        self._alive = executors_alive
        self._persisted = persisted_rdds
        self._running: dict[Hashable, int] = {}
        self._jobs: set[Hashable] = set()
        self._since: dict[tuple[str, Hashable], float] = {}
        self._idle_timer: Cancellable | None = None
        self._stale_timer: Cancellable | None = None
        self._kept_logged = False
        self._stale_logged = False
        self.spark_active = spark_active
        self.declared: int | None = None
        self.decisions: list[tuple[int, str]] = []

    @property
    def running_tasks(self) -> int:
        return sum(self._running.values())

    @property
    def idle(self) -> bool:
        """No job and no stage runs."""
        return not self._running and not self._jobs

    def job_started(self, job_id: Hashable) -> None:
        """A job started: the executors are not idle until it ends, between its stages too."""
        self._jobs.add(job_id)
        self._held(("job", job_id))
        self._cancel_idle()

    def job_ended(self, job_id: Hashable) -> None:
        """A job ended (succeeded or failed); when nothing runs, the idle clock starts."""
        self._since.pop(("job", job_id), None)
        if job_id in self._jobs:
            self._jobs.discard(job_id)
            self._start_idle_clock()

    def stage_submitted(self, key: Hashable, tasks: int) -> None:
        """A stage (``key``: stage id and attempt) with ``tasks`` tasks is about to run."""
        self._running[key] = tasks
        self._held(("stage", key))
        self._cancel_idle()
        if not self._controls():
            return
        per = self._slots() or 1
        want, why = executors_for_tasks(self.running_tasks, per, self._min_p, self._max_p)
        have = max(self._alive(), self.declared or 0)
        if want > have:
            self._declare(want, f"{len(self._running)} running stage(s) need {why}; "
                                f"{self._alive()} alive")

    def stage_completed(self, key: Hashable) -> None:
        """A stage ended (succeeded or failed); when nothing runs, the idle clock starts."""
        self._running.pop(key, None)
        self._since.pop(("stage", key), None)
        self._start_idle_clock()

    def close(self) -> None:
        self._cancel_idle()
        if self._stale_timer is not None:
            self._stale_timer.cancel()
            self._stale_timer = None

    def _held(self, what: tuple[str, Hashable]) -> None:
        """A job or stage is held as running from now: look at what Spark runs in a while."""
        self._since.setdefault(what, self._timers.now())
        if self.spark_active is not None and self._stale_timer is None:
            self._stale_timer = self._timers.call_later(STALE_RECHECK, self._check_stale)

    def _check_stale(self) -> None:
        """Forget the jobs and stages held as running for :data:`STALE_RECHECK` seconds or
        more that Spark no longer runs (their end was lost); look again later while any
        are held."""
        self._stale_timer = None
        spark_active = self.spark_active
        if self.idle or spark_active is None:
            return
        try:
            active = spark_active()
        except Exception:
            decision_log.debug("batch: reading the jobs and stages Spark runs failed",
                               exc_info=True)
            active = None
        if active is not None:
            jobs, stages = set(active[0]), set(active[1])
            before = self._timers.now() - STALE_RECHECK
            lost_jobs = [j for j in self._jobs
                         if j not in jobs and self._since.get(("job", j), before) <= before]
            lost_stages = [k for k in self._running
                           if _stage_id(k) not in stages
                           and self._since.get(("stage", k), before) <= before]
            for j in lost_jobs:
                self._jobs.discard(j)
                self._since.pop(("job", j), None)
            for k in lost_stages:
                del self._running[k]
                self._since.pop(("stage", k), None)
            if lost_jobs or lost_stages:
                level = logging.INFO if self._stale_logged else logging.WARNING
                self._stale_logged = True
                decision_log.log(
                    level, "batch: Spark no longer runs job(s) %s and stage(s) %s, whose end "
                    "never reached spark-adaptive (an event dropped on the way: Spark's "
                    "listener bus drops events while its queue is full); they no longer count "
                    "as running", _ids(lost_jobs), _ids(lost_stages))
                self._start_idle_clock()
        if not self.idle:
            self._stale_timer = self._timers.call_later(STALE_RECHECK, self._check_stale)

    def _start_idle_clock(self, delay: float | None = None) -> None:
        if self.idle and self._idle_timer is None:
            self._idle_timer = self._timers.call_later(
                self._idle_timeout if delay is None else delay, self._on_idle)

    def _on_idle(self) -> None:
        self._idle_timer = None
        if not self.idle or not self._controls():
            return
        per = self._slots() or 1
        floor, _ = executors_for_tasks(0, per, self._min_p, self._max_p)
        alive = self._alive()
        if not (alive > floor or (self.declared is not None and self.declared > floor)):
            return
        if self._holds_persisted_data(alive):
            self._start_idle_clock(max(self._idle_timeout, PERSISTED_RECHECK))
            return
        self._declare(floor, f"no batch job ran for {self._idle_timeout:g}s: keep the "
                             f"lower bound of {floor} (batch.min-parallelism {self._min_p}, "
                             f"{per} slots per executor); {alive} alive", release=True)

    def _holds_persisted_data(self, alive: int) -> bool:
        """Whether the app holds persisted RDDs (or it cannot be told); logs why the executors
        stay once, until an idle check finds none."""
        try:
            persisted = self._persisted()
        except Exception:
            decision_log.exception("batch: reading the app's persisted RDDs failed")
            persisted = None
        if persisted == 0:
            self._kept_logged = False
            return False
        if not self._kept_logged:
            self._kept_logged = True
            what = (f"the app holds {persisted} persisted RDD(s)" if persisted is not None
                    else "whether the app holds persisted RDDs cannot be read")
            decision_log.info(
                "batch: no batch job ran for %gs, but the %d executor(s) stay: %s (cached "
                "RDDs or DataFrames, local checkpoints), whose blocks releasing executors "
                "would lose; as in Spark, executors holding cached data are kept. Released "
                "once nothing is persisted (unpersist()).", self._idle_timeout, alive, what)
        return True

    def _declare(self, total: int, reason: str, *, release: bool = False) -> None:
        """Hand a decision on: ``release``, executors beyond ``total`` go now (the idle one)."""
        self.declared = total
        self.decisions.append((total, reason))
        self._declare_to(Baseline(total, reason, release_surplus=release))

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


def _stage_id(key: Hashable) -> Hashable:
    """The stage id of a stage key ``(stage id, attempt)``."""
    return key[0] if isinstance(key, tuple) and key else key


def _ids(keys: Sequence[Hashable]) -> str:
    if not keys:
        return "none"
    return ", ".join(".".join(map(str, k)) if isinstance(k, tuple) else str(k)
                     for k in sorted(keys, key=repr))
