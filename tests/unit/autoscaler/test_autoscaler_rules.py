"""Flink's rules, one by one, on a fake query and virtual time (see autoscaler_fakes.BASE).

BASE: window 60 s, stabilization 30 s, utilization 0.8 in [0.5, 0.9], catch-up 100 s,
restart.time 10 s, scale-down interval 120 s, linear scaling, no effectiveness detection,
no executor start-up term (executor-startup.time 0).
"""

from __future__ import annotations

import math

import pytest
from autoscaler_fakes import FakeQuery, config, first_action, make

from spark_adaptive.core.autoscaler import ScalingDecision
from spark_adaptive.core.autoscaler.protections import (
    SHORTFALL_EXPIRY,
    DelayedScaleDown,
    ShortfallMemory,
)


def test_no_decision_before_the_window_is_full() -> None:
    # 7600 rows/s on 8 slots of 1000 rows/s: utilization 0.95 > 0.9
    q = make(rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(80)
    d = q.evaluate()
    assert d.outcome == "not-ready"
    assert "collecting metrics: 50s of 60s" in d.reason
    assert (d.target_slots, d.applied) == (8, False)
    q.run(10)
    d = q.evaluate()
    # 7600 / 0.8 = 9500 rows/s -> 9.5 slots -> the smallest divisor of 48 above: 12
    assert (d.outcome, d.kind, d.target_slots, d.target_partitions) == ("scale-up", "live", 12, 48)
    assert d.applied and d.actionable


def test_stabilization_after_a_rescale_ignores_samples_and_decides_nothing() -> None:
    q = make(rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    q.apply(q.evaluate())  # live to 12 at t=90: stabilizing until 120
    q.rate = 9000  # utilization 0.75 on 12 slots: within the band
    for _ in range(2):
        q.run(10)
        d = q.evaluate()
        assert d.outcome == "not-ready" and "stabilizing" in d.reason
    q.run(10)  # t=120
    assert q.policy.snapshot()["windowSamples"] == 1  # 95..115 were dropped; 120 is kept
    q.run(50)  # t=170: 50 s collected
    assert q.evaluate().outcome == "not-ready"
    q.run(10)  # t=180: full
    d = q.evaluate()
    assert (d.outcome, d.target_slots) == ("no-change", 12)
    assert d.reason.startswith("utilization 0.75 within [0.5, 0.9]")


def test_a_rise_the_last_scale_up_fell_short_of_scales_up_again_without_a_full_window() -> None:
    q = make(rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    q.apply(q.evaluate())  # live to 12 at t=90, sized for 7600 rows/s; stabilizing until 120
    q.rate = 11400  # utilization 0.95 on 12 slots, 1.5 times the rate the scale-up was for
    q.run(30)  # t=120: the first batch kept
    assert q.evaluate().outcome == "not-ready"  # one batch says too little
    q.run(5)  # t=125: two batches
    d = q.evaluate()
    # 11400 / 0.8 = 14250 -> 14.25 slots -> 16, 55 s before the window is full
    assert (d.outcome, d.kind, d.target_slots) == ("scale-up", "live", 16)
    q.apply(d)  # t=125, sized for 11400
    q.rate = 13300  # utilization 0.83 on 16 slots: within the band, no early step
    q.run(45)  # t=170: stabilized at 155, three batches
    assert q.evaluate().outcome == "not-ready"
    q.rate = 14600  # 0.91 on 16 slots, 1.28 times the rate sized for: the rise goes on
    q.run(25)  # t=195: the newest 20 s read it alone; the window is full at 215
    d = q.evaluate()
    assert (d.outcome, d.target_slots) == ("scale-up", 24)


def test_an_ineffective_scale_up_is_not_taken_for_a_rise_it_fell_short_of() -> None:
    # The capacity stops growing above 8 slots: at the same input rate the query stays above
    # the band after its scale-up, but that is no new rise; the full window judges it.
    def per_slot(eff: float) -> float:
        return 1000.0 if eff <= 8 else 8000.0 / eff

    q = make(config(effectiveness_detection=True), rate=7600, per_slot=per_slot, slots=8,
             partitions=48)
    q.run(90)
    q.apply(q.evaluate())  # live to 12 at t=90
    ds = q.run_and_evaluate(80)  # t=170: stabilized at 120, the window is full at 180
    assert {d.outcome for d in ds} == {"not-ready"}


def test_delayed_scale_down_applies_the_highest_recommendation_of_its_interval() -> None:
    q = make(rate=4000, per_slot=1000, slots=16, partitions=48)
    q.run(90)
    d = q.evaluate()  # 4000 / 0.8 = 5000 -> 5 slots -> 6
    assert (d.outcome, d.target_slots) == ("scale-down-pending", 6)
    assert "waits 120s more" in d.reason
    q.rate = 6000  # for a while 7.5 slots were needed -> 8
    q.run_and_evaluate(60)
    assert q.decisions[-1].target_slots == 8
    q.rate = 4000
    ds = q.run_and_evaluate(50)  # t=200: 110 s after the first recommendation
    assert all(x.outcome == "scale-down-pending" for x in ds)
    q.run(10)  # t=210: the interval is over
    d = q.evaluate()
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down", "live", 8)


def test_an_in_band_evaluation_cancels_a_pending_scale_down() -> None:
    q = make(rate=4000, per_slot=1000, slots=16, partitions=48)
    q.run(90)
    assert q.evaluate().outcome == "scale-down-pending"
    q.rate = 10000  # utilization 0.625: in band
    q.run(60)
    assert q.evaluate().outcome == "no-change"
    q.rate = 4000
    q.run(90)
    d = q.evaluate()  # a new interval starts: no scale-down at the old deadline
    assert d.outcome == "scale-down-pending" and "waits 120s more" in d.reason


def _dropped(partitions: int, interval: float = 10.0) -> FakeQuery:
    """A query in band at 10000 rows/s on 16 slots (17 with 17 partitions) whose input
    drops to 2000 rows/s at t=90; the scale-down interval is 10 s unless given."""
    q = make(config(scale_down_interval=interval), rate=10000, per_slot=1000,
             slots=17 if partitions == 17 else 16, partitions=partitions)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    q.rate = 2000
    return q


def test_a_live_scale_down_is_sized_on_the_newest_seconds_while_the_input_falls() -> None:
    q = _dropped(48)
    ds = q.run_and_evaluate(20)  # t=100, 110: the newest batch reads 2000 rows/s, the
    for d in ds:  # newest 20 s still mix in 10000: nothing is recommended from them yet
        assert (d.outcome, d.kind, d.target_slots) == ("scale-down-pending", "none", 16)
        assert "still dropping" in d.reason
    assert ds[0].inputs.utilization > 0.5  # the window alone was still in band at t=100
    q.run(10)
    d = q.evaluate()  # t=120: the newest 20 s read 2000 -> 2500 / 1000 -> 3 slots; the
    # interval started at t=100, with the first reading below the band, and is over
    assert d.inputs.input_rate_recent == pytest.approx(2000)
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down", "live", 3)
    assert d.inputs.input_rate_window / 0.8 / 1000 > 6  # what waiting for it would have kept
    assert "in the newest seconds" in d.reason


def test_the_interval_runs_from_the_first_reading_below_the_band() -> None:
    # With a 30 s interval: started at t=100 while still dropping, the settled recommendation
    # of t=120 waits the 10 s left, not another 30 s; the maximum is of settled ones only.
    q = _dropped(48, interval=30.0)
    ds = q.run_and_evaluate(20)  # t=100, 110: still dropping
    assert all("still dropping" in d.reason for d in ds)
    q.run(10)
    d = q.evaluate()  # t=120
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down-pending", "live", 3)
    assert "waits 10s more" in d.reason
    q.run(10)
    d = q.evaluate()  # t=130, 30 s after the first reading below the band
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down", "live", 3)


def test_a_dip_that_comes_back_in_band_leaves_no_interval_behind() -> None:
    q = _dropped(48)
    ds = q.run_and_evaluate(10)  # t=100: still dropping, the interval starts
    assert "still dropping" in ds[-1].reason
    assert q.policy.snapshot()["pendingScaleDownSince"] == 100
    q.rate = 10000  # back before the newest seconds settled
    q.run(30)
    assert q.evaluate().outcome == "no-change"  # t=130: in band
    assert q.policy.snapshot()["pendingScaleDownSince"] is None


def test_a_scale_down_that_restarts_waits_for_the_window_to_settle() -> None:
    q = _dropped(17)  # 17 partitions on 17 slots: 3 slots want a restart onto 12
    ds = q.run_and_evaluate(60)  # t=100..150: the window still mixes in 10000 rows/s
    assert [(d.outcome, d.kind) for d in ds] == [("scale-down-pending", "none")] * 6
    assert "a scale-down that restarts is recommended once the window has settled" in \
        ds[-1].reason
    q.run(10)
    d = q.evaluate()  # t=160: settled; the interval starts now
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down-pending", "restart", 3)
    q.run(10)
    d = q.evaluate()
    assert (d.outcome, d.kind, d.target_slots, d.target_partitions) == (
        "scale-down", "restart", 3, 12)


def test_a_restarts_interval_does_not_start_while_the_input_fell() -> None:
    # Evaluated while dropping (t=100), then not until the window has settled (t=160): the
    # restart's interval starts at t=160, with its first recommendation.
    q = _dropped(17, interval=30.0)
    q.run(10)
    assert "still dropping" in q.evaluate().reason
    q.run(60)
    d = q.evaluate()  # t=160
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down-pending", "restart", 3)
    assert "waits 30s more" in d.reason


def test_a_delayed_scale_down_knows_a_started_interval_from_a_sized_one() -> None:
    pending = DelayedScaleDown()
    pending.start(10.0)
    assert pending.merged(20.0, 3.0, 4.0) == (10.0, 3.0, 4.0)
    pending.clear_unsized()
    assert pending.since is None
    pending.start(30.0)
    pending.record(40.0, 0.0, 0.0)  # a recommendation of no slots is one
    pending.clear_unsized()
    assert pending.since == 30.0 and pending.sized


def test_scale_up_max_factor_limits_one_step() -> None:
    q = make(config(scale_up_max_factor=1.0), rate=20000, per_slot=1000, slots=4, partitions=48)
    q.run(90)
    d = q.evaluate()  # 25+ slots needed; at most 4 x (1 + 1) = 8
    assert (d.outcome, d.target_slots) == ("scale-up", 8)


def test_scale_down_max_factor_limits_one_step() -> None:
    q = make(config(scale_down_max_factor=0.5, scale_down_interval=0.0), rate=2000,
             per_slot=1000, slots=48, partitions=48)
    q.run(90)
    d = q.evaluate()  # 2.5 slots needed; at least 48 x (1 - 0.5) = 24
    assert (d.outcome, d.target_slots) == ("scale-down", 24)


def test_a_backlog_raises_the_target_by_backlog_over_catch_up() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, backlog=0.0)
    q.run(90)
    assert q.evaluate().outcome == "no-change"  # utilization 0.75
    q2 = make(rate=6000, per_slot=1000, slots=8, partitions=48, backlog=300_000.0)
    q2.run(90)
    d = q2.evaluate()
    # 6000 / 0.8 + 300000 / 100 = 10500 rows/s -> 10.5 slots -> 12
    assert (d.outcome, d.target_slots) == ("scale-up", 12)
    assert d.inputs.backlog == 300_000.0 and d.inputs.target_rate == 10500.0


def test_a_jump_of_the_input_rate_is_seen_at_once() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    q.rate = 18000  # three times the input, one batch ago
    q.run(5, trigger_interval=0.0)
    d = q.evaluate()
    # 18000 / 0.8 = 22500 -> 22.5 slots -> 24 in one step (the window's mean, 6923 rows/s,
    # would have asked for 12)
    assert (d.outcome, d.kind, d.target_slots) == ("scale-up", "live", 24)
    assert d.inputs.input_rate == 18000.0
    assert d.inputs.input_rate_window == (12 * 6000 + 18000) / 13


def test_noise_in_the_newest_seconds_does_not_scale_up_a_query_near_its_target() -> None:
    # 6800 rows/s on 8 slots of 1000: utilization 0.85, within [0.5, 0.9]. Arrivals come in
    # bursts of 30 s at +12% and 30 s at -12%: the newest 20 s read up to 7616 rows/s (0.95),
    # the window never more than 0.86. Scaling up on the newest seconds would leave 12 slots
    # at utilization 0.57, and the scale-down back to 8 would follow: a flap.
    q = make(rate=6800, per_slot=1000, slots=8, partitions=48)
    outcomes, reasons = set(), []
    for batch in range(1, 181):  # 15 min
        q.rate = 7616 if (batch // 6) % 2 == 0 else 5984
        q.run(5)
        if batch % 2 == 0 and q.t >= 90:
            d = q.evaluate()
            outcomes.add(d.outcome)
            reasons.append(d.reason)
    assert outcomes == {"no-change"}
    assert max(d.inputs.input_rate_recent or 0 for d in q.decisions) == 7616
    assert any(r.startswith("utilization 0.8") and "over the window, within [0.5, 0.9]; the "
               "newest seconds read 0.95, which alone scales up only above 1.1 (falling "
               "behind)" in r for r in reasons)


def test_a_rise_the_query_keeps_up_with_scales_up_once_the_window_shows_it() -> None:
    q = make(rate=6800, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    q.rate = 7600  # utilization 0.95: above the band, yet the query keeps up
    ds = q.run_and_evaluate(60)
    up = first_action(ds)
    assert up is not None and up.outcome == "scale-up"
    # the window's mean passes 7200 rows/s (0.9) with the 7th of its 13 batches at 7600
    assert up.time == 130.0
    assert all(d.outcome == "no-change" for d in ds[:ds.index(up)])
    # the target is the newest rate: 7600 / 0.8 = 9500 rows/s -> 9.5 slots -> 12
    assert (up.kind, up.target_slots, up.inputs.input_rate) == ("live", 12, 7600.0)


def test_the_newest_seconds_alone_scale_up_a_query_falling_behind() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    q.rate = 9600  # 1.2 times the capacity: a backlog grows from now on
    q.run(20)
    d = q.evaluate()
    # The newest 20 s read (4 x 9600 + 6000) / 5 = 8880 rows/s, above 1.1 x 8000; the window
    # (9 x 6000 + 4 x 9600) / 13 = 7108 rows/s would not scale up yet. The target: 8880 / 0.8
    # + a batch's overrun of 9600 rows / 100 s = 11196 rows/s -> 11.2 slots -> 12.
    assert (d.outcome, d.kind, d.target_slots) == ("scale-up", "live", 12)
    assert (d.inputs.input_rate, d.inputs.input_rate_recent) == (8880.0, 8880.0)
    assert d.inputs.input_rate_window is not None and d.inputs.input_rate_window < 7200
    assert d.inputs.target_rate == 11196.0


def test_a_backlog_spike_is_seen_at_once_not_diluted() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, backlog=0.0)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    q.run(5, backlog=1_000_000.0)  # FLINK-39306: a 0 -> 1M lag spike
    d = q.evaluate()
    # 6000 / 0.8 + 1e6 / 100 = 17500 -> 17.5 slots -> 24; the dump itself is not read as a
    # rate of 200000 rows/s
    assert (d.outcome, d.target_slots) == ("scale-up", 24)
    assert d.inputs.input_rate == 6000.0


def test_ineffective_scale_up_blocks_its_repetition_until_it_expires() -> None:
    # Capacity stops growing above 8 slots: the source is the bottleneck.
    def per_slot(eff: float) -> float:
        return 1000.0 if eff <= 8 else 8000.0 / eff

    q = make(config(effectiveness_detection=True, effectiveness_expiry=600.0), rate=7600,
             per_slot=per_slot, slots=8, partitions=48)
    q.run(90)
    up = q.evaluate()
    assert (up.outcome, up.target_slots) == ("scale-up", 12)
    q.apply(up)  # t=90; stabilizing until 120, full window at 180
    ds = q.run_and_evaluate(90)
    assert ds[-1].outcome == "blocked"
    assert "ineffective" in ds[-1].reason and ds[-1].target_slots == 16
    assert not ds[-1].actionable
    # How long, from the evaluation: not the policy's clock reading (780).
    assert "blocked for another 600s (or until the query falls behind)" in ds[-1].reason
    ds = q.run_and_evaluate(590)  # t=770: still blocked (until 780)
    assert {d.outcome for d in ds} == {"blocked"}
    assert "blocked for another 10s" in ds[-1].reason
    q.run(10)
    d = q.evaluate()
    assert (d.outcome, d.target_slots) == ("scale-up", 16)  # expired: never blocked forever


def test_a_query_falling_behind_lifts_the_block() -> None:
    def per_slot(eff: float) -> float:
        return 1000.0 if eff <= 8 else 8000.0 / eff

    q = make(config(effectiveness_detection=True), rate=7600, per_slot=per_slot, slots=8,
             partitions=48, backlog=0.0)
    q.run(90)
    q.apply(q.evaluate())
    assert q.run_and_evaluate(90)[-1].outcome == "blocked"
    q.backlog = 7600 * 40.0  # 40 s of input waiting: more than the 30 s threshold
    q.run(10)
    d = q.evaluate()
    assert d.outcome == "scale-up"


def test_recommend_only_computes_but_does_not_apply() -> None:
    q = make(config(scaling_enabled=False), rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    d = q.evaluate()
    assert (d.outcome, d.target_slots) == ("scale-up", 12)
    assert d.applied is False and d.actionable is False
    assert d.reason.startswith("recommend only (autoscaler.scaling.enabled=false)")
    assert "[not applied]" in d.log_line()


def test_nothing_is_decided_while_a_rescale_is_in_flight() -> None:
    q = make(rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.reason) == ("not-ready", "a rescale is in flight")


def test_a_rescale_reported_only_by_the_view_restarts_stabilization() -> None:
    q = make(rate=7600, per_slot=1000, slots=8, partitions=48)
    q.run(90)
    d = q.evaluate(last_rescale_completed=85.0)  # e.g. a user's PUT, not the autoscaler
    assert d.outcome == "not-ready" and "stabilizing" in d.reason


def test_first_action_helper_finds_nothing_in_band() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48)
    assert first_action(q.run_and_evaluate(300)) is None


def test_a_jump_is_seen_from_the_batch_that_starts_with_it_before_it_completes() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    assert not q.policy.rising
    # The batch that started reads three times the input; it has not completed.
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    assert q.policy.rising
    d = q.evaluate()
    # 18000 / 0.8 = 22500 -> 22.5 slots -> 24, as if the batch had completed
    assert (d.outcome, d.kind, d.target_slots) == ("scale-up", "live", 24)
    assert d.inputs.input_rate == d.inputs.input_rate_started == 18000.0
    assert d.inputs.input_rate_window == 6000.0  # the window holds completed batches only
    assert "(input 18000 rows/s, read by the batch that started; the completed ones read " \
           "6000)" in d.reason


def test_a_started_batch_reads_only_rises_and_only_until_it_completes() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    # Within the jump factor: noise, not a rise
    assert q.policy.observe_start(q.batch + 1, 7000.0)
    assert not q.policy.rising
    d = q.evaluate()
    assert d.outcome == "no-change" and d.inputs.input_rate_started is None
    # A fall is read from completed batches only (a whole window shows it)
    assert q.policy.observe_start(q.batch + 1, 1000.0)
    assert q.evaluate().outcome == "no-change"
    # Once that batch has completed, its sample says more than its start
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    q.run(5)
    assert not q.policy.rising
    assert q.evaluate().outcome == "no-change"
    # A start of a batch that already completed is not used
    assert not q.policy.observe_start(q.batch, 18000.0)
    assert not q.policy.rising


def test_a_started_batch_with_bad_figures_is_rejected_and_changes_nothing() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    for batch, rate in ((q.batch + 1, float("nan")), (q.batch + 1, -5.0),
                        (q.batch + 1, float("inf")), (True, 18000.0), ("19", 18000.0),
                        (q.batch + 1, None)):
        assert not q.policy.observe_start(batch, rate)  # type: ignore[arg-type]
        assert "started batch" in q.policy.last_rejection
    assert not q.policy.rising
    assert q.evaluate().outcome == "no-change"


def _straddled() -> tuple[FakeQuery, ScalingDecision]:
    """A query scaled up on a batch that read part of a rise (9000 rows/s: 9000 / 0.8 ->
    11.25 slots -> 12), and that batch completed."""
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    assert q.policy.observe_start(q.batch + 1, 9000.0)
    up = q.evaluate()
    assert (up.outcome, up.target_slots) == ("scale-up", 12)
    q.rate = 9000.0
    q.run(5)
    return q, up


def test_a_scale_up_that_straddled_a_rise_is_decided_again_while_in_flight() -> None:
    q, _ = _straddled()  # the executors asked for are still starting
    # The next batch reads all of it: 18000 / 0.8 -> 24 slots, decided now
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.kind, d.current_slots, d.target_slots) == ("scale-up", "live", 8, 24)
    assert d.applied and d.inputs.input_rate_started == 18000.0


def test_in_flight_nothing_is_decided_but_for_a_rise_beyond_the_scale_ups_headroom() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    # In flight without a scale-up of the autoscaler's (a rescale of another cause)
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.reason) == ("not-ready", "a rescale is in flight")
    q, _ = _straddled()
    # Within the headroom of that scale-up (9000 x 0.9 / 0.8 = 10125 rows/s): it suffices
    assert q.policy.observe_start(q.batch + 1, 10100.0)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.reason) == ("not-ready", "a rescale is in flight")
    # Beyond it, but the target is no more than the scale-up in flight already asked for
    assert q.policy.observe_start(q.batch + 1, 10500.0)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.target_slots) == ("not-ready", 8)
    assert d.reason == "a rescale to 12 slots is in flight"


def test_a_completed_scale_up_that_straddled_a_rise_is_decided_again_while_stabilizing() -> None:
    q, up = _straddled()
    q.apply(up)  # its executors came before the next batch started
    assert q.evaluate().outcome == "not-ready"  # stabilizing
    # Within its headroom (9000 x 0.9 / 0.8 = 10125 rows/s): still stabilizing
    assert q.policy.observe_start(q.batch + 1, 10000.0)
    assert not q.policy.rising
    d = q.evaluate()
    assert d.outcome == "not-ready" and d.reason.startswith("stabilizing")
    # The next batch reads all of the rise: 18000 rows/s on 12 slots of 1000 rows/s
    # (measured before the scale-up) is falling behind: 18000 / 0.8 -> 24 slots
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    assert q.policy.rising
    d = q.evaluate()
    assert (d.outcome, d.kind, d.current_slots, d.target_slots) == ("scale-up", "live", 12, 24)
    assert d.inputs.true_rate_per_slot == 1000.0


def test_only_the_autoscalers_own_scale_up_is_decided_again_while_stabilizing() -> None:
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, trigger=5.0)
    q.run(90)
    # A rescale of another cause (new bounds, an executor lost) onto 12 slots
    q.slots = 12
    q.policy.on_rescale_completed(q.t, slots=12, partitions=48)
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    assert not q.policy.rising
    d = q.evaluate()
    assert d.outcome == "not-ready" and d.reason.startswith("stabilizing")


# -- the executors' start-up ------------------------------------------------------------
def test_a_query_falling_behind_is_sized_for_what_piles_up_while_executors_start() -> None:
    q = make(config(executor_startup_time=10.0), rate=6000, per_slot=1000, slots=8,
             partitions=48)
    q.run(90)
    assert q.evaluate().outcome == "no-change"
    q.rate = 9600
    q.run(20)
    d = q.evaluate()
    # As in test_the_newest_seconds_alone_scale_up_a_query_falling_behind (11196 rows/s),
    # plus (8880 - 8000 rows/s of capacity) x 10 s of start-up / 100 s of catch-up = 88.
    assert (d.outcome, d.target_slots) == ("scale-up", 12)
    assert d.inputs.target_rate == pytest.approx(11284.0)
    assert d.inputs.executor_startup == 10.0
    assert "the 8800 rows that arrive beyond the capacity during the executors' 10.0s " \
           "start-up" in d.reason


def test_deciding_again_in_flight_counts_the_capacity_of_the_slots_in_flight() -> None:
    # Straddled as in _straddled, with 10 s of executor start-up: the scale-up to 12 slots
    # asked for its executors at t=90, and the batch running at t=95 reads all of the rise.
    q = make(config(executor_startup_time=10.0), rate=6000, per_slot=1000, slots=8,
             partitions=48, trigger=5.0)
    q.run(90)
    assert q.policy.observe_start(q.batch + 1, 9000.0)
    assert q.evaluate().target_slots == 12
    q.rate = 9000.0
    q.run(5)
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.current_slots, d.target_slots) == ("scale-up", 8, 24)
    # Until the executors asked for now run (t=105), 18000 rows/s arrive against 8000 for
    # the 5 s left of the 12 slots' start-up, then against 12000 for 5 s: 80000 rows, not
    # the 100000 of 8000 rows/s for all 10 s; drained within the 100 s of catch-up.
    catch = (d.inputs.backlog or 0.0) / 100
    assert catch > 0
    assert d.inputs.target_rate == pytest.approx(18000 / 0.8 + catch + 800)
    assert d.inputs.executor_startup == 10.0
    assert "the 80000 rows that arrive beyond the capacity until the executors asked for " \
           "now run: 5.0s more on the slots running, then 5.0s on the 12 slots of the " \
           "scale-up in flight" in d.reason
    # That decision asked at t=95: 5 s later, 5 s more on 8 slots, then 5 s on its 24
    # (counted from the first ask, t=90, it would be 10 s on the 24 slots: 60000 rows)
    q.run(5)
    assert q.policy.observe_start(q.batch + 1, 30000.0)
    d = q.evaluate(rescale_in_flight=True)
    assert (d.outcome, d.target_slots) == ("scale-up", 48)
    catch = (d.inputs.backlog or 0.0) / 100
    assert d.inputs.target_rate == pytest.approx(30000 / 0.8 + catch + 1400)
    # Once the 48 slots' start-up has passed (still in flight), they carry 36000 rows/s:
    # nothing more piles up, and they reach the target
    q.run(10)
    assert q.policy.observe_start(q.batch + 1, 36000.0)
    d = q.evaluate(rescale_in_flight=True)
    assert d.inputs.target_rate == pytest.approx(36000 / 0.8 + (d.inputs.backlog or 0.0) / 100)
    assert d.outcome == "not-ready" and d.reason == "a rescale to 48 slots is in flight"


def test_a_clock_gone_back_counts_the_whole_start_up_of_a_scale_up_in_flight() -> None:
    q = make(config(executor_startup_time=10.0), rate=6000, per_slot=1000, slots=8,
             partitions=48, trigger=5.0, t=5000.0)
    q.policy = type(q.policy)(q.policy.config, "q", started_at=5000.0)
    q.run(90)
    assert q.policy.observe_start(q.batch + 1, 9000.0)
    assert q.evaluate().target_slots == 12  # asked for at t=5090 on the old clock
    q.rate = 9000.0
    q.t -= 1000.0  # the clock steps back
    d = q.evaluate(rescale_in_flight=True)
    assert d.outcome == "not-ready" and "clock went back" in d.reason
    q.run(40)  # stabilizing for 30 s (its samples are dropped), then two batches
    assert q.policy.observe_start(q.batch + 1, 18000.0)
    d = q.evaluate(rescale_in_flight=True)
    assert d.outcome == "scale-up"
    # The start-up counts from when the clock went back (40 s ago): all of it is past, so
    # the 12 slots in flight stand for the next 10 s: 6000 rows/s beyond them, 60000 rows.
    # Counted from the ask on the old clock (960 s ahead), 8 slots would stand for all
    # 10 s: 100000 rows.
    catch = (d.inputs.backlog or 0.0) / 100
    assert d.inputs.target_rate == pytest.approx(18000 / 0.8 + catch + 600)


def test_the_start_up_term_is_nothing_while_the_query_keeps_up() -> None:
    for startup in (0.0, 30.0):
        q = make(config(executor_startup_time=startup), rate=6800, per_slot=1000, slots=8,
                 partitions=48)
        q.run(90)
        q.rate = 7600  # above the band, below the capacity of 8000 rows/s
        up = first_action(q.run_and_evaluate(60))
        assert up is not None and up.inputs.target_rate == pytest.approx(9500.0)
        assert "start-up" not in up.reason


def _falling_behind_after(startups: list[float | None], **cfg: object) -> ScalingDecision:
    q = make(config(executor_startup_time=10.0, **cfg), rate=6000, per_slot=1000, slots=8,
             partitions=48)
    q.run(90)
    for s in startups:  # live rescales of another cause onto the same slots
        q.policy.on_rescale_completed(q.t, slots=8, partitions=48, kind="live", startup=s)
        q.run(90)
    q.rate = 9600
    q.run(20)
    return q.evaluate()


def test_the_start_up_is_tracked_from_live_scale_ups() -> None:
    d = _falling_behind_after([4.0, 30.0, 6.0], restart_time_tracking=True)
    assert d.inputs.executor_startup == 30.0  # the longest of the last ones
    assert d.inputs.target_rate == pytest.approx(11196.0 + 880 * 30 / 100)
    d = _falling_behind_after([30.0, 4.0, 4.0, 4.0, 4.0, 4.0], restart_time_tracking=True)
    assert d.inputs.executor_startup == 4.0  # only the last five count
    d = _falling_behind_after([500.0], restart_time_tracking=True,
                              restart_time_tracking_limit=60.0)
    assert d.inputs.executor_startup == 60.0
    d = _falling_behind_after([30.0], restart_time_tracking=False)
    assert d.inputs.executor_startup == 10.0  # tracking off: the key


def test_bad_start_up_figures_are_ignored() -> None:
    d = _falling_behind_after([-1.0, math.nan, math.inf, None], restart_time_tracking=True)
    assert d.inputs.executor_startup == 10.0
    assert (d.outcome, d.target_slots) == ("scale-up", 12)


def _quiet_after_a_window(started: bool) -> list[ScalingDecision]:
    """7000 rows/s on 10 slots of 1000 (in band), then 40 s without a completed batch:
    the input stopped (Spark starts no batch), or with ``started`` a batch is stuck."""
    q = make(rate=7000, per_slot=1000, slots=10, partitions=10)
    assert all(d.outcome in ("not-ready", "no-change") for d in q.run_and_evaluate(150))
    if started:
        assert q.policy.observe_started(q.batch + 1)
    out = []
    for _ in range(4):
        q.t += 10
        out.append(q.evaluate())
    return out


def test_a_query_whose_input_stops_is_left_as_it_is() -> None:
    ds = _quiet_after_a_window(started=False)
    assert [d.outcome for d in ds] == ["no-change"] * 4, [d.reason for d in ds]
    assert all(d.inputs.backlog == 0 for d in ds)


def test_a_batch_that_runs_on_while_rows_arrive_is_falling_behind() -> None:
    ds = _quiet_after_a_window(started=True)
    # at +40 s: 35 s past the 5 s trigger at 7000 rows/s are waiting
    assert ds[-1].inputs.backlog == pytest.approx(7000 * 35)
    assert ds[-1].outcome == "scale-up"


def test_a_start_of_a_batch_already_completed_is_unused() -> None:
    q = make(rate=7000, per_slot=1000, slots=10, partitions=10)
    q.run(20)
    assert not q.policy.observe_started(q.batch)
    assert not q.policy.observe_started("5")  # type: ignore[arg-type]
    assert "started batch '5'" in q.policy.last_rejection


def test_ineffective_scale_up_is_detected_with_observed_scalability_on() -> None:
    """The scale-up's window also feeds the scalability fit: the gain it is judged against
    is the one predicted when it was decided, not one from a fit holding its outcome."""
    def per_slot(eff: float) -> float:
        return 1000.0 if eff <= 8 else 8000.0 / eff

    q = make(config(effectiveness_detection=True, effectiveness_expiry=600.0,
                    observed_scalability=True), rate=7600, per_slot=per_slot, slots=8,
             partitions=48)
    q.run(90)
    up = q.evaluate()
    assert (up.outcome, up.target_slots) == ("scale-up", 12)
    q.apply(up)
    ds = q.run_and_evaluate(90)
    assert ds[-1].outcome == "blocked" and "ineffective" in ds[-1].reason, ds[-1].reason
    assert not any(d.actionable for d in ds)


def test_scale_down_max_factor_keeps_a_share_of_the_current_slots() -> None:
    # 10 slots on 12 partitions run as 6 (two waves); a tiny load; 0.6 keeps 4 of the 10
    q = make(config(scale_down_max_factor=0.6, scale_down_interval=0.0), rate=100,
             per_slot=1000, slots=10, partitions=12, can_restart=False)
    d = first_action(q.run_and_evaluate(200))
    assert d is not None and (d.outcome, d.target_slots) == ("scale-down", 4), d


def test_scale_up_max_factor_caps_the_need_before_the_balanced_round_up() -> None:
    # 2 slots on 8 partitions, a load for 25: the need is capped at 3 slots' capacity,
    # and 3 does not divide 8, so the live step rounds up to 4 (Flink's alignment)
    q = make(config(scale_up_max_factor=0.5), rate=20000, per_slot=1000, slots=2,
             partitions=8, can_restart=False)
    d = first_action(q.run_and_evaluate(120))
    assert d is not None and (d.outcome, d.kind, d.target_slots) == ("scale-up", "live", 4), d


def test_a_clock_going_back_drops_a_pending_scale_down_started_on_the_old_clock() -> None:
    # 2000 rows/s on 8 slots of 1000: utilization 0.25, a scale-down pending (120 s)
    q = make(rate=2000, per_slot=1000, slots=8, partitions=48, t=5000.0)
    q.policy = type(q.policy)(q.policy.config, "q", started_at=5000.0)
    assert q.run_and_evaluate(100)[-1].outcome == "scale-down-pending"
    q.t -= 1000.0  # the clock steps back
    assert q.evaluate().outcome == "not-ready"
    # stabilization (30 s), a full window (60 s), then the whole interval (120 s) anew
    ds = q.run_and_evaluate(260)
    downs = [d for d in ds if d.outcome == "scale-down"]
    assert downs and downs[0].time == pytest.approx(4100.0 + 30 + 60 + 120, abs=10.0)


@pytest.mark.parametrize("slots, partitions, rate, released_to", [
    (16, 8, 5600, 8),  # more slots than tasks (an app that starts on every core)
    (10, 12, 4200, 6),  # 12 tasks on 10 slots: two waves, as on 6
])
def test_slots_that_get_no_task_are_released_after_the_interval(
        slots: int, partitions: int, rate: float, released_to: int) -> None:
    # utilization 0.7 of the busy slots, in [0.5, 0.9]: only the idle ones go
    q = make(rate=rate, per_slot=1000, slots=slots, partitions=partitions, can_restart=False)
    ds = q.run_and_evaluate(300)
    pending = [d for d in ds if d.outcome == "scale-down-pending"]
    assert pending and "only as fast as" in pending[0].reason
    d = first_action(ds)
    assert d is not None and (d.outcome, d.kind, d.target_slots) == (
        "scale-down", "live", released_to), d
    assert d.time - pending[0].time == pytest.approx(120.0)  # scale-down.interval


def _fell_short_on_8() -> tuple[FakeQuery, dict[str, float]]:
    """A query that falls behind on 8 slots at 7600 rows/s (utilization 0.95) and is scaled
    up to 12 at t=90; then its rate per slot reads 1500 (noise, a quieter neighbour), so
    that 12 slots look idle and 8 look enough again."""
    rates = {"per_slot": 1000.0}
    q = make(rate=7600, per_slot=lambda eff: rates["per_slot"], slots=8, partitions=48)
    q.run(90)
    up = q.evaluate()
    assert (up.outcome, up.target_slots) == ("scale-up", 12)
    q.apply(up)
    rates["per_slot"] = 1500.0  # 12 x 1500: utilization 0.42, below the band's 0.5
    return q, rates


def test_a_scale_down_onto_slots_that_fell_behind_at_this_load_is_refused() -> None:
    q, _ = _fell_short_on_8()
    ds = q.run_and_evaluate(300)
    assert ds[-1].outcome == "no-change"
    assert not any(d.outcome.startswith("scale-down") for d in ds)
    assert ("not onto 8 slots or fewer: 8 slots fell short of 7600 rows/s on 48 partitions "
            "300s ago") in ds[-1].reason
    assert q.slots == 12


def test_slots_that_fell_behind_on_more_partitions_do_not_refuse_a_scale_down() -> None:
    q, _ = _fell_short_on_8()  # 8 slots fell short of 7600 rows/s on 48 partitions
    # A restart moved the query to 24 partitions (at 12 slots): what 8 slots carry there is
    # not what they carried on 48 (a task's fixed cost is paid per wave).
    q.partitions = 24
    q.policy.on_rescale_completed(q.t, slots=12, partitions=24, kind="restart", downtime=3.0)
    ds = q.run_and_evaluate(300)
    downs = [d for d in ds if d.outcome == "scale-down"]
    assert downs and (downs[0].target_slots, downs[0].target_partitions) == (8, 24), ds[-1]
    assert not any("fell short" in d.reason for d in ds)


def test_slots_that_fell_behind_refuse_a_scale_down_onto_more_partitions_too() -> None:
    q, _ = _fell_short_on_8()  # 8 slots fell short of 7600 rows/s on 48 partitions
    q.partitions = 96  # a restart onto more partitions: as many slots run more waves
    q.policy.on_rescale_completed(q.t, slots=12, partitions=96, kind="restart", downtime=3.0)
    ds = q.run_and_evaluate(300)
    assert not any(d.outcome == "scale-down" for d in ds)
    assert "8 slots fell short of 7600 rows/s on 48 partitions" in ds[-1].reason


def test_a_scale_down_onto_slots_that_fell_behind_goes_ahead_at_a_clearly_lower_load() -> None:
    q, _ = _fell_short_on_8()
    q.rate = 6000  # below 0.8 x 7600: what they fell short of is not this load
    ds = q.run_and_evaluate(300)
    downs = [d for d in ds if d.outcome == "scale-down"]
    assert downs and downs[0].target_slots == 6  # 6000 / 0.8 / 1500 = 5 -> 6


def test_slots_that_fell_behind_are_remembered_for_an_hour() -> None:
    q, _ = _fell_short_on_8()  # scaled up at t=90
    ds = q.run_and_evaluate(3590)  # until t=3680
    assert not any(d.outcome.startswith("scale-down") for d in ds)
    ds = q.run_and_evaluate(130)  # t=3690: the hour is over, the interval runs anew
    assert ds[0].outcome == "scale-down-pending" and "waits 120s more" in ds[0].reason
    assert ds[-1].outcome == "scale-down" and ds[-1].target_slots == 8


def test_shortfall_memory_refuses_only_as_many_slots_or_fewer_at_a_like_load() -> None:
    m = ShortfallMemory()
    m.record(8.0, 48, 7600.0, now=0.0)
    m.record(0.0, 48, 100.0, now=0.0)  # nonsense figures are not kept
    m.record(4.0, 48, -1.0, now=0.0)
    m.record(4.0, 0, 100.0, now=0.0)
    assert len(m) == 1
    assert m.refuses(12.0, 48, 7600.0, 0.8, now=10.0) is None  # more slots than fell short
    assert m.refuses(8.0, 48, 6000.0, 0.8, now=10.0) is None  # below 0.8 x 7600
    assert m.refuses(6.0, 12, 7600.0, 0.8, now=10.0) is None  # on fewer partitions
    assert m.refuses(6.0, 96, 7600.0, 0.8, now=10.0) is not None  # more: more waves
    fell = m.refuses(6.0, 48, 6100.0, 0.8, now=10.0)
    assert fell is not None and (fell.slots, fell.partitions, fell.rate) == (8.0, 48, 7600.0)
    m.record(8.0, 48, 9000.0, now=20.0)  # the same count fell short again, of more
    assert m.refuses(8.0, 48, 7000.0, 0.8, now=30.0) is not None  # 7600's still holds
    m.record(10.0, 48, 9000.0, now=20.0)
    fell = m.refuses(6.0, 48, 7400.0, 0.8, now=30.0)
    assert fell is not None and fell.slots == 10.0  # of those that refuse, the most slots
    assert m.refuses(8.0, 48, 7300.0, 0.8, now=20.0 + SHORTFALL_EXPIRY) is None


def test_a_smaller_count_above_the_slots_that_fell_short_is_still_taken() -> None:
    rates = {"per_slot": 1000.0}
    # A minute of input waiting, on slots at utilization 0.96
    q = make(rate=9600, per_slot=lambda eff: rates["per_slot"], slots=10, partitions=60,
             backlog=9600 * 60.0)
    q.run(90)
    up = q.evaluate()  # 9600 / 0.8 + 576000 / 100 = 17760 rows/s -> 20 slots
    assert (up.outcome, up.target_slots) == ("scale-up", 20)
    q.apply(up)
    q.backlog, rates["per_slot"] = 0.0, 1700.0  # caught up; the rate per slot reads higher
    ds = q.run_and_evaluate(300)
    downs = [d for d in ds if d.outcome == "scale-down"]
    # 9600 / 0.8 / 1700 = 7.1 -> 10 (a divisor of 60), which fell short: the next, 12
    assert downs and downs[0].target_slots == 12
    pending = next(d for d in ds if d.outcome == "scale-down-pending")
    assert pending.target_slots == 12
    assert ("not onto 10 slots or fewer: 10 slots fell short of 9600 rows/s on 60 partitions"
            in pending.reason)


def test_a_scale_up_that_only_a_backlog_asked_for_records_no_shortfall() -> None:
    # 100 s of input waiting, on slots at utilization 0.75
    q = make(rate=6000, per_slot=1000, slots=8, partitions=48, backlog=600000.0)
    q.run(90)
    up = q.evaluate()
    assert up.outcome == "scale-up" and up.target_slots > 8
    q.apply(up)
    q.backlog = 0.0
    ds = q.run_and_evaluate(300)
    downs = [d for d in ds if d.outcome == "scale-down"]
    assert downs and downs[0].target_slots == 8  # 6000 / 0.8 / 1000 = 7.5 -> 8


def test_a_release_of_idle_slots_that_loses_capacity_is_refused_onto_a_count_that_fell_short(
) -> None:
    q, rates = _fell_short_on_8()  # 8 fell short of 7600; the cluster gives 10 of the 12
    q.slots = 10  # 48 partitions on 10 slots: as fast as 9.6
    q.policy.on_rescale_completed(q.t, slots=10, partitions=48, kind="live")
    q.rate, rates["per_slot"] = 7300, 1200.0  # utilization 0.63 on the 9.6: in band
    ds = q.run_and_evaluate(300)
    assert not any(d.outcome == "scale-down" for d in ds)  # 8 would do at 1200 a slot
    assert q.slots == 10


def test_slots_that_get_no_task_are_released_even_onto_a_count_that_fell_behind() -> None:
    q = make(rate=5500, per_slot=1000, slots=6, partitions=12)  # utilization 0.92
    q.run(90)
    up = q.evaluate()
    assert (up.outcome, up.target_slots) == ("scale-up", 12)
    # The cluster gives 10 of the 12: they run the 12 partitions only as fast as 6 would.
    q.slots = 10
    q.policy.on_rescale_completed(q.t, slots=10, partitions=12, kind="live")
    q.rate = 4700  # utilization 0.78 on those 6: in band, and above 0.8 x 5500
    ds = q.run_and_evaluate(300)
    downs = [d for d in ds if d.outcome == "scale-down"]
    assert downs and downs[0].target_slots == 6
