"""The HTTP layer against requests no client library would send, on raw sockets.

Each case of issue 23 (item 4) has its test: a body shorter than its
Content-Length (half-closed or stalled) is never applied, bad or conflicting
framing is refused, every method a route does not serve is a JSON 405 with
``Allow``, a malformed request line is a JSON 400 with a real status line,
a body that is not ``application/json`` is 415, deep nesting is 400 and size
413/431, slow clients 408; never a 500, and every answer is JSON.
"""

from __future__ import annotations

import json
import logging
import math
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from rest_fakes import CHECKPOINT, FakeScheduler, bounds, call, serving

from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.rest.api import MAX_DEPTH, Response
from spark_adaptive.rest.connection import encode
from spark_adaptive.rest.server import RestServer

REQ = "/queries/orders/resource-requirements"
GOOD = json.dumps(bounds(2, 3)).encode()  # 57 bytes


@dataclass
class Raw:
    status_line: bytes
    status: int
    headers: dict[str, str]
    body: Any


def exchange(server: RestServer, data: bytes, *, replies: int = 1, half_close: bool = False,
             head: bool = False, closes: bool | None = None,
             timeout: float = 5.0) -> tuple[list[Raw], bool]:
    """Send ``data`` as it is; read ``replies`` answers (100 Continue aside), and whether
    the server closed the connection after them: ``closes=True`` waits for that (up to
    ``timeout``), ``False`` gives it a moment, None does not wait."""
    sock = socket.create_connection(("127.0.0.1", server.port or 0), timeout=timeout)
    try:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        buf, out, eof = b"", [], False
        while len(out) < replies:
            reply, buf = _parse(buf, head)
            if reply is not None:
                if reply.status != 100:
                    out.append(reply)
                continue
            chunk = sock.recv(65536)
            if not chunk:
                eof = True
                break
            buf += chunk
        if not eof and closes is not None:
            sock.settimeout(timeout if closes else 0.3)
            try:
                eof = sock.recv(1) == b""
            except TimeoutError:
                eof = False
        assert len(out) == replies, (out, buf)
        return out, eof
    finally:
        sock.close()


def _parse(buf: bytes, head: bool) -> tuple[Raw | None, bytes]:
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None, buf
    status_line, *lines = buf[:end].split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.decode("latin-1").partition(":") for line in lines)}
    length = 0 if head or status_line.split()[1] == b"100" else int(headers["content-length"])
    if len(buf) < end + 4 + length:
        return None, buf
    body = buf[end + 4:end + 4 + length]
    return Raw(status_line, int(status_line.split()[1]), headers,
               json.loads(body) if body else None), buf[end + 4 + length:]


def request(method: str, target: str, body: bytes = b"", *headers: str,
            length: int | None = None, content_type: str | None = "application/json") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if content_type and body:
        lines.append(f"Content-Type: {content_type}")
    if length is not None or body:
        lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.fixture
def sched() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def server(sched: FakeScheduler) -> Iterator[RestServer]:
    with serving(sched, request_timeout=0.5, idle_timeout=1.0) as s:
        yield s


@pytest.fixture(autouse=True)
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No request may make the server log an error (as a RecursionError did)."""
    with caplog.at_level(logging.DEBUG, "spark_adaptive"):
        yield
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bad == [], [r.getMessage() for r in bad]


def unchanged(server: RestServer, sched: FakeScheduler) -> None:
    assert call(server.url, "GET", REQ).body == bounds(1, 4)
    assert sched.queries_by_key["query-1"].applied == []
    assert sched.store.load(CHECKPOINT) is None


def is_error(reply: Raw, status: int) -> None:
    """A JSON error in Flink's shape, with a real status line."""
    assert reply.status == status, reply
    assert reply.status_line.startswith(f"HTTP/1.1 {status} ".encode())
    assert reply.headers["content-type"] == "application/json"
    assert isinstance(reply.body["errors"], list) and reply.body["errors"], reply.body
    assert all(isinstance(e, str) for e in reply.body["errors"])


# -- incomplete bodies are never dispatched ---------------------------------------------
def test_a_body_shorter_than_its_length_then_half_close_is_not_applied(
        server: RestServer, sched: FakeScheduler) -> None:
    (reply,), closed = exchange(server, request("PUT", REQ, GOOD, length=len(GOOD) + 20),
                                half_close=True, closes=True)
    is_error(reply, 400)
    assert f"received {len(GOOD)} bytes, expected {len(GOOD) + 20}" in reply.body["errors"][0]
    assert closed
    unchanged(server, sched)


def test_a_body_shorter_than_its_length_from_a_client_that_waits_is_408(
        server: RestServer, sched: FakeScheduler) -> None:
    (reply,), closed = exchange(server, request("PUT", REQ, GOOD, length=len(GOOD) + 20),
                                closes=True)
    is_error(reply, 408)
    assert reply.headers["connection"] == "close" and closed
    unchanged(server, sched)


def test_a_request_line_that_never_ends_is_408(server: RestServer) -> None:
    (reply,), closed = exchange(server, b"GET /queries HTTP/1.1\r\nHost: x", closes=True)
    is_error(reply, 408)
    assert closed


def test_an_idle_kept_alive_connection_is_closed_quietly(server: RestServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port or 0), timeout=5)
    with sock:
        sock.sendall(request("GET", "/queries"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        assert sock.recv(1) == b""  # after idle_timeout, no answer: nothing was asked


# -- framing ----------------------------------------------------------------------------
@pytest.mark.parametrize("framing", [
    ("Content-Length: 57", "Content-Length: 58"),
    ("Content-Length: 57, 58",),
    ("Content-Length: +57",),
    ("Content-Length: 5_7",),
    ("Content-Length: -57",),
    ("Content-Length: 0x39",),
    ("Content-Length: 57 57",),
    ("Content-Length: 57", "Transfer-Encoding: chunked"),
    ("Transfer-Encoding: gzip",),
    ("Transfer-Encoding: chunked", "Transfer-Encoding: chunked"),
    ("Transfer-Encoding: gzip, chunked",),
])
def test_malformed_or_conflicting_framing_is_400(server: RestServer, sched: FakeScheduler,
                                                 framing: tuple[str, ...]) -> None:
    data = request("PUT", REQ, b"", "Content-Type: application/json", *framing) + GOOD
    (reply,), closed = exchange(server, data, closes=True)
    is_error(reply, 400)
    assert closed
    unchanged(server, sched)


def test_a_repeated_identical_content_length_is_one(server: RestServer,
                                                    sched: FakeScheduler) -> None:
    """RFC 9110 section 8.6 lets a recipient take identical repeats as one value (h11 does)."""
    data = request("PUT", REQ, GOOD, f"Content-Length: {len(GOOD)}")
    (reply,), _ = exchange(server, data)
    assert reply.status == 200
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 3)]


def test_a_chunked_body_is_decoded_by_the_library(server: RestServer,
                                                  sched: FakeScheduler) -> None:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (GOOD[:10], GOOD[10:]))
    data = request("PUT", REQ, b"", "Content-Type: application/json",
                   "Transfer-Encoding: chunked") + chunks + b"0\r\n\r\n"
    (reply,), closed = exchange(server, data, closes=False)
    assert reply.status == 200 and reply.body == {} and not closed
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 3)]


@pytest.mark.parametrize("chunks", [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}X\r\n0\r\n\r\n",
                                    b"2;\x00\r\n{}\r\n0\r\n\r\n"])
def test_a_malformed_chunked_body_is_400(server: RestServer, sched: FakeScheduler,
                                         chunks: bytes) -> None:
    data = request("PUT", REQ, b"", "Content-Type: application/json",
                   "Transfer-Encoding: chunked") + chunks
    (reply,), _ = exchange(server, data)
    is_error(reply, 400)
    unchanged(server, sched)


def test_an_unfinished_chunked_body_then_half_close_is_not_applied(
        server: RestServer, sched: FakeScheduler) -> None:
    data = request("PUT", REQ, b"", "Content-Type: application/json",
                   "Transfer-Encoding: chunked") + b"%x\r\n%s\r\n" % (len(GOOD), GOOD)
    (reply,), _ = exchange(server, data, half_close=True)
    is_error(reply, 400)
    unchanged(server, sched)


# -- methods ----------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "target", "allow"), [
    ("OPTIONS", "/queries", "GET"),
    ("OPTIONS", REQ, "GET, PUT"),
    ("OPTIONS", "*", "GET, PUT"),
    ("TRACE", "/queries/orders", "GET"),
    ("CONNECT", "/openapi.json", "GET"),
    ("CONNECT", "127.0.0.1:4050", "GET, PUT"),
    ("get", "/queries", "GET"),
    ("put", REQ, "GET, PUT"),
    ("BREW", "/queries", "GET"),
    ("PROPFIND", "/queries/orders/rescales", "GET"),
    ("M-SEARCH", "/queries/orders/autoscaler", "GET"),
])
def test_a_method_a_route_does_not_serve_is_405_with_allow(
        server: RestServer, sched: FakeScheduler, method: str, target: str, allow: str) -> None:
    (reply,), closed = exchange(server, request(method, target, GOOD), closes=False)
    is_error(reply, 405)
    assert reply.headers["allow"] == allow
    assert reply.body["errors"][0].startswith(f"Method {method} is not allowed on ")
    assert not closed  # the request was read whole: the connection stays usable
    unchanged(server, sched)


def test_head_is_405_with_allow_and_no_body(server: RestServer) -> None:
    (reply,), _ = exchange(server, request("HEAD", "/queries"), head=True)
    assert reply.status == 405 and reply.headers["allow"] == "GET" and reply.body is None


@pytest.mark.parametrize(("token", "length", "status"), [("t0ken", 0, 401), (None, 2000, 413)])
def test_a_refused_head_gets_no_body(sched: FakeScheduler, token: str | None, length: int,
                                     status: int) -> None:
    """Found by the fuzz test: a HEAD refused before routing was answered with a body, which
    h11 refused to send; the connection dropped with no answer."""
    with serving(sched, token=token, max_body=1024) as server:
        (reply,), _ = exchange(server, request("HEAD", "/queries", length=length), head=True)
        assert reply.status == status and reply.body is None


# -- malformed request lines and heads --------------------------------------------------
@pytest.mark.parametrize("data", [
    b"GARBAGE\r\n\r\n",
    b"GET /queries\r\n\r\n",
    b"GET  /queries HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /queries HTTP/1.1 extra\r\nHost: x\r\n\r\n",
    b"GET /q ueries HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /queries HTTP/x.y\r\nHost: x\r\n\r\n",
    b"GET /qu\xe9ries HTTP/1.1\r\nHost: x\r\n\r\n",
    b"G\x00T /queries HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /queries HTTP/1.1\r\n\r\n",  # no Host
    b"GET /queries HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",  # TLS hello
    b"GET queries HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http://[::1/queries HTTP/1.1\r\nHost: x\r\n\r\n",
])
def test_a_malformed_request_is_a_json_400_with_a_status_line(server: RestServer,
                                                              data: bytes) -> None:
    (reply,), _ = exchange(server, data)
    is_error(reply, 400)


def test_an_absolute_form_target_is_served(server: RestServer) -> None:
    (reply,), _ = exchange(server, request("GET", f"{server.url}/queries/orders/rescales"))
    assert reply.status == 200 and reply.body["rescales"]


def test_requests_pipelined_on_one_connection_are_answered_in_order(server: RestServer) -> None:
    data = request("GET", "/queries") + request("PUT", REQ, GOOD) + request("GET", REQ)
    replies, closed = exchange(server, data, replies=3, closes=False)
    assert [r.status for r in replies] == [200, 200, 200] and not closed
    assert replies[2].body == bounds(2, 3)


def test_expect_100_continue_is_answered(server: RestServer, sched: FakeScheduler) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port or 0), timeout=5)
    with sock:
        head = request("PUT", REQ, GOOD, "Expect: 100-continue")[:-len(GOOD)]
        sock.sendall(head)
        assert sock.recv(65536) == b"HTTP/1.1 100 \r\n\r\n"
        sock.sendall(GOOD)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 3)]


# -- Content-Type -----------------------------------------------------------------------
@pytest.mark.parametrize("content_type", [
    None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx",
    "application/json-patch+json", "application/json; charset=latin-1", "text/json",
    "application/json, text/plain"])
def test_a_body_that_is_not_application_json_is_415(server: RestServer, sched: FakeScheduler,
                                                    content_type: str | None) -> None:
    (reply,), _ = exchange(server, request("PUT", REQ, GOOD, content_type=content_type))
    is_error(reply, 415)
    assert "Content-Type: application/json" in reply.body["errors"][0]
    unchanged(server, sched)


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8",
    'application/json;charset="utf-8"'])
def test_application_json_with_or_without_utf8_charset_is_taken(
        server: RestServer, sched: FakeScheduler, content_type: str) -> None:
    (reply,), _ = exchange(server, request("PUT", REQ, GOOD, content_type=content_type))
    assert reply.status == 200
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 3)]


def test_a_get_body_is_ignored_whatever_its_type(server: RestServer) -> None:
    """Only PUT takes a body; a GET's (meaningless in HTTP) is read and dropped, so the GET
    answers what it documents (200, 404), not 415."""
    (reply,), _ = exchange(server, request("GET", REQ, b"\xff", content_type="text/plain"))
    assert reply.status == 200 and reply.body == bounds(1, 4)


def test_an_empty_put_needs_no_content_type(server: RestServer, sched: FakeScheduler) -> None:
    (reply,), _ = exchange(server, request("PUT", REQ, length=0))
    is_error(reply, 400)
    assert reply.body["errors"] == ["Request body does not specify resource requirements."]
    unchanged(server, sched)


# -- nesting and size -------------------------------------------------------------------
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000 // 2])
def test_a_body_nested_deeper_than_the_limit_is_400(sched: FakeScheduler, depth: int) -> None:
    nested = b'{"parallelism": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    with serving(sched, max_body=len(nested)) as server:
        (reply,), _ = exchange(server, request("PUT", REQ, nested))
        is_error(reply, 400)
        assert reply.body["errors"] == [
            f"The request body nests arrays or objects deeper than {MAX_DEPTH} levels."]
        unchanged(server, sched)


def test_nesting_up_to_the_limit_is_read_and_judged(server: RestServer) -> None:
    nested = b'{"parallelism": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    (reply,), _ = exchange(server, request("PUT", REQ, nested))
    is_error(reply, 400)
    assert "must be a JSON object" in reply.body["errors"][0]


def test_brackets_inside_strings_are_not_nesting(server: RestServer) -> None:
    body = json.dumps({"parallelism": {"lowerBound": 1, "upperBound": 2,
                                       "note": "[" * 500 + '"\\'}}).encode()
    (reply,), _ = exchange(server, request("PUT", REQ, body))
    is_error(reply, 400)
    assert reply.body["errors"] == [
        "Unknown field 'parallelism.note'; expected 'lowerBound' and 'upperBound'."]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_413_and_not_read(sched: FakeScheduler, chunked: bool) -> None:
    with serving(sched, max_body=1024) as server:
        body = b" " * 1025
        if chunked:
            data = request("PUT", REQ, b"", "Content-Type: application/json",
                           "Transfer-Encoding: chunked") + b"401\r\n" + body + b"\r\n0\r\n\r\n"
        else:
            data = request("PUT", REQ, body)
        (reply,), closed = exchange(server, data, closes=True)
        is_error(reply, 413)
        assert "exceeds the limit of 1024 bytes" in reply.body["errors"][0] and closed
        unchanged(server, sched)


def test_a_get_with_a_body_over_the_limit_is_413(sched: FakeScheduler) -> None:
    with serving(sched, max_body=16) as server:
        (reply,), _ = exchange(server, request("GET", "/queries", b"x" * 17))
        is_error(reply, 413)


def test_a_header_section_over_the_limit_is_431(server: RestServer) -> None:
    # h11 checks its buffer as bytes arrive: a head is refused once 16 KiB of it are in
    # without its end, so one of 40 KiB always is.
    data = request("GET", "/queries", b"", "X-Padding: " + "a" * 40_000)
    (reply,), closed = exchange(server, data, closes=True)
    is_error(reply, 431)
    assert closed


def test_a_huge_number_is_400_not_500(server: RestServer) -> None:
    body = b'{"parallelism": {"lowerBound": 1, "upperBound": ' + b"9" * 5000 + b"}}"
    (reply,), _ = exchange(server, request("PUT", REQ, body))
    is_error(reply, 400)


# -- connections ------------------------------------------------------------------------
def test_connections_over_the_limit_get_503_with_retry_after(sched: FakeScheduler) -> None:
    with serving(sched, max_connections=1) as server:
        held = socket.create_connection(("127.0.0.1", server.port or 0), timeout=5)
        with held:
            held.sendall(request("GET", "/queries"))
            assert held.recv(65536).startswith(b"HTTP/1.1 200 OK")  # admitted and kept
            (reply,), closed = exchange(server, request("GET", "/queries"), closes=True)
            is_error(reply, 503)
            assert reply.headers["retry-after"] == "1" and closed


def test_stop_closes_kept_alive_connections(sched: FakeScheduler) -> None:
    with serving(sched) as server:
        sock = socket.create_connection(("127.0.0.1", server.port or 0), timeout=5)
        sock.sendall(request("GET", "/queries"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
        server.stop()
        with sock:
            assert sock.recv(1) == b""


def test_the_token_is_checked_before_the_body_is_read(sched: FakeScheduler) -> None:
    with serving(sched, token="t0ken", max_body=1024) as server:
        # Declares more than the limit and sends nothing: 401 at once, not 413 or 408.
        (reply,), closed = exchange(server, request("PUT", REQ, length=10**9), closes=True)
        is_error(reply, 401)
        assert reply.headers["www-authenticate"] == 'Bearer realm="spark-adaptive"'
        assert closed
        for method in ("OPTIONS", "get", "BREW"):
            (reply,), _ = exchange(server, request(method, "/queries"))
            is_error(reply, 401)
        twice = request("GET", "/queries", b"", "Authorization: Bearer t0ken",
                        "Authorization: Bearer t0ken")
        (reply,), _ = exchange(server, twice)
        is_error(reply, 401)
        (reply,), _ = exchange(server, request("GET", "/queries", b"",
                                               "Authorization: Bearer t0ken"))
        assert reply.status == 200
        assert urlsplit(server.url).hostname == "127.0.0.1"


def test_numbers_json_cannot_hold_go_out_as_null() -> None:
    # Python writes NaN and Infinity, which JSON has not: a browser's parser refuses the body.
    body = {"a": math.nan, "b": [math.inf, 1.5, {"c": -math.inf}], "d": (2.0, math.nan), "e": 3}
    text = encode(Response(200, body)).decode()

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is no JSON")

    assert json.loads(text, parse_constant=refuse) == {
        "a": None, "b": [None, 1.5, {"c": None}], "d": [2.0, None], "e": 3}
