"""The metrics window of one query: recent micro-batches, with running sums.

Contract
--------
* :meth:`MetricsWindow.add` takes an already cleaned sample (see
  :func:`~spark_adaptive.core.autoscaler.samples.clean`) in O(1) amortized time:
  entries older than the window are dropped from the left and their values
  subtracted from the running sums, so no evaluation re-scans a history.
* Two spans are kept: the whole *window* (``metrics.window``, or
  :data:`MIN_BATCHES` trigger intervals when that is longer), averaged for the
  processing rate and for the input rate, and the *newest* batches (the last
  :data:`NEWEST_SPAN` seconds, or a third of a shorter window, at least two
  batches), from which a rise of the
  input rate is read at once; the newest batch alone is read too, for a jump
  that the newest seconds still dilute. That is the answer to FLINK-39306, where
  a 0 -> 1M lag spike was diluted across the whole window.
* Rates are rows over Spark's own interval between trigger starts (``rows /
  inputRowsPerSecond``) where Spark gives it, else over the time between
  completions: when batches grow, completions stretch while the rows a batch
  reads are still the arrivals since the previous start.
* The arrival rate is consumption plus backlog growth (Flink:
  ``inputRate + d(lag)/dt``), the growth up to the batch before the newest: a
  backlog that jumped in the newest batch is read as backlog (the catch-up
  term), not yet as a rate. With no reported backlog it is the consumption.
* The true processing rate per slot is rows per busy slot-second where busy time
  is known; otherwise ``processedRowsPerSecond`` divided by the slots that had
  work (a batch on ``s`` slots with ``P`` partitions keeps ``P / ceil(P/s)``
  of them busy on average; ``P`` is the source's partitions for a stateless
  query capped by them). Batches with no rows say nothing about it.
* A batch's busy time is a fixed part (its tasks' scheduling, deserialization,
  source and sink set-up: paid per task, whatever the rows) plus a part per row.
  Where the window's batches read different row counts, a least-squares line of
  busy time over rows separates them (:meth:`MetricsWindow.batch_cost`): rows
  per busy slot-second at a quiet load then no longer understate the rate at a
  busy one, where the fixed part is spread over more rows.
* The backlog is the newest one, never a mean (see :meth:`MetricsWindow.backlog`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

from spark_adaptive.core.autoscaler.samples import LoadSample, clean, clean_rate

NEWEST_SPAN = 20.0
"""Seconds of the newest batches (at least two) whose arrival rate is read on its own; a third
of the window when that is shorter, so that the newest batches of a short window still differ
from the whole of it."""

MIN_BATCHES = 3
"""A window holding fewer completed batches than this is never full. So that one can fill
when batches are sparse (a 2-minute trigger in a 3-minute ``metrics.window``), the window
spans at least this many trigger intervals (with back-to-back triggers, batch durations)."""

MIN_ROW_SPREAD = 0.25
"""Row counts must vary by this coefficient of variation across the window's batches before
busy time is split into a fixed and a per-row part: with alike batches the line's slope is
noise."""


class Entry(NamedTuple):
    time: float
    dt: float | None  # time since the previous accepted batch
    rows: float | None
    busy: float | None  # slot-seconds, only with rows > 0
    busy_rows: float  # rows of a batch with busy time, else 0
    rate_per_slot: float | None  # from processedRowsPerSecond, only with rows > 0
    backlog: float | None
    input_rate: float | None
    duration: float | None
    trigger: float | None
    slots: int
    partitions: int


def entry_from(sample: LoadSample, last_time: float | None,
               max_useful_slots: int | None = None) -> Entry:
    """A window entry from a sample whose time, slots and partitions were checked, each
    other field cleaned to a usable number or None; ``last_time`` is the previous entry's.
    ``max_useful_slots``: the tasks of a stateless query's batch (its source's partitions,
    whatever its partitions), for the rate per busy slot."""
    t, slots, partitions = sample.time, sample.slots, sample.partitions
    gap = t - last_time if last_time is not None else None
    rows = clean(sample.num_input_rows)
    in_rate = clean_rate(sample.input_rows_per_second)
    duration, trigger = clean(sample.batch_duration), clean(sample.trigger_interval)
    # Without Spark's rate, the interval since the previous batch is at least this batch's
    # own run and its trigger, however close together their completions were handled.
    dt = None if gap is None else max(gap, duration or 0.0, trigger or 0.0)
    if rows is None:
        if in_rate is not None and dt is not None:
            rows = clean(in_rate * dt)
    elif in_rate:
        # Spark's own interval: from the previous trigger's start to this one's. The rows a
        # batch reads arrived during it, while the time between completions stretches when
        # batches grow, which would hide the arrival rate behind the capacity.
        dt = clean(rows / in_rate) or dt
    busy = rps = None
    if rows:  # only a batch with rows says something about the processing rate
        busy = clean(sample.busy_time) or None
        proc = clean_rate(sample.processed_rows_per_second)
        if proc:
            rps = proc / effective_slots(slots, task_count(partitions, max_useful_slots))
    return Entry(t, dt, rows, busy, rows if busy and rows else 0.0, rps, clean(sample.backlog),
                 in_rate, duration, trigger, slots, partitions)


def task_count(partitions: int, max_useful_slots: int | None) -> int:
    """The tasks a micro-batch runs at once: its ``partitions``, or for a stateless query
    its source's partitions (``max_useful_slots``), fewer or more, whatever its partitions:
    its micro-batches run in one stage, with no shuffle into the partitions."""
    return partitions if max_useful_slots is None else max_useful_slots


def effective_slots(slots: int, partitions: int) -> float:
    """Slots that have a task on average: ``P / ceil(P / s)`` (never more than ``P``)."""
    s = min(slots, partitions)
    if s <= 0:
        return 0.0
    return partitions / -(-partitions // s)


class _Sums:
    """Running sums over one deque of entries."""

    __slots__ = ("entries", "backlogs", "rows", "dt", "n_dt", "busy", "busy_rows", "rps",
                 "n_rps", "n_busy", "rr", "rb")

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()
        self.backlogs: deque[tuple[float, float]] = deque()
        self.rows = self.dt = self.busy = self.busy_rows = self.rps = 0.0
        self.n_rps = self.n_dt = self.n_busy = 0
        self.rr = self.rb = 0.0  # sums of rows^2 and rows x busy, over batches with busy time

    def push(self, e: Entry) -> None:
        self.entries.append(e)
        if e.rows is not None and e.dt is not None:
            self.rows += e.rows
            self.dt += e.dt
            self.n_dt += 1
        if e.busy is not None:
            self.busy += e.busy
            self.busy_rows += e.busy_rows
            self.n_busy += 1
            self.rr += e.busy_rows * e.busy_rows
            self.rb += e.busy_rows * e.busy
        if e.rate_per_slot is not None:
            self.rps += e.rate_per_slot
            self.n_rps += 1
        if e.backlog is not None:
            self.backlogs.append((e.time, e.backlog))

    def trim(self, oldest: float, keep: int) -> None:
        """Drop entries before ``oldest``, always keeping the newest ``keep``."""
        entries = self.entries
        while len(entries) > keep and entries[0].time < oldest:
            e = entries.popleft()
            if e.rows is not None and e.dt is not None:
                self.rows -= e.rows
                self.dt -= e.dt
                self.n_dt -= 1
            if e.busy is not None:
                self.busy -= e.busy
                self.busy_rows -= e.busy_rows
                self.n_busy -= 1
                self.rr -= e.busy_rows * e.busy_rows
                self.rb -= e.busy_rows * e.busy
            if e.rate_per_slot is not None:
                self.rps -= e.rate_per_slot
                self.n_rps -= 1
        first = entries[0].time if entries else math.inf
        while self.backlogs and self.backlogs[0][0] < first:
            self.backlogs.popleft()
        # No float residue outlives the last entry of its kind: subtracted sums can leave
        # a few 1e-17 that, divided by each other, would read as a rate.
        if self.n_dt == 0:
            self.rows = self.dt = 0.0
        if self.n_busy == 0:
            self.busy = self.busy_rows = self.rr = self.rb = 0.0
        if self.n_rps == 0:
            self.rps = 0.0

    def arrival_rate(self, skip_newest: bool = True) -> float | None:
        """Consumption plus backlog growth, leaving the newest batch's backlog change out
        (``skip_newest``): a backlog that jumped in one batch may be a one-off dump, which
        the catch-up term handles; only growth over two batches or more is a rate."""
        if self.dt <= 0:
            return None
        rate = max(0.0, self.rows) / self.dt
        b = self.backlogs
        last = len(b) - (2 if skip_newest else 1)
        if last >= 1:
            (t0, b0), (t1, b1) = b[0], b[last]
            if t1 > t0:
                rate += (b1 - b0) / (t1 - t0)
        return max(0.0, rate)


class MetricsWindow:
    """Samples of the last ``span`` seconds of one query, with O(1) aggregates."""

    def __init__(self, span: float) -> None:
        self.span = span
        self.recent_span = min(span / 3, NEWEST_SPAN)
        self._all = _Sums()
        self._last_time: float | None = None

    # -- maintenance -----------------------------------------------------------------
    def clear(self) -> None:
        """Forget every sample (after a rescale, or when the clock went back)."""
        self._all = _Sums()
        self._last_time = None

    def add(self, e: Entry) -> None:
        self._all.push(e)
        self._last_time = e.time
        pace = e.trigger or e.duration or 0.0  # the time one batch takes up
        self._all.trim(e.time - max(self.span, MIN_BATCHES * pace), keep=1)

    @property
    def last_time(self) -> float | None:
        return self._last_time

    @property
    def count(self) -> int:
        return len(self._all.entries)

    @property
    def first_time(self) -> float | None:
        return self._all.entries[0].time if self._all.entries else None

    @property
    def newest(self) -> Entry | None:
        return self._all.entries[-1] if self._all.entries else None

    # -- aggregates ------------------------------------------------------------------
    def window_arrival_rate(self) -> float | None:
        """Arrival rate averaged over the window (rows/s), None without elapsed time."""
        return self._all.arrival_rate()

    def recent_arrival_rate(self) -> float | None:
        """Arrival rate over the newest batches only (rows/s): the last
        :data:`NEWEST_SPAN` seconds (a third of a shorter window), at least two batches,
        read from the right end of the window (a handful of entries, so no running sums
        are needed)."""
        entries = self._all.entries
        newest = entries[-1].time if entries else 0.0
        rows = dt = 0.0
        first: tuple[float, float] | None = None
        second_newest: tuple[float, float] | None = None
        n = 0
        for e in reversed(entries):
            if n >= 2 and e.time < newest - self.recent_span:
                break
            n += 1
            if e.rows is not None and e.dt is not None:
                rows += e.rows
                dt += e.dt
            if e.backlog is not None:
                if n > 1 and second_newest is None:
                    second_newest = (e.time, e.backlog)
                first = (e.time, e.backlog)
        if dt <= 0:
            return None
        rate = max(0.0, rows) / dt
        if first is not None and second_newest is not None and second_newest[0] > first[0]:
            rate += (second_newest[1] - first[1]) / (second_newest[0] - first[0])
        return max(0.0, rate)

    def newest_arrival_rate(self) -> float | None:
        """Rows per second the newest batch read, for a jump under way (its backlog change
        is left out, as in :meth:`recent_arrival_rate`)."""
        s = self._all
        if not s.entries:
            return None
        e = s.entries[-1]
        if e.rows is None or not e.dt:
            return None
        return e.rows / e.dt

    def rate_per_slot(self) -> tuple[float | None, str]:
        """True processing rate per slot (rows per slot-second) and where it came from."""
        s = self._all
        if s.n_busy > 0 and s.busy > 0 and s.busy_rows > 0:
            return s.busy_rows / s.busy, "busy time"
        if s.n_rps > 0 and s.rps > 0:
            return s.rps / s.n_rps, "processedRowsPerSecond"
        return None, "no batch with rows reported busy time or a processing rate"

    def batch_cost(self) -> tuple[float, float] | None:
        """``(fixed, per_row)``: the busy slot-seconds of a batch as ``fixed + per_row x
        rows``, fitted by least squares over the window's batches with busy time; None
        unless at least three of them read row counts that vary by :data:`MIN_ROW_SPREAD`
        and the line is a cost (a positive slope, a non-negative intercept)."""
        s = self._all
        n = s.n_busy
        if n < 3 or s.busy_rows <= 0:
            return None
        mean_r, mean_b = s.busy_rows / n, s.busy / n
        var = s.rr / n - mean_r * mean_r
        if var <= (MIN_ROW_SPREAD * mean_r) ** 2:
            return None
        per_row = (s.rb / n - mean_r * mean_b) / var
        fixed = mean_b - per_row * mean_r
        if not per_row > 0 or fixed < 0:
            return None
        return fixed, per_row

    def batch_interval(self) -> float | None:
        """Seconds between batches: the trigger interval, or with back-to-back triggers the
        mean time between the window's batches."""
        s = self._all
        e = s.entries[-1] if s.entries else None
        if e is not None and e.trigger:
            return e.trigger
        if s.n_dt > 0 and s.dt > 0:
            return s.dt / s.n_dt
        return None

    def rate_per_slot_at(self, load: float) -> tuple[float | None, str]:
        """Rows per busy slot-second while the query processes ``load`` rows per second.

        With a fitted :meth:`batch_cost` and a known batch interval ``T`` that is ``load
        / (fixed / T + per_row x load)``: the fixed part is paid once a batch whatever
        its rows. Otherwise the window's own rate (:meth:`rate_per_slot`), which holds
        the fixed part at the window's load."""
        cost, interval = self.batch_cost(), self.batch_interval()
        if cost is None or not interval or load <= 0:
            return self.rate_per_slot()
        fixed, per_row = cost
        return (load / (fixed / interval + per_row * load),
                f"busy time: {fixed:.2f} slot-s a batch plus {per_row * 1e3:.3g} ms a row")

    def rows_total(self) -> float:
        return max(0.0, self._all.rows)

    def backlog(self, now: float, rate: float, running: bool) -> float | None:
        """Rows waiting at ``now``: the newest reported backlog plus what batches hide.

        A source reports (Kafka: offsets behind latest) what the batch did not
        read when it was planned. What arrives while a batch runs is reported by
        nobody: when batches run longer than the trigger interval, the rows that
        arrive during the overrun are work the next batch inherits, so the overrun
        times the input rate is backlog too (for a source that reports none, all
        of it). Back-to-back triggers (0) give no such signal; the utilization
        (input rate over capacity) still does. And when a batch is ``running`` and
        none has completed for longer than a batch takes, the rows arrived
        meanwhile (at ``rate``) are added: a query stuck in one long batch is
        falling behind even though it reports nothing. With no batch running, the
        query has had no new input since its last batch (Spark starts none then).
        """
        s = self._all
        e = s.entries[-1] if s.entries else None
        if e is None:
            return None
        trigger = e.trigger or 0.0
        duration = e.duration or 0.0
        waiting = max(0.0, now - e.time - max(trigger, duration)) if running else 0.0
        reported = s.backlogs[-1][1] if s.backlogs and s.backlogs[-1][0] == e.time else 0.0
        overrun = max(0.0, duration - trigger) if trigger > 0 else 0.0
        newest_rate = e.input_rate if e.input_rate is not None else rate
        return reported + newest_rate * overrun + rate * waiting
