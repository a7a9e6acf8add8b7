"""Event intake without a JVM: shim decoding, the bus, the scheduler thread."""

from __future__ import annotations

import json
import threading
import time

import pytest

from spark_adaptive.core import events as ev
from spark_adaptive.core.bus import EventBus
from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.loop import EventLoop
from spark_adaptive.spark.listener import Py4jSparkListener, _ShimSink, event_from_shim


def test_shim_lines_become_frozen_events() -> None:
    stage = event_from_shim(json.loads(
        '{"type":"StageCompleted","time":1800000000123,"stage_id":3,"attempt":0,"num_tasks":4,'
        '"name":"groupBy at x.py:1","input_bytes":0,"shuffle_read_bytes":10,'
        '"shuffle_write_bytes":2048,"duration":1.5,"max_task_duration":0.9,'
        '"median_task_duration":0.4}'))
    assert stage == ev.StageCompleted(1800000000.123, 3, 0, 4, 0, 10, 2048, 1.5, None,
                                      "groupBy at x.py:1", 0.9, 0.4)
    assert stage.succeeded and stage.plan is None
    planned = event_from_shim({"type": "StageCompleted", "time": 1000, "stage_id": 4,
                               "attempt": 0, "num_tasks": 2, "input_bytes": 0,
                               "shuffle_read_bytes": 10, "shuffle_write_bytes": 0,
                               "duration": 1.0, "plan": "join#7"})
    assert isinstance(planned, ev.StageCompleted) and planned.plan == "join#7"
    job = event_from_shim({"type": "JobStarted", "time": 1000, "job_id": 1, "stage_ids": [1, 2],
                           "job_group": None})
    assert job == ev.JobStarted(1.0, 1, (1, 2), None)
    with pytest.raises(AttributeError):
        job.job_id = 2  # type: ignore[misc]


def test_plan_ids_come_from_rdd_names() -> None:
    assert ev.plan_of_rdd_name(ev.PLAN_RDD_PREFIX + "join#7") == "join#7"
    assert ev.plan_of_rdd_name(ev.PLAN_RDD_PREFIX + "textFile#1 /data/a b.csv") == "textFile#1"
    for other in (None, "", "PythonRDD", "/data/facts", ev.PLAN_RDD_PREFIX, "spark-adaptive"):
        assert ev.plan_of_rdd_name(other) is None, other


def test_shim_sink_skips_a_bad_line_and_keeps_the_rest() -> None:
    got: list[ev.Event] = []
    sink = _ShimSink(got.append)
    sink.accept('{"type":"ExecutorAdded","time":1000,"executor_id":"1","host":"h","cores":2}\n'
                '{"type":"Nonsense"}\n'
                '{"type":"ExecutorRemoved","time":2000,"executor_id":"1","reason":"killed"}')
    assert got == [ev.ExecutorAdded(1.0, "1", "h", 2), ev.ExecutorRemoved(2.0, "1", "killed")]
    assert sink.errors == 1


def test_bus_isolates_a_failing_subscriber() -> None:
    timers = VirtualTime()
    bus = EventBus(lambda action, what: timers.call_later(0, action))
    seen: list[str] = []

    def broken(e: ev.Event) -> None:
        raise RuntimeError("handler bug")

    bus.subscribe(broken, "broken")
    bus.subscribe(lambda e: seen.append(type(e).__name__), "ok")
    bus.post(ev.ExecutorHeartbeat(0.0, "1"))
    assert seen == []  # posting only queues
    timers.run_pending()
    assert seen == ["ExecutorHeartbeat"]
    assert bus.handler_failures == 1
    assert bus.counts["ExecutorHeartbeat"] == 1


def test_unsubscribe_stops_delivery() -> None:
    bus = EventBus(lambda action, what: action())
    seen: list[ev.Event] = []
    unsubscribe = bus.subscribe(seen.append)
    bus.post(ev.ExecutorHeartbeat(0.0, "1"))
    unsubscribe()
    bus.post(ev.ExecutorHeartbeat(0.0, "2"))
    assert [e.executor_id for e in seen] == ["1"]  # type: ignore[attr-defined]


def test_event_loop_runs_work_and_timers_on_one_thread_in_order() -> None:
    loop = EventLoop("test-loop")
    loop.start()
    try:
        threads: set[str] = set()
        order: list[str] = []
        done = threading.Event()

        def record(name: str) -> None:
            threads.add(threading.current_thread().name)
            order.append(name)
            if name == "timer":
                done.set()

        loop.call_later(0.05, lambda: record("timer"))
        loop.submit(lambda: record("first"))
        loop.submit(lambda: (_ for _ in ()).throw(RuntimeError("boom")))  # a failing handler
        loop.submit(lambda: record("second"))
        assert done.wait(5)
        assert order == ["first", "second", "timer"]
        assert threads == {"test-loop"}
        assert loop.failed == 1
        assert loop.call_sync(lambda: threading.current_thread().name) == "test-loop"
    finally:
        loop.stop()


def test_a_slow_handler_never_blocks_the_poster() -> None:
    loop = EventLoop("slow")
    loop.start()
    try:
        release = threading.Event()
        loop.submit(lambda: release.wait(5) and None)
        t0 = time.monotonic()
        for _ in range(1000):
            loop.submit(lambda: None)
        assert time.monotonic() - t0 < 1.0  # posting from Spark's thread returns at once
        release.set()
    finally:
        loop.stop()


def test_cancelled_timer_does_not_run() -> None:
    t = VirtualTime()
    ran: list[int] = []
    h = t.call_later(5, lambda: ran.append(1))
    t.call_later(6, lambda: ran.append(2))
    h.cancel()
    t.advance(10)
    assert ran == [2]
    assert t.now() == 10


def test_the_application_end_from_the_shim_calls_back_instead_of_posting() -> None:
    got: list[ev.Event] = []
    ended: list[str] = []
    sink = _ShimSink(got.append, lambda: ended.append("ended"))
    sink.accept('{"type":"JobEnded","time":1000,"job_id":1,"succeeded":true}\n'
                '{"type":"ApplicationEnded","time":2000}')
    assert got == [ev.JobEnded(1.0, 1, True)]
    assert ended == ["ended"] and sink.errors == 0
    quiet = _ShimSink(got.append)  # nobody to tell: ignored, not an error
    quiet.accept('{"type":"ApplicationEnded","time":2000}')
    assert quiet.errors == 0 and len(got) == 1


def test_the_application_end_through_py4j_calls_back() -> None:
    ended: list[str] = []
    listener = Py4jSparkListener(lambda e: None, lambda: ended.append("ended"))
    listener.onApplicationEnd(object())
    assert ended == ["ended"] and listener.errors == 0 and listener.calls == 0
    Py4jSparkListener(lambda e: None).onApplicationEnd(object())  # none to tell: fine


def test_a_timer_years_ahead_leaves_the_loop_running() -> None:
    # A duration key may read "107000d": the queue's wait takes no timeout that far ahead.
    loop = EventLoop("far")
    loop.start()
    try:
        loop.call_later(107000 * 86400.0, lambda: None)
        done = threading.Event()
        loop.submit(done.set)
        assert done.wait(5)
        assert loop.call_sync(lambda: "alive", timeout=5) == "alive"
    finally:
        loop.stop()
