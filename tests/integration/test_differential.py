"""Do no harm: the same apps, without and with spark-adaptive, behave the same.

``differential_app.py`` runs streaming apps as users write them (memory, console,
file, foreach, foreachBatch and table sinks; processAllAvailable, awaitTermination,
stop, exception, lastProgress and recentProgress; a listener's events; errors at
start and during a run; spark.streams; ids, names and run ids; the session's
checkpoint root) once with ``spark.adaptive.enabled=false`` and once with ``true``,
in two processes at the same time, and each observation of one run must equal the
other's. Local mode and a real standalone cluster each get a pair.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_adaptive.testing.cluster import LocalCluster

pytestmark = pytest.mark.timeout(900)
APP = Path(__file__).with_name("differential_app.py")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PY4J_OBJECT = re.compile(r"\bo\d+\.")


def _normalized(value: Any) -> Any:
    """Observations with what differs between any two runs (ids, py4j names) masked."""
    text = json.dumps(value, sort_keys=True)
    text = PY4J_OBJECT.sub("o<n>.", UUID.sub("<uuid>", text))
    return json.loads(text)


def _console_batches(stdout: str) -> dict[str, list[str]]:
    """The console sink's printed batches, each as its sorted table rows."""
    start = stdout.find("@@console-sink-start")
    end = stdout.find("@@console-sink-end")
    assert 0 <= start < end, "the console scenario's markers are missing from stdout"
    batches: dict[str, list[str]] = {}
    current = None
    for line in stdout[start:end].splitlines():
        match = re.match(r"Batch: (\d+)", line)
        if match:
            current = match.group(1)
            batches[current] = []
        elif current is not None and line.startswith("|") and "|word" not in line:
            batches[current].append(line.strip())
    return {k: sorted(v) for k, v in batches.items()}


def _run_pair(master: str, tmp_path: Path, *extra: str) -> dict[str, dict[str, Any]]:
    """Both runs at once; returns {"plain": observations, "adaptive": observations}."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("SPARK_ADAPTIVE_STARTUP", None)
    runs = {}
    for name, enabled in (("plain", "false"), ("adaptive", "true")):
        work = tmp_path / name
        work.mkdir()
        out = (work / "stdout").open("w")
        err = (work / "stderr").open("w")
        cmd = [sys.executable, str(APP), "--master", master, "--enabled", enabled,
               "--work", str(work), "--out", str(work / "observed.json"), *extra]
        runs[name] = (subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=work),
                      work, out, err)
    results = {}
    for name, (process, work, out, err) in runs.items():
        code = process.wait(timeout=800)
        out.close()
        err.close()
        tail = "\n".join((work / "stderr").read_text(errors="replace").splitlines()[-40:])
        assert code == 0, f"the {name} run failed:\n{tail}"
        observed = json.loads((work / "observed.json").read_text())
        observed["console_sink_printed"] = _console_batches((work / "stdout").read_text())
        results[name] = observed
    return results


def _compare(results: dict[str, dict[str, Any]], where: str) -> None:
    plain, adaptive = results["plain"], results["adaptive"]
    assert plain.pop("managed") is False and adaptive.pop("managed") is True
    rows = []
    differences = []
    for scenario in sorted(set(plain) | set(adaptive)):
        a, b = _normalized(plain.get(scenario)), _normalized(adaptive.get(scenario))
        for side in (a, b):
            assert not (isinstance(side, dict) and "scenario_failed" in side), (
                f"{scenario} failed to run: {side}")
        keys = sorted(a) if isinstance(a, dict) else [""]
        same = a == b
        rows.append(f"| {where} | {scenario} | {len(keys)} | {'same' if same else 'DIFFERS'} |")
        if not same:
            differences.append(f"{scenario}:\n  plain    {a}\n  adaptive {b}")
    print("\n".join(["| where | scenario | behaviours | result |", "|---|---|---|---|", *rows]))
    assert not differences, "\n".join(differences)
    # Not trivially equal: the scenarios really ran and observed something.
    assert plain["memory_sink_aggregation"]["rows"], plain["memory_sink_aggregation"]
    assert plain["runtime_failure"]["raised"]["class"] == "StreamingQueryException"
    assert plain["errors_at_start"]["aggregation_in_append_mode"]["class"] == (
        "AnalysisException")
    assert plain["console_sink_printed"], "the console sink printed nothing"


def test_local_mode_apps_behave_the_same(tmp_path: Path) -> None:
    _compare(_run_pair("local[2]", tmp_path), "local[2]")


def test_cluster_apps_behave_the_same(local_cluster_factory: Any, tmp_path: Path) -> None:
    # Two one-core executors for each app: standalone spreads an app over the workers.
    cluster: LocalCluster = local_cluster_factory(2, cores_per_worker=2)
    _compare(_run_pair(cluster.master_url, tmp_path, "--cores-max", "2"), "cluster")
