"""Autoscaling on a real cluster: one plain app, run three ways on a varying load.

A local standalone cluster of four one-core workers runs
``examples/varying_load.py`` (a streaming query whose source follows a rate
profile, each row costing ``--cost`` seconds of wall time) with

* **static**: every worker for the whole run (allocation for the peak);
* **dynamic**: Spark's dynamic allocation (``spark.dynamicAllocation.enabled``,
  at most four executors, Spark's other defaults);
* **autoscaler**: spark-adaptive with ``spark.adaptive.autoscaler.enabled``,
  plus the documented keys in ``AUTOSCALER_CONF`` for a load that changes over
  minutes.

For each run it reports executor-seconds: the executor processes alive, sampled
about once a second, each sample's count held until the next sample's time,
from the app's start (the watcher's first sample, a second after the
submission, before the app has executors) until the last row is written. That
is what a bill counts, with the executors an app holds before its source
starts; the ratios are taken from it. Beside it, the same from the source's
start. Then the lag of every row (the time its work finished minus the time it
arrived) as p50 / p99 / max, the seconds at which the oldest unprocessed row
was older than the lag target, the rescales (from spark-adaptive's history),
and checks that every row was written exactly once. The **oracle** is perfect
tracking at 100% utilization: the integral of ceil(rate x cost) over the
profile. Beside it, the slot-seconds the app's tasks ran (Spark's task log), per
row: the work a slot really did for a row, with each task's fixed cost and the
slow first tasks of new executors, where the oracle counts ``--cost`` alone; and
each run's executor-seconds over instant tracking at that cost per row, which
tells the tracking's delays apart from what a row really costs in the run.

**Calibrated references.** First, two static runs at constant rates (0.15 and 0.6 of the
cluster's capacity, 90 s each) measure what the app's micro-batches really cost: a fixed
slot-time per micro-batch plus a cost per row, a least-squares line through their
micro-batches (each one's slot-seconds from Spark's task log, its rows from its
progress), the first two of each run left out (their tasks start the executors' Python
workers). **Calibrated tracking** is instant
tracking at that cost and the autoscaler's ``utilization.target``. The oracle and
calibrated tracking are also counted over each run's own bill, from the app's start to the
drain's end (the profile's first rate before the source starts, its last one through the
drain), and a second table gives every run's executor-seconds against both.

Profiles: "day" (a night, a rise, a spike, an evening), "steps" (sudden jumps) and
"ramps" (linear ramps between 0.1 and 0.7 of the capacity, 100-140 s each, times a noise
of +-15% drawn every 10 s, seeded). ``--rounds 3`` runs every profile and mode three
times, interleaved round by round, and the summary gives each figure's median.

Prints a table per run and per profile, writes ``benchmarks/results/autoscale.json`` and
one plot per profile (``autoscale-<profile>.png``, of the newest round).

    .venv/bin/python benchmarks/autoscale.py [--profiles day,steps,ramps] [--modes ...] \
        [--rounds 3] [--calibration runs|none|FIXED_S,PER_ROW_MS]

``--references`` starts no cluster: it prints each profile's oracle and instant tracking,
and with ``--reference-costs 4,5.4`` (ms per row) and ``--reference-targets 0.85,0.95`` a
table of instant tracking over the oracle for each utilization target at each cost per
row: what no delay at all would pay when a row costs a slot that much.

``make demo-autoscale`` runs the autoscaler alone on the "steps" profile and
writes its picture to ``demo-output/autoscale-steps.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from spark_adaptive.core.autoscaler.config import AutoscalerConfig
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.streaming import file_sink_files
from spark_adaptive.testing.submit import submit
from spark_adaptive.testing.watch import AppWatch, Seen

HERE = Path(__file__).parent
RESULTS = HERE / "results"
APP = HERE.parent / "examples" / "varying_load.py"
WORKERS = 4
COST = 0.004  # seconds of work per row: 250 rows/s per slot
# The source's partitions (a topic's): 12 run balanced on 1, 2, 3 and 4 slots. Each task
# costs its slot a fixed 0.1 s a micro-batch (benchmarks/partition_cost.py), which 12 pay in
# full at every load; on this profile the balance on 3 slots saves more.
PARTITIONS = 12
TRIGGER = "4 seconds"
LAG_TARGET = 30.0

# Profiles as (fraction of the duration, fraction of the cluster's capacity).
# "day": a night, a morning rise, a plateau, a spike that needs the whole
# cluster, an evening fall. "steps": sudden jumps up and down.
PROFILES: dict[str, tuple[float, list[tuple[float, float]]]] = {
    "day": (480.0, [(0.0, 0.06), (0.12, 0.06), (0.25, 0.35), (0.40, 0.40), (0.50, 0.40),
                    (0.52, 0.80), (0.60, 0.80), (0.62, 0.45), (0.72, 0.30), (0.85, 0.15),
                    (0.92, 0.06), (1.0, 0.06)]),
    "steps": (360.0, [(0.0, 0.10), (0.15, 0.10), (0.16, 0.55), (0.40, 0.55), (0.41, 0.20),
                      (0.60, 0.20), (0.61, 0.75), (0.80, 0.75), (0.81, 0.10), (1.0, 0.10)]),
}
RAMPS_SECONDS = 480.0
#: Each ramp's length and each noise step's (seconds), and the noise's spread.
RAMP_LENGTH = (100.0, 140.0)
NOISE_STEP = 10.0
NOISE = 0.15


def ramps_shape(duration: float = RAMPS_SECONDS, seed: int = 1) -> list[tuple[float, float]]:
    """"ramps": linear ramps between 0.1 and 0.7 of the cluster's capacity, each 100-140 s
    long, times a noise factor of 0.85-1.15 drawn every 10 s (held within the step: the
    shape has a knot just before each step's end and one at its start). Seeded: every run
    of one invocation, and every invocation, sees the same load."""
    rng = np.random.default_rng(seed)
    ends, t = [0.0], 0.0
    while t < duration:
        t = min(duration, t + float(rng.uniform(*RAMP_LENGTH)))
        ends.append(t)
    levels = [0.1 if i % 2 == 0 else 0.7 for i in range(len(ends))]
    shape: list[tuple[float, float]] = []
    step = 0.0
    while step < duration:
        factor = float(rng.uniform(1 - NOISE, 1 + NOISE))
        for at in (step, min(duration, step + NOISE_STEP) - 1e-3):
            base = float(np.interp(at, ends, levels))
            shape.append((round(at / duration, 6), base * factor))
        step += NOISE_STEP
    shape.append((1.0, shape[-1][1]))
    return shape


PROFILES["ramps"] = (RAMPS_SECONDS, ramps_shape())
#: "recurring": three compressed days of RECURRING_PERIOD seconds, each a night at 0.08 of
#: the capacity, a steep rise (5 s) at 40% of the day to 0.85 (the whole cluster at
#: utilization.target), a plateau and a fall. The forecast mode learns the first day.
RECURRING_PERIOD = 240.0
RECURRING_DAY = [(0.0, 0.08), (0.40, 0.08), (0.42, 0.85), (0.70, 0.85), (0.75, 0.08)]
PROFILES["recurring"] = (3 * RECURRING_PERIOD, [
    *((round((d + f) / 3, 6), c) for d in range(3) for f, c in RECURRING_DAY), (1.0, 0.08)])
#: The calibration's static runs: two constant rates (fractions of the cluster's capacity).
CALIBRATION = {"calibrate-low": 0.15, "calibrate-high": 0.6}
CALIBRATION_SECONDS = 90.0
for _name, _level in CALIBRATION.items():
    PROFILES[_name] = (CALIBRATION_SECONDS, [(0.0, _level), (1.0, _level)])

COMMON_CONF = {
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
}
MODES: dict[str, dict[str, str]] = {
    "static": {"spark.adaptive.enabled": "false", "spark.cores.max": str(WORKERS)},
    "dynamic": {"spark.adaptive.enabled": "false",
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.maxExecutors": str(WORKERS)},
    "autoscaler": {"spark.adaptive.enabled": "true",
                   "spark.adaptive.autoscaler.enabled": "true"},
}
# The forecast's recipe for a load that recurs every RECURRING_PERIOD seconds and to the
# second: buckets of two or more trigger intervals (docs/autoscaler.md), looking ahead no
# further than the executors' start-up and an evaluation interval (horizon 0: the least it
# looks ahead).
MODES["forecast"] = {**MODES["autoscaler"],
                     "spark.adaptive.autoscaler.forecast.enabled": "true",
                     "spark.adaptive.autoscaler.forecast.period": f"{RECURRING_PERIOD:g}s",
                     "spark.adaptive.autoscaler.forecast.bucket": "10s",
                     "spark.adaptive.autoscaler.forecast.horizon": "0s"}
AUTOSCALED = ("autoscaler", "forecast")
# A load that changes over minutes wants windows of seconds (docs/autoscaler.md), and a
# query that starts at night starts small.
AUTOSCALER_CONF = {
    "spark.adaptive.autoscaler.initial-slots": "1",
    "spark.adaptive.autoscaler.metrics.window": "20s",
    "spark.adaptive.autoscaler.stabilization.interval": "5s",
    "spark.adaptive.autoscaler.evaluation.interval": "2s",
    "spark.adaptive.autoscaler.scale-down.interval": "10s",
    "spark.adaptive.autoscaler.catch-up.duration": "30s",
    "spark.adaptive.autoscaler.backlog-processing.lag-threshold": "10s",
}


def knots(profile: str) -> tuple[float, list[list[float]]]:
    """The profile in seconds and rows/s."""
    duration, shape = PROFILES[profile]
    capacity = WORKERS / COST
    return duration, [[round(f * duration, 3), round(c * capacity, 3)] for f, c in shape]


def oracle(points: list[list[float]], step: float = 0.01) -> float:
    """Executor-seconds of perfect tracking at 100% utilization."""
    times = np.arange(0.0, points[-1][0], step)
    rate = np.interp(times, [p[0] for p in points], [p[1] for p in points])
    return float(np.sum(np.ceil(rate * COST - 1e-9)) * step)


def tracking(points: list[list[float]], partitions: int = PARTITIONS,
             extra: Mapping[str, str] | None = None, step: float = 0.01,
             cost: float | None = None) -> float:
    """Executor-seconds of instant tracking as the autoscaler aims: each moment on the
    fewest slots that carry the rate at ``utilization.target`` (the autoscaler run's:
    AUTOSCALER_CONF with the ``extra`` keys of ``--conf``) among those on which the
    source's ``partitions`` run in balanced waves (their divisors), at most WORKERS. What
    a policy with no delay at all could reach; the oracle also drops the headroom and the
    balance. ``cost``: slot-seconds per row (default COST, the work the oracle counts);
    no fixed cost per micro-batch (:func:`calibrated_tracking` with none)."""
    per_row = COST if cost is None else cost
    return calibrated_tracking(points, Calibration(0.0, per_row), trigger_seconds(),
                               partitions, extra, step)


TARGET_KEY = "spark.adaptive.autoscaler.utilization.target"


@dataclass(frozen=True)
class Calibration:
    """What the app's micro-batches cost its slots: ``fixed`` slot-seconds per micro-batch
    (its tasks' scheduling, the source's and the sink's opening, whatever their rows) plus
    ``per_row`` slot-seconds per row."""

    fixed: float
    per_row: float


def calibrate(runs: Sequence[tuple[float, int, int]]) -> Calibration:
    """The least-squares ``fixed`` and ``per_row`` of runs given as (slot-seconds their tasks
    ran, rows, micro-batches): ``slot-seconds = batches x fixed + rows x per_row``. Needs
    two runs at least whose rows per micro-batch differ; a fit whose fixed part comes out
    below 0 is refitted through the origin (all of it per row)."""
    usable = [(t, r, b) for t, r, b in runs if b > 0 and t > 0]
    if len({round(r / b, 6) for _, r, b in usable}) < 2:
        raise ValueError(f"calibration needs two runs at different rows per micro-batch, "
                         f"got {list(runs)}")
    a = np.array([[b, r] for _, r, b in usable], dtype=float)
    y = np.array([t for t, _, _ in usable], dtype=float)
    (fixed, per_row), *_ = np.linalg.lstsq(a, y, rcond=None)
    if fixed < 0 or per_row <= 0:
        return Calibration(0.0, float(y.sum() / a[:, 1].sum()))
    return Calibration(float(fixed), float(per_row))


def over_window(points: list[list[float]], before: float, after: float) -> list[list[float]]:
    """The profile over a run's whole bill: its first rate for ``before`` seconds (the app
    starts before its source), its last for ``after`` (the drain), shifted to start at 0."""
    first, last = points[0][1], points[-1][1]
    end = points[-1][0]
    shifted = [[t + before, r] for t, r in points]
    head = [[0.0, first]] if before > 0 else []
    tail = [[end + before + after, last]] if after > 0 else []
    return head + shifted + tail


def calibrated_tracking(points: list[list[float]], cal: Calibration, trigger: float,
                        partitions: int = PARTITIONS, extra: Mapping[str, str] | None = None,
                        step: float = 0.01) -> float:
    """Executor-seconds of instant tracking at the calibrated cost: each moment on the
    fewest balanced slot counts (as :func:`tracking`) that carry a micro-batch every
    ``trigger`` seconds, its fixed slot-time plus its rows' cost, at ``utilization.target``."""
    target = AutoscalerConfig.from_conf({**AUTOSCALER_CONF, **(extra or {})}).utilization_target
    balanced = [d for d in range(1, WORKERS + 1) if partitions % d == 0]
    times = np.arange(0.0, points[-1][0], step)
    rate = np.interp(times, [p[0] for p in points], [p[1] for p in points])
    need = (cal.fixed / trigger + rate * cal.per_row) / target
    slots = [next((d for d in balanced if d >= n - 1e-9), balanced[-1]) for n in need]
    return float(np.sum(slots) * step)


def trigger_seconds(trigger: str = TRIGGER) -> float:
    """``"4 seconds"`` as 4.0."""
    number, unit = trigger.split()
    if not unit.startswith("second"):
        raise ValueError(f"trigger {trigger!r} is not in seconds")
    return float(number)


def references_table(profile: str, partitions: int, extra: Mapping[str, str],
                     targets: Sequence[float], costs: Sequence[float]) -> str:
    """Instant tracking (:func:`tracking`) over the oracle, one row per utilization target,
    one column per cost per row (slot-seconds): how far below the oracle's ratio any policy
    that keeps that target can come, with no delay at all, when a row really costs that."""
    points = knots(profile)[1]
    o = oracle(points)
    head = "".join(f" | {c * 1000:g} ms/row" for c in costs)
    lines = [f"{profile}: oracle {o:.0f} executor-seconds; instant tracking on {partitions} "
             "partitions over the oracle",
             f"| utilization.target{head} |", "|---" * (len(costs) + 1) + "|"]
    for target in targets:
        keys = {**extra, TARGET_KEY: str(target)}
        cells = "".join(f" | {tracking(points, partitions, keys, cost=c) / o:.2f}x"
                        for c in costs)
        lines.append(f"| {target:g}{cells} |")
    return "\n".join(lines)


def _numbers(text: str, what: str) -> list[float]:
    """Comma-separated finite numbers, a bad one named with ``what`` it should have been."""
    out = []
    for word in text.split(","):
        try:
            x = float(word)
        except ValueError:
            x = math.nan
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{word.strip()!r} is not {what}")
        out.append(x)
    return out


def _per_row_costs(text: str) -> list[float]:
    """``--reference-costs``: milliseconds per row, each above 0, as slot-seconds."""
    costs = _numbers(text, "a number of ms per row")
    for ms in costs:
        if ms <= 0:
            raise argparse.ArgumentTypeError(f"{ms:g} is not a cost per row above 0 ms")
    return [ms / 1000 for ms in costs]


def _targets(text: str) -> list[float]:
    """``--reference-targets``: utilization targets (checked against the autoscaler's own
    rules once the run's other keys are known)."""
    return _numbers(text, "a utilization target")


@dataclass
class Run:
    profile: str
    mode: str
    partitions: int = PARTITIONS
    start: float = 0.0
    total_rows: int = 0
    samples: list[Seen] = field(default_factory=list)
    rescales: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    task_seconds: float | None = None  # what the app's tasks ran, from Spark's task log


#: Spark's line for each finished task (TaskSetManager, INFO), with its run time.
_TASK_DONE = re.compile(r"Finished task \S+ in stage \S+ \(TID \d+\) in (\d+) ms")


def task_seconds(log_text: str) -> float | None:
    """Slot-seconds the app's tasks ran: the sum of Spark's "Finished task ... in N ms"
    lines in the driver's log; None if it has none (a log level above INFO)."""
    times = [int(m.group(1)) for m in _TASK_DONE.finditer(log_text)]
    return sum(times) / 1000.0 if times else None


def run_once(cluster: LocalCluster, profile: str, mode: str, work: Path,
             extra: dict[str, str], partitions: int = PARTITIONS
             ) -> tuple[Run, dict[str, np.ndarray]]:
    duration, points = knots(profile)
    out = work / f"{profile}-{mode}"
    shutil.rmtree(out, ignore_errors=True)
    conf = {**COMMON_CONF, "spark.sql.shuffle.partitions": str(partitions), **MODES[mode],
            **(AUTOSCALER_CONF if mode in AUTOSCALED else {}),
            **(extra if mode in AUTOSCALED else {})}
    run = Run(profile, mode, partitions)
    app = submit(cluster, APP, "--profile", json.dumps(points), "--out", str(out / "data"),
                 "--checkpoint", str(out / "checkpoint"), "--partitions", str(partitions),
                 "--cost", str(COST), "--trigger", TRIGGER, conf=conf, log_path=out / "app.log")
    watcher = AppWatch(cluster, app, rest=mode in AUTOSCALED)
    run.samples = watcher.samples
    watcher.start()
    print(f"  {profile}/{mode}: submitted, {duration:.0f}s profile; log {out / 'app.log'}",
          flush=True)
    last_report = time.time()
    try:
        while app.running():
            time.sleep(1.0)
            if time.time() - last_report >= 30 and watcher.samples:
                s = watcher.samples[-1]
                extra_info = f", {s.slots} slots, parallelism {s.parallelism}" \
                    if s.slots is not None else ""
                print(f"    {time.strftime('%H:%M:%S')}: {s.executors} executors{extra_info}",
                      flush=True)
                last_report = time.time()
        run.exit_code = app.wait(60)
    finally:
        watcher.stop()
        app.kill()
    run.rescales = watcher.rescales
    log_text = app.log_path.read_text(errors="replace")
    run.task_seconds = task_seconds(log_text)
    for line in log_text.splitlines():
        if line.startswith("source started at "):  # "source started at T: N rows over ..."
            words = line.split()
            run.start, run.total_rows = float(words[3].rstrip(":")), int(words[4])
    if run.exit_code != 0 or not run.start:
        raise RuntimeError(f"{profile}/{mode} failed (exit {run.exit_code}); see {app.log_path}")
    _wait_for_no_executors(cluster)
    return run, read_output(out / "data")


def _wait_for_no_executors(cluster: LocalCluster, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while cluster.executors() and time.time() < deadline:
        time.sleep(0.5)


def read_output(path: Path) -> dict[str, np.ndarray]:
    """The rows the file sink committed, read through its ``_spark_metadata`` log."""
    files = file_sink_files(path)
    tables = [pq.read_table(f) for f in files]
    columns = {name: np.concatenate([t[name].to_numpy() for t in tables])
               for name in ("id", "ts", "done")} if tables else {
        name: np.array([]) for name in ("id", "ts", "done")}
    return columns


def executor_seconds(samples: Sequence[Seen], start: float, end: float) -> float:
    """Executor-seconds over [start, end]: each sample's executors held from its own time
    until the next sample's (the last one's until ``end``), none before the first sample.
    The samples are about a second apart, a little more: each is taken a second after the
    previous one was done."""
    if not samples or end <= start:
        return 0.0
    times = np.array([s.time for s in samples], dtype=float)
    execs = np.array([s.executors for s in samples], dtype=float)
    bounds = np.clip(np.append(times, max(end, times[-1])), start, end)
    return float(np.sum(execs * np.diff(bounds)))


def summarize(run: Run, rows: dict[str, np.ndarray],
              extra: Mapping[str, str] | None = None,
              calibration: Calibration | None = None) -> dict[str, Any]:
    duration, points = knots(run.profile)
    total = run.total_rows
    ids = rows["id"]
    exactly_once = len(ids) == total and len(np.unique(ids)) == total
    lag = rows["done"] - rows["ts"]
    end = float(rows["done"].max()) if len(ids) else run.start + duration
    # Until the last row is written (the profile's end if rows are missing).
    until = max(end, run.start + duration)
    # The app's start as the watcher sees it: its first sample, before any executor.
    app_start = run.samples[0].time if run.samples else run.start
    seconds = np.arange(math.floor(run.start), math.ceil(end))
    oldest = _oldest_unprocessed(rows, seconds)
    restarts = sum(1 for r in run.rescales if r.get("kind") == "restart")
    live = sum(1 for r in run.rescales if r.get("kind") == "live")
    # What a row really cost a slot in this run (with the tasks' fixed costs), if known.
    per_row = run.task_seconds / total if run.task_seconds is not None and total else None
    # The references over the run's own bill: from the app's start to the drain's end.
    window = over_window(points, run.start - app_start, until - run.start - duration)
    return {
        "profile": run.profile, "mode": run.mode,
        "executor_seconds": executor_seconds(run.samples, app_start, until),
        "executor_seconds_from_source": executor_seconds(run.samples, run.start, until),
        "source_start_after_app": run.start - app_start,
        "oracle": oracle(points),
        "tracking": tracking(points, run.partitions, extra),
        "tracking_at_run_cost": (tracking(points, run.partitions, extra, cost=per_row)
                                 if per_row else None),
        "lag_p50": float(np.percentile(lag, 50)) if len(lag) else None,
        "lag_p99": float(np.percentile(lag, 99)) if len(lag) else None,
        "lag_max": float(lag.max()) if len(lag) else None,
        "seconds_over_target": int(np.sum(oldest > LAG_TARGET)),
        "rescales_live": live, "rescales_restart": restarts,
        "task_seconds": run.task_seconds, "task_seconds_per_row": per_row,
        "rows": int(len(ids)), "rows_expected": total, "exactly_once": bool(exactly_once),
        "drain_seconds": end - run.start - duration,
        "oracle_window": oracle(window),
        "calibrated_window": (calibrated_tracking(window, calibration, trigger_seconds(),
                                                  run.partitions, extra)
                              if calibration else None),
        "forecast_scale_ups": sum(1 for r in run.rescales if r.get("trigger") == "FORECAST"),
        "periods": (period_figures(run, rows, lag, oldest, seconds, until)
                    if run.profile == "recurring" else None),
    }


def period_figures(run: Run, rows: dict[str, np.ndarray], lag: np.ndarray,
                   oldest: np.ndarray, seconds: np.ndarray, until: float
                   ) -> list[dict[str, Any]]:
    """The recurring profile's figures per day: the rows that arrived in it (their lag), the
    seconds of it over the lag target, the executor-seconds (the last day's to the drain's
    end), and the rescales taken ahead of a forecast rise in it."""
    out = []
    for d in range(3):
        lo = run.start + d * RECURRING_PERIOD
        hi = lo + RECURRING_PERIOD if d < 2 else until
        mine = (rows["ts"] >= lo) & (rows["ts"] < hi)
        span = (seconds >= lo) & (seconds < hi)
        ahead = [r for r in run.rescales if r.get("trigger") == "FORECAST"
                 and lo <= float(r.get("time", 0.0)) < hi]
        out.append({"period": d + 1,
                    "executor_seconds": executor_seconds(run.samples, lo, hi),
                    "lag_p99": float(np.percentile(lag[mine], 99)) if mine.any() else None,
                    "seconds_over_target": int(np.sum(oldest[span] > LAG_TARGET)),
                    "forecast_scale_ups": len(ahead)})
    return out


def period_table(summaries: list[dict[str, Any]]) -> str:
    """The recurring profile per day: each run's executor-seconds, p99 lag and seconds over
    the lag target, and against the reactive autoscaler's and static allocation's."""
    by_mode = {s["mode"]: s for s in summaries if s.get("periods")}
    lines = [f"{'run':<11} {'day':>3} {'exec-s':>7} {'/autoscaler':>11} {'p99':>6} "
             f"{'-static p99':>11} {'s>30s':>6} {'ahead':>6}"]
    for s in by_mode.values():
        for p in s["periods"]:
            ref = by_mode.get("autoscaler", {}).get("periods")
            st = by_mode.get("static", {}).get("periods")
            i = p["period"] - 1
            rel = f"{p['executor_seconds'] / ref[i]['executor_seconds']:.2f}x" if ref else "-"
            dp = (f"{p['lag_p99'] - st[i]['lag_p99']:+.1f}s"
                  if st and p["lag_p99"] is not None and st[i]["lag_p99"] is not None else "-")
            lines.append(f"{s['mode']:<11} {p['period']:>3} {p['executor_seconds']:7.0f} "
                         f"{rel:>11} {p['lag_p99'] or 0:5.1f}s {dp:>11} "
                         f"{p['seconds_over_target']:6d} {p['forecast_scale_ups']:6d}")
    return "\n".join(lines)


def window_table(summaries: list[dict[str, Any]]) -> str:
    """Each run against the oracle and calibrated tracking counted over its own bill (from
    the app's start to the drain's end), and against the other runs."""
    by_mode = {s["mode"]: s for s in summaries}
    lines = [f"{'run':<11} {'exec-s':>7} {'oracle':>7} {'/oracle':>8} {'calibr.':>8} "
             f"{'/calibr.':>9} {'/static':>8} {'/dynamic':>9} {'p99':>6} {'s>30s':>6}"]
    for s in summaries:
        ratios = [f"{s['executor_seconds'] / by_mode[m]['executor_seconds']:.2f}x"
                  if m in by_mode else "-" for m in ("static", "dynamic")]
        cost, cal = s["executor_seconds"], s.get("calibrated_window")
        cal_text, cal_ratio = (f"{cal:.0f}", f"{cost / cal:.2f}x") if cal else ("-", "-")
        lines.append(
            f"{s['mode']:<11} {cost:7.0f} {s['oracle_window']:7.0f} "
            f"{cost / s['oracle_window']:7.2f}x {cal_text:>8} {cal_ratio:>9} "
            f"{ratios[0]:>8} {ratios[1]:>9} {s['lag_p99']:5.1f}s {s['seconds_over_target']:6d}")
    lines.append("oracle, calibr.: perfect tracking at 100% utilization and instant tracking "
                 "at the calibrated cost and utilization.target, each over the run's own bill "
                 "(the app's start to the drain's end)")
    return "\n".join(lines)


#: The figures a median over rounds is taken of.
_MEDIAN_FIELDS = ("executor_seconds", "executor_seconds_from_source", "oracle", "tracking",
                  "tracking_at_run_cost", "lag_p50", "lag_p99", "lag_max",
                  "seconds_over_target", "rescales_live", "rescales_restart", "task_seconds",
                  "task_seconds_per_row", "oracle_window", "calibrated_window")


def median_summary(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One run's figures as the median over its rounds; exactly once only if every round
    was; ``rounds`` the count."""
    out = dict(rounds[0])
    for key in _MEDIAN_FIELDS:
        values = [r[key] for r in rounds if r.get(key) is not None]
        out[key] = float(np.median(values)) if values else None
    for key in ("seconds_over_target", "rescales_live", "rescales_restart"):
        out[key] = int(round(out[key]))
    out["exactly_once"] = all(r["exactly_once"] for r in rounds)
    out["rounds"] = len(rounds)
    if rounds[0].get("periods"):
        out["periods"] = [
            {key: (float(np.median(vs)) if (vs := [r["periods"][i][key] for r in rounds
                                                    if r["periods"][i][key] is not None])
                   else None) for key in rounds[0]["periods"][i]}
            for i in range(len(rounds[0]["periods"]))]
        for p in out["periods"]:
            p["period"] = int(p["period"])
            p["seconds_over_target"] = int(round(p["seconds_over_target"]))
            p["forecast_scale_ups"] = int(round(p["forecast_scale_ups"]))
    return out


def _oldest_unprocessed(rows: dict[str, np.ndarray], seconds: np.ndarray) -> np.ndarray:
    """At each second, the age of the oldest row that had arrived and was not yet done."""
    order = np.argsort(rows["ts"])
    ts, done = rows["ts"][order], rows["done"][order]
    ages = np.zeros(len(seconds))
    for i, t in enumerate(seconds):
        arrived = np.searchsorted(ts, t, side="right")
        waiting = done[:arrived] > t
        if waiting.any():
            ages[i] = t - ts[:arrived][waiting][0]
    return ages


def table(summaries: list[dict[str, Any]]) -> str:
    by_mode = {s["mode"]: s for s in summaries}
    static = by_mode.get("static")
    dynamic = by_mode.get("dynamic")
    # exec-s: from the app's start (the ratios' figure); from src: from the source's start.
    lines = [f"{'run':<11} {'exec-s':>7} {'from src':>8} {'/oracle':>8} {'/static':>8} "
             f"{'/dynamic':>9} {'lag p50':>8} {'p99':>6} {'max':>6} {'s>30s':>6} {'live':>5} "
             f"{'restart':>8} {'exactly-once':>13} {'task-s':>7} {'ms/row':>7} "
             f"{'/tracking':>9}"]
    for s in summaries:
        def ratio(other: dict[str, Any] | None, s: dict[str, Any] = s) -> str:
            return f"{s['executor_seconds'] / other['executor_seconds']:.2f}x" if other else "-"
        lines.append(
            f"{s['mode']:<11} {s['executor_seconds']:7.0f} "
            f"{s['executor_seconds_from_source']:8.0f} "
            f"{s['executor_seconds'] / s['oracle']:7.2f}x {ratio(static):>8} {ratio(dynamic):>9} "
            f"{s['lag_p50']:7.1f}s {s['lag_p99']:5.1f}s {s['lag_max']:5.1f}s "
            f"{s['seconds_over_target']:6d} {s['rescales_live']:5d} {s['rescales_restart']:8d} "
            f"{'yes' if s['exactly_once'] else 'NO':>13} {_tasks(s)} {_tracked(s):>9}")
    lines.append(f"{'oracle':<11} {summaries[0]['oracle']:7.0f}")
    s = summaries[0]
    lines.append(f"{'tracking':<11} {s['tracking']:7.0f} {'':>8} "
                 f"{s['tracking'] / s['oracle']:7.2f}x  "
                 f"(instant tracking at utilization.target on balanced slot counts)")
    lines.append("exec-s: from the app's start; from src: from the source's start; both "
                 "until the last row is written; the ratios divide exec-s")
    lines.append(f"task-s: slot-seconds the app's tasks ran (Spark's task log); ms/row: "
                 f"task-s per row, against the {COST * 1000:g} ms of work the oracle counts; "
                 f"/tracking: exec-s over instant tracking at the run's own ms/row")
    return "\n".join(lines)


def _tasks(s: dict[str, Any]) -> str:
    t, per_row = s.get("task_seconds"), s.get("task_seconds_per_row")
    if t is None or per_row is None:
        return f"{'-':>7} {'-':>7}"
    return f"{t:7.0f} {per_row * 1000:7.2f}"


def _tracked(s: dict[str, Any]) -> str:
    t = s.get("tracking_at_run_cost")
    return f"{s['executor_seconds'] / t:.2f}x" if t else "-"


def plot(profile: str, runs: list[tuple[Run, dict[str, np.ndarray]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    duration, points = knots(profile)
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    t = np.linspace(0, duration, 600)
    rate = np.interp(t, [p[0] for p in points], [p[1] for p in points])
    axes[0].plot(t, rate, color="black", label="input rate")
    axes[0].plot(t, np.ceil(rate * COST - 1e-9) / COST, color="grey", ls=":",
                 label="oracle capacity")
    colors = {"static": "tab:blue", "dynamic": "tab:orange", "autoscaler": "tab:green",
              "forecast": "tab:purple"}
    for run, rows in runs:
        c = colors.get(run.mode, None)
        if len(rows["done"]):
            done = rows["done"] - run.start
            bins = np.arange(0, math.ceil(done.max()) + 5, 5.0)
            counts, _ = np.histogram(done, bins)
            axes[0].step(bins[:-1], counts / 5.0, where="post", color=c, alpha=0.7,
                         label=f"{run.mode}: rows done/s")
            seconds = np.arange(math.floor(run.start), math.ceil(rows["done"].max()))
            axes[1].plot(seconds - run.start, _oldest_unprocessed(rows, seconds), color=c,
                         label=run.mode)
        st = np.array([s.time - run.start for s in run.samples])
        axes[2].step(st, [s.executors for s in run.samples], where="post", color=c,
                     label=run.mode)
        if run.mode == "autoscaler":
            axes[3].step(st, [s.slots or 0 for s in run.samples], where="post", color=c,
                         label="slots")
            axes[3].step(st, [s.parallelism or 0 for s in run.samples], where="post",
                         color="tab:red", ls="--", label="partitions")
            for r in run.rescales:
                when = r.get("time")
                if isinstance(when, (int, float)):
                    axes[3].axvline(when - run.start, color="grey", lw=0.5)
    axes[1].axhline(LAG_TARGET, color="red", ls=":", label="lag target")
    axes[0].set_ylabel("rows/s")
    axes[1].set_ylabel("oldest waiting row (s)")
    axes[2].set_ylabel("executors")
    axes[3].set_ylabel("autoscaler")
    axes[3].set_xlabel("seconds since the source started")
    for ax in axes:
        ax.legend(loc="upper right", fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_title(f"profile '{profile}': {WORKERS} one-core workers, {COST * 1000:.0f} ms/row")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rounds(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of rounds") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} rounds: at least 1")
    return n


def _calibration(text: str) -> Calibration | str:
    if text in ("runs", "none"):
        return text
    parts = text.split(",")
    try:
        fixed, per_row_ms = (float(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not 'runs', 'none' or FIXED_S,PER_ROW_MS (two numbers)") from None
    if not (math.isfinite(fixed) and math.isfinite(per_row_ms)) or fixed < 0 or per_row_ms <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the fixed slot-seconds must be 0 or more and the ms per row above 0")
    return Calibration(fixed, per_row_ms / 1000.0)


#: Spark's INFO lines: a finished task of a micro-batch, and a micro-batch's progress.
_BATCH_TASK = re.compile(r"\[batchId = (\d+)\] Finished task \S+ in stage \S+ \(TID \d+\) "
                         r"in (\d+) ms")
_PROGRESS_ROWS = re.compile(r'"batchId" : (\d+),\s*"batchDuration" : \d+,\s*'
                            r'"numInputRows" : (\d+)')
#: The micro-batches of a calibration run left out: their tasks start the new executors'
#: Python workers, and cost several warm batches' slot-time (docs/benchmarks.md, ramps).
WARM_UP_BATCHES = 2


def batch_costs(log_text: str) -> list[tuple[float, int, int]]:
    """Each micro-batch of a driver's log as (slot-seconds its tasks ran, its rows, 1), in
    batch order: the tasks from Spark's "[batchId = N] Finished task ... in M ms" lines,
    the rows from the query's progress (``numInputRows``)."""
    slot_ms: dict[int, int] = {}
    for m in _BATCH_TASK.finditer(log_text):
        slot_ms[int(m.group(1))] = slot_ms.get(int(m.group(1)), 0) + int(m.group(2))
    rows = {int(m.group(1)): int(m.group(2)) for m in _PROGRESS_ROWS.finditer(log_text)}
    return [(slot_ms[b] / 1000.0, rows[b], 1) for b in sorted(slot_ms) if b in rows]


def calibration_runs(cluster: LocalCluster, work: Path, partitions: int) -> Calibration:
    """Static runs at the calibration's constant rates, then :func:`calibrate` on their
    micro-batches (:func:`batch_costs`), the first ``WARM_UP_BATCHES`` of each left out."""
    measured = []
    for profile in CALIBRATION:
        print(f"calibration: {profile}, static", flush=True)
        run_once(cluster, profile, "static", work, {}, partitions)
        batches = batch_costs((work / f"{profile}-static" / "app.log").read_text(
            errors="replace"))[WARM_UP_BATCHES:]
        if not batches:
            raise RuntimeError(f"calibration run {profile} logged no micro-batch past its "
                               f"first {WARM_UP_BATCHES}")
        measured += batches
        print(f"  {len(batches)} micro-batches: {sum(b[0] for b in batches):.1f} slot-s, "
              f"{sum(b[1] for b in batches)} rows", flush=True)
    return calibrate(measured)


def write_profile(results: dict[str, Any], results_dir: Path, profile: str,
                  runs: Mapping[str, Sequence[tuple[Run, dict[str, np.ndarray],
                                                    dict[str, Any]]]],
                  rounds: int) -> None:
    """The profile's runs so far into the JSON, and its plot of the newest round."""
    newest = [(r, rows) for done in runs.values() for r, rows, s in done if s["round"] == rounds]
    plot(profile, newest, results_dir / f"autoscale-{profile}.png")
    results["profiles"][profile] = {
        "summaries": [s for done in runs.values() for _, _, s in done],
        "medians": [median_summary([s for _, _, s in done]) for done in runs.values() if done],
        "runs": [{**asdict(r), "samples": [asdict(x) for x in r.samples]}
                 for done in runs.values() for r, _, _ in done]}
    (results_dir / "autoscale.json").write_text(json.dumps(results, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default="day,steps,ramps")
    parser.add_argument("--modes", default="static,dynamic,autoscaler",
                        help="of static, dynamic, autoscaler and forecast (the autoscaler with "
                             "its forecast of recurring load, for the recurring profile)")
    parser.add_argument("--conf", action="append", default=[],
                        help="extra spark.adaptive.* KEY=VALUE for the autoscaler run")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help="the source's partitions (default %(default)s)")
    parser.add_argument("--work-dir", default="")
    parser.add_argument("--references", action="store_true",
                        help="print each profile's oracle and tracking executor-seconds (no "
                             "cluster) and exit")
    parser.add_argument("--reference-costs", type=_per_row_costs, default=None,
                        help="with --references: ms of slot time per row, comma-separated, to "
                             f"track at (default: the oracle's {COST * 1000:g})")
    parser.add_argument("--reference-targets", type=_targets, default=None,
                        help="with --references: utilization targets, comma-separated, to "
                             "track at (default: the autoscaler run's)")
    parser.add_argument("--results", default=str(RESULTS),
                        help="where the JSON and the plots go (default %(default)s)")
    parser.add_argument("--rounds", type=_rounds, default=1,
                        help="rounds of every profile and mode, interleaved; the summary "
                             "gives each figure's median (default %(default)s)")
    parser.add_argument("--calibration", type=_calibration, default="runs",
                        help="'runs' (default): two static runs at constant rates first, "
                             f"{', '.join(f'{v:g}' for v in CALIBRATION.values())} of the "
                             "cluster's capacity, measure the app's fixed slot-time per "
                             "micro-batch and its cost per row; 'FIXED_S,PER_ROW_MS' gives "
                             "them; 'none' skips calibrated tracking")
    args = parser.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.conf)
    if args.references:
        if args.reference_costs is None and args.reference_targets is None:
            for profile in args.profiles.split(","):
                points = knots(profile)[1]
                o, t = oracle(points), tracking(points, args.partitions, extra)
                print(f"{profile}: oracle {o:.0f} executor-seconds, tracking {t:.0f} "
                      f"({t / o:.2f}x the oracle) on {args.partitions} partitions")
            return
        targets = args.reference_targets or [
            AutoscalerConfig.from_conf({**AUTOSCALER_CONF, **extra}).utilization_target]
        for target in targets:
            try:
                AutoscalerConfig.from_conf({**AUTOSCALER_CONF, **extra, TARGET_KEY: str(target)})
            except ConfigurationError as e:
                parser.error(f"argument --reference-targets: {e}")
        for profile in args.profiles.split(","):
            print(references_table(profile, args.partitions, extra, targets,
                                   args.reference_costs or [COST]))
        return
    results_dir = Path(args.results)
    results_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="autoscale-bench-"))
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "workers": WORKERS,
                               "cost": COST, "partitions": args.partitions,
                               "autoscaler_conf": {**AUTOSCALER_CONF, **extra}, "profiles": {}}
    profiles, modes = args.profiles.split(","), args.modes.split(",")
    with LocalCluster(workers=WORKERS, cores_per_worker=1, memory_per_worker="1g",
                      work_dir=work / "cluster") as cluster:
        calibration = args.calibration
        if calibration == "runs":
            calibration = calibration_runs(cluster, work, args.partitions)
            results["calibration_runs"] = True
        if isinstance(calibration, Calibration):
            results["calibration"] = asdict(calibration)
            print(f"calibration: {calibration.fixed:.2f} slot-s per micro-batch + "
                  f"{calibration.per_row * 1000:.2f} ms per row", flush=True)
        cal = calibration if isinstance(calibration, Calibration) else None
        done: dict[str, dict[str, list[tuple[Run, dict[str, np.ndarray], dict[str, Any]]]]] = {
            p: {m: [] for m in modes} for p in profiles}
        for round_no in range(1, args.rounds + 1):
            for profile in profiles:
                for mode in modes:
                    print(f"round {round_no}/{args.rounds}: {profile}/{mode}", flush=True)
                    run, rows = run_once(cluster, profile, mode, work, extra, args.partitions)
                    summary = {**summarize(run, rows, extra, cal), "round": round_no}
                    done[profile][mode].append((run, rows, summary))
                    print(table([summary]).splitlines()[1], flush=True)
            for profile in profiles:
                write_profile(results, results_dir, profile, done[profile], round_no)
    for profile in profiles:
        medians = [median_summary([x[2] for x in done[profile][m]]) for m in modes]
        print(f"\nprofile {profile}, median of {args.rounds} round(s):\n{table(medians)}\n"
              f"{window_table(medians)}\n", flush=True)
        if profile == "recurring":
            print(f"per day:\n{period_table(medians)}\n", flush=True)
    print(f"wrote {results_dir / 'autoscale.json'} and the plots beside it")


if __name__ == "__main__":
    main()
