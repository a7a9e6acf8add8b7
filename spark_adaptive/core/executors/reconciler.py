"""The one owner of the executor total: it computes the demand and sends what changed.

:class:`Reconciler` is the only caller of the actuator's
:meth:`~spark_adaptive.core.ports.ExecutorActuator.request_total_executors` and
:meth:`~spark_adaptive.core.ports.ExecutorActuator.release_hung_executor`. After each
event the scheduler has handled (and after each decision of the batch part) it reads the
facts (:class:`~spark_adaptive.core.executors.demand.DemandInputs`, from the streaming
scheduler, plus its own: the total sent last, a refused release, the batch part's
demand, the moment), computes :func:`~spark_adaptive.core.executors.demand.executor_demand`
and, when the total differs from the one sent last, or executors beyond an unchanged total
may go now, sends ``(total, executors to release)``:

* the executors to release are the newest live ones beyond the total (they hold the least
  cached and state-store data), and those found hung whose kill Spark refused;
* they stop counting at once in the one
  :class:`~spark_adaptive.core.executors.inventory.ExecutorInventory`;
* a release Spark refuses comes back through :meth:`Reconciler.release_refused`: the
  executor counts again, and executors beyond the total wait for a micro-batch boundary
  (a hung one is killed again with the next total instead);
* an executor found hung is killed at once (:meth:`Reconciler.hung`), and the actuator
  sends the last total again after it, as after every kill (Spark's ``killExecutors``
  lowers its target by the executors it kills).

Every total sent is one INFO line with the demand's reason, on the decision log of the
part whose demand it is (``spark_adaptive.scheduler``, or ``spark_adaptive.batch``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from spark_adaptive.core.clock import Timers
from spark_adaptive.core.executors.demand import (
    SURPLUS_WAIT,
    Baseline,
    Demand,
    DemandInputs,
    Source,
    executor_demand,
)
from spark_adaptive.core.executors.inventory import ExecutorInventory
from spark_adaptive.core.ports import ExecutorActuator, ExecutorRelease

log = logging.getLogger(__name__)
# The decision logs users configure (docs/operations.md): the streaming scheduler's and the
# batch part's.
_DECISIONS = logging.getLogger("spark_adaptive.scheduler")
_BATCH_DECISIONS = logging.getLogger("spark_adaptive.batch")


class Reconciler:
    """Sends the executor total the demand asks for; see the module docstring."""

    def __init__(self, actuator: ExecutorActuator, inventory: ExecutorInventory,
                 timers: Timers, facts: Callable[[], DemandInputs]) -> None:
        """``facts()`` reads the streaming scheduler's facts (on the scheduler thread)."""
        self._actuator = actuator
        self._inventory = inventory
        self._timers = timers
        self._facts = facts
        self._sent: Demand | None = None  # the demand whose total was sent last
        self._refused = False  # a release was refused since the last total was sent
        self._batch: Baseline | None = None
        self._waiting_since: float | None = None  # executors beyond the total wait since

    @property
    def sent(self) -> int | None:
        """The total sent last (None: never)."""
        return None if self._sent is None else self._sent.total

    @property
    def sent_by(self) -> Source:
        """Whose demand the total sent last was ("none": nothing was sent)."""
        return "none" if self._sent is None else self._sent.source

    def set_batch_demand(self, demand: Baseline | None, *, reconcile: bool = True) -> None:
        """The batch part's decision (None: it does not size the app now), then reconcile
        (unless the caller does). A decision that releases executors beyond its total does
        so now only: executors that join later stay (a job may run on them)."""
        self._batch = demand
        if reconcile:
            self.reconcile()
        if demand is not None and demand.release_surplus:
            self._batch = dataclasses.replace(demand, release_surplus=False)

    def reconcile(self, *, at_boundary: bool = False) -> Demand:
        """Compute the demand now and send it if it changed (``at_boundary``: this moment is
        a micro-batch boundary of a managed query); returns the demand."""
        now = self._timers.now()
        since = self._waiting_since
        inputs = dataclasses.replace(
            self._facts(), sent=self.sent, refused=self._refused, batch=self._batch,
            at_boundary=at_boundary,
            surplus_wait_over=since is not None and now - since >= SURPLUS_WAIT)
        demand = executor_demand(inputs)
        self._waiting_since = (now if since is None else since) if demand.waits else None
        total = demand.total
        if total is None:
            return demand
        surplus = inputs.pool.alive - total if demand.release_surplus else 0
        if total != self.sent or surplus > 0:
            self._send(demand, total, self._inventory.newest(surplus))
        return demand

    def _send(self, demand: Demand, total: int, newest: Sequence[str]) -> None:
        if demand.source == "batch":
            _BATCH_DECISIONS.info("batch: request %d executor(s) in total: %s", total,
                                  demand.reason)
        else:
            _DECISIONS.info("request %d executors in total: %s", total, demand.reason)
        release = [ExecutorRelease(e, f"more executors alive than the {total} declared")
                   for e in newest]
        release += [ExecutorRelease(e, "killed as hung; the kill is tried again")
                    for e in self._inventory.hung_to_kill()]
        self._sent, self._refused = demand, False
        try:
            taken = set(self._actuator.request_total_executors(total, release))
        except Exception:
            log.exception("requesting %d executors failed", total)
            return
        self._inventory.killing([r.executor_id for r in release if r.executor_id in taken])
        self._inventory.release([e for e in newest if e in taken],
                                f"{total} executors declared")

    def hung(self, executor_id: str, silent: float) -> None:
        """The inventory found an executor silent for ``silent`` seconds: kill it now (the
        actuator has the driver drop it, and sends the last total again)."""
        reason = f"no heartbeat for {silent:g}s"
        _DECISIONS.info("release hung executor %s: %s", executor_id, reason)
        try:
            self._actuator.release_hung_executor(executor_id, f"spark-adaptive: {reason}")
        except Exception:
            log.exception("killing hung executor %s failed", executor_id)

    def release_refused(self, executor_ids: Sequence[str], reason: str) -> None:
        """Spark refused to release these executors, or releasing them failed: those released
        as surplus are alive and get tasks, so they count again, and executors beyond the
        total wait for a micro-batch boundary from now (Q8); one found hung is killed again
        with the next total."""
        outer, self._refused = self._refused, True  # before they count: a total then waits
        restored = [executor_id for executor_id in executor_ids
                    if self._inventory.kill_refused(executor_id,
                                                    f"its release was refused: {reason}")]
        if not restored:  # none counted as released (a hung one, or already removed)
            self._refused = outer
