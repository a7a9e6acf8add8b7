"""A chaos soak: an unmodified stateful app on a real local cluster, under seeded faults.

    python -m spark_adaptive.testing.soak --minutes 10 --seed 7      # make soak

For each mode (``adaptive``, then ``reactive``; half the time each, counted from the
app's start, which takes a few tens of seconds more) it starts a Spark
standalone cluster on 127.0.0.1 with two one-core workers, submits
:mod:`spark_adaptive.testing.soak_app` with ``spark-submit --conf
spark.adaptive.enabled=true`` and, every 3 to 7 seconds, does one thing a cluster does
to an app, drawn from a :class:`random.Random` seeded with ``--seed``:

* ``add-worker``: a worker joins (up to ``--max-workers``; one at a time, and the next
  actions go on while it starts);
* ``stop-worker``: a worker shuts down (SIGTERM) with its executors;
* ``kill-worker``: a worker and its executors are SIGKILLed (a lost node);
* ``kill-executor``: one executor process is SIGKILLed;
* ``freeze-executor``: one executor is SIGSTOPped past the failure-detection timeout,
  then SIGCONTed (one at a time; the other actions go on meanwhile);
* ``kill-driver``: the driver is SIGKILLed and the app submitted again on its
  checkpoint; ``kill-driver-in-repartition`` does it while a restart rescale
  repartitions the query's state offline (caused by new bounds in adaptive mode, by a
  worker added or stopped in reactive mode). These two are planned, not drawn: one per
  150 s of faults (at least one per mode), the two kinds in turn;
* ``bounds`` (adaptive mode): new parallelism bounds through the REST API.

An action that rescales (a worker joining or going, new bounds) first waits up to 20 s
for the query to be executing rather than mid-rescale, so that it makes a rescale of its
own; faults on executors strike at any time.

Meanwhile it reads the app's REST API every second (state, parallelism, executors, the
last micro-batch, the rescale history) and counts every error while a driver is up. At
the end it stops the app through its stop file and checks the last committed
aggregate key by key: every value counted once, none lost, none twice
(:func:`check_counts`). It writes ``soak.json`` (the actions, samples, rescales and the
result) and, with matplotlib installed, ``soak.png`` (the timeline) into ``--out``, and
prints the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from spark_adaptive.testing.cluster import LocalCluster, loopback_urlopen
from spark_adaptive.testing.submit import SubmittedApp, submit

APP = Path(__file__).resolve().with_name("soak_app.py")
QUERY = "soak-counts"
KEYS = 50
FAILURE_DETECTION = 20.0
"""spark.adaptive.failure-detection.timeout of the soak's app, seconds."""

CONF = {
    "spark.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    "spark.executor.cores": "1",
    "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "3s",
    "spark.adaptive.scheduler.executing.resource-stabilization-timeout": "3s",
    "spark.adaptive.scheduler.submission.resource-stabilization-timeout": "3s",
    "spark.adaptive.scheduler.executor-loss-grace": "5s",
    "spark.adaptive.failure-detection.timeout": f"{FAILURE_DETECTION:g}s",
    # As a user running under faults configures it (Flink restarts a checkpointed job by
    # default; spark-adaptive's default is plain Spark's: a failed query stays failed).
    # Executors dying faster than a stage reruns exceed Spark's own limit of consecutive
    # stage attempts (spark.stage.maxConsecutiveAttempts, 4) and fail the micro-batch; the
    # query is then restarted on its checkpoint instead of ending the app.
    "spark.adaptive.restart-strategy.type": "exponential-delay",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
DRIVER_KILL_EVERY = 150.0
"""Seconds of faults per planned driver kill (at least one per mode)."""
SCALING_WAIT = 20.0
"""Seconds an action that rescales waits for the query to be executing, not mid-rescale."""
SETTLE = 180.0
"""Seconds the end of a run waits for a micro-batch that completes after its last action."""
RESCALING = ("add-worker", "stop-worker", "kill-worker", "bounds")
"""Actions that wait for the query to be executing (see Soak._wait_executing)."""
FAULTS = ("stop-worker", "kill-worker", "kill-executor", "freeze-executor", "kill-driver",
          "kill-driver-in-repartition")


@dataclass
class Result:
    mode: str
    seconds: float = 0.0
    actions: dict[str, int] = field(default_factory=dict)
    rescales: int = 0
    live_rescales: int = 0
    restart_rescales: int = 0
    drivers: int = 0
    failed_states: int = 0
    rest_errors: int = 0
    rest_requests: int = 0
    worst_staleness: float = 0.0
    keys: int = 0
    values: int = 0
    lost: int = 0
    duplicated: int = 0
    app_exit: int | None = None
    # Drivers that ended without the soak stopping or killing them: "<t>s: driver N, exit X".
    drivers_ended: list[str] = field(default_factory=list)

    @property
    def faults(self) -> int:
        return sum(n for a, n in self.actions.items() if a in FAULTS)

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.failed_states == 0
                and self.rest_errors == 0 and self.app_exit == 0 and self.values > 0
                and not self.drivers_ended)


def check_counts(output: Path, checkpoint: Path) -> tuple[int, int, int, int]:
    """``(keys, values, lost, duplicated)`` of the last committed batch's aggregate: for
    each key, the values ``0..latest`` with that remainder counted against what the
    aggregate holds (counts and sums both)."""
    # The newest committed batch that wrote output: Spark's offline state repartition (a
    # restart rescale) commits a batch of its own, which runs no sink.
    committed = sorted((int(p.name) for p in (checkpoint / "commits").iterdir()
                        if p.name.isdigit()), reverse=True)
    batch = next(b for b in committed if (output / f"batch={b}").is_dir())
    table = pq.read_table(output / f"batch={batch}").to_pydict()
    if not table["latest"]:  # an empty aggregate: nothing was counted
        return 0, 0, 0, 0
    top = max(table["latest"])
    got = {k: (c, t) for k, c, t in zip(table["key"], table["count"], table["total"],
                                         strict=True)}
    lost = duplicated = 0
    for key in range(KEYS):
        n = (top - key) // KEYS + 1 if top >= key else 0  # values key, key+KEYS, ... <= top
        want_total = n * key + KEYS * n * (n - 1) // 2
        count, total = got.get(key, (0, 0))
        if count < n:
            lost += n - count
        elif count > n:
            duplicated += count - n
        elif total != want_total:  # same count, other values: as many lost as duplicated
            lost += 1
            duplicated += 1
    return len(got), top + 1, lost, duplicated


class Watch(threading.Thread):
    """Reads the current driver's REST API every second."""

    def __init__(self, t0: float) -> None:
        super().__init__(daemon=True)
        self.t0 = t0
        self.app: SubmittedApp | None = None
        self.up = False  # the current driver has answered since it was submitted
        self.samples: list[dict[str, Any]] = []
        # By (id, time): a query's history comes back with it after a driver restart, so a
        # record is seen by every driver after the one that made it.
        self.rescales: dict[tuple[int, float], dict[str, Any]] = {}
        self.driver = 0
        self.errors: list[str] = []
        self.requests = 0
        self.stopped = threading.Event()
        self._lock = threading.Lock()

    def use(self, app: SubmittedApp | None) -> None:
        with self._lock:
            self.app, self.up = app, False
            if app is not None:
                self.driver += 1

    def now(self) -> float:
        return time.monotonic() - self.t0

    def last(self) -> dict[str, Any] | None:
        """The newest sample."""
        with self._lock:
            return self.samples[-1] if self.samples else None

    def batch_since(self, wall: float) -> bool:
        """Whether a micro-batch that started at or after ``wall`` (``time.time()``) has
        completed (a progress's time is its batch's start, as in Spark's)."""
        with self._lock:
            return any(s["batch_time"] and s["batch_time"] >= wall for s in self.samples)

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            with self._lock:
                app, driver = self.app, self.driver
            if app is None or not app.running():
                continue
            try:
                queries = app.queries()
                history = app.rescales(QUERY)["rescales"] if queries else []
            except (OSError, ValueError, urllib.error.URLError) as e:
                with self._lock:
                    if self.up and app is self.app and app.running():
                        self.errors.append(f"{self.now():.0f}s: {e}")
                        self.requests += 1
                continue
            with self._lock:
                if app is not self.app:
                    continue
                self.up = True
                self.requests += 1
            q = next((q for q in queries if q["name"] == QUERY), None)
            if q is None:
                continue
            progress = q.get("lastProgress") or {}
            sample = {"t": self.now(), "driver": driver, "state": q["state"],
                      "status": q.get("status"), "parallelism": q["parallelism"],
                      "slots": q["slots"], "executors": q["executors"],
                      "batch_time": progress.get("time"), "wall": time.time()}
            with self._lock:
                self.samples.append(sample)
            for r in history:
                self.rescales[(r["id"], r["time"])] = {**r, "driver": driver}


class Soak:
    """One mode's run: the cluster, the app, the actions, the checks."""

    def __init__(self, mode: str, seconds: float, seed: int, out: Path,
                 max_workers: int) -> None:
        self.mode = mode
        self.seconds = seconds
        self.rng = random.Random(f"{seed}-{mode}")
        self.out = out / mode
        self.max_workers = max_workers
        self.t0 = time.monotonic()
        self.watch = Watch(self.t0)
        self.actions: list[dict[str, Any]] = []
        self.result = Result(mode)
        self.cluster: LocalCluster | None = None
        self.app: SubmittedApp | None = None
        self._frozen: threading.Timer | None = None
        self._upper: int | None = None  # the upper bound the last bounds action set
        self._driver_kills: list[tuple[float, str]] = []  # (due, action), soonest first

    def say(self, text: str) -> None:
        print(f"[{self.mode} {time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    # -- the app --------------------------------------------------------------------------
    def _submit(self) -> None:
        assert self.cluster is not None
        conf = {**CONF, "spark.adaptive.scheduler.mode": self.mode}
        self.app = submit(self.cluster, APP, "--checkpoint", str(self.out / "checkpoint"),
                          "--output", str(self.out / "output"),
                          "--stop-file", str(self.out / "stop"), conf=conf,
                          log_path=self.out / f"driver-{self.watch.driver + 1}.log")
        self.watch.use(self.app)
        self.app.wait_for_query(timeout=240)
        self.result.drivers += 1

    def _app_id(self) -> str | None:
        assert self.cluster is not None
        apps = (self.cluster.status() or {}).get("activeapps", [])
        return apps[-1]["id"] if apps else None

    def _executors(self) -> list[Any]:
        assert self.cluster is not None
        app_id = self._app_id()
        return [] if app_id is None else self.cluster.executors(app_id)

    # -- actions ------------------------------------------------------------------------
    def _choices(self) -> dict[str, float]:
        assert self.cluster is not None
        workers = len(self.cluster.workers)
        registered = self.cluster.registered_workers()
        # Weights. The driver kills are planned, not drawn (see _plan_driver_kills). An
        # executor's kill, which its worker replaces within the executor-loss grace (no
        # rescale), is half as likely as another fault. Workers join more often than they
        # go, so that the cluster keeps moving between one and --max-workers instead of
        # sitting at one; new bounds are as likely as a worker joining.
        out = {"kill-executor": 0.5}
        if self._frozen is None or not self._frozen.is_alive():
            out["freeze-executor"] = 1.0  # one frozen executor at a time
        if workers < self.max_workers and len(registered) == workers:
            out["add-worker"] = 3.0  # one worker joining at a time
        if len(registered) > 1:
            out["stop-worker"] = out["kill-worker"] = 1.0
        if self.mode == "adaptive" and self._uppers():
            out["bounds"] = 3.0
        return out

    def _plan_driver_kills(self) -> None:
        """One driver kill per DRIVER_KILL_EVERY seconds of faults, at least one, each at a
        random time in its own stretch of the run, the two kinds taking turns from a random
        first. A resubmitted driver takes half a minute to a minute to run its query again,
        in which nothing else can rescale: drawn at random, the kills took most of a
        10-minute run in some seeds and none in others."""
        n = max(1, round(self.seconds / DRIVER_KILL_EVERY))
        kinds = ["kill-driver-in-repartition", "kill-driver"]
        first = self.rng.randrange(2)
        stretch = self.seconds / n
        self._driver_kills = [
            (time.monotonic() + stretch * (i + self.rng.uniform(0.2, 0.8)), kinds[(first + i) % 2])
            for i in range(n)]

    def _next_action(self) -> str:
        """A planned driver kill when one is due, else an action drawn by weight."""
        if self._driver_kills and self._driver_kills[0][0] <= time.monotonic():
            return self._driver_kills.pop(0)[1]
        choices = self._choices()
        return self.rng.choices(list(choices), list(choices.values()))[0]

    def _uppers(self) -> list[int]:
        """The upper bounds a bounds action may set: within the slots the workers have (so
        that fewer and more both happen now), other than the query's parallelism (so that
        the change rescales it) and than the upper bound set last (the same bounds again
        change nothing)."""
        assert self.cluster is not None
        now = self._parallelism()
        top = max(2, len(self.cluster.registered_workers()))
        return [u for u in range(1, top + 1) if u not in (now, self._upper)]

    def _wait_executing(self) -> None:
        """Before an action that rescales: up to SCALING_WAIT seconds for the query to run
        (state Executing) rather than be mid-rescale, so that the action makes a rescale of
        its own instead of being folded into the one under way. Faults on executors do not
        wait: they strike whenever they do."""
        deadline = time.monotonic() + SCALING_WAIT
        since = self.watch.now()
        while time.monotonic() < deadline:
            last = self.watch.last()
            if last is not None and last["t"] > since and last["state"] == "Executing":
                return
            time.sleep(0.5)

    def act(self, action: str) -> str:
        assert self.cluster is not None and self.app is not None
        # A worker joins on its own time, as a node does: the next actions go on while it
        # starts (and none stops or kills it before the master lists it).
        if action == "add-worker":
            return self.cluster.add_worker(wait=False).name
        if action == "stop-worker":
            return self.cluster.stop_worker(
                self.rng.choice(self.cluster.registered_workers())).name
        if action == "kill-worker":
            return self.cluster.kill_worker(
                self.rng.choice(self.cluster.registered_workers())).name
        if action in ("kill-executor", "freeze-executor"):
            executors = self._executors()
            if not executors:
                return "no executor"
            e = self.rng.choice(executors)
            if action == "kill-executor":
                self.cluster.kill_executor(e.executor_id, e.app_id)
                return f"executor {e.executor_id}"
            frozen = self.cluster.freeze_executor(e.executor_id, e.app_id)
            # Thawed past the failure-detection timeout; the other actions go on meanwhile.
            self._frozen = threading.Timer(FAILURE_DETECTION + 5, _thaw, (frozen.pid,))
            self._frozen.daemon = True
            self._frozen.start()
            return f"executor {e.executor_id} for {FAILURE_DETECTION + 5:g}s"
        if action == "bounds":
            uppers = self._uppers()  # read again: the wait may have changed the parallelism
            if not uppers:
                return "no upper bound would change anything"
            return self._put_upper(self.rng.choice(uppers))
        if action == "kill-driver":
            self.watch.use(None)  # first: a request cut by the kill is no error of the API
            self.app.kill()
            self._submit()
            return f"driver {self.result.drivers - 1} killed, resubmitted"
        if action == "kill-driver-in-repartition":
            return self._kill_in_repartition()
        raise ValueError(f"unknown action {action!r}")

    def _parallelism(self) -> int | None:
        last = self.watch.last()
        return None if last is None else last["parallelism"]

    def _put_upper(self, upper: int) -> str:
        """New bounds ``[1, upper]`` through the REST API."""
        assert self.app is not None
        self._upper = upper
        body = json.dumps({"parallelism": {"lowerBound": 1, "upperBound": upper}})
        req = urllib.request.Request(
            f"{self.app.rest_url}/queries/{QUERY}/resource-requirements", body.encode(),
            method="PUT", headers={"Content-Type": "application/json"})
        with loopback_urlopen(req, timeout=30) as r:
            assert r.status == 200
        return f"[1, {upper}]"

    def _kill_in_repartition(self) -> str:
        """Cause a restart rescale, and SIGKILL the driver while its state is repartitioned.
        In adaptive mode new bounds restart it (onto fewer partitions, or from one onto
        two); in reactive mode a worker joins or stops."""
        assert self.cluster is not None and self.app is not None
        app = self.app
        before = {r["id"] for r in app.rescales(QUERY)["rescales"]}
        now = self._parallelism()
        how = ""
        if self.mode == "adaptive" and now is not None:
            if (now == 1 and len(self.cluster.registered_workers()) < 2
                    and len(self.cluster.workers) < self.max_workers):
                how = f"{self.cluster.add_worker().name} joined, "
            how += f"bounds {self._put_upper(now - 1 if now > 1 else 2)}: "
        elif len(self.cluster.workers) < self.max_workers:
            how = f"{self.cluster.add_worker().name} joined: "
        elif len(self.cluster.registered_workers()) > 1:
            gone = self.cluster.stop_worker(self.rng.choice(self.cluster.registered_workers()))
            how = f"{gone.name} stopped: "
        deadline = time.monotonic() + 45
        phase = "no restart rescale within 45 s"
        while time.monotonic() < deadline:
            try:
                records = [r for r in app.rescales(QUERY)["rescales"] if r["id"] not in before]
            except (OSError, ValueError):
                records = []
            pending = [r for r in records if r["outcome"] == "pending" and r["kind"] == "restart"]
            if pending and "stop" in pending[-1]["timings"]:
                phase = "killed during repartition"
                break
            if any(r["kind"] == "live" for r in records):
                phase = "the rescale was live: killed after it"
                break
            time.sleep(0.05)
        self.watch.use(None)
        app.kill()
        self._submit()
        return how + phase

    # -- the run ------------------------------------------------------------------------
    def run(self) -> Result:
        # A fresh place: an earlier run's checkpoint, output or stop file would be this
        # run's (its stop file stops the app at once).
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        with LocalCluster(workers=2, work_dir=self.out / "cluster") as cluster:
            self.cluster = cluster
            self.watch.start()
            self._submit()
            self.say(f"app up, REST API {self.app.rest_url if self.app else '?'}")
            end = time.monotonic() + self.seconds  # the faults' time: after the app is up
            self._plan_driver_kills()
            while time.monotonic() + 5 < end:
                time.sleep(self.rng.uniform(3, 7))
                if time.monotonic() >= end:
                    break
                self._check_driver()
                action = self._next_action()
                if action in RESCALING:
                    self._wait_executing()
                at = time.monotonic() - self.t0
                try:
                    what = self.act(action)
                except Exception as e:  # noqa: BLE001 - an action that could not be done
                    what = f"not done: {type(e).__name__}: {e}"
                self.actions.append({"t": at, "until": time.monotonic() - self.t0,
                                     "action": action, "what": what})
                self.result.actions[action] = self.result.actions.get(action, 0) + 1
                self.say(f"{action}: {what}")
            if self._frozen is not None and self._frozen.is_alive():
                self._frozen.cancel()  # the run ends before its thaw: thaw it now
                _thaw(*self._frozen.args)
            self._finish()
        return self.result

    def _check_driver(self) -> None:
        """A driver that ended on its own (the app failed) is counted and submitted again,
        so that the rest of the run still tests something."""
        assert self.app is not None
        if self.app.running():
            return
        self.watch.use(None)
        what = (f"{self.watch.now():.0f}s: driver {self.result.drivers}, exit "
                f"{self.app.process.returncode}")
        self.result.drivers_ended.append(what)
        self.say(f"the driver ended on its own ({what}; see {self.app.log_path}); "
                 "submitting it again")
        self._submit()

    def _finish(self) -> None:
        assert self.app is not None
        self._check_driver()
        time.sleep(10)  # the last action's rescale settles
        # The check reads the last committed batch: it covers the faults only once a batch
        # has completed after them (a driver resubmitted by the last action takes up to a
        # minute to run its query again, and faults in a row can hold one batch that long).
        mark, deadline = time.time(), time.monotonic() + SETTLE
        while not self.watch.batch_since(mark) and time.monotonic() < deadline:
            time.sleep(1)
        self.say("a micro-batch ran after the last action" if self.watch.batch_since(mark)
                 else f"no micro-batch ran within {SETTLE:g} s of the last action")
        self.watch.use(None)  # the REST API goes away with the stopping app: not an error
        (self.out / "stop").touch()
        self.result.app_exit = self.app.wait(240)
        self.watch.stopped.set()
        self.watch.join(5)
        r = self.result
        r.seconds = time.monotonic() - self.t0
        r.keys, r.values, r.lost, r.duplicated = check_counts(self.out / "output",
                                                             self.out / "checkpoint")
        records = [x for x in self.watch.rescales.values() if x["kind"] != "initial"
                   and x["trigger"] != "FAILURE"]
        r.rescales = len(records)
        r.live_rescales = sum(1 for x in records if x["kind"] == "live")
        r.restart_rescales = r.rescales - r.live_rescales
        r.failed_states = sum(1 for s in self.watch.samples if s["status"] == "FAILED")
        r.rest_errors, r.rest_requests = len(self.watch.errors), self.watch.requests
        r.worst_staleness = _worst_staleness(self.watch.samples)
        self._write()

    def _write(self) -> None:
        data = {"result": {**asdict(self.result), "faults": self.result.faults,
                           "ok": self.result.ok},
                "actions": self.actions, "samples": self.watch.samples,
                "rescales": list(self.watch.rescales.values()),
                "rest_errors": self.watch.errors}
        (self.out / "soak.json").write_text(json.dumps(data, indent=1))
        if importlib.util.find_spec("matplotlib") is None:
            self.say("no timeline picture: matplotlib is not installed (pip install "
                      f"'spark-adaptive[plot]'); the run is in {self.out / 'soak.json'}")
            return
        plot(self.mode, data, self.out / "soak.png")


def _thaw(pid: int) -> None:
    """SIGCONT a frozen executor's process, unless it was killed meanwhile (released)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def _worst_staleness(samples: list[dict[str, Any]]) -> float:
    """The longest a sample saw since the query's last completed micro-batch (while a
    driver answered: the minutes a killed driver is down are counted from its restart)."""
    worst = 0.0
    for s in samples:
        if s["batch_time"]:
            worst = max(worst, s["wall"] - s["batch_time"])
    return worst


def plot(mode: str, data: dict[str, Any], path: Path) -> None:
    """The timeline: executors and parallelism, the actions, and the time since the last
    completed micro-batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = data["samples"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    t = [s["t"] for s in samples]
    top.step(t, [s["executors"] for s in samples], where="post", color="#bbbbbb", lw=5,
             label="executors")
    top.step(t, [s["parallelism"] for s in samples], where="post", color="#1f77b4", lw=2,
             label="parallelism")
    for a in data["actions"]:
        color = "#d62728" if a["action"] in FAULTS else "#2ca02c"
        for ax in (top, bottom):
            ax.axvline(a["t"], color=color, lw=0.8, ls=":")
            if a["until"] - a["t"] > 2:  # a frozen executor, a driver down and resubmitted
                ax.axvspan(a["t"], a["until"], color=color, alpha=0.07)
        top.text(a["t"], 4.4, a["action"], rotation=90,
                 fontsize=7, color=color, va="top", ha="right")
    top.set_ylim(0, 4.6)
    top.set_ylabel("count")
    top.legend(loc="upper left", fontsize=8)
    r = data["result"]
    top.set_title(f"spark-adaptive soak, {mode} mode: {r['rescales']} rescales "
                  f"({r['live_rescales']} live), {r['faults']} faults, {r['lost']} lost, "
                  f"{r['duplicated']} duplicated")
    bottom.plot(t, [s["wall"] - s["batch_time"] if s["batch_time"] else None
                    for s in samples], color="#9467bd", lw=1.2)
    bottom.set_ylabel("seconds since the\nlast micro-batch")
    bottom.set_xlabel("seconds since the soak started")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="adaptive,reactive")
    ap.add_argument("--max-workers", type=int, default=3)
    ap.add_argument("--out", default="soak-output")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    out = Path(args.out)
    results = []
    for mode in modes:
        soak = Soak(mode, args.minutes * 60 / len(modes), args.seed, out, args.max_workers)
        results.append(soak.run())
    print("\nsummary")
    for r in results:
        print(f"  {r.mode}: {r.seconds:.0f}s, {r.rescales} rescales ({r.live_rescales} live, "
              f"{r.restart_rescales} restart), {r.faults} faults {r.actions}, "
              f"{r.drivers} drivers, {r.values} values in {r.keys} keys checked: {r.lost} lost, "
              f"{r.duplicated} duplicated; FAILED seen {r.failed_states}; drivers ended on "
              f"their own {len(r.drivers_ended)}; REST errors "
              f"{r.rest_errors} of {r.rest_requests}; worst time since a batch "
              f"{r.worst_staleness:.1f}s; app exit {r.app_exit}: {'ok' if r.ok else 'NOT OK'}")
    print(f"  timelines: {', '.join(str(out / r.mode / 'soak.png') for r in results)}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
