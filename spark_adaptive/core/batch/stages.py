"""Per-job reports of batch stages: what ran, what the rule says, and why.

:class:`BatchTracker` consumes the job and stage events of the bus. For every
completed stage it records the bytes the stage consumed and the tasks it ran,
and explains them against Flink's rule (:func:`explain_stage`):

* a stage that read shuffle data is a **shuffle stage**: its rule value is
  ``ceil(shuffle bytes read / V)`` within the batch bounds
  (:func:`~.batch_decider.decide_parallelism`). Spark SQL reaches it through
  adaptive execution, the RDD helpers through their range plans; any other
  shuffle (a plain ``rdd.reduceByKey(f, 200)``) shows how far off it ran;
* a stage that read input files or tables is a **source stage**: its rule value
  is the inferred source parallelism
  (:func:`~.batch_decider.infer_source_parallelism`), ``ceil(input bytes / S)``
  with ``S`` the scans' split size (``batch.source-split-size``, else the app's
  ``spark.sql.files.maxPartitionBytes``), not ``V``: sources are not cut at ``V``;
* any other stage (in-memory or generated data) has no bytes to decide from.

The rule value is recomputed from exact byte counts after the fact, while
Spark decided from the map tasks' size estimates (exact to about 10%) and
packs whole partitions, so a stage may run a task more or fewer than the rule
says; the report shows both. A job of a Spark SQL query carries the query's
execution id: adaptive execution runs each query stage as a job of its own.

Everything here is pure; the wiring calls :meth:`BatchTracker.handle` on the
scheduler thread and :meth:`BatchTracker.report` from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_adaptive.core import events as ev
from spark_adaptive.core.batch.decider import (
    decide_parallelism,
    format_bytes,
    infer_source_parallelism,
)
from spark_adaptive.core.batch.shuffle import ShufflePlan, slot_floor
from spark_adaptive.core.batch.sources import SourcePlan

SHUFFLE, SOURCE, OTHER = "shuffle", "source", "other"
#: Spark's default ``spark.sql.files.maxPartitionBytes``: a scan's split size when unset.
SPARK_MAX_PARTITION_BYTES = 128 << 20


@dataclass(frozen=True)
class BatchLimits:
    """The numbers Flink's rule uses (from the ``batch.*`` settings)."""

    avg_bytes_per_task: int
    min_p: int
    max_p: int
    default_source_parallelism: int | None = None
    #: ``batch.use-held-slots``: the slots held raise the lower bound (:func:`slot_floor`).
    use_held_slots: bool = False
    #: ``S``, the most bytes a source task reads: ``batch.source-split-size``, else the app's
    #: ``spark.sql.files.maxPartitionBytes`` (Spark's 128 MiB); source stages are judged by it.
    source_split_bytes: int = SPARK_MAX_PARTITION_BYTES


@dataclass(frozen=True)
class StageReport:
    """One completed stage attempt, explained. ``rule`` is None for ``kind == "other"``."""

    stage_id: int
    attempt: int
    name: str
    kind: str
    num_tasks: int
    input_bytes: int
    shuffle_read_bytes: int
    shuffle_write_bytes: int
    duration: float
    rule: int | None
    reason: str
    failure: str | None = None
    max_task_duration: float | None = None
    median_task_duration: float | None = None
    plan: str | None = None

    @property
    def follows_rule(self) -> bool | None:
        return None if self.rule is None else self.rule == self.num_tasks

    def to_json(self) -> dict[str, Any]:
        return {
            "stageId": self.stage_id, "attempt": self.attempt, "name": self.name,
            "kind": self.kind, "numTasks": self.num_tasks, "inputBytes": self.input_bytes,
            "shuffleReadBytes": self.shuffle_read_bytes,
            "shuffleWriteBytes": self.shuffle_write_bytes, "duration": round(self.duration, 3),
            "ruleParallelism": self.rule, "followsRule": self.follows_rule,
            "maxTaskDuration": self.max_task_duration,
            "medianTaskDuration": self.median_task_duration,
            "failure": self.failure, "reason": self.reason, "plan": self.plan,
        }


def explain_stage(e: ev.StageCompleted, limits: BatchLimits, slots: int = 1,
                  planned: Mapping[str, Any] | None = None) -> StageReport:
    """What the rule says about a completed stage, next to what it ran.

    ``slots``: task slots held when the stage ran; with ``limits.use_held_slots`` they
    raise the rule's value as :func:`~.batch_shuffle.slot_floor` says. ``planned``: the
    JSON of the RDD helper plan the stage read by (``e.plan``), whose parallelism and
    reason then stand for the rule's: a helper decides with its own limits, caps and
    split pieces, which the stage's bytes alone do not show.
    """
    ran = f"ran {e.num_tasks} task{'s' if e.num_tasks != 1 else ''}"
    v = limits.avg_bytes_per_task
    rule: int | None
    if planned is not None:
        kind = SHUFFLE if e.shuffle_read_bytes > 0 else SOURCE
        read = (f"shuffle read {format_bytes(e.shuffle_read_bytes)}" if kind == SHUFFLE
                else f"input {format_bytes(e.input_bytes)}")
        reason = f"{read}, {ran}; planned by {e.plan}: {planned['reason']}"
        return _stage_report(e, kind, int(planned["parallelism"]), reason, e.plan)
    if e.shuffle_read_bytes > 0:
        d = decide_parallelism(e.shuffle_read_bytes, avg_bytes_per_task=v, min_p=limits.min_p,
                               max_p=limits.max_p)
        kind, rule = SHUFFLE, d.parallelism
        reason = f"shuffle read {format_bytes(e.shuffle_read_bytes)}, {ran}; rule: {d.reason}"
    elif e.input_bytes > 0:
        v = limits.source_split_bytes  # sources are split by S, not cut at V
        d = infer_source_parallelism(e.input_bytes, avg_bytes_per_task=v,
                                     upper_bound=limits.max_p,
                                     default_source_parallelism=limits.default_source_parallelism)
        kind, rule = SOURCE, d.parallelism
        reason = f"input {format_bytes(e.input_bytes)}, {ran}; rule: {d.reason}"
    else:
        kind, rule = OTHER, None
        reason = f"no input or shuffle bytes measured (in-memory or generated data), {ran}"
    if rule is not None and limits.use_held_slots and limits.min_p == 1:
        floor = min(slot_floor(e.shuffle_read_bytes or e.input_bytes, slots, v), limits.max_p)
        if floor > rule:
            rule = floor
            reason += f", raised to {floor} for the {slots} task slots held"
    return _stage_report(e, kind, rule, reason)


def _stage_report(e: ev.StageCompleted, kind: str, rule: int | None, reason: str,
                  plan: str | None = None) -> StageReport:
    if rule is not None and rule != e.num_tasks:
        reason += f"; {e.num_tasks - rule:+d} against the rule"
    if e.max_task_duration and e.median_task_duration and e.num_tasks > 1:
        reason += (f"; slowest task {e.max_task_duration:.2f}s, median "
                   f"{e.median_task_duration:.2f}s")
    if e.failure:
        reason += f"; failed: {e.failure[:200]}"
    return StageReport(e.stage_id, e.attempt, e.name, kind, e.num_tasks, e.input_bytes,
                       e.shuffle_read_bytes, e.shuffle_write_bytes, e.duration, rule, reason,
                       e.failure, e.max_task_duration, e.median_task_duration, plan)


@dataclass
class JobReport:
    """One Spark job and the stages that ran for it (skipped stages do not appear)."""

    job_id: int
    stage_ids: tuple[int, ...]
    started: float
    job_group: str | None = None
    execution_id: str | None = None
    ended: float | None = None
    succeeded: bool | None = None
    stages: list[StageReport] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the log: the job, its stages' bytes and tasks against the rule."""
        owner = f" (SQL query {self.execution_id})" if self.execution_id is not None else ""
        status = "succeeded" if self.succeeded else "failed"
        if not self.stages:
            return f"job {self.job_id}{owner} {status}: every stage was skipped (outputs reused)"
        parts = []
        for s in self.stages:
            consumed = s.shuffle_read_bytes or s.input_bytes
            rule = f" (rule {s.rule})" if s.rule is not None else ""
            parts.append(f"stage {s.stage_id} {s.kind} {format_bytes(consumed)} -> "
                         f"{s.num_tasks} tasks{rule}")
        return f"job {self.job_id}{owner} {status}: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobId": self.job_id, "executionId": self.execution_id, "jobGroup": self.job_group,
            "stageIds": list(self.stage_ids), "started": self.started, "ended": self.ended,
            "succeeded": self.succeeded, "stages": [s.to_json() for s in self.stages],
        }


class BatchTracker:
    """Jobs, their completed stages and the RDD helpers' shuffle plans, newest ``history`` kept."""

    def __init__(self, limits: BatchLimits, history: int = 500) -> None:
        self.limits = limits
        self._history = history
        self._lock = threading.Lock()
        self._jobs: OrderedDict[int, JobReport] = OrderedDict()
        self._plans: list[dict[str, Any]] = []
        self._sources: list[dict[str, Any]] = []
        self._by_id: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._orphans: list[StageReport] = []

    def handle(self, event: ev.Event, slots: int = 1) -> StageReport | JobReport | None:
        """Apply one event; returns the stage or job report it completed, if any.

        ``slots``: task slots held now (see :func:`explain_stage`)."""
        with self._lock:
            if isinstance(event, ev.JobStarted):
                self._jobs[event.job_id] = JobReport(event.job_id, event.stage_ids, event.time,
                                                     event.job_group, event.execution_id)
                while len(self._jobs) > self._history:
                    self._jobs.popitem(last=False)
            elif isinstance(event, ev.StageCompleted):
                planned = self._by_id.get(event.plan) if event.plan else None
                report = explain_stage(event, self.limits, slots, planned)
                job = self._owner(event.stage_id)
                if job is not None:
                    job.stages.append(report)
                else:
                    self._orphans = [*self._orphans[-self._history + 1:], report]
                return report
            elif isinstance(event, ev.JobEnded):
                job = self._jobs.get(event.job_id)
                if job is not None:
                    job.ended, job.succeeded = event.time, event.succeeded
                return job
        return None

    def _owner(self, stage_id: int) -> JobReport | None:
        # A stage shared by several jobs runs for the first one still running that lists it.
        for job in self._jobs.values():
            if job.ended is None and stage_id in job.stage_ids:
                return job
        return None

    def add_plan(self, plan: ShufflePlan, time: float, plan_id: str | None = None) -> None:
        """Record an RDD helper's shuffle plan (decided on the caller's thread). With an id,
        stages that read by it (:attr:`~.events.StageCompleted.plan`) are explained by it."""
        with self._lock:
            entry = self._entry(plan.to_json(), time, plan_id)
            self._plans = [*self._plans[-self._history + 1:], entry]

    def add_source(self, plan: SourcePlan, time: float, plan_id: str | None = None) -> None:
        """Record an RDD file source's plan (:func:`spark_adaptive.batch.text_file`)."""
        with self._lock:
            entry = self._entry(plan.to_json(), time, plan_id)
            self._sources = [*self._sources[-self._history + 1:], entry]

    def _entry(self, doc: dict[str, Any], time: float, plan_id: str | None) -> dict[str, Any]:
        entry = {"time": time, **({"id": plan_id} if plan_id else {}), **doc}
        if plan_id:
            self._by_id[plan_id] = entry
            while len(self._by_id) > 2 * self._history:
                self._by_id.popitem(last=False)
        return entry

    def jobs(self) -> list[JobReport]:
        with self._lock:
            return list(self._jobs.values())

    def report(self) -> dict[str, Any]:
        """Everything as JSON-ready data: settings, jobs with their stages, RDD shuffle and
        file source plans."""
        with self._lock:
            lim = self.limits
            return {
                "avgDataVolumePerTask": lim.avg_bytes_per_task,
                "sourceSplitSize": lim.source_split_bytes,
                "minParallelism": lim.min_p, "maxParallelism": lim.max_p,
                "defaultSourceParallelism": lim.default_source_parallelism,
                "jobs": [j.to_json() for j in self._jobs.values()],
                "stagesWithoutJob": [s.to_json() for s in self._orphans],
                "rddShuffles": list(self._plans),
                "rddSources": list(self._sources),
            }
