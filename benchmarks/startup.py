"""What switching spark-adaptive on adds to an app's start.

Runs a trivial PySpark app (build a session, count 10 rows, stop) with
``spark-submit --master local[2]``, alternately without and with
``--conf spark.adaptive.enabled=true``, and times each whole process. Rounds
are interleaved so that drift of the machine hits both sides alike. Prints the
median of each side, their difference and ratio, and the app's own time from
its first line to its session being ready (reported by the app), and writes
``benchmarks/results/startup.json`` and a plot of every round.

    .venv/bin/python benchmarks/startup.py --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APP = """
import time
t0 = time.monotonic()
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("startup-benchmark").getOrCreate()
ready = time.monotonic() - t0
spark.range(10).count()
print(f"SESSION_READY {ready:.3f}", flush=True)
spark.stop()
"""

RESULTS = Path(__file__).resolve().parent / "results"


def run(app: Path, enabled: bool) -> tuple[float, float]:
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    cmd = [spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false"]
    if enabled:
        cmd += ["--conf", "spark.adaptive.enabled=true"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    t0 = time.monotonic()
    p = subprocess.run([*cmd, str(app)], capture_output=True, text=True, env=env, timeout=300)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"the app failed:\n{p.stderr[-2000:]}")
    ready = next(float(line.split()[1]) for line in p.stdout.splitlines()
                 if line.startswith("SESSION_READY"))
    return wall, ready


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default="startup")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "app.py"
        app.write_text(APP)
        run(app, False)  # warm the page cache and the .pyc files of both sides
        run(app, True)
        rounds: dict[str, list[tuple[float, float]]] = {"plain": [], "adaptive": []}
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for enabled in order:
                rounds["adaptive" if enabled else "plain"].append(run(app, enabled))
            plain, adaptive = rounds["plain"][-1][0], rounds["adaptive"][-1][0]
            print(f"round {i + 1}/{args.rounds}: plain {plain:.2f}s, adaptive {adaptive:.2f}s",
                  file=sys.stderr, flush=True)
    summary = {}
    for side, values in rounds.items():
        summary[side] = {"wall_median": statistics.median(v[0] for v in values),
                         "session_ready_median": statistics.median(v[1] for v in values)}
    added = summary["adaptive"]["wall_median"] - summary["plain"]["wall_median"]
    added_ready = (summary["adaptive"]["session_ready_median"]
                   - summary["plain"]["session_ready_median"])
    print("| | plain | with spark.adaptive.enabled=true | added | ratio |")
    print("|---|---|---|---|---|")
    for label, key, extra in (("whole app (median)", "wall_median", added),
                              ("session ready (median)", "session_ready_median", added_ready)):
        p, a = summary["plain"][key], summary["adaptive"][key]
        print(f"| {label} | {p:.2f} s | {a:.2f} s | {extra:+.2f} s | {a / p:.3f} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"rounds": rounds, "summary": summary, "added_seconds": added,
           "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}
    (RESULTS / f"{args.out}.json").write_text(json.dumps(doc, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for side, marker in (("plain", "o"), ("adaptive", "s")):
        ax.plot(range(1, len(rounds[side]) + 1), [v[0] for v in rounds[side]], marker=marker,
                label=f"{side} (median {summary[side]['wall_median']:.2f} s)")
    ax.set_xlabel("round")
    ax.set_ylabel("spark-submit wall time (s)")
    ax.set_title(f"Start-up of a trivial app, local[2]: {added:+.2f} s with spark-adaptive")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.out}.png", dpi=110)


if __name__ == "__main__":
    main()
