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

Prints a table per profile, writes ``benchmarks/results/autoscale.json`` and
one plot per profile (``autoscale-<profile>.png``).

    .venv/bin/python benchmarks/autoscale.py [--profiles day,steps] [--modes ...]

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
    balance. ``cost``: slot-seconds per row (default COST, the work the oracle counts)."""
    target = AutoscalerConfig.from_conf({**AUTOSCALER_CONF, **(extra or {})}).utilization_target
    balanced = [d for d in range(1, WORKERS + 1) if partitions % d == 0]
    times = np.arange(0.0, points[-1][0], step)
    per_row = COST if cost is None else cost
    need = np.interp(times, [p[0] for p in points], [p[1] for p in points]) * per_row / target
    slots = [next((d for d in balanced if d >= n - 1e-9), balanced[-1]) for n in need]
    return float(np.sum(slots) * step)


TARGET_KEY = "spark.adaptive.autoscaler.utilization.target"


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
            **(AUTOSCALER_CONF if mode == "autoscaler" else {}),
            **(extra if mode == "autoscaler" else {})}
    run = Run(profile, mode, partitions)
    app = submit(cluster, APP, "--profile", json.dumps(points), "--out", str(out / "data"),
                 "--checkpoint", str(out / "checkpoint"), "--partitions", str(partitions),
                 "--cost", str(COST), "--trigger", TRIGGER, conf=conf, log_path=out / "app.log")
    watcher = AppWatch(cluster, app, rest=mode == "autoscaler")
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
              extra: Mapping[str, str] | None = None) -> dict[str, Any]:
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
    }


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
    colors = {"static": "tab:blue", "dynamic": "tab:orange", "autoscaler": "tab:green"}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default="day,steps")
    parser.add_argument("--modes", default="static,dynamic,autoscaler")
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
    with LocalCluster(workers=WORKERS, cores_per_worker=1, memory_per_worker="1g",
                      work_dir=work / "cluster") as cluster:
        for profile in args.profiles.split(","):
            runs = []
            summaries = []
            for mode in args.modes.split(","):
                run, rows = run_once(cluster, profile, mode, work, extra, args.partitions)
                runs.append((run, rows))
                summaries.append(summarize(run, rows, extra))
                print(table(summaries[-1:]).splitlines()[1], flush=True)
            print(f"\nprofile {profile}:\n{table(summaries)}\n", flush=True)
            plot(profile, runs, results_dir / f"autoscale-{profile}.png")
            results["profiles"][profile] = {
                "summaries": summaries,
                "runs": [{**asdict(r), "samples": [asdict(s) for s in r.samples]}
                         for r, _ in runs]}
            (results_dir / "autoscale.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {results_dir / 'autoscale.json'} and the plots beside it")


if __name__ == "__main__":
    main()
