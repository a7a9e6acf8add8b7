"""Bad inputs never raise and never scale; decisions are plain values; the window reads a
batch's costs. (What an evaluation costs is measured in benchmarks/autoscale_sim.py.)"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from autoscaler_fakes import config, make

from spark_adaptive.core.autoscaler import LoadSample, QueryAutoscaler, QueryView
from spark_adaptive.core.autoscaler.window import Entry, MetricsWindow
from spark_adaptive.core.events import QueryProgress

CALM = ("not-ready", "no-change")


def _overloaded(**kw: Any) -> Any:
    """A query that would scale up (utilization 0.95) if its inputs were good."""
    return make(rate=7600, per_slot=1000, slots=8, partitions=48, **kw)


@pytest.mark.parametrize("bad", [
    dict(num_input_rows=None, input_rows_per_second=None, processed_rows_per_second=None,
         batch_duration=None, trigger_interval=None, backlog=None, busy_time=None),
    dict(num_input_rows=math.nan, input_rows_per_second=math.nan,
         processed_rows_per_second=math.nan, busy_time=math.nan),
    dict(num_input_rows=math.inf, input_rows_per_second=math.inf,
         processed_rows_per_second=math.inf, busy_time=math.inf),
    dict(num_input_rows=-5.0, input_rows_per_second=-1.0, processed_rows_per_second=-1.0,
         busy_time=-3.0),
    dict(num_input_rows="many", input_rows_per_second="fast", busy_time="long"),
    dict(num_input_rows=1e300, input_rows_per_second=1e300, processed_rows_per_second=1e300,
         busy_time=1e300),  # finite, but its square overflows
])
def test_missing_or_bad_fields_never_raise_and_never_scale(bad: dict[str, Any]) -> None:
    q = _overloaded()
    q.run(200, **bad)
    d = q.evaluate()
    assert d.outcome in CALM
    assert not d.actionable


def test_zero_input_never_scales_and_says_why() -> None:
    q = make(rate=0.0, per_slot=1000, slots=8, partitions=48)
    q.run(200, num_input_rows=0.0, input_rows_per_second=0.0, processed_rows_per_second=0.0,
          busy_time=0.0)
    d = q.evaluate()
    assert d.outcome == "no-change" and "no input" in d.reason
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    q.run(120, num_input_rows=0.0, input_rows_per_second=0.0)  # the input stops
    d = q.evaluate()
    assert d.outcome == "no-change" and "no input" in d.reason


def test_a_backlog_left_while_no_input_arrives_holds_the_slots_and_says_why() -> None:
    """The backlog drains faster than batches read it (its arrival rate clamps to 0), then the
    batches read nothing while it stays: no input rate, a backlog, a full window."""
    p = QueryAutoscaler(config(metrics_window=30.0, stabilization_interval=0.0), "q",
                        started_at=0.0)
    t, backlog = 0.0, 10_000.0
    for i in range(8):
        t += 5.0
        rows = 1000.0 if i < 4 else 0.0
        if i < 4:
            backlog -= 2000.0
        p.observe(LoadSample(time=t, slots=4, partitions=4, batch_id=i, num_input_rows=rows,
                             input_rows_per_second=rows / 5, batch_duration=0.5,
                             processed_rows_per_second=rows / 0.5, trigger_interval=5.0,
                             backlog=backlog, busy_time=2.0 if rows else None))
    d = p.evaluate(QueryView(now=t, slots=4, partitions=4))
    assert (d.outcome, d.inputs.input_rate, d.inputs.backlog) == ("no-change", 0.0, 2000.0)
    assert "2000 rows while no input arrives" in d.reason


def test_a_flat_throughput_fit_keeps_the_scale_down_floor() -> None:
    """8 slots process no more than 4 did (the fit's intercept is 0): a scale-down is still
    held to scale-down.max-factor's floor, not sized at 0 slots and taken to 1."""
    p = QueryAutoscaler(config(metrics_window=30.0, stabilization_interval=0.0,
                               scale_down_interval=0.0, utilization_min=0.45,
                               observed_scalability=True, scale_down_max_factor=0.8), "q",
                        started_at=0.0)
    t, b = 0.0, 0

    def run(slots: int, per_slot: float, rate: float) -> None:
        nonlocal t, b
        for _ in range(8):
            t, b = t + 5.0, b + 1
            p.observe(LoadSample(time=t, slots=slots, partitions=8, batch_id=b,
                                 num_input_rows=rate * 5, input_rows_per_second=rate,
                                 processed_rows_per_second=per_slot * slots, batch_duration=1.0,
                                 trigger_interval=5.0, busy_time=rate * 5 / per_slot))

    run(4, 100.0, 200.0)
    assert p.evaluate(QueryView(now=t, slots=4, partitions=8, can_restart=False)).outcome \
        == "no-change"
    p.on_rescale_completed(t, slots=8, partitions=8)
    run(8, 48.0, 150.0)
    d = p.evaluate(QueryView(now=t, slots=8, partitions=8, can_restart=False))
    assert d.outcome == "scale-down"
    assert d.target_slots == 2  # 8 x (1 - 0.8) = 1.6 slots at least


def test_batches_with_zero_rows_say_nothing_about_the_rate_per_slot() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    q.run(10, num_input_rows=0.0, busy_time=0.5, processed_rows_per_second=0.0)
    d = q.evaluate()
    assert d.inputs.true_rate_per_slot == 1000.0


def test_negative_backlog_is_treated_as_missing() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, backlog=-1e9)
    q.run(90)
    d = q.evaluate()
    assert (d.outcome, d.inputs.backlog) == ("no-change", 0.0)


def test_a_clock_going_back_restarts_the_window_without_scaling() -> None:
    q = _overloaded()
    q.run(85)
    q.t = 10.0  # the clock jumps back
    q.run(5)
    assert "clock went back" in q.policy.last_rejection
    d = q.evaluate()
    assert d.outcome in CALM and d.outcome != "scale-up"
    q.t = 1000.0
    q.evaluate()
    d = q.evaluate(now=500.0)  # an evaluation earlier than the previous one
    assert d.outcome == "not-ready" and "clock went back" in d.reason


@pytest.mark.parametrize("view", [
    dict(slots=0), dict(partitions=0), dict(now=math.nan), dict(lower=5, upper=2),
    dict(slots_per_executor=0), dict(cluster_max_slots=0), dict(max_useful_slots=0),
    dict(slot_upper=0),
])
def test_a_bad_view_is_not_evaluated(view: dict[str, Any]) -> None:
    q = _overloaded()
    q.run(90)
    d = q.evaluate(**view)
    assert d.outcome == "not-ready" and d.reason.startswith("cannot evaluate")


def test_samples_with_no_slots_or_bad_times_are_rejected() -> None:
    p = QueryAutoscaler(config(), "q", started_at=0.0)
    assert not p.observe(LoadSample(100.0, 0, 48))
    assert not p.observe(LoadSample(math.nan, 4, 48))
    assert not p.observe(LoadSample(math.inf, 4, 48))
    assert p.rejected == 3
    assert p.observe(LoadSample(100.0, 4, 48, batch_id=7))
    assert not p.observe(LoadSample(105.0, 4, 48, batch_id=7))  # the same batch again
    assert p.last_rejection == "batch 7 seen twice"


def test_disabled_autoscaler_decides_nothing() -> None:
    q = make(config(enabled=False), rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    assert q.evaluate().outcome == "not-ready"


# -- values -----------------------------------------------------------------------------------
def test_decisions_serialize_to_plain_json() -> None:
    q = _overloaded()
    q.run(90)
    d = q.evaluate()
    out = json.loads(json.dumps(d.as_dict()))
    assert out["outcome"] == "scale-up" and out["targetSlots"] == 12
    assert out["inputs"]["windowSpan"] == 60.0 and out["inputs"]["sampleCount"] == 13
    assert out["inputs"]["inputRate"] == 7600.0
    assert out["inputs"]["trueRatePerSlot"] == 1000.0
    assert out["inputs"]["recommendedSlots"] == 9.5
    snap = json.loads(json.dumps(q.policy.snapshot()))
    assert snap["lastDecision"]["reason"] == d.reason
    assert "scale-up 8->12 slots, 48->48 partitions (live)" in d.log_line()


def test_a_sample_from_a_progress_event() -> None:
    progress = QueryProgress(time=1.0, query_id="q", run_id="r", name=None, batch_id=3,
                             num_input_rows=500, input_rows_per_second=100.0,
                             processed_rows_per_second=250.0, batch_duration=2.0,
                             trigger_execution=2.0)
    s = LoadSample.from_progress(progress, time=42.0, slots=2, partitions=4,
                                 trigger_interval=5.0, backlog=10.0, busy_time=3.0)
    assert (s.time, s.batch_id, s.num_input_rows, s.backlog, s.busy_time) == (
        42.0, 3, 500, 10.0, 3.0)


def test_the_window_keeps_only_its_span_whatever_it_was_fed() -> None:
    w = MetricsWindow(60.0)
    for i in range(10_000):
        t = 5.0 * i
        w.add(Entry(t, 5.0, 100.0, 0.1, 100.0, None, None, 20.0, 1.0, 5.0, 1, 1))
    assert w.count == 13
    assert w.window_arrival_rate() == pytest.approx(20.0)
    assert w.rate_per_slot() == (pytest.approx(1000.0), "busy time")


def test_no_float_residue_of_trimmed_batches_reads_as_a_rate() -> None:
    """Batches with busy time leave the window, those after report only a processing rate:
    the running sums of the first kind go back to exactly 0, not to 1e-17 / 1e-17."""
    w = MetricsWindow(60.0)
    t = 0.0
    for busy in (0.1, 0.2):
        t += 5.0
        w.add(Entry(t, 5.0, busy, busy, busy, None, None, busy / 5, 1.0, 5.0, 1, 1))
    for _ in range(20):
        t += 5.0
        w.add(Entry(t, 5.0, 100.0, None, 0.0, 250.0, None, 20.0, 1.0, 5.0, 1, 1))
    assert w.rate_per_slot() == (250.0, "processedRowsPerSecond")


def test_a_batch_s_fixed_cost_is_told_apart_from_its_cost_per_row() -> None:
    # Batches every 4 s whose busy time is 0.6 slot-s plus 4 ms a row.
    w = MetricsWindow(60.0)
    for i, rows in enumerate([80, 80, 80, 80, 1400, 1400, 1400]):
        w.add(Entry(4.0 * i, 4.0, rows, 0.6 + 0.004 * rows, rows, None, None, rows / 4.0,
                    1.0, 4.0, 1, 4))
    fixed, per_row = w.batch_cost() or (0.0, 0.0)
    assert fixed == pytest.approx(0.6) and per_row == pytest.approx(0.004)
    rate, source = w.rate_per_slot_at(350.0)  # 0.15 + 1.4 busy slot-s a second
    assert rate == pytest.approx(350.0 / 1.55) and "a batch" in source
    # Alike batches cannot tell the parts apart: the window's own rate then.
    alike = MetricsWindow(60.0)
    for i in range(6):
        alike.add(Entry(4.0 * i, 4.0, 80.0 + i, 0.92, 80.0 + i, None, None, 20.0, 1.0, 4.0,
                        1, 4))
    assert alike.batch_cost() is None
    assert alike.rate_per_slot_at(350.0) == alike.rate_per_slot()


def _calm_without_spark_rate(extra: list[dict[str, Any]]) -> Any:
    """A query at utilization 0.70 whose samples lack inputRowsPerSecond (the window times its
    rows by completions), then ``extra`` samples; its decision after them."""
    p = QueryAutoscaler(config(metrics_window=60.0, stabilization_interval=0.0,
                               restart_time_tracking=False), "q", started_at=0.0)
    base = dict(slots=8, partitions=48, num_input_rows=28000.0, processed_rows_per_second=7000.0,
                batch_duration=4.0, trigger_interval=5.0, busy_time=28.0)
    t = 0.0
    for i in range(40):
        t += 5.0
        assert p.observe(LoadSample(time=t, batch_id=i, **base))
    for j, kw in enumerate(extra):
        t = kw.get("time", t)
        p.observe(LoadSample(**{**base, "time": t, "batch_id": 100 + j, **kw}))
    return p.evaluate(QueryView(now=t, slots=8, partitions=48))


def test_completions_handled_close_together_are_not_a_jump() -> None:
    # Two progress events queued behind each other reach the policy 1 ms apart: without
    # Spark's own rate, the batch's interval is at least its run and its trigger, not 1 ms.
    assert _calm_without_spark_rate([]).outcome == "no-change"
    for extra in ([dict(time=200.001)], [dict(time=200.0)] * 3):
        d = _calm_without_spark_rate(extra)
        assert d.outcome in CALM, d.reason
        assert d.inputs is None or d.inputs.input_rate < 28000 / 4.0 * 1.01


@pytest.mark.parametrize("field", ["input_rows_per_second", "processed_rows_per_second"])
def test_a_rate_too_small_to_be_real_is_missing_not_a_division(field: str) -> None:
    # 1e-320 rows/s: rows over it are infinite, and an infinite sum left the window's sums NaN
    # for good (input_rows_per_second), or the capacity near 0 asked for every slot
    # (processed_rows_per_second).
    q = _overloaded()
    q.run(100)  # past the stabilization, so that the window keeps what follows
    q.run(5, **{field: 1e-320, "busy_time": None})
    q.run(200)  # the window (60 s) has dropped that batch since
    d = q.evaluate()
    assert (d.outcome, d.kind, d.target_slots) == ("scale-up", "live", 12), d.reason
    w = q.policy._window._all
    assert math.isfinite(w.dt) and math.isfinite(w.rows)
    # With no busy time at all, the rate per slot is Spark's processing rate alone.
    calm = make(rate=5600, per_slot=1000, slots=8, partitions=48, busy=False)
    calm.run(200, **{field: 1e-320})
    d = calm.evaluate()
    assert d.outcome in CALM, d.reason


def test_a_trigger_longer_than_a_third_of_the_window_still_fills_it() -> None:
    # A 2-minute trigger in the default 3-minute window held at most two batches, so the
    # window never filled and a query at utilization 0.12 was never scaled down.
    window = config(metrics_window=180.0)
    q = make(window, rate=1000, per_slot=1000, slots=8, partitions=48, trigger=120.0)
    q.run(480)
    d = q.evaluate()
    assert d.outcome != "not-ready", d.reason
    assert d.outcome.startswith("scale-down"), d.reason
    assert q.policy._window.count == 3 * 120 / 120.0 + 1  # three intervals, both ends kept
    # A short trigger's window still spans metrics.window alone.
    short = make(window, rate=1000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    short.run(480)
    assert short.policy._window.count == 180 / 5.0 + 1


@pytest.mark.parametrize("field,value", [
    ("slots", math.nan), ("partitions", 2.5), ("upper", math.inf), ("lower", "1"),
    ("slots_per_executor", math.nan), ("cluster_max_slots", math.nan),
    ("max_useful_slots", 1.5), ("slot_upper", math.inf)])
def test_a_view_with_a_field_that_is_no_whole_number_is_not_evaluated(
        field: str, value: Any) -> None:
    q = _overloaded()
    q.run(200)
    d = q.evaluate(**{field: value})
    assert d.outcome == "not-ready", d.reason
    assert d.reason.startswith(f"cannot evaluate: {field} is "), d.reason
    assert q.evaluate().outcome == "scale-up"  # a whole view afterwards decides as before
