"""The scheduler states, one module each. Their ``name`` is public (REST, logs)."""

from spark_adaptive.core.states.base import FinishedStatus, SchedulingParams, State
from spark_adaptive.core.states.canceling import Canceling
from spark_adaptive.core.states.created import Created
from spark_adaptive.core.states.creating_execution_graph import CreatingExecutionGraph
from spark_adaptive.core.states.executing import Executing
from spark_adaptive.core.states.failing import Failing
from spark_adaptive.core.states.finished import Finished
from spark_adaptive.core.states.restarting import Restarting
from spark_adaptive.core.states.stop_with_savepoint import StopWithSavepoint
from spark_adaptive.core.states.waiting_for_resources import WaitingForResources

STATE_NAMES = (
    "Created", "WaitingForResources", "CreatingExecutionGraph", "Executing", "Restarting",
    "StopWithSavepoint", "Canceling", "Failing", "Finished",
)

__all__ = [
    "STATE_NAMES", "Canceling", "Created", "CreatingExecutionGraph", "Executing", "Failing",
    "Finished", "FinishedStatus", "Restarting", "SchedulingParams", "State", "StopWithSavepoint",
    "WaitingForResources",
]
