"""Restarts that go wrong, end to end (application scheduler, fake driver, virtual time).

* A start error that every retry meets again (Spark's analysis, an unreadable
  checkpoint) fails the query at once, whatever the restart strategy, with Spark's
  error class.
* A restart spark-adaptive made to rescale a query is not the app's: a start of it
  that fails is retried outside the restart strategy (at the target, then at the
  partitions the query had), and only a failure of those goes to the strategy.
* A batch failure the rescale's clean stop reports is the run's own failure: the
  strategy hears of it (``none`` fails the query, as plain Spark would).
"""

from __future__ import annotations

import pytest
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.streaming.history import Counters
from spark_adaptive.core.streaming.states.creating_execution_graph import START_RETRY_DELAY
from spark_adaptive.settings import Settings

EXPONENTIAL = Settings.from_conf({"spark.adaptive.restart-strategy.type": "exponential-delay"})
FIXED_DELAY = Settings.from_conf({"spark.adaptive.restart-strategy.type": "fixed-delay",
                                  "spark.adaptive.restart-strategy.fixed-delay.attempts": "1"})
PATH_NOT_FOUND = ("org.apache.spark.sql.AnalysisException: [PATH_NOT_FOUND] Path does not "
                  "exist: /data/in. SQLSTATE: 42K03")
HICCUP = "java.io.IOException: transient HDFS hiccup"


def _restarting_to_rescale(settings: Settings | None = None) -> tuple[App, FakeDriver]:
    """Query q running at 1 partition on one executor; a second one makes the desired
    share: a restart rescale to 2 partitions, its clean stop in flight."""
    app = App(settings)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=2))
    app.register(driver)
    app.event(driver.progress())
    app.add("2")
    assert app.state("q") == "Restarting"
    assert driver.pending_stops and driver.pending_stops[0][0] is True  # clean
    return app, driver


def _starts(driver: FakeDriver) -> list[int]:
    return [p for op, p in driver.calls if op == "start"]


# -- unrecoverable start errors ------------------------------------------------------------
def test_an_unrecoverable_start_error_fails_the_query_at_once_whatever_the_strategy(
        caplog: pytest.LogCaptureFixture) -> None:
    app = App(EXPONENTIAL)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    app.event(driver.terminated("boom"))  # exponential-delay restarts it
    app.advance(2)
    app.start(driver, ok=False, error=PATH_NOT_FOUND, error_class="PATH_NOT_FOUND",
              recoverable=False)
    app.advance(120)
    assert driver.pending_starts == []  # never tried again
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status, snap.error_origin) == ("Finished", "FAILED", "start")
    assert (snap.error, snap.error_class) == (PATH_NOT_FOUND, "PATH_NOT_FOUND")
    assert snap.counters.failures == 2
    assert any(r.getMessage().endswith(
        f"CreatingExecutionGraph -> Failing: the start failed: {PATH_NOT_FOUND}; no restart "
        "can get past this error") for r in caplog.records)


def test_an_unrecoverable_start_error_of_a_rescale_restart_is_not_retried() -> None:
    app, driver = _restarting_to_rescale()
    app.stop(driver)
    app.start(driver, ok=False, error=PATH_NOT_FOUND, recoverable=False)
    app.advance(10)
    assert _starts(driver) == [1, 2]
    snap = app.scheduler.query("q").snapshot()
    assert (snap.status, snap.error, snap.error_origin) == ("FAILED", PATH_NOT_FOUND, "start")


# -- a rescale's restart whose start fails -------------------------------------------------
def test_a_rescale_restart_whose_start_fails_once_is_retried_at_the_target() -> None:
    app, driver = _restarting_to_rescale()  # restart-strategy none
    app.stop(driver)
    app.start(driver, ok=False, error=HICCUP)
    assert app.state("q") == "CreatingExecutionGraph"
    app.advance(START_RETRY_DELAY)
    assert _starts(driver) == [1, 2, 2]
    app.start(driver)
    app.event(driver.progress())
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.parallelism) == ("Executing", 2)
    assert snap.counters == Counters(restarts=1, rescales=1, failures=0)
    assert [r.outcome for r in app.scheduler.history("q")][-1] == "completed"


def test_a_rescale_restart_that_cannot_start_at_the_target_goes_on_at_the_old_partitions(
) -> None:
    app, driver = _restarting_to_rescale()
    app.stop(driver)
    app.start(driver, ok=False, error=HICCUP)
    app.advance(START_RETRY_DELAY)
    app.start(driver, ok=False, error=HICCUP)
    app.advance(START_RETRY_DELAY)
    assert _starts(driver) == [1, 2, 2, 1]
    app.start(driver)
    app.event(driver.progress())
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.parallelism, snap.counters.failures) == ("Executing", 1, 0)
    assert app.scheduler.history("q")[-1].outcome == "failed"
    app.advance(600)  # its share is unchanged: no restart loop onto the target
    assert _starts(driver) == [1, 2, 2, 1] and app.state("q") == "Executing"


def test_a_rescale_restart_that_cannot_start_at_all_fails_with_its_start_error() -> None:
    app, driver = _restarting_to_rescale()  # restart-strategy none
    app.stop(driver)
    for _ in range(3):
        app.start(driver, ok=False, error=HICCUP)
        app.advance(START_RETRY_DELAY)
    assert _starts(driver) == [1, 2, 2, 1]
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status, snap.error, snap.error_origin) == (
        "Finished", "FAILED", HICCUP, "start")
    assert snap.counters.failures == 1


def test_a_strategy_counts_a_rescale_restart_only_once_its_retries_failed() -> None:
    app, driver = _restarting_to_rescale(FIXED_DELAY)  # one restart allowed
    app.stop(driver)
    for _ in range(3):
        app.start(driver, ok=False, error=HICCUP)
        app.advance(START_RETRY_DELAY)
    assert app.state("q") in ("Restarting", "CreatingExecutionGraph")
    assert app.scheduler.query("q").snapshot().counters.failures == 1
    app.advance(2)  # the strategy's restart: a failure's, not retried outside it
    app.start(driver, ok=False, error=HICCUP)
    app.advance(10)
    snap = app.scheduler.query("q").snapshot()
    assert (snap.status, snap.counters.failures) == ("FAILED", 2)


def test_cancel_while_a_start_retry_waits_ends_canceled() -> None:
    app, driver = _restarting_to_rescale()
    app.stop(driver)
    app.start(driver, ok=False, error=HICCUP)
    app.scheduler.cancel("q")
    app.advance(10)
    assert _starts(driver) == [1, 2]
    assert app.scheduler.query("q").snapshot().status == "CANCELED"


# -- a batch failure reported by a rescale's clean stop ------------------------------------
def test_a_batch_failure_reported_by_the_rescales_stop_fails_the_query_without_strategy(
) -> None:
    app, driver = _restarting_to_rescale()
    app.stop(driver, clean=False, error="org.apache.spark.SparkException: foreachBatch raised")
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status, snap.error_origin) == ("Finished", "FAILED", "stop")
    assert snap.counters.failures == 1
    assert _starts(driver) == [1]


def test_a_batch_failure_reported_by_the_rescales_stop_is_counted_by_the_strategy() -> None:
    app, driver = _restarting_to_rescale(EXPONENTIAL)
    app.stop(driver, clean=False, error="org.apache.spark.SparkException: foreachBatch raised")
    q = app.scheduler.query("q")
    assert q.state.name == "Restarting" and q.history.counters.failures == 1
    app.advance(1.1)  # exponential-delay's first backoff (1 s, jitter 0 with random 0.5)
    assert _starts(driver) == [1, 2]  # still onto the target
    app.start(driver)
    assert q.state.name == "Executing"
