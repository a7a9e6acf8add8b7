"""What each streaming run's micro-batches cost: task time, tasks, backlog.

Spark runs a query's micro-batches as jobs in the job group of the query's run
(its run id), so the stages of those jobs belong to the run. Between two
progress events of a run, :class:`LoadTracker` adds up the run time of its
stages' tasks (the JVM shim reports it per stage: slot-seconds busy, what
Flink's busy time is) and keeps the most tasks one of its stages ran (what the
query can use at once). :meth:`LoadTracker.take` hands both over with the
batch's progress and starts again.

:func:`backlog_rows` reads a source's backlog from Spark's progress: the rows
between the offsets a batch ended at and the latest the source offered, where
the source reports both (Kafka's per-partition offsets, or one number), and
Kafka's ``avgOffsetsBehindLatest`` otherwise.

:func:`started_batch_rate` reads the arrival rate of the micro-batch that is
running from its entry in the offset log, which Spark writes before it runs the
batch: the rows between the offsets the last completed batch ended at and those
the new one reads up to, over the time between their starts. It is the input
rate Spark will report for that batch once it completes, known a whole batch
earlier; a batch that runs long (the load jumped) is the one it matters for.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from spark_adaptive.core.events import (
    Event,
    JobStarted,
    QueryIdle,
    QueryProgress,
    QueryTerminated,
    SourceProgress,
    StageCompleted,
    StageSubmitted,
)
from spark_adaptive.core.ports import StartedBatch

#: Stages remembered per application (older ones are forgotten first).
_STAGES = 4096
#: Job groups remembered as having started a job (a running query's comes back with every
#: micro-batch; groups not seen for longest are forgotten first).
_GROUPS = 1024


@dataclass(frozen=True)
class BatchLoad:
    """What the stages of one micro-batch cost: ``busy_time`` in slot-seconds (None when
    the listener does not report task time), the most ``tasks`` one stage ran, how many
    ``stages`` ran (one: no shuffle, so its tasks are all the query can run at once), and
    ``task_total``, the tasks of all its stages."""

    busy_time: float | None
    tasks: int | None
    stages: int = 0
    task_total: int = 0


class LoadTracker:
    """Task time and task counts per streaming run, from Spark's job and stage events."""

    def __init__(self) -> None:
        self._run_of_stage: OrderedDict[int, str] = OrderedDict()
        self._busy: dict[str, float] = {}
        self._tasks: dict[str, int] = {}
        self._stages: dict[str, int] = {}
        self._total: dict[str, int] = {}
        self._timed: set[str] = set()
        # Job groups (a streaming run's is its run id) that have started a job, newest last.
        self._working: OrderedDict[str, None] = OrderedDict()
        # Per run, its stages submitted and not completed: (stage, attempt) -> tasks.
        self._running: dict[str, dict[tuple[int, int], int]] = {}

    def started_work(self, run_id: str) -> bool:
        """Whether a job of the run has started (Spark runs its micro-batches as jobs
        in the run's job group) or it completed a micro-batch: until then, none of its
        tasks runs on any executor."""
        return run_id in self._working

    def _worked(self, group: str) -> None:
        self._working[group] = None
        self._working.move_to_end(group)
        while len(self._working) > _GROUPS:
            self._working.popitem(last=False)

    def on_event(self, event: Event) -> None:
        if isinstance(event, QueryProgress):
            # A completed micro-batch ran jobs, whether their starts reached here or not
            # (an event the listener bus dropped).
            self._worked(event.run_id)
            return
        if isinstance(event, QueryIdle):
            self._running.pop(event.run_id, None)  # no batch runs (a completion was lost)
            return
        if isinstance(event, JobStarted) and event.job_group:
            self._worked(event.job_group)
            for stage in event.stage_ids:
                self._run_of_stage[stage] = event.job_group
                self._run_of_stage.move_to_end(stage)
            while len(self._run_of_stage) > _STAGES:
                self._run_of_stage.popitem(last=False)
        elif isinstance(event, StageSubmitted):
            run = self._run_of_stage.get(event.stage_id)
            if run is not None:
                self._tasks[run] = max(self._tasks.get(run, 0), event.num_tasks)
                self._stages[run] = self._stages.get(run, 0) + 1
                self._total[run] = self._total.get(run, 0) + event.num_tasks
                self._running.setdefault(run, {})[(event.stage_id, event.attempt)] = \
                    event.num_tasks
        elif isinstance(event, StageCompleted):
            run = self._run_of_stage.get(event.stage_id)
            if run is not None:
                self._running.get(run, {}).pop((event.stage_id, event.attempt), None)
            if run is not None and event.task_time is not None:
                self._busy[run] = self._busy.get(run, 0.0) + event.task_time
                self._timed.add(run)
        elif isinstance(event, QueryTerminated):  # a run no one takes from is forgotten
            self.take(event.run_id)
            self._working.pop(event.run_id, None)
            # ... and so are its stages: one cancelled by the stop may complete after this,
            # and would open the run's sums again, for good.
            for stage in [st for st, run in self._run_of_stage.items() if run == event.run_id]:
                del self._run_of_stage[stage]

    def run_of(self, event: Event) -> str | None:
        """The streaming run a job or stage event belongs to, if it is one's."""
        if isinstance(event, JobStarted):
            return event.job_group
        if isinstance(event, (StageSubmitted, StageCompleted)):
            return self._run_of_stage.get(event.stage_id)
        return None

    def running_tasks(self, run_id: str) -> int:
        """The most tasks of a stage of the run's that was submitted and has not completed
        (0: none runs): Spark spreads them over every executor with a free slot, whatever
        slots the query is counted on (a source's partitions in a batch's first stage)."""
        return max(self._running.get(run_id, {}).values(), default=0)

    def take(self, run_id: str) -> BatchLoad:
        """What the run's stages cost since the last call for it, and start again."""
        busy = self._busy.pop(run_id, 0.0) if run_id in self._timed else None
        self._running.pop(run_id, None)  # the batch completed (or the run ended)
        self._timed.discard(run_id)
        return BatchLoad(busy, self._tasks.pop(run_id, None), self._stages.pop(run_id, 0),
                         self._total.pop(run_id, 0))


def backlog_rows(progress: QueryProgress) -> float | None:
    """Rows the query's sources hold beyond its last batch, None when none reports it."""
    total, known = 0.0, False
    for source in progress.sources:
        rows = _source_backlog(source)
        if rows is not None:
            total += rows
            known = True
    return total if known else None


def _source_backlog(source: SourceProgress) -> float | None:
    end, latest = _offsets(source.end_offset), _offsets(source.latest_offset)
    if end is not None and latest is not None and end.keys() == latest.keys():
        return float(sum(max(0.0, latest[k] - end[k]) for k in end))
    avg = source.metric("avgOffsetsBehindLatest")
    if avg is not None and end is not None and avg >= 0:
        return avg * max(1, len(end))
    return None


def started_batch_rate(last: QueryProgress, started: StartedBatch) -> float | None:
    """Rows per second the batch ``started`` reads, the batch right after ``last``; None
    when the two cannot be compared (another batch, other sources, offsets that are not
    numbers, offsets or time going back).

    Offsets count rows for most sources (Kafka's, a file's line numbers); a source whose
    offsets count something else (the rate source's seconds) is converted by the rows
    the last batch read per unit of offset.
    """
    if started.batch_id != last.batch_id + 1 or len(started.offsets) != len(last.sources):
        return None
    span = started.started - last.time
    if not 0 < span < float("inf"):
        return None
    rows = 0.0
    for source, raw in zip(last.sources, started.offsets, strict=True):
        new, end = _offsets(raw), _offsets(source.end_offset)
        if new is None or end is None or new.keys() != end.keys():
            return None
        moved = sum(new[k] - end[k] for k in new)
        if moved < 0:
            return None
        start = _offsets(source.start_offset)
        if start is not None and start.keys() == end.keys():
            read = sum(end[k] - start[k] for k in end)
            if read > 0 and source.num_input_rows > 0:
                moved *= source.num_input_rows / read
        rows += moved
    return rows / span


def _offsets(raw: str | None) -> dict[str, float] | None:
    """Offsets as Spark writes them in progress: a number, or JSON with numbers at its
    leaves (Kafka: ``{"topic": {"0": 42, "1": 17}}``); None for anything else."""
    if raw is None:
        return None
    try:
        value: Any = json.loads(raw)
    except (TypeError, ValueError):
        return None
    out: dict[str, float] = {}

    def walk(node: Any, path: str) -> bool:
        if isinstance(node, bool):
            return False
        if isinstance(node, (int, float)):
            out[path] = float(node)
            return True
        if isinstance(node, dict) and node:
            return all(walk(v, f"{path}/{k}") for k, v in node.items())
        return False

    return out if walk(value, "") else None
