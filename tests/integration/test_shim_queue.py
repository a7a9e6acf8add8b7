"""The JVM shim's event queue stays bounded when Python stalls, and loses no query event.

The Python end of the shim's listener is made to block (as a driver whose Python side is
busy or paused would); meanwhile a streaming query runs micro-batches and the app runs
many small jobs. Stage and job events beyond the queue's capacity are dropped and counted;
the query's events all wait, and all arrive once Python goes on.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from spark_adaptive.core import events as ev
from spark_adaptive.spark.jvm import ensure_callback_server, shim_jar_path
from spark_adaptive.spark.listener import ShimListener
from spark_adaptive.testing.streaming import wait_until

pytestmark = [pytest.mark.internals, pytest.mark.timeout(300)]

CAPACITY = 50


def test_a_stalled_python_side_keeps_the_queue_bounded_and_every_query_event(
        spark_session: Any) -> None:
    sc = spark_session.sparkContext
    ensure_callback_server(sc)
    jar = shim_jar_path("")
    assert jar is not None, "the shim jar is built by the set-up"
    go_on = threading.Event()
    got: list[ev.Event] = []

    def stalled(event: ev.Event) -> None:
        go_on.wait(120)
        got.append(event)

    listener = ShimListener(sc, jar, stalled, queue_capacity=CAPACITY)
    query = None
    try:
        query = (spark_session.readStream.format("rate").option("rowsPerSecond", 20).load()
                 .writeStream.format("memory").queryName("stalled_python")
                 .trigger(processingTime="200 milliseconds").start())
        for _ in range(150):  # ~6 stage and job events each: far more than the capacity
            spark_session.range(0, 10, 1, 2).count()
        wait_until(what="a few micro-batches", check=lambda: len(query.recentProgress) >= 5)
        query.stop()
        sc._jsc.sc().listenerBus().waitUntilEmpty()
        stats = listener.stats()
        progress = len(query.recentProgress)
        assert progress < 100  # recentProgress holds them all (Spark keeps the last 100)
        assert stats["dropped"] > 0, stats
        # What waits: at most the capacity of detail, plus the query's own events (started,
        # its progress, terminated), plus the first batch that is stuck in Python.
        assert stats["queued"] <= CAPACITY + progress + 3, stats
    finally:
        go_on.set()
        if query is not None and query.isActive:
            query.stop()
    wait_until(what="Python to catch up", check=lambda: listener.stats()["queued"] == 0)
    listener.close()
    ours = {str(query.id)}
    delivered = [e for e in got if isinstance(e, ev.QueryProgress) and e.query_id in ours]
    assert len(delivered) == progress
    assert [e for e in got if isinstance(e, ev.QueryTerminated) and e.query_id in ours]
