"""Canceling."""

from __future__ import annotations

from scheduler_fakes import StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.streaming.states import Canceling


def test_stops_at_once_then_finishes_canceled(vt: VirtualTime) -> None:
    with StateContext(vt, running=True) as ctx:
        state = ctx.enter(Canceling)
        assert [c.arg for c in ctx.stops] == [False]  # not clean: do not wait for the batch
        state.cancel()
        assert len(ctx.stops) == 1
        ctx.expect("Finished")
        ctx.resolve_stop()
        assert ctx.last.args["status"] == "CANCELED"


def test_nothing_running_finishes_right_after_the_constructor(vt: VirtualTime) -> None:
    with StateContext(vt, running=False) as ctx:
        ctx.enter(Canceling)
        assert ctx.stops == []
        ctx.expect("Finished")
        vt.run_pending()
        assert ctx.last.args["status"] == "CANCELED"
