"""The recurrence and its forecast (core/autoscaler/forecast.py), on virtual wall time."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from autoscaler_fakes import FakeQuery, config, make

from spark_adaptive.core.autoscaler.config import AutoscalerConfig
from spark_adaptive.core.autoscaler.forecast import (
    MIN_CHECKED,
    Bucket,
    Forecast,
    LoadRecurrence,
    SavedLoad,
    Unmatched,
    match,
)
from spark_adaptive.errors import ConfigurationError

PERIOD, BUCKET = 600.0, 30.0
RISE = 300.0  # the rise comes half-way through each period
T0 = 1_800_000_000.0 - (1_800_000_000.0 % PERIOD)  # a period starts here


def morning(t: float) -> float:
    """100 rows/s, then 1,000 from half-way through each period."""
    return 1000.0 if (t - T0) % PERIOD >= RISE else 100.0


def feed(rec: LoadRecurrence, rate: Callable[[float], float], start: float, end: float,
         every: float = 2.0) -> None:
    t = start + every
    while t <= end + 1e-9:
        assert rec.observe(t, rate(t - every / 2) * every, every), rec.last_rejection
        t += every


def recurrence(**kw: float) -> LoadRecurrence:
    return LoadRecurrence(PERIOD, BUCKET, **kw)  # type: ignore[arg-type]


def test_a_rise_seen_in_the_periods_before_is_forecast_a_horizon_ahead() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + PERIOD + RISE - 60)
    f = rec.forecast(T0 + PERIOD + RISE - 40, 45.0)
    assert f.in_use, f.reason
    assert f.rate == pytest.approx(1000.0)
    assert f.periods == 1 and f.error == pytest.approx(0.0, abs=1e-9)
    # before the horizon reaches the rise, the night's rate is forecast
    assert rec.forecast(T0 + PERIOD + RISE - 120, 45.0).rate == pytest.approx(100.0)


def test_buckets_span_period_boundaries_and_a_batch_spread_over_two_buckets() -> None:
    rec = recurrence()
    # one batch of 10 s straddles a bucket boundary: 4 s in one, 6 s in the next
    assert rec.observe(T0 + 36.0, 1000.0, 10.0)
    assert rec.rate(math.floor((T0 + 30.0) / BUCKET)) is None  # 6 s of 30: not covered
    assert rec._rows[math.floor((T0 + 26.0) / BUCKET)] == pytest.approx(400.0)
    assert rec._rows[math.floor((T0 + 30.0) / BUCKET)] == pytest.approx(600.0)
    # a period's last bucket and the next period's first are the same phase one period apart
    rec = recurrence()
    feed(rec, morning, T0, T0 + 2 * PERIOD)
    last, first = math.floor((T0 + PERIOD - 1) / BUCKET), math.floor((T0 + PERIOD) / BUCKET)
    assert rec.rate(last) == pytest.approx(1000.0) and rec.rate(first) == pytest.approx(100.0)
    assert rec.expected(first + rec.n, (1, 2)) == pytest.approx(100.0)


def test_what_is_kept_is_bounded_to_the_periods_read() -> None:
    rec = recurrence(periods=2)
    feed(rec, morning, T0, T0 + 10 * PERIOD)
    assert len(rec.saved().buckets) <= 3 * rec.n + 1


def test_agreeing_periods_turn_it_on_and_disagreeing_ones_off() -> None:
    rec = recurrence(max_error=0.25)
    feed(rec, morning, T0, T0 + 2 * PERIOD + RISE - 60)
    assert rec.forecast(T0 + 2 * PERIOD + RISE - 60, 45.0).in_use

    # a second period whose level is three times the first one's: off (F4)
    other = recurrence(max_error=0.25)
    feed(other, morning, T0, T0 + PERIOD)
    feed(other, lambda t: 3 * morning(t), T0 + PERIOD, T0 + 2 * PERIOD + RISE - 60)
    f = other.forecast(T0 + 2 * PERIOD + RISE - 60, 45.0)
    assert not f.in_use and f.reason.startswith("F4"), f.reason
    assert f.error is not None and f.error > 0.25 and f.confidence is not None
    assert f.confidence < 0.75


def test_no_whole_period_no_forecast_and_too_few_checked_buckets_not_used() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + PERIOD - 100)  # not a whole period yet
    f = rec.forecast(T0 + PERIOD - 100, 45.0)
    assert not f.in_use and f.rate is None and f.reason.startswith("F2"), f.reason
    feed(rec, morning, T0 + PERIOD - 100, T0 + PERIOD + BUCKET * (MIN_CHECKED - 1))
    f = rec.forecast(T0 + PERIOD + BUCKET * (MIN_CHECKED - 1), 45.0)
    assert not f.in_use and f.reason.startswith("F3"), f.reason


def test_a_rise_that_did_not_come_turns_it_off_until_the_buckets_agree_again() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + 2 * PERIOD)
    day3 = T0 + 2 * PERIOD
    feed(rec, lambda t: 100.0, day3, day3 + RISE + 2 * BUCKET)  # no rise today
    f = rec.forecast(day3 + RISE + 2 * BUCKET, 45.0)
    assert not f.in_use and f.reason.startswith(("F4", "F5")), f.reason
    assert f.error is not None and f.error > 0  # it counts against the confidence
    # the next period is as the first two: the newest buckets agree, yet the last period
    # holds the miss: it is on again once its error is within the bound
    feed(rec, morning, day3 + RISE + 2 * BUCKET, day3 + 2 * PERIOD + RISE - 60)
    f = rec.forecast(day3 + 2 * PERIOD + RISE - 60, 45.0)
    assert f.in_use, f.reason


def test_only_a_rise_ahead_is_acted_on_not_a_plateau_a_fall_or_a_level() -> None:
    rec = recurrence()
    # on the plateau, and before the fall at the period's end: nothing rises ahead
    start = T0
    for t in (T0 + PERIOD + RISE + 90, T0 + 2 * PERIOD - 40):
        feed(rec, morning, start, t)
        start = t
        f = rec.forecast(t, 45.0)
        assert not f.in_use and f.reason.startswith("F6"), f.reason
        assert f.rate == pytest.approx(1000.0) and f.error == pytest.approx(0.0, abs=1e-9)
    # the next rise is one again
    feed(rec, morning, T0 + 2 * PERIOD - 40, T0 + 2 * PERIOD + RISE - 40)
    f = rec.forecast(T0 + 2 * PERIOD + RISE - 40, 45.0)
    assert f.in_use and f.reason.startswith("F7"), f.reason

    # A second period 20% below the first (within max-error): the level the first one had
    # is no rise of today's, but the rise the periods agree on still is.
    low = recurrence(max_error=0.25)
    feed(low, morning, T0, T0 + PERIOD)
    feed(low, lambda t: 0.8 * morning(t), T0 + PERIOD, T0 + PERIOD + RISE - 120)
    f = low.forecast(T0 + PERIOD + RISE - 120, 45.0)
    assert not f.in_use and f.reason.startswith("F6") and f.rate == pytest.approx(100.0), \
        f.reason
    feed(low, lambda t: 0.8 * morning(t), T0 + PERIOD + RISE - 120, T0 + PERIOD + RISE - 40)
    f = low.forecast(T0 + PERIOD + RISE - 40, 45.0)
    assert f.in_use and f.rate == pytest.approx(1000.0), f.reason


def test_a_rise_later_than_the_periods_before_had_it_is_still_ahead_within_a_bucket() -> None:
    rec = recurrence()
    feed(rec, short_rise(), T0, T0 + PERIOD)
    # the second period's rise comes a bucket late: in the first bucket of the rise the
    # periods before had, the load has not risen yet, and it is still a rise ahead
    feed(rec, short_rise(late=1), T0 + PERIOD, T0 + PERIOD + RISE + 10)
    f = rec.forecast(T0 + PERIOD + RISE + 10, 45.0)
    assert f.in_use and f.rate == pytest.approx(1000.0), f.reason


def short_rise(late: int = 0) -> Callable[[float], float]:
    """100 rows/s, and 1,000 for two buckets from half-way through each period, ``late``
    buckets later in the periods after the first."""
    def rate(t: float) -> float:
        at = RISE + (late * BUCKET if t - T0 >= PERIOD else 0.0)
        return 1000.0 if at <= (t - T0) % PERIOD < at + 2 * BUCKET else 100.0
    return rate


def buckets(*rows: tuple[float, float], loose: float = math.inf) -> list[Bucket]:
    """Buckets 1, 2, ... of (rows that came, rows forecast), each with ``loose`` rows."""
    return [Bucket(i, seen, guess, loose, loose) for i, (seen, guess) in enumerate(rows, 1)]


def test_rows_matched_within_a_bucket_are_no_error_and_the_rest_are() -> None:
    # a rise of two buckets a bucket late; rows a batch moved into the bucket before
    assert match(buckets((100, 100), (100, 1000), (1000, 1000), (1000, 100), (100, 100))
                 ) == Unmatched(0.0, 0.0, 0.0)
    assert match(buckets((300, 100), (800, 1000), (100, 100))) == Unmatched(0.0, 0.0, 0.0)
    # a rise that did not come: what the next bucket cannot match is counted, what it
    # still could is pending
    assert match(buckets((100, 100), (100, 1000), (100, 1000))) == Unmatched(0.0, 800.0,
                                                                             1000.0)
    # rows two buckets away, or across a gap, are unmatched both ways (but for what the
    # bucket between matches)
    assert match(buckets((1000, 100), (100, 100), (100, 1000))) == Unmatched(800.0, 0.0,
                                                                             800.0)
    gap = [Bucket(1, 1000, 100, math.inf, math.inf), Bucket(3, 100, 1000, math.inf, math.inf)]
    assert match(gap) == Unmatched(900.0, 0.0, 900.0)
    assert match([]) == Unmatched(0.0, 0.0, 0.0)
    # only loose rows move: of the 200 a batch moved into the bucket before, 50 were loose;
    # none, and all are errors
    assert match([Bucket(1, 300, 100), Bucket(2, 800, 1000)]) == Unmatched(200.0, 200.0, 0.0)
    assert match(buckets((300, 100), (800, 1000), (100, 100), loose=50)) == Unmatched(
        150.0, 100.0, 50.0)


def feed_batches(rec: LoadRecurrence, rate: Callable[[float], float], start: float,
                 end: float, every: float) -> None:
    """Micro-batches of ``every`` seconds, each with the rows that arrived over it."""
    t = start + every
    while t <= end + 1e-9:
        rows = sum(rate(t - every + i + 0.5) for i in range(int(every)))
        assert rec.observe(t, rows, every), rec.last_rejection
        t += every


def test_rows_batches_spread_over_a_rise_s_buckets_are_no_error() -> None:
    # A two-bucket rise learnt in batches of 2 s, then met in batches of 45 s, longer than
    # a bucket: each batch's rows are spread evenly over its 45 s, and the rise's rows
    # land partly in the buckets either side of it. Checked bucket by bucket, that reads
    # as an error of 17%; those rows are loose, and within a bucket they match.
    rec = recurrence(max_error=0.1)
    feed(rec, short_rise(), T0, T0 + PERIOD)
    # to just before the third period's rise: the last period holds the second one's
    end = T0 + 2 * PERIOD + RISE - 60
    feed_batches(rec, short_rise(), T0 + PERIOD, end, every=45.0)
    f = rec.forecast(end, 45.0)
    assert f.in_use and f.error is not None and f.error < 0.05, f.reason
    # The same batches with a rise that did not come: not loose enough to match it.
    gone = recurrence(max_error=0.1)
    feed(gone, short_rise(), T0, T0 + PERIOD)
    feed_batches(gone, lambda t: 100.0, T0 + PERIOD, end, every=45.0)
    f = gone.forecast(end, 45.0)
    assert not f.in_use and f.reason.startswith("F4"), f.reason


def test_the_horizon_must_be_shorter_than_the_period() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + 2 * PERIOD)
    f = rec.forecast(T0 + 2 * PERIOD, PERIOD)
    assert not f.in_use and f.rate is None and f.reason.startswith("F1")
    with pytest.raises(ConfigurationError, match="forecast.horizon"):
        AutoscalerConfig(forecast_period=600.0, forecast_bucket=30.0, forecast_horizon=600.0)


@pytest.mark.parametrize("rows,seconds,wall", [
    (math.nan, 2.0, T0), (10.0, math.nan, T0), (-1.0, 2.0, T0), (10.0, 2.0, math.inf),
    (10.0, -2.0, T0), (math.inf, 2.0, T0)])
def test_bad_figures_are_refused_and_change_nothing(rows: float, seconds: float,
                                                      wall: float) -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + PERIOD + RISE)
    before = rec.saved()
    assert not rec.observe(wall, rows, seconds)
    assert rec.saved() == before and rec.last_rejection
    assert not math.isnan(rec.forecast(T0 + PERIOD + RISE, 45.0).rate or 0.0)


def test_a_gap_is_not_spread_and_a_clock_gone_back_is_refused() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + PERIOD)
    # the query stopped for ten minutes: its first batch's rows are not a rate
    assert not rec.observe(T0 + 2 * PERIOD, 5e6, PERIOD + 1)
    assert "gap" in rec.last_rejection
    # the clock went back by more than a bucket: refused, the buckets kept
    kept = rec.saved()
    assert not rec.observe(T0 + PERIOD, 100.0, 2.0)
    assert "went back" in rec.last_rejection and rec.saved() == kept
    # with the gap, the last period is not whole and cannot be checked: nothing to act on
    f = rec.forecast(T0 + 2 * PERIOD + 10, 45.0)
    assert not f.in_use and f.reason.startswith("F3"), f.reason
    assert rec.whole_periods(math.floor((T0 + 2 * PERIOD + 10) / BUCKET)) == (2,)


def test_a_clock_that_jumps_ahead_leaves_the_periods_uncovered() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + 2 * PERIOD)
    later = T0 + 5 * PERIOD  # the clock jumped three periods ahead
    feed(rec, morning, later, later + 60)
    f = rec.forecast(later + 60, 45.0)
    assert not f.in_use and f.reason.startswith("F2"), f.reason


def test_it_survives_being_saved_and_restored_and_starts_over_on_other_buckets() -> None:
    rec = recurrence()
    feed(rec, morning, T0, T0 + PERIOD + RISE - 60)
    saved = rec.saved()
    again = LoadRecurrence(PERIOD, BUCKET, saved=saved)
    assert again.forecast(T0 + PERIOD + RISE - 60, 45.0) == \
        rec.forecast(T0 + PERIOD + RISE - 60, 45.0)
    other = LoadRecurrence(PERIOD, 60.0, saved=saved)
    assert other.saved().buckets == ()
    broken = SavedLoad(PERIOD, BUCKET, ((1, math.nan, 2.0, 0.0), (2, 3.0, 2.0, math.nan),
                                        (3, 3.0, 2.0, 1.0)))
    assert LoadRecurrence(PERIOD, BUCKET, saved=broken).saved().buckets == (
        (3, 3.0, 2.0, 1.0),)


def test_forecast_keys_are_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="whole multiple of .*forecast.bucket"):
        AutoscalerConfig.from_conf({"spark.adaptive.autoscaler.forecast.period": "7min",
                                    "spark.adaptive.autoscaler.forecast.bucket": "2min"})
    with pytest.raises(ConfigurationError, match="forecast.period.*10080"):
        AutoscalerConfig.from_conf({"spark.adaptive.autoscaler.forecast.period": "7d",
                                    "spark.adaptive.autoscaler.forecast.bucket": "1s"})
    with pytest.raises(ConfigurationError, match="forecast.max-error"):
        AutoscalerConfig.from_conf({"spark.adaptive.autoscaler.forecast.max-error": "-1"})
    cfg = AutoscalerConfig.from_conf({"spark.adaptive.autoscaler.forecast.period": "7d",
                                      "spark.adaptive.autoscaler.forecast.bucket": "1h"})
    assert cfg.forecast_period == 7 * 86400 and not cfg.forecast_enabled


# -- the policy on a forecast (step 3b) -------------------------------------------------------
def _settled(**kw: float) -> FakeQuery:
    """A query settled on 2 slots of 100 rows/s each at 120 rows/s (utilization 0.6)."""
    q = make(config(**kw), rate=120.0, per_slot=100.0, slots=2,
             partitions=12)
    q.run(90.0)
    return q


def _in_use(rate: float, horizon: float = 40.0) -> Forecast:
    return Forecast(rate, True, "F7: test", horizon, 0.05, 2)


def test_a_rise_forecast_within_the_horizon_scales_up_ahead_at_the_target() -> None:
    q = _settled()
    d = q.evaluate(forecast=_in_use(600.0))
    assert d.outcome == "scale-up" and d.ahead and d.actionable
    # 600 rows/s at utilization.target 0.8 on 100 rows/s a slot: 7.5 -> 8 slots (12 parts)
    assert d.target_slots >= 8 and d.inputs.forecast_rate == 600.0
    assert "forecast" in d.reason and "before it comes" in d.reason
    # the same rise, measured: an ordinary scale-up, not one taken ahead
    q2 = _settled()
    q2.rate = 600.0
    q2.run(60.0)
    assert not q2.evaluate().ahead


def test_a_forecast_that_reads_more_of_the_rise_decides_the_scale_up_again_at_once() -> None:
    # The first scale-up ahead read only the start of the rise (its first bucket): 200
    # rows/s -> 3 slots. While its executors start, the forecast reads all of it: decided
    # again now, not after them, a stabilization interval and a batch.
    q = _settled()
    first = q.evaluate(forecast=_in_use(200.0))
    assert (first.outcome, first.target_slots) == ("scale-up", 3) and first.ahead
    d = q.evaluate(rescale_in_flight=True, forecast=_in_use(600.0))
    assert d.outcome == "scale-up" and d.ahead and d.target_slots >= 8, d.reason
    # within that scale-up's headroom (200 x 0.9 / 0.8 = 225 rows/s): it suffices
    q = _settled()
    q.evaluate(forecast=_in_use(200.0))
    d = q.evaluate(rescale_in_flight=True, forecast=_in_use(220.0))
    assert (d.outcome, d.reason) == ("not-ready", "a rescale is in flight")
    # its executors came: while stabilizing, the same
    q = _settled()
    first = q.evaluate(forecast=_in_use(200.0))
    q.apply(first)
    assert q.evaluate(forecast=_in_use(200.0)).reason.startswith("stabilizing")
    d = q.evaluate(forecast=_in_use(600.0))
    assert d.outcome == "scale-up" and d.ahead and d.target_slots >= 8, d.reason


def test_a_forecast_fall_or_a_forecast_not_in_use_changes_nothing() -> None:
    for f in (_in_use(30.0), Forecast(600.0, False, "F4: off", 40.0, 0.6, 2), None):
        q = _settled()
        d = q.evaluate(forecast=f)
        assert d.outcome == "no-change" and not d.ahead, (f, d.reason)
        assert d.inputs.forecast_rate is None


def test_a_scale_down_never_goes_below_a_forecast_rise() -> None:
    # 40 rows/s on 4 slots of 100: utilization 0.1, far below the band
    q = make(config(scale_down_interval=0.0), rate=40.0, per_slot=100.0, slots=4,
             partitions=12)
    q.run(90.0)
    assert q.evaluate().outcome == "scale-down"
    q = make(config(scale_down_interval=0.0), rate=40.0, per_slot=100.0, slots=4,
             partitions=12)
    q.run(90.0)
    d = q.evaluate(forecast=_in_use(300.0))  # 300 / 0.8 / 100 = 3.75 slots: keeps 4
    assert d.outcome == "no-change" and d.target_slots == 4, d.reason


def test_a_wrong_forecast_is_given_back_by_the_reactive_rules() -> None:
    q = _settled(scale_down_interval=0.0)
    d = q.evaluate(forecast=_in_use(600.0))
    q.apply(d, startup=5.0)
    q.run(90.0)  # the rise did not come; the forecast is now off
    d = q.evaluate(forecast=Forecast(600.0, False, "F5: did not come", 40.0, 0.4, 2))
    assert d.outcome == "scale-down" and not d.ahead and d.target_slots < 8, d.reason
