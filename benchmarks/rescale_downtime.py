"""Rescale downtime: from a rescale's start to the first micro-batch at the new parallelism.

Three cases on a local standalone cluster, each measured several times, all
read from the scheduler's own rescale history: from the record's opening to the
first completed micro-batch at the new parallelism. A live rescale's record
opens at the scheduler's decision; a restart's when the restart starts, which
for a restart onto more slots can come after the decision: it waits for
executors that joined to be warmed up, then for a micro-batch boundary. The
scheduler logs such a wait ("wait for warm-up", on the
``spark_adaptive.scheduler`` logger, in this process): the first of those
since the previous record is the restart's decision, and "decided -> first
batch" is measured from it (from the record's opening where nothing waited).

* **live rescale**: 2 partitions; a worker is killed and comes back, so the
  query runs its 2 partitions on 1, then 2 slots. Nothing restarts.
* **restart rescale, ~1 MB of state** and **~100 MB of state**: a stateful
  aggregation (RocksDB) whose keys hold random 1 KB strings. Its upper bound
  is lowered to 1 and raised to 2 again, each change a restart rescale: a
  clean stop between micro-batches, the offline state repartition, the
  restart from the same checkpoint.

* **Spark's own** stop, offline repartition and start, on the same checkpoint in
  the same run (after spark-adaptive's rounds of each restart case), as the
  reference: a plain session with no spark-adaptive runs the same query; each
  round stops it once no trigger is active (Spark's ``stop()`` would cut a
  running batch short, and its checkpoint could then not be repartitioned),
  calls ``StreamingCheckpointManager.repartition`` and starts it again at the
  other partition count; from the stop to its first completed micro-batch at
  the new parallelism.

The input is a file stream fed with a small parquet file every 0.3 s, after
one large file that builds the state. Prints a table of medians, writes
``benchmarks/results/rescale_downtime.json`` and a plot.

    .venv/bin/python benchmarks/rescale_downtime.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.core.streaming.history import LOGGER_NAME
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.recorder import EventRecorder
from spark_adaptive.testing.session import cluster_session
from spark_adaptive.testing.streaming import history

RESULTS = Path(__file__).parent / "results"
TRIGGER = 1.0
TIMING = {
    "scheduler.submission.resource-stabilization-timeout": "0s",
    "scheduler.executing.cooldown-after-rescaling": "0s",
    "scheduler.executing.resource-stabilization-timeout": "0s",
    "scheduler.executor-loss-grace": "1s",
}


class Trickle(threading.Thread):
    """Writes a small parquet file of new keys every ``every`` seconds."""

    def __init__(self, directory: Path, start_key: int, every: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.dir, self.key, self.every = directory, start_key, every
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.wait(self.every):
            keys = np.arange(self.key, self.key + 20)
            self.key += 20
            _write(self.dir / f"trickle-{n:06d}.parquet", keys, 16)
            n += 1


def _write(path: Path, keys: np.ndarray, payload_bytes: int) -> None:
    rng = np.random.default_rng(int(keys[0]) if len(keys) else 0)
    raw = rng.integers(0, 256, size=(len(keys), payload_bytes // 2), dtype=np.uint8)
    payload = [r.tobytes().hex() for r in raw]
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.table({"key": keys, "payload": payload}), tmp)
    os.rename(tmp, path)  # the file source must never see a half-written file




class Deferrals(logging.Handler):
    """The times of the scheduler's "wait for warm-up" decisions: a restart onto more
    slots decided, its start (and its rescale record) deferred. Attached to the
    scheduler's decision logger, at INFO, while a case runs (the scheduler runs in this
    process)."""

    ACTION = "wait for warm-up"

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.times: list[float] = []
        self._logger = logging.getLogger(LOGGER_NAME)
        self._level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        # "query %s: %s: %s" % (query, action, reason)
        args = record.args
        if isinstance(args, tuple) and len(args) == 3 and args[1] == self.ACTION:
            self.times.append(record.created)

    def __enter__(self) -> Deferrals:
        self._logger.addHandler(self)
        if self._logger.getEffectiveLevel() > logging.INFO:
            self._logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


def add_decided(records: list[dict[str, Any]], deferrals: list[float]) -> None:
    """Adds to each rescale record (``GET /queries/{id}/rescales``, oldest first) when its
    rescale was decided (``decided``, epoch seconds) and the seconds from then to its first
    micro-batch at the new parallelism (``decidedToFirstBatch``): the first deferral
    logged after the previous record opened and no later than this one, else this
    record's opening."""
    previous = -float("inf")
    for r in records:
        waited = [t for t in deferrals if previous < t <= r["time"]]
        r["decided"] = min(waited) if waited else r["time"]
        r["decidedToFirstBatch"] = (None if r["duration"] is None
                                    else r["time"] + r["duration"] - r["decided"])
        previous = r["time"]


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def restart_case(cluster: LocalCluster, work: Path, state_keys: int, rounds: int,
                 deferrals: Deferrals) -> dict[str, Any]:
    from pyspark.sql import functions as F

    src = work / f"in-{state_keys}"
    src.mkdir()
    _write(src / "base.parquet", np.arange(state_keys), 1024)
    spark = cluster_session(cluster, f"rescale-downtime-{state_keys}",
                            **{"spark.sql.shuffle.partitions": "2",
                               "spark.executor.memory": "1g"})
    spark.sparkContext.setLogLevel("ERROR")
    rt = spark_adaptive.enable(spark, **TIMING)
    rec = EventRecorder()
    rt.subscribe(rec, "bench")
    trickle = Trickle(src, state_keys)
    query = (spark.readStream.schema("key long, payload string").option("maxFilesPerTrigger", 4)
             .parquet(str(src))
             .groupBy("key").agg(F.max("payload").alias("payload"))
             .writeStream.outputMode("update")
             .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(
                 str(work / f"out-{state_keys}" / str(i))))
             .option("checkpointLocation", str(work / f"cp-{state_keys}"))
             .trigger(processingTime=f"{TRIGGER:g} seconds").start())
    first = rec.wait_for(ev.QueryProgress, lambda e: e.num_input_rows >= state_keys,
                         timeout=600)
    trickle.start()
    # Measure from 2 partitions on 2 slots (the second executor may still be arriving).
    rec.wait_until(lambda: rt.loop.call_sync(
        lambda: rt.scheduler.query(query.key).snapshot().parallelism) == 2,
        timeout=300, what="2 partitions")
    state_bytes = sum(s.memory_used_bytes for s in first.state_operators)
    checkpoint_bytes = _du(work / f"cp-{state_keys}" / "state")
    print(f"  state: {state_keys} keys, RocksDB memory {state_bytes / 2**20:.1f} MiB, "
          f"checkpoint state on disk {checkpoint_bytes / 2**20:.1f} MiB", flush=True)
    for i in range(rounds):
        for upper in (1, 2):
            rec.wait_for(ev.QueryProgress, since=rec.mark(), timeout=60)  # running steadily
            before = len(history(rt, query.key))
            rt.loop.call_sync(lambda u=upper: rt.scheduler.update_requirements(query.key, 1, u))
            rec.wait_until(lambda b=before: len(history(rt, query.key)) > b and
                           history(rt, query.key)[-1]["outcome"] == "completed",
                           timeout=300, what=f"rescale to {upper}")
            r = history(rt, query.key)[-1]
            print(f"  round {i + 1}: {r['fromParallelism']} -> {r['toParallelism']} "
                  f"{r['kind']}: {r['duration']:.2f}s from its start "
                  f"({', '.join(f'{k} {v:.2f}s' for k, v in r['timings'].items())})", flush=True)
    records = history(rt, query.key)
    add_decided(records, deferrals.times)
    records = [r for r in records if r["trigger"] == "REQUIREMENTS_CHANGED"]
    query.stop_with_savepoint()  # between two micro-batches: the checkpoint is complete
    spark.stop()
    spark_own = spark_own_rounds(cluster, work, state_keys, rounds)
    trickle.stopped.set()
    return {"state_keys": state_keys, "state_memory_bytes": state_bytes,
            "checkpoint_state_bytes": checkpoint_bytes, "records": records,
            "spark_own": spark_own}


def spark_own_rounds(cluster: LocalCluster, work: Path, state_keys: int, rounds: int
                     ) -> list[dict[str, Any]]:
    """Spark's own rescale of the same query on the same checkpoint, in a plain session:
    stop (once no trigger is active), repartition offline, start at the other count; each
    round's seconds from the stop to the first completed micro-batch at the new count."""
    from pyspark.sql import functions as F

    spark = cluster_session(cluster, f"spark-own-{state_keys}",
                            **{"spark.sql.shuffle.partitions": "2",
                               "spark.executor.memory": "1g"})
    spark.sparkContext.setLogLevel("ERROR")
    src, cp = work / f"in-{state_keys}", str(work / f"cp-{state_keys}")

    def start() -> Any:
        return (spark.readStream.schema("key long, payload string")
                .option("maxFilesPerTrigger", 4).parquet(str(src))
                .groupBy("key").agg(F.max("payload").alias("payload"))
                .writeStream.outputMode("update")
                .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(
                    str(work / f"out-{state_keys}" / str(i))))
                .option("checkpointLocation", cp)
                .trigger(processingTime=f"{TRIGGER:g} seconds").start())

    def completed_at(q: Any, partitions: int, after: int, timeout: float = 300.0) -> float:
        """When a micro-batch after ``after`` completed at ``partitions`` (epoch seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = q.lastProgress
            ops = (p or {}).get("stateOperators") or []
            if p and p["batchId"] > after and ops and \
                    ops[0].get("numShufflePartitions") == partitions:
                return time.time()
            time.sleep(0.02)
        raise TimeoutError(f"no micro-batch at {partitions} partitions in {timeout:g}s")

    query = start()
    completed_at(query, 2, -1)
    out: list[dict[str, Any]] = []
    for _ in range(rounds):
        for target in (1, 2):
            while query.status["isTriggerActive"]:
                time.sleep(0.005)
            last = query.lastProgress["batchId"]
            t0 = time.time()
            query.stop()
            t1 = time.time()
            spark._streamingCheckpointManager.repartition(cp, target)
            t2 = time.time()
            spark.conf.set("spark.sql.shuffle.partitions", str(target))
            query = start()
            done = completed_at(query, target, last)
            r = {"to": target, "duration": done - t0,
                 "timings": {"stop": t1 - t0, "repartition": t2 - t1, "start": done - t2}}
            out.append(r)
            print(f"  Spark's own -> {target}: {r['duration']:.2f}s (stop {t1 - t0:.2f}s, "
                  f"repartition {t2 - t1:.2f}s, start to a batch {done - t2:.2f}s)",
                  flush=True)
    query.stop()
    spark.stop()
    return out


def live_case(cluster: LocalCluster, work: Path, rounds: int, deferrals: Deferrals
              ) -> dict[str, Any]:
    from pyspark.sql import functions as F

    spark = cluster_session(cluster, "rescale-downtime-live",
                            **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    rt = spark_adaptive.enable(spark, **TIMING)
    rec = EventRecorder()
    rt.subscribe(rec, "bench")
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .groupBy((F.col("value") % 100).alias("k")).count()
             .writeStream.outputMode("update")
             .foreachBatch(lambda df, i: df.write.mode("overwrite").parquet(
                 str(work / "out-live" / str(i))))
             .option("checkpointLocation", str(work / "cp-live"))
             .trigger(processingTime=f"{TRIGGER:g} seconds").start())
    rec.wait_for(ev.QueryProgress, lambda e: e.state_partitions == 2, timeout=300)
    run = query.runId
    for i in range(rounds):
        for change in ("kill", "add"):
            before = len(history(rt, query.key))
            cluster.kill_worker() if change == "kill" else cluster.add_worker()
            rec.wait_until(lambda b=before: len(history(rt, query.key)) > b and
                           history(rt, query.key)[-1]["outcome"] == "completed",
                           timeout=300, what=f"live rescale after {change}")
            r = history(rt, query.key)[-1]
            print(f"  round {i + 1}: {r['fromSlots']} -> {r['toSlots']} slots, "
                  f"{r['toParallelism']} partitions, {r['kind']}: {r['duration']:.2f}s",
                  flush=True)
    records = history(rt, query.key)
    add_decided(records, deferrals.times)
    records = [r for r in records if r["kind"] == "live"]
    restarted = query.runId != run
    query.stop()
    spark.stop()
    return {"records": records, "restarted": restarted}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small-keys", type=int, default=1_000, help="~1 MB of state")
    ap.add_argument("--large-keys", type=int, default=100_000, help="~100 MB of state")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="rescale-downtime-"))
    results: dict[str, Any] = {"trigger_interval_s": TRIGGER}
    with LocalCluster(workers=2, work_dir=work / "cluster",
                      memory_per_worker="2g") as cluster:
        print("live rescale (2 partitions on 2 -> 1 -> 2 slots):", flush=True)
        with Deferrals() as deferrals:
            results["live"] = live_case(cluster, work, args.rounds, deferrals)
        for name, keys in (("restart_1mb", args.small_keys), ("restart_100mb", args.large_keys)):
            print(f"restart rescale, {name}:", flush=True)
            with Deferrals() as deferrals:
                results[name] = restart_case(cluster, work, keys, args.rounds, deferrals)
    rows = []
    for name, label in (("live", "live rescale"), ("restart_1mb", "restart, ~1 MB state"),
                        ("restart_100mb", "restart, ~100 MB state")):
        durations = [r["duration"] for r in results[name]["records"]]
        decided = [r["decidedToFirstBatch"] for r in results[name]["records"]]
        phases: dict[str, list[float]] = {}
        for r in results[name]["records"]:
            for k, v in r["timings"].items():
                phases.setdefault(k, []).append(v)
        # The stop phase is the micro-batch that was running at the restart's start finishing
        # (the query still processes meanwhile): what is left is the time without processing.
        idle = [r["duration"] - r["timings"].get("stop", 0.0) for r in results[name]["records"]]
        rows.append((label, statistics.median(durations), max(durations), len(durations),
                     {k: statistics.median(v) for k, v in phases.items()}, max(idle),
                     statistics.median(decided), max(decided)))
    print(f"\ntrigger interval {TRIGGER:g}s; 'start': from the rescale's start (a restart's "
          "start, a live rescale's decision) to the first completed micro-batch at the new "
          "parallelism; 'decided': from the scheduler's decision, before any wait for a "
          "warm-up; 'max idle': the longest without the running batch's stop phase")
    print(f"{'case':<26}{'start p50':>10}{'max':>8}{'decided p50':>12}{'max':>8}"
          f"{'max idle':>10}{'n':>4}  phases (median)")
    for label, med, mx, n, ph, idle_max, dmed, dmx in rows:
        phase_text = ", ".join(f"{k} {v:.2f}s" for k, v in ph.items()) or "no restart"
        print(f"{label:<26}{med:>9.2f}s{mx:>7.2f}s{dmed:>11.2f}s{dmx:>7.2f}s{idle_max:>9.2f}s"
              f"{n:>4}  {phase_text}")
    print(f"live rescales restarted the query: {results['live']['restarted']}")
    for name, label in (("restart_1mb", "~1 MB"), ("restart_100mb", "~100 MB")):
        own = [r["duration"] for r in results[name]["spark_own"]]
        ours = [r["duration"] for r in results[name]["records"]]
        ratio = statistics.median(ours) / statistics.median(own)
        print(f"{label}: spark-adaptive's restart {statistics.median(ours):.2f}s median, "
              f"{max(ours):.2f}s max; Spark's own stop-repartition-start "
              f"{statistics.median(own):.2f}s median, {max(own):.2f}s max (same run, same "
              f"checkpoint); ratio of medians {ratio:.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rescale_downtime.json").write_text(json.dumps(results, indent=2))
    plot(rows, RESULTS / "rescale_downtime.png")
    print(f"wrote {RESULTS / 'rescale_downtime.json'} and {RESULTS / 'rescale_downtime.png'}")
    return 0


def plot(rows: list[tuple[str, float, float, int, dict[str, float], float, float, float]],
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [r[0] for r in rows]
    ax.barh(labels, [r[1] for r in rows], color=["tab:green", "tab:blue", "tab:purple"])
    ax.axvline(TRIGGER, color="0.5", ls="--", lw=1)
    ax.text(TRIGGER, -0.6, " one trigger interval", color="0.4", fontsize=8)
    for i, r in enumerate(rows):
        ax.text(r[1], i, f" {r[1]:.2f}s (max {r[2]:.2f}s)", va="center", fontsize=8)
    ax.set_xlabel("seconds from the rescale's start to the first micro-batch at the new "
                  "parallelism (median)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
