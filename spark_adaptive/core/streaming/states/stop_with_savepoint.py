"""StopWithSavepoint: stop the query cleanly for good.

Spark's equivalent of Flink's stop-with-savepoint: the query is stopped
between two micro-batches, so its checkpoint is complete and another run can
resume from it. Clean stop → Finished(FINISHED). If the query failed while
being stopped, the failure goes to the restart strategy (Restarting or
Failing), as Flink does with a task failure during stop-with-savepoint: a
restart gives the stop up, and whoever asked for it hears that it failed
(the app's ``stop_with_savepoint()`` raises) while the query goes on.
``cancel`` → Canceling.
"""

from __future__ import annotations

from typing import Protocol

from spark_adaptive.core.ports import StopResult
from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states.base import (
    HandlesFailures,
    State,
    StateName,
    StopsQuery,
    ToCanceling,
    ToFailing,
    ToFinished,
    ToRestarting,
    restart_or_fail,
)


class Context(ToFinished, ToRestarting, ToFailing, ToCanceling, StopsQuery, HandlesFailures,
              Protocol):
    pass


class StopWithSavepoint(State):
    name = StateName.STOP_WITH_SAVEPOINT

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx
        ctx.stop_query(self, True, self._on_stopped)

    def _on_stopped(self, result: StopResult) -> None:
        if result.error is not None:
            restart_or_fail(self._ctx, Failure(result.error, origin="stop"),
                            "the query failed while stopping")
        elif result.clean:
            self._ctx.go_to_finished("FINISHED", "stopped cleanly between two micro-batches")
        else:
            self._ctx.go_to_finished(
                "FINISHED", "stopped; the last micro-batch did not finish and will be replayed "
                            "by the next run from this checkpoint")

    def cancel(self) -> None:
        self._ctx.go_to_canceling("cancel requested while stopping with savepoint")

    def stop_with_savepoint(self) -> None:
        pass  # already doing it
