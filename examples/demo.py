"""spark-adaptive demo: Reactive Mode on a local Spark cluster as workers join and leave.

    make demo

1. Starts a Spark standalone cluster on 127.0.0.1 with one worker.
2. Submits ``examples/reactive_demo.py``, an ordinary stateful streaming app,
   with ``spark-submit --conf spark.adaptive.enabled=true
   --conf spark.adaptive.scheduler.mode=reactive`` (no change to the app).
3. Adds two workers, then kills one (SIGKILL: the node is lost), watching the
   app through its spark-adaptive REST API once a second.
4. Stops the app, checks that every input row was counted exactly once, and
   draws a timeline (executors, parallelism, rows per second, rescales).

The picture and the samples go to ``demo-output/``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.submit import SubmittedApp, submit

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "demo-output"
CONF = {
    "spark.adaptive.enabled": "true",
    "spark.adaptive.scheduler.mode": "reactive",
    # Flink's defaults (30 s cooldown, 60 s stabilization) would make a long demo.
    "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "10s",
    # Longer than the seconds between the two new executors arriving: one rescale 1 -> 3.
    "spark.adaptive.scheduler.executing.resource-stabilization-timeout": "15s",
    "spark.adaptive.scheduler.executor-loss-grace": "5s",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {text}", flush=True)


class Sampler(threading.Thread):
    """Reads the app's REST API once a second: state, parallelism, executors, rates."""

    def __init__(self, app: SubmittedApp) -> None:
        super().__init__(daemon=True)
        self.app = app
        self.samples: list[dict[str, Any]] = []
        self.marks: list[tuple[float, str]] = []
        self.history: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def now(self) -> float:
        return time.monotonic() - T0

    def mark(self, what: str) -> None:
        self.marks.append((self.now(), what))
        say(what)

    def run(self) -> None:
        last = None
        while not self.stopped.wait(1.0):
            try:
                q = self.app.queries()[0]
                self.history = self.app.rescales(q["id"])["rescales"]
            except (OSError, ValueError, IndexError, KeyError):
                continue
            progress = q.get("lastProgress") or {}
            self.samples.append({
                "t": self.now(), "state": q["state"], "parallelism": q["parallelism"],
                "slots": q["slots"], "executors": q["executors"],
                "input_rps": progress.get("inputRowsPerSecond", 0.0),
                "processed_rps": progress.get("processedRowsPerSecond", 0.0),
                "batch": progress.get("batchId"),
            })
            view = (q["state"], q["parallelism"], q["executors"])
            if view != last:
                say(f"query {q['state']}: parallelism {q['parallelism']} on {q['slots']} "
                    f"slots, {q['executors']} executor(s)")
                last = view

    def wait_for(self, what: str, check: Any, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.samples and check(self.samples[-1]):
                return
            if not self.app.running():
                raise RuntimeError(f"the app ended early; see {self.app.log_path}")
            time.sleep(0.5)
        raise TimeoutError(f"timed out waiting for {what}; see {self.app.log_path}")

    def steady(self, seconds: float) -> None:
        time.sleep(seconds)


def exactly_once(output: Path, checkpoint: Path) -> tuple[bool, int]:
    """The last committed batch's complete aggregate counts every value 0..latest once.

    The app's own stop() is Spark's immediate stop, so the newest output may be of a
    batch it cut short and that was never committed: read the commit log.
    """
    committed = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    table = pq.read_table(output / f"batch={committed}").to_pydict()
    top = max(table["latest"])
    count, total = sum(table["readings"]), sum(table["total"])
    return count == top + 1 and total == top * (top + 1) // 2, count


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    with LocalCluster(workers=1, work_dir=OUT / "cluster") as cluster:
        say(f"local Spark cluster up at {cluster.master_url} with 1 worker (1 core)")
        app = submit(cluster, ROOT / "examples" / "reactive_demo.py",
                     "--checkpoint", str(OUT / "checkpoint"), "--output", str(OUT / "output"),
                     "--stop-file", str(OUT / "stop"), conf=CONF, log_path=OUT / "app.log")
        say("submitted examples/reactive_demo.py in reactive mode; app log: demo-output/app.log")
        try:
            q = app.wait_for_query()
            say(f"the app's query {q['name']} is managed: open {app.rest_url}/ in a browser "
                "to watch it (the REST API is there too)")
            sampler = Sampler(app)
            sampler.start()
            sampler.wait_for("parallelism 1", lambda s: s["parallelism"] == 1)
            sampler.steady(15)
            for _ in range(2):
                w = cluster.add_worker()
                sampler.mark(f"{w.name} joined")
            sampler.wait_for("parallelism 3", lambda s: s["parallelism"] == 3 and s["slots"] == 3)
            sampler.steady(20)
            w = cluster.kill_worker()
            sampler.mark(f"{w.name} killed (SIGKILL)")
            sampler.wait_for("parallelism 2", lambda s: s["parallelism"] == 2 and s["slots"] == 2)
            sampler.steady(20)
            history = sampler.history
            (OUT / "stop").touch()
            app.wait(180)
            sampler.stopped.set()
        finally:
            app.kill()
    ok, rows = exactly_once(OUT / "output", OUT / "checkpoint")
    (OUT / "samples.json").write_text(json.dumps(
        {"samples": sampler.samples, "marks": sampler.marks, "rescales": history}, indent=2))
    picture = OUT / "reactive-timeline.png"
    plot(sampler, history, picture)
    print()
    print("summary")
    print(f"  workers 1 -> 3 -> 2; parallelism followed: "
          f"{' -> '.join(str(r['toParallelism']) for r in history if r['kind'] == 'restart')}")
    for r in history:
        print(f"  {r['trigger']:<17} {r['kind']:<8} parallelism {r['fromParallelism']} -> "
              f"{r['toParallelism']}, slots {r['fromSlots']} -> {r['toSlots']}, "
              f"{_seconds(r['duration'])} to the first batch after it ({r['outcome']})")
    print(f"  exactly once: {'yes' if ok else 'NO'} ({rows} input rows, each counted once in "
          "the final aggregates)" if ok else f"  exactly once: NO ({rows} rows)")
    print(f"  timeline: {picture}")
    return 0 if ok else 1


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}s"


def plot(sampler: Sampler, history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = sampler.samples
    t = [x["t"] for x in s]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1]})
    top.step(t, [x["executors"] for x in s], where="post", label="executors", color="0.75",
             lw=7, alpha=0.7)
    top.step(t, [x["slots"] for x in s], where="post", label="slots of the query",
             color="tab:orange", ls="--")
    top.step(t, [x["parallelism"] for x in s], where="post", label="parallelism (partitions)",
             color="tab:blue", lw=2)
    top.set_ylabel("count")
    top.set_ylim(0, max(4, max((x["executors"] for x in s), default=1) + 1))
    top.legend(loc="upper left", fontsize=8)
    top.set_title("spark-adaptive Reactive Mode: a stateful query follows its workers")
    bottom.plot(t, [x["input_rps"] for x in s], label="input rows/s", color="tab:green")
    bottom.plot(t, [x["processed_rps"] for x in s], label="processed rows/s", color="tab:purple")
    bottom.set_ylabel("rows per second")
    bottom.set_xlabel("seconds since the demo started")
    bottom.legend(loc="upper left", fontsize=8)
    for when, what in sampler.marks:
        for ax in (top, bottom):
            ax.axvline(when, color="0.6", ls=":", lw=1)
        top.annotate(what, (when, top.get_ylim()[1] * 0.92), fontsize=7, rotation=90,
                     va="top", ha="right", color="0.4")
    started_at = time.time() - (time.monotonic() - T0)  # records carry epoch seconds
    for r in history:
        when = r["time"] - started_at
        top.axvline(when, color="tab:red", lw=1, alpha=0.6)
        top.annotate(f"{r['kind']} {r['fromParallelism']}->{r['toParallelism']}",
                     (when, top.get_ylim()[1] * 0.05), fontsize=7, color="tab:red",
                     rotation=90, va="bottom", ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)



if __name__ == "__main__":
    sys.exit(main())
