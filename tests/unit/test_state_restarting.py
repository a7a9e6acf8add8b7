"""Restarting: clean stop, backoff, then start again or wait for resources."""

from __future__ import annotations

from scheduler_fakes import StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.states import Restarting

BOUNDS = ResourceRequirements(1, 4)


def test_stops_cleanly_then_starts_at_the_target(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=True, requirements=BOUNDS) as ctx:
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        assert [c.arg for c in ctx.stops] == [True]  # clean
        ctx.expect("CreatingExecutionGraph")
        ctx.resolve_stop()
        vt.run_pending()
        assert "target parallelism 3 is still available" in ctx.last.args["reason"]


def test_waits_the_backoff_after_the_stop(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, running=True, requirements=BOUNDS) as ctx:
        ctx.enter(lambda c: Restarting(c, 5.0, None))
        vt.advance(3)
        ctx.resolve_stop()
        vt.advance(4.9)
        assert ctx.transitions == []
        ctx.expect("CreatingExecutionGraph")
        vt.advance(0.1)
        assert vt.now() == 8
        assert "desired resources" in ctx.last.args["reason"]


def test_already_stopped_query_is_not_stopped_again(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, running=False, requirements=BOUNDS) as ctx:
        ctx.enter(lambda c: Restarting(c, 2.0, None))
        assert ctx.stops == []
        vt.advance(1.9)
        ctx.expect("CreatingExecutionGraph")
        vt.advance(0.1)


def test_target_gone_goes_waiting_for_resources(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=True, requirements=BOUNDS) as ctx:
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.share = 2
        ctx.expect("WaitingForResources")
        ctx.resolve_stop()
        vt.run_pending()
        assert "target parallelism 3 is gone" in ctx.last.args["reason"]


def test_after_a_failure_without_desired_resources_waits(vt: VirtualTime) -> None:
    with StateContext(vt, share=2, running=False, requirements=BOUNDS) as ctx:
        ctx.enter(lambda c: Restarting(c, 1.0, None))
        ctx.expect("WaitingForResources")
        vt.advance(1)


def test_no_share_at_all_waits(vt: VirtualTime) -> None:
    with StateContext(vt, share=None, running=False, requirements=BOUNDS) as ctx:
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.expect("WaitingForResources")
        vt.run_pending()


def test_stop_timings_go_to_the_pending_record_and_stop_errors_are_ignored(
        vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=True, requirements=BOUNDS) as ctx:
        ctx.history.open(Trigger.NEW_RESOURCES, "restart", from_parallelism=1, to_parallelism=3,
                         from_slots=1, to_slots=3, reason="x")
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.expect("CreatingExecutionGraph")
        ctx.resolve_stop(StopResult(clean=True, error="late failure", timings=(("stop", 0.7),)))
        vt.run_pending()
    assert dict(ctx.history.records()[0].timings) == {"stop": 0.7}
    assert ("ignore failure while restarting", "late failure") in ctx.decisions


def test_cancel_while_stopping_goes_canceling_and_the_stale_stop_does_nothing(
        vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=True, requirements=BOUNDS) as ctx:
        state = ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.expect("Canceling")
        state.cancel()
        ctx.resolve_stop()
        vt.advance(100)
    assert [t.target for t in ctx.transitions] == ["Canceling"]


def test_cancel_during_the_backoff(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=False, requirements=BOUNDS) as ctx:
        state = ctx.enter(lambda c: Restarting(c, 10.0, 3))
        vt.advance(5)
        ctx.expect("Canceling")
        state.cancel()
    assert vt.pending() == []  # the backoff timer went with the state


def test_resource_changes_are_ignored_until_the_backoff_ends(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=False, requirements=BOUNDS) as ctx:
        state = ctx.enter(lambda c: Restarting(c, 10.0, 3))
        ctx.share = 4
        state.on_resources_changed()
        assert ctx.transitions == []
        ctx.expect("CreatingExecutionGraph")
        vt.advance(10)
        assert "desired" in ctx.last.args["reason"]
