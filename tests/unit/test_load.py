"""What a streaming run's micro-batches cost, from Spark's job and stage events."""

from __future__ import annotations

from spark_adaptive.core.events import (
    JobStarted,
    QueryProgress,
    QueryTerminated,
    SourceProgress,
    StageCompleted,
    StageSubmitted,
)
from spark_adaptive.core.streaming.load import BatchLoad, LoadTracker, backlog_rows


def _completed(stage: int, task_time: float | None) -> StageCompleted:
    return StageCompleted(0.0, stage, 0, 4, 0, 0, 0, 1.0, task_time=task_time)


def test_task_time_and_tasks_add_up_per_run_between_batches() -> None:
    t = LoadTracker()
    t.on_event(JobStarted(0.0, 1, (10, 11), job_group="run-a"))
    t.on_event(JobStarted(0.0, 2, (12,), job_group="run-b"))
    t.on_event(JobStarted(0.0, 3, (13,), job_group="spark-adaptive-warm-up"))
    for stage, tasks in ((10, 4), (11, 12), (12, 3)):
        t.on_event(StageSubmitted(0.0, stage, 0, tasks))
    t.on_event(_completed(10, 1.5))
    t.on_event(_completed(11, 2.25))
    t.on_event(_completed(12, 7.0))
    t.on_event(_completed(13, 9.0))  # another job group's stage
    t.on_event(_completed(99, 5.0))  # a stage of no known job
    assert t.take("run-a") == BatchLoad(3.75, 12, 2, 16)
    assert t.take("run-a") == BatchLoad(None, None, 0)  # started again
    assert t.take("run-b") == BatchLoad(7.0, 3, 1, 3)


def test_a_run_that_ended_is_forgotten() -> None:
    t = LoadTracker()
    t.on_event(JobStarted(0.0, 1, (1,), job_group="warm-up-run"))
    t.on_event(StageSubmitted(0.0, 1, 0, 8))
    t.on_event(_completed(1, 2.0))
    t.on_event(QueryTerminated(0.0, "q", "warm-up-run", None))
    assert t.take("warm-up-run") == BatchLoad(None, None, 0)


def test_without_task_time_busy_time_is_unknown() -> None:
    t = LoadTracker()
    t.on_event(JobStarted(0.0, 1, (1,), job_group="run"))
    t.on_event(_completed(1, None))  # the py4j listener reports no task time
    assert t.take("run").busy_time is None


def _progress(*sources: SourceProgress) -> QueryProgress:
    return QueryProgress(0.0, "q", "r", None, 3, 10, 1.0, 1.0, 1.0, 1.0, sources=sources)


def test_backlog_from_kafka_offsets_numbers_and_metrics() -> None:
    kafka = SourceProgress("kafka", 10, 1.0, 1.0, (), '{"t": {"0": 100, "1": 50}}',
                           '{"t": {"0": 130, "1": 50}}')
    single = SourceProgress("counter", 10, 1.0, 1.0, (), "900", "1000")
    assert backlog_rows(_progress(kafka)) == 30.0
    assert backlog_rows(_progress(kafka, single)) == 130.0
    metrics_only = SourceProgress("kafka", 10, 1.0, 1.0, (("avgOffsetsBehindLatest", "12.5"),),
                                  '{"t": {"0": 1, "1": 2}}', None)
    assert backlog_rows(_progress(metrics_only)) == 25.0
    # No offsets, or ones that are not numbers: the source reports no backlog.
    rate = SourceProgress("rate", 10, 1.0, 1.0, (), None, None)
    odd = SourceProgress("files", 10, 1.0, 1.0, (), '{"logOffset": "x"}', '{"logOffset": "y"}')
    assert backlog_rows(_progress(rate, odd)) is None
    assert backlog_rows(_progress()) is None
