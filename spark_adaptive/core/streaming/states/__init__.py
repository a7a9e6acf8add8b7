"""The scheduler states, one module each. Their ``name`` is public (REST, logs)."""

from spark_adaptive.core.streaming.states.base import (
    FinishedStatus,
    SchedulingParams,
    State,
    StateName,
)
from spark_adaptive.core.streaming.states.canceling import Canceling
from spark_adaptive.core.streaming.states.created import Created
from spark_adaptive.core.streaming.states.creating_execution_graph import CreatingExecutionGraph
from spark_adaptive.core.streaming.states.executing import Executing
from spark_adaptive.core.streaming.states.failing import Failing
from spark_adaptive.core.streaming.states.finished import Finished
from spark_adaptive.core.streaming.states.restarting import Restarting
from spark_adaptive.core.streaming.states.stop_with_savepoint import StopWithSavepoint
from spark_adaptive.core.streaming.states.waiting_for_resources import WaitingForResources

__all__ = [
    "Canceling", "Created", "CreatingExecutionGraph", "Executing", "Failing", "Finished",
    "FinishedStatus", "Restarting", "SchedulingParams", "State", "StateName",
    "StopWithSavepoint", "WaitingForResources",
]
