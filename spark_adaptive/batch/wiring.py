"""The batch part of a running spark-adaptive: started at activation when ``batch.enabled``.

:func:`start_batch` is called by activation. For a runtime whose
``spark.adaptive.batch.enabled`` is true it

* steers Spark SQL with the ``batch.*`` settings (:mod:`spark_adaptive.batch.sql`);
* subscribes :class:`BatchScheduler` to the event bus: every completed stage is
  explained against the rule and logged, every job is summarized when it ends
  (:class:`~spark_adaptive.core.batch.stages.BatchTracker`), and executors
  follow the submitted stages' tasks while spark-adaptive controls them
  (:class:`~spark_adaptive.core.batch.executors.ExecutorFollower`), and are
  released when no job has run for a while only if the app holds no persisted
  RDD (``JavaSparkContext.getPersistentRDDs``: cached RDDs and DataFrames,
  local checkpoints).

Who controls the executors: the batch part's decisions are one source of the
app's executor demand, handed to the streaming scheduler's reconciler (which
alone declares and releases executors); it decides only while no managed
streaming query runs, and only where Spark can add and remove them (not
``local[*]``). When a streaming query is managed, its demand stands and batch
stages use what exists.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from spark_adaptive.batch.sql import apply_sql_confs
from spark_adaptive.core import events as ev
from spark_adaptive.core.batch.executors import LOGGER_NAME, ExecutorFollower
from spark_adaptive.core.batch.stages import BatchLimits, BatchTracker, JobReport
from spark_adaptive.core.streaming.warm_up import WARM_UP_JOB_GROUP
from spark_adaptive.settings import Settings
from spark_adaptive.spark.jvm import persisted_rdd_count

if TYPE_CHECKING:
    from pyspark import SparkContext

    from spark_adaptive.spark.runtime import AdaptiveRuntime

decision_log = logging.getLogger(LOGGER_NAME)
_lock = threading.Lock()
_parts: dict[int, BatchScheduler] = {}


class BatchScheduler:
    """The batch part of one runtime; every handler runs on the scheduler thread."""

    def __init__(self, rt: AdaptiveRuntime) -> None:
        s = rt.settings
        self._rt = rt
        steering = apply_sql_confs(rt.sc, s)
        self.sql_confs = steering.confs
        self.tracker = BatchTracker(BatchLimits(
            s.batch.avg_data_volume_per_task, s.batch.min_parallelism, s.batch.max_parallelism,
            s.batch.default_source_parallelism, s.batch.use_held_slots,
            source_split_bytes=steering.split_bytes))
        self.follower = ExecutorFollower(
            rt.scheduler.executors.set_batch_demand, rt.loop, min_p=s.batch.min_parallelism,
            max_p=s.batch.max_parallelism, idle_timeout=s.batch.executor_idle_timeout,
            controls=self.controls_executors, slots_per_executor=self._slots_per_executor,
            executors_alive=lambda: len(rt.scheduler.resources.executors),
            persisted_rdds=self._persisted_rdds)
        self._warm_up_stages: set[int] = set()
        self._unsubscribe = rt.subscribe(self.on_event, "batch scheduler", replay_executors=False)

    @property
    def settings(self) -> Settings:
        """The running spark-adaptive's settings (``enable()``'s overrides included)."""
        return self._rt.settings

    def _persisted_rdds(self) -> int | None:
        """RDDs the app holds persisted (scheduler thread; one py4j call to the driver JVM,
        no cluster RPC), None when Spark cannot be asked."""
        try:
            return persisted_rdd_count(self._rt.sc)
        except Exception as e:  # py4j gone, a stopping context: keep the executors
            decision_log.debug("batch: the app's persisted RDDs cannot be read: %s", e)
            return None

    def controls_executors(self) -> bool:
        """True while spark-adaptive may size the executors for batch stages (see module doc)."""
        if not self._rt.actuator.supported:
            return False
        return not any(not q.finished for q in self._rt.scheduler.queries())

    def _slots_per_executor(self) -> int | None:
        """The median executor's slots, else ``spark.executor.cores``'."""
        slots = sorted(e.slots for e in self._rt.scheduler.resources.executors)
        if slots:
            return max(1, slots[len(slots) // 2])
        conf = self._rt.sc._conf
        configured = conf.get("spark.executor.cores", None)
        task_cpus = int(conf.get("spark.task.cpus", "1") or 1)
        return int(configured) // task_cpus if configured else None

    def on_event(self, event: ev.Event) -> None:
        if self._is_warm_up(event):
            return  # spark-adaptive's own warm-up jobs are not the app's batch work
        if isinstance(event, ev.StageSubmitted):
            self.follower.stage_submitted((event.stage_id, event.attempt), event.num_tasks)
        elif isinstance(event, ev.StageCompleted):
            self.follower.stage_completed((event.stage_id, event.attempt))
            stage = self.tracker.handle(event, self._rt.scheduler.resources.live_slots)
            if stage is not None and not isinstance(stage, JobReport):
                decision_log.info("batch: stage %d '%s': %s", stage.stage_id, stage.name,
                                  stage.reason)
        elif isinstance(event, ev.JobStarted):
            self.follower.job_started(event.job_id)
            self.tracker.handle(event)
        elif isinstance(event, ev.JobEnded):
            self.follower.job_ended(event.job_id)
            job = self.tracker.handle(event)
            if isinstance(job, JobReport):
                decision_log.info("batch: %s", job.summary())

    def _is_warm_up(self, event: ev.Event) -> bool:
        if isinstance(event, ev.JobStarted) and event.job_group == WARM_UP_JOB_GROUP:
            self._warm_up_stages.update(event.stage_ids)
            return True
        if isinstance(event, ev.StageSubmitted):
            return event.job_group == WARM_UP_JOB_GROUP
        if isinstance(event, ev.StageCompleted):
            return event.stage_id in self._warm_up_stages
        return False

    def close(self) -> None:
        self._unsubscribe()
        self.follower.close()
        with _lock:
            _parts.pop(id(self._rt.sc), None)


def start_batch(rt: AdaptiveRuntime) -> BatchScheduler | None:
    """Activation hook: start the batch part when ``spark.adaptive.batch.enabled`` is true."""
    if not rt.settings.batch.enabled:
        return None
    part = BatchScheduler(rt)
    with _lock:
        _parts[id(rt.sc)] = part
    rt.on_close(part.close)
    return part


def batch_scheduler_for(sc: SparkContext) -> BatchScheduler | None:
    """The running batch part of ``sc``, if ``batch.enabled`` started one."""
    with _lock:
        return _parts.get(id(sc))

