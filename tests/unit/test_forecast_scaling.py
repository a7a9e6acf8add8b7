"""The forecast at work (core/streaming/autoscaling.py): a recurring rise scaled for ahead,
with the trigger FORECAST, and the history carried over a driver restart; on virtual time."""

from __future__ import annotations

import itertools
from typing import Any

from scheduler_fakes import App, FakeDriver, query_info
from test_autoscaling import QUICK, Load

from spark_adaptive.core.autoscaler import AutoscalerConfig
from spark_adaptive.core.streaming.autoscaling import Autoscaling
from spark_adaptive.core.streaming.history import RescaleRecord, Trigger
from spark_adaptive.core.streaming.history_store import MemoryHistoryStore
from spark_adaptive.settings import Settings

PERIOD, BUCKET, RISE, FALL = 120.0, 10.0, 60.0, 100.0
FORECAST = dict(forecast_enabled=True, forecast_period=PERIOD, forecast_bucket=BUCKET,
                forecast_horizon=20.0, executor_startup_time=5.0)
STARTUP = 5.0  # seconds an executor asked for takes to join


def rate(now: float) -> float:
    """50 rows/s (half a slot), 300 (three slots) from 60 to 100 s into each period."""
    return 300.0 if RISE <= now % PERIOD < FALL else 50.0


class Cluster:
    """An app whose executors join STARTUP seconds after they are asked for and leave when
    released; one query under the recurring load."""

    def __init__(self, history: Any = None, start: float = 0.0, **config: Any) -> None:
        cfg = AutoscalerConfig(**{**QUICK, **config})
        self.app = App(Settings.from_conf({
            "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "5s"}),
            autoscaled=cfg.acting)
        self.app.advance(start)
        self.ids = itertools.count(1)
        self.alive: list[str] = []
        self.joining: list[float] = []
        self._join(1)
        self.driver = FakeDriver(query_info("q", partitions=8))
        self.app.register(self.driver, history=history)
        self.autoscaling = Autoscaling(cfg, self.app.scheduler, self.app.vt)
        self.load = Load(self.app, self.driver, self.autoscaling)
        self.seen_released = 0

    def _join(self, n: int) -> None:
        for _ in range(n):
            e = str(next(self.ids))
            self.app.add(e)
            self.alive.append(e)

    def run_until(self, end: float) -> None:
        a = self.app
        while a.vt.now() < end:
            self.load.rate = rate(a.vt.now())
            self.load.second()
            for e in a.actuator.released[self.seen_released:]:
                if e in self.alive:
                    self.alive.remove(e)
                    a.remove(e, "released")
            self.seen_released = len(a.actuator.released)
            now = a.vt.now()
            self._join(sum(1 for t in self.joining if t <= now))
            self.joining = [t for t in self.joining if t > now]
            want = a.actuator.requested[-1] if a.actuator.requested else len(self.alive)
            missing = want - len(self.alive) - len(self.joining)
            self.joining += [now + STARTUP] * max(0, missing)

    @property
    def slots(self) -> int:
        return self.app.scheduler.query("q").snapshot().slots

    def records(self, trigger: Trigger) -> list[RescaleRecord]:
        return [r for r in self.app.scheduler.history("q") if r.trigger is trigger]


def test_the_second_period_s_rise_finds_its_executors_running_and_the_first_s_did_not() -> None:
    ahead, reactive = Cluster(**FORECAST), Cluster()
    for c in (ahead, reactive):
        c.run_until(PERIOD + RISE - 1)
    # period 1 was learnt, not acted on ahead; its rise was scaled up for once it came
    assert not ahead.records(Trigger.FORECAST)[:1] or \
        ahead.records(Trigger.FORECAST)[0].started >= PERIOD
    assert ahead.records(Trigger.AUTOSCALER)
    # period 2: the executors for the rise run before it comes, with the trigger FORECAST
    up = ahead.records(Trigger.FORECAST)
    assert up and max(r.to_slots for r in up) >= 3, up
    assert all(PERIOD < r.started < PERIOD + RISE for r in up), up
    assert ahead.slots >= 3
    # the reactive autoscaler meets the same rise on the slot the night left it
    assert reactive.slots == 1 and not reactive.records(Trigger.FORECAST)
    status = ahead.autoscaling.status(ahead.app.scheduler.query("q"))
    assert status.forecast is not None and status.forecast.in_use, status.forecast
    assert status.ahead >= 1 and status.decision is not None
    assert ahead.autoscaling.forecast_rate("q") == status.forecast.rate


def test_a_forecast_fall_scales_nothing_down_and_the_rise_is_given_back_after_it() -> None:
    c = Cluster(**FORECAST)
    c.run_until(PERIOD + FALL + 5)
    high = c.slots
    assert high >= 3
    c.run_until(2 * PERIOD + 30)
    # scaled down once the load fell, by the reactive rules (AUTOSCALER), never by the forecast
    downs = [r for r in c.app.scheduler.history("q") if r.to_slots < r.from_slots
             and r.started > PERIOD + FALL]
    assert downs and all(r.trigger is not Trigger.FORECAST for r in downs), downs
    assert c.slots < high


def test_a_driver_restarted_mid_period_forecasts_the_next_from_the_persisted_history() -> None:
    first = Cluster(**FORECAST)
    first.run_until(PERIOD + PERIOD / 4)  # the driver stops a quarter into period 2
    q = first.app.scheduler.query("q")
    assert q.history.load is not None and q.history.load.buckets
    store = MemoryHistoryStore()
    store.save("/cp/q", q.history.saved())  # through the file format
    saved = store.load("/cp/q")
    assert saved is not None and saved.load == q.history.load
    # resubmitted: a new driver (a new app) at the same wall-clock time, its history restored
    second = Cluster(history=saved, start=PERIOD + PERIOD / 4 + 5, **FORECAST)
    second.run_until(2 * PERIOD + RISE - 1)
    up = second.records(Trigger.FORECAST)
    assert up and 2 * PERIOD < up[-1].started < 2 * PERIOD + RISE, up
    assert second.slots >= 3
    # the same driver without the persisted history has nothing to forecast from
    fresh = Cluster(start=PERIOD + PERIOD / 4 + 5, **FORECAST)
    fresh.run_until(2 * PERIOD + RISE - 1)
    assert not fresh.records(Trigger.FORECAST) and fresh.slots == 1


def test_a_resubmitted_run_s_first_two_batches_are_not_learnt_as_a_rate() -> None:
    first = Cluster(**FORECAST)
    first.run_until(30.0)
    store = MemoryHistoryStore()
    store.save("/cp/q", first.app.scheduler.query("q").history.saved())
    # resubmitted 15 s later: its first batch is the one the first run planned and did
    # not commit, run again; its second reads the 15 s since that plan, in one second
    second = Cluster(history=store.load("/cp/q"), start=45.0, **FORECAST)
    second.load.rate = 50.0
    second.load.second()
    second.load.rate = 50.0 * 15
    second.load.second()
    second.run_until(58.0)  # 50 rows/s again
    load = second.app.scheduler.query("q").history.load
    assert load is not None
    rates = [rows / seconds for _, rows, seconds, _ in load.buckets if seconds > 0]
    assert rates and max(rates) == 50.0, load.buckets  # the pile is not a rise
    assert any(b[0] * BUCKET >= 40.0 for b in load.buckets)  # the new run's were learnt
