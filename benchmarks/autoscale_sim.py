"""Autoscaler simulation: the real policy on virtual time, against Flink's operator algorithm.

The policy under test is ``spark_adaptive.core.autoscaler.QueryAutoscaler`` with its default
keys, unchanged: the simulation only feeds it ``LoadSample``s and ``QueryView``s and carries
out its decisions. No Spark is started; everything runs on virtual time.

    PYTHONPATH=. .venv/bin/python benchmarks/autoscale_sim.py [--seed 1 | --seeds 1,2,3]
        [--queries 100] [--executors 1000] [--hours 24]
        [--profiles diurnal,spike,step,random-walk,ramps,bursty]

Prints a table per seed (and with several seeds each figure's median and min-max per
profile and policy), writes ``benchmarks/results/autoscale_sim.json`` and
``autoscale_sim.png`` (the first seed's runs). Beside the policies asked for, the reactive
and the foresight bound (below) run at the policy's ``utilization.target`` on every profile.
With ``--policies ...,reactive-bound --bound-utilization 0.5,0.75,0.85,0.95`` the reactive
bound runs at each utilization too, and ``autoscale_sim_frontier.png`` puts every run's
executor-seconds against its seconds over the lag target: the frontier a policy trades on.

The simulated cluster
---------------------
* ``--executors`` executors of one slot each (the project's tests run one-core workers, and
  one slot per executor is the finest grain a policy can use). An executor requested starts
  after a random 10-30 s (uniform; a JVM, its registration, the first task's class loading)
  and is paid for from the request on. Released executors stop at once. A request beyond the
  free executors is granted in part.
* Time moves in 10 s steps; within a step, micro-batches start and end at their own times.
  Each query's data arrives at a rate set by the load profile (below) times an input noise
  factor per step (lognormal, sigma 0.05: bursty arrivals).
* **Capacity.** A query on ``s`` slots with ``P`` partitions has ``e = P / ceil(P / s)`` busy
  slots (balanced waves when ``s`` divides ``P``; ``s <= P``; a stateless query also at most
  its source partitions). Each processes ``r1 / (1 + sigma_q (e - 1))`` rows/s: sub-linear
  scaling with a per-query contention coefficient ``sigma_q`` uniform in [0, 0.01] (the
  Universal Scalability Law's contention term; 0.01 halves the rate per slot at 100 slots),
  ``r1`` log-uniform in [1,000, 20,000] rows/s. The rate per slot carries noise: lognormal,
  sigma 0.06, correlated over about 2 min (AR(1)): data skew, GC, neighbours.
* **Micro-batches.** Trigger 5 s. A batch starts at the trigger (or when the previous one
  ends, if later), reads what has arrived (a Kafka-like source at most ``maxOffsetsPerTrigger``,
  four peak batches), and takes ``rows / capacity + waves x 15 ms + 0.2 s``: 15 ms of task
  overhead per wave (scheduling, state-store commit) and 0.2 s of planning and commit per
  batch. Its busy time is ``rows / rate per slot + P x 15 ms`` slot-seconds. Backlog
  accumulates whenever capacity is below the input and during restart downtime.
* **Sources.** 60% Kafka-like: the backlog (offsets behind latest beyond the batch's cap) is
  reported. 40% rate-like: no backlog is reported and falling behind shows only as batches
  longer than the trigger and growing ``numInputRows``. 80% of queries report busy time; the
  rest only ``processedRowsPerSecond``.
* **Lag** of a query is the age of its oldest row not yet processed by a completed batch
  (arrivals are linear within a step). In steady state it is about one trigger plus one batch.
  It peaks just before a batch completes: it is read there (before the batch's rows count as
  done) and at the end of every step.
* **Queries.** Peak demand log-uniform in [0.5, 25] slots at 100% utilization. 20% stateless
  with a source-partition cap: their micro-batches run in one stage, so they are never
  restarted and start at 200 partitions (at most the upper bound). Initial partitions from
  {8, 12, 16, 24, 32, 48, 64, 100, 200} (at least the initial need), upper bound from
  {120, 240, 360, 720}, lower bound 1. 10% of the others cannot be restarted (no RocksDB
  checkpoint); they start at 200 partitions. State size log-uniform in [10 MB, 10 GB].
* **Rescales.** Live (keep ``P``): new executors join as they start (the next batch after
  each start uses it), and the rescale completes when the last has started; a scale-down
  releases at once. While a live scale-up is in flight the query runs on the executors
  started so far, and a larger live scale-up decided meanwhile (``spark-adaptive`` only)
  asks for the executors it adds; the others wait for the rescale to complete. Restart (new ``P``):
  the query keeps running until the new executors have started, then stops after its current
  batch for a downtime of ``U(2, 4) s + 2 s x (state GB)^0.8``, times U(0.85, 1.3) per restart
  (a few seconds with small state, about 10 s at 10 GB), then runs at the new partitions.
  Executors are held through the downtime.

Load profiles (one simulated day each, shapes scaled to each query's peak)
------------------------------------------------------------------------
* ``diurnal``: night trough at 20% of peak, afternoon peak, per-query phase +-3 h, a 4%
  wobble with a 20-60 min period.
* ``spike``: a base near 30% of peak (+-15% over the day) and about five spikes a day per
  query to 2-3.3x the base (at most the peak), 5-60 min long, instant on and off.
* ``step``: a constant level that jumps every 2-4 h to a new level (log-uniform 20-100% of
  peak, at least 1.5x away): used for convergence.
* ``random-walk``: the log of the rate walks (sigma 0.035 per sqrt-minute) between 15% and
  100% of peak.
* ``ramps`` (not tuned on): linear ramps up and down between 10% and 70% of peak, each
  U(90, 150) s long, times a noise factor U(0.85, 1.15) drawn every 10 s step.
* ``bursty`` (not tuned on): a base of 15% of peak (+-10% over the day) and bursts of 3-6x
  the base for 20-60 s at random times (a Poisson process, 3 an hour on average), instant
  on and off at step boundaries.

``ramps`` and ``bursty`` keep their minutes-long shapes in seconds when ``--hours``
compresses the day; the others are compressed with it.

Policies
--------
* ``spark-adaptive``: the package's policy with its default keys (``AutoscalerConfig``;
  ``--conf`` overrides one), evaluated every ``autoscaler.evaluation.interval``. Starts on
  the initial load at 80% utilization, at a divisor of the query's partitions.
* ``reactive-bound`` and ``foresight-bound``: not policies, the ideal a reactive policy
  and one that knows the load ahead reach in this model (``ReactiveBound``); both run at
  the policy's ``utilization.target`` beside every run. Their partitions are the slots
  running: a scale-up's new executors join the query as each starts, like a live rescale's.
* ``flink-baseline``: Flink's Kubernetes-operator algorithm as documented
  (``reference/spark-and-autoscalers.md`` A.2) with its defaults: window 15 min,
  stabilization 5 min, utilization target 0.7 within [0.4, 1.0], scale-down interval 1 h
  (keeping the maximum), catch-up 30 min, restart.time 5 min, scale-down max factor 0.6,
  backlog-processing threshold 5 min; rates from the window's end points (no recent-sample
  rule), busy-time processing rate (processedRowsPerSecond where busy time is missing, like
  ours), linear scaling, parallelism = slots, every rescale a restart, parallelism capped
  by source partitions and by free executors. Evaluated every 10 s (the standalone control
  loop). The operator's GC/memory vetoes and observed-TPR switch are left out. With
  ``--hours`` below 24 the day is compressed and the baseline's time keys (window,
  stabilization, scale-down interval, catch-up, restart.time, backlog threshold) are scaled
  by ``hours / 24``; ours keep their defaults.

Measures
--------
* executor-seconds against the **oracle**: per query per step, the fewest slots whose
  noise-free capacity meets the true input rate, summed (perfect tracking at 100%
  utilization). Its cost per row includes the sub-linearity and only the overheads no
  configuration avoids (one wave of tasks, the per-batch planning);
* seconds over the 30 s lag target (summed over queries) and queries that ever exceeded it.
  Between two reads of the lag no batch completes, so it grows by one second a second and
  the seconds over the target are counted exactly (given the linear arrivals within a step);
* live and restart rescales per query per day;
* ``step`` only: for every level change, rescales until the query settles for good before
  the next change: its true (noise-free) utilization within the policy's own band, or
  below it when the next smaller slot count would exceed the policy's target (integer
  slots cannot do better). Changes that never settle are counted apart, and T5's share
  of changes settled by one rescale counts them among those that needed a rescale;
* the policy's time per evaluation round of all queries, median and p99: the thread's CPU
  time around each ``evaluate`` call (``time.thread_time``, what T6 checks), and the wall
  clock (``time.perf_counter``, which also holds preemption by other processes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spark_adaptive.core.autoscaler import (
    AutoscalerConfig,
    LoadSample,
    QueryAutoscaler,
    QueryView,
    ScalingDecision,
)
from spark_adaptive.core.autoscaler.decision import DecisionInputs, Kind, Outcome
from spark_adaptive.core.autoscaler.forecast import LoadRecurrence
from spark_adaptive.core.autoscaler.window import effective_slots

RESULTS = Path(__file__).parent / "results"
STEP = 10.0
TRIGGER = 5.0
TASK_OVERHEAD = 0.015
BATCH_OVERHEAD = 0.2
LAG_TARGET = 30.0
START_DELAY = (10.0, 30.0)
INPUT_NOISE = 0.05
RATE_NOISE = 0.06
RATE_NOISE_TAU = 120.0
PROFILES = ("diurnal", "spike", "step", "random-walk", "ramps", "bursty")
#: Profiles that recur day after day (run them with --hours 72): their period is a real day
#: whatever --hours says, and they are not among the default profiles.
RECURRING = ("daily", "spike-daily")
FORECASTING = "spark-adaptive-forecast"
"""spark-adaptive with autoscaler.forecast.enabled (period one day, buckets of 5 min)."""
#: Executor start-up (seconds, uniform): a JVM on a standalone worker or YARN container,
#: and a Kubernetes pod (scheduled, image present, JVM started).
STARTUPS = {"jvm": (10.0, 30.0), "pods": (30.0, 90.0)}
BOUND = "reactive-bound"
FORESIGHT = "foresight-bound"
BOUNDS = (BOUND, FORESIGHT)
FORESIGHT_AHEAD = 40.0  # the evaluation interval and the longest start-up: executors run in time
DAY = 86400.0
EPOCH = 20_000 * DAY  # the wall clock at the simulation's start: a midnight (UTC)
RAMP_RANGE = (0.1, 0.7)  # of the peak
RAMP_SECONDS = (90.0, 150.0)
RAMP_NOISE = 0.15  # a factor in [0.85, 1.15] drawn every step
BURST_BASE = 0.15  # of the peak, +-10% over the day
BURST_HEIGHT = (3.0, 6.0)  # times the base
BURST_SECONDS = (20.0, 60.0)
BURSTS_PER_HOUR = 3.0


# -- queries and loads ------------------------------------------------------------------------
@dataclass
class Spec:
    index: int
    peak_rate: float
    r1: float
    sigma: float
    p0: int
    upper: int
    can_restart: bool
    source_cap: int | None
    state_gb: float
    kafka: bool
    busy_reported: bool
    base_downtime: float
    rate_limit: float

    def rate_per_slot(self, eff: float) -> float:
        return self.r1 / (1.0 + self.sigma * (eff - 1.0)) if eff >= 1 else self.r1

    def tasks(self, partitions: int) -> int:
        return partitions if self.source_cap is None else min(partitions, self.source_cap)

    def capacity(self, slots: int, partitions: int) -> float:
        """Noise-free rows/s with batches back to back, overheads included."""
        tasks = self.tasks(partitions)
        used = min(slots, tasks)
        eff = effective_slots(used, tasks)
        waves = -(-tasks // used)
        return eff * self.rate_per_slot(eff) * (
            1 - (waves * TASK_OVERHEAD + BATCH_OVERHEAD) / TRIGGER)

    def slots_needed(self, rate: float) -> float:
        """Continuous slots whose noise-free capacity is ``rate``: one wave of tasks (P = s),
        only the overheads no configuration avoids (the oracle's cost per row)."""
        if rate <= 0:
            return 0.0
        rate /= 1 - (TASK_OVERHEAD + BATCH_OVERHEAD) / TRIGGER
        if self.sigma <= 0:
            return rate / self.r1
        if self.r1 <= rate * self.sigma:
            return math.inf
        return rate * (1 - self.sigma) / (self.r1 - rate * self.sigma)


def make_specs(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    for i in range(n):
        peak_slots = math.exp(rng.uniform(math.log(0.5), math.log(25.0)))
        r1 = math.exp(rng.uniform(math.log(1000.0), math.log(20000.0)))
        sigma = rng.uniform(0.0, 0.01)
        peak_rate = peak_slots * r1 / (1 + sigma * max(0.0, peak_slots - 1))
        can_restart = rng.random() >= 0.1
        stateless = rng.random() < 0.2
        need = peak_slots / 0.7
        if can_restart:
            p0 = rng.choice([8, 12, 16, 24, 32, 48, 64, 100, 200])
        else:
            p0 = 200
        upper = max(p0, rng.choice([120, 240, 360, 720]))
        source_cap = None
        if stateless:
            source_cap = max(rng.choice([16, 32, 64]), 2 * math.ceil(need))
            # Its micro-batches run in one stage, their tasks its source's partitions
            # whatever its partition count: a restart would change nothing, and none is made.
            can_restart, p0 = False, min(200, upper)
        state_gb = 0.0 if stateless else math.exp(rng.uniform(math.log(0.01), math.log(10.0)))
        base_downtime = rng.uniform(2.0, 4.0) + 2.0 * state_gb ** 0.8
        specs.append(Spec(i, peak_rate, r1, sigma, p0, upper, can_restart, source_cap, state_gb,
                          rng.random() < 0.6, rng.random() < 0.8, base_downtime,
                          peak_rate * TRIGGER * 4))
    return specs


@dataclass
class Load:
    """Per query, per step: true rate, observed rate, rate-per-slot noise factor."""

    true: list[array[float]]
    obs: list[array[float]]
    noise: list[array[float]]
    changes: list[list[float]] = field(default_factory=list)  # step profile: change times
    oracle: array[float] = field(default_factory=lambda: array("d"))  # slots, all queries


def _shape_fn(profile: str, rng: random.Random, steps: int, day: float) -> tuple[
        array[float], list[float]]:
    out = array("d", bytes(8 * steps))
    changes: list[float] = []
    if profile == "diurnal":
        phase = rng.uniform(-3, 3) * 3600
        period = rng.uniform(1200, 3600)
        w0 = rng.uniform(0, 2 * math.pi)
        for k in range(steps):
            t = (k * STEP) * DAY / day
            x = (1 - math.cos(2 * math.pi * (t - 2 * 3600 - phase) / DAY)) / 2
            out[k] = (0.2 + 0.8 * x ** 2) * (1 + 0.04 * math.sin(2 * math.pi * t / period + w0))
            out[k] /= 1.04
    elif profile == "spike":
        phase = rng.uniform(0, 1)
        spikes = []
        t = rng.expovariate(5 / day)
        while t < day:
            dur = math.exp(rng.uniform(math.log(300), math.log(3600))) * day / DAY
            spikes.append((t, t + dur, rng.uniform(2.0, 3.3)))
            t += dur + rng.expovariate(5 / day)
        j = 0
        for k in range(steps):
            t = k * STEP
            base = 0.3 * (1 + 0.15 * math.sin(2 * math.pi * (t / day - phase)))
            while j < len(spikes) and spikes[j][1] <= t:
                j += 1
            m = spikes[j][2] if j < len(spikes) and spikes[j][0] <= t else 1.0
            out[k] = min(1.0, base * m)
    elif profile == "step":
        level = math.exp(rng.uniform(math.log(0.2), 0.0))
        nxt = rng.uniform(2, 4) * 3600 * day / DAY
        for k in range(steps):
            t = k * STEP
            if t >= nxt:
                while True:
                    new = math.exp(rng.uniform(math.log(0.2), 0.0))
                    if max(new / level, level / new) >= 1.5:
                        break
                level = new
                changes.append(nxt)
                nxt += rng.uniform(2, 4) * 3600 * day / DAY
            out[k] = level
    elif profile == "ramps":
        levels, _ = ramp_levels(rng, steps)
        for k in range(steps):
            out[k] = levels[k] * rng.uniform(1 - RAMP_NOISE, 1 + RAMP_NOISE)
    elif profile == "bursty":
        phase = rng.uniform(0, 1)
        bursts = burst_times(rng, steps * STEP)
        j = 0
        for k in range(steps):
            t = k * STEP
            base = BURST_BASE * (1 + 0.1 * math.sin(2 * math.pi * (t / day - phase)))
            while j < len(bursts) and bursts[j][1] <= t:
                j += 1
            m = bursts[j][2] if j < len(bursts) and bursts[j][0] <= t else 1.0
            out[k] = min(1.0, base * m)
    elif profile == "daily":
        _daily(out, rng)
    elif profile == "spike-daily":
        _spike_daily(out, rng)
    elif profile == "random-walk":
        lo, hi = math.log(0.15), 0.0
        x = math.log(rng.uniform(0.3, 0.7))
        sd = 0.035 * math.sqrt(STEP / 60) * math.sqrt(DAY / day)
        for k in range(steps):
            x += rng.gauss(0, sd)
            if x > hi:
                x = 2 * hi - x
            if x < lo:
                x = 2 * lo - x
            out[k] = math.exp(x)
    else:
        raise SystemExit(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    return out, changes


def _daily(out: array[float], rng: random.Random) -> None:
    """``daily``: a night at 0.15 of the peak, a steep morning rise (5-10 min) to 0.9, a
    lunch dip to 0.7, an evening fall over an hour; the query's own phase (+-1 h), and each
    day the rise shifted by up to +-10 min and its level by +-5%."""
    phase = rng.uniform(-3600, 3600)
    days = int(len(out) * STEP // DAY) + 1
    shapes = [(8 * 3600 + phase + rng.uniform(-600, 600), rng.uniform(300, 600),
               rng.uniform(0.95, 1.05)) for _ in range(days)]
    for k in range(len(out)):
        t = k * STEP
        d, s = int(t // DAY), t % DAY
        rise, length, level = shapes[d]
        if s < rise:
            x = 0.15
        elif s < rise + length:
            x = 0.15 + 0.75 * (s - rise) / length
        elif 12 * 3600 + phase <= s < 13 * 3600 + phase:
            x = 0.7
        elif s < 18 * 3600 + phase:
            x = 0.9
        elif s < 19 * 3600 + phase:
            x = 0.9 - 0.75 * (s - 18 * 3600 - phase) / 3600
        else:
            x = 0.15
        out[k] = min(1.0, x * level)


def _spike_daily(out: array[float], rng: random.Random) -> None:
    """``spike-daily``: the ``spike`` profile's base and spikes (5 a day, 5-60 min, 2-3.3x),
    drawn for the first day and repeated every day, each shifted by up to +-5 min and its
    height by +-10%."""
    phase = rng.uniform(0, 1)
    first = []
    t = rng.expovariate(5 / DAY)
    while t < DAY:
        dur = math.exp(rng.uniform(math.log(300), math.log(3600)))
        first.append((t, dur, rng.uniform(2.0, 3.3)))
        t += dur + rng.expovariate(5 / DAY)
    days = int(len(out) * STEP // DAY) + 1
    spikes = sorted((d * DAY + s + rng.uniform(-300, 300), dur, m * rng.uniform(0.9, 1.1))
                    for d in range(days) for s, dur, m in first)
    j = 0
    for k in range(len(out)):
        t = k * STEP
        base = 0.3 * (1 + 0.15 * math.sin(2 * math.pi * (t / DAY - phase)))
        while j < len(spikes) and spikes[j][0] + spikes[j][1] <= t:
            j += 1
        m = spikes[j][2] if j < len(spikes) and spikes[j][0] <= t else 1.0
        out[k] = min(1.0, base * m)


def ramp_levels(rng: random.Random, steps: int) -> tuple[array[float], list[float]]:
    """The ``ramps`` profile before its noise: linear ramps up and down between
    ``RAMP_RANGE``, each ``RAMP_SECONDS`` long, the first under way at time 0; and the times
    the ramps turn."""
    lo, hi = RAMP_RANGE
    out = array("d", bytes(8 * steps))
    turns: list[float] = []
    rising = rng.random() < 0.5
    dur = rng.uniform(*RAMP_SECONDS)
    start = -rng.uniform(0.0, dur)
    for k in range(steps):
        t = k * STEP
        while t >= start + dur:
            start += dur
            turns.append(start)
            dur = rng.uniform(*RAMP_SECONDS)
            rising = not rising
        x = (t - start) / dur
        out[k] = lo + (hi - lo) * (x if rising else 1 - x)
    return out, turns


def burst_times(rng: random.Random, span: float) -> list[tuple[float, float, float]]:
    """The ``bursty`` profile's bursts over ``span`` seconds: (start, end, height over the
    base), ``BURSTS_PER_HOUR`` on average at random times (a Poisson process), apart."""
    out = []
    t = rng.expovariate(BURSTS_PER_HOUR / 3600)
    while t < span:
        dur = rng.uniform(*BURST_SECONDS)
        out.append((t, t + dur, rng.uniform(*BURST_HEIGHT)))
        t += dur + rng.expovariate(BURSTS_PER_HOUR / 3600)
    return out


def make_load(profile: str, specs: list[Spec], seed: int, steps: int, day: float) -> Load:
    load = Load([], [], [], [])
    rho = math.exp(-STEP / RATE_NOISE_TAU)
    innov = RATE_NOISE * math.sqrt(1 - rho * rho)
    for s in specs:
        rng = random.Random(f"{seed}/{profile}/{s.index}")
        shape, changes = _shape_fn(profile, rng, steps, day)
        true = array("d", (v * s.peak_rate for v in shape))
        obs = array("d", bytes(8 * steps))
        noise = array("d", bytes(8 * steps))
        x = rng.gauss(0, RATE_NOISE)
        m_in, m_rate = -INPUT_NOISE ** 2 / 2, -RATE_NOISE ** 2 / 2
        gauss = rng.gauss
        for k in range(steps):
            obs[k] = true[k] * math.exp(gauss(0, INPUT_NOISE) + m_in)
            x = rho * x + gauss(0, innov)
            noise[k] = math.exp(x + m_rate)
        load.true.append(true)
        load.obs.append(obs)
        load.noise.append(noise)
        load.changes.append(changes)
    load.oracle = array("d", bytes(8 * steps))
    for s in specs:
        need, true = s.slots_needed, load.true[s.index]
        for k in range(steps):
            load.oracle[k] += math.ceil(need(true[k]) - 1e-9)
    return load


# -- the baseline -----------------------------------------------------------------------------
class Policy(Protocol):
    def observe(self, sample: LoadSample) -> bool: ...

    def observe_start(self, batch_id: int, input_rate: float) -> bool: ...

    def observe_started(self, batch_id: int) -> bool: ...

    def evaluate(self, view: QueryView) -> ScalingDecision: ...

    def on_rescale_completed(self, time: float, *, slots: int, partitions: int,
                             kind: Kind = "live", downtime: float | None = None,
                             startup: float | None = None) -> None: ...


class FlinkOperatorBaseline:
    """Flink's operator autoscaler algorithm as documented, on Spark: P = slots, restarts only."""

    band = (0.4, 1.0)
    target = 0.7

    def __init__(self, scale: float = 1.0) -> None:
        self.window, self.stabilization = 900.0 * scale, 300.0 * scale
        self.umin, self.umax = self.band
        self.sd_interval, self.catch_up = 3600.0 * scale, 1800.0 * scale
        self.restart_time, self.sd_factor, self.up_factor = 300.0 * scale, 0.6, 100000.0
        self.lag_threshold = 300.0 * scale
        self.samples: deque[tuple[float, float, float, float, float | None, float | None]] = (
            deque())
        self.rows = self.dt = self.busy = self.busy_rows = self.rps = 0.0
        self.n_rps = 0
        self.last_t: float | None = None
        self.stable_from = self.stabilization
        self.collect_from = self.stabilization
        self.known: float | None = 0.0
        self.pending: tuple[float, int] | None = None

    def observe_start(self, batch_id: int, input_rate: float) -> bool:
        return False  # Flink's operator reads completed metrics windows only

    def observe_started(self, batch_id: int) -> bool:
        return False

    def observe(self, s: LoadSample) -> bool:
        if s.time < self.stable_from:
            return False
        dt = s.time - self.last_t if self.last_t is not None else 0.0
        self.last_t = s.time
        rows = s.num_input_rows or 0.0
        if rows > 0 and s.input_rows_per_second:
            dt = rows / s.input_rows_per_second  # Spark's interval between trigger starts
        busy = s.busy_time if s.busy_time and rows > 0 else 0.0
        rps = (s.processed_rows_per_second or 0.0) / effective_slots(s.slots, s.partitions) \
            if rows > 0 else 0.0
        e = (s.time, dt, rows, busy, rps, s.backlog)
        self.samples.append(e)
        self._add(e, 1)
        while self.samples and self.samples[0][0] < s.time - self.window:
            self._add(self.samples.popleft(), -1)
        return True

    def _add(self, e: tuple[float, float, float, float, float | None, float | None],
             sign: int) -> None:
        _, dt, rows, busy, rps, _ = e
        self.rows += sign * rows
        self.dt += sign * dt
        if busy:
            self.busy += sign * busy
            self.busy_rows += sign * rows
        if rps:
            self.rps += sign * rps
            self.n_rps += sign

    def on_rescale_completed(self, time: float, *, slots: int, partitions: int,
                             kind: Kind = "live", downtime: float | None = None,
                             startup: float | None = None) -> None:
        self.samples.clear()
        self.rows = self.dt = self.busy = self.busy_rows = self.rps = 0.0
        self.n_rps = 0
        self.last_t = None
        self.stable_from = time + self.stabilization
        self.known = time
        self.pending = None

    def _d(self, v: QueryView, outcome: Outcome, target: int, reason: str) -> ScalingDecision:
        acts = outcome in ("scale-up", "scale-down")
        return ScalingDecision(v.now, outcome, "restart" if acts else "none", v.slots, target,
                               v.partitions, target if acts else v.partitions, reason, acts,
                               DecisionInputs())

    def evaluate(self, v: QueryView) -> ScalingDecision:
        if v.last_rescale_completed is not None and (
                self.known is None or v.last_rescale_completed > self.known):
            self.on_rescale_completed(v.last_rescale_completed, slots=v.slots,
                                      partitions=v.partitions)
        if v.rescale_in_flight or v.now < self.stable_from + self.window or self.dt <= 0:
            return self._d(v, "not-ready", v.slots, "not ready")
        lam = self.rows / self.dt
        first, lag = self.samples[0][5], self.samples[-1][5]
        if lag is not None and first is not None:  # lag growth from the window's end points
            span = self.samples[-1][0] - self.samples[0][0]
            if span > 0:
                lam = max(0.0, lam + (lag - first) / span)
        lag = lag or 0.0
        if self.busy > 0:
            tpr_slot = self.busy_rows / self.busy
        elif self.n_rps > 0:
            tpr_slot = self.rps / self.n_rps
        else:
            return self._d(v, "not-ready", v.slots, "no rate")
        if lam <= 0:
            return self._d(v, "no-change", v.slots, "no input")
        p = v.partitions
        tpr = tpr_slot * effective_slots(v.slots, p)
        catch = lag / self.catch_up
        restart = lam * self.restart_time / self.catch_up
        backlog = lag / lam > self.lag_threshold
        up = lam / self.umax + catch
        down = lam / self.umin + catch + restart
        if not (tpr < up or (tpr > down and not backlog)):
            self.pending = None
            return self._d(v, "no-change", v.slots, "within band")
        target_cap = catch + restart + lam / self.target
        factor = min(max(target_cap / tpr, 1 - self.sd_factor), 1 + self.up_factor)
        new = math.ceil(factor * p - 1e-9)
        top = v.upper
        if v.max_useful_slots is not None:
            top = min(top, v.max_useful_slots)
        if v.cluster_max_slots is not None:
            top = min(top, v.cluster_max_slots)
        new = max(v.lower, min(new, top))
        if tpr < up:
            self.pending = None
            if new <= p:
                return self._d(v, "no-change", v.slots, "no higher parallelism possible")
            return self._d(v, "scale-up", new, "scale up")
        if new >= p:
            self.pending = None
            return self._d(v, "no-change", v.slots, "no lower parallelism")
        if self.pending is None:
            self.pending = (v.now, new)
        else:
            self.pending = (self.pending[0], max(self.pending[1], new))
        if v.now - self.pending[0] < self.sd_interval:
            return self._d(v, "scale-down-pending", self.pending[1], "delayed scale-down")
        new, self.pending = self.pending[1], None
        return self._d(v, "scale-down", new, "scale down")


class ReactiveBound:
    """What a reactive policy could do at best in this model: not a policy to ship.

    At every evaluation it knows the true input rate and the rows waiting (no window, no
    noise), and asks for the fewest slots whose noise-free capacity at ``P = slots`` (one
    wave, free repartitioning, no downtime) carries the rate at ``utilization`` plus the
    waiting rows over ``drain`` seconds. Its partitions follow the slots running: while
    the executors it asked for start, the query runs one wave on the slots it has
    (``SimQuery.follow``). It pays what no policy escapes: the evaluation interval, the
    micro-batch in flight, and the executors' start-up. Rows waiting beyond two triggers'
    arrivals (what a query that keeps up always has) count as backlog. Its lag beyond the
    target is what start-up alone costs; its executor-seconds what tracking costs with
    that headroom.

    With ``ahead`` seconds (the **foresight bound**) it sizes for the highest true rate
    from now to ``ahead`` seconds on: executors asked for at an evaluation run before a
    rise that comes within the evaluation interval and the longest start-up. That is
    the ideal no reactive policy reaches.
    """

    def __init__(self, spec: Spec, query: SimQuery, truth: array[float],
                 utilization: float, drain: float, ahead: float = 0.0) -> None:
        self.spec, self.query, self.truth = spec, query, truth
        self.utilization, self.drain = utilization, drain
        self.ahead = math.ceil(ahead / STEP - 1e-9)

    def observe(self, sample: LoadSample) -> bool:
        return True

    def observe_start(self, batch_id: int, input_rate: float) -> bool:
        return True

    def observe_started(self, batch_id: int) -> bool:
        return True

    def on_rescale_completed(self, time: float, *, slots: int, partitions: int,
                             kind: Kind = "live", downtime: float | None = None,
                             startup: float | None = None) -> None:
        pass

    def evaluate(self, v: QueryView) -> ScalingDecision:
        q, spec = self.query, self.spec
        k = min(len(self.truth) - 1, max(0, int(v.now / STEP) - 1))
        rate = max(self.truth[k:k + 1 + self.ahead])
        # Rows beyond what a keeping-up query always has waiting (a trigger's arrivals and
        # the batch in flight) are backlog to drain.
        waiting = max(0.0, q.A - q.done - 2 * TRIGGER * rate)
        need = rate / self.utilization + waiting / self.drain
        top = min(v.upper, v.cluster_max_slots or v.upper)
        # The fewest slots in [1, top] that carry ``need`` (capacity(s, s) never falls as s
        # grows), searched from the slots held.
        slots = max(1, min(v.slots, top))
        while slots > 1 and spec.capacity(slots - 1, slots - 1) >= need:
            slots -= 1
        while slots < top and spec.capacity(slots, slots) < need:
            slots += 1
        acts = slots != v.slots
        outcome: Outcome = ("no-change" if not acts else
                            "scale-up" if slots > v.slots else "scale-down")
        return ScalingDecision(v.now, outcome, "live" if acts else "none", v.slots, slots,
                               v.partitions, slots if acts else v.partitions, "bound", acts,
                               DecisionInputs())


# -- the simulated queries --------------------------------------------------------------------
class SimQuery:
    __slots__ = (
        "spec", "policy", "A", "a_hist", "ptr", "read", "done", "batch_end", "batch_start",
        "batch_rows", "batch_dur", "batch_busy", "batch_backlog", "batch_slots", "next_start",
        "prev_start", "batch_id", "P", "active", "held", "starting", "inflight", "stop_at",
        "down_until", "pending_restart", "downtimes", "last_done", "live", "restarts",
        "lag_over", "max_lag", "sampled_at", "peak", "in_band_since", "rescale_starts",
        "steps_hist", "unsettled", "next_change", "changes", "last_end", "shape_key", "shape",
        "follow", "ahead",
    )

    def __init__(self, spec: Spec, policy: Policy, slots: int, partitions: int) -> None:
        self.spec, self.policy = spec, policy
        self.A = 0.0
        self.a_hist = array("d", [0.0])
        self.ptr = 0
        self.read = self.done = 0.0
        self.batch_end: float | None = None
        self.batch_start = self.batch_rows = self.batch_dur = self.batch_busy = 0.0
        self.batch_backlog: float | None = None
        self.batch_slots = slots
        self.next_start = 0.0
        self.prev_start: float | None = None
        self.batch_id = 0
        self.P = partitions
        self.active = self.held = slots
        self.starting: list[float] = []
        # kind, target slots, target P, when it was decided
        self.inflight: tuple[str, int, int, float] | None = None
        self.stop_at: float | None = None  # a restart waits for the current batch to end
        self.down_until: float | None = None
        self.pending_restart: tuple[int, int, float] | None = None
        self.downtimes: list[float] = []
        self.last_done = 0.0
        self.live = self.restarts = 0
        self.lag_over = self.max_lag = 0.0
        self.sampled_at = 0.0  # when the lag was last read
        self.peak = 0.0  # the highest lag read in the current step
        self.in_band_since: float | None = None
        self.rescale_starts: list[float] = []
        self.steps_hist: list[int] = []
        self.unsettled = 0
        self.changes: list[float] = []
        self.next_change = 0
        self.last_end = 0.0
        self.shape_key: tuple[int, int] | None = None
        self.shape: tuple[int, float, float, float] = (0, 0.0, 0.0, 0.0)
        # The bounds' free repartitioning: P is the slots running, as executors join too.
        self.follow = False
        self.ahead = 0  # scale-ups taken ahead of a forecast rise

    # one step of micro-batches: arrivals at ``lam`` rows/s over [t0, t1)
    def advance(self, t0: float, t1: float, lam: float, noise: float) -> None:
        spec, A0 = self.spec, self.A
        # The step's arrivals are known in advance (linear at ``lam``): the lag read at a
        # batch completing inside the step needs them.
        self.a_hist.append(A0 + lam * (t1 - t0))
        while True:
            if self.batch_end is not None:
                if self.batch_end > t1:
                    break
                self._complete()
                continue
            if self.stop_at is not None:  # a restart stops after the batch that ran
                assert self.pending_restart is not None
                self.down_until = max(self.stop_at, self.last_end) + self.pending_restart[2]
                self.stop_at = None
            if self.down_until is not None:
                if self.down_until > t1:
                    break
                self._finish_restart()
                continue
            start = self.next_start if self.next_start > t0 else t0
            if start >= t1:
                break
            if self.starting and self.starting[0] <= start:  # executors that joined
                self.arrivals(start)
                continue
            available = A0 + lam * (start - t0) - self.read
            if available <= 1e-9:
                self.next_start = start + TRIGGER
                continue
            rows = available if not spec.kafka else min(available, spec.rate_limit)
            key = (self.P, self.active)
            if key != self.shape_key:  # recomputed only when slots or partitions change
                tasks = spec.tasks(self.P)
                used = min(self.active, tasks)
                eff = effective_slots(used, tasks)
                self.shape = (tasks, eff, spec.rate_per_slot(eff),
                              -(-tasks // used) * TASK_OVERHEAD + BATCH_OVERHEAD)
                self.shape_key = key
            tasks, eff, r, fixed = self.shape
            r *= noise
            dur = rows / (eff * r) + fixed
            self.read += rows
            self.batch_start, self.batch_end, self.batch_rows, self.batch_dur = (
                start, start + dur, rows, dur)
            self.batch_busy = rows / r + tasks * TASK_OVERHEAD
            self.batch_backlog = (available - rows) if spec.kafka else None
            self.batch_slots = self.active
            self.next_start = start + max(TRIGGER, dur)
            self.policy.observe_started(self.batch_id + 1)  # its first job
            if self.prev_start is not None and start > self.prev_start:
                # What the batch reads is in its offset-log entry as it starts.
                self.policy.observe_start(self.batch_id + 1, rows / (start - self.prev_start))
        self.A = A0 + lam * (t1 - t0)

    def _complete(self) -> None:
        spec = self.spec
        end = self.batch_end
        assert end is not None
        interval = self.batch_start - self.prev_start if self.prev_start is not None else TRIGGER
        self.prev_start = self.batch_start
        self.last_end = end
        self.sample_lag(end)  # the lag peaks just before a batch's rows count as done
        self.done += self.batch_rows
        self.batch_end = None
        self.batch_id += 1
        rows = self.batch_rows
        self.policy.observe(LoadSample(
            end, self.batch_slots, self.P, self.batch_id, rows,
            rows / interval if interval > 0 else None, rows / self.batch_dur, self.batch_dur,
            TRIGGER, self.batch_backlog, self.batch_busy if spec.busy_reported else None))

    def _finish_restart(self) -> None:
        assert self.pending_restart is not None and self.down_until is not None
        slots, partitions, downtime = self.pending_restart
        t = self.down_until
        self.P = partitions
        if self.held > slots:
            self.held = slots
        self.active = min(self.held, slots)
        self.next_start = t
        self.prev_start = None
        self.down_until = None
        self.pending_restart = None
        self.inflight = None
        self.downtimes.append(downtime)
        self.last_done = t
        self.policy.on_rescale_completed(t, slots=self.active, partitions=partitions,
                                         kind="restart", downtime=downtime)

    def arrivals(self, t: float) -> None:
        """Executors started by ``t`` join; the last one completes a rescale waiting on them."""
        starting = self.starting
        if not starting or starting[0] > t:
            return
        last = t
        while starting and starting[0] <= t:
            last = starting.pop(0)
            self.active += 1
        if self.follow:
            self.P = self.active
        if not starting and self.inflight is not None:
            kind = self.inflight[0]
            if kind == "live":
                asked = self.inflight[3]
                self.inflight = None
                self.last_done = last
                self.policy.on_rescale_completed(last, slots=self.active, partitions=self.P,
                                                 startup=last - asked)
            elif self.stop_at is None and self.down_until is None:
                self.stop_at = last

    def start(self, d: ScalingDecision, t: float, free: int, rng: random.Random) -> int:
        """Carry out a decision; returns the executors taken from the free pool (<0: released)."""
        target, partitions = d.target_slots, d.target_partitions
        self.ahead += d.ahead
        self.rescale_starts.append(t)
        taken = 0
        if target > self.held:
            grant = min(target - self.held, free)
            if grant <= 0:
                self.rescale_starts.pop()
                return 0
            # (a scale-up decided again while its executors start asks for more of them)
            self.starting = sorted([*self.starting,
                                    *(t + rng.uniform(*START_DELAY) for _ in range(grant))])
            self.held += grant
            taken = grant
        if d.kind == "live":
            self.live += 1
            # A live rescale keeps the partitions; the bounds' follow the slots that run
            # (set as each executor joins, in arrivals()), not the slots asked for.
            if target < self.held:
                taken = target - self.held
                self.held = self.active = target
                if self.follow:
                    self.P = target
                self.last_done = t
                self.policy.on_rescale_completed(t, slots=target, partitions=self.P)
                return taken
            self.inflight = ("live", self.held, self.P, t)
            return taken
        self.restarts += 1
        downtime = self.spec.base_downtime * rng.uniform(0.85, 1.3)
        self.pending_restart = (min(target, self.held), partitions, downtime)
        self.inflight = ("restart", target, partitions, t)
        if not self.starting:
            self.stop_at = t
        if target < self.held:
            taken = target - self.held  # released when the restart completes; counted then
            return 0
        return taken

    def oldest(self) -> float:
        """When the oldest row not yet done arrived (inf if every row known so far is done)."""
        hist, k = self.a_hist, self.ptr
        done = self.done
        n = len(hist) - 1
        while k < n and hist[k + 1] <= done:
            k += 1
        self.ptr = k
        if k >= n:
            return math.inf
        a0, a1 = hist[k], hist[k + 1]
        frac = (done - a0) / (a1 - a0) if a1 > a0 else 0.0
        return (k + frac) * STEP

    def sample_lag(self, t: float) -> float:
        """Reads the lag at ``t`` (at a batch's completion, before its rows count as done, and
        at the end of each step), adding the time over the target since the previous read.

        Between two reads no batch completes, so the oldest waiting row stays the same and
        the lag grows by one second a second from its arrival: the time over the target is
        exact, given the model's arrivals (linear within a step at the step's rate)."""
        oldest = self.oldest()
        lag = max(0.0, t - oldest)
        over = t - max(self.sampled_at, oldest + LAG_TARGET)
        if over > 0:
            self.lag_over += over
        if lag > self.max_lag:
            self.max_lag = lag
        if lag > self.peak:
            self.peak = lag
        self.sampled_at = t
        return lag


# -- one run ---------------------------------------------------------------------------------
def initial_config(spec: Spec, rate: float, ours: bool) -> tuple[int, int]:
    need = max(1, math.ceil(spec.slots_needed(rate / 0.8)))
    if not ours:
        need = min(need, spec.upper, spec.source_cap or spec.upper)
        return need, need
    tasks = spec.tasks(spec.p0)
    for d in range(1, spec.p0 + 1):
        if spec.p0 % d == 0 and d >= min(need, tasks):
            return d, spec.p0
    return spec.p0, spec.p0


def run(profile: str, name: str, specs: list[Spec], load: Load, args: argparse.Namespace,
        progress: str, label: str | None = None) -> dict[str, Any]:
    steps = len(load.true[0])
    day = args.hours * 3600.0
    cfg: AutoscalerConfig = args.config
    ours = name in ("spark-adaptive", FORECASTING)
    if name == FORECASTING:
        cfg = dataclasses.replace(cfg, forecast_enabled=True)
    recurrences: list[LoadRecurrence | None] = [
        LoadRecurrence(cfg.forecast_period, cfg.forecast_bucket, cfg.forecast_periods,
                       cfg.forecast_min_coverage, cfg.forecast_max_error)
        if cfg.forecast_enabled else None for _ in specs]
    per_day: list[dict[str, float]] = []
    day_start = (0.0, 0.0)  # executor-seconds and query-seconds past the lag target so far
    band = ((cfg.utilization_min, cfg.utilization_max, cfg.utilization_target) if ours
            else (*FlinkOperatorBaseline.band, FlinkOperatorBaseline.target))
    eval_every = max(1, round((cfg.evaluation_interval if ours else 10.0) / STEP))
    rng = random.Random(f"{args.seed}/{profile}/cluster")
    queries: list[SimQuery] = []
    for s in specs:
        pol: Policy = (QueryAutoscaler(cfg, f"q{s.index}", started_at=0.0) if ours
                       else FlinkOperatorBaseline(scale=day / DAY))
        slots, parts = initial_config(s, load.true[s.index][0], ours)
        q = SimQuery(s, pol, slots, parts)
        if name in BOUNDS:
            q.P, q.follow = slots, True
            q.policy = ReactiveBound(s, q, load.true[s.index], args.bound_utilization,
                                     args.bound_drain,
                                     args.bound_ahead if name == FORESIGHT else 0.0)
        q.changes = load.changes[s.index]
        queries.append(q)
    free = args.executors - sum(q.held for q in queries)
    if free < 0:
        raise SystemExit(f"{args.executors} executors cannot hold the initial configuration")
    exec_s = oracle_s = 0.0
    round_times: list[float] = []
    round_cpu: list[float] = []
    cpu_clock = time.thread_time
    series_t: list[float] = []
    series: dict[str, list[float]] = {"executors": [], "oracle": [], "lag_max": []}
    started = time.perf_counter()
    perf = time.perf_counter
    stride = max(1, steps // 400)
    step_profile = profile == "step"
    trace = _traced(profile)
    for k in range(steps):
        t0, t1 = k * STEP, (k + 1) * STEP
        held = 0
        worst = 0.0
        for q in queries:
            i = q.spec.index
            q.peak = 0.0
            q.advance(t0, t1, load.obs[i][k], load.noise[i][k])
            q.arrivals(t1)
            lag = q.sample_lag(t1)
            if q.peak > worst:
                worst = q.peak
            held += q.held
            if i == trace:
                sys.stdout.write(
                    f"TRACE {t1:8.0f}s rate {load.true[i][k]:9.0f} cap "
                    f"{q.spec.capacity(q.active, q.P):9.0f} slots {q.active}/{q.held} "
                    f"P {q.P} lag {lag:5.1f}s\n")
            if step_profile:
                _track_convergence(q, t1, load.true[i][k], band)
        for q in queries:  # what each query read this step, into its recurring load
            rec = recurrences[q.spec.index]
            if rec is not None:
                rec.observe(EPOCH + t1, load.obs[q.spec.index][k] * STEP, STEP)
        oracle = load.oracle[k]
        exec_s += held * STEP
        if t1 % DAY == 0 or k == steps - 1:
            lag_s = sum(q.lag_over for q in queries)
            per_day.append({"executor_seconds": exec_s - day_start[0],
                            "seconds_over_lag_target": lag_s - day_start[1]})
            day_start = (exec_s, lag_s)
        oracle_s += oracle * STEP
        # restarts that completed released their executors inside advance()
        free = args.executors - sum(q.held for q in queries)
        if k % stride == 0:
            series_t.append(t1 / 3600)
            series["executors"].append(held)
            series["oracle"].append(oracle)
            series["lag_max"].append(worst)
        if (k + 1) % eval_every == 0:
            spent = cpu = 0.0
            for q in queries:
                s = q.spec
                # A live scale-up in flight runs on the executors started so far; our
                # policy may decide it again meanwhile (the others wait for it).
                growing = ours and q.inflight is not None and q.inflight[0] == "live"
                rec = recurrences[s.index]
                forecast = None if rec is None or not isinstance(q.policy, QueryAutoscaler) \
                    else rec.forecast(EPOCH + t1, max(
                        cfg.forecast_horizon,
                        q.policy.executor_startup + cfg.evaluation_interval))
                view = QueryView(
                    t1, q.active if growing else q.held, q.P, 1, s.upper, s.source_cap,
                    s.can_restart,
                    tuple(q.downtimes), q.inflight is not None, q.last_done, 1, q.held + free,
                    forecast=forecast)
                a, c = perf(), cpu_clock()
                d = q.policy.evaluate(view)
                spent += perf() - a
                cpu += cpu_clock() - c
                if s.index == trace and d.outcome not in ("no-change", "not-ready"):
                    sys.stdout.write(f"TRACE {t1:8.0f}s {d.outcome} {d.kind} -> "
                                     f"{d.target_slots}/{d.target_partitions}: {d.reason}\n")
                if d.actionable and (q.inflight is None or (
                        growing and d.kind == "live" and d.target_slots > q.held)):
                    free -= q.start(d, t1, free, rng)
            round_times.append(spent)
            round_cpu.append(cpu)
        if k % (steps // 20 or 1) == 0 and k:
            pct = 100 * k / steps
            sys.stderr.write(f"\r  {progress} {profile:<11} {label or name:<19} {pct:5.1f}%  "
                             f"{time.perf_counter() - started:5.1f}s")
            sys.stderr.flush()
    sys.stderr.write(f"\r  {progress} {profile:<11} {label or name:<19} done    "
                     f"{time.perf_counter() - started:5.1f}s\n")
    if profile == "step":
        for q in queries:  # the last level counts if it lasted an hour
            if q.next_change > 0 and steps * STEP - q.changes[q.next_change - 1] >= 3600:
                _close_interval(q)
    days = args.hours / 24
    n = len(queries)
    restarts = [q.restarts / days for q in queries]
    steps_hist: list[int] = [x for q in queries for x in q.steps_hist]
    rt = sorted(round_times)
    rc = sorted(round_cpu)
    return {
        "profile": profile, "policy": name,
        "executor_seconds": exec_s, "oracle_seconds": oracle_s,
        "vs_oracle": exec_s / oracle_s if oracle_s else math.nan,
        "seconds_over_lag_target": sum(q.lag_over for q in queries),
        "queries_over_lag_target": sum(1 for q in queries if q.max_lag > LAG_TARGET),
        "max_lag": max(q.max_lag for q in queries),
        "live_per_query_day": sum(q.live for q in queries) / n / days,
        "restarts_per_query_day": sum(restarts) / n,
        "max_restarts_per_query_day": max(restarts),
        "restarts_total": sum(q.restarts for q in queries),
        "convergence": {
            "changes": len(steps_hist) + sum(q.unsettled for q in queries),
            "steps": {str(s): steps_hist.count(s) for s in sorted(set(steps_hist))},
            "unsettled": sum(q.unsettled for q in queries),
        } if profile == "step" else None,
        "eval_round_ms_median": 1000 * statistics.median(rt) if rt else math.nan,
        "eval_round_ms_p99": 1000 * rt[min(len(rt) - 1, int(0.99 * len(rt)))] if rt else math.nan,
        "eval_round_cpu_ms_median": 1000 * statistics.median(rc) if rc else math.nan,
        "eval_round_cpu_ms_p99": 1000 * rc[min(len(rc) - 1, int(0.99 * len(rc)))] if rc else (
            math.nan),
        "series": {"hours": series_t, **series},
        "per_day": per_day,
        "ahead": sum(q.ahead for q in queries),
        "per_query": [{"query": q.spec.index, "live": q.live, "restarts": q.restarts,
                       "seconds_over_lag_target": q.lag_over, "max_lag": q.max_lag,
                       "can_restart": q.spec.can_restart, "partitions": q.P}
                      for q in queries],
    }


def _traced(profile: str) -> int | None:
    """``AUTOSCALE_SIM_TRACE=profile:query`` prints that query's steps and decisions."""
    spec = os.environ.get("AUTOSCALE_SIM_TRACE", "")
    name, _, index = spec.partition(":")
    return int(index) if name == profile and index.isdigit() else None


def _track_convergence(q: SimQuery, t: float, true_rate: float,
                       band: tuple[float, float, float]) -> None:
    """Rescales from a level change until the query settles in its band for good."""
    changes = q.changes
    if q.next_change < len(changes) and t >= changes[q.next_change]:
        if q.next_change > 0:
            _close_interval(q)
        q.next_change += 1
        q.rescale_starts = [x for x in q.rescale_starts if x >= changes[q.next_change - 1]]
        q.in_band_since = None
    if q.next_change == 0:
        return
    spec = q.spec
    cap = spec.capacity(q.active, q.P)
    util = true_rate / cap if cap > 0 else math.inf
    ok = q.inflight is None and util <= band[1]
    if ok and util < band[0] and q.active > 1:
        # below the band: settled only if the next smaller slot count (any, with a restart;
        # a divisor of the partitions, live) would be above the policy's target
        if spec.can_restart:
            lower = spec.capacity(q.active - 1, q.active - 1)
        else:
            tasks = spec.tasks(q.P)
            d = max((x for x in range(1, q.active) if tasks % x == 0), default=1)
            lower = spec.capacity(d, q.P)
        ok = true_rate / lower > band[2]
    if not ok:
        q.in_band_since = None
    elif q.in_band_since is None:
        q.in_band_since = t


def _close_interval(q: SimQuery) -> None:
    if q.in_band_since is None:
        q.unsettled += 1
    else:
        q.steps_hist.append(sum(1 for x in q.rescale_starts if x < q.in_band_since))
    if os.environ.get("AUTOSCALE_SIM_TRACE", "").startswith("convergence"):
        sys.stdout.write(f"CONVERGENCE q{q.spec.index} change {q.next_change} "
                         f"{'unsettled' if q.in_band_since is None else q.steps_hist[-1]} "
                         f"rescales {len(q.rescale_starts)}\n")


# -- report ---------------------------------------------------------------------------------
TARGETS = """targets (spark-adaptive, default keys):
  T1 executor-seconds <= 1.15x oracle, on every profile
  T2 no query over the 30 s lag target, on every profile
  T3 restart rescales <= half the baseline's, and executor-seconds <= the baseline's
  T4 <= 5 restart rescales per query per simulated day (every query)
  T5 one rescale to converge after a step change in most cases, never more than three
  T6 one evaluation round of all queries < 10 ms (p99 of the thread's CPU time)"""


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'profile':<11} {'policy':<20} {'exec-s':>10} {'x oracle':>8} {'lag>30s s':>10} "
            f"{'q>30s':>5} {'max lag':>8} {'live/q/d':>8} {'rst/q/d':>8} {'rst max':>7} "
            f"{'cpu p50':>8} {'cpu p99':>8}")
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r['profile']:<11} {r['policy']:<20} {r['executor_seconds']:>10.3g} "
            f"{r['vs_oracle']:>8.3f} {r['seconds_over_lag_target']:>10.0f} "
            f"{r['queries_over_lag_target']:>5d} {r['max_lag']:>7.0f}s "
            f"{r['live_per_query_day']:>8.2f} {r['restarts_per_query_day']:>8.2f} "
            f"{r['max_restarts_per_query_day']:>7.1f} {r['eval_round_cpu_ms_median']:>6.2f}ms "
            f"{r['eval_round_cpu_ms_p99']:>6.2f}ms")
    for r in results:
        c = r["convergence"]
        if c:
            lines.append(f"convergence ({r['policy']}, step): {c['changes']} level changes; "
                         f"rescales to settle -> count {c['steps']}; unsettled {c['unsettled']}")
    return "\n".join(lines)


def check_targets(results: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    ours = {r["profile"]: r for r in results if r["policy"] == "spark-adaptive"}
    base = {r["profile"]: r for r in results if r["policy"] == "flink-baseline"}
    out: list[tuple[str, bool, str]] = []
    for p, r in ours.items():
        out.append((f"T1 {p}", r["vs_oracle"] <= 1.15, f"{r['vs_oracle']:.3f}x oracle"))
        out.append((f"T2 {p}", r["queries_over_lag_target"] == 0,
                    f"{r['queries_over_lag_target']} queries, "
                    f"{r['seconds_over_lag_target']:.0f} s over"))
        if p in base:
            b = base[p]
            ok = (r["restarts_total"] <= b["restarts_total"] / 2
                  and r["executor_seconds"] <= b["executor_seconds"])
            out.append((f"T3 {p}", ok, f"restarts {r['restarts_total']} vs "
                                       f"{b['restarts_total']}, executor-s "
                                       f"{r['executor_seconds']:.4g} vs "
                                       f"{b['executor_seconds']:.4g}"))
        out.append((f"T4 {p}", r["max_restarts_per_query_day"] <= 5,
                    f"max {r['max_restarts_per_query_day']:.1f}, mean "
                    f"{r['restarts_per_query_day']:.2f} per query-day"))
        c = r["convergence"]
        if c:
            counts = {int(k): v for k, v in c["steps"].items()}
            # A change that never settled needed a rescale (or more) it did not get right.
            needed = sum(v for k, v in counts.items() if k >= 1) + c["unsettled"]
            one = counts.get(1, 0)
            worst = max((k for k in counts if counts[k]), default=0)
            ok = (needed == 0 or one / needed > 0.5) and worst <= 3 and c["unsettled"] == 0
            out.append((f"T5 {p}", ok, f"{one}/{needed} changes that needed a rescale or "
                                       f"never settled took one; most {worst}; unsettled "
                                       f"{c['unsettled']}"))
        # The policy's own time is the thread's CPU time: on a shared machine the wall clock
        # of a round also holds whatever preempted the process meanwhile.
        out.append((f"T6 {p}", r["eval_round_cpu_ms_p99"] < 10,
                    f"CPU time p50 {r['eval_round_cpu_ms_median']:.2f} ms, p99 "
                    f"{r['eval_round_cpu_ms_p99']:.2f} ms (wall clock p50 "
                    f"{r['eval_round_ms_median']:.2f} ms, p99 {r['eval_round_ms_p99']:.2f} ms)"))
    return out


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot(results: list[dict[str, Any]], path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    profiles = list(dict.fromkeys(r["profile"] for r in results))
    fig, axes = plt.subplots(len(profiles), 2, figsize=(13, 3.2 * len(profiles)), squeeze=False)
    for row, p in enumerate(profiles):
        ax, lx = axes[row]
        first = True
        for r in results:
            if r["profile"] != p:
                continue
            s = r["series"]
            if first:
                ax.plot(s["hours"], s["oracle"], color="black", lw=1, label="oracle")
                first = False
            ax.plot(s["hours"], s["executors"], lw=1,
                    label=f"{r['policy']} ({r['vs_oracle']:.2f}x)")
            lx.plot(s["hours"], [max(x, 1.0) for x in s["lag_max"]], lw=1, label=r["policy"])
        ax.set_title(f"{p}: executors held")
        ax.set_xlabel("hour")
        ax.legend(fontsize=8)
        lx.axhline(LAG_TARGET, color="red", lw=0.8, ls="--")
        lx.set_yscale("log")
        lx.set_title(f"{p}: worst query lag (s)")
        lx.set_xlabel("hour")
        lx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def plot_frontier(results: list[dict[str, Any]], path: Path) -> bool:
    """Per profile, each run's executor-seconds against the oracle and its query-seconds
    over the lag target: the corner the targets T1 and T2 ask for (at most 1.15x, none
    over) shaded, each bound's runs joined in order of utilization."""
    plt = _pyplot()
    if plt is None:
        return False
    profiles = list(dict.fromkeys(r["profile"] for r in results))
    cols = min(2, len(profiles))
    rows = -(-len(profiles) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    markers = {"spark-adaptive": ("*", 14), "flink-baseline": ("s", 8)}
    for ax in axes.flat[len(profiles):]:
        ax.set_visible(False)
    for ax, p in zip(axes.flat, profiles, strict=False):
        rs = [r for r in results if r["profile"] == p]
        ax.axvspan(0.9, 1.15, ymax=0.08, color="green", alpha=0.15,
                   label="T1 and T2 (<= 1.15x, 0 s over)")
        for name, color in ((BOUND, "grey"), (FORESIGHT, "tab:green")):
            bound = sorted((r for r in rs if r.get("bound") == name),
                           key=lambda r: r["bound_utilization"])
            if not bound:
                continue
            ax.plot([r["vs_oracle"] for r in bound],
                    [r["seconds_over_lag_target"] for r in bound], "o-", color=color,
                    label=f"{name} (utilization)")
            for r in bound:
                ax.annotate(f"{r['bound_utilization']:g}",
                            (r["vs_oracle"], r["seconds_over_lag_target"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
        for r in rs:
            if r["policy"] in markers:
                m, size = markers[r["policy"]]
                ax.plot([r["vs_oracle"]], [r["seconds_over_lag_target"]], m, ms=size,
                        label=f"{r['policy']} ({r['queries_over_lag_target']} queries over)")
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlim(min(0.9, min(r["vs_oracle"] for r in rs) * 0.95),
                    max(r["vs_oracle"] for r in rs) * 1.05)
        ax.set_ylim(-1, max(10.0, *(r["seconds_over_lag_target"] for r in rs)) * 4)
        ax.set_title(p)
        ax.set_xlabel("executor-seconds / oracle")
        ax.set_ylabel("query-seconds over the 30 s lag target")
        ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


SUMMARY = (("vs_oracle", "x oracle", "{:.3f}"),
           ("queries_over_lag_target", "q>30s", "{:.0f}"),
           ("seconds_over_lag_target", "lag>30s s", "{:,.0f}"),
           ("restarts_per_query_day", "rst/q/d", "{:.2f}"),
           ("eval_round_cpu_ms_p99", "cpu p99 ms", "{:.2f}"))


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per profile and policy over the seeds run: each ``SUMMARY`` figure's median, min and
    max."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["profile"], r["policy"]), []).append(r)
    out = []
    for (profile, policy), rs in groups.items():
        entry: dict[str, Any] = {"profile": profile, "policy": policy,
                                 "seeds": [r.get("seed") for r in rs]}
        for key, _, _ in SUMMARY:
            values = [r[key] for r in rs]
            entry[key] = {"median": statistics.median(values), "min": min(values),
                          "max": max(values)}
        out.append(entry)
    return out


def summary_table(summary: list[dict[str, Any]]) -> str:
    """Each figure as ``median (min-max)`` over the seeds."""
    def cell(fmt: str, m: dict[str, float]) -> str:
        return f"{fmt.format(m['median'])} ({fmt.format(m['min'])}-{fmt.format(m['max'])})"

    rows = [[e["profile"], e["policy"], *(cell(fmt, e[key]) for key, _, fmt in SUMMARY)]
            for e in summary]
    head = ["profile", "policy", *(title for _, title, _ in SUMMARY)]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) if i < 2 else x.rjust(w)
                       for i, (x, w) in enumerate(zip(line, widths, strict=True)))
             for line in [head, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def plan_runs(policies: list[str], utilizations: list[float] | None,
              target: float, bounds: bool = True) -> list[tuple[str, float | None, str]]:
    """(policy, the bound's utilization, label) for each run of a profile: the policies
    named, then both bounds at the policy's utilization target, named or not (unless
    ``bounds`` is false); a bound named in ``policies`` runs at each of ``utilizations``
    too (labelled ``name@u``)."""
    runs: list[tuple[str, float | None, str]] = [(p, None, p) for p in policies
                                                 if p not in BOUNDS]
    for name in BOUNDS:
        if not bounds and name not in policies:
            continue
        us = sorted({target, *(utilizations or [])}) if name in policies else [target]
        runs += [(name, u, name if len(us) == 1 else f"{name}@{u:g}") for u in us]
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=_seeds, default=None,
                    help="several seeds, comma-separated (1,2,3), in one invocation: each "
                         "seed's figures, then their median and spread (min-max) per "
                         "profile and policy; instead of --seed")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--executors", type=int, default=1000)
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--hours", type=float, default=24.0,
                    help="simulated length of the day (below 24 compresses it)")
    ap.add_argument("--policies", default="spark-adaptive,flink-baseline",
                    help=f"of spark-adaptive, flink-baseline, {BOUND} and {FORESIGHT}; both "
                         "bounds run beside them at the policy's utilization.target, named "
                         "or not")
    ap.add_argument("--bound-utilization", type=_utilizations, default=None,
                    help="utilizations the bounds named in --policies size for, besides the "
                         "policy's utilization.target; several, comma-separated "
                         "(0.5,0.75,0.85,0.95), run each bound once at each and draw the "
                         "frontier they trace (autoscale_sim_frontier.png)")
    ap.add_argument("--bound-drain", type=float, default=10.0,
                    help="seconds in which the bounds plan to drain waiting rows")
    ap.add_argument("--bound-ahead", type=float, default=FORESIGHT_AHEAD,
                    help=f"seconds of true load the {FORESIGHT} sizes for ahead")
    ap.add_argument("--no-bounds", action="store_true",
                    help="leave out the bounds not named in --policies (a comparison of "
                         "policies alone, as spark-adaptive with and without its forecast)")
    ap.add_argument("--startup", choices=sorted(STARTUPS), default="jvm",
                    help="executor start-up: jvm 10-30 s (standalone, YARN), pods 30-90 s "
                         "(Kubernetes)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="override an autoscaler key for spark-adaptive, e.g. "
                         "utilization.target=0.8 (repeatable)")
    args = ap.parse_args(argv)
    conf = {"spark.adaptive.autoscaler.enabled": "true"}
    for item in args.conf:
        key, _, value = item.partition("=")
        if not key.startswith("spark."):
            key = "spark.adaptive.autoscaler." + key.removeprefix("autoscaler.")
        conf[key] = value
    args.config = AutoscalerConfig.from_conf(conf)
    global START_DELAY
    START_DELAY = STARTUPS[args.startup]
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    known = ("spark-adaptive", FORECASTING, "flink-baseline", *BOUNDS)
    for p in policies:
        if p not in known:
            ap.error(f"unknown policy {p!r}; known: {', '.join(known)}")
    seeds = args.seeds or [args.seed]
    steps = int(args.hours * 3600 / STEP)
    runs = plan_runs(policies, args.bound_utilization, args.config.utilization_target,
                     not args.no_bounds)
    results = []
    t_start = time.perf_counter()
    total = len(seeds) * len(profiles) * len(runs)
    n = 0
    for seed in seeds:
        specs = make_specs(random.Random(seed), args.queries)
        for profile in profiles:
            load = make_load(profile, specs, seed, steps, args.hours * 3600)
            for name, u, label in runs:
                n += 1
                run_args = argparse.Namespace(**{**vars(args), "seed": seed,
                                                 "bound_utilization": u})
                progress = f"[{n}/{total}]" + (f" seed {seed}" if len(seeds) > 1 else "")
                r = run(profile, name, specs, load, run_args, progress, label)
                r["seed"] = seed
                if u is not None:
                    r["bound"], r["bound_utilization"] = name, u
                r["policy"] = label
                results.append(r)
    load_avg = os.getloadavg()
    print(f"\nautoscale_sim: {args.queries} queries, {args.executors} executors, "
          f"{args.hours:g} h per profile, seed{'s' if len(seeds) > 1 else ''} "
          f"{','.join(map(str, seeds))}, "
          f"{time.perf_counter() - t_start:.0f} s wall, {time.process_time():.0f} s CPU, "
          f"load average {load_avg[0]:.1f} (times per evaluation round include preemption "
          "by other processes)")
    checks: list[tuple[int, str, bool, str]] = []
    for seed in seeds:
        mine = [r for r in results if r["seed"] == seed]
        print(f"\nseed {seed}\n" if len(seeds) > 1 else "")
        print(table(mine))
        checks += [(seed, *c) for c in check_targets(mine)]
    summary = summarize(results)
    if len(seeds) > 1:
        print(f"\nmedian (min-max) over seeds {','.join(map(str, seeds))}\n")
        print(summary_table(summary))
    print()
    print(TARGETS)
    for seed, label, ok, detail in checks:
        where = f"seed {seed} " if len(seeds) > 1 else ""
        print(f"  {'met    ' if ok else 'NOT MET'} {where}{label:<16} {detail}")
    args.out.mkdir(parents=True, exist_ok=True)
    out = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k != "config"},
           "load_average": load_avg, "cpu_seconds": time.process_time(),
           "config": args.config.as_conf(),
           "results": results, "summary": summary,
           "targets": [{"seed": s, "target": a, "met": b, "detail": c}
                       for s, a, b, c in checks]}
    (args.out / "autoscale_sim.json").write_text(json.dumps(out, indent=1))
    # The plots draw the first seed's runs.
    first = [r for r in results if r["seed"] == seeds[0]]
    if plot(first, args.out / "autoscale_sim.png"):
        print(f"\nwrote {args.out / 'autoscale_sim.json'} and {args.out / 'autoscale_sim.png'}")
    if sum(1 for name, _, _ in runs if name == BOUND) > 1 and plot_frontier(
            first, args.out / "autoscale_sim_frontier.png"):
        print(f"wrote {args.out / 'autoscale_sim_frontier.png'}")
    return 0


def _seeds(text: str) -> list[int]:
    """``--seeds``: one or more integers, comma-separated."""
    try:
        seeds = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of seeds") from None
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r} names a seed twice")
    return seeds


def _utilizations(text: str) -> list[float]:
    """``--bound-utilization``: one or more utilizations in (0, 1], comma-separated."""
    out = []
    for item in text.split(","):
        try:
            u = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not a number") from None
        if not 0.0 < u <= 1.0:
            raise argparse.ArgumentTypeError(f"{u:g} is not a utilization in (0, 1]")
        out.append(u)
    return out


if __name__ == "__main__":
    sys.exit(main())
