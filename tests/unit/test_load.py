"""What a streaming run's micro-batches cost, from Spark's job and stage events."""

from __future__ import annotations

from spark_adaptive.core.events import (
    JobStarted,
    QueryIdle,
    QueryProgress,
    QueryTerminated,
    SourceProgress,
    StageCompleted,
    StageSubmitted,
)
from spark_adaptive.core.ports import StartedBatch
from spark_adaptive.core.streaming.load import (
    BatchLoad,
    LoadTracker,
    backlog_rows,
    started_batch_rate,
)


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


def test_a_stage_that_completes_after_its_run_ended_is_not_kept() -> None:
    t = LoadTracker()
    t.on_event(JobStarted(0.0, 1, (1,), job_group="stopped-run"))
    t.on_event(StageSubmitted(0.0, 1, 0, 8))
    t.on_event(QueryTerminated(0.0, "q", "stopped-run", None))
    t.on_event(_completed(1, 2.0))  # the stage the stop cancelled, reported after the stop
    t.on_event(StageSubmitted(0.0, 1, 0, 8))
    assert (t._busy, t._timed, t._tasks, t._stages, t._total) == ({}, set(), {}, {}, {})
    assert t.running_tasks("stopped-run") == 0


def test_running_tasks_are_those_of_stages_submitted_and_not_completed() -> None:
    t = LoadTracker()
    assert t.running_tasks("run-a") == 0
    t.on_event(JobStarted(0.0, 1, (1, 2), job_group="run-a"))
    t.on_event(StageSubmitted(0.0, 1, 0, 24))  # the source's 24 partitions
    assert t.running_tasks("run-a") == 24
    t.on_event(StageSubmitted(0.0, 2, 0, 4))
    t.on_event(_completed(1, 2.0))
    assert t.running_tasks("run-a") == 4  # the wide stage is done
    t.on_event(StageSubmitted(0.0, 1, 1, 6))  # a second attempt of stage 1 (a fetch failure)
    t.on_event(_completed(2, 1.0))
    t.on_event(_completed(1, 1.0))  # attempt 0's completion, reported again: not attempt 1's
    assert t.running_tasks("run-a") == 6
    t.on_event(QueryIdle(0.0, "q", "run-a"))  # no batch runs: a lost completion is let go
    assert t.running_tasks("run-a") == 0
    t.on_event(JobStarted(0.0, 2, (3,), job_group="run-a"))
    t.on_event(StageSubmitted(0.0, 3, 0, 8))
    t.on_event(QueryProgress(0.0, "q", "run-a", "q", 1, 10, 1.0, 1.0, 0.1, 0.1))
    t.take("run-a")  # the batch's progress
    assert t.running_tasks("run-a") == 0


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


def _after(time: float, batch: int, *sources: SourceProgress) -> QueryProgress:
    return QueryProgress(time, "q", "r", None, batch, 10, 1.0, 1.0, 1.0, 1.0, sources=sources)


def test_the_input_rate_of_a_started_batch_from_its_offsets() -> None:
    kafka = SourceProgress("kafka", 40, 1.0, 1.0, (), '{"t": {"0": 100, "1": 50}}', None,
                           '{"t": {"0": 80, "1": 30}}')
    counter = SourceProgress("counter", 400, 1.0, 1.0, (), '{"rows": 8463}', None,
                             '{"rows": 8063}')
    last = _after(100.0, 14, kafka, counter)
    started = StartedBatch(15, 104.0, ('{"t": {"0": 160, "1": 90}}', '{"rows": 10663}'))
    # Kafka: 60 + 40 rows; the counter: 2200 rows; over the 4 s between the batches' starts
    assert started_batch_rate(last, started) == (100 + 2200) / 4.0
    # A source whose offsets count seconds, not rows: 50 rows per offset unit last batch, and
    # 2 units more over 2 s
    seconds = SourceProgress("rate", 100, 1.0, 1.0, (), "12", None, "10")
    assert started_batch_rate(_after(100.0, 3, seconds), StartedBatch(4, 102.0, ("14",))) == 50.0
    # Without the last batch's start offsets (its first batch), offsets count rows
    first = SourceProgress("counter", 400, 1.0, 1.0, (), '{"rows": 400}', None, None)
    assert started_batch_rate(_after(0.0, 0, first),
                              StartedBatch(1, 4.0, ('{"rows": 1000}',))) == 150.0


def test_a_started_batch_that_cannot_be_compared_gives_no_rate() -> None:
    src = SourceProgress("counter", 400, 1.0, 1.0, (), '{"rows": 800}', None, '{"rows": 400}')
    last = _after(100.0, 7, src)
    assert started_batch_rate(last, StartedBatch(9, 104.0, ('{"rows": 900}',))) is None  # not next
    assert started_batch_rate(last, StartedBatch(8, 100.0, ('{"rows": 900}',))) is None  # no time
    assert started_batch_rate(last, StartedBatch(8, 99.0, ('{"rows": 900}',))) is None  # back
    assert started_batch_rate(last, StartedBatch(8, 104.0, ('{"rows": 700}',))) is None  # back
    assert started_batch_rate(last, StartedBatch(8, 104.0, ('{"other": 900}',))) is None
    assert started_batch_rate(last, StartedBatch(8, 104.0, (None,))) is None
    assert started_batch_rate(last, StartedBatch(8, 104.0, ('{"logOffset": "x"}',))) is None
    assert started_batch_rate(last, StartedBatch(8, 104.0, ("not json",))) is None
    assert started_batch_rate(last, StartedBatch(8, 104.0, ())) is None  # other sources
    # A file source's first batch (no start offsets): its log offsets are taken for rows, an
    # under-read, and a started batch's rate is used only to see rises.
    files = SourceProgress("files", 4, 1.0, 1.0, (), '{"logOffset": 3}', None, None)
    assert started_batch_rate(_after(1.0, 2, files),
                              StartedBatch(3, 2.0, ('{"logOffset": 4}',))) == 1.0


def test_a_run_has_started_work_from_its_first_job_or_progress_until_it_ends() -> None:
    t = LoadTracker()
    assert not t.started_work("run-a")  # its first micro-batch is still being planned
    t.on_event(JobStarted(0.0, 1, (10,), job_group="run-a"))
    assert t.started_work("run-a") and not t.started_work("run-b")
    # a progress says a batch ran jobs, even when their starts never came (dropped)
    t.on_event(QueryProgress(0.0, "q", "run-b", "q", 0, 10, 1.0, 1.0, 0.1, 0.1))
    assert t.started_work("run-b")
    t.on_event(QueryTerminated(0.0, "q", "run-a", None))
    assert not t.started_work("run-a")
    for n in range(2000):  # job groups of other work do not pile up
        t.on_event(JobStarted(0.0, 100 + n, (), job_group=f"group-{n}"))
    assert len(t._working) <= 1024 and t.started_work("group-1999")
