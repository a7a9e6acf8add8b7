"""What listening to Spark costs: the same job with no listener, the py4j listener, the shim.

One SparkContext on a local standalone cluster runs the same 2,000-task job
again and again; between runs the listener under test is attached or removed.
The three variants are interleaved in a rotating order so that drift of the
machine hits all of them alike. A run's time is from job submission until the
job has returned *and* Spark's listener bus has delivered every event (work a
slow listener defers still counts).

Two measures, because on a shared 2-core machine one job's wall time varies by
several percent from run to run, more than a 1% cost:

* **wall time**: medians per variant, and the median of the per-round ratios to
  "no listener" (each round runs all three) with a 95% bootstrap interval;
* **listener time**: what the listener itself spent on Spark's listener bus per
  job, from Spark's own per-listener timer (``LiveListenerBusMetrics``,
  ``listenerProcessingTime.<class>``: events x mean time per event), and that as
  a share of the no-listener job's median wall time.

Results go to ``benchmarks/results/listener_overhead.json`` and a plot.

    make bench
    .venv/bin/python benchmarks/listener_overhead.py --repeats 15 --tasks 2000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from spark_adaptive.core import events as ev
from spark_adaptive.spark.jvm import ensure_callback_server, shim_jar_path
from spark_adaptive.spark.listener import Py4jListener, ShimListener
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.session import cluster_session

RESULTS = Path(__file__).parent / "results"


class Counter:
    """Counts the events that reach Python, and the py4j callbacks that did not become one."""

    def __init__(self) -> None:
        self.n = 0
        self.calls = lambda: 0

    def __call__(self, event: ev.Event) -> None:
        self.n += 1


def listener_bus_ms(sc: Any, pattern: str) -> tuple[int, float]:
    """Events handled and the estimated total ms of the listener classes whose timer name
    contains ``pattern``, from Spark's listener-bus metrics (cumulative)."""
    timers = sc._jsc.sc().listenerBus().metrics().metricRegistry().getTimers()
    count, total = 0, 0.0
    for name in timers.keySet():
        if name.startswith("listenerProcessingTime.") and pattern in name:
            t = timers.get(name)
            count += int(t.getCount())
            total += int(t.getCount()) * float(t.getSnapshot().getMean()) / 1e6
    return count, total


def bootstrap_median(values: list[float], rounds: int = 5000, seed: int = 7
                     ) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values``."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


def run_job(spark: Any, tasks: int) -> float:
    sc = spark.sparkContext
    bus = sc._jsc.sc().listenerBus()
    t0 = time.perf_counter()
    spark.range(0, tasks * 1000, 1, tasks).selectExpr("sum(id)").collect()
    bus.waitUntilEmpty()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--master", default="cluster",
                    help="'cluster' (a local standalone cluster) or a master such as local[2]")
    args = ap.parse_args()
    jar = shim_jar_path()
    if jar is None:
        print("the shim jar is missing: run `make setup` first", file=sys.stderr)
        return 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with contextlib.ExitStack() as stack:
        if args.master == "cluster":
            cluster = stack.enter_context(LocalCluster(workers=args.workers))
            spark = cluster_session(cluster, "listener-overhead",
                                    **{"spark.sql.adaptive.enabled": "false"})
        else:
            from pyspark.sql import SparkSession

            spark = (SparkSession.builder.master(args.master).appName("listener-overhead")
                     .config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.adaptive.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        sc = spark.sparkContext
        ensure_callback_server(sc)
        for _ in range(3):  # warm-up: JIT, Python workers, the callback server
            run_job(spark, args.tasks)

        def none() -> tuple[Any, Counter]:
            return None, Counter()

        def py4j() -> tuple[Any, Counter]:
            c = Counter()
            listener = Py4jListener(sc, c)
            c.calls = lambda: listener._listener.calls  # type: ignore[attr-defined]
            return listener, c

        def shim() -> tuple[Any, Counter]:
            c = Counter()
            return ShimListener(sc, jar, c), c

        variants = {"no listener": none, "py4j listener": py4j, "JVM shim": shim}
        # Spark's timer names: the shim's class, and py4j's dynamic proxy of the Python object.
        timer_pattern = {"py4j listener": ".$Proxy", "JVM shim": "AdaptiveListener"}
        times: dict[str, list[float]] = {k: [] for k in variants}
        bus: dict[str, list[float]] = {k: [] for k in timer_pattern}
        seen: dict[str, int] = dict.fromkeys(timer_pattern, 0)
        events: dict[str, int] = {}
        names = list(variants)
        for r in range(args.repeats):
            order = names[r % 3:] + names[: r % 3]
            for name in order:
                listener, counter = variants[name]()
                try:
                    times[name].append(run_job(spark, args.tasks))
                finally:
                    if listener is not None:
                        listener.close()
                events[name] = counter.n + counter.calls()
                if name in bus:
                    # Spark keeps one timer per listener class, counting across instances;
                    # it leaves the registry while no such listener is attached, so this
                    # run's events are the growth of the count since the last run. Its mean
                    # is over recent samples, i.e. mostly this run's.
                    count, total = listener_bus_ms(sc, timer_pattern[name])
                    per_event = total / count if count else 0.0
                    new_events = count - seen[name] if count >= seen[name] else count
                    seen[name] = count
                    bus[name].append(new_events * per_event)
            print(f"round {r + 1}/{args.repeats}: " + ", ".join(
                f"{n} {times[n][-1]:.2f}s" for n in names), flush=True)
        spark.stop()

    base = statistics.median(times["no listener"])
    summary: dict[str, dict[str, Any]] = {}
    for name, ts in times.items():
        paired = [t / b for t, b in zip(ts, times["no listener"], strict=True)]
        lo, hi = bootstrap_median(paired)
        bus_ms = statistics.median(bus[name]) if name in bus else 0.0
        summary[name] = {
            "median_s": statistics.median(ts), "ratio": statistics.median(ts) / base,
            "paired_ratio": statistics.median(paired), "paired_ratio_ci95": [lo, hi],
            "listener_ms_per_job": bus_ms, "listener_share": bus_ms / 1000 / base,
            "runs_s": ts, "listener_ms_runs": bus.get(name, []),
            "events_to_python": events.get(name, 0)}
    where = f"{args.workers} one-core workers" if args.master == "cluster" else args.master
    print(f"\n{args.tasks}-task job, {args.repeats} interleaved rounds, {where}")
    print(f"{'variant':<16}{'median':>9}{'ratio':>8}{'paired ratio (95% CI)':>26}"
          f"{'listener time/job':>19}{'share of job':>14}{'events to Python':>18}")
    for name, s in summary.items():
        lo, hi = s["paired_ratio_ci95"]
        print(f"{name:<16}{s['median_s']:>8.3f}s{s['ratio']:>8.3f}"
              f"{s['paired_ratio']:>10.3f} [{lo:.3f}, {hi:.3f}]"
              f"{s['listener_ms_per_job']:>16.1f} ms{s['listener_share'] * 100:>13.2f}%"
              f"{s['events_to_python']:>18}")
    RESULTS.mkdir(exist_ok=True)
    out = {"tasks": args.tasks, "repeats": args.repeats, "master": where,
           "variants": summary}
    (RESULTS / "listener_overhead.json").write_text(json.dumps(out, indent=2))
    plot(summary, args.tasks, RESULTS / "listener_overhead.png")
    print(f"\nwrote {RESULTS / 'listener_overhead.json'} and {RESULTS / 'listener_overhead.png'}")
    return 0


def plot(summary: dict[str, dict[str, Any]], tasks: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(summary)
    for i, n in enumerate(names):
        ax.scatter([i] * len(summary[n]["runs_s"]), summary[n]["runs_s"], color="0.6", s=12,
                   zorder=2)
        ax.bar(i, summary[n]["median_s"], color=["0.8", "tab:red", "tab:green"][i], zorder=1)
        ax.text(i, summary[n]["median_s"], f"x{summary[n]['ratio']:.3f}", ha="center",
                va="bottom")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds (median bar, runs as dots)")
    ax.set_title(f"Listener cost on a {tasks}-task job")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
