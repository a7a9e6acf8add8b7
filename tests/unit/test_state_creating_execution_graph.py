"""CreatingExecutionGraph: starting the query."""

from __future__ import annotations

import pytest
from scheduler_fakes import StateContext, ok

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.restart import FailedStart, Failure, FailureResult
from spark_adaptive.core.streaming.states import CreatingExecutionGraph
from spark_adaptive.core.streaming.states.creating_execution_graph import START_RETRY_DELAY
from spark_adaptive.errors import ConflictError

FAILED_START = StartResult(ok=False, error="java.io.IOException: checkpoint unreachable")


def test_starts_at_the_share_then_executing(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        ctx.enter(CreatingExecutionGraph)
        assert ctx.starts == []  # not from the constructor
        vt.run_pending()
        assert [c.arg for c in ctx.starts] == [3]
        ctx.expect("Executing")
        result = ok(3)
        ctx.resolve_start(result)
        assert ctx.last.args["result"] is result
        assert ctx.last.args["slots"] == 3
        assert ctx.decisions == [("start at 3 partitions", "share")]


def test_starts_at_the_partitions_it_must_keep(vt: VirtualTime) -> None:
    with StateContext(vt, share=2, fixed_partitions=4) as ctx:
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        assert [c.arg for c in ctx.starts] == [4]
        ctx.expect("Executing")
        ctx.resolve_start(ok(4))
        assert ctx.last.args["slots"] == 2


def test_initial_schedule_is_recorded(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.expect("Executing")
        ctx.resolve_start(
            StartResult(ok=True, parallelism=3, run_id="r", timings=(("start", 1.5),)))
    (record,) = ctx.history.records()
    assert (record.trigger, record.kind, record.from_parallelism, record.to_parallelism,
            record.to_slots, record.outcome) == (Trigger.INITIAL_SCHEDULE, "restart", 0, 3, 3,
                                                 "pending")
    assert dict(record.timings) == {"start": 1.5}


def test_a_restart_record_gets_the_started_parallelism(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        ctx.history.open(Trigger.NEW_RESOURCES, "restart", from_parallelism=1, to_parallelism=3,
                         from_slots=1, to_slots=3, reason="more")
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.expect("Executing")
        ctx.resolve_start(ok(2))  # the driver could only start 2
    (record,) = ctx.history.records()
    assert record.to_parallelism == 2 and record.trigger is Trigger.NEW_RESOURCES


def test_no_share_after_the_wait_timeout_fails_the_query(vt: VirtualTime) -> None:
    with StateContext(vt, share=None) as ctx:
        ctx.enter(lambda c: CreatingExecutionGraph(c, fail_without_resources=True))
        ctx.expect("Finished")
        vt.run_pending()
        assert ctx.last.args["status"] == "FAILED"
        failure = ctx.last.args["failure"]
        assert failure.origin == "resources"
        assert "Not enough resources available" in failure.message
    assert ctx.starts == []


def test_share_vanished_goes_back_to_waiting(vt: VirtualTime) -> None:
    with StateContext(vt, share=None) as ctx:
        ctx.enter(CreatingExecutionGraph)
        ctx.expect("WaitingForResources")
        vt.run_pending()
    assert ctx.starts == []


def test_failed_start_restarts_when_the_strategy_allows(vt: VirtualTime) -> None:
    failure = Failure(FAILED_START.error or "", origin="start")
    with StateContext(vt, share=3,
                      failure_results=[FailureResult.restart(failure, 2.0, "fixed")]) as ctx:
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.expect("Restarting")
        ctx.resolve_start(FAILED_START)
        assert ctx.last.args["backoff"] == 2.0
        assert ctx.last.args["trigger"] is Trigger.FAILURE
        assert ctx.last.args["failure"] == failure
    assert ctx.handled_failures == [failure]
    assert ctx.history.records()[0].outcome == "failed"


def test_failed_start_fails_when_the_strategy_does_not_allow(vt: VirtualTime) -> None:
    failure = Failure(FAILED_START.error or "", origin="start")
    with StateContext(vt, share=3, failure_results=[FailureResult.fail(failure, "none")]) as ctx:
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.expect("Failing")
        ctx.resolve_start(FAILED_START)
        assert ctx.last.args["failure"] == failure


def test_cancel_before_the_start_finishes_canceled(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        state = ctx.enter(CreatingExecutionGraph)
        ctx.expect("Finished")
        state.cancel()
        assert ctx.last.args["status"] == "CANCELED"
        vt.run_pending()
    assert ctx.starts == []


def test_cancel_during_the_start_waits_for_it_then_cancels(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        state = ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        state.cancel()
        assert ctx.transitions == []  # the query may be coming up: do not stop it blind
        ctx.expect("Canceling")
        ctx.resolve_start(ok(3))


def test_cancel_during_a_start_that_fails_finishes_canceled(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        state = ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        state.cancel()
        ctx.expect("Finished")
        ctx.resolve_start(FAILED_START)
        assert ctx.last.args["status"] == "CANCELED"
    assert ctx.handled_failures == []


def test_ignores_resource_changes_and_refuses_stop_with_savepoint(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        state = ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.share = 1
        state.on_resources_changed()
        with pytest.raises(ConflictError):
            state.stop_with_savepoint()
        vt.advance(100)
    assert ctx.transitions == []


# -- the start of a rescale's restart ------------------------------------------------------
def test_a_rescale_restarts_failed_start_is_retried_at_the_target_then_the_old_partitions(
        vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        ctx.rescaled_from = 2
        ctx.history.open(Trigger.NEW_RESOURCES, "restart", from_parallelism=2,
                         to_parallelism=3, from_slots=2, to_slots=3, reason="more")
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.resolve_start(FAILED_START)
        vt.advance(START_RETRY_DELAY)
        ctx.resolve_start(FAILED_START)
        vt.advance(START_RETRY_DELAY)
        assert [c.arg for c in ctx.starts] == [2]
        ctx.expect("Executing")
        ctx.resolve_start(ok(2))
        assert "starting it at 3 failed" in ctx.last.args["reason"]
    assert ctx.handled_failures == []  # not the restart strategy's
    assert ctx.start_failures == [(3, FAILED_START.error)]
    assert ctx.history.records()[0].outcome == "failed"


def test_a_rescale_restart_that_never_starts_goes_to_the_strategy_once(
        vt: VirtualTime) -> None:
    failure = Failure(FAILED_START.error or "", origin="start")
    with StateContext(vt, share=3, failure_results=[FailureResult.fail(failure, "none")]) as ctx:
        ctx.rescaled_from = 2
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        for _ in range(2):
            ctx.resolve_start(FAILED_START)
            vt.advance(START_RETRY_DELAY)
        ctx.expect("Failing")
        ctx.resolve_start(FAILED_START)
    assert ctx.handled_failures == [failure]


def test_an_unrecoverable_failed_start_of_a_rescale_restart_is_not_retried(
        vt: VirtualTime) -> None:
    refused = FailedStart(error="org.apache.spark.sql.AnalysisException: [PATH_NOT_FOUND]",
                          error_class="PATH_NOT_FOUND", recoverable=False)
    failure = Failure(refused.error or "", "PATH_NOT_FOUND", origin="start", recoverable=False)
    with StateContext(vt, share=3, failure_results=[FailureResult.fail(failure, "x")]) as ctx:
        ctx.rescaled_from = 2
        ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.expect("Failing")
        ctx.resolve_start(refused)
        assert ctx.last.args["failure"] == failure
    assert ctx.starts == []


def test_cancel_while_a_retry_waits_finishes_canceled(vt: VirtualTime) -> None:
    with StateContext(vt, share=3) as ctx:
        ctx.rescaled_from = 2
        state = ctx.enter(CreatingExecutionGraph)
        vt.run_pending()
        ctx.resolve_start(FAILED_START)
        ctx.expect("Finished")
        state.cancel()
        assert ctx.last.args["status"] == "CANCELED"
        vt.advance(10)
    assert ctx.starts == []
