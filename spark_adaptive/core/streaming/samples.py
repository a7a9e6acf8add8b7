"""A bounded ring of recent samples per query: what the operators' page charts.

Every ``interval`` seconds :class:`Sampler` reads each managed query's snapshot
(state, parallelism, slots, executors) and its last micro-batch (input and
processed rates, batch duration, the source's backlog where it reports one)
into that query's :class:`SampleRing`. A ring keeps its newest ``capacity``
samples, so the memory held is fixed whatever the app's lifetime: with the
defaults, ten minutes of history per query.

Sampling on a timer rather than on each progress event keeps the cost
independent of the trigger interval (a query with a 100 ms trigger would
otherwise fill its ring in seconds) and records the gaps too: a query waiting
for resources has no progress, and its samples show it.

Runs on the scheduler thread (a timer of the scheduler's ``Timers``); readers
take a copy through the event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from spark_adaptive.core.clock import Cancellable, Timers
from spark_adaptive.core.streaming.load import backlog_rows
from spark_adaptive.core.streaming.scheduler import AdaptiveScheduler


@dataclass(frozen=True, slots=True)
class Sample:
    """One query at one moment. Rates in rows per second, backlog in rows, durations in
    seconds; None where there is no micro-batch yet or the source reports no backlog."""

    time: float
    """Epoch seconds."""
    state: str
    parallelism: int
    slots: int
    executors: int
    input_rate: float | None
    processed_rate: float | None
    backlog: float | None
    batch_duration: float | None
    forecast_rate: float | None = None
    """The autoscaler's forecast of the query's recurring load: the highest rate expected
    within its horizon (None without one)."""


class SampleRing:
    """The newest ``capacity`` samples of one query, oldest first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a sample ring holds at least 1 sample, not {capacity}")
        self._samples: deque[Sample] = deque(maxlen=capacity)

    @property
    def capacity(self) -> int:
        return self._samples.maxlen or 0

    def add(self, sample: Sample) -> None:
        self._samples.append(sample)

    def samples(self) -> tuple[Sample, ...]:
        return tuple(self._samples)

    def __len__(self) -> int:
        return len(self._samples)


class Sampler:
    """Samples every managed query every ``interval`` seconds into its ring."""

    def __init__(self, scheduler: AdaptiveScheduler, timers: Timers, *,
                 interval: float = 2.0, capacity: int = 300,
                 forecast: Callable[[str], float | None] | None = None) -> None:
        """``forecast``: a query key's forecast rate, if the autoscaler forecasts it."""
        if interval <= 0:
            raise ValueError(f"the sampling interval must be positive, not {interval}")
        self._sched = scheduler
        self._timers = timers
        self.interval = interval
        self.capacity = capacity
        self._rings: dict[str, SampleRing] = {}
        self._forecast = forecast
        self._timer: Cancellable | None = self._timers.call_later(interval, self._tick)

    def _tick(self) -> None:
        try:
            self.sample()
        finally:
            if self._timer is not None:
                self._timer = self._timers.call_later(self.interval, self._tick)

    def sample(self) -> None:
        """Take one sample of every query that has not finished; drop the rings of queries
        the scheduler no longer manages (it forgets older finished ones of a name)."""
        now = self._timers.wall()
        queries = self._sched.queries()
        managed = {q.key for q in queries}
        for key in [k for k in self._rings if k not in managed]:
            del self._rings[key]
        for q in queries:
            if q.finished and q.key in self._rings:
                continue  # its last samples stay; a finished query changes no more
            s = q.snapshot()
            p = s.progress if s.parallelism else None  # not running: no rate to show
            ring = self._rings.get(q.key)
            if ring is None:
                ring = self._rings[q.key] = SampleRing(self.capacity)
            ring.add(Sample(
                time=now, state=str(s.state), parallelism=s.parallelism, slots=s.slots,
                executors=s.executors,
                input_rate=None if p is None else p.input_rows_per_second,
                processed_rate=None if p is None else p.processed_rows_per_second,
                backlog=None if p is None else backlog_rows(p),
                batch_duration=None if p is None else p.batch_duration,
                forecast_rate=None if self._forecast is None else self._forecast(q.key)))

    def samples(self, key: str) -> tuple[Sample, ...]:
        """A query's samples, oldest first (none yet: empty)."""
        ring = self._rings.get(key)
        return () if ring is None else ring.samples()

    def held(self) -> int:
        """Samples held for every query."""
        return sum(len(r) for r in self._rings.values())

    def close(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
