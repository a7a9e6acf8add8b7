"""Slot sharing across queries and the rescale rule."""

from __future__ import annotations

import pytest

from spark_adaptive.core.executors.demand import (
    DemandInputs,
    Pool,
    PoolExecutor,
    QueryDemand,
    executor_demand,
)
from spark_adaptive.core.ports import RepartitionSupport
from spark_adaptive.core.streaming.allocator import (
    RescaleDecision,
    decide_rescale,
    determine_parallelism,
    first_start,
    reserve_slots,
    share_slots,
)
from spark_adaptive.core.streaming.requirements import ResourceRequirements as R

OK = RepartitionSupport(True, "RocksDB state store")
NO = RepartitionSupport(False, "stateful query on the HDFS state store")
B8 = R(1, 8)


# -- determine_parallelism ----------------------------------------------------------------
def test_flinks_example() -> None:
    assert determine_parallelism(9, {"A": R(1, 4), "B": R(2, 10)}) == {"A": 4, "B": 5}


def test_insufficient_when_lower_bounds_exceed_slots() -> None:
    assert determine_parallelism(2, {"A": R(2, 4), "B": R(1, 1)}) is None


def test_exactly_the_lower_bounds() -> None:
    assert determine_parallelism(3, {"A": R(2, 4), "B": R(1, 5)}) == {"A": 2, "B": 1}


def test_single_query_capped_by_upper_bound() -> None:
    assert determine_parallelism(10, {"A": R(1, 3)}) == {"A": 3}
    assert determine_parallelism(2, {"A": R(1, 3)}) == {"A": 2}


def test_narrowest_range_first_and_even_split() -> None:
    shares = determine_parallelism(10, {"wide": R(1, 100), "narrow": R(2, 3), "mid": R(1, 10)})
    assert shares == {"narrow": 3, "mid": 3, "wide": 4}


def test_integer_division_can_leave_slots_unused() -> None:
    shares = determine_parallelism(5, {"A": R(1, 10), "B": R(1, 10)})
    assert shares is not None
    assert shares == {"A": 3, "B": 2} or shares == {"A": 2, "B": 3}
    assert sum(shares.values()) <= 5


def test_no_queries() -> None:
    assert determine_parallelism(4, {}) == {}


def test_desired_slots_is_the_sum_of_upper_bounds_capped() -> None:
    # The executor demand (core/executors/demand.py, row Q3) asks for them.
    def wanted(*uppers: int) -> int | None:
        qs = tuple(QueryDemand(str(i), u) for i, u in enumerate(uppers))
        return executor_demand(DemandInputs(Pool((PoolExecutor("1", 1),), 1), qs)).total

    assert wanted(4, 10) == 14
    assert wanted(32768, 32768) == 32768


# -- decide_rescale -----------------------------------------------------------------------
def decide(p: int, s: int, share: int | None, bounds: R = B8, support: RepartitionSupport = OK,
           **kw: float | int | None) -> RescaleDecision:
    return decide_rescale(parallelism=p, slots=s, share=share, requirements=bounds,
                          repartition=support, **kw)  # type: ignore[arg-type]


def test_unchanged_share_is_nothing() -> None:
    d = decide(4, 4, 4)
    assert (d.kind, d.target_parallelism, d.target_slots) == ("none", 4, 4)


def test_four_partitions_on_two_slots_is_a_live_rescale() -> None:
    d = decide(4, 4, 2)
    assert (d.kind, d.current_parallelism, d.target_parallelism) == ("live", 4, 4)
    assert (d.current_slots, d.target_slots) == (4, 2)
    assert "balanced" in d.reason


def test_back_on_four_slots_is_live_again() -> None:
    d = decide(4, 2, 4)
    assert (d.kind, d.target_parallelism, d.target_slots) == ("live", 4, 4)


def test_uneven_split_needs_a_restart() -> None:
    d = decide(4, 4, 3)
    assert (d.kind, d.target_parallelism, d.target_slots) == ("restart", 3, 3)
    assert "do not divide evenly" in d.reason


def test_scale_up_beyond_the_partitions_needs_a_restart() -> None:
    d = decide(1, 1, 3)
    assert (d.kind, d.target_parallelism) == ("restart", 3)
    assert d.is_scale_up


def test_bounds_win_over_balance() -> None:
    # 4 partitions on 2 slots would be balanced, but the upper bound is now 2.
    d = decide(4, 4, 2, bounds=R(1, 2))
    assert (d.kind, d.target_parallelism) == ("restart", 2)
    assert "outside the bounds [1, 2]" in d.reason


def test_raised_lower_bound_restarts() -> None:
    d = decide(2, 2, 4, bounds=R(4, 8))
    assert (d.kind, d.target_parallelism) == ("restart", 4)


def test_no_share_keeps_running() -> None:
    # No share: the slots are fewer than the query's lower bound (share_slots).
    d = decide(4, 4, None)
    assert d.kind == "none"
    assert "its lower bound 1 is above the app's slots; keeps running 4 partitions" in d.reason


def test_small_scale_up_is_held_back_by_min_parallelism_increase() -> None:
    d = decide(4, 4, 5, min_parallelism_increase=2)
    assert d.kind == "none" and d.held_back
    assert "min-parallelism-increase 2" in d.reason
    big = decide(4, 4, 6, min_parallelism_increase=2)
    assert big.kind == "restart" and not big.held_back


def test_min_parallelism_increase_does_not_hold_back_scale_downs() -> None:
    d = decide(4, 4, 3, min_parallelism_increase=5)
    assert d.kind == "restart"


def test_min_parallelism_increase_does_not_override_bounds() -> None:
    d = decide(1, 1, 2, bounds=R(2, 8), min_parallelism_increase=5)
    assert d.kind == "restart"


def test_held_back_scale_up_is_forced_after_scaling_interval_max() -> None:
    held = decide(4, 4, 5, min_parallelism_increase=2, held_back_since=100.0, now=159.0,
                  scaling_interval_max=60.0)
    assert held.kind == "none" and held.held_back
    forced = decide(4, 4, 5, min_parallelism_increase=2, held_back_since=100.0, now=160.0,
                    scaling_interval_max=60.0)
    assert forced.kind == "restart" and forced.forced
    assert "scaling-interval.max" in forced.reason


def test_a_query_that_cannot_restart_is_not_held_back_by_min_parallelism_increase() -> None:
    # Its slots follow the share live (a stateless query runs its source's tasks on slots
    # beyond its partitions): nothing is restarted, so nothing is held back.
    d = decide(8, 16, 21, bounds=R(1, 64), min_parallelism_increase=16, support=NO)
    assert (d.kind, d.target_parallelism, d.target_slots, d.held_back) == ("live", 8, 21, False)


def test_without_scaling_interval_max_it_stays_held_back() -> None:
    d = decide(4, 4, 5, min_parallelism_increase=2, held_back_since=0.0, now=1e9)
    assert d.held_back


def test_no_repartition_means_live_only() -> None:
    d = decide(4, 4, 3, support=NO)
    assert (d.kind, d.target_parallelism, d.target_slots) == ("live", 4, 3)
    assert "cannot change" in d.reason and "HDFS" in d.reason


def test_no_repartition_and_same_slots_is_nothing_with_reason() -> None:
    d = decide(4, 3, 3, support=NO)
    assert d.kind == "none"
    assert "keeps 4 partitions" in d.reason


@pytest.mark.parametrize(("p", "s", "share", "kind"), [
    (6, 6, 3, "live"), (6, 3, 2, "live"), (6, 2, 4, "restart"), (2, 2, 1, "live"),
])
def test_whole_multiples(p: int, s: int, share: int, kind: str) -> None:
    assert decide(p, s, share).kind == kind


# -- first_start --------------------------------------------------------------------------
CAN = RepartitionSupport(True, "RocksDB")
CANNOT = RepartitionSupport(False, "no checkpoint location")


@pytest.mark.parametrize(("state", "share", "support", "bounds", "expected"), [
    (None, 3, CAN, R(1, 8), (3, 3, "3 slots available within bounds [1, 8]")),
    (None, None, CAN, R(1, 8), (6, 0, "no task slot is known yet; starts at its configured "
                                      "6 partitions and rescales once resources settle")),
    (None, 0, CAN, R(2, 4), (4, 0, "no task slot is known yet; starts at its configured "
                                   "4 partitions and rescales once resources settle")),
    (None, 3, CANNOT, R(1, 8), (6, 3, "starts at its configured 6 partitions: no checkpoint "
                                      "location")),
    (5, 3, CAN, R(1, 8), (5, 3, "its checkpoint holds state in 5 partitions")),
])
def test_first_start_never_waits(state: int | None, share: int | None,
                                 support: RepartitionSupport, bounds: R,
                                 expected: tuple[int, int, str]) -> None:
    plan = first_start(configured_partitions=6, state_partitions=state, share=share,
                       requirements=bounds, repartition=support)
    assert (plan.parallelism, plan.slots, plan.reason) == expected


# -- share_slots: the queries of one app share its slots in time --------------------------
@pytest.mark.parametrize("queries", [1, 2, 5, 20])
@pytest.mark.parametrize("slots", [1, 3, 8])
def test_every_query_runs_on_every_slot_within_its_bounds(queries: int, slots: int) -> None:
    reqs = {f"q{i}": R(1, 4) for i in range(queries)}
    assert share_slots(slots, reqs) == {k: min(4, slots) for k in reqs}


def test_a_query_whose_lower_bound_is_above_the_slots_has_no_share_and_holds_up_no_other(
        ) -> None:
    reqs = {"big": R(4, 8), "small": R(1, 2), "wide": R(1, 32768)}
    assert share_slots(3, reqs) == {"small": 2, "wide": 3}
    assert share_slots(4, reqs) == {"big": 4, "small": 2, "wide": 4}
    assert share_slots(0, reqs) == {}


def test_queries_arriving_and_ending_change_no_other_query_s_share() -> None:
    reqs = {"a": R(1, 4)}
    before = share_slots(3, reqs)["a"]
    for i in range(5):
        reqs[f"n{i}"] = R(1, 4)
        assert share_slots(3, reqs)["a"] == before
    for i in range(5):
        del reqs[f"n{i}"]
        assert share_slots(3, reqs)["a"] == before


# -- reserve_slots: the autoscaler's targets, exclusively -----------------------------------
@pytest.mark.parametrize(("queries", "slots", "each"), [
    (1, 3, 3), (2, 8, 4), (5, 8, None), (20, 8, 1), (5, 3, 1), (20, 1, 1), (2, 3, None)])
def test_reserved_shares_are_flinks_or_the_lower_bounds_in_time(
        queries: int, slots: int, each: int | None) -> None:
    reqs = {f"q{i}": R(1, 4) for i in range(queries)}
    shares = reserve_slots(slots, reqs)
    assert len(shares) == queries
    if each is not None:
        assert set(shares.values()) == {each}
    assert sum(shares.values()) <= max(slots, queries)  # never more than there are, or 1 each


def test_reserved_shares_leave_out_a_lower_bound_above_the_slots() -> None:
    assert reserve_slots(3, {"big": R(4, 8), "a": R(1, 4), "b": R(1, 4)}) == {"a": 1, "b": 1}
