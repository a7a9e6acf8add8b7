"""The start's hold: an autoscaled app keeps only ``autoscaler.initial-slots`` worth of
executors from its own start until its first managed streaming query.

Spark's ``dynamicAllocation.initialExecutors`` does the same for dynamic allocation. On a
standalone cluster the master launches an executor on every free core as the app
registers, before any app code runs, and an autoscaled app would keep them all until its
query is taken over. The hold releases the executors beyond the start's as they register,
before any task has run on them; it only trims, it never asks for more than Spark gave.

What ends it:

* the first managed query (the autoscaler sizes the app from there);
* a streaming query's start stops the trimming; one that spark-adaptive does not take over
  within :data:`UNMANAGED_GRACE` (it could not manage it, or it was started from JVM code)
  undoes the hold;
* a job of the app's own (batch work, a schema's inference) undoes it at once. Spark runs
  a streaming run's jobs in a job group named by the run's id (a UUID): a job with no
  group, or another, is the app's own; one in a group that looks like a run id but
  belongs to no run started is judged once the grace is over (its run's start may reach
  here after its first job).

Undone, the app gets back what it holds without spark-adaptive (``idle_executors``; on a
standalone cluster, as many as Spark had given it), never fewer than declared.

The hold is a source of the executor demand: while it trims, its slots are an input of
:func:`~spark_adaptive.core.executors.demand.executor_demand` (row N2); undone, it hands
the scheduler the baseline the app goes back to (row N3).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from spark_adaptive.core.clock import Timers
from spark_adaptive.core.events import Event, ExecutorAdded, JobStarted, QueryStarted
from spark_adaptive.core.executors.demand import Baseline

#: Seconds a streaming query that started may take to be taken over, and a job whose group
#: looks like a run id may wait for its run's start, before the start's hold is undone.
UNMANAGED_GRACE = 10.0

#: Spark runs a streaming query's jobs in a job group named by the run's id (a UUID).
_RUN_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_run_id(job_group: str | None) -> bool:
    """Whether a job's group is a streaming query run's id, i.e. the job is a micro-batch's."""
    return job_group is not None and _RUN_ID.fullmatch(job_group.lower()) is not None


class StartHold:
    """The hold of one app, from its start until its first managed query.

    From :meth:`on_event` and its timers, on the scheduler's thread: ``undo(reason)`` when
    something undoes the hold (a job of the app's own, at once; a query left unmanaged or
    a job of no run, once the grace is over), and the scheduler then calls :meth:`undo`
    with what it knows. A streaming query's start stops the trimming."""

    def __init__(self, slots: int, timers: Timers, *, undo: Callable[[str], None]) -> None:
        self._slots: int | None = slots  # trimming to this many slots' executors while set
        self._granted: set[str] = set()  # executors Spark gave the app while it held
        self._runs_seen: set[str] = set()  # runs whose start was reported
        self._timers = timers
        self._on_undo = undo

    @property
    def slots(self) -> int | None:
        """The slots whose executors the app keeps while the hold trims; None: it does not."""
        return self._slots

    def on_event(self, event: Event) -> None:
        """Follow what ends the hold, before the scheduler sees ``event``."""
        if isinstance(event, ExecutorAdded):
            if self._slots is not None:
                self._granted.add(event.executor_id)
        elif isinstance(event, QueryStarted):
            self._runs_seen.add(event.run_id)
            if self._slots is not None:
                self._slots = None
                why = (f"streaming query {event.query_id} started, but spark-adaptive did not "
                       f"take it over within {UNMANAGED_GRACE:g}s")
                self._timers.call_later(UNMANAGED_GRACE, lambda: self._on_undo(why))
        elif isinstance(event, JobStarted):
            group = event.job_group
            if group in self._runs_seen:
                return
            why = f"job {event.job_id} runs before any managed streaming query"
            if group is None or not is_run_id(group):
                self._on_undo(why)
            else:
                self._timers.call_later(
                    UNMANAGED_GRACE,
                    lambda: None if group in self._runs_seen else self._on_undo(why))

    def undo(self, reason: str, idle_executors: int | None, sent: int | None
             ) -> Baseline | None:
        """Undo the hold (``reason``: batch work, a query left unmanaged): trimming stops,
        and, if the hold had trimmed (``sent``: the total it declared; nothing else declares
        before the first query), the app goes back to what it holds without spark-adaptive
        (``idle_executors``, else as many as Spark had given it), never fewer than
        ``sent`` (a job may have started on them)."""
        self._slots = None
        if sent is None:
            return None
        total = idle_executors if idle_executors is not None else len(self._granted)
        if total <= sent:
            return Baseline(sent, f"{reason}; the app keeps the {sent} declared")
        return Baseline(total, f"{reason}; the app gets back what it holds without "
                               f"spark-adaptive (autoscaler.initial-slots held it to {sent} "
                               "until then)")
