"""The app's handle of a managed query, against the scheduler on virtual time, with
hand-written stand-ins for PySpark's runs.

* ``stop_with_savepoint()`` returns once the query finished, and raises when the stop is
  given up because the query failed meanwhile and is restarted (it goes on).
* A query that a failed start ended raises what Spark's ``start()`` raised.
* ``processAllAvailable()`` waits out a run that failed and is restarted; it raises only
  the error that ended the query.
* When the SparkContext stops before the query ended, the handle speaks for the run
  going on, which the SparkContext's end ends as on plain Spark.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from scheduler_fakes import App, FakeDriver, ScalaOption, query_info

from spark_adaptive.errors import QueryFailedError
from spark_adaptive.settings import Settings
from spark_adaptive.spark.streaming import ManagedStreamingQuery, StreamingManager

FIXED_DELAY = Settings.from_conf({"spark.adaptive.restart-strategy.type": "fixed-delay"})


class SparkError(Exception):
    """Stands for PySpark's StreamingQueryException of a run."""


class _JQuery:
    def __init__(self, run: _Run) -> None:
        self.run = run

    def exception(self) -> ScalaOption:
        return ScalaOption(self.run.error)


class _Run:
    """A Spark run: active until ``end``; ``processAllAvailable`` raises its error."""

    def __init__(self, error: str | None = None, active: bool = True) -> None:
        self.error = error
        self.isActive = active
        self._jsq = _JQuery(self)

    def end(self, error: str | None) -> None:
        self.error, self.isActive = error, False

    def processAllAvailable(self) -> None:  # noqa: N802
        if self.error is not None:
            raise SparkError(self.error)

    def awaitTermination(self, timeout: float | None = None) -> bool | None:  # noqa: N802
        if self.error is not None:
            raise SparkError(self.error)
        return None if timeout is None else not self.isActive

    def exception(self) -> SparkError | None:
        return None if self.error is None else SparkError(self.error)


class _Driver:
    """The Spark driver as the handle sees it: its current run, and a hook standing for
    the scheduler's restart while the handle waits for the next run."""

    def __init__(self, run: _Run | None) -> None:
        self.current = run
        self.previous: _Run | None = None
        self.start_error: BaseException | None = None
        self.on_wait: Callable[[], None] = lambda: None

    def wait_for_run_after(self, run: Any, timeout: float) -> None:
        self.on_wait()


class _Loop:
    def __init__(self, app: App) -> None:
        self.app = app

    def call_sync(self, fn: Callable[[], Any]) -> Any:
        result = fn()
        self.app.vt.run_pending()
        return result


class _Runtime:
    def __init__(self, app: App) -> None:
        self.loop = _Loop(app)


def _managed(settings: Settings | None = None) -> tuple[App, FakeDriver, StreamingManager, Any,
                                                         _Driver]:
    """Query q running, taken over by the scheduler, with the app's handle of it."""
    app = App(settings)
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    app.event(driver.progress())
    manager = StreamingManager(_Runtime(app), app.scheduler)  # type: ignore[arg-type]
    spark = _Driver(_Run())
    handle = ManagedStreamingQuery(manager, "q", spark)
    manager._handles["q"] = handle
    return app, driver, manager, handle, spark


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["returned"] = fn()
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            out["raised"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _wait_for(app: App, state: str) -> None:
    for _ in range(500):
        if app.state("q") == state:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"query q never reached {state} (in {app.state('q')})")


# -- stop_with_savepoint() ----------------------------------------------------------------
def test_stop_with_savepoint_raises_when_the_query_fails_while_stopping_and_goes_on() -> None:
    app, driver, _, handle, _ = _managed(FIXED_DELAY)
    thread, out = _in_thread(handle.stop_with_savepoint)
    _wait_for(app, "StopWithSavepoint")
    app.stop(driver, clean=False, error="SparkException: batch 3 failed")  # fixed-delay
    thread.join(5)
    assert not thread.is_alive(), "stop_with_savepoint() never returned"
    error = out.get("raised")
    assert isinstance(error, QueryFailedError)
    assert str(error).startswith("stop with savepoint of query q failed: the query failed "
                                 "while stopping: SparkException: batch 3 failed")
    assert str(error).endswith("(now Restarting); the query goes on")
    assert handle.isActive
    app.advance(1)
    app.start(driver)
    assert app.state("q") == "Executing"


def test_stop_with_savepoint_returns_once_the_query_stopped_cleanly() -> None:
    app, driver, _, handle, _ = _managed(FIXED_DELAY)
    thread, out = _in_thread(handle.stop_with_savepoint)
    _wait_for(app, "StopWithSavepoint")
    app.stop(driver)
    thread.join(5)
    assert out == {"returned": None} and not handle.isActive


def test_stop_with_savepoint_raises_the_error_of_a_query_that_failed_while_stopping() -> None:
    app, driver, _, handle, spark = _managed()  # restart-strategy none
    thread, out = _in_thread(handle.stop_with_savepoint)
    _wait_for(app, "StopWithSavepoint")
    assert spark.current is not None
    spark.current.end("SparkException: batch 3 failed")
    app.stop(driver, clean=False, error="SparkException: batch 3 failed")
    thread.join(5)
    assert isinstance(out.get("raised"), SparkError)


# -- a failed start ended the query --------------------------------------------------------
class AnalysisException(Exception):
    """Stands for the PySpark exception Spark's start() raised."""


def test_a_query_that_a_failed_start_ended_raises_what_start_raised() -> None:
    app, driver, _, handle, spark = _managed(FIXED_DELAY)
    assert spark.current is not None
    spark.current.end("boom")
    app.event(driver.terminated("boom"))
    app.advance(1)
    raised = AnalysisException("[PATH_NOT_FOUND] Path does not exist: /in")
    spark.start_error = raised
    app.start(driver, ok=False, error=str(raised), error_class="PATH_NOT_FOUND",
              recoverable=False)
    assert app.scheduler.query("q").snapshot().status == "FAILED"
    with pytest.raises(AnalysisException) as err:
        handle.awaitTermination()
    assert err.value is raised
    assert handle.exception() is raised


# -- processAllAvailable() -----------------------------------------------------------------
def test_process_all_available_waits_out_a_run_the_scheduler_restarts() -> None:
    app, driver, _, handle, spark = _managed(FIXED_DELAY)
    failed, restarted = spark.current, _Run()
    assert failed is not None
    failed.end("SparkException: transient failure in batch 0")

    def restart() -> None:  # what the scheduler does meanwhile
        app.event(driver.terminated("SparkException: transient failure in batch 0"))
        app.advance(1)
        app.start(driver)
        spark.previous, spark.current = failed, restarted

    spark.on_wait = restart
    handle.processAllAvailable()
    assert spark.current is restarted and app.state("q") == "Executing"


def test_process_all_available_raises_the_error_that_ended_the_query() -> None:
    app, driver, _, handle, spark = _managed()  # restart-strategy none
    assert spark.current is not None
    spark.current.end("SparkException: batch 0 failed")
    spark.on_wait = lambda: app.event(driver.terminated("SparkException: batch 0 failed"))
    with pytest.raises(SparkError, match="batch 0 failed"):
        handle.processAllAvailable()
    assert app.scheduler.query("q").snapshot().status == "FAILED"


# -- the SparkContext stops ----------------------------------------------------------------
def test_when_the_spark_context_stops_the_handle_speaks_for_the_run() -> None:
    _, _, manager, handle, spark = _managed()
    manager.close()
    assert spark.current is not None
    spark.current.end("SparkException: Job cancelled because SparkContext was shut down")
    with pytest.raises(SparkError, match="SparkContext was shut down"):
        handle.awaitTermination()
    assert not handle.isActive
    assert "SparkContext was shut down" in str(handle.exception())


def test_when_the_spark_context_stops_a_query_without_a_run_ends_canceled() -> None:
    _, _, manager, handle, spark = _managed()
    spark.current = None
    manager.close()
    assert handle.awaitTermination() is None
    assert handle.exception() is None and not handle.isActive
