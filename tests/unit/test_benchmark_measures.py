"""What the autoscaler benchmarks measure: the simulation's lag and convergence figures, the
baseline's scaled keys, the cluster benchmark's executor-seconds and tracking reference,
and the rescale-downtime benchmark's decision times. No Spark is started."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from spark_adaptive.core.autoscaler import AutoscalerConfig
from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.streaming.history import DecisionLog
from spark_adaptive.testing.watch import Seen

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    """A benchmark script as a module (benchmarks/ is no package)."""
    module_name = f"_benchmark_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# -- benchmarks/autoscale_sim.py ------------------------------------------------------------
@pytest.mark.parametrize("policy", ["spark-adaptive", "flink-baseline"])
def test_sim_lag_figures_match_the_lag_on_a_fine_grid(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lag peaks just before a batch completes, inside a step: the simulation's highest
    lag and seconds over the target are those of the lag followed on a 5 ms grid."""
    sim = _load("autoscale_sim")
    hours, seed = 3.0, 3
    specs = sim.make_specs(random.Random(seed), 8)
    steps = int(hours * 3600 / sim.STEP)
    load = sim.make_load("spike", specs, seed, steps, hours * 3600)
    completions: dict[int, list[tuple[float, float]]] = {s.index: [] for s in specs}
    complete = sim.SimQuery._complete

    def spy(q: Any) -> None:
        completions[q.spec.index].append((q.batch_end, q.batch_rows))
        complete(q)

    monkeypatch.setattr(sim.SimQuery, "_complete", spy)
    args = argparse.Namespace(
        hours=hours, seed=seed, executors=300, bound_utilization=1.0, bound_drain=10.0,
        config=AutoscalerConfig.from_conf({"spark.adaptive.autoscaler.enabled": "true"}))
    result = sim.run("spike", policy, specs, load, args, "")

    dt = 0.005
    grid = np.arange(0.0, steps * sim.STEP, dt)
    over_any = False
    for s, per_query in zip(specs, result["per_query"], strict=True):
        arrived = np.concatenate([[0.0], np.cumsum(np.array(load.obs[s.index]) * sim.STEP)])
        boundaries = np.arange(len(arrived)) * sim.STEP
        ends = np.array([e for e, _ in completions[s.index]])
        done_after = np.concatenate([[0.0], np.cumsum([r for _, r in completions[s.index]])])
        done = done_after[np.searchsorted(ends, grid, side="right")]
        lag = np.maximum(0.0, grid - np.interp(done, arrived, boundaries))
        over = lag > sim.LAG_TARGET
        crossings = int(np.count_nonzero(np.diff(over.astype(int)))) + 1
        assert per_query["max_lag"] == pytest.approx(lag.max(), abs=2 * dt)
        assert per_query["seconds_over_lag_target"] == pytest.approx(
            np.count_nonzero(over) * dt, abs=2 * dt * crossings)
        over_any = over_any or bool(over.any())
    assert over_any  # the case has lags over the target to count
    assert result["queries_over_lag_target"] == sum(
        1 for q in result["per_query"] if q["max_lag"] > sim.LAG_TARGET)


def test_sim_baseline_scales_restart_time_with_its_other_time_keys() -> None:
    sim = _load("autoscale_sim")
    day = sim.FlinkOperatorBaseline()
    short = sim.FlinkOperatorBaseline(scale=0.25)
    assert (day.restart_time, short.restart_time) == (300.0, 75.0)
    # what a restart adds to the target, relative to the catch-up, keeps its day's weight
    assert short.restart_time / short.catch_up == day.restart_time / day.catch_up


def _sim_result(steps: dict[str, int], unsettled: int) -> dict[str, Any]:
    return {"profile": "step", "policy": "spark-adaptive", "vs_oracle": 1.0,
            "queries_over_lag_target": 0, "seconds_over_lag_target": 0.0,
            "restarts_total": 0, "executor_seconds": 1.0, "max_restarts_per_query_day": 0.0,
            "restarts_per_query_day": 0.0, "eval_round_cpu_ms_median": 0.1,
            "eval_round_cpu_ms_p99": 0.1, "eval_round_ms_median": 0.1,
            "eval_round_ms_p99": 0.1,
            "convergence": {"changes": sum(steps.values()) + unsettled, "steps": steps,
                            "unsettled": unsettled}}


def test_sim_convergence_share_counts_the_changes_that_never_settled() -> None:
    sim = _load("autoscale_sim")
    checks = {label: (ok, detail) for label, ok, detail in
              sim.check_targets([_sim_result({"0": 2, "1": 3}, unsettled=4)])}
    ok, detail = checks["T5 step"]
    assert not ok
    assert detail.startswith("3/7 changes")
    ok, detail = {label: (ok, detail) for label, ok, detail in sim.check_targets(
        [_sim_result({"0": 2, "1": 3, "2": 1}, unsettled=0)])}["T5 step"]
    assert ok and detail.startswith("3/4 changes")


def test_sim_runs_the_reactive_bound_at_each_utilization_and_draws_the_frontier(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = _load("autoscale_sim")
    assert sim.main(["--queries", "4", "--executors", "60", "--hours", "1", "--profiles",
                     "step", "--policies", "spark-adaptive,reactive-bound",
                     "--bound-utilization", "0.5,0.9", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "autoscale_sim.json").read_text())
    runs = {r["policy"]: r for r in out["results"]}
    # the policy's utilization.target (0.85) among them; the foresight bound at it alone
    assert list(runs) == ["spark-adaptive", "reactive-bound@0.5", "reactive-bound@0.85",
                          "reactive-bound@0.9", "foresight-bound"]
    assert "bound_utilization" not in runs["spark-adaptive"]
    low, high = runs["reactive-bound@0.5"], runs["reactive-bound@0.9"]
    assert (low["bound_utilization"], high["bound_utilization"]) == (0.5, 0.9)
    assert runs["foresight-bound"]["bound_utilization"] == 0.85
    # sizing for a lower utilization holds more executors: the runs differ as asked
    assert low["executor_seconds"] > high["executor_seconds"]
    assert (tmp_path / "autoscale_sim_frontier.png").stat().st_size > 0
    assert "reactive-bound@0.5" in capsys.readouterr().out
    # at the target alone the bounds keep their plain names, and draw no frontier
    one = tmp_path / "one"
    assert sim.main(["--queries", "4", "--executors", "60", "--hours", "1", "--profiles",
                     "step", "--conf", "utilization.target=0.9", "--out", str(one)]) == 0
    out = json.loads((one / "autoscale_sim.json").read_text())
    assert [r["policy"] for r in out["results"]] == [
        "spark-adaptive", "flink-baseline", "reactive-bound", "foresight-bound"]
    assert [r.get("bound_utilization") for r in out["results"]] == [None, None, 0.9, 0.9]
    assert not (one / "autoscale_sim_frontier.png").exists()


def test_sim_plans_both_bounds_at_the_policy_target_beside_every_run() -> None:
    sim = _load("autoscale_sim")
    assert sim.plan_runs(["flink-baseline"], None, 0.8) == [
        ("flink-baseline", None, "flink-baseline"), ("reactive-bound", 0.8, "reactive-bound"),
        ("foresight-bound", 0.8, "foresight-bound")]
    # a bound named runs at each utilization asked for as well; the other at the target
    assert sim.plan_runs(["foresight-bound"], [0.95, 0.8], 0.8) == [
        ("reactive-bound", 0.8, "reactive-bound"),
        ("foresight-bound", 0.8, "foresight-bound@0.8"),
        ("foresight-bound", 0.95, "foresight-bound@0.95")]


def test_sim_runs_several_seeds_and_reports_their_median_and_spread(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = _load("autoscale_sim")
    assert sim.main(["--queries", "3", "--executors", "40", "--hours", "0.5", "--profiles",
                     "ramps,bursty", "--policies", "flink-baseline", "--seeds", "1,2,3",
                     "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "autoscale_sim.json").read_text())
    assert len(out["results"]) == 3 * 2 * 3  # seeds x profiles x (baseline and two bounds)
    assert {r["seed"] for r in out["results"]} == {1, 2, 3}
    text = capsys.readouterr().out
    assert "seed 3" in text and "median (min-max) over seeds 1,2,3" in text
    for e in out["summary"]:
        assert e["seeds"] == [1, 2, 3]
        runs = [r for r in out["results"]
                if (r["profile"], r["policy"]) == (e["profile"], e["policy"])]
        for key in ("vs_oracle", "queries_over_lag_target", "seconds_over_lag_target",
                    "restarts_per_query_day", "eval_round_cpu_ms_p99"):
            values = sorted(r[key] for r in runs)
            assert e[key] == {"median": values[1], "min": values[0], "max": values[2]}
    assert {e["policy"] for e in out["summary"]} == {
        "flink-baseline", "reactive-bound", "foresight-bound"}
    # the seeds differ: the same profile and policy read other figures
    assert len({r["executor_seconds"] for r in out["results"]
                if (r["profile"], r["policy"]) == ("bursty", "flink-baseline")}) == 3


@pytest.mark.parametrize("value", ["1,x", "1,1"])
def test_sim_refuses_seeds_it_cannot_run_apart(
        value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = _load("autoscale_sim")
    with pytest.raises(SystemExit):
        sim.main(["--queries", "2", "--hours", "0.1", "--out", str(tmp_path), "--seeds", value])
    assert "argument --seeds" in capsys.readouterr().err


def _bound_query(sim: ModuleType, truth: list[float], slots: int
                 ) -> tuple[Any, Any, Any, Any]:
    """A query of the reactive bound on ``slots`` (one partition each), its rate per slot
    falling with the slots (sigma 0.01): spec, query, bound, the true rates it reads."""
    spec = sim.Spec(index=0, peak_rate=1e6, r1=1000.0, sigma=0.01, p0=slots, upper=120,
                    can_restart=True, source_cap=None, state_gb=0.1, kafka=False,
                    busy_reported=True, base_downtime=3.0, rate_limit=1e12)
    rates = sim.array("d", truth)
    q = sim.SimQuery(spec, None, slots, slots)
    q.follow = True
    q.policy = sim.ReactiveBound(spec, q, rates, 0.85, 10.0)
    return spec, q, q.policy, rates


def _view(sim: ModuleType, q: Any, now: float) -> Any:
    from spark_adaptive.core.autoscaler import QueryView
    return QueryView(now, q.held, q.P, 1, q.spec.upper, None, True, (), q.inflight is not None,
                     q.last_done, 1, 1000)


def test_sim_bound_runs_on_the_slots_running_while_its_new_executors_start() -> None:
    """A scale-up's capacity until its executors start is the slots running times their rate
    per slot, on as many partitions: not the slots asked for, nor the running slots carrying
    the new partitions' tasks in more waves."""
    sim = _load("autoscale_sim")
    spec, q, bound, rates = _bound_query(sim, [8000.0] * 20, 4)
    d = bound.evaluate(_view(sim, q, 10.0))
    assert (d.outcome, d.kind) == ("scale-up", "live")
    target = d.target_slots
    assert target >= 10 and d.target_partitions == target
    q.start(d, 10.0, 100, random.Random(1))
    assert (q.held, q.active, q.P, len(q.starting)) == (target, 4, 4, target - 4)
    assert min(q.starting) >= 10.0 + sim.START_DELAY[0]
    # a step of input before any executor starts: the batches run one wave on 4 slots
    q.advance(10.0, 20.0, 8000.0, 1.0)
    assert q.batch_id == 0 and q.batch_end is not None  # the first batch still runs
    fixed = sim.TASK_OVERHEAD + sim.BATCH_OVERHEAD
    rate = q.batch_rows / (q.batch_dur - fixed)
    assert rate == pytest.approx(4 * spec.rate_per_slot(4))
    assert rate == pytest.approx(spec.capacity(4, 4) / (1 - fixed / sim.TRIGGER))
    assert rate > spec.capacity(4, target) / (1 - (2 * sim.TASK_OVERHEAD + sim.BATCH_OVERHEAD)
                                              / sim.TRIGGER)
    # each executor that starts joins with a partition of its own
    first = q.starting[0]
    q.arrivals(first)
    assert (q.active, q.P, q.held) == (5, 5, target)
    assert q.inflight is not None
    q.arrivals(10.0 + sim.START_DELAY[1])
    assert (q.active, q.P, q.held, q.inflight) == (target, target, target, None)
    # a scale-down repartitions onto the slots kept at once
    for k in range(len(rates)):
        rates[k] = 2000.0
    q.A = q.done = q.read  # nothing waiting
    d = bound.evaluate(_view(sim, q, 60.0))
    assert d.outcome == "scale-down"
    q.start(d, 60.0, 100, random.Random(1))
    assert q.held == q.active == q.P == d.target_slots < target


def test_sim_foresight_bound_sizes_for_the_highest_rate_of_the_next_40_s() -> None:
    sim = _load("autoscale_sim")
    truth = [2000.0] * 12 + [8000.0] * 8  # the rise comes at 120 s
    _, q, reactive, _ = _bound_query(sim, truth, 3)
    foresight = sim.ReactiveBound(q.spec, q, sim.array("d", truth), 0.85, 10.0,
                                  ahead=sim.FORESIGHT_AHEAD)
    # at 80 s the step read is the one before it (70-80 s); the next 40 s end at 120 s
    assert foresight.evaluate(_view(sim, q, 80.0)).target_slots == (
        reactive.evaluate(_view(sim, q, 80.0)).target_slots)
    # at 90 s the rise is 40 s away: sized for it, 40 s before the reactive bound
    early = foresight.evaluate(_view(sim, q, 90.0)).target_slots
    assert early > reactive.evaluate(_view(sim, q, 90.0)).target_slots
    assert early == reactive.evaluate(_view(sim, q, 130.0)).target_slots


def test_sim_ramps_profile_ramps_between_its_levels_in_about_two_minutes_with_noise() -> None:
    sim = _load("autoscale_sim")
    steps = 8640
    shape, changes = sim._shape_fn("ramps", random.Random(7), steps, sim.DAY)
    levels, turns = sim.ramp_levels(random.Random(7), steps)  # the same draws, before noise
    assert changes == []
    lo, hi = sim.RAMP_RANGE
    assert (lo, hi) == (0.1, 0.7)
    assert lo - 1e-9 <= min(levels) < lo + 0.02 and hi - 0.02 < max(levels) <= hi + 1e-9
    # turns every 90-150 s, about two minutes on average
    gaps = np.diff(turns)
    assert gaps.min() >= 90.0 and gaps.max() <= 150.0
    assert 115.0 < gaps.mean() < 125.0
    assert len(turns) == pytest.approx(steps * sim.STEP / 120.0, rel=0.05)
    # linear between the turns: a step moves the level by (hi - lo) x 10 s / the ramp's length
    t = np.arange(steps) * sim.STEP
    ramp = np.searchsorted(turns, t, side="right")
    same = ramp[1:] == ramp[:-1]
    moves = np.abs(np.diff(np.array(levels)))[same]
    assert moves.min() >= (hi - lo) * sim.STEP / 150.0 - 1e-9
    assert moves.max() <= (hi - lo) * sim.STEP / 90.0 + 1e-9
    # one direction per ramp, up and down in turn
    direction = np.sign(np.diff(np.array(levels)))[same]
    ids = ramp[1:][same]
    signs = [set(direction[ids == i]) for i in np.unique(ids)]
    assert all(len(x) == 1 for x in signs)
    assert all(a != b for a, b in zip(signs, signs[1:], strict=False))
    # a noise factor of at most +-15% every 10 s step, spanning that range
    noise = np.array(shape) / np.array(levels)
    assert noise.min() >= 0.85 - 1e-9 and noise.max() <= 1.15 + 1e-9
    assert noise.min() < 0.86 and noise.max() > 1.14
    assert abs(noise.mean() - 1.0) < 0.01
    assert np.std(np.diff(noise)) > 0.1  # drawn afresh each step, not a slow wander


def test_sim_bursty_profile_has_a_few_bursts_an_hour_of_3_to_6_times_its_low_base() -> None:
    sim = _load("autoscale_sim")
    steps, day = 8640, sim.DAY
    shape, _ = sim._shape_fn("bursty", random.Random(11), steps, day)
    rng = random.Random(11)  # the profile's own draws: its phase, then its bursts
    phase = rng.uniform(0, 1)
    bursts = sim.burst_times(rng, steps * sim.STEP)
    assert 2.0 <= len(bursts) / 24 <= 4.0  # about 3 an hour
    for (start, end, height), nxt in zip(bursts, [*bursts[1:], None], strict=True):
        assert 20.0 <= end - start <= 60.0 and 3.0 <= height <= 6.0
        assert nxt is None or nxt[0] >= end
    t = np.arange(steps) * sim.STEP
    base = sim.BURST_BASE * (1 + 0.1 * np.sin(2 * np.pi * (t / day - phase)))
    assert base.min() >= 0.135 - 1e-9 and base.max() <= 0.165 + 1e-9
    ratio = np.array(shape) / base
    inside = np.zeros(steps, dtype=bool)
    for start, end, height in bursts:
        on = (t >= start) & (t < end)
        assert 2 <= on.sum() <= 6  # 20-60 s in 10 s steps
        assert ratio[on] == pytest.approx(height)
        inside |= on
    assert ratio[~inside] == pytest.approx(1.0)  # the low base between bursts
    assert np.array(shape).max() <= 1.0


@pytest.mark.parametrize(("value", "message"), [
    ("0.5,x", "'x' is not a number"), ("0", "0 is not a utilization in (0, 1]"),
    ("0.8,1.2", "1.2 is not a utilization in (0, 1]")])
def test_sim_refuses_a_bound_utilization_outside_0_to_1(
        value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = _load("autoscale_sim")
    with pytest.raises(SystemExit):  # a small run, should the value ever be taken
        sim.main(["--queries", "2", "--hours", "0.1", "--profiles", "step", "--policies",
                  "reactive-bound", "--out", str(tmp_path), "--bound-utilization", value])
    assert f"argument --bound-utilization: {message}" in capsys.readouterr().err


# -- benchmarks/autoscale.py ----------------------------------------------------------------
def _cluster_run(autoscale: ModuleType, *, first: float, source: float, period: float
                 ) -> tuple[Any, dict[str, np.ndarray]]:
    """A 'steps' run: samples every ``period`` s from ``first``, 4 executors from the third;
    rows over the profile, the last one written 10 s after it."""
    duration = autoscale.knots("steps")[0]
    samples = [Seen(first + i * period, 0 if i < 2 else 4)
               for i in range(int((source - first + duration + 30) / period))]
    ts = source + np.linspace(0.0, duration, 50)
    done = ts + 1.0
    done[-1] = source + duration + 10.0
    run = autoscale.Run("steps", "static", start=source, total_rows=50, samples=samples)
    return run, {"id": np.arange(50), "ts": ts, "done": done}


def test_cluster_executor_seconds_count_from_the_app_start_over_real_sample_times() -> None:
    autoscale = _load("autoscale")
    first, source, period = 1000.0, 1014.0, 1.015
    run, rows = _cluster_run(autoscale, first=first, source=source, period=period)
    s = autoscale.summarize(run, rows)
    until = source + autoscale.knots("steps")[0] + 10.0
    assert s["executor_seconds"] == pytest.approx(4 * (until - (first + 2 * period)))
    assert s["executor_seconds_from_source"] == pytest.approx(4 * (until - source))
    assert s["source_start_after_app"] == pytest.approx(source - first)
    text = autoscale.table([s])
    assert "from src" in text.splitlines()[0]
    assert f"{s['executor_seconds'] / s['oracle']:.2f}x" in text.splitlines()[1]


def test_cluster_task_seconds_sum_sparks_finished_task_lines() -> None:
    autoscale = _load("autoscale")
    log = "\n".join([
        "26/11/28 00:20:38 INFO TaskSetManager: [queryId = bf036] [batchId = 0] Finished task "
        "0.0 in stage 0.0 (TID 0) in 4962 ms on 127.0.0.1 (executor 2) (1/12)",
        "26/11/28 00:20:39 INFO TaskSetManager: Finished task 1.0 in stage 3.0 (TID 17) in "
        "352 ms on 127.0.0.1 (executor 1) (2/12)",
        "26/11/28 00:20:39 INFO DAGScheduler: ResultStage 0 finished in 5314 ms",
    ])
    assert autoscale.task_seconds(log) == pytest.approx(5.314)
    assert autoscale.task_seconds("26/11/28 00:20:39 WARN Something: nothing here") is None
    run, rows = _cluster_run(autoscale, first=0.0, source=10.0, period=1.0)
    run.task_seconds = 100.0
    s = autoscale.summarize(run, rows)
    assert s["task_seconds"] == 100.0
    assert "2000.00" in autoscale.table([s]).splitlines()[1]  # 100 s over 50 rows, in ms
    run.task_seconds = None
    assert autoscale.table([autoscale.summarize(run, rows)]).splitlines()[1].split()[-3:] == \
        ["-", "-", "-"]


def test_cluster_runs_are_compared_with_tracking_at_their_own_cost_per_row() -> None:
    autoscale = _load("autoscale")
    points = autoscale.knots("steps")[1]
    at_oracle = autoscale.tracking(points, autoscale.PARTITIONS)
    assert autoscale.tracking(points, autoscale.PARTITIONS, cost=autoscale.COST) == at_oracle
    dearer = autoscale.tracking(points, autoscale.PARTITIONS, cost=autoscale.COST * 1.3)
    assert dearer > at_oracle
    run, rows = _cluster_run(autoscale, first=0.0, source=10.0, period=1.0)
    run.task_seconds = 50 * autoscale.COST * 1.3  # 50 rows at 1.3 times the oracle's cost
    s = autoscale.summarize(run, rows)
    assert s["tracking_at_run_cost"] == pytest.approx(dearer)
    assert s["tracking"] == at_oracle
    row = autoscale.table([s]).splitlines()[1].split()
    assert row[-1] == f"{s['executor_seconds'] / dearer:.2f}x"
    run.task_seconds = None
    assert autoscale.summarize(run, rows)["tracking_at_run_cost"] is None


def test_cluster_references_track_each_target_at_each_cost_per_row(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    autoscale = _load("autoscale")
    points = autoscale.knots("steps")[1]
    o = autoscale.oracle(points)
    key = "spark.adaptive.autoscaler.utilization.target"
    text = autoscale.references_table("steps", 12, {}, [0.85, 0.95], [0.004, 0.0054])
    lines = text.splitlines()
    assert lines[1] == "| utilization.target | 4 ms/row | 5.4 ms/row |"
    cells = [[float(c.strip().rstrip("x")) for c in line.strip("|").split("|")[1:]]
             for line in lines[3:]]
    assert cells[0][0] == pytest.approx(autoscale.tracking(points, 12) / o, abs=0.005)
    assert cells[1][1] == pytest.approx(
        autoscale.tracking(points, 12, {key: "0.95"}, cost=0.0054) / o, abs=0.005)
    assert cells[0][1] > cells[0][0] and cells[1][0] <= cells[0][0]
    monkeypatch.setattr(sys, "argv", ["autoscale.py", "--references", "--profiles", "steps",
                                      "--reference-costs", "4,5.4"])
    autoscale.main()
    out = capsys.readouterr().out
    assert "| 0.85 | " in out and "5.4 ms/row" in out
    for bad, said in (("--reference-costs=0", "0 is not a cost per row above 0 ms"),
                      ("--reference-costs=x", "'x' is not a number of ms per row"),
                      ("--reference-targets=0.97",
                       "utilization.target=0.97 is above spark.adaptive.autoscaler."
                       "utilization.max=0.95")):
        monkeypatch.setattr(sys, "argv", ["autoscale.py", "--references", bad])
        with pytest.raises(SystemExit):
            autoscale.main()
        assert said in capsys.readouterr().err


def test_cluster_executor_seconds_integrate_uneven_samples() -> None:
    autoscale = _load("autoscale")
    samples = [Seen(0.0, 1), Seen(1.5, 2), Seen(2.0, 0), Seen(4.0, 3)]
    assert autoscale.executor_seconds(samples, 0.0, 5.0) == pytest.approx(1.5 + 1.0 + 0 + 3.0)
    assert autoscale.executor_seconds(samples, 1.0, 3.0) == pytest.approx(0.5 + 1.0)
    assert autoscale.executor_seconds(samples, -2.0, 0.5) == pytest.approx(0.5)
    assert autoscale.executor_seconds([], 0.0, 5.0) == 0.0


def test_cluster_tracking_follows_the_runs_utilization_target() -> None:
    autoscale = _load("autoscale")
    points = autoscale.knots("steps")[1]
    key = "spark.adaptive.autoscaler.utilization.target"
    default = autoscale.tracking(points, autoscale.PARTITIONS)
    low = autoscale.tracking(points, autoscale.PARTITIONS, {key: "0.7"})
    assert low > default
    run, rows = _cluster_run(autoscale, first=0.0, source=10.0, period=1.0)
    assert autoscale.summarize(run, rows, {key: "0.7"})["tracking"] == low


def test_cluster_calibration_recovers_a_fixed_and_a_per_row_cost_from_runs_of_known_cost(
        ) -> None:
    autoscale = _load("autoscale")
    fixed, per_row = 1.2, 0.0051

    def run(rows: int, batches: int, noise: float = 0.0) -> tuple[float, int, int]:
        return batches * fixed + rows * per_row + noise, rows, batches

    exact = autoscale.calibrate([run(13_500, 22), run(54_000, 22)])
    assert exact.fixed == pytest.approx(fixed) and exact.per_row == pytest.approx(per_row)
    noisy = autoscale.calibrate([run(13_500, 22, 0.8), run(54_000, 23, -0.5),
                                 run(30_000, 21, 0.3)])
    assert noisy.fixed == pytest.approx(fixed, abs=0.1)
    assert noisy.per_row == pytest.approx(per_row, rel=0.01)
    # No fixed part at all: recovered as none.
    flat = autoscale.calibrate([(100 * 0.004, 100, 5), (1000 * 0.004, 1000, 5)])
    assert flat.fixed == pytest.approx(0.0, abs=1e-9) and flat.per_row == pytest.approx(0.004)
    # A fit whose fixed part would be negative is all per row.
    odd = autoscale.calibrate([(10.0, 1000, 10), (12.0, 4000, 10)])
    assert odd.fixed >= 0
    with pytest.raises(ValueError, match="two runs at different rows per micro-batch"):
        autoscale.calibrate([run(13_500, 22), run(27_000, 44)])


def test_cluster_calibration_reads_each_micro_batch_s_slot_time_and_rows_from_the_log(
        ) -> None:
    autoscale = _load("autoscale")
    task = ("26/12/06 18:58:08 INFO TaskSetManager: [queryId = 03e16] [batchId = {b}] Finished "
            "task {t}.0 in stage {b}.0 (TID {t}) in {ms} ms on 127.0.0.1 (executor 1) (1/2)")
    progress = ('26/12/06 18:58:12 INFO ProgressReporter: Streaming query made progress: {{\n'
                '  "id" : "03e16",\n  "batchId" : {b},\n  "batchDuration" : 18394,\n'
                '  "numInputRows" : {rows},\n  "inputRowsPerSecond" : 0.0,')
    log = "\n".join([task.format(b=0, t=0, ms=9000), task.format(b=0, t=1, ms=3000),
                     progress.format(b=0, rows=100), task.format(b=1, t=2, ms=1500),
                     task.format(b=1, t=3, ms=1700), progress.format(b=1, rows=400),
                     task.format(b=2, t=4, ms=800)])  # batch 2 has no progress yet
    assert autoscale.batch_costs(log) == [(12.0, 100, 1), (3.2, 400, 1)]
    # Batches of known cost (1.2 slot-s each plus 4 ms a row) give that cost back.
    batches = [(1.2 + r * 0.004, r, 1) for r in (600, 610, 590, 2400, 2380)]
    cal = autoscale.calibrate(batches)
    assert cal.fixed == pytest.approx(1.2) and cal.per_row == pytest.approx(0.004)


def test_cluster_calibrated_tracking_pays_each_micro_batch_s_fixed_cost() -> None:
    autoscale = _load("autoscale")
    points = autoscale.knots("steps")[1]
    per_row_only = autoscale.Calibration(0.0, autoscale.COST)
    assert autoscale.calibrated_tracking(points, per_row_only, 4.0) == pytest.approx(
        autoscale.tracking(points))
    with_fixed = autoscale.Calibration(1.2, autoscale.COST)
    assert autoscale.calibrated_tracking(points, with_fixed, 4.0) > \
        autoscale.tracking(points)
    # A constant load: 300 rows/s at 4 ms is 1.2 slots, plus 1.2 slot-s every 4 s is 1.5;
    # at 0.85 that wants 1.76: 2 slots (12 partitions run balanced on 2).
    flat = [[0.0, 300.0], [100.0, 300.0]]
    assert autoscale.calibrated_tracking(flat, with_fixed, 4.0) == pytest.approx(200.0, rel=1e-3)
    assert autoscale.trigger_seconds("4 seconds") == 4.0
    with pytest.raises(ValueError, match="not in seconds"):
        autoscale.trigger_seconds("1 minute")


def test_cluster_references_are_counted_over_the_run_s_whole_bill() -> None:
    autoscale = _load("autoscale")
    points = autoscale.knots("steps")[1]
    window = autoscale.over_window(points, 12.0, 20.0)
    assert window[0] == [0.0, points[0][1]] and window[-1][0] == pytest.approx(
        points[-1][0] + 32.0)
    # The night's one executor for the 12 s before the source and the 20 s of the drain.
    assert autoscale.oracle(window) == pytest.approx(autoscale.oracle(points) + 32.0, abs=0.1)
    assert autoscale.over_window(points, 0.0, 0.0) == points
    run, rows = _cluster_run(autoscale, first=0.0, source=10.0, period=1.0)
    cal = autoscale.Calibration(1.2, 0.005)
    s = autoscale.summarize(run, rows, calibration=cal)
    bill = autoscale.over_window(points, 10.0, 10.0)  # the last row 10 s after the profile
    assert s["oracle_window"] == pytest.approx(autoscale.oracle(bill))
    assert s["calibrated_window"] == pytest.approx(
        autoscale.calibrated_tracking(bill, cal, 4.0))
    text = autoscale.window_table([s])
    row = text.splitlines()[1].split()
    assert row[3] == f"{s['executor_seconds'] / s['oracle_window']:.2f}x"
    assert row[5] == f"{s['executor_seconds'] / s['calibrated_window']:.2f}x"
    assert autoscale.summarize(run, rows)["calibrated_window"] is None


def test_cluster_rounds_are_summarized_by_their_median() -> None:
    autoscale = _load("autoscale")
    run, rows = _cluster_run(autoscale, first=0.0, source=10.0, period=1.0)
    base = autoscale.summarize(run, rows)
    rounds = [{**base, "executor_seconds": e, "seconds_over_target": o, "exactly_once": x}
              for e, o, x in ((900.0, 0, True), (1000.0, 3, True), (1100.0, 1, False))]
    m = autoscale.median_summary(rounds)
    assert m["executor_seconds"] == 1000.0 and m["seconds_over_target"] == 1
    assert m["exactly_once"] is False and m["rounds"] == 3


def test_cluster_ramps_profile_ramps_between_0_1_and_0_7_with_noise_every_10_s() -> None:
    autoscale = _load("autoscale")
    duration, points = autoscale.knots("ramps")
    assert duration == autoscale.RAMPS_SECONDS and points[-1][0] == pytest.approx(duration)
    capacity = autoscale.WORKERS / autoscale.COST
    t = np.arange(0.0, duration, 1.0)
    rate = np.interp(t, [p[0] for p in points], [p[1] for p in points]) / capacity
    assert rate.min() >= 0.1 * 0.85 - 1e-6 and rate.max() <= 0.7 * 1.15 + 1e-6
    assert rate.min() < 0.15 and rate.max() > 0.6  # it reaches both ends
    # Noise: the rate jumps at 10 s steps (by up to 30%), not within them.
    jumps = np.abs(np.diff(rate))
    assert jumps[9::10].max() > 0.02 and np.delete(jumps, np.s_[9::10]).max() < 0.02
    # Same load every time: seeded.
    assert autoscale.ramps_shape() == autoscale.ramps_shape()
    assert autoscale.ramps_shape(seed=2) != autoscale.ramps_shape()


def test_cluster_benchmark_refuses_bad_rounds_and_calibrations(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    autoscale = _load("autoscale")
    for bad, said in (("--rounds=0", "0 rounds: at least 1"),
                      ("--rounds=x", "'x' is not a whole number of rounds"),
                      ("--calibration=1.2", "is not 'runs', 'none' or FIXED_S,PER_ROW_MS"),
                      ("--calibration=1.2,0", "ms per row above 0"),
                      ("--calibration=-1,5", "0 or more")):
        monkeypatch.setattr(sys, "argv", ["autoscale.py", bad])
        with pytest.raises(SystemExit):
            autoscale.main()
        assert said in capsys.readouterr().err, bad
    given = autoscale._calibration("1.2,5.1")
    assert given.fixed == 1.2 and given.per_row == pytest.approx(0.0051)


# -- benchmarks/rescale_downtime.py ---------------------------------------------------------
def _record(time: float, duration: float | None) -> dict[str, Any]:
    return {"time": time, "duration": duration}


def test_downtime_decided_is_the_first_deferral_since_the_previous_record() -> None:
    downtime = _load("rescale_downtime")
    records = [_record(100.0, 2.0), _record(110.0, 3.0), _record(130.0, 1.0),
               _record(150.0, None)]
    # a deferral before the first record, two before the second, none before the third
    downtime.add_decided(records, [95.0, 104.0, 107.0, 131.0])
    assert [r["decided"] for r in records] == [95.0, 104.0, 130.0, 131.0]
    assert [r["decidedToFirstBatch"] for r in records] == [7.0, 9.0, 1.0, None]


def test_downtime_deferrals_are_read_from_the_scheduler_log(vt: VirtualTime) -> None:
    """The scheduler's decisions as it logs them; the logger's level (an app's, after
    ``setLogLevel("ERROR")``) is let down to INFO while the case runs, then restored."""
    downtime = _load("rescale_downtime")
    decisions = DecisionLog(vt, lambda: "q")
    logger = logging.getLogger(downtime.LOGGER_NAME)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with downtime.Deferrals() as deferrals:
            decisions.decide("wait for warm-up", "executors that joined are being warmed up")
            decisions.decide("Executing -> Restarting", "more slots")
        decisions.decide("wait for warm-up", "after the case")
        assert len(deferrals.times) == 1
        assert logger.level == logging.ERROR
    finally:
        logger.setLevel(level)
