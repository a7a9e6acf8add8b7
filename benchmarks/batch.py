"""Adaptive batch scheduling against Spark's defaults, AQE off and the best fixed partition count.

One application on a local standalone cluster (one worker, 2 cores) runs two
jobs on generated CSV data at several scales:

* **df**: an aggregation plus a join in the DataFrame API: sum and count per
  key of the facts, joined with a dimension table, summed per group;
* **rdd**: ``reduceByKey`` over the parsed lines of the same facts.

Both aggregate before they join, so a hot key is combined on the map side and
never reaches a shuffle as skew. The skewed variant therefore runs jobs that
join first, where skew survives:

* **df-join**: the facts joined with the dimension table, then summed per
  group (Spark AQE's skew join applies wherever AQE is on);
* **rdd-join**: PySpark's ``join`` of the parsed facts with the dimension
  pairs, against :func:`spark_adaptive.batch.join` (which splits a skewed
  partition).

Variants, side by side, in one run (session confs switch between runs):

* ``defaults``: Spark as shipped: 200 shuffle partitions, AQE on (its
  coalescing aims at the cluster's default parallelism). For the RDD job:
  PySpark's ``reduceByKey(f)``, which keeps the input's partition count;
* ``aqe-off``: 200 partitions, no AQE (DataFrame job only);
* ``adaptive``: spark-adaptive's batch settings (:mod:`spark_adaptive.batch.sql`;
  :func:`spark_adaptive.batch.text_file` and
  :func:`spark_adaptive.batch.reduce_by_key` for the RDD job) at ``--v``; the
  session is created after activation, so its DataFrame queries also get the
  shim's SQL rule (``batch.shuffle-partitions-from-estimate``), which every
  other variant runs with off;
* ``fixed-N``: AQE off and N partitions, for every N of ``--sweep``; the best
  of them (and of 200) is the "best fixed" column.

Rounds interleave the variants, so drift of the shared machine hits all of
them alike; a cell is the median of its rounds (21 rounds up to 20 MiB, 5 up to
200 MiB, 2 up to 2 GiB, then 1: small jobs vary more); from 1 GiB on the sweep
skips counts below 32. ``--v-sweep`` also runs
the adaptive variant at other volumes per task, to choose the default. A
skewed variant of one scale (``--skew-scale``, a third of the fact rows on one
key) runs the join jobs with a shorter sweep (``--skew-sweep``) and reports
the slowest and the median task of the biggest shuffle-reading stage;
``--skew-threshold`` adds the adaptive jobs at another ``batch.skewed-threshold``
(e.g. Flink's and Spark's 256m against the default, the volume per task). A
small-files variant (``--small-files-scale``) writes the facts of one scale
as 200 files, as a Spark job with 200 shuffle partitions leaves them: each
file is a split, so PySpark's default runs 200 map and 200 reduce tasks.

Data goes to ``benchmarks/data/`` (gitignored; reused when present), results
to ``benchmarks/results/batch.json`` and ``batch.png`` (``--out`` names them).

    .venv/bin/python benchmarks/batch.py --scales 10m,100m          # quick
    .venv/bin/python benchmarks/batch.py                            # 10m..5g, long
    .venv/bin/python benchmarks/batch.py --report a,b --out all     # merge two runs
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import operator
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import spark_adaptive
from spark_adaptive import batch
from spark_adaptive.batch.sql import sql_confs
from spark_adaptive.core import events as ev
from spark_adaptive.core.options import format_size, parse_size
from spark_adaptive.settings import Settings
from spark_adaptive.testing.cluster import LocalCluster
from spark_adaptive.testing.recorder import EventRecorder

HERE = Path(__file__).parent
RESULTS, DATA = HERE / "results", HERE / "data"
BYTES_PER_ROW = 20  # "12345678,12345.67,42\n" and shorter keys
BIG = 1 << 30  # from here on: fixed counts below 32 are not swept, warm-up is one read
ESTIMATE = "spark.adaptive.batch.shuffle-partitions-from-estimate"  # the shim's SQL rule
STEERED = [*sql_confs(Settings()), "spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions",
           "spark.sql.adaptive.coalescePartitions.enabled", ESTIMATE]


# -- data --------------------------------------------------------------------------------------
def generate(spark: Any, scale: str, skew: float = 0.0, files: int = 0) -> tuple[Path, Path]:
    """Facts (key,value,grp) of about ``scale`` bytes and dims (key,name,grp); reused if there.

    Facts go to one file per 128 MiB, or to ``files`` files when given.
    """
    from pyspark.sql import functions as F

    name = scale + (f"-skew{int(skew * 100)}" if skew else "") + (f"-{files}files" if files
                                                                   else "")
    facts, dims, meta = DATA / name / "facts", DATA / name / "dims", DATA / name / "meta.json"
    if meta.exists():
        return facts, dims
    rows = parse_size(scale) // BYTES_PER_ROW
    keys = max(1, rows // 8)
    files = files or max(1, math.ceil(parse_size(scale) / (128 << 20)))
    h = F.xxhash64("id")
    key = F.pmod(h, F.lit(keys))
    if skew:
        key = F.when(F.pmod(F.xxhash64("id", F.lit(2)), F.lit(1000)) < int(skew * 1000),
                     F.lit(0)).otherwise(key)
    (spark.range(0, rows, numPartitions=files)
     .select(key.alias("key"), (F.pmod(F.xxhash64("id", F.lit(1)), F.lit(10**7)) / 100)
             .alias("value"), F.pmod(h, F.lit(100)).alias("grp"))
     .write.mode("overwrite").csv(str(facts)))
    (spark.range(0, keys, 2, numPartitions=max(1, math.ceil(parse_size(scale) / (1 << 30))))
     .select("id", F.concat(F.lit("name-"), "id"), F.pmod("id", F.lit(100)))
     .write.mode("overwrite").csv(str(dims)))
    size = sum(p.stat().st_size for p in facts.glob("*.csv"))
    meta.write_text(json.dumps({"rows": rows, "keys": keys, "bytes": size, "skew": skew}))
    return facts, dims


def data_bytes(facts: Path) -> int:
    return int(json.loads((facts.parent / "meta.json").read_text())["bytes"])


# -- jobs ----------------------------------------------------------------------------------------
def df_job(spark: Any, facts: Path, dims: Path) -> None:
    from pyspark.sql import functions as F

    f = spark.read.schema("key LONG, value DOUBLE, grp INT").csv(str(facts))
    d = spark.read.schema("key LONG, name STRING, dgrp INT").csv(str(dims))
    per_key = f.groupBy("key").agg(F.sum("value").alias("total"), F.count("*").alias("n"))
    out = per_key.join(d, "key").groupBy("dgrp").agg(F.sum("total"), F.sum("n"))
    out.write.format("noop").mode("overwrite").save()


def df_join_job(spark: Any, facts: Path, dims: Path) -> None:
    from pyspark.sql import functions as F

    f = spark.read.schema("key LONG, value DOUBLE, grp INT").csv(str(facts))
    d = spark.read.schema("key LONG, name STRING, dgrp INT").csv(str(dims))
    out = f.join(d, "key").groupBy("dgrp").agg(F.sum("value"), F.count("*"))
    out.write.format("noop").mode("overwrite").save()


def parse(line: str) -> tuple[int, float]:
    k, v, _ = line.split(",")
    return int(k), float(v)


def parse_dim(line: str) -> tuple[int, int]:
    k, _, g = line.split(",")
    return int(k), int(g)


def rdd_join_job(spark: Any, facts: Path, dims: Path, partitions: int | str | None,
                 v: int, skew_threshold: int | None = None) -> None:
    sc = spark.sparkContext
    if partitions == "adaptive":
        pairs = batch.text_file(sc, str(facts)).map(parse)
        groups = batch.text_file(sc, str(dims)).map(parse_dim)
        limits = {} if skew_threshold is None else {"skew_threshold": skew_threshold}
        out = batch.join(pairs, groups, avg_bytes_per_task=v, **limits)
    else:
        pairs = sc.textFile(str(facts)).map(parse)
        groups = sc.textFile(str(dims)).map(parse_dim)
        out = pairs.join(groups, partitions)  # type: ignore[arg-type]
    out.count()


def rdd_job(spark: Any, facts: Path, partitions: int | str | None, v: int) -> None:
    sc = spark.sparkContext
    if partitions == "adaptive":
        pairs = batch.text_file(sc, str(facts)).map(parse)
        out = batch.reduce_by_key(pairs, operator.add, avg_bytes_per_task=v)
    else:
        pairs = sc.textFile(str(facts)).map(parse)
        out = pairs.reduceByKey(operator.add, partitions)  # type: ignore[arg-type]
    out.count()


def sql_variant(spark: Any, name: str, v: int, skew_threshold: int | None = None) -> None:
    """Session confs of one DataFrame variant; every steered key is reset first."""
    for k in STEERED:
        spark.conf.unset(k)
    spark.conf.set(ESTIMATE, "true" if name == "adaptive" else "false")  # Spark's own plans
    if name == "defaults":
        return
    if name == "adaptive":
        given = {"spark.adaptive.batch.avg-data-volume-per-task": str(v)}
        if skew_threshold is not None:
            given["spark.adaptive.batch.skewed-threshold"] = str(skew_threshold)
        conf = sql_confs(Settings.from_conf(given))
        for k, val in conf.items():
            spark.conf.set(k, val)
        return
    if name.startswith("aqe-fixed-"):  # AQE's stages and re-planning, but N partitions
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
        spark.conf.set("spark.sql.shuffle.partitions", name.removeprefix("aqe-fixed-"))
        return
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions",
                   "200" if name == "aqe-off" else name.removeprefix("fixed-"))


# -- measuring -------------------------------------------------------------------------------------
def timed(rec: EventRecorder, run: Callable[[], None]) -> dict[str, Any]:
    """Seconds of one run, and the task count and skew of its biggest shuffle-reading stage."""
    mark = rec.mark()
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    time.sleep(0.5)  # the last stage events reach Python a moment after the action returns
    stages = [e for e in rec.events[mark:]
              if isinstance(e, ev.StageCompleted) and e.shuffle_read_bytes > 0]
    big = max(stages, key=lambda e: e.shuffle_read_bytes, default=None)
    out: dict[str, Any] = {"seconds": round(seconds, 2)}
    if big is not None:
        out.update(tasks=big.num_tasks, shuffle_bytes=big.shuffle_read_bytes,
                   max_task=big.max_task_duration, median_task=big.median_task_duration)
    return out


def default_repeats(size: int) -> int:
    """Rounds per scale: small jobs vary more from run to run."""
    # Sub-second jobs at 10 MB spread up to 2x from round to round on two cores: 21 rounds
    # keep their medians within a few percent from one run to the next.
    for limit, rounds in ((20 << 20, 21), (200 << 20, 5), (2 << 30, 2)):
        if size <= limit:
            return rounds
    return 1


def run_scale(spark: Any, rec: EventRecorder, scale: str, args: argparse.Namespace,
              skew: float = 0.0, files: int = 0) -> dict[str, Any]:
    facts, dims = generate(spark, scale, skew, files)
    v = parse_size(args.v)
    vs = [v, *(parse_size(x) for x in args.v_sweep.split(",") if x and parse_size(x) != v)]
    sweep = [int(x) for x in (args.skew_sweep if skew else args.sweep).split(",") if x]
    if parse_size(scale) >= BIG:  # 2 or 8 tasks of 128+ MiB each: far from the best there
        sweep = [n for n in sweep if n >= 32] or sweep
    sql: dict[str, Callable[[], None]] = {
        "df": lambda: df_job(spark, facts, dims),
        "df-join": lambda: df_join_job(spark, facts, dims)}
    rdd: dict[str, Callable[[int | str | None, int], None]] = {
        "rdd": lambda n, vv: rdd_job(spark, facts, n, vv),
        "rdd-join": lambda n, vv: rdd_join_job(spark, facts, dims, n, vv)}
    wanted = (args.skew_jobs if skew else args.jobs).split(",")
    threshold = parse_size(args.skew_threshold) if args.skew_threshold else None
    jobs: dict[str, dict[str, Callable[[], None]]] = {}
    for job in wanted:
        variants: dict[str, Callable[[], None]] = {}
        if job in sql:
            def df(name: str, vv: int = v, job: str = job) -> Callable[[], None]:
                return lambda: (sql_variant(spark, name, vv), sql[job]())[1]

            aqe_sweep = [int(x) for x in args.aqe_sweep.split(",") if x]
            for name in ("defaults", "aqe-off", *(f"fixed-{n}" for n in sweep),
                         *(f"aqe-fixed-{n}" for n in aqe_sweep)):
                variants[name] = df(name)
            for vv in vs:
                variants["adaptive" if vv == v else f"adaptive-{format_size(vv)}"] = \
                    df("adaptive", vv)
            if skew and threshold is not None:
                variants[f"adaptive-skew-{format_size(threshold)}"] = (
                    lambda job=job: (sql_variant(spark, "adaptive", v, threshold),
                                     sql[job]())[1])
        else:
            run = rdd[job]
            variants["defaults"] = (lambda run=run: run(None, v))  # type: ignore[misc]
            for n in sweep:
                variants[f"fixed-{n}"] = (lambda n=n, run=run: run(n, v))  # type: ignore[misc]
            for vv in vs:
                key = "adaptive" if vv == v else f"adaptive-{format_size(vv)}"
                variants[key] = (lambda vv=vv, run=run: run("adaptive", vv))  # type: ignore[misc]
            if skew and threshold is not None and job == "rdd-join":
                variants[f"adaptive-skew-{format_size(threshold)}"] = (
                    lambda: rdd_join_job(spark, facts, dims, "adaptive", v, threshold))
        jobs[job] = variants
    repeats = args.repeats or default_repeats(parse_size(scale))
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {j: {} for j in wanted}
    # Warm the page cache, the JIT and the Python workers once, unmeasured (at BIG and
    # above a full read of the input does it at a fraction of a job's cost).
    if parse_size(scale) >= BIG:
        spark.read.text(str(facts)).write.format("noop").mode("overwrite").save()
        spark.sparkContext.textFile(str(dims)).count()
    else:
        for job in wanted:
            jobs[job]["defaults"]()
    for r in range(repeats):
        for job in wanted:
            names = list(jobs[job])
            names = names[r % len(names):] + names[:r % len(names)]  # rotate the order
            for name in names:
                result = timed(rec, jobs[job][name])
                runs[job].setdefault(name, []).append(result)
                print(f"  {label(scale, skew, files)} {job} {name}: {result}", flush=True)
    return {"scale": scale, "bytes": data_bytes(facts), "skew": skew, "files": files,
            "repeats": repeats,
            "runs": runs, "summary": {job: summarize(runs[job]) for job in wanted}}


def merge_results(files: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Results of several runs as one list: a job measured again at the same scale (and skew
    and file count) in a later file replaces the earlier measurement of that job."""
    by_case: dict[tuple[Any, ...], dict[str, Any]] = {}
    for results in files:
        for res in results:
            case = (res["scale"], res["skew"], res.get("files", 0))
            if case not in by_case:
                by_case[case] = {**res, "runs": dict(res["runs"]),
                                 "summary": dict(res["summary"])}
                continue
            kept = by_case[case]
            kept["runs"].update(res["runs"])
            kept["summary"].update(res["summary"])
    return list(by_case.values())


def label(scale: str, skew: float, files: int) -> str:
    return scale + (" skewed" if skew else "") + (f" in {files} files" if files else "")


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    med = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    fixed = {k: t for k, t in med.items() if k.startswith("fixed-") or k == "aqe-off"}
    best = min(fixed, key=lambda k: fixed[k])
    under_aqe = {k: t for k, t in med.items() if k.startswith("aqe-fixed-")}
    best_aqe = min(under_aqe, key=lambda k: under_aqe[k]) if under_aqe else None
    last = {name: rs[-1] for name, rs in runs.items()}
    return {"median": med, "best_fixed": best, "tasks": {k: r.get("tasks") for k, r in
                                                         last.items()},
            "adaptive_vs_best": med["adaptive"] / med[best],
            "adaptive_vs_defaults": med["adaptive"] / med["defaults"],
            "best_fixed_under_aqe": best_aqe,
            "adaptive_vs_best_under_aqe": med["adaptive"] / med[best_aqe] if best_aqe else None,
            "skew": {k: (r.get("max_task"), r.get("median_task"), r.get("tasks"))
                     for k, r in last.items()}}


# -- output ----------------------------------------------------------------------------------------
def table(results: list[dict[str, Any]]) -> str:
    lines = ["| job | scale | defaults | AQE off | adaptive | best fixed | adaptive / best "
             "| adaptive / defaults | tasks (adaptive) |", "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for job, s in res["summary"].items():
            m = s["median"]
            aqe_off = f"{m['aqe-off']:.1f}s" if "aqe-off" in m else "n/a"
            name = label(res["scale"], res["skew"], res.get("files", 0))
            lines.append(
                f"| {job} | {name} ({res['bytes'] / 2**20:.0f} MiB) | {m['defaults']:.1f}s "
                f"| {aqe_off} | {m['adaptive']:.1f}s | {m[s['best_fixed']]:.1f}s "
                f"({s['best_fixed']}) | {s['adaptive_vs_best']:.2f} "
                f"| {s['adaptive_vs_defaults']:.2f} | {s['tasks'].get('adaptive')} |")
    under = [(res, job, s) for res in results for job, s in res["summary"].items()
             if s.get("best_fixed_under_aqe")]
    if under:
        lines += ["", "| job | scale | adaptive | best fixed count with AQE on, no coalescing "
                      "| adaptive / that |", "|---|---|---|---|---|"]
        for res, job, s in under:
            m, best = s["median"], s["best_fixed_under_aqe"]
            lines.append(f"| {job} | {res['scale']} | {m['adaptive']:.2f}s | {m[best]:.2f}s "
                         f"({best}) | {s['adaptive_vs_best_under_aqe']:.2f} |")
    for res in results:
        if not res["skew"]:
            continue
        lines.append("")
        for job, s in res["summary"].items():
            cells = []
            for name in ("defaults", "aqe-off", "adaptive",
                         *(k for k in s["skew"] if k.startswith("adaptive-skew-"))):
                slow, med, tasks = s["skew"].get(name, (None, None, None))
                if slow and med and tasks and tasks >= 4:  # the median of 2 tasks is the max
                    cells.append(f"{name} ({tasks} tasks) {slow:.2f}s / {med:.2f}s = "
                                 f"{slow / med:.1f}x")
            lines.append(f"skewed {res['scale']} {job}: slowest / median task of the biggest "
                         f"shuffle stage: " + "; ".join(cells))
    extra = sorted({k for r in results for s in r["summary"].values() for k in s["median"]
                    if k.startswith("adaptive-")})
    if extra:
        lines += ["", "| job | scale | " + " | ".join(["adaptive", *extra]) + " | best fixed |",
                  "|---|---|" + "---|" * (len(extra) + 2)]
        for res in results:
            for job, s in res["summary"].items():
                cells = [f"{s['median'][k] / s['median'][s['best_fixed']]:.2f}"
                         if k in s["median"] else "-" for k in ["adaptive", *extra]]
                lines.append(f"| {job} | {res['scale']} | " + " | ".join(cells)
                             + f" | {s['median'][s['best_fixed']]:.1f}s |")
    return "\n".join(lines)


COLORS = {"defaults": "tab:blue", "aqe-off": "tab:orange", "adaptive": "tab:green",
          "best fixed": "tab:red"}


def skew_panel(ax: Any, skewed: list[dict[str, Any]]) -> None:
    """Slowest over median task of the biggest shuffle stage, per job and variant."""
    bars = [(f"{r['scale']} {job} {name}", slow / med)
            for r in skewed for job, s in r["summary"].items()
            for name, (slow, med, tasks) in s["skew"].items()
            if slow and med and tasks and tasks >= 4]
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color="tab:purple")
    ax.axvline(2.0, color="black", linestyle="--", linewidth=1, label="2x (target)")
    ax.invert_yaxis()
    ax.set_xscale("log")  # AQE off runs 100x; the target is 2x
    ax.set(xlabel="slowest task / median task (log)", title="skewed key: task balance")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend()


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plain = [r for r in results if not r["skew"] and not r.get("files")]
    skewed = [r for r in results if r["skew"]]
    jobs = sorted({j for r in plain for j in r["summary"]})
    panels = len(jobs) + (1 if skewed else 0)
    if not panels:
        return
    bars = sum(len(s["skew"]) for r in skewed for s in r["summary"].values())
    # One line per skew bar: a run of several skewed joins gets a taller figure.
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, max(4.5, 0.22 * bars + 1)),
                             squeeze=False)
    if skewed:
        skew_panel(axes[0][-1], skewed)
    for ax, job in zip(axes[0], jobs, strict=False):
        xs = [r["bytes"] / 2**20 for r in plain if job in r["summary"]]
        for label in ("defaults", "aqe-off", "adaptive", "best fixed"):
            ys = []
            for r in plain:
                s = r["summary"].get(job)
                if s is None:
                    continue
                key = s["best_fixed"] if label == "best fixed" else label
                ys.append(s["median"].get(key, float("nan")))
            if not all(math.isnan(y) for y in ys):
                ax.plot(xs, ys, marker="o", label=label, color=COLORS[label])
        ax.set(xscale="log", yscale="log", xlabel="input on disk (MiB)", ylabel="seconds",
               title=f"{job} job")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="10m,100m,1g,5g")
    ap.add_argument("--jobs", default="df,rdd")
    ap.add_argument("--v", default=format_size(Settings().batch.avg_data_volume_per_task),
                    help="volume per task of the adaptive variant (default: the option default)")
    ap.add_argument("--v-sweep", default="", help="more volumes to try, e.g. 16m,32m,128m")
    ap.add_argument("--sweep", default="2,8,32,128,200", help="fixed partition counts")
    ap.add_argument("--repeats", type=int, default=0,
                    help="rounds per scale; 0: 9 up to 20 MiB, 5 up to 200 MiB, 2 up to 2 GiB, "
                         "else 1")
    ap.add_argument("--aqe-sweep", default="",
                    help="also fixed counts with AQE on and coalescing off (DataFrame jobs), "
                         "e.g. 2,8,32: separates AQE's stage-by-stage execution from the count")
    ap.add_argument("--skew-scale", default="1g", help="scale of the skewed variant ('' skips)")
    ap.add_argument("--small-files-scale", default="10m",
                    help="scale also run with its facts in --small-files files ('' skips)")
    ap.add_argument("--small-files", type=int, default=200,
                    help="files of the small-files variant (200: what a Spark job with "
                         "200 shuffle partitions writes)")
    ap.add_argument("--skew-jobs", default="df-join,rdd-join", help="jobs of the skewed variant")
    ap.add_argument("--skew-sweep", default="32,200", help="fixed counts of the skewed variant")
    ap.add_argument("--skew-threshold", default="",
                    help="also run the skewed variant's adaptive jobs with this "
                         "batch.skewed-threshold, e.g. 256m")
    ap.add_argument("--memory", default="6g", help="executor memory")
    ap.add_argument("--out", default="batch", help="name of the .json and .png results")
    ap.add_argument("--verbose", action="store_true", help="keep spark-adaptive's INFO lines")
    ap.add_argument("--report", default="",
                    help="no run: merge these result files (comma-separated names in "
                         "benchmarks/results, without .json) into --out's table and plot; "
                         "a job measured again at the same scale in a later file replaces "
                         "the earlier one")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.report:
        merged = merge_results([json.loads((RESULTS / f"{name}.json").read_text())
                                for name in args.report.split(",")])
        merged.sort(key=lambda r: (bool(r["skew"]), bool(r.get("files")), r["bytes"]))
        (RESULTS / f"{args.out}.json").write_text(json.dumps(merged, indent=2))
        plot(merged, RESULTS / f"{args.out}.png")
        print(table(merged))
        print(f"\nwritten: {RESULTS / args.out}.json, {RESULTS / args.out}.png")
        return 0
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    with LocalCluster(1, 2, memory_per_worker=args.memory) as cluster:
        conf = (SparkConf().setMaster(cluster.master_url).setAppName("batch-benchmark")
                .set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.driver.memory", "2g")
                .set("spark.executor.memory", args.memory)
                .set("spark.ui.enabled", "false")
                .set("spark.ui.showConsoleProgress", "false"))
        sc = SparkContext(conf=conf)
        sc.setLogLevel("WARN")
        # Activated before the session exists, as spark-submit --conf does: the session then
        # has the shim's SQL extension (batch.shuffle-partitions-from-estimate).
        rt = spark_adaptive.enable(sc, **{"batch.enabled": "true", "rest.enabled": "false"})
        spark = SparkSession.builder.getOrCreate()
        if not args.verbose:  # one INFO line per stage would bury the results
            logging.getLogger("spark_adaptive").setLevel(logging.WARNING)
        rec = EventRecorder()
        rt.subscribe(rec, "benchmark")
        results = []
        runs = [(scale, 0.0, 0) for scale in args.scales.split(",") if scale]
        if args.small_files_scale:
            runs.append((args.small_files_scale, 0.0, args.small_files))
        runs += [(args.skew_scale, 0.33, 0)] if args.skew_scale else []
        for scale, skew, files in runs:
            results.append(run_scale(spark, rec, scale, args, skew, files))
            # Written after every scale: a long run that dies keeps what it measured.
            (RESULTS / f"{args.out}.json").write_text(json.dumps(results, indent=2))
        spark.stop()
    plot(results, RESULTS / f"{args.out}.png")
    print(table(results))
    print(f"\nwritten: {RESULTS / args.out}.json, {RESULTS / args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
