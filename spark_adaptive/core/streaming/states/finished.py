"""Finished: terminal. The query ended FINISHED, CANCELED or FAILED.

Every event is ignored; cancelling again does nothing. A FAILED query keeps
its original :class:`~spark_adaptive.core.streaming.restart.Failure` (Spark's own error
text and class) so the application's ``awaitTermination()`` can raise it.
"""

from __future__ import annotations

from spark_adaptive.core.streaming.restart import Failure
from spark_adaptive.core.streaming.states.base import FinishedStatus, State, StateName


class Finished(State):
    name = StateName.FINISHED

    def __init__(self, status: FinishedStatus, failure: Failure | None = None) -> None:
        super().__init__()
        if (status == "FAILED") != (failure is not None):
            raise ValueError("a FAILED query, and only a FAILED one, carries its failure")
        self.status: FinishedStatus = status
        self.failure = failure

    def cancel(self) -> None:
        pass  # already terminal
