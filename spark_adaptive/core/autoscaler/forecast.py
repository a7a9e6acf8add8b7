"""Load that recurs: a query's input rate learnt per period, and the rate it forecasts ahead.

Most streaming loads repeat daily or weekly. A reactive autoscaler sees a rise only once
its window shows it and then waits for executors to start, and the rows that arrive
meanwhile become lag. :class:`LoadRecurrence` keeps the input rate in buckets of the
wall clock (``forecast.bucket`` seconds) over the last ``forecast.periods`` periods, and
:meth:`LoadRecurrence.forecast` reads from them the highest rate expected over the
horizon ahead, with its confidence. The policy (:mod:`.policy`) sizes a query for that
rate when it is in use: its executors are asked for early enough to run when the rise
comes. A forecast fall never scales anything down: the policy takes the higher of the
rate it measures and the forecast.

The rules, each a row of :meth:`LoadRecurrence.forecast`:

=====  ===================================================================  ============
row    when                                                                 forecast
=====  ===================================================================  ============
F1     the horizon is not shorter than the period                           off
F2     no period back is observed whole enough (``min-coverage`` of its     off
       buckets covered), or none of them covers the buckets ahead
F3     fewer than :data:`MIN_CHECKED` buckets of the last period could be   off
       checked against the periods before them
F4     the last period's forecast, checked bucket by bucket against what    off
       came, is off by more than ``max-error`` (the rows unmatched either
       way over the rows that came; loose rows match in a bucket beside)
F5     the newest buckets read less than was forecast for them by more      off
       than ``max-error`` of the forecast: a forecast rise that did not
       come, off until they agree again
F6     no rise ahead: the highest rate expected over the horizon is not     off
       above the lowest expected in the bucket of now and the one before
       by more than F4's error (a fall, a plateau, a level the periods
       disagree on within their error: the reactive rules meet it)
F7     otherwise: a rise forecast within the horizon                        in use
=====  ===================================================================  ============

The expected rate of a bucket is the mean of the same bucket one, two, ... periods
back, over the periods that are whole enough; the forecast is the highest expected
rate from the bucket of now to the one after that of now plus the horizon (a rise is
known to a bucket's resolution, and the first bucket it shows in may hold only its
start). Confidence is one minus F4's relative error.

Loose rows. A micro-batch's rows are spread evenly over the seconds since the batch
before, so when a batch spans more than one bucket, which of them its rows came in is not
known: those rows are loose. A batch that spans a rise (a long trigger, or one that
lagged behind the rise) spreads some of the rise's rows into the bucket before it, and
differently each period. Checked bucket by bucket, that reads as an error as large as the
moved rows; :func:`match` lets loose rows, and loose rows only, match the forecast in the
bucket beside theirs (F4, F5). Rows of batches within one bucket are matched in their own
bucket only: a rise that did not come, or came earlier or later, and a level that
differs, stay errors.

Buckets are indexed by wall-clock time (``floor(wall / bucket)``), so they survive a
driver restart and an app's resubmission (:class:`SavedLoad`, persisted beside the
checkpoint with the rescale history). A clock that goes back by more than a bucket, a
NaN or negative figure, a gap: each is refused or left uncovered, never a crash, and an
uncovered stretch only keeps periods from counting (F2).

Pure: no clock, no ports; time is the wall-clock time of each call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_CHECKED = 3
"""Buckets of the last period that must have been checked against a forecast (F3)."""
COVERED = 0.5
"""A bucket counts as observed once this fraction of its seconds was (its rate is then
rows over the seconds observed)."""
MAX_SPAN = 600.0
"""A batch's rows are spread over the time since the batch before, up to this many seconds
or two buckets, whichever is longer; more is a gap (the clock jumped, the query was
stopped), whose rows are not spread over it."""


@dataclass(frozen=True)
class SavedLoad:
    """A :class:`LoadRecurrence` as persisted: its period and bucket (seconds) and each
    bucket observed, as (index, rows, seconds observed, rows spread into it by micro-batches
    that spanned more than one bucket)."""

    period: float
    bucket: float
    buckets: tuple[tuple[int, float, float, float], ...] = ()


@dataclass(frozen=True)
class Forecast:
    """What :meth:`LoadRecurrence.forecast` reads ahead.

    ``rate``: the highest rate expected over the horizon (rows/s), None when there is no
    forecast at all; ``in_use``: whether the policy may act on it; ``reason``: why
    (or why not), naming the rule; ``error``: F4's relative error, ``confidence`` one
    minus it; ``periods``: the whole periods it rests on; ``horizon``: seconds ahead."""

    rate: float | None
    in_use: bool
    reason: str
    horizon: float = 0.0
    error: float | None = None
    periods: int = 0

    @property
    def confidence(self) -> float | None:
        return None if self.error is None else max(0.0, 1.0 - self.error)

    def as_dict(self) -> dict[str, object]:
        return {"rate": self.rate, "inUse": self.in_use, "reason": self.reason,
                "horizon": self.horizon, "error": self.error, "confidence": self.confidence,
                "periods": self.periods}


OFF = Forecast(None, False, "forecast.enabled=false")


class LoadRecurrence:
    """One query's input rate in wall-clock buckets over its last periods (module doc)."""

    def __init__(self, period: float, bucket: float, periods: int = 3,
                 min_coverage: float = 0.8, max_error: float = 0.25,
                 saved: SavedLoad | None = None) -> None:
        if not (bucket > 0 and period >= 2 * bucket and periods >= 1):
            raise ValueError(f"a period of {period!r}s in buckets of {bucket!r}s, "
                             f"{periods!r} periods")
        self.period, self.bucket, self.periods = float(period), float(bucket), int(periods)
        self.n = max(2, round(period / bucket))  # buckets per period
        self.min_coverage, self.max_error = min_coverage, max_error
        self._rows: dict[int, float] = {}
        self._seconds: dict[int, float] = {}
        self._spread: dict[int, float] = {}  # rows of batches that spanned several buckets
        self._newest: int | None = None
        self._last_wall: float | None = None
        self._cached: tuple[tuple[int | None, float, int], Forecast] | None = None
        self._version = 0  # counts changes to completed buckets
        self.rejected = 0
        self.last_rejection = ""
        if saved is not None and saved.period == self.period and saved.bucket == self.bucket:
            for index, rows, seconds, spread in saved.buckets:
                if _fine(rows) and _fine(seconds) and _fine(spread) and isinstance(index, int):
                    self._rows[index], self._seconds[index] = rows, seconds
                    self._spread[index] = min(spread, rows)
            self._newest = max(self._rows, default=None)

    # -- what was observed -------------------------------------------------------------
    def observe(self, wall: float, rows: float, seconds: float) -> bool:
        """``rows`` arrived over the ``seconds`` that end at wall-clock time ``wall`` (a
        micro-batch's input since the one before). Spread over the buckets of those
        seconds; False (and why, in ``last_rejection``) when refused."""
        if not (_fine(rows) and _fine(seconds) and isinstance(wall, (int, float))
                and math.isfinite(wall)):
            return self._reject(f"{rows!r} rows over {seconds!r}s at {wall!r}")
        last = self._last_wall
        if last is not None and wall < last - self.bucket:
            return self._reject(f"the clock went back from {last:.0f} to {wall:.0f}")
        if seconds <= 0 or seconds > max(MAX_SPAN, 2 * self.bucket):
            self._last_wall = max(wall, last or wall)
            return self._reject(f"{seconds:.0f}s since the batch before: a gap, not a rate")
        self._last_wall = max(wall, last or wall)
        start, rate = wall - seconds, rows / seconds
        b = math.floor(start / self.bucket)
        if self._newest is not None and b < self._newest:
            self._version += 1  # a bucket the forecast may have read changed
        parts: list[tuple[int, float]] = []
        while b * self.bucket < wall:
            lo, hi = max(start, b * self.bucket), min(wall, (b + 1) * self.bucket)
            if hi > lo:
                parts.append((b, hi - lo))
            b += 1
        for k, part in parts:
            self._rows[k] = self._rows.get(k, 0.0) + rate * part
            self._seconds[k] = self._seconds.get(k, 0.0) + part
            if len(parts) > 1:  # which of its buckets these rows came in is not known
                self._spread[k] = self._spread.get(k, 0.0) + rate * part
        self._newest = max(b - 1, self._newest if self._newest is not None else b - 1)
        self._forget()
        return True

    def _forget(self) -> None:
        """Only the periods that can still be read are kept: bounded in size."""
        if self._newest is None:
            return
        oldest = self._newest - (self.periods + 1) * self.n
        for b in [b for b in self._rows if b < oldest]:
            del self._rows[b], self._seconds[b]
            self._spread.pop(b, None)

    def _reject(self, why: str) -> bool:
        self.rejected += 1
        self.last_rejection = why
        return False

    def rate(self, b: int) -> float | None:
        """The rate observed in bucket ``b``, if it was observed enough."""
        seconds = self._seconds.get(b, 0.0)
        if seconds < COVERED * self.bucket:
            return None
        return self._rows[b] / seconds

    def spread(self, b: int) -> float:
        """The part of bucket ``b``'s rate that micro-batches spanning more than one bucket
        spread into it: rows that may have come in a neighbouring bucket."""
        seconds = self._seconds.get(b, 0.0)
        if seconds < COVERED * self.bucket:
            return 0.0
        return self._spread.get(b, 0.0) / seconds

    def saved(self) -> SavedLoad:
        return SavedLoad(self.period, self.bucket, tuple(
            (b, round(self._rows[b], 6), round(self._seconds[b], 6),
             round(self._spread.get(b, 0.0), 6)) for b in sorted(self._rows)))

    # -- what is expected ---------------------------------------------------------------
    def whole_periods(self, now: int) -> tuple[int, ...]:
        """The periods back (1 = the last ``period`` before bucket ``now``) observed whole
        enough: ``min-coverage`` of their buckets."""
        need = self.min_coverage * self.n
        return tuple(k for k in range(1, self.periods + 1)
                     if sum(self.rate(b) is not None
                            for b in range(now - k * self.n, now - (k - 1) * self.n)) >= need)

    def expected(self, b: int, lags: tuple[int, ...]) -> float | None:
        """Bucket ``b``'s expected rate: the mean of the same bucket ``lags`` periods back,
        where observed."""
        seen = [r for k in lags if (r := self.rate(b - k * self.n)) is not None]
        return sum(seen) / len(seen) if seen else None

    def forecast(self, wall: float, horizon: float) -> Forecast:
        """The highest rate expected from ``wall`` to ``wall + horizon``, and whether the
        policy may act on it (the module doc's rows). Never raises.

        It reads completed buckets only, so it is computed again only in a new bucket, at
        another horizon, or once a batch spread its rows back into a completed bucket."""
        key = (math.floor(wall / self.bucket) if isinstance(wall, (int, float))
               and math.isfinite(wall) else None, horizon, self._version)
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        f = self._forecast(wall, horizon)
        self._cached = (key, f)
        return f

    def _forecast(self, wall: float, horizon: float) -> Forecast:
        if not (isinstance(wall, (int, float)) and math.isfinite(wall)
                and isinstance(horizon, (int, float)) and math.isfinite(horizon)):
            return Forecast(None, False, f"F1: no forecast at {wall!r} over {horizon!r}s")
        if horizon >= self.period:
            return Forecast(None, False, f"F1: the horizon ({horizon:.0f}s) is not shorter "
                                         f"than the period ({self.period:.0f}s)", horizon)
        now = math.floor(wall / self.bucket)
        lags = self.whole_periods(now)
        if not lags:
            return Forecast(None, False, "F2: no period back observed whole enough "
                                         f"({self.min_coverage:.0%} of its buckets)", horizon)
        # to the bucket after that of now + horizon: a rise is known to a bucket's
        # resolution, and the first bucket it shows in may hold only its start
        ahead = [e for b in range(now, math.floor((wall + horizon) / self.bucket) + 2)
                 if (e := self.expected(b, lags)) is not None]
        if not ahead:
            return Forecast(None, False, "F2: the periods back did not observe the buckets "
                                         "ahead", horizon, periods=len(lags))
        rate = max(ahead)
        error, checked = self._period_error(now)
        base = Forecast(rate, False, "", horizon, error, len(lags))
        if checked < MIN_CHECKED or error is None:
            return _with(base, f"F3: {checked} buckets of the last period checked against "
                               f"a forecast, fewer than {MIN_CHECKED}")
        if error > self.max_error:
            return _with(base, f"F4: the last period's forecast was off by {error:.0%}, "
                               f"more than forecast.max-error={self.max_error:g}")
        over = self._over_forecast(now, horizon, lags)
        if over is not None and over > self.max_error:
            return _with(base, f"F5: the newest buckets read {over:.0%} less than "
                               "forecast: the load forecast for them did not come")
        low = self._low_now(now, lags)
        if low is not None and rate <= low * (1 + error):
            return _with(base, f"F6: no rise forecast within {horizon:.0f}s: the highest "
                               f"rate expected, {rate:.0f} rows/s, is within the last "
                               f"period's error ({error:.0%}) of the lowest expected now, "
                               f"{low:.0f}")
        return _with(base, f"F7: a rise forecast within {horizon:.0f}s, "
                           f"{periods_phrase(len(lags))} back, the forecast off by "
                           f"{error:.0%} over the last period", in_use=True)

    def _low_now(self, now: int, lags: tuple[int, ...]) -> float | None:
        """F6: the lowest rate expected in bucket ``now`` and the one before. A rise is read
        from there, not from now's alone: a rise that comes later than the periods before
        had it (within F5's bucket) is still ahead of a load that has not risen."""
        known = [e for b in (now - 1, now) if (e := self.expected(b, lags)) is not None]
        return min(known) if known else None

    def _period_error(self, now: int) -> tuple[float | None, int]:
        """F4: over the buckets of the last period (before ``now``) that a forecast of them
        can be checked against, the rows left unmatched either way, give or take a bucket
        (:func:`match`), over the rows that came; and how many buckets that was. A
        bucket's forecast is the mean of the same bucket in the periods before it that
        observed it."""
        lags = tuple(range(1, self.periods + 1))
        buckets = [x for b in range(now - self.n, now) if (x := self._checked(b, lags))]
        checked = len(buckets)
        if checked == 0:
            return None, 0
        left = match(buckets)
        missed = left.seen + left.forecast  # not the pending: they may come in this bucket
        came = sum(x.seen for x in buckets)
        if came <= 0:
            return (0.0 if missed <= 0 else math.inf), checked
        return missed / came, checked

    def _over_forecast(self, now: int, horizon: float, lags: tuple[int, ...]
                       ) -> float | None:
        """F5: over the newest completed buckets (a horizon's worth, at least two), the
        forecast rows that nothing came for within a bucket (:func:`match`), relative to
        the forecast (``lags``: the whole periods back, as :meth:`forecast` read them);
        None when none can tell."""
        recent = max(2, math.ceil(horizon / self.bucket))
        buckets = [x for b in range(now - recent, now) if (x := self._checked(b, lags))]
        forecast = sum(x.forecast for x in buckets)
        # the newest bucket's loose forecast rows may yet come in the next one
        return match(buckets).forecast / forecast if forecast > 0 else None

    def _checked(self, b: int, lags: tuple[int, ...]) -> Bucket | None:
        """Bucket ``b`` as observed and as forecast (:meth:`expected`), each with its loose
        part (:meth:`spread`); None unless both are known."""
        seen = self.rate(b)
        if seen is None:
            return None
        back = [(rate, self.spread(k)) for lag in lags
                if (rate := self.rate(k := b - lag * self.n)) is not None]
        if not back:
            return None
        return Bucket(b, seen, sum(r for r, _ in back) / len(back), self.spread(b),
                      sum(loose for _, loose in back) / len(back))


@dataclass(frozen=True)
class Bucket:
    """One bucket as :func:`match` checks it: the rates that came and were forecast (over
    buckets of one length, rows in the same unit), and how much of each may have come in a
    neighbouring bucket instead."""

    index: int
    seen: float
    forecast: float
    seen_loose: float = 0.0
    forecast_loose: float = 0.0


@dataclass(frozen=True)
class Unmatched:
    """What :func:`match` left: rows that came with no forecast rows to match, forecast
    rows that nothing came for, and the newest bucket's forecast rows still unmatched that
    the bucket after it, not seen yet, could still match."""

    seen: float
    forecast: float
    pending: float


def match(buckets: list[Bucket]) -> Unmatched:
    """Match the rows that came with the rows forecast, in their own bucket or, for the
    loose ones, in the next.

    ``buckets`` in increasing index. Left to right, what a bucket leaves unmatched, up to
    its loose rows, may match the very next bucket's, before anything else there; then a
    bucket's own rows match. Whatever can no longer match is counted. In one dimension,
    with rows that move by one bucket at most, matching the oldest first leaves the least
    unmatched."""
    seen_left = forecast_left = 0.0
    carry_seen = carry_forecast = 0.0
    previous: int | None = None
    for x in buckets:
        if previous is None or x.index != previous + 1:  # a gap: carries match nothing
            seen_left += carry_seen
            forecast_left += carry_forecast
            carry_seen = carry_forecast = 0.0
        m = min(carry_forecast, x.seen)
        seen = x.seen - m
        forecast_left += carry_forecast - m
        m = min(carry_seen, x.forecast)
        guess = x.forecast - m
        seen_left += carry_seen - m
        m = min(seen, guess)
        seen, guess = seen - m, guess - m
        carry_seen, carry_forecast = min(seen, x.seen_loose), min(guess, x.forecast_loose)
        seen_left += seen - carry_seen
        forecast_left += guess - carry_forecast
        previous = x.index
    return Unmatched(seen_left + carry_seen, forecast_left, carry_forecast)


def periods_phrase(n: int) -> str:
    """'1 period', '2 periods'."""
    return f"{n} period" if n == 1 else f"{n} periods"


def _with(f: Forecast, reason: str, in_use: bool = False) -> Forecast:
    return Forecast(f.rate, in_use, reason, f.horizon, f.error, f.periods)


def _fine(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) \
        and x >= 0
