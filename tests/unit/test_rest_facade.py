"""The REST API over the real scheduler (virtual time, fake driver): a PUT takes effect."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from rest_fakes import QUERY_ID, bounds, call, serving
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.autoscaler import AutoscalerConfig, QueryAutoscaler, QueryView
from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.core.streaming.persistence import MemoryRequirementsStore, PersistedRequirements
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.scheduler import REACTIVE_REQUIREMENTS
from spark_adaptive.errors import ConflictError
from spark_adaptive.rest.facade import POLICY_TIMES, InFlight, RuntimeFacade
from spark_adaptive.settings import Settings

REQ = "/queries/orders/resource-requirements"


class Running:
    """An app with one Executing query ``orders`` at parallelism 2 on 2 executors."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.app = App(settings)
        self.app.add("1")
        self.app.add("2")
        self.driver = FakeDriver(query_info("query-1", partitions=2, name="orders"))
        self.store = MemoryRequirementsStore()
        self.persisted = PersistedRequirements(self.store, self.app.scheduler.settings)
        self.persisted.restore(self.driver.info)
        self.app.register(self.driver)
        self.app.event(self.driver.progress())
        # The loop is never started: call_sync runs on the caller's thread, and the
        # test makes one request at a time, so the scheduler is never used concurrently.
        self.facade = RuntimeFacade(EventLoop(), self.app.scheduler, self.persisted)


@pytest.fixture
def running() -> Running:
    return Running()


def test_reads_go_to_the_scheduler(running: Running) -> None:
    with serving(running.facade) as server:
        (q,) = call(server.url, "GET", "/queries").body
        assert (q["id"], q["name"], q["state"], q["parallelism"]) == (
            "qid-1", "orders", "Executing", 2)
        assert call(server.url, "GET", "/queries/qid-1").body["key"] == "query-1"
        assert call(server.url, "GET", REQ).body == bounds(1, 2)
        history = call(server.url, "GET", "/queries/orders/rescales").body
        assert [r["trigger"] for r in history["rescales"]] == ["INITIAL_SCHEDULE"]
        assert history["id"] == "qid-1" and history["counters"]["restarts"] == 0


def test_an_accepted_put_is_persisted_and_rescales_the_query(running: Running) -> None:
    with serving(running.facade) as server:
        reply = call(server.url, "PUT", REQ, bounds(1, 1))
        assert reply.status == 200 and reply.headers["spark-adaptive-persisted"] == "true"
        assert running.store.load("/cp/q1") == ResourceRequirements(1, 1)
        assert call(server.url, "GET", REQ).body == bounds(1, 1)
        snap = call(server.url, "GET", "/queries/orders").body
        assert snap["lastDecision"]["action"] == "update requirements"
        assert snap["lastDecision"]["reason"] == "[1, 2] -> [1, 1]"
        # Within the timing rules: after the cooldown, a restart rescale down to 1.
        running.app.advance(30)
        assert running.driver.calls[-1] == ("stop", True)
        running.app.stop(running.driver)
        assert running.driver.calls[-1] == ("start", 1)
        running.app.start(running.driver)
        last = call(server.url, "GET", "/queries/orders/rescales").body["rescales"][-1]
        assert (last["trigger"], last["fromParallelism"], last["toParallelism"]) == (
            "REQUIREMENTS_CHANGED", 2, 1)


def test_refusals_change_nothing(running: Running) -> None:
    with serving(running.facade) as server:
        assert call(server.url, "PUT", REQ, bounds(2, 1)).status == 400
        assert call(server.url, "PUT", REQ, bounds(1, 99999)).status == 400
        assert call(server.url, "PUT", "/queries/nope/resource-requirements",
                    bounds(1, 1)).status == 404
        assert call(server.url, "GET", REQ).body == bounds(1, 2)
        last = call(server.url, "GET", "/queries/orders").body["lastDecision"]
        assert last["action"] != "update requirements"
    assert running.store.files == {}


def test_a_finished_query_is_409(running: Running) -> None:
    running.app.scheduler.cancel("orders")
    running.app.stop(running.driver)
    assert running.app.state("orders") == "Finished"
    with serving(running.facade) as server:
        reply = call(server.url, "PUT", REQ, bounds(1, 1))
        assert reply.status == 409 and "has finished" in reply.body["errors"][0]
    assert running.store.files == {}


def test_reactive_mode_is_refused_by_the_scheduler() -> None:
    r = Running(Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive"}))
    with serving(r.facade) as server:
        reply = call(server.url, "PUT", REQ, bounds(1, 1))
        assert (reply.status, reply.body) == (400, {"errors": [REACTIVE_REQUIREMENTS]})
    assert r.store.files == {}


def test_in_flight_is_per_query_and_released_on_error() -> None:
    flight = InFlight()
    with flight.claim("a", "orders"):
        assert "a" in flight
        with flight.claim("b", "other"):
            pass
        with pytest.raises(ConflictError, match=r"query \[orders\]"):
            with flight.claim("a", "orders"):
                pass
    with pytest.raises(RuntimeError):
        with flight.claim("a", "orders"):
            raise RuntimeError("boom")
    assert "a" not in flight


def test_a_scheduler_that_does_not_answer_is_503() -> None:
    class Stuck:
        def __getattr__(self, name: str) -> Any:
            def fail(*_args: Any) -> Any:
                raise TimeoutError("spark-adaptive-scheduler did not answer within 30.0s")
            return fail

    with serving(Stuck()) as server:
        reply = call(server.url, "GET", "/queries")
        assert reply.status == 503 and reply.body["errors"][0].endswith("Please retry.")


# -- a call the scheduler thread does not take in time ----------------------------------
class BusyAfterSave(MemoryRequirementsStore):
    """Once the bounds are written, the scheduler thread is kept busy until :attr:`gate` is
    set: the apply that follows the write waits in the queue past its timeout."""

    def __init__(self, loop: EventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.gate = threading.Event()

    def save(self, checkpoint: str, requirements: ResourceRequirements) -> None:
        super().save(checkpoint, requirements)
        self.loop.submit(lambda: self.gate.wait(10), "a slow handler")


def test_a_put_the_scheduler_does_not_take_in_time_is_503_and_never_applied() -> None:
    running = Running()
    loop = EventLoop("test-loop")
    store = BusyAfterSave(loop)
    persisted = PersistedRequirements(store, running.app.scheduler.settings)
    persisted.restore(running.driver.info)
    facade = RuntimeFacade(loop, running.app.scheduler, persisted, timeout=0.3)
    loop.start()
    try:
        with serving(facade) as server:
            reply = call(server.url, "PUT", REQ, bounds(1, 1))
        assert reply.status == 503 and reply.body["errors"][0].endswith("Please retry.")
        assert "withdrawn" in reply.body["errors"][0]
        store.gate.set()
        loop.call_sync(lambda: None, 5)  # behind the withdrawn apply in the queue
        # 503 means "nothing changed": neither the running bounds nor the file.
        assert facade.requirements("query-1") == ResourceRequirements(1, 2)
        assert store.load("/cp/q1") is None
    finally:
        store.gate.set()
        loop.stop()


def test_a_call_the_loop_started_in_time_is_waited_for_and_answered() -> None:
    loop = EventLoop("test-loop")
    loop.start()
    try:
        started = threading.Event()

        def slow() -> str:
            started.set()
            time.sleep(0.4)
            return "done"

        assert loop.call_sync(slow, 0.1) == "done"  # started within 0.1 s, ran for 0.4 s
        assert started.is_set()

        def fails() -> None:
            time.sleep(0.3)
            raise ValueError("its own error")

        with pytest.raises(ValueError, match="its own error"):
            loop.call_sync(fails, 0.1)
    finally:
        loop.stop()


def test_a_withdrawn_call_never_runs() -> None:
    loop = EventLoop("test-loop")
    loop.start()
    gate = threading.Event()
    ran: list[int] = []
    try:
        loop.submit(lambda: gate.wait(10), "a slow handler")
        with pytest.raises(TimeoutError, match="withdrawn and will not run"):
            loop.call_sync(lambda: ran.append(1), 0.1)
        gate.set()
        loop.call_sync(lambda: None, 5)
        assert ran == []
    finally:
        gate.set()
        loop.stop()


# -- times in GET /queries/{id}/autoscaler ------------------------------------------------
class FixedAutoscaling:
    """What ``Autoscaling.status`` answers, built by the test on the loop's clock."""

    def __init__(self, status: AutoscalerStatus) -> None:
        self._status = status

    def status(self, q: Any) -> AutoscalerStatus:
        return self._status


def test_the_autoscaler_route_answers_epoch_seconds_like_the_rest_of_the_api(
        running: Running) -> None:
    loop = EventLoop()  # never started: calls run in place; its clock is time.monotonic()
    now = loop.now()
    policy = QueryAutoscaler(AutoscalerConfig(enabled=True), query="orders", started_at=now)
    decision = policy.evaluate(QueryView(now=now, slots=2, partitions=4))
    assert set(POLICY_TIMES) <= set(policy.snapshot())  # the names the facade moves
    state = {**policy.snapshot(), "pendingScaleDownSince": now - 10.0, "blockedUntil": now + 60.0}
    status = AutoscalerStatus(QUERY_ID, True, True, 180.0, 10.0, 4.5, False, decision, state)
    facade = RuntimeFacade(loop, running.app.scheduler, running.persisted,
                           autoscaling=FixedAutoscaling(status))
    with serving(facade) as server:
        body = call(server.url, "GET", "/queries/orders/autoscaler").body
    wall = time.time()
    stabilization = AutoscalerConfig().stabilization_interval
    assert body["lastDecision"]["time"] == pytest.approx(wall, abs=2)
    assert body["policy"]["stabilizedAt"] == pytest.approx(wall + stabilization, abs=2)
    assert body["policy"]["pendingScaleDownSince"] == pytest.approx(wall - 10, abs=2)
    assert body["policy"]["blockedUntil"] == pytest.approx(wall + 60, abs=2)
    assert body["nextEvaluation"] == 4.5  # seconds from now, not an instant
