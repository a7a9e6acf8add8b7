"""The Spark query driver's starts and stops, with hand-written stand-ins for PySpark and py4j.

* A start that Spark's ``start()`` refuses reports Spark's error class, and whether a
  retry can get past it; the driver keeps the exception for the app's handle.
* A cancel does not wait for a clean stop in progress: the clean stop gives up waiting
  for its micro-batch (polling, or the shim's boundary wait) and the query stops at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from scheduler_fakes import query_info

from spark_adaptive.core.ports import StartResult, StopResult
from spark_adaptive.core.streaming.restart import FailedStart
from spark_adaptive.spark import driver as driver_module
from spark_adaptive.spark.driver import SparkQueryDriver, unrecoverable_start_error


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {"spark.sql.shuffle.partitions": "4"}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _SparkContext:
    _jsc = object()


class _Spark:
    def __init__(self) -> None:
        self.conf = _Conf()
        self.sparkContext = _SparkContext()


class _JavaClass:
    def __init__(self, name: str, parent: _JavaClass | None = None) -> None:
        self.name, self.parent = name, parent

    def getName(self) -> str:  # noqa: N802 - Java's names
        return self.name

    def getSuperclass(self) -> _JavaClass | None:  # noqa: N802
        return self.parent


class _JavaError:
    """A JVM exception as py4j shows it: its class (with its superclasses) and cause."""

    def __init__(self, cls: _JavaClass, cause: _JavaError | None = None) -> None:
        self.cls, self.cause = cls, cause

    def getClass(self) -> _JavaClass:  # noqa: N802
        return self.cls

    def getCause(self) -> _JavaError | None:  # noqa: N802
        return self.cause

    def getCondition(self) -> str | None:  # noqa: N802
        return None


class Py4JJavaError(Exception):
    """Stands for py4j's error of a JVM exception PySpark does not convert."""

    def __init__(self, java: _JavaError) -> None:
        super().__init__("An error occurred while calling o82.start.")
        self.java_exception = java


THROWABLE = _JavaClass("java.lang.Throwable")
JSON_PARSE = _JavaClass("com.fasterxml.jackson.core.JsonParseException", _JavaClass(
    "com.fasterxml.jackson.core.exc.StreamReadException", _JavaClass(
        "com.fasterxml.jackson.core.JsonProcessingException", THROWABLE)))
IO_ERROR = _JavaClass("java.io.IOException", THROWABLE)


def _driver(start: Any = None, **kw: Any) -> SparkQueryDriver:
    return SparkQueryDriver(_Spark(), object(), start or (lambda jw: None),  # type: ignore[arg-type]
                            query_info("q", checkpoint=None), **kw)


def _start(driver: SparkQueryDriver) -> StartResult:
    done = threading.Event()
    results: list[StartResult] = []

    def on_done(result: StartResult) -> None:
        results.append(result)
        done.set()

    driver.start(2, on_done)
    assert done.wait(10)
    return results[0]


# -- failed starts --------------------------------------------------------------------------
def test_an_analysis_exception_of_start_is_unrecoverable_with_its_error_class() -> None:
    refused = AnalysisException(message="[PATH_NOT_FOUND] Path does not exist: /in.",
                                errorClass="PATH_NOT_FOUND", messageParameters={})

    def start(jwriter: Any) -> Any:
        raise refused

    driver = _driver(start)
    result = _start(driver)
    assert isinstance(result, FailedStart) and not result.ok
    assert (result.error_class, result.recoverable) == ("PATH_NOT_FOUND", False)
    assert driver.start_error is refused


def test_checkpoint_metadata_spark_cannot_parse_is_unrecoverable() -> None:
    error = Py4JJavaError(_JavaError(JSON_PARSE))

    def start(jwriter: Any) -> Any:
        raise error

    driver = _driver(start)
    result = _start(driver)
    assert isinstance(result, FailedStart)
    assert (result.recoverable, result.error_class) == (False, None)
    assert driver.start_error is error


@pytest.mark.parametrize("error", [
    Py4JJavaError(_JavaError(IO_ERROR)),
    RuntimeError("the checkpoint store did not answer"),
])
def test_other_start_errors_may_pass(error: Exception) -> None:
    assert not unrecoverable_start_error(error)

    def start(jwriter: Any) -> Any:
        raise error

    result = _start(_driver(start))
    assert isinstance(result, FailedStart) and result.recoverable


def test_a_parse_error_caused_deeper_down_is_found() -> None:
    wrapped = Py4JJavaError(_JavaError(IO_ERROR, cause=_JavaError(JSON_PARSE)))
    assert unrecoverable_start_error(wrapped)


# -- the session's shuffle partitions around a start ------------------------------------------
@pytest.mark.parametrize("app_set", [None, "4"])
def test_a_start_leaves_the_session_s_shuffle_partitions_as_the_app_left_them(
        app_set: str | None) -> None:
    # Spark reads the setting when the query starts; an app that never set it must not find
    # it set afterwards (to the default), which would read as its own choice.
    seen: list[str | None] = []
    driver = _driver()
    conf = driver._spark.conf  # type: ignore[attr-defined]
    conf.values.clear()
    if app_set is not None:
        conf.values["spark.sql.shuffle.partitions"] = app_set
    driver._start = lambda jw: seen.append(conf.get("spark.sql.shuffle.partitions"))  # type: ignore[method-assign]
    driver._start_with_partitions(2)
    assert seen == ["2"]
    assert conf.values.get("spark.sql.shuffle.partitions") == app_set


# -- a cancel during a clean stop ------------------------------------------------------------
class _Status:
    def __init__(self, run: _JQuery) -> None:
        self.run = run

    def isTriggerActive(self) -> bool:  # noqa: N802
        return not self.run.stopped  # a micro-batch that runs until the query is stopped


class _Empty:
    def isEmpty(self) -> bool:  # noqa: N802
        return True


class _JQuery:
    def __init__(self) -> None:
        self.stopped = False

    def status(self) -> _Status:
        return _Status(self)

    def streamingQuery(self) -> Any:  # noqa: N802
        raise RuntimeError("no StreamExecution in a unit test")

    def stop(self) -> None:
        self.stopped = True

    def exception(self) -> _Empty:
        return _Empty()


class _Query:
    def __init__(self) -> None:
        self._jsq = _JQuery()

    @property
    def isActive(self) -> bool:  # noqa: N802
        return not self._jsq.stopped


class _SlowBoundary:
    """The shim's boundary wait: a batch that never ends within the wait asked for."""

    def __init__(self) -> None:
        self.waits: list[int] = []

    def holdNewBatches(self, execution: Any, timeout_ms: int) -> bool:  # noqa: N802
        self.waits.append(timeout_ms)
        time.sleep(timeout_ms / 1000)
        return False


def _stop_both(driver: SparkQueryDriver) -> tuple[float, list[StopResult], list[StopResult]]:
    """A clean stop, then, once it waits, a cancel; the seconds until both reported."""
    clean: list[StopResult] = []
    cancel: list[StopResult] = []
    both = threading.Barrier(3)

    def report(into: list[StopResult]) -> Any:
        def on_done(result: StopResult) -> None:
            into.append(result)
            both.wait(30)
        return on_done

    driver.stop(True, report(clean))
    time.sleep(0.3)  # the clean stop waits for the micro-batch
    t0 = time.monotonic()
    driver.stop(False, report(cancel))
    both.wait(30)
    return time.monotonic() - t0, clean, cancel


def test_a_cancel_interrupts_a_clean_stop_waiting_for_its_batch() -> None:
    driver = _driver(clean_stop_timeout=30.0, shim_jar="/no/such/shim.jar")
    driver.current = _Query()  # type: ignore[assignment]
    took, clean, cancel = _stop_both(driver)
    assert took < 5  # not the clean stop's 30 s
    assert driver.current is not None and not driver.current.isActive
    assert clean[0].error is None and cancel[0].error is None


def test_a_cancel_interrupts_the_shims_wait_for_a_batch_boundary(tmp_path: Any,
                                                                  monkeypatch: Any) -> None:
    jar = tmp_path / "shim.jar"
    jar.write_bytes(b"")
    driver = _driver(clean_stop_timeout=30.0, shim_jar=str(jar))
    boundary = _SlowBoundary()
    driver._boundary = boundary
    monkeypatch.setattr(_JQuery, "streamingQuery", lambda self: object())
    driver.current = _Query()  # type: ignore[assignment]
    took, _, _ = _stop_both(driver)
    assert took < 5
    assert max(boundary.waits) <= driver_module.HOLD_SLICE * 1000
