"""The application's executors and task slots: the one inventory that both the executor
demand (:mod:`~spark_adaptive.core.executors.demand`) and the releases read.

Fed with :class:`~spark_adaptive.core.events.ExecutorAdded`,
:class:`~spark_adaptive.core.events.ExecutorRemoved` and
:class:`~spark_adaptive.core.events.ExecutorHeartbeat`. An executor has
``cores // task_cpus`` slots.

Executor-loss grace (FLIP-159)
    A removed executor's slots still count for ``loss_grace`` seconds: a lost
    executor often comes back (or is replaced) at once, and scaling down and up
    again would cost two restarts for nothing. A newly added executor first
    *replaces* a lost one still in its grace, so the count does not double.
    When a grace expires without replacement, the slots are gone and the
    listeners hear of it.

    An executor the driver itself killed (Spark's reason "Executor killed by
    driver.": spark-adaptive released it) gets no grace: it will not come back.

Released executors
    An executor spark-adaptive releases stops counting at once (:meth:`ExecutorInventory.release`),
    and is remembered until Spark reports it removed: should Spark refuse the
    release, :meth:`ExecutorInventory.restore` counts it again.

Hang detection
    An executor that sent no heartbeat for ``failure_detection_timeout``
    seconds (counted from its last heartbeat, or from its arrival) is reported
    through ``on_hung`` so that the boundary can kill it, and stops counting at
    once: a hung executor stalls every micro-batch that has a task on it (Spark
    itself drops a frozen one only after its heartbeat timeout,
    ``spark.network.timeout``, 120 s by default; measurements: docs/benchmarks.md,
    Spark itself). The check runs on a timer set to
    the earliest possible deadline. It stays known as hung until Spark reports it
    removed: a kill Spark refused is sent again with the next total
    (:meth:`ExecutorInventory.hung_to_kill`), and it never counts among the executors a
    total keeps.

Fixed pool
    In local mode (``local[N]``) the driver runs every task: there are N slots
    from the start, no executor joins or leaves, and none can be requested.
    ``fixed_slots`` makes the tracker count exactly that and ignore executor
    events.

Listeners get a :class:`SlotChange` whenever the counted slots change, on the
scheduler thread, after the tracker's own state is up to date.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spark_adaptive.core.clock import Cancellable, Timers
from spark_adaptive.core.events import Event, ExecutorAdded, ExecutorHeartbeat, ExecutorRemoved
from spark_adaptive.core.executors.demand import Pool, PoolExecutor

log = logging.getLogger(__name__)

#: Released executors remembered until Spark reports them removed (older ones are forgotten).
_RELEASED_KEPT = 1024

#: Spark's removal reason for an executor the driver killed (``ExecutorKilled``).
KILLED_BY_DRIVER = "Executor killed by driver"


@dataclass(frozen=True)
class Executor:
    executor_id: str
    host: str
    cores: int
    slots: int
    added_at: float = 0.0
    """When Spark added it (its ExecutorAdded event's time): the actuator releases the
    newest first."""
    joined: int = 0
    """Its place among the executors added, for those added at the same time."""


@dataclass(frozen=True)
class SlotChange:
    """The counted slots went from ``before`` to ``after``; ``reason`` says why."""

    before: int
    after: int
    reason: str

    @property
    def gained(self) -> bool:
        return self.after > self.before


@dataclass
class _Lost:
    executor: Executor
    timer: Cancellable | None


class ExecutorInventory:
    """Counts executors and slots; see the module docstring for the rules."""

    def __init__(
        self,
        timers: Timers,
        *,
        loss_grace: float,
        failure_detection_timeout: float,
        first_heartbeat_grace: float = 0.0,
        task_cpus: int = 1,
        on_change: Callable[[SlotChange], None] | None = None,
        on_hung: Callable[[str, float], None] | None = None,
        fixed_slots: int | None = None,
    ) -> None:
        if task_cpus < 1:
            raise ValueError(f"task_cpus must be >= 1, got {task_cpus}")
        self._timers = timers
        self._grace = loss_grace
        self._timeout = failure_detection_timeout
        # Spark sends an executor's first heartbeat after a random delay of one to two
        # heartbeat intervals; until then silence says nothing about a hang.
        self._first_grace = first_heartbeat_grace
        self._heard: set[str] = set()
        self._task_cpus = task_cpus
        self._listeners: list[Callable[[SlotChange], None]] = [on_change] if on_change else []
        self._on_hung = on_hung
        self._live: dict[str, Executor] = {}
        self._joined = 0  # executors added so far, for Executor.joined
        self._last_seen: dict[str, float] = {}
        self._lost: list[_Lost] = []  # in grace, oldest first
        # Released by spark-adaptive, their removal not reported yet (oldest first).
        self._released: OrderedDict[str, Executor] = OrderedDict()
        # Found hung, their removal not reported yet: True once a kill of theirs was refused
        # (it goes again with the next total).
        self._hung: dict[str, bool] = {}
        self._hang_check: Cancellable | None = None
        self._hang_check_due = math.inf
        self.fixed_slots = fixed_slots
        self._pool: Pool | None = None  # the executors as the demand reads them, until they change

    def add_listener(self, listener: Callable[[SlotChange], None]) -> None:
        self._listeners.append(listener)

    # -- reading --------------------------------------------------------------------
    @property
    def slots(self) -> int:
        """Slots counted now: live executors plus lost ones still in their grace."""
        if self.fixed_slots is not None:
            return self.fixed_slots
        return sum(e.slots for e in self._live.values()) + sum(
            lost.executor.slots for lost in self._lost)

    @property
    def executor_count(self) -> int:
        """Executors counted now (lost ones in their grace included); 1 in a fixed pool."""
        if self.fixed_slots is not None:
            return 1
        return len(self._live) + len(self._lost)

    @property
    def executors(self) -> tuple[Executor, ...]:
        """Live executors (not those in their grace)."""
        return tuple(self._live.values())

    @property
    def live_slots(self) -> int:
        """Slots of the live executors only (0 in a fixed pool)."""
        return sum(e.slots for e in self._live.values())

    def pool(self, default_slots_per_executor: int | None = None) -> Pool:
        """The live executors, oldest first by the time Spark added them (as a lower total
        releases the newest), the slots counted and the executors in their loss grace, as
        the executor demand reads them (kept until the executors change)."""
        pool = self._pool
        if pool is None:
            oldest_first = sorted(self._live.values(), key=lambda e: (e.added_at, e.joined))
            pool = self._pool = Pool(
                tuple(PoolExecutor(e.executor_id, e.slots) for e in oldest_first),
                self.slots, None, len(self._lost))
        if pool.default_slots_per_executor != default_slots_per_executor:
            pool = dataclasses.replace(pool, default_slots_per_executor=default_slots_per_executor)
        return pool

    def slots_per_executor(self, default: int | None = None) -> int | None:
        """The most common slot count of live executors (the smaller on a tie), else ``default``."""
        return self.pool(default).slots_per_executor()

    def newest(self, count: int) -> list[str]:
        """The ``count`` newest live executors, which a total ``count`` below those alive
        releases (they hold the least cached and state-store data)."""
        if count <= 0:
            return []
        ids = [e.executor_id for e in self.pool().executors]
        return ids[-count:]

    def hung_to_kill(self) -> list[str]:
        """Executors found hung whose kill Spark refused or that failed: their kill goes
        again with the next total, until Spark reports them removed."""
        return [executor_id for executor_id, again in self._hung.items() if again]

    def live_executor_events(self) -> list[ExecutorAdded]:
        """An ExecutorAdded for each live executor, as Spark reported it (to replay them to a
        subscriber that comes late)."""
        return [ExecutorAdded(e.added_at, e.executor_id, e.host, e.cores)
                for e in self._live.values()]

    # -- events ---------------------------------------------------------------------
    def handle(self, event: Event) -> bool:
        """Apply an executor event; False for any other event."""
        if self.fixed_slots is not None:
            return isinstance(event, (ExecutorAdded, ExecutorRemoved, ExecutorHeartbeat))
        if isinstance(event, ExecutorAdded):
            self.executor_added(event.executor_id, event.host, event.cores, event.time)
        elif isinstance(event, ExecutorRemoved):
            self.executor_removed(event.executor_id, event.reason)
        elif isinstance(event, ExecutorHeartbeat):
            self.heartbeat(event.executor_id)
        else:
            return False
        return True

    def executor_added(self, executor_id: str, host: str, cores: int,
                       added_at: float = 0.0) -> None:
        if executor_id in self._live:
            return
        before = self.slots
        self._joined += 1
        executor = Executor(executor_id, host, cores, cores // self._task_cpus, added_at,
                            self._joined)
        self._live[executor_id] = executor
        self._pool = None
        self._last_seen[executor_id] = self._timers.now()
        replaced = self._replace_lost(executor)
        self._arm_hang_check()
        reason = f"executor {executor_id} added ({executor.slots} slots)"
        if replaced is not None:
            reason += f", replacing lost executor {replaced.executor_id}"
        self._changed(before, reason)

    def executor_removed(self, executor_id: str, reason: str) -> None:
        self._released.pop(executor_id, None)
        self._hung.pop(executor_id, None)
        executor = self._live.pop(executor_id, None)
        self._pool = None
        self._last_seen.pop(executor_id, None)
        self._heard.discard(executor_id)
        if executor is None:
            return  # unknown, or already dropped as hung
        why = f"executor {executor_id} removed ({reason})"
        if self._grace <= 0 or reason.startswith(KILLED_BY_DRIVER):
            # Released on purpose (a smaller declaration, a hung executor): it will not come
            # back, and counting its slots would have a rescale plan on slots that are gone.
            self._changed(before=self.slots + executor.slots, reason=why)
            return
        lost = _Lost(executor, None)
        lost.timer = self._timers.call_later(self._grace, lambda: self._grace_over(lost))
        self._lost.append(lost)
        self._pool = None
        log.info("%s; its %d slots still count for the %gs executor-loss grace",
                 why, executor.slots, self._grace)

    def release(self, executor_ids: Sequence[str], reason: str) -> None:
        """spark-adaptive released these executors: they stop counting now, with no grace
        (their removal events, seconds later, then change nothing), and the listeners hear
        of it once for all of them. Each is remembered until that event, in case Spark
        refuses the release (:meth:`restore`)."""
        before = self.slots
        gone = []
        for executor_id in executor_ids:
            executor = self._live.pop(executor_id, None)
            self._pool = None
            self._last_seen.pop(executor_id, None)
            self._heard.discard(executor_id)
            if executor is not None:
                gone.append(executor_id)
                self._released[executor_id] = executor
                while len(self._released) > _RELEASED_KEPT:
                    self._released.popitem(last=False)
        if gone:
            self._changed(before, f"executor(s) {', '.join(gone)} released ({reason})")

    def killing(self, executor_ids: Sequence[str]) -> None:
        """The kills of these hung executors were sent again: not again until refused."""
        for executor_id in executor_ids:
            if executor_id in self._hung:
                self._hung[executor_id] = False

    def kill_refused(self, executor_id: str, reason: str) -> bool:
        """Spark refused (or failed) to release this executor. One found hung stays
        uncounted and its kill goes again with the next total (False); one released as
        surplus counts again (:meth:`restore`)."""
        if executor_id in self._hung:
            self._hung[executor_id] = True
            return False
        return self.restore(executor_id, reason)

    def restore(self, executor_id: str, reason: str) -> bool:
        """An executor :meth:`release` stopped counting was not released after all (Spark
        refused, or the call failed): it is alive and counts again, its hang detection
        starting afresh. False when it is unknown or its removal was reported since."""
        executor = self._released.pop(executor_id, None)
        if executor is None or executor_id in self._live:
            return False
        before = self.slots
        self._live[executor_id] = executor
        self._pool = None
        self._last_seen[executor_id] = self._timers.now()
        self._arm_hang_check()
        self._changed(before, f"executor {executor_id} counts again ({reason})")
        return True

    def heartbeat(self, executor_id: str) -> None:
        if executor_id in self._live:
            self._last_seen[executor_id] = self._timers.now()
            self._heard.add(executor_id)

    def _deadline(self, executor_id: str) -> float:
        extra = 0.0 if executor_id in self._heard else self._first_grace
        return self._last_seen[executor_id] + self._timeout + extra

    def close(self) -> None:
        """Cancel every timer (grace and hang check)."""
        for lost in self._lost:
            if lost.timer is not None:
                lost.timer.cancel()
        if self._hang_check is not None:
            self._hang_check.cancel()
            self._hang_check = None

    # -- internals ------------------------------------------------------------------
    def _replace_lost(self, executor: Executor) -> Executor | None:
        if not self._lost:
            return None
        # Prefer one lost on the same host (the same worker coming back), else the oldest.
        same_host = [lost for lost in self._lost if lost.executor.host == executor.host]
        lost = (same_host or self._lost)[0]
        self._lost.remove(lost)
        self._pool = None
        if lost.timer is not None:
            lost.timer.cancel()
        return lost.executor

    def _grace_over(self, lost: _Lost) -> None:
        if lost not in self._lost:
            return
        before = self.slots
        self._lost.remove(lost)
        self._pool = None
        self._changed(before, f"executor {lost.executor.executor_id} did not come back within "
                              f"the {self._grace:g}s executor-loss grace")

    def _changed(self, before: int, reason: str) -> None:
        after = self.slots
        if after == before:
            log.debug("%s; slots unchanged at %d", reason, after)
            return
        change = SlotChange(before, after, reason)
        log.info("%s: slots %d -> %d", reason, before, after)
        for listener in list(self._listeners):
            listener(change)

    def _arm_hang_check(self) -> None:
        if not self._last_seen:
            return
        due = min(self._deadline(e) for e in self._last_seen)
        if self._hang_check is not None and due >= self._hang_check_due:
            return  # the armed check comes first and re-arms itself
        if self._hang_check is not None:
            self._hang_check.cancel()
        self._hang_check_due = due
        self._hang_check = self._timers.call_later(max(0.0, due - self._timers.now()),
                                                   self._check_hung)

    def _check_hung(self) -> None:
        self._hang_check = None
        self._hang_check_due = math.inf
        now = self._timers.now()
        hung = [(eid, now - seen) for eid, seen in self._last_seen.items()
                if now >= self._deadline(eid)]
        for executor_id, silent in hung:
            before = self.slots
            self._live.pop(executor_id)
            self._pool = None
            self._hung[executor_id] = False
            self._last_seen.pop(executor_id)
            self._heard.discard(executor_id)
            # Reported before the listeners hear of the slots: a total they declare then
            # must not count it among the executors that stay.
            if self._on_hung is not None:
                self._on_hung(executor_id, silent)
            self._changed(before, f"executor {executor_id} sent no heartbeat for {silent:g}s "
                                  f"(failure-detection.timeout {self._timeout:g}s); treated as "
                                  "lost")
        self._arm_hang_check()
