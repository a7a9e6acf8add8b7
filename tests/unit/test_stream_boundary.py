"""The Spark side of the streaming scheduler, with hand-written stand-ins for py4j objects.

* The app's query handle raises the error that ended the query: Spark's own exception
  when its current run failed, the scheduler's error when a restart's start failed (the
  driver's current run is then the earlier one, which failed and was restarted).
* The actuator reports a release Spark refused (or that failed), so the scheduler counts
  the executor again; it returns none as released where it cannot send a release.
* What the app holds without spark-adaptive, declared once no managed query remains.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from scheduler_fakes import App, FakeDriver, ScalaOption, query_info

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.executors.demand import Baseline, DemandInputs
from spark_adaptive.core.executors.inventory import ExecutorInventory
from spark_adaptive.core.executors.reconciler import Reconciler
from spark_adaptive.core.ports import ExecutorRelease
from spark_adaptive.errors import QueryFailedError
from spark_adaptive.settings import Settings
from spark_adaptive.spark import runtime
from spark_adaptive.spark.actuator import SparkExecutorActuator
from spark_adaptive.spark.streaming import ManagedStreamingQuery


# -- the query handle ---------------------------------------------------------------------
class _JQuery:
    def __init__(self, error: str | None) -> None:
        self.error = error

    def exception(self) -> ScalaOption:
        return ScalaOption(self.error)


class SparkError(Exception):
    """Stands for PySpark's StreamingQueryException of a run."""


class _Run:
    """A finished Spark run whose own exception is ``error``."""

    def __init__(self, error: str | None) -> None:
        self._jsq = _JQuery(error)
        self.isActive = False

    def awaitTermination(self, timeout: float | None = None) -> None:  # noqa: N802
        raise SparkError(self._jsq.error)

    def exception(self) -> SparkError:
        return SparkError(self._jsq.error)


class _Driver:
    def __init__(self, run: _Run) -> None:
        self.current: _Run | None = run
        self.previous: _Run | None = None
        self.start_error: BaseException | None = None


def _handle(app: App, key: str, run: _Run) -> Any:
    """The app's handle of ``key`` with ``run`` as its driver's current run, told of the
    query's end as the manager tells it (from the scheduler's snapshot)."""
    handle = ManagedStreamingQuery(None, key, _Driver(run))
    snap = app.scheduler.query(key).snapshot()
    handle._on_finished(snap.status, snap.error, snap.error_origin)
    return handle


def _restarted_once() -> tuple[App, FakeDriver]:
    app = App(Settings.from_conf({"spark.adaptive.restart-strategy.type": "fixed-delay"}))
    app.add("1")
    driver = FakeDriver(query_info("q", partitions=1))
    app.register(driver)
    app.event(driver.terminated("X: the run failed"))  # restarted (fixed-delay: once more)
    app.advance(1)
    return app, driver


def test_a_query_whose_restart_failed_to_start_raises_that_failure() -> None:
    app, driver = _restarted_once()
    app.start(driver, ok=False, error="Y: checkpoint store unreachable")  # no more restarts
    snap = app.scheduler.query("q").snapshot()
    assert (snap.state, snap.status, snap.error_origin) == ("Finished", "FAILED", "start")
    handle = _handle(app, "q", _Run("X: the run failed"))  # the run before the start
    with pytest.raises(QueryFailedError, match="query q failed: Y: checkpoint store"):
        handle.awaitTermination()
    with pytest.raises(QueryFailedError, match="Y: checkpoint store"):
        handle.awaitTermination(5)
    error = handle.exception()
    assert isinstance(error, QueryFailedError) and "Y: checkpoint store" in str(error)


def test_a_query_whose_run_failed_raises_sparks_own_exception_of_that_run() -> None:
    app, driver = _restarted_once()
    app.start(driver)
    app.event(driver.terminated("Z: the new run failed"))  # no more restarts
    app.advance(1)
    snap = app.scheduler.query("q").snapshot()
    assert (snap.status, snap.error_origin) == ("FAILED", "query")
    handle = _handle(app, "q", _Run("Z: the new run failed"))
    with pytest.raises(SparkError, match="Z: the new run failed"):
        handle.awaitTermination()
    assert str(handle.exception()) == "Z: the new run failed"


# -- the actuator ---------------------------------------------------------------------------
class _PythonUtils:
    @staticmethod
    def toSeq(items: list[str]) -> list[str]:  # noqa: N802
        return list(items)

    @staticmethod
    def toScalaMap(items: dict[str, str]) -> dict[str, str]:  # noqa: N802
        return dict(items)


class _SparkContextJ:
    def __init__(self, kill: Callable[[list[str]], bool]) -> None:
        self._kill = kill
        self.totals: list[int] = []

    def schedulerBackend(self) -> None:  # noqa: N802
        raise RuntimeError("no backend in a unit test")

    def killExecutors(self, ids: list[str]) -> bool:  # noqa: N802
        return self._kill(ids)

    def requestTotalExecutors(self, total: int, *_: Any) -> bool:  # noqa: N802
        self.totals.append(total)
        return True


class _JavaSparkContext:
    def __init__(self, sc: _SparkContextJ) -> None:
        self._sc = sc

    def sc(self) -> _SparkContextJ:
        return self._sc


class _Jvm:
    PythonUtils = _PythonUtils


class _FakeSparkContext:
    def __init__(self, kill: Callable[[list[str]], bool]) -> None:
        self.jsc = _SparkContextJ(kill)
        self._jsc = _JavaSparkContext(self.jsc)
        self._jvm = _Jvm()
        self._conf = {"spark.task.cpus": "1"}
        self.master = "spark://master:7077"


def _actuator(kill: Callable[[list[str]], bool], supported: bool = True
              ) -> tuple[SparkExecutorActuator, list[tuple[list[str], str]]]:
    actuator = SparkExecutorActuator(_FakeSparkContext(kill), synchronous=True)  # type: ignore[arg-type]
    actuator.supported = supported
    refused: list[tuple[list[str], str]] = []
    actuator.on_release_refused(lambda ids, why: refused.append((ids, why)))
    return actuator, refused


def _surplus(*ids: str) -> list[ExecutorRelease]:
    return [ExecutorRelease(i, "more executors alive than declared") for i in ids]


def test_a_release_the_cluster_manager_refuses_is_reported_back() -> None:
    actuator, refused = _actuator(lambda ids: False)
    assert actuator.request_total_executors(2, _surplus("3")) == ["3"]  # sent, as released
    assert refused == [(["3"], "the cluster manager refused")]
    assert actuator.request_total_executors(2, _surplus("3")) == ["3"]  # tried again


def test_a_release_that_raises_is_reported_back() -> None:
    def kill(ids: list[str]) -> bool:
        raise RuntimeError("py4j: connection reset")

    actuator, refused = _actuator(kill)
    assert actuator.request_total_executors(2, _surplus("3")) == ["3"]
    assert refused == [(["3"], "killExecutors failed: py4j: connection reset")]


def test_an_accepted_release_is_not_reported() -> None:
    actuator, refused = _actuator(lambda ids: True)
    assert actuator.request_total_executors(2, _surplus("3")) == ["3"]
    assert (refused, actuator.killed) == ([], ["3"])


def _reconciling(kill: Callable[[list[str]], bool], total: list[int]
                 ) -> tuple[VirtualTime, ExecutorInventory, Reconciler]:
    """Three executors of one slot in the one inventory, a reconciler declaring
    ``total[0]`` (the baseline of an app with no managed query) through the real actuator,
    and the actuator's refusals handed back to it, as the runtime wires them."""
    vt = VirtualTime()
    actuator = SparkExecutorActuator(_FakeSparkContext(kill), synchronous=True,  # type: ignore[arg-type]
                                     shim_jar="/no/shim.jar")
    actuator.supported = True
    inventory = ExecutorInventory(vt, loss_grace=0, failure_detection_timeout=20,
                                  on_hung=lambda e, silent: reconciler.hung(e, silent))
    reconciler = Reconciler(actuator, inventory, vt, lambda: DemandInputs(
        inventory.pool(), baseline=Baseline(total[0], "the test's total")))
    actuator.on_release_refused(reconciler.release_refused)
    for i in (1, 2, 3):
        inventory.executor_added(str(i), f"host-{i}", 1, float(i))
    return vt, inventory, reconciler


def test_a_hung_executor_whose_kill_is_refused_is_not_kept_for_a_total() -> None:
    # The inventory stopped counting the hung executor: were it counted as staying, a
    # declared total would release a healthy one (the newest) in its place. Its kill is
    # tried again at each declaration, until Spark reports it removed.
    kills: list[list[str]] = []

    def refuse(ids: list[str]) -> bool:
        kills.append(list(ids))
        return False

    total = [3]
    vt, inventory, reconciler = _reconciling(refuse, total)
    reconciler.reconcile()
    for e in "23":
        vt.call_later(10, lambda e=e: inventory.heartbeat(e))  # type: ignore[misc]
    vt.advance(21)  # "1" sent no heartbeat: found hung, its kill refused
    assert kills == [["1"]]
    total[0] = 2
    reconciler.reconcile()  # the two healthy ones stay; the hung one is killed again
    assert kills == [["1"], ["1"]]
    inventory.executor_removed("1", "Executor heartbeat timed out")
    total[0] = 3
    reconciler.reconcile()
    total[0] = 2
    reconciler.reconcile()
    assert kills == [["1"], ["1"]]
    total[0] = 1
    reconciler.reconcile()
    assert kills == [["1"], ["1"], ["3"]]


def test_an_executor_found_hung_is_the_only_one_released_for_it() -> None:
    # Four executors and a stateful query of 2 partitions before its first boundary (the
    # scheduler releases nothing yet); the oldest hangs. The total declared as its slots
    # go must not count it among the executors that stay: a healthy one would go instead.
    kills: list[list[str]] = []

    def kill(ids: list[str]) -> bool:
        kills.append(list(ids))
        return True

    real = SparkExecutorActuator(_FakeSparkContext(kill), synchronous=True,  # type: ignore[arg-type]
                                 shim_jar="/no/shim.jar")
    real.supported = True
    app = App(actuator=real)
    for e in "1234":
        app.add(e)
        app.vt.advance(1)
    app.register(FakeDriver(query_info("q", partitions=2, state_partitions=2)))
    app.advance(5)
    app.freeze("1")
    app.advance(60)
    assert kills == [["1"]]


def test_the_declared_total_goes_again_after_every_release() -> None:
    # Spark's killExecutors lowers its executor target by the executors it kills. A hung
    # executor's kill queues a request; a lower total declared meanwhile (the slots of
    # the hung one gone) releases one more: that request, sent before the second kill,
    # carries the new total already, so the total is sent again after that kill.
    calls: list[tuple[str, Any]] = []
    gate = threading.Event()

    def kill(ids: list[str]) -> bool:
        calls.append(("kill", list(ids)))
        gate.wait(5)
        return True

    sc = _FakeSparkContext(kill)
    sc.jsc.requestTotalExecutors = (  # type: ignore[method-assign]
        lambda total, *_: calls.append(("request", total)) is None)
    actuator = SparkExecutorActuator(sc, shim_jar="/no/shim.jar")  # type: ignore[arg-type]
    actuator.supported = True
    actuator.request_total_executors(4)
    assert actuator.drain()
    actuator.release_hung_executor("1", "no heartbeat for 60s")
    assert actuator.request_total_executors(2, _surplus("4")) == ["4"]
    gate.set()
    assert actuator.drain()
    actuator.close()
    kills = [i for i, (what, _) in enumerate(calls) if what == "kill"]
    assert [arg for what, arg in calls if what == "kill"] == [["1"], ["4"]]
    assert calls[kills[-1] + 1:] == [("request", 2)], calls


def test_a_release_sent_at_once_is_followed_by_its_own_total() -> None:
    # The kill may be done before the declaration returns (here at once): the total sent
    # after it is the one being declared, not the one before.
    calls: list[tuple[str, Any]] = []
    sc = _FakeSparkContext(lambda ids: calls.append(("kill", list(ids))) is None)
    sc.jsc.requestTotalExecutors = (  # type: ignore[method-assign]
        lambda total, *_: calls.append(("request", total)) is None)
    actuator = SparkExecutorActuator(sc, synchronous=True)  # type: ignore[arg-type]
    actuator.supported = True
    actuator.request_total_executors(4)
    assert actuator.request_total_executors(2, _surplus("3", "4")) == ["3", "4"]
    assert calls == [("request", 4), ("kill", ["3", "4"]), ("request", 2)]


def test_a_master_without_executor_control_releases_none() -> None:
    actuator, refused = _actuator(lambda ids: True, supported=False)
    assert actuator.request_total_executors(1, _surplus("2", "3")) == []  # none can go
    assert refused == []


# -- what the app holds without spark-adaptive ---------------------------------------------
@pytest.mark.parametrize(("master", "instances", "expected"), [
    ("yarn", "6", 6),
    ("yarn", None, 2),  # Spark's default on YARN and Kubernetes
    ("k8s://https://api:6443", "3", 3),
    ("k8s://https://api:6443", "many", 2),
    ("yarn", "0", 0),
    ("spark://master:7077", "4", None),  # standalone: every free core, instances unread
    ("spark://master:7077", None, None),
    ("local[4]", None, None),
])
def test_initial_executors(master: str, instances: str | None, expected: int | None) -> None:
    assert runtime.initial_executors(master, instances) == expected
