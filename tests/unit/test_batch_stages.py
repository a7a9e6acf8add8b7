"""Batch reports: completed stages explained against the rule, grouped by job."""

from __future__ import annotations

import dataclasses
import json

from spark_adaptive.core import events as ev
from spark_adaptive.core.batch.shuffle import plan_even
from spark_adaptive.core.batch.sources import SourcePlan
from spark_adaptive.core.batch.stages import (
    OTHER,
    SHUFFLE,
    SOURCE,
    BatchLimits,
    BatchTracker,
    JobReport,
    StageReport,
    explain_stage,
)

MiB = 1 << 20
LIMITS = BatchLimits(avg_bytes_per_task=16 * MiB, min_p=1, max_p=128)


def done(stage: int, tasks: int, *, inp: int = 0, read: int = 0, write: int = 0,
         failure: str | None = None, slow: float | None = None) -> ev.StageCompleted:
    return ev.StageCompleted(10.0 + stage, stage, 0, tasks, inp, read, write, 1.5, failure,
                             f"stage {stage}", slow, 0.5 if slow else None)


def test_shuffle_stage_is_explained_by_ceil_bytes_over_v() -> None:
    r = explain_stage(done(3, 7, read=100 * MiB), LIMITS)
    assert (r.kind, r.rule, r.follows_rule) == (SHUFFLE, 7, True)
    assert "ceil(100 MiB / 16 MiB) = 7" in r.reason and "against" not in r.reason

    off = explain_stage(done(3, 200, read=100 * MiB), LIMITS)
    assert off.follows_rule is False and "+193 against the rule" in off.reason


def test_source_stage_uses_source_inference_and_other_stages_have_no_rule() -> None:
    split16 = BatchLimits(16 * MiB, 1, 128, source_split_bytes=16 * MiB)
    src = explain_stage(done(1, 4, inp=50 * MiB, write=10 * MiB), split16)
    assert (src.kind, src.rule) == (SOURCE, 4) and "source: ceil(50 MiB / 16 MiB)" in src.reason
    capped = explain_stage(done(1, 4, inp=50 * MiB),
                           BatchLimits(16 * MiB, 1, 128, default_source_parallelism=2,
                                       source_split_bytes=16 * MiB))
    assert capped.rule == 2 and "default source parallelism 2" in capped.reason
    gen = explain_stage(done(2, 4, write=MiB), LIMITS)
    assert (gen.kind, gen.rule, gen.follows_rule) == (OTHER, None, None)


def test_a_scan_is_judged_by_the_split_size_not_the_volume_per_task() -> None:
    # docs/batch.md: a source is split by S (batch.source-split-size, else the app's
    # spark.sql.files.maxPartitionBytes, 128 MiB in Spark), not cut at V.
    scan = explain_stage(done(1, 8, inp=1 << 30, write=1), BatchLimits(64 * MiB, 1, 128))
    assert (scan.kind, scan.rule, scan.follows_rule) == (SOURCE, 8, True), scan.reason
    assert "ceil(1 GiB / 128 MiB)" in scan.reason
    own = explain_stage(done(1, 16, inp=1 << 30),
                        BatchLimits(64 * MiB, 1, 128, source_split_bytes=64 * MiB))
    assert own.rule == 16
    # Shuffle stages still follow V.
    assert explain_stage(done(2, 16, read=1 << 30), BatchLimits(64 * MiB, 1, 128)).rule == 16
    assert BatchTracker(BatchLimits(64 * MiB, 1, 128)).report()["sourceSplitSize"] == 128 * MiB


def test_skew_and_failure_are_in_the_reason() -> None:
    r = explain_stage(done(5, 8, read=100 * MiB, slow=4.0, failure="boom"), LIMITS)
    assert "slowest task 4.00s, median 0.50s" in r.reason and "failed: boom" in r.reason


def test_stages_are_filed_under_the_running_job_that_lists_them() -> None:
    t = BatchTracker(LIMITS)
    t.handle(ev.JobStarted(1.0, 7, (1, 2), None, "3"))
    t.handle(ev.JobStarted(1.0, 8, (2, 4), "group"))
    assert t.handle(done(1, 4, inp=MiB)) is not None
    t.handle(ev.JobEnded(2.0, 7, True))
    t.handle(done(2, 3, read=40 * MiB))  # job 7 has ended: it ran for job 8
    job = t.handle(ev.JobEnded(3.0, 8, True))
    assert isinstance(job, JobReport) and [s.stage_id for s in job.stages] == [2]
    assert "job 8 succeeded: stage 2 shuffle 40 MiB -> 3 tasks (rule 3)" == job.summary()
    jobs = t.jobs()
    assert [s.stage_id for s in jobs[0].stages] == [1] and jobs[0].execution_id == "3"
    assert "(SQL query 3)" in jobs[0].summary()


def test_report_is_json_and_keeps_plans_and_orphans() -> None:
    t = BatchTracker(LIMITS, history=2)
    for job in range(3):
        t.handle(ev.JobStarted(0.0, job, (job,)))
    t.handle(done(99, 1, read=MiB))
    t.add_plan(plan_even("reduceByKey", 8, MiB, avg_bytes_per_task=MiB, min_p=1, max_p=8,
                         why="test"), 5.0)
    data = json.loads(json.dumps(t.report()))
    assert [j["jobId"] for j in data["jobs"]] == [1, 2]
    assert data["stagesWithoutJob"][0]["stageId"] == 99
    assert data["rddShuffles"][0]["operation"] == "reduceByKey"
    assert data["avgDataVolumePerTask"] == 16 * MiB


def test_a_job_whose_stages_were_all_skipped_says_so() -> None:
    t = BatchTracker(LIMITS)
    t.handle(ev.JobStarted(0.0, 1, (1, 2)))
    job = t.handle(ev.JobEnded(1.0, 1, False))
    assert isinstance(job, JobReport) and "failed: every stage was skipped" in job.summary()


def test_held_slots_raise_the_rule_in_reports() -> None:
    limits = BatchLimits(64 * MiB, 1, 128, use_held_slots=True)
    r = explain_stage(done(3, 2, read=18 * MiB), limits, slots=2)
    assert r.rule == 2 and r.follows_rule and "raised to 2 for the 2 task slots held" in r.reason
    assert explain_stage(done(3, 1, read=12 * MiB), LIMITS, slots=2).rule == 1, "flag off"


def test_a_stage_that_reads_by_a_helper_plan_is_explained_by_that_plan() -> None:
    # A join whose tasks read at most 4 MiB each (its own cap): 10 tasks for 40 MiB, where
    # the rule at 16 MiB says 3. The stage names the plan; the report follows the plan.
    t = BatchTracker(LIMITS)
    plan = plan_even("join", 16, 40 * MiB, avg_bytes_per_task=4 * MiB, min_p=1, max_p=16,
                     why="test")
    t.add_plan(plan, 5.0, "join#7")
    t.handle(ev.JobStarted(0.0, 1, (4,)))
    stage = dataclasses.replace(done(4, 10, read=40 * MiB), plan="join#7")
    r = t.handle(stage)
    assert isinstance(r, StageReport)
    assert (r.kind, r.rule, r.follows_rule, r.plan) == (SHUFFLE, 10, True, "join#7")
    assert r.reason.startswith("shuffle read 40 MiB, ran 10 tasks; planned by join#7: join")
    assert "against the rule" not in r.reason
    assert t.report()["rddShuffles"][0]["id"] == "join#7"
    assert r.to_json()["plan"] == "join#7"
    # A plan the tracker does not know (dropped from its history, or another process's):
    # the rule explains the stage, as for any other.
    other = t.handle(dataclasses.replace(done(5, 10, read=40 * MiB), plan="join#99"))
    assert isinstance(other, StageReport)
    assert other.rule == 3 and other.plan is None and "+7 against the rule" in other.reason


def test_a_source_stage_read_by_a_text_file_plan() -> None:
    t = BatchTracker(LIMITS)
    source = SourcePlan("/in", 30 * MiB, 2, 40, "source: ceil(30 MiB / 16 MiB) = 2")
    t.add_source(source, 1.0, "textFile#1")
    r = t.handle(dataclasses.replace(done(1, 2, inp=30 * MiB, write=MiB), plan="textFile#1"))
    assert isinstance(r, StageReport)
    assert (r.kind, r.rule, r.plan) == (SOURCE, 2, "textFile#1")
    assert "planned by textFile#1: source: ceil(30 MiB / 16 MiB) = 2" in r.reason
    assert t.report()["rddSources"][0]["id"] == "textFile#1"
