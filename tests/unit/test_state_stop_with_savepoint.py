"""StopWithSavepoint: a clean stop for good."""

from __future__ import annotations

from scheduler_fakes import StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.restart import Failure, FailureResult
from spark_adaptive.core.streaming.states import StopWithSavepoint


def test_clean_stop_finishes(vt: VirtualTime) -> None:
    with StateContext(vt, running=True) as ctx:
        state = ctx.enter(StopWithSavepoint)
        assert [c.arg for c in ctx.stops] == [True]
        state.stop_with_savepoint()  # asking twice changes nothing
        assert len(ctx.stops) == 1
        ctx.expect("Finished")
        ctx.resolve_stop(StopResult(clean=True))
        assert ctx.last.args["status"] == "FINISHED"
        assert "cleanly" in ctx.last.args["reason"]


def test_unclean_stop_still_finishes_and_says_so(vt: VirtualTime) -> None:
    with StateContext(vt, running=True) as ctx:
        ctx.enter(StopWithSavepoint)
        ctx.expect("Finished")
        ctx.resolve_stop(StopResult(clean=False))
        assert ctx.last.args["status"] == "FINISHED"
        assert "replayed" in ctx.last.args["reason"]


def test_failure_during_the_stop_goes_to_the_restart_strategy(vt: VirtualTime) -> None:
    failure = Failure("boom", origin="stop")
    with StateContext(vt, running=True,
                      failure_results=[FailureResult.restart(failure, 1.0, "s")]) as ctx:
        ctx.enter(StopWithSavepoint)
        ctx.expect("Restarting")
        ctx.resolve_stop(StopResult(clean=False, error="boom"))
    assert ctx.handled_failures == [failure]


def test_failure_during_the_stop_without_restart_fails(vt: VirtualTime) -> None:
    failure = Failure("boom", origin="stop")
    with StateContext(vt, running=True, failure_results=[FailureResult.fail(failure)]) as ctx:
        ctx.enter(StopWithSavepoint)
        ctx.expect("Failing")
        ctx.resolve_stop(StopResult(clean=False, error="boom"))


def test_cancel_goes_canceling(vt: VirtualTime) -> None:
    with StateContext(vt, running=True) as ctx:
        state = ctx.enter(StopWithSavepoint)
        ctx.expect("Canceling")
        state.cancel()
        ctx.resolve_stop()  # the clean stop's answer comes to a state that is gone
    assert len(ctx.transitions) == 1
