"""Failing: keeps the original failure all the way to Finished."""

from __future__ import annotations

from scheduler_fakes import StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states import Failing

FAILURE = Failure("org.apache.spark.SparkException: Job aborted", "STREAM_FAILED", "query")


def test_stops_what_runs_then_finishes_failed_with_the_same_failure(vt: VirtualTime) -> None:
    with StateContext(vt, running=True) as ctx:
        ctx.enter(lambda c: Failing(c, FAILURE))
        assert [c.arg for c in ctx.stops] == [False]
        ctx.expect("Finished")
        ctx.resolve_stop()
        assert ctx.last.args["status"] == "FAILED"
        assert ctx.last.args["failure"] is FAILURE


def test_already_stopped_finishes_after_the_constructor(vt: VirtualTime) -> None:
    with StateContext(vt, running=False) as ctx:
        ctx.enter(lambda c: Failing(c, FAILURE))
        assert ctx.stops == []
        ctx.expect("Finished")
        vt.run_pending()
        assert ctx.last.args["failure"] is FAILURE


def test_cancel_goes_canceling(vt: VirtualTime) -> None:
    with StateContext(vt, running=True) as ctx:
        state = ctx.enter(lambda c: Failing(c, FAILURE))
        ctx.expect("Canceling")
        state.cancel()
