"""Where a rescale goes: live first, restart pricing, caps, executors, observed scalability."""

from __future__ import annotations

import pytest
from autoscaler_fakes import config, make

from spark_adaptive.core.autoscaler.planning import (
    Plan,
    divisors,
    expected_overshoot,
    restart_candidate,
    restart_target,
)
from spark_adaptive.core.autoscaler.scalability import ScalabilityModel


# -- live first ---------------------------------------------------------------------------
def test_a_balanced_slot_count_is_reached_live() -> None:
    q = make(rate=5600, per_slot=1000, slots=4, partitions=48)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # 5600 / 0.8 = 7000 -> 7 slots -> 8 divides 48
    assert (d.outcome, d.kind, d.target_slots, d.target_partitions) == ("scale-up", "live", 8, 48)
    assert d.reason.endswith("live: 8 slots run the 48 partitions balanced, no restart")


def test_a_restart_wins_when_no_balanced_count_fits_and_it_pays_back() -> None:
    # 7 partitions (prime) on 7 slots, utilization 0.21: the only smaller balanced count,
    # 1, cannot keep up. 1500 / 0.8 + 1500 x 10 / 100 = 2025 rows/s -> 3 slots.
    q = make(config(scale_down_interval=0.0), rate=1500, per_slot=1000, slots=7, partitions=7)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.kind, d.target_slots, d.target_partitions) == (
        "scale-down", "restart", 3, 12)
    # the saving (4 slots x 90 s horizon) against 10 s of downtime x 7 slots
    assert "waste 4 slots x 90s = 360 slot-s" in d.reason
    assert "10.0s downtime x 7 slots = 70 slot-s" in d.reason


def test_a_long_restart_loses_against_the_live_choice() -> None:
    q = make(config(scale_down_interval=0.0, restart_time=100.0), rate=1500, per_slot=1000,
             slots=7, partitions=7)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # 360 slot-s of waste against 700 slot-s of downtime
    assert (d.outcome, d.target_slots, d.target_partitions) == ("no-change", 7, 7)
    assert "700 slot-s" in d.reason


def test_observed_restart_downtime_prices_the_restart_when_tracking_is_on() -> None:
    q = make(config(scale_down_interval=0.0, restart_time_tracking=True), rate=1500,
             per_slot=1000, slots=7, partitions=7, downtimes=[2.0, 120.0])
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # the longest observed restart, 120 s, makes live win
    assert d.outcome == "no-change"
    assert d.inputs.restart_downtime == 120.0


def test_a_query_that_cannot_restart_keeps_its_partitions() -> None:
    q = make(config(scale_down_interval=0.0), rate=1500, per_slot=1000, slots=7, partitions=7,
             can_restart=False)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots, d.target_partitions) == ("no-change", 7, 7)
    assert "cannot change" in d.reason


def test_a_restart_that_saves_nothing_is_not_taken() -> None:
    q = make(config(scale_down_interval=0.0), rate=11900, per_slot=1000, slots=48,
             partitions=48)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # 14875 rows/s -> 14.9 slots -> 16 live; a restart would need 18
    assert (d.outcome, d.kind, d.target_slots) == ("scale-down", "live", 16)


def test_a_restart_saving_less_than_the_bands_width_is_not_taken() -> None:
    # 16 partitions on 8 slots, utilization 0.49: 4 slots cannot keep up, so 8 stays the
    # live choice. A restart at 6 slots would save 2 of 8 (25%), less than the band's width
    # 1 - 0.5 / 0.8 = 37.5%, though its 80 slot-s of downtime would pay back.
    q = make(config(scale_down_interval=0.0), rate=3900, per_slot=1000, slots=8, partitions=16)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots, d.target_partitions) == ("no-change", 8, 16)
    assert "would save 2 of 8 (25%), less than the band's width (38%)" in d.reason


# -- caps -----------------------------------------------------------------------------------
def test_never_more_slots_than_tasks() -> None:
    q = make(rate=10000, per_slot=1000, slots=2, partitions=4, can_restart=False)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots, d.target_partitions) == ("scale-up", 4, 4)


def test_a_stateless_query_gets_at_most_its_source_partitions() -> None:
    for can_restart in (False, True):
        q = make(rate=10000, per_slot=1000, slots=2, partitions=48, max_useful_slots=6,
                 can_restart=can_restart)
        q.run(90, trigger_interval=0.0)
        d = q.evaluate()
        assert d.outcome == "scale-up"
        assert d.target_slots == 6


def test_a_stateless_query_runs_balanced_waves_of_its_source_partitions() -> None:
    # 42 source partitions, 90 partitions: 15 or 18 slots run the 42 tasks in 3 waves as
    # 14 do, and 30 in 2 as 21 do. 16000 rows/s at 0.8 need 20 busy slots: 21.
    q = make(rate=16000, per_slot=1000, slots=14, partitions=90, max_useful_slots=42,
             can_restart=False)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots, d.target_partitions) == ("scale-up", 21, 90), d.reason
    assert "21 slots run the 42 tasks of its 90 partitions balanced" in d.reason


@pytest.mark.parametrize(("upper", "expected"), [(240, 21), (16, 14)])
def test_a_stateless_query_with_more_source_partitions_than_partitions_runs_them_all(
        upper: int, expected: int) -> None:
    # 42 source partitions on 8 partitions: its one stage runs 42 tasks, not 8, so 21 slots
    # run them in 2 waves at the 20 busy slots 16000 rows/s need at 0.8. An upper bound of
    # 16 stops it at 14 (3 waves; 15 and 16 run them in as many).
    q = make(rate=16000, per_slot=1000, slots=4, partitions=8, max_useful_slots=42,
             upper=upper, can_restart=False)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots, d.target_partitions) == ("scale-up", expected, 8), d.reason
    assert "the 42 tasks of its source (8 partitions)" in d.reason


@pytest.mark.parametrize("cap", [None, 8])
def test_a_stateless_query_has_no_restart_candidate(cap: int | None) -> None:
    # Its tasks are its source's partitions whatever its partition count: a restart onto
    # other partitions would change nothing, even where the view says it could restart.
    plan = Plan(slots=4, partitions=8, lower=1, upper=120, max_useful_slots=cap,
                can_restart=True, per_executor=1, cluster_max_slots=None, rate_per_slot=1000.0,
                input_rate=9000.0, need_live=11250.0, need_restart=12375.0, downtime=5.0,
                horizon=300.0, utilization_min=0.5, utilization_target=0.8, per_slot_max=4)
    candidate = restart_candidate(plan, ScalabilityModel(3, 0.5))
    assert (candidate is None) == (cap is not None)


@pytest.mark.parametrize("busy", [True, False])
def test_a_stateless_query_s_slots_run_its_source_partitions_in_as_few_waves(busy: bool) -> None:
    # 62 source partitions on 180 partitions. 16000 rows/s at 0.8 need 20 busy slots: 21 run
    # the 62 tasks in 3 waves (20.7 busy), where sized on the 180 partitions 20 slots looked
    # enough and keep 15.5 busy. Without busy time the rate per slot is processedRowsPerSecond
    # over the slots the 62 tasks keep busy (the first evaluation tells the policy the cap).
    q = make(rate=16000, per_slot=1000, slots=16, partitions=180, max_useful_slots=62,
             busy=busy)
    q.evaluate()
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots, d.target_partitions) == ("scale-up", 21, 180), d.reason
    assert d.inputs.true_rate_per_slot == pytest.approx(1000.0)


def test_without_busy_time_each_batch_s_rate_per_slot_is_read_over_its_own_tasks() -> None:
    # The source had 42 partitions at the last evaluation, then 60: 16 slots run 60 tasks in
    # 4 waves (15 busy), where over 42 they would keep 14 busy and read 7% fast.
    q = make(rate=14000, per_slot=1000, slots=16, partitions=180, max_useful_slots=42,
             busy=False)
    q.evaluate()
    q.max_useful_slots = 60
    q.run(90, trigger_interval=0.0, tasks=60, stage_tasks=60)
    d = q.evaluate()
    assert d.inputs.true_rate_per_slot == pytest.approx(1000.0)


def test_a_batch_of_more_stages_is_read_over_the_query_s_source_tasks() -> None:
    # foreachBatch's extra one-task job: 43 tasks in two stages, where the source's 42 ran
    # on 21 slots in 2 waves (21 busy); over 43 they would read 21.5 busy.
    q = make(rate=14000, per_slot=1000, slots=21, partitions=180, max_useful_slots=42,
             busy=False)
    q.evaluate()
    q.run(90, trigger_interval=0.0, tasks=43)
    d = q.evaluate()
    assert d.inputs.true_rate_per_slot == pytest.approx(1000.0)


def test_a_stateless_query_s_wave_counts_are_whole_executors() -> None:
    # 42 source tasks on executors of 4 slots: 24 slots run them in 2 waves (21 busy).
    q = make(rate=16000, per_slot=1000, slots=16, partitions=90, max_useful_slots=42,
             slots_per_executor=4, can_restart=False)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots) == ("scale-up", 24), d.reason


def test_slot_targets_are_whole_executors() -> None:
    q = make(rate=7000, per_slot=1000, slots=4, partitions=48, slots_per_executor=4)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # 8750 rows/s -> 8.75 slots -> 12 (3 executors of 4; 48 % 12 == 0)
    assert (d.outcome, d.target_slots) == ("scale-up", 12)


def test_never_above_the_cluster_maximum() -> None:
    q = make(rate=20000, per_slot=1000, slots=4, partitions=48, cluster_max_slots=10,
             can_restart=False)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # 25 slots wanted; the largest balanced count within 10 is 8
    assert (d.outcome, d.target_slots) == ("scale-up", 8)
    q = make(rate=20000, per_slot=1000, slots=4, partitions=48, cluster_max_slots=10)
    q.run(90, trigger_interval=0.0)
    d = q.evaluate()  # with a restart: all 10, at partitions that can grow live later
    assert (d.outcome, d.kind, d.target_slots, d.target_partitions) == (
        "scale-up", "restart", 10, 120)


# -- observed scalability --------------------------------------------------------------
def _sublinear(eff: float) -> float:
    return 1000.0 / (1 + 0.02 * (eff - 1))


@pytest.mark.parametrize("learn, expected", [(True, 30), (False, 20)])
def test_observed_scalability_reaches_the_target_in_one_step(learn: bool, expected: int) -> None:
    q = make(config(observed_scalability=learn), rate=3000, per_slot=_sublinear, slots=4,
             partitions=120)
    q.run(90, trigger_interval=0.0)
    assert q.evaluate().outcome == "no-change"  # 4 slots observed
    q.rate = 5000
    q.run(60, trigger_interval=0.0)
    up = q.evaluate()
    assert (up.outcome, up.target_slots) == ("scale-up", 8)
    q.apply(up)
    q.run(90, trigger_interval=0.0)
    assert q.evaluate().outcome == "no-change"  # 8 slots observed
    q.rate = 14000
    q.run(60, trigger_interval=0.0)
    d = q.evaluate()
    assert (d.outcome, d.target_slots) == ("scale-up", expected)
    q.apply(d)
    utilization = q.rate / q.capacity()
    if learn:  # one step: 14000 rows/s on 30 slots is within the band
        assert 0.5 <= utilization <= 0.9
        assert d.inputs.scalability_coefficient == pytest.approx(1.14 / 1.508, rel=1e-3)
    else:  # linear scaling undershoots: out of the band, another rescale follows
        assert utilization > 0.9


# -- planning helpers ----------------------------------------------------------------------
def test_divisors() -> None:
    assert divisors(1) == (1,)
    assert divisors(48) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 48)
    assert divisors(49) == (1, 7, 49)


def test_restart_partitions_leave_room_for_live_rescales() -> None:
    assert restart_target(11, 1, 720, 4, 1, None, 1000) == (12, 24)
    assert restart_target(3, 1, 720, 4, 1, None, 1000) == (3, 12)
    assert restart_target(11, 1, 720, 1, 1, None, 1000) == (11, 11)  # Flink's P' = S'
    assert restart_target(11, 1, 16, 4, 1, None, 1000) == (11, 11)  # bounded by upper
    assert restart_target(30, 1, 720, 4, 1, None, 20) == (20, 20)  # the cluster's maximum
    s, p = restart_target(9, 1, 720, 4, 4, None, 1000)  # whole executors of 4 slots
    assert s % 4 == 0 and p % s == 0 and s >= 9


def test_restart_partitions_shrink_as_each_task_costs_more() -> None:
    # A partition whose tasks cost its slot a fixed 0.1 slots each micro-batch (a Python
    # source and UDF on a short trigger) makes 120 partitions cost 12 slots of overhead.
    free = restart_target(11, 1, 720, 12, 1, None, 1000)
    cheap = restart_target(11, 1, 720, 12, 1, None, 1000, 0.03)
    dear = restart_target(11, 1, 720, 12, 1, None, 1000, 0.1)
    assert free == (12, 120) and cheap == (12, 72) and dear == (12, 24)
    assert restart_target(3, 1, 720, 12, 1, None, 1000, 0.1) == (3, 6)


def test_expected_overshoot_prefers_dense_divisors() -> None:
    assert expected_overshoot(60, 15, 1, 60) < expected_overshoot(30, 15, 1, 30)
    assert expected_overshoot(7, 7, 1, 7) > 0.5


def test_a_query_falling_behind_scales_up_live_even_below_the_band() -> None:
    cfg = config(utilization_min=0.7)
    # 40 partitions on 10 slots: the balanced counts above are 20 and 40.
    slow = make(cfg, rate=9200, per_slot=1000, slots=10, partitions=40)
    slow.run(90, trigger_interval=0.0)
    d = slow.evaluate()  # utilization 0.92: 20 slots would leave 0.46, a restart is cheaper
    assert (d.outcome, d.kind) == ("scale-up", "restart")
    assert d.target_slots < 20
    behind = make(cfg, rate=12000, per_slot=1000, slots=10, partitions=40)
    behind.run(90, trigger_interval=0.0)
    d = behind.evaluate()  # utilization 1.2: the input outruns the capacity
    assert (d.outcome, d.kind, d.target_slots, d.target_partitions) == (
        "scale-up", "live", 20, 40)
    assert "falling behind is scaled up live" in d.reason


def test_a_query_falling_behind_scales_up_before_its_window_is_full() -> None:
    q = make(rate=7600, per_slot=1000, slots=8, partitions=48, backlog=0.0)
    q.run(60)
    assert q.evaluate().outcome == "not-ready"  # 30 s collected, no backlog: wait
    q.run(5, backlog=7600 * 20.0)  # 20 s of input waiting, above the 15 s threshold
    d = q.evaluate()  # 7600 / 0.8 + 152000 / 100 = 11020 rows/s -> 11.02 slots -> 12
    assert (d.outcome, d.target_slots) == ("scale-up", 12)
    assert d.inputs.sample_count < 13


def test_input_above_capacity_scales_up_before_the_window_is_full_without_a_backlog() -> None:
    # A source that reports no backlog (a rate or Python source): 7600 rows/s on a capacity of
    # 4000 grows a backlog from the first batch on; a few batches are enough to say so.
    q = make(rate=7600, per_slot=1000, slots=4, partitions=48)
    q.run(40)  # 30 s of stabilization after the start, then two batches of a 60 s window
    d = q.evaluate()  # 7600 / 0.8 = 9500 rows/s -> 9.5 slots -> 12 (balanced for 48)
    assert (d.outcome, d.kind) == ("scale-up", "live"), d.reason
    assert d.target_slots == 12 and d.inputs.window_span < 60  # the window is not full
    calm = make(rate=3000, per_slot=1000, slots=4, partitions=48)  # within its capacity
    calm.run(40)
    assert calm.evaluate().outcome == "not-ready"


def test_a_restart_prices_the_fixed_cost_of_each_partition_s_tasks() -> None:
    # As the restart above, but every batch's busy time holds a fixed 4.2 slot-s for its
    # 7 tasks (0.6 each: a Python source and UDF) beside 1 ms a row; batches alternate
    # between 1000 and 2000 rows/s so the window tells the parts apart. A partition then
    # keeps 0.6 / 5 s = 0.12 slots busy, and 12 partitions cost more than they balance.
    def window(q: object, fixed: float) -> None:
        for i in range(18):
            rate = 1000.0 if i % 2 else 2000.0
            rows = rate * 5.0
            q.t += 5.0  # type: ignore[attr-defined]
            q.batch += 1  # type: ignore[attr-defined]
            q.policy.observe(q.sample(  # type: ignore[attr-defined]
                num_input_rows=rows, input_rows_per_second=rate,
                busy_time=fixed + rows / 1000.0))
    free = make(config(scale_down_interval=0.0), rate=1500, per_slot=1000, slots=7,
                partitions=7)
    window(free, 0.0)
    dear = make(config(scale_down_interval=0.0), rate=1500, per_slot=1000, slots=7,
                partitions=7)
    window(dear, 4.2)
    a, b = free.evaluate(), dear.evaluate()
    assert (a.kind, a.target_partitions) == ("restart", 12)
    assert b.kind == "restart" and b.target_partitions < a.target_partitions, b


def test_the_fixed_cost_is_shared_by_every_task_of_a_batch() -> None:
    # 0.6 slot-s a batch beside 4 ms a row, every 4 s: over 4 tasks 0.0375 slots a task;
    # over 12 (4 source tasks and 8 shuffle partitions) a third of it.
    from spark_adaptive.core.autoscaler.policy import _per_partition
    from spark_adaptive.core.autoscaler.window import Entry, MetricsWindow

    w = MetricsWindow(60.0)
    for i, rows in enumerate([80, 80, 80, 1400, 1400, 1400]):
        w.add(Entry(4.0 * i, 4.0, rows, 0.6 + 0.004 * rows, rows, None, None, rows / 4.0,
                    1.0, 4.0, 1, 4))
    # (rounded to two significant digits, for the planner's cache)
    assert _per_partition(w, 4) == pytest.approx(0.0375, rel=0.05)
    assert _per_partition(w, 12) == pytest.approx(0.0125, rel=0.05)
    assert _per_partition(MetricsWindow(60.0), 4) == 0.0  # nothing to tell by
