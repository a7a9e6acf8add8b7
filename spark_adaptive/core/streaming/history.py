"""What happened to a query: its rescales and restarts, and its decisions.

:class:`RescaleHistory` keeps one :class:`RescaleRecord` per (re)start or live
rescale, in Flink's rescale-timeline terms (FLIP-495): a trigger cause, from/to
parallelism and slots, the duration from the decision to the first completed
micro-batch at the new parallelism, the outcome, and the seconds spent in each
phase (stop, repartition, start) as the driver reported them.

At most one record is *pending* at a time. A new record supersedes the
pending one; a failure fails it; the first completed micro-batch completes it.

The first start of a query is recorded with kind ``initial`` (trigger
``INITIAL_SCHEDULE``): its duration is the time to the first completed
micro-batch, and it is neither a rescale nor a restart.

A history outlives its driver: :meth:`RescaleHistory.saved` is the value kept
beside the query's checkpoint (:class:`SavedHistory`: the records, counters,
tallies and the next id), handed to ``on_change`` whenever a record opens or
finishes or a failure is counted; a history built from it goes on where it
stopped. A record still pending when its driver stopped can never complete: it
comes back failed.

Counters follow Flink's ``numRestarts`` / ``numRescales`` and are counted from
the same records: every ``restart`` record counts as a restart, and as a
rescale as well unless its trigger is ``FAILURE``; ``live`` records count as
rescales (and as live rescales), never as restarts; ``initial`` counts as
neither. ``failures`` counts every failure of the query, restarted or not.

:class:`DecisionLog` is where every decision of a query's scheduler goes: it
becomes the query's ``lastDecision`` and one INFO line with its reason on the
``spark_adaptive.scheduler`` logger.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from spark_adaptive.core.autoscaler.forecast import SavedLoad
from spark_adaptive.core.clock import Timers

LOGGER_NAME = "spark_adaptive.scheduler"
decision_log = logging.getLogger(LOGGER_NAME)


class Trigger(str, enum.Enum):
    """Why a query was (re)started or rescaled."""

    INITIAL_SCHEDULE = "INITIAL_SCHEDULE"
    NEW_RESOURCES = "NEW_RESOURCES"
    RESOURCES_LOST = "RESOURCES_LOST"
    REQUIREMENTS_CHANGED = "REQUIREMENTS_CHANGED"
    AUTOSCALER = "AUTOSCALER"
    FORECAST = "FORECAST"
    """The autoscaler, ahead of a rise its forecast of the query's recurring load shows."""
    FAILURE = "FAILURE"


Kind = Literal["initial", "live", "restart"]
Outcome = Literal["pending", "completed", "failed", "superseded"]


@dataclass(frozen=True)
class RescaleRecord:
    """One start, restart or live rescale. ``kind``: ``initial`` = the query's first start,
    ``restart`` = it was stopped and started again, ``live`` = it kept running."""

    id: int
    time: float
    """Wall-clock epoch seconds of the decision."""
    trigger: Trigger
    kind: Kind
    from_parallelism: int
    to_parallelism: int
    from_slots: int
    to_slots: int
    reason: str
    started: float
    """Monotonic time of the decision, for the duration."""
    duration: float | None = None
    outcome: Outcome = "pending"
    timings: tuple[tuple[str, float], ...] = ()



@dataclass(frozen=True)
class Counters:
    restarts: int = 0
    rescales: int = 0
    live_rescales: int = 0
    failures: int = 0


DURATION_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds (seconds) of the rescale-duration histogram's buckets, +Inf after them:
a live rescale takes about a micro-batch, a restart seconds to minutes."""


@dataclass(frozen=True)
class DurationHistogram:
    """Durations of finished rescales of one kind, cumulative over the query's life.

    ``counts[i]`` counts durations <= ``DURATION_BUCKETS[i]``; ``count`` all of them
    (the +Inf bucket)."""

    counts: tuple[int, ...] = (0,) * len(DURATION_BUCKETS)
    count: int = 0
    total: float = 0.0

    def observe(self, seconds: float) -> DurationHistogram:
        counts = tuple(c + (seconds <= le) for c, le in zip(self.counts, DURATION_BUCKETS,
                                                             strict=True))
        return DurationHistogram(counts, self.count + 1, self.total + seconds)


@dataclass(frozen=True)
class Tallies:
    """What a query's history counted since it started, beyond the records it keeps.

    ``opened``: rescales and restarts begun, by (kind, trigger); ``finished``: by (kind,
    outcome); ``durations``: completed ones by kind; ``last_duration``: of the last
    completed rescale or restart (None before the first)."""

    opened: tuple[tuple[tuple[Kind, Trigger], int], ...] = ()
    finished: tuple[tuple[tuple[Kind, Outcome], int], ...] = ()
    durations: tuple[tuple[Kind, DurationHistogram], ...] = ()
    last_duration: float | None = None


@dataclass(frozen=True)
class SavedHistory:
    """What a history keeps across driver restarts: its records (newest last), counters,
    tallies and the id its next record gets. Immutable, so any thread may read it."""

    records: tuple[RescaleRecord, ...] = ()
    counters: Counters = Counters()
    tallies: Tallies = Tallies()
    next_id: int = 1
    load: SavedLoad | None = None
    """The query's input rate per bucket of its forecast period (autoscaler.forecast.*)."""


STOPPED_DRIVER = "the driver stopped before it completed"
"""Appended to the reason of a record that was pending when its driver stopped."""


def _bump(pairs: tuple[tuple[Any, Any], ...], key: Any, change: Callable[[Any], Any],
          empty: Any) -> tuple[tuple[Any, Any], ...]:
    d = dict(pairs)
    d[key] = change(d.get(key, empty))
    return tuple(d.items())


class RescaleHistory:
    """The records of one query, newest last, at most ``limit`` of them.

    ``saved``: the history of the query's earlier drivers, which this one continues.
    ``on_change`` gets :meth:`saved` after each record opened or finished and each failure
    counted (on the caller's thread: it must return at once)."""

    def __init__(self, timers: Timers, limit: int = 100, *, saved: SavedHistory | None = None,
                 on_change: Callable[[SavedHistory], None] | None = None) -> None:
        self._timers = timers
        self._records: deque[RescaleRecord] = deque(maxlen=limit)
        self._next_id = 1
        self._pending: RescaleRecord | None = None
        self._load: SavedLoad | None = None
        self.counters = Counters()
        self.tallies = Tallies()
        if saved is not None:
            self._restore(saved)
        self._on_change = on_change

    def _restore(self, saved: SavedHistory) -> None:
        """Continue a saved history. Its records' monotonic ``started`` is re-based on this
        process's clock (the same wall-clock instant); a pending one becomes failed, and is
        tallied as such. Its duration stays None: when the driver stopped is not known, so
        neither is how long it ran (the API says null, the page and the CLI a dash)."""
        offset = self._timers.now() - self._timers.wall()
        tallies = saved.tallies
        for r in saved.records:
            record = dataclasses.replace(r, started=r.time + offset)
            if record.outcome == "pending":
                record = dataclasses.replace(record, outcome="failed",
                                             reason=f"{record.reason} ({STOPPED_DRIVER})")
                if record.kind != "initial":
                    tallies = dataclasses.replace(tallies, finished=_bump(
                        tallies.finished, (record.kind, "failed"), lambda n: n + 1, 0))
            self._records.append(record)
        self._next_id = max([saved.next_id, *(r.id + 1 for r in saved.records)])
        self.counters = saved.counters
        self.tallies = tallies
        self._load = saved.load

    def saved(self) -> SavedHistory:
        """The history as it is kept beside the checkpoint."""
        return SavedHistory(tuple(self._records), self.counters, self.tallies, self._next_id,
                            self._load)

    @property
    def load(self) -> SavedLoad | None:
        """The input rate per forecast bucket, as last kept (:meth:`keep_load`)."""
        return self._load

    def keep_load(self, load: SavedLoad) -> None:
        """Keep the query's input rate per forecast bucket with its history (saved with it)."""
        self._load = load
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.saved())

    @property
    def pending(self) -> RescaleRecord | None:
        return self._pending

    def records(self) -> tuple[RescaleRecord, ...]:
        return tuple(self._records)

    def open(
        self,
        trigger: Trigger,
        kind: Kind,
        *,
        from_parallelism: int,
        to_parallelism: int,
        from_slots: int,
        to_slots: int,
        reason: str,
    ) -> RescaleRecord:
        """Start a record (superseding the pending one) and count it."""
        if self._pending is not None:
            self._finish("superseded")
        record = RescaleRecord(
            self._next_id, self._timers.wall(), trigger, kind, from_parallelism,
            to_parallelism, from_slots, to_slots, reason, self._timers.now())
        self._next_id += 1
        self._records.append(record)
        self._pending = record
        c = self.counters
        if kind == "live":
            c = dataclasses.replace(c, rescales=c.rescales + 1, live_rescales=c.live_rescales + 1)
        elif kind == "restart" and trigger is Trigger.FAILURE:
            c = dataclasses.replace(c, restarts=c.restarts + 1)
        elif kind == "restart":
            c = dataclasses.replace(c, restarts=c.restarts + 1, rescales=c.rescales + 1)
        self.counters = c
        if kind != "initial":
            t = self.tallies
            self.tallies = dataclasses.replace(
                t, opened=_bump(t.opened, (kind, trigger), lambda n: n + 1, 0))
        self._changed()
        return record

    def count_failure(self) -> None:
        """A failure of the query (whether or not it leads to a restart)."""
        self.counters = dataclasses.replace(self.counters, failures=self.counters.failures + 1)
        self._changed()

    def update_pending(
        self,
        *,
        to_parallelism: int | None = None,
        to_slots: int | None = None,
        timings: Iterable[tuple[str, float]] = (),
    ) -> None:
        """Amend the pending record: the parallelism really started, the slots it got,
        phase timings."""
        if self._pending is None:
            return
        changes: dict[str, Any] = {}
        if to_parallelism is not None:
            changes["to_parallelism"] = to_parallelism
        if to_slots is not None:
            changes["to_slots"] = to_slots
        merged = dict(self._pending.timings)
        for name, seconds in timings:
            merged[name] = merged.get(name, 0.0) + seconds
        changes["timings"] = tuple(merged.items())
        self._replace(dataclasses.replace(self._pending, **changes))

    def complete_pending(self) -> RescaleRecord | None:
        """The first micro-batch at the new parallelism completed."""
        return self._finished(self._finish("completed"))

    def fail_pending(self) -> RescaleRecord | None:
        return self._finished(self._finish("failed"))

    def supersede_pending(self) -> RescaleRecord | None:
        return self._finished(self._finish("superseded"))

    def _finished(self, done: RescaleRecord | None) -> RescaleRecord | None:
        if done is not None:
            self._changed()
        return done

    def _finish(self, outcome: Outcome) -> RescaleRecord | None:
        if self._pending is None:
            return None
        done = dataclasses.replace(self._pending, outcome=outcome,
                                   duration=self._timers.now() - self._pending.started)
        self._replace(done)
        self._pending = None
        if done.kind != "initial":
            t = self.tallies
            t = dataclasses.replace(
                t, finished=_bump(t.finished, (done.kind, outcome), lambda n: n + 1, 0))
            if outcome == "completed" and done.duration is not None:
                seconds = done.duration
                t = dataclasses.replace(
                    t, last_duration=seconds,
                    durations=_bump(t.durations, done.kind, lambda h: h.observe(seconds),
                                    DurationHistogram()))
            self.tallies = t
        return done

    def _replace(self, record: RescaleRecord) -> None:
        for i, r in enumerate(self._records):
            if r.id == record.id:
                self._records[i] = record
                break
        if self._pending is not None and self._pending.id == record.id:
            self._pending = record


@dataclass(frozen=True)
class Decision:
    """A decision of the scheduler: what it did (``action``) and why."""

    time: float
    """Wall-clock epoch seconds."""
    action: str
    reason: str


class DecisionLog:
    """Records a query's decisions: the last one is kept, each is logged once at INFO."""

    def __init__(self, timers: Timers, label: Callable[[], str]) -> None:
        self._timers = timers
        self._label = label
        self.last: Decision | None = None

    def decide(self, action: str, reason: str, level: int = logging.INFO) -> Decision:
        """Record and log a decision: INFO, or WARN for a failure the query survives, ERROR
        for one it does not."""
        decision = Decision(self._timers.wall(), action, reason)
        self.last = decision
        decision_log.log(level, "query %s: %s: %s", self._label(), action, reason)
        return decision
