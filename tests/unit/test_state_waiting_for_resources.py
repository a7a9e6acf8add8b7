"""WaitingForResources: submission timing and the resource-wait timeout."""

from __future__ import annotations

import math

import pytest
from scheduler_fakes import PARAMS, StateContext

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.states import SchedulingParams, WaitingForResources
from spark_adaptive.errors import ConflictError

REACTIVE = SchedulingParams(resource_wait_timeout=math.inf, submission_stabilization=0.0,
                            cooldown=30.0, executing_stabilization=60.0, trigger_max_delay=0.0)


def test_does_not_transition_from_its_constructor(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 4)) as ctx:
        ctx.enter(WaitingForResources)  # StateContext.enter asserts no transition happened
        ctx.expect("CreatingExecutionGraph")
        vt.run_pending()


def test_desired_resources_go_at_once(vt: VirtualTime) -> None:
    with StateContext(vt, share=4, requirements=ResourceRequirements(1, 4)) as ctx:
        ctx.enter(WaitingForResources)
        ctx.expect("CreatingExecutionGraph")
        vt.run_pending()
        assert vt.now() == 0
        assert ctx.last.args["fail_without_resources"] is False
        assert "desired resources available (4 slots)" in ctx.last.args["reason"]


def test_sufficient_resources_wait_for_the_stabilization_timeout(vt: VirtualTime) -> None:
    with StateContext(vt, share=2, requirements=ResourceRequirements(1, 4)) as ctx:
        ctx.enter(WaitingForResources)
        vt.advance(9.9)
        assert ctx.transitions == []
        ctx.expect("CreatingExecutionGraph")
        vt.advance(0.1)
        assert "stable for 10s" in ctx.last.args["reason"]


def test_stabilization_counts_from_the_first_sufficient_change(vt: VirtualTime) -> None:
    with StateContext(vt, share=None, requirements=ResourceRequirements(1, 4)) as ctx:
        state = ctx.enter(WaitingForResources)
        vt.advance(50)
        ctx.share = 1
        state.on_resources_changed()
        vt.advance(5)
        ctx.share = 2
        state.on_resources_changed()
        vt.advance(4.9)
        assert ctx.transitions == []
        ctx.expect("CreatingExecutionGraph")
        vt.advance(0.1)
        assert vt.now() == 60


def test_more_resources_reaching_desired_go_at_once(vt: VirtualTime) -> None:
    with StateContext(vt, share=1, requirements=ResourceRequirements(1, 4)) as ctx:
        state = ctx.enter(WaitingForResources)
        vt.advance(3)
        ctx.share = 4
        ctx.expect("CreatingExecutionGraph")
        state.on_resources_changed()
        vt.run_pending()
        assert vt.now() == 3


def test_lower_requirements_count_as_a_change(vt: VirtualTime) -> None:
    with StateContext(vt, share=2, requirements=ResourceRequirements(1, 4)) as ctx:
        state = ctx.enter(WaitingForResources)
        vt.advance(1)
        ctx.requirements = ResourceRequirements(1, 2)
        ctx.expect("CreatingExecutionGraph")
        state.on_requirements_changed()
        vt.run_pending()
        assert vt.now() == 1


def test_resource_wait_timeout_goes_on_unconditionally(vt: VirtualTime) -> None:
    with StateContext(vt, share=None) as ctx:
        ctx.enter(WaitingForResources)
        vt.advance(299.9)
        assert ctx.transitions == []
        ctx.expect("CreatingExecutionGraph")
        vt.advance(0.1)
        assert ctx.last.args["fail_without_resources"] is True
        assert "resource wait timeout (300s)" in ctx.last.args["reason"]


def test_reactive_waits_forever_and_starts_without_stabilization(vt: VirtualTime) -> None:
    with StateContext(vt, share=None, params=REACTIVE,
                      requirements=ResourceRequirements(1, 32768)) as ctx:
        state = ctx.enter(WaitingForResources)
        vt.advance(1e7)
        assert ctx.transitions == []
        ctx.share = 2
        ctx.expect("CreatingExecutionGraph")
        state.on_resources_changed()
        vt.run_pending()


def test_cancel_finishes_canceled_and_drops_timers(vt: VirtualTime) -> None:
    with StateContext(vt, share=None) as ctx:
        state = ctx.enter(WaitingForResources)
        ctx.expect("Finished")
        state.cancel()
        assert ctx.last.args["status"] == "CANCELED"
    assert vt.pending() == []  # on_leave cancelled the wait timeout
    vt.advance(1000)


def test_refuses_stop_with_savepoint(vt: VirtualTime) -> None:
    with StateContext(vt) as ctx:
        state = ctx.enter(WaitingForResources)
        with pytest.raises(ConflictError):
            state.stop_with_savepoint()


def test_params_are_the_submission_ones(vt: VirtualTime) -> None:
    with StateContext(vt, params=PARAMS) as ctx:
        state = ctx.enter(WaitingForResources)
        assert state.timing.stabilization == PARAMS.submission_stabilization
        assert state.timing.max_trigger_delay == 0
