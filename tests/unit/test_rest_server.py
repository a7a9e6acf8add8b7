"""The HTTP server: bearer token, port selection like the Spark UI, start and stop, and the
reaper that closes answered connections."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from rest_fakes import FakeScheduler, bounds, call, serving

from spark_adaptive.rest.api import RestApi
from spark_adaptive.rest.reaper import Reaper
from spark_adaptive.rest.server import RestServer, serve
from spark_adaptive.rest.settings import RestSettings

TOKEN = "s3cret-token"
REQ = "/queries/orders/resource-requirements"


# -- bearer token -----------------------------------------------------------------------
@pytest.mark.parametrize("header", [
    None, "Bearer wrong", f"Basic {TOKEN}", f"bearer{TOKEN}", "Bearer ", f"Bearer {TOKEN}x"])
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/queries"), ("GET", "/openapi.json"), ("GET", "/no/such/path"), ("PUT", REQ)])
def test_without_the_right_token_every_request_is_401(header: str | None, method: str,
                                                      path: str) -> None:
    sched = FakeScheduler()
    with serving(sched, token=TOKEN) as server:
        reply = call(server.url, method, path, bounds(1, 2) if method == "PUT" else None,
                     headers={"Authorization": header} if header else {})
        assert reply.status == 401
        assert reply.headers["www-authenticate"] == 'Bearer realm="spark-adaptive"'
        assert "bearer token" in reply.body["errors"][0]
    assert sched.queries_by_key["query-1"].applied == []
    assert sched.store.files == {}


def test_with_the_token_requests_go_through() -> None:
    sched = FakeScheduler()
    with serving(sched, token=TOKEN) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert call(server.url, "GET", "/queries", headers=auth).status == 200
        assert call(server.url, "PUT", REQ, bounds(1, 2), headers=auth).status == 200
        lower = {"Authorization": f"bearer {TOKEN}"}  # the scheme is case-insensitive
        assert call(server.url, "GET", REQ, headers=lower).body == bounds(1, 2)
        doc = call(server.url, "GET", "/openapi.json", headers=auth).body
        assert doc["security"] == [{"bearerAuth": []}]
        assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


# -- ports ------------------------------------------------------------------------------
@contextmanager
def occupied(count: int) -> Iterator[int]:
    """``count`` consecutive listening ports on 127.0.0.1, the port after them free; yields
    the first."""
    for _ in range(50):
        first = _free_port()
        socks: list[socket.socket] = []
        try:
            for p in range(first, first + count + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
                s.listen()
        except OSError:
            for s in socks:
                s.close()
            continue
        socks.pop().close()  # the next one stays free
        try:
            yield first
        finally:
            for s in socks:
                s.close()
        return
    raise AssertionError("no run of free ports found")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(port: int, tries: int = 16) -> RestServer:
    return RestServer(RestApi(FakeScheduler()), port=port, port_tries=tries, poll_interval=0.01)


@pytest.mark.parametrize(("taken", "message"), [
    (1, "(port {first} was taken)"), (3, "(ports {first}-{last} were taken)")])
def test_a_taken_port_moves_to_the_next_free_one(taken: int, message: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with occupied(taken) as first:
        server = _server(first)
        with caplog.at_level(logging.INFO, "spark_adaptive.rest.server"):
            url = server.start()
        try:
            assert server.port == first + taken and url == f"http://127.0.0.1:{first + taken}"
            assert server.ready.is_set()
            assert call(url, "GET", "/queries").status == 200
            started = [r.getMessage() for r in caplog.records if "REST API at" in r.getMessage()]
            shown = message.format(first=first, last=first + taken - 1)
            assert started == [f"spark-adaptive REST API at {url} {shown}"]
        finally:
            server.stop()
            server.stop()  # idempotent
        assert not server.ready.is_set()


def test_port_zero_takes_any_free_port() -> None:
    server = _server(0)
    server.start()
    try:
        assert server.port and server.port > 0
    finally:
        server.stop()


def test_all_ports_taken_raises_and_serve_logs_instead(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with occupied(3) as first:
        with pytest.raises(OSError, match=f"ports {first}-{first + 2} on 127.0.0.1 are all "
                                          "in use"):
            _server(first, tries=3).start()
        # serve() tries PORT_TRIES ports (16); three are enough to show it gives up quietly.
        monkeypatch.setattr("spark_adaptive.rest.server.PORT_TRIES", 3)
        with caplog.at_level(logging.ERROR, "spark_adaptive.rest.server"):
            assert serve(FakeScheduler(), RestSettings(port=first)) is None
        assert f"REST API not started: cannot bind 127.0.0.1:{first}" in caplog.text


def test_serve_follows_the_settings() -> None:
    assert serve(FakeScheduler(), RestSettings(enabled=False)) is None
    server = serve(FakeScheduler(), RestSettings(port=0, token=TOKEN))
    assert server is not None
    try:
        assert call(server.url, "GET", "/queries").status == 401
        doc = call(server.url, "GET", "/openapi.json",
                   headers={"Authorization": f"Bearer {TOKEN}"}).body
        assert doc["servers"] == [{"url": server.url}]
    finally:
        server.stop()


def test_url_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = _server(0).url


def test_ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    server = RestServer(RestApi(FakeScheduler()), host="::1", port=0, poll_interval=0.01)
    try:
        server.start()
    except OSError:
        pytest.skip("IPv6 loopback not available")
    try:
        assert server.url.startswith("http://[::1]:")
        conn_ok = call(server.url, "GET", "/queries")
        assert conn_ok.status == 200
    finally:
        server.stop()


# -- the reaper -------------------------------------------------------------------------
def _closed(theirs: socket.socket) -> bool:
    """Whether our end of a socket pair is closed (a write to it fails), not just shut."""
    try:
        theirs.send(b"x")
        return False
    except OSError:
        return True


def _reapers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spark-adaptive-rest-reaper"]


def test_the_reaper_closes_once_the_client_has_and_holds_at_most_its_limit() -> None:
    """Each socket handed over is shut for sending at once (its client sees the answer
    end) and closed once its client closes; one over the limit is closed at once; stop
    closes what is left and ends the thread."""
    before = len(_reapers())
    reaper = Reaper(2, linger=30.0)
    reaper.start()
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        for ours, _ in pairs:
            reaper.close(ours)
        for _, theirs in pairs:
            theirs.settimeout(2.0)
            assert theirs.recv(1) == b""
        assert [_closed(theirs) for _, theirs in pairs] == [False, False, True]
        pairs[1][1].close()  # this client is done: the reaper closes our end
        deadline = time.monotonic() + 5.0
        while pairs[1][0].fileno() != -1:
            assert time.monotonic() < deadline, "not closed"
            time.sleep(0.01)
        assert not _closed(pairs[0][1])  # what its client still sends is read and dropped
        reaper.stop()
        assert _closed(pairs[0][1]) and len(_reapers()) == before
    finally:
        reaper.stop()
        for pair in pairs:
            for sock in pair:
                sock.close()


def test_stop_ends_the_reaper() -> None:
    before = len(_reapers())
    server = _server(0)
    server.start()
    assert len(_reapers()) == before + 1
    server.stop()
    assert len(_reapers()) == before
