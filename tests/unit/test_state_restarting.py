"""Restarting: clean stop, backoff, then start again or wait for resources."""

from __future__ import annotations

from scheduler_fakes import StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.restart import Failure, FailureResult
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


def test_stop_timings_go_to_the_pending_record(vt: VirtualTime) -> None:
    with StateContext(vt, share=3, running=True, requirements=BOUNDS) as ctx:
        ctx.history.open(Trigger.NEW_RESOURCES, "restart", from_parallelism=1, to_parallelism=3,
                         from_slots=1, to_slots=3, reason="x")
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.expect("CreatingExecutionGraph")
        ctx.resolve_stop(StopResult(clean=True, timings=(("stop", 0.7),)))
        vt.run_pending()
    assert dict(ctx.history.records()[0].timings) == {"stop": 0.7}


def test_a_run_that_failed_during_the_stop_fails_when_the_strategy_allows_no_restart(
        vt: VirtualTime) -> None:
    failure = Failure("org.apache.spark.SparkException: foreachBatch raised", origin="stop")
    with StateContext(vt, share=3, running=True, requirements=BOUNDS,
                      failure_results=[FailureResult.fail(failure, "none")]) as ctx:
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.expect("Failing")
        ctx.resolve_stop(StopResult(clean=False, error=failure.message))
        assert ctx.last.args["failure"] == failure
        assert "failed while stopping for a restart" in ctx.last.args["reason"]
    assert ctx.handled_failures == [failure]


def test_a_run_that_failed_during_the_stop_restarts_after_the_strategys_backoff(
        vt: VirtualTime) -> None:
    failure = Failure("boom", origin="stop")
    with StateContext(vt, share=3, running=True, requirements=BOUNDS,
                      failure_results=[FailureResult.restart(failure, 2.0, "fixed")]) as ctx:
        ctx.enter(lambda c: Restarting(c, 0.0, 3))
        ctx.resolve_stop(StopResult(clean=False, error="boom"))
        vt.advance(1.9)
        assert ctx.transitions == []
        ctx.expect("CreatingExecutionGraph")
        vt.advance(0.1)
        assert "target parallelism 3 is still available" in ctx.last.args["reason"]
    assert ctx.handled_failures == [failure]


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
