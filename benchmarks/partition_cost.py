"""What more partitions cost a micro-batch: the same load at several partition counts.

A partition count with many divisors lets more slot counts run a query's tasks in
balanced waves (live rescales), but every task costs its slot a fixed time per
micro-batch whatever its rows: scheduling, deserialization, opening the source and
the sink (for a Python source and an Arrow UDF, a Python reader and writer per task).
This measures that cost on the autoscaler benchmark's own query
(``examples/varying_load.py``: a Python streaming source, ``--cost`` seconds of wall
time per row in ``mapInArrow``, a parquet sink) on a local cluster of four one-core
workers, at a constant input rate, for each partition count in turn, over
``--rounds`` interleaved rounds.

For each count it reports the mean micro-batch duration and the task time per batch
(Spark's ``executorRunTime`` summed over the batch's tasks, from the driver's UI REST
API) against the ideal work (rows x cost), and from them the fixed time per task.

    .venv/bin/python benchmarks/partition_cost.py [--rate 400] [--partitions 4,12,24]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.session import cluster_session, wait_for_executors

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
APP = HERE.parent / "examples" / "varying_load.py"
WORKERS = 4
TRIGGER = "4 seconds"
SKIP = 3  # the first batches of each run warm up
UI_PORT = 4097


def measure(spark: Any, vl: Any, work: Path, partitions: int, rate: float, seconds: float,
            cost: float, tag: str) -> dict[str, float]:
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
    with urllib.request.urlopen(url) as r:
        before = max((s["stageId"] for s in json.load(r)), default=-1)
    start = time.time()
    profile = json.dumps([[0, rate], [seconds, rate]])
    rows = (spark.readStream.format("profiled").option("profile", profile)
            .option("start", repr(start)).option("partitions", str(partitions)).load())
    done = rows.mapInArrow(vl.work(cost), "id long, ts double, done double")
    query = (done.writeStream.format("parquet").option("path", str(work / f"out-{tag}"))
             .option("checkpointLocation", str(work / f"cp-{tag}"))
             .trigger(processingTime=TRIGGER).start())
    time.sleep(seconds + 2)
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0][SKIP:]
    query.stop()
    if not progress:
        raise RuntimeError(f"no micro-batch with rows at {partitions} partitions")
    with urllib.request.urlopen(url + "?status=complete") as r:
        stages = json.load(r)
    # This run's batches: its stages (ids after the last one before it) of one task per
    # partition, the newest as many as the batches measured.
    batches = sorted((s for s in stages if s["stageId"] > before
                      and s["numTasks"] == partitions), key=lambda s: s["stageId"])
    batches = batches[-len(progress):]
    rows_per_batch = statistics.mean(p["numInputRows"] for p in progress)
    task_time = statistics.mean(s["executorRunTime"] / 1000 for s in batches)
    ideal = rows_per_batch * cost
    return {"partitions": partitions, "batches": len(progress), "rows_per_batch": rows_per_batch,
            "batch_duration": statistics.mean(p["durationMs"]["triggerExecution"] / 1000
                                              for p in progress),
            "task_time": task_time, "ideal_work": ideal,
            "fixed_per_task": (task_time - ideal) / partitions}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=400.0, help="input rows per second")
    ap.add_argument("--partitions", default="4,12,24")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=70.0, help="per run")
    ap.add_argument("--cost", type=float, default=0.004, help="seconds of work per row")
    args = ap.parse_args()
    counts = [int(x) for x in args.partitions.split(",") if x]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The app's module, for the Python processes Spark starts (the streaming source's
    # planner beside the driver, the workers beside each executor).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        x for x in (str(APP.parent), os.environ.get("PYTHONPATH", "")) if x)
    sys.path.insert(0, str(APP.parent))
    import varying_load as vl

    work = Path(tempfile.mkdtemp(prefix="partition-cost-"))
    runs: list[dict[str, float]] = []
    with LocalCluster(workers=WORKERS, work_dir=work / "cluster") as cluster:
        spark = cluster_session(cluster, "partition-cost", **{
            "spark.ui.enabled": "true", "spark.ui.port": str(UI_PORT),
            "spark.executor.cores": "1"})
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(vl.ProfiledSource)
        wait_for_executors(spark, WORKERS)
        for rnd in range(args.rounds):
            for p in counts:
                r = measure(spark, vl, work, p, args.rate, args.seconds, args.cost, f"{p}-{rnd}")
                runs.append(r)
                print(f"  round {rnd + 1}, {p:>3} partitions: batch {r['batch_duration']:.2f}s, "
                      f"task time {r['task_time']:.2f} slot-s for {r['ideal_work']:.2f} of work",
                      flush=True)
        spark.stop()
    print(f"\n{args.rate:g} rows/s, {args.cost * 1000:g} ms a row, trigger {TRIGGER}, "
          f"{WORKERS} one-core executors; means over {args.rounds} rounds")
    print(f"{'partitions':>10}{'batch':>9}{'task time':>11}{'ideal':>8}{'vs ideal':>9}"
          f"{'per task':>10}")
    summary = []
    for p in counts:
        mine = [r for r in runs if r["partitions"] == p]
        row = {k: statistics.mean(r[k] for r in mine) for k in mine[0]}
        summary.append(row)
        print(f"{p:>10}{row['batch_duration']:>8.2f}s{row['task_time']:>10.2f}s"
              f"{row['ideal_work']:>7.2f}s{row['task_time'] / row['ideal_work']:>8.2f}x"
              f"{row['fixed_per_task'] * 1000:>8.0f}ms")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "partition_cost.json"
    out.write_text(json.dumps({"rate": args.rate, "cost": args.cost, "trigger": TRIGGER,
                               "runs": runs, "summary": summary}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
