"""Created."""

from __future__ import annotations

import pytest
from scheduler_fakes import StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.states import Created
from spark_adaptive.errors import ConflictError


def test_the_first_run_taken_over_goes_executing_with_the_submission_timing(
        vt: VirtualTime) -> None:
    with StateContext(vt) as ctx:
        state = ctx.enter(Created)
        ctx.expect("Executing")
        result = StartResult(ok=True, parallelism=3, query_id="q", run_id="r")
        state.adopt(result, 2, "started at 3 partitions: test")
        assert ctx.last.args == {"result": result, "slots": 2, "initial": True,
                                 "reason": "started at 3 partitions: test"}


def test_cancel_finishes_canceled(vt: VirtualTime) -> None:
    with StateContext(vt) as ctx:
        state = ctx.enter(Created)
        ctx.expect("Finished")
        state.cancel()
        assert ctx.last.args["status"] == "CANCELED"


def test_ignores_resources_and_refuses_stop_with_savepoint(vt: VirtualTime) -> None:
    with StateContext(vt, share=4) as ctx:
        state = ctx.enter(Created)
        state.on_resources_changed()
        state.on_requirements_changed()
        vt.advance(1000)
        with pytest.raises(ConflictError, match="state Created"):
            state.stop_with_savepoint()
    assert ctx.transitions == []


def test_the_fake_fails_on_a_missing_transition(vt: VirtualTime) -> None:
    with pytest.raises(AssertionError, match="No transition to WaitingForResources"):
        with StateContext(vt) as ctx:
            ctx.enter(Created)
            ctx.expect("WaitingForResources")


def test_the_fake_fails_on_an_unexpected_transition(vt: VirtualTime) -> None:
    with StateContext(vt) as ctx:
        state = ctx.enter(Created)
        with pytest.raises(AssertionError, match="Unexpected state transition to Finished"):
            state.cancel()
