"""The autoscaler on a real cluster, with an unmodified app (``examples/varying_load.py``).

A load step that recurs daily: on the first day it gives a query that runs its
source's 4 tasks more executors and slots as it comes, past its configured
partitions and never past its tasks, and gives them back after the scale-down
interval; on the days after, the forecast has them running before it comes, also
after a driver crash and a resubmission, and every row is written exactly once
across it all. Recommend-only mode shows its decisions and changes nothing; with
reactive mode the app refuses to start, naming both keys; with
``autoscaler.initial-slots`` an app holds that few executors from its start until
its first query, and its own batch job before then gets the others back.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.streaming import file_sink_files, wait_until
from spark_adaptive.testing.submit import SubmittedApp, submit
from spark_adaptive.testing.watch import AppWatch

pytestmark = pytest.mark.timeout(900)

APP = Path(__file__).parents[2] / "examples" / "varying_load.py"
EARLY_BATCH = Path(__file__).parent / "early_batch_app.py"
COST = 0.004  # 250 rows/s per slot
# Windows of seconds, for a load that changes within a test (docs/autoscaler.md).
FAST = {
    "spark.adaptive.enabled": "true",
    "spark.adaptive.autoscaler.enabled": "true",
    "spark.adaptive.autoscaler.metrics.window": "30s",
    "spark.adaptive.autoscaler.stabilization.interval": "5s",
    "spark.adaptive.autoscaler.evaluation.interval": "2s",
    "spark.adaptive.autoscaler.scale-down.interval": "15s",
    "spark.adaptive.autoscaler.catch-up.duration": "20s",
    "spark.adaptive.autoscaler.backlog-processing.lag-threshold": "10s",
    "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "2s",
    "spark.adaptive.scheduler.executing.resource-stabilization-timeout": "2s",
    "spark.executor.cores": "1",
}


def _submit(cluster: LocalCluster, tmp_path: Path, profile: list[list[float]],
            conf: dict[str, str], *extra: str, log: str = "app.log") -> SubmittedApp:
    app = submit(cluster, APP, "--profile", json.dumps(profile), "--out", str(tmp_path / "out"),
                 "--checkpoint", str(tmp_path / "cp"), "--partitions", "4",
                 "--cost", str(COST), "--trigger", "6 seconds", *extra, conf=conf,
                 log_path=tmp_path / log)
    app.wait_for_query()
    return app


def _run(cluster: LocalCluster, tmp_path: Path, profile: list[list[float]],
         conf: dict[str, str]) -> tuple[SubmittedApp, AppWatch]:
    app = _submit(cluster, tmp_path, profile, conf)
    sampler = AppWatch(cluster, app, autoscaler=True)
    sampler.start()
    try:
        assert app.wait(timeout=profile[-1][0] + 240) == 0, app.tail(60)
    finally:
        sampler.stop()
        app.kill()
    return app, sampler


def _written_ids(out: Path) -> np.ndarray:
    """Ids of the rows the file sink committed."""
    return np.concatenate([pq.read_table(f)["id"].to_numpy() for f in file_sink_files(out)])


def _source_start(app: SubmittedApp) -> tuple[float, int]:
    """The profile's start (seconds since the epoch) and its rows, as the app reported them.

    The app prints them once its ``start()`` has returned, which can be after the REST API
    lists the query (``wait_for_query``): the line is waited for."""

    def reported() -> tuple[float, int] | None:
        for line in app.log_path.read_text().splitlines():
            if line.startswith("source started at "):
                return float(line.split()[3].rstrip(":")), int(line.split()[4])
        return None

    found = wait_until(reported, timeout=30, what="the app's 'source started at' line")
    assert found is not None  # wait_until returns only what is truthy
    return found


def _total_rows(app: SubmittedApp) -> int:
    return _source_start(app)[1]


def test_recommend_only_shows_decisions_and_changes_nothing(
        local_cluster_factory: Any, tmp_path: Path) -> None:
    cluster = local_cluster_factory(2)
    # A shorter window and scale-down interval than the other tests': its first
    # recommendation to scale down comes once the window is full and the interval is over
    # (25 s and more after the query's start).
    conf = {**FAST, "spark.adaptive.autoscaler.scaling.enabled": "false",
            "spark.adaptive.autoscaler.metrics.window": "15s",
            "spark.adaptive.autoscaler.scale-down.interval": "10s"}
    app, sampler = _run(cluster, tmp_path, [[0, 20], [70, 20]], conf)

    assert not [r for r in sampler.rescales if r["trigger"] == "AUTOSCALER"], sampler.rescales
    # While the query ran: executors that exit as the app stops are replaced by the master.
    running = [s for s in sampler.samples if sampler.since(s) > 5 and s.state == "Executing"]
    assert running and {s.executors for s in running} == {2}
    decided = [a for a in sampler.autoscaler if a["recommendation"]
               and a["recommendation"]["outcome"] == "scale-down"]
    assert decided, sampler.autoscaler[-1]
    last = decided[-1]
    assert last["scalingEnabled"] is False and last["recommendation"]["applied"] is False
    assert last["recommendation"]["slots"] == 1
    # and the app's log says it was not applied
    assert any("autoscaler scale-down" in line and "[not applied]" in line
               for line in app.log_path.read_text().splitlines())
    ids = _written_ids(tmp_path / "out")
    assert len(ids) == _total_rows(app) == len(np.unique(ids))


def test_initial_slots_hold_an_idle_app_small_until_its_own_batch_job_runs(
        local_cluster_factory: Any, tmp_path: Path) -> None:
    cluster = local_cluster_factory(2)
    conf = {**FAST, "spark.adaptive.autoscaler.initial-slots": "1"}
    app = submit(cluster, EARLY_BATCH, "--wait", "20", "--workers", "2", conf=conf,
                 log_path=tmp_path / "app.log")
    try:
        assert app.wait(timeout=180) == 0, app.tail(60)
    finally:
        app.kill()
    lines = app.log_path.read_text().splitlines()
    idle = [ln for ln in lines if ln.startswith("idle: ")]
    after = [ln for ln in lines if ln.startswith("after job: ")]
    # Spark gave the app both workers' cores; before any query it holds one executor ...
    assert idle and idle[0].split()[1] == "1", idle
    # ... and its own batch job gets back what it holds without spark-adaptive.
    assert after and after[0].split()[2] == "2", after
    assert any("runs before any managed streaming query" in ln for ln in lines)


def test_with_reactive_mode_the_app_refuses_to_start_naming_both_keys(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    conf = {**FAST, "spark.adaptive.scheduler.mode": "reactive"}
    app = submit(local_cluster, APP, "--profile", "[[0, 10], [30, 10]]",
                 "--out", str(tmp_path / "out"), conf=conf, log_path=tmp_path / "app.log")
    try:
        code = app.wait(timeout=180)
    finally:
        app.kill()
    log = app.log_path.read_text()
    assert code != 0
    assert "spark.adaptive.autoscaler.enabled" in log and "spark.adaptive.scheduler.mode" in log
    assert not (tmp_path / "out" / "_spark_metadata").exists()  # no query ran


def test_a_daily_load_step_is_met_on_its_source_s_tasks_then_ahead_each_day_across_a_crash(
        local_cluster_factory: Any, tmp_path: Path) -> None:
    cluster = local_cluster_factory(5)
    # Three compressed days of 125 s: 20 rows/s (a tenth of a slot), at 100 s a step to 800
    # rows/s (more than 3 slots at the utilization target) for 10 s, then 20 again.
    # The query is stateless with no shuffle: its micro-batches run its source's 4
    # partitions as 4 tasks, past its 2 configured partitions (its default upper bound), as
    # plain Spark runs them. A 6 s trigger keeps the fixed cost of each batch (its four
    # tasks, whatever their rows) small beside the rows' work, so the night load is
    # clearly one slot's.
    # Day 1, reactive: the app starts on every worker, gives all but one back on the night
    # load (65-85 s in: a full window, then the scale-down interval), takes the executors
    # of the 4 tasks for the step as it comes, and gives them back once the step's backlog
    # drained, the window is clear of it and the scale-down interval is over (70-90 s after
    # it), before the forecast asks for them again ahead of the second day's step (the
    # night between is 115 s). The app's start leaves up to the first 30 s of the first
    # day unobserved: in 5 s buckets, the second day's buckets from 30 s on are checked
    # against the first day's (rule F3 wants 3) well before the step shows within the
    # horizon (the executors' start-up plus an evaluation interval).
    # The driver is then killed after the second day's step, and the app resubmitted on
    # the same checkpoint, going on with the same profile: it has run less than a day
    # when the third day's step comes, which it forecasts from the history the first
    # persisted. It starts the query on 1 slot (`initial-slots`, as the docs advise for a
    # query that starts light); on every executor it would hold what the step needs anyway.
    period, rise = 125.0, 100.0
    day: list[list[float]] = [[0, 20], [rise, 20], [rise + 1, 800], [rise + 10, 800],
                              [rise + 11, 20]]
    profile = [[d * period + t, r] for d in range(3) for t, r in day] + [
        [2 * period + rise + 26, 20]]
    conf = {**FAST, "spark.sql.shuffle.partitions": "2",
            "spark.adaptive.autoscaler.forecast.enabled": "true",
            "spark.adaptive.autoscaler.forecast.period": f"{period:g}s",
            "spark.adaptive.autoscaler.forecast.bucket": "5s",
            "spark.adaptive.autoscaler.forecast.horizon": "0s"}
    first = _submit(cluster, tmp_path, profile, conf, log="first.log")
    start, total = _source_start(first)
    watch = AppWatch(cluster, first, autoscaler=True)
    watch.start()
    try:
        # the second day's step is over and its backlog drained
        time.sleep(max(0.0, start + period + rise + 25 - time.time()))
        assert first.running(), first.tail(60)
    finally:
        watch.stop()
        first.kill()  # SIGKILL to the driver's process group: a driver crash
    crash = time.time()
    second = _submit(cluster, tmp_path, profile,
                     {**conf, "spark.adaptive.autoscaler.initial-slots": "1"},
                     "--start", repr(start), log="second.log")
    again = AppWatch(cluster, second, autoscaler=True)
    again.start()
    try:
        assert second.wait(timeout=profile[-1][0] + start - time.time() + 240) == 0, \
            second.tail(60)
    finally:
        again.stop()
        second.kill()
    # what the REST API showed each second, for the record of a failure
    (tmp_path / "autoscaler.json").write_text(json.dumps(watch.autoscaler + again.autoscaler))
    assert _source_start(second) == (start, total)  # the same profile, gone on with

    # Day 1, reactive, on the source's 4 tasks: down to one slot on the night load, up on
    # the step, down again after it.
    ours = [r for r in watch.rescales if r["trigger"] == "AUTOSCALER"
            and r["time"] < start + period + rise - 15]
    downs = [r for r in ours if r["toSlots"] < r["fromSlots"]]
    ups = [r for r in ours if r["toSlots"] > r["fromSlots"]]
    assert downs and ups, watch.rescales
    # Executors asked for join one by one, each a live step of the same scale-up: a step
    # may be superseded by the next, none fails, and the last of each direction completes.
    assert not [r for r in ours if r["outcome"] not in ("completed", "superseded")], ours
    assert ups[-1]["outcome"] == downs[-1]["outcome"] == "completed", ours
    assert downs[0]["time"] < ups[0]["time"] < downs[-1]["time"], ours
    assert downs[0]["toSlots"] == 1 and downs[-1]["toSlots"] == 1, ours
    # Planned on its 4 tasks: past its 2 partitions on the step, never past its 4 tasks.
    done = [r for r in ups if r["outcome"] == "completed"]
    assert done and 2 < max(r["toSlots"] for r in done) <= 4, ours
    mine = [r for r in watch.rescales + again.rescales
            if r["trigger"] in ("AUTOSCALER", "FORECAST")]
    assert all(r["kind"] == "live" and r["toParallelism"] == 2 for r in mine), mine
    # Before the first decision, once its first micro-batch has run: the slots its 4 tasks
    # run on (its 2 configured partitions before, when its tasks are not known yet). A
    # sample is stamped as its reading starts: the one just before the decision may show it.
    first_slots = [s.slots for s in watch.samples if s.time < downs[0]["time"] - 2
                   and s.slots is not None]
    assert 4 in first_slots and set(first_slots[first_slots.index(4):]) == {4}, (
        first_slots, ours)

    def executors_between(a: float, b: float) -> list[int]:
        return [s.executors for s in watch.samples if a <= s.time - start <= b]

    assert max(executors_between(-10, 10)) == 5  # the app started with every worker
    assert min(executors_between(60, rise + 5)) == 1  # given back on the night load
    assert max(executors_between(rise, rise + 60)) > 2  # taken for the step
    assert min(executors_between(rise + 80, period + rise - 20)) == 1  # and given back
    # Spark gave the app the fifth worker's executor at its start; spark-adaptive never
    # asks for more than the 4 executors the 4 tasks run on, reactive or ahead.
    asked = {name: [int(m) for m in re.findall(r"request (\d+) executors in total",
                                                app.log_path.read_text())]
             for name, app in (("first", first), ("second", second))}
    assert asked["first"] and max(asked["first"]) == 4, asked
    assert asked["second"] and max(asked["second"]) <= 4, asked

    # The second app: held on 1 slot from its start until the third day's step is
    # forecast (initial-slots); the query's micro-batch jobs never count as batch work of
    # the app's own.
    log = second.log_path.read_text()
    assert "autoscaler.initial-slots=1" in log and "until its first query" in log
    assert "runs before any managed streaming query" not in log and "gets back" not in log
    night = [(s.executors, s.slots) for s in again.samples
             if again.since(s) > 30 and s.time < start + 2 * period + rise - 25
             and s.state == "Executing"]
    assert night and set(night) == {(1, 1)}, night
    # Each day after the first: the forecast asks for the slots the step needs, live, after
    # a whole day was seen and before the step, and they run in the seconds before it.
    for app, sampler, day_start in ((first, watch, start + period),
                                    (second, again, start + 2 * period)):
        ahead = [r for r in sampler.rescales
                 if r["trigger"] == "FORECAST" and day_start <= r["time"] < day_start + rise]
        assert ahead, (day_start, sampler.rescales)
        assert max(r["toSlots"] for r in ahead) >= 3, ahead
        before = [s.slots for s in sampler.samples if day_start + rise - 3 <= s.time
                  < day_start + rise and s.slots is not None]
        assert before and min(before) >= 3, (before, sampler.rescales)
        # Shown by the REST API: the forecast, in use, and the scale-ups it took.
        forecasts = [a["forecast"] for a in sampler.autoscaler if a.get("forecast")]
        assert any(f["inUse"] for f in forecasts), forecasts[-5:]
        assert forecasts[-1]["aheadScaleUps"] >= 1, forecasts[-1]
        assert "is forecast within" in app.log_path.read_text()
    # The second app forecast the third day's step from a whole day the first one saw:
    # it had run less than a day itself.
    third = [r for r in again.rescales if r["trigger"] == "FORECAST"
             and start + 2 * period <= r["time"] < start + 2 * period + rise]
    assert third and all(r["time"] - crash < period for r in third), third
    used = [a["forecast"] for a in again.autoscaler
            if a.get("forecast") and a["forecast"]["inUse"]]
    assert used and min(f["periods"] for f in used) >= 1, used
    # Every row written exactly once, across the crash.
    ids = _written_ids(tmp_path / "out")
    assert len(ids) == total and len(np.unique(ids)) == total
