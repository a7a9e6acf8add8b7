"""Executing: live and restart rescales, the query's own end, cancel and stop."""

from __future__ import annotations

import dataclasses

from scheduler_fakes import PARAMS, StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.events import QueryIdle, QueryProgress, QueryTerminated
from spark_adaptive.core.ports import RepartitionSupport
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements, ScalingTarget
from spark_adaptive.core.streaming.restart import Failure, FailureResult
from spark_adaptive.core.streaming.states import Executing

BOUNDS_3 = ResourceRequirements(1, 3)
BOUNDS_4 = ResourceRequirements(1, 4)


def progress() -> QueryProgress:
    return QueryProgress(0.0, "qid", "run-1", "q", 1, 10, 1.0, 1.0, 0.1, 0.1)


def terminated(exception: str | None) -> QueryTerminated:
    return QueryTerminated(0.0, "qid", "run-1", exception, "STREAM_FAILED" if exception else None)


def test_nothing_happens_while_the_share_matches(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, requirements=BOUNDS_4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(1000)
        state.on_query_event(progress())
        state.on_query_event(QueryIdle(0.0, "qid", "run-1"))
    assert ctx.transitions == [] and ctx.live_rescales == []


def test_live_rescale_happens_at_once_even_in_cooldown(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, requirements=BOUNDS_4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(1)  # deep in the 30 s cooldown
        ctx.share = 2
        state.on_resources_changed()
        ((decision, trigger),) = ctx.live_rescales
        assert (decision.kind, decision.current_slots, decision.target_slots) == ("live", 4, 2)
        assert trigger is Trigger.RESOURCES_LOST
        assert state.slots == 2
        ctx.share = 4
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.NEW_RESOURCES
        assert state.slots == 4
        vt.advance(1000)
    assert ctx.transitions == []


def test_changes_during_the_start_are_looked_at_on_entry(vt: VirtualTime) -> None:
    with StateContext(vt, share=2, requirements=BOUNDS_4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        assert ctx.live_rescales == []  # not from the constructor
        vt.run_pending()
        assert len(ctx.live_rescales) == 1 and state.slots == 2


def test_scale_up_to_desired_restarts_right_after_the_cooldown(vt: VirtualTime) -> None:
    with StateContext(vt, share=1, requirements=BOUNDS_3) as ctx:
        state = ctx.enter(lambda c: Executing(c, 1, 1))
        vt.advance(15)
        ctx.share = 3
        state.on_resources_changed()
        vt.advance(14.9)
        assert ctx.transitions == []
        ctx.expect("Restarting")
        vt.advance(0.1)
        args = ctx.last.args
        assert (args["backoff"], args["target_parallelism"], args["target_slots"],
                args["trigger"]) == (0.0, 3, 3, Trigger.NEW_RESOURCES)
        assert args["failure"] is None


def test_scale_down_waits_for_the_stabilization_timeout(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, requirements=BOUNDS_3) as ctx:
        state = ctx.enter(lambda c: Executing(c, 3, 3))
        vt.advance(100)
        ctx.share = 2  # 3 partitions do not divide over 2 slots; not desired
        state.on_resources_changed()
        vt.advance(59.9)
        assert ctx.transitions == []
        ctx.expect("Restarting")
        vt.advance(0.1)
        assert ctx.last.args["trigger"] is Trigger.RESOURCES_LOST
        assert ctx.last.args["target_parallelism"] == 2


def test_stabilized_does_not_wait_for_a_micro_batch_past_the_max_delay(vt: VirtualTime) -> None:
    params = dataclasses.replace(PARAMS, trigger_max_delay=30.0)
    with StateContext(vt, share=3, requirements=BOUNDS_3, params=params) as ctx:
        state = ctx.enter(lambda c: Executing(c, 3, 3))
        vt.advance(100)
        ctx.share = 2
        state.on_resources_changed()
        vt.advance(59.9)
        assert ctx.transitions == []
        ctx.expect("Restarting")
        vt.advance(0.1)  # stabilized at 160; the trigger was due at 100 + 30 already


def test_completed_micro_batch_triggers_the_pending_rescale(vt: VirtualTime) -> None:
    params = dataclasses.replace(PARAMS, trigger_max_delay=1000.0, cooldown=0.0)
    with StateContext(vt, share=1, requirements=BOUNDS_3, params=params) as ctx:
        state = ctx.enter(lambda c: Executing(c, 1, 1))
        vt.run_pending()
        ctx.share = 3
        state.on_resources_changed()
        vt.advance(50)
        assert ctx.transitions == []  # desired, but no micro-batch completed yet
        ctx.expect("Restarting")
        state.on_query_event(progress())
        assert vt.now() == 50


def test_requirement_change_is_the_trigger(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, requirements=BOUNDS_4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.requirements = ResourceRequirements(1, 2)
        ctx.share = 2
        ctx.expect("Restarting")
        state.on_requirements_changed()
        vt.run_pending()
        assert ctx.last.args["trigger"] is Trigger.REQUIREMENTS_CHANGED
        assert "outside the bounds [1, 2]" in ctx.last.args["reason"]


def test_a_change_is_the_trigger_only_of_rescales_toward_what_it_asked(vt: VirtualTime) -> None:
    """A raised upper bound asks for more slots: the live scale-up onto the slots that come is
    its rescale, an executor lost while they have not come is not; the same for a target."""
    with StateContext(vt, share=4, requirements=BOUNDS_4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.requirements = ResourceRequirements(1, 8)
        state.on_requirements_changed()  # the executors it asks for do not come (yet)
        assert ctx.live_rescales == []
        ctx.share = 2  # executors are lost meanwhile
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.RESOURCES_LOST
        state.on_requirements_changed()  # the bounds asked for again
        ctx.share = 4
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.REQUIREMENTS_CHANGED
        ctx.target, ctx.target_partitions = ScalingTarget(8, 4), 4
        state.on_requirements_changed(autoscaler=True)
        ctx.share = 2
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.RESOURCES_LOST
        ctx.target = ScalingTarget(2, 4)  # a scale-down: its slots going is its doing
        ctx.share = 4
        state.on_resources_changed()
        state.on_requirements_changed(autoscaler=True)
        ctx.share = 2
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.AUTOSCALER
        vt.advance(1000)


def test_new_bounds_while_a_target_waits_make_the_rescale_theirs(vt: VirtualTime) -> None:
    """The autoscaler's target waits for its executors when the bounds change: the rescale
    the executors bring then is the bounds' (the last change); once it has landed, an
    executor lost is the resources' and its return toward the target the autoscaler's."""
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 12)) as ctx:
        state = ctx.enter(lambda c: Executing(c, 12, 4))
        vt.advance(40)
        ctx.target, ctx.target_partitions = ScalingTarget(6, 12), 12
        state.on_requirements_changed(autoscaler=True)  # 6 slots asked, 4 alive: it waits
        assert ctx.live_rescales == []
        ctx.requirements = ResourceRequirements(2, 12)  # bounds put meanwhile
        state.on_requirements_changed()
        assert ctx.live_rescales == []
        ctx.share = 6
        state.on_resources_changed()
        assert (ctx.live_rescales[-1][0].target_slots, ctx.live_rescales[-1][1]) == (
            6, Trigger.REQUIREMENTS_CHANGED)
        ctx.share = 4
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.RESOURCES_LOST
        ctx.share = 6
        state.on_resources_changed()
        assert ctx.live_rescales[-1][1] is Trigger.AUTOSCALER
        vt.advance(1000)
    assert ctx.transitions == []


def test_a_restart_onto_the_partitions_the_autoscaler_asked_is_its_own(vt: VirtualTime) -> None:
    """Even on a slot fewer than before: the partitions it asked for are why it restarts."""
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 8)) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.target, ctx.target_partitions = ScalingTarget(6, 6), 6
        state.on_requirements_changed(autoscaler=True)
        ctx.share = 3  # its executors do not come, and one is lost
        ctx.expect("Restarting")
        state.on_resources_changed()
        vt.run_pending()
        vt.advance(100)
        assert (ctx.last.args["target_parallelism"], ctx.last.args["target_slots"]) == (6, 3)
        assert ctx.last.args["trigger"] is Trigger.AUTOSCALER


def test_small_scale_up_is_held_back_and_logged_once(vt: VirtualTime) -> None:
    params = dataclasses.replace(PARAMS, min_parallelism_increase=2)
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 8), params=params) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.share = 5
        state.on_resources_changed()
        state.on_resources_changed()
        vt.advance(10_000)
    assert ctx.transitions == []
    held = [d for d in ctx.decisions if d[0] == "hold back scale-up"]
    assert len(held) == 1 and "min-parallelism-increase 2" in held[0][1]


def test_held_back_scale_up_is_forced_after_scaling_interval_max(vt: VirtualTime) -> None:
    params = dataclasses.replace(PARAMS, min_parallelism_increase=2, scaling_interval_max=120.0)
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 5), params=params) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.share = 5  # desired (upper bound 5), but only +1
        state.on_resources_changed()
        vt.advance(119.9)
        assert ctx.transitions == []
        ctx.expect("Restarting")
        vt.advance(0.1)
        assert ctx.last.args["target_parallelism"] == 5
        assert "scaling-interval.max" in ctx.last.args["reason"]


def test_held_back_clock_resets_when_the_scale_up_goes_away(vt: VirtualTime) -> None:
    params = dataclasses.replace(PARAMS, min_parallelism_increase=2, scaling_interval_max=120.0)
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 5), params=params) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.share = 5
        state.on_resources_changed()
        vt.advance(60)
        ctx.share = 4
        state.on_resources_changed()
        vt.advance(30)
        ctx.share = 5
        state.on_resources_changed()  # held back anew at t=130
        vt.advance(119)
        assert ctx.transitions == []
        ctx.expect("Restarting")
        vt.advance(1)


def test_query_that_cannot_repartition_only_rescales_live(vt: VirtualTime) -> None:
    no = RepartitionSupport(False, "no checkpoint location")
    with StateContext(vt, share=4, requirements=BOUNDS_4, support=no) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(40)
        ctx.share = 3
        state.on_resources_changed()
        vt.advance(10_000)
        assert state.slots == 3
    ((decision, _),) = ctx.live_rescales
    assert "no checkpoint location" in decision.reason
    assert ctx.transitions == []


def test_first_micro_batch_completes_the_pending_record(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, requirements=BOUNDS_4) as ctx:
        ctx.history.open(Trigger.NEW_RESOURCES, "restart", from_parallelism=2, to_parallelism=4,
                         from_slots=2, to_slots=4, reason="x")
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        vt.advance(7)
        state.on_query_event(progress())
    (record,) = ctx.history.records()
    assert record.outcome == "completed" and record.duration == 7


def test_failure_restarts_when_the_strategy_allows(vt: VirtualTime) -> None:
    expected = Failure("boom", "STREAM_FAILED", origin="query")
    with StateContext(vt, share=4, requirements=BOUNDS_4,
                      failure_results=[FailureResult.restart(expected, 1.5, "s")]) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        ctx.expect("Restarting")
        state.on_query_event(terminated("boom"))
        assert ctx.last.args["backoff"] == 1.5
        assert ctx.last.args["trigger"] is Trigger.FAILURE
        assert ctx.last.args["target_parallelism"] is None
    assert ctx.handled_failures == [expected]


def test_failure_without_restart_goes_failing_with_the_original_error(vt: VirtualTime) -> None:
    expected = Failure("boom", "STREAM_FAILED", origin="query")
    with StateContext(vt, share=4, failure_results=[FailureResult.fail(expected, "s")]) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        ctx.expect("Failing")
        state.on_query_event(terminated("boom"))
        assert ctx.last.args["failure"] == expected


def test_query_ending_by_itself_finishes(vt: VirtualTime) -> None:
    with StateContext(vt, share=4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        ctx.expect("Finished")
        state.on_query_event(terminated(None))
        assert ctx.last.args["status"] == "FINISHED"


def test_cancel_and_stop_with_savepoint(vt: VirtualTime) -> None:
    with StateContext(vt, share=4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        ctx.expect("Canceling")
        state.cancel()
    with StateContext(vt, share=4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 4, 4))
        ctx.expect("StopWithSavepoint")
        state.stop_with_savepoint()


def test_leaving_cancels_the_timing_timers(vt: VirtualTime) -> None:
    with StateContext(vt, share=1, requirements=BOUNDS_3) as ctx:
        state = ctx.enter(lambda c: Executing(c, 1, 1))
        ctx.share = 3
        state.on_resources_changed()
        ctx.expect("Canceling")
        state.cancel()
    assert vt.pending() == []
    vt.advance(1000)
    assert len(ctx.transitions) == 1


def test_a_restart_onto_more_slots_waits_for_the_warm_up_of_new_executors(
        vt: VirtualTime) -> None:
    with StateContext(vt, share=1, requirements=BOUNDS_3) as ctx:
        state = ctx.enter(lambda c: Executing(c, 1, 1))
        vt.advance(30)
        ctx.share, ctx.warming = 3, True
        state.on_resources_changed()
        vt.advance(100)
        assert ctx.transitions == [], "the query runs on at 1 partition meanwhile"
        assert ctx.decisions[-1][0] == "wait for warm-up"
        assert state.restart_deferred
        ctx.warming = False
        state.on_warm_up_ended()
        assert ctx.transitions == [], "the restart waits for the next batch boundary"
        ctx.expect("Restarting")
        state.on_query_event(progress())
        assert ctx.last.args["target_parallelism"] == 3


def test_after_the_warm_up_a_restart_goes_at_the_max_delay_without_a_batch(
        vt: VirtualTime) -> None:
    params = dataclasses.replace(PARAMS, trigger_max_delay=6.0)
    with StateContext(vt, share=1, requirements=BOUNDS_3, params=params) as ctx:
        state = ctx.enter(lambda c: Executing(c, 1, 1))
        vt.advance(30)
        ctx.share, ctx.warming = 3, True
        state.on_resources_changed()
        vt.advance(100)
        ctx.warming = False
        state.on_warm_up_ended()
        vt.advance(5.9)
        assert ctx.transitions == []
        ctx.expect("Restarting")
        vt.advance(0.1)


def test_a_restart_onto_fewer_slots_needed_during_a_warm_up_goes_at_once(
        vt: VirtualTime) -> None:
    with StateContext(vt, share=2, requirements=BOUNDS_4) as ctx:
        state = ctx.enter(lambda c: Executing(c, 2, 2))
        vt.advance(30)
        ctx.share, ctx.warming = 4, True
        state.on_resources_changed()
        vt.advance(100)
        assert ctx.transitions == [] and state.restart_deferred
        ctx.share = 1  # executors lost while the new ones warm up: 2 partitions on 1 slot
        state.on_resources_changed()
        assert not state.restart_deferred


def test_a_restart_onto_fewer_slots_does_not_wait_for_a_warm_up(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, requirements=BOUNDS_3) as ctx:
        state = ctx.enter(lambda c: Executing(c, 3, 3))
        vt.advance(100)
        ctx.share, ctx.warming = 2, True
        state.on_resources_changed()
        ctx.expect("Restarting")
        vt.advance(60)
        assert ctx.last.args["target_parallelism"] == 2


def test_after_the_warm_up_a_restart_no_longer_needed_is_not_made(vt: VirtualTime) -> None:
    with StateContext(vt, share=1, requirements=BOUNDS_3) as ctx:
        state = ctx.enter(lambda c: Executing(c, 1, 1))
        vt.advance(30)
        ctx.share, ctx.warming = 3, True
        state.on_resources_changed()
        vt.advance(100)
        ctx.share, ctx.warming = 1, False  # the new executors went again
        state.on_warm_up_ended()
        vt.advance(100)
        assert ctx.transitions == []
