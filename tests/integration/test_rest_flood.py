"""The REST API of a real driver keeps answering its operators under a connection flood.

What an operator saw: a client held 200 connections open without sending a
request (slowloris), the 64 connections the API allows filled up, and the
operator's own requests got 503 for as long as they were held. Here a
local-mode driver (pytest-spark's ``local[2]`` session, no cluster) with
spark-adaptive enabled runs a streaming query (``rate`` into ``noop``,
named ``flooded``); 200 TCP connections are opened and held idle for 20 s
while a client sends ``GET /queries`` every 0.5 s, each on a fresh
connection. Every one must be answered 200 within 1 s and list the query.

The flood's connections are watched: the server closes them all, the oldest
at once to make room for newer ones, the others once the head timeout
(:data:`~spark_adaptive.rest.server.HEAD_TIMEOUT`) has passed. The driver's
threads stay bounded (one per open connection, at most ``MAX_CONNECTIONS``),
counted by the watcher from before the first connection is opened (during the
burst, when connections closed to make room and new ones overlap) to the end,
and by the client between its requests; after the flood the API answers as
before. The latencies are printed (``pytest -s``).
"""

from __future__ import annotations

import http.client
import json
import selectors
import socket
import statistics
import threading
import time
from typing import Any

import pytest

import spark_adaptive
from spark_adaptive.rest.server import HEAD_TIMEOUT, MAX_CONNECTIONS
from spark_adaptive.testing.streaming import wait_until

pytestmark = pytest.mark.timeout(300)

IDLE = 200
HOLD = 20.0
EVERY = 0.5
WITHIN = 1.0


def _get(port: int, path: str, method: str = "GET") -> tuple[int, Any, float]:
    """One request on a fresh connection: status, decoded body, seconds it took (connect
    included)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        raw = resp.read()
        took = time.monotonic() - started
        body = json.loads(raw) if raw and resp.getheader("Content-Type") == (
            "application/json") else raw
        return resp.status, body, took
    finally:
        conn.close()


class _Flood:
    """``count`` connections that never send a byte; records when the server closes each
    (seconds since the flood began), and the most threads the process (the driver) had
    from before the first was opened."""

    def __init__(self, port: int, count: int) -> None:
        self.count = count
        self.socks: list[socket.socket] = []
        self.closed_at: dict[int, float] = {}
        self.answered: list[bytes] = []  # what the server sent any of them (nothing)
        self.most_threads = threading.active_count()  # this watcher's thread aside
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.started = time.monotonic()
        self._thread.start()
        for _ in range(count):  # the burst: the watcher counts threads meanwhile
            self.socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        self.opened = time.monotonic() - self.started

    def _watch(self) -> None:
        watched = 0
        with selectors.DefaultSelector() as sel:
            while not self._stop.is_set() and len(self.closed_at) < self.count:
                self.most_threads = max(self.most_threads, threading.active_count() - 1)
                while watched < len(self.socks):  # opened since: watch them too
                    s = self.socks[watched]
                    s.setblocking(False)
                    sel.register(s, selectors.EVENT_READ, watched)
                    watched += 1
                for key, _ in sel.select(0.005 if watched < self.count else 0.05):
                    try:
                        data = self.socks[key.data].recv(1)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        self.answered.append(data)
                    self.closed_at[key.data] = time.monotonic() - self.started
                    sel.unregister(key.fileobj)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self.socks:
            s.close()


def test_operators_are_answered_while_idle_connections_flood_the_api(
        spark_session: Any, tmp_path: Any) -> None:
    rt = spark_adaptive.enable(spark_session, **{"rest.port": "0"})
    query = None
    try:
        assert rt.rest is not None
        port = rt.rest.port or 0
        query = (spark_session.readStream.format("rate").option("rowsPerSecond", 5).load()
                 .writeStream.format("noop").queryName("flooded")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="1 second").start())
        wait_until(what="the query to be listed, executing", timeout=120, check=lambda: [
            q for q in _get(port, "/queries")[1]
            if q["name"] == "flooded" and q["state"] == "Executing"])
        threads_before = threading.active_count()

        flood = _Flood(port, IDLE)
        latencies: list[float] = []
        statuses: list[int] = []
        most_threads = threads_before
        try:
            while time.monotonic() - flood.started < HOLD:
                asked = time.monotonic()
                status, body, took = _get(port, "/queries")
                statuses.append(status)
                latencies.append(took)
                assert status == 200, (status, body)
                assert [q["name"] for q in body] == ["flooded"], body
                most_threads = max(most_threads, threading.active_count())
                time.sleep(max(0.0, EVERY - (time.monotonic() - asked)))
            closed = dict(flood.closed_at)
        finally:
            flood.close()
        most_threads = max(most_threads, flood.most_threads)

        made_room = sum(1 for t in closed.values() if t < flood.opened + 1.0)
        timed_out = sum(1 for t in closed.values() if t >= HEAD_TIMEOUT)
        print(f"\nREST flood: {IDLE} idle connections held {HOLD:g} s (opened in "
              f"{flood.opened:.2f} s); {len(statuses)} GET /queries on fresh connections, "
              f"every {EVERY:g} s: {statuses.count(200)} answered 200; latency "
              f"p50 {statistics.median(latencies) * 1000:.1f} ms, "
              f"max {max(latencies) * 1000:.1f} ms. The server closed {len(closed)} of the "
              f"idle connections: {made_room} to make room, {timed_out} after the "
              f"{HEAD_TIMEOUT:g} s head timeout. Driver threads: {threads_before} before, "
              f"{most_threads} at most.")
        assert len(statuses) >= HOLD / EVERY - 2
        assert statuses == [200] * len(statuses)
        assert max(latencies) < WITHIN, latencies
        assert len(closed) == IDLE and flood.answered == []  # closed quietly, every one
        assert made_room >= IDLE - MAX_CONNECTIONS and timed_out >= 1
        # One thread per open connection: a connection closed to make room ends its thread
        # before the new one's starts (the few extra: the client's own, e.g. http.client).
        assert most_threads <= threads_before + MAX_CONNECTIONS + 4

        # After the flood, as before: the routes answer, HEAD too, nothing left open.
        wait_until(what="the flood's connections to be gone", timeout=10,
                   check=lambda: rt.rest is not None and rt.rest.open_connections() == (0, 0))
        status, body, took = _get(port, "/queries")
        assert status == 200 and body[0]["name"] == "flooded" and took < WITHIN
        key = body[0]["key"]
        assert _get(port, f"/queries/{key}")[0] == 200
        assert _get(port, f"/queries/{key}/resource-requirements")[0] == 200
        assert _get(port, "/metrics")[0] == 200
        assert _get(port, "/queries", "HEAD")[:2] == (200, b"")
        assert query.isActive
    finally:
        if query is not None:
            query.stop()
        rt.shutdown()
