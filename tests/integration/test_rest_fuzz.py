"""Property-based fuzzing of the REST API on a real driver (issue 23, item 4).

A local-mode driver (pytest-spark's ``local[2]`` session) with spark-adaptive
enabled, a bearer token, and a streaming query running (``rate`` into
``noop``, named ``fuzzed``). Hypothesis then sends a few hundred requests over
raw sockets: any method (served, unserved, lowercase, made up), paths built
from the routes with the query's id, key, name and strangers, with and
without the right token, JSON bodies of every shape and raw bytes, right and
wrong ``Content-Type`` and framing (short bodies with a half-close, chunked,
``+47``). For every answer:

* no 5xx;
* a status line, and a body of a media type the document lists for that route:
  JSON that conforms to the document's schema for that route, method and status
  (error answers, always JSON, to the ``Error`` schema; a status an operation does
  not list must be one the HTTP layer gives any request,
  ``openapi.TRANSPORT_ERRORS``), the page's HTML and files, or the metrics that
  ``prometheus_client``'s parser reads; 405 carries the path's ``Allow``; a
  HEAD is checked as the GET it stands for (the document lists no HEAD), its
  answer without a body;
* a refused request changes nothing: the query's requirements, its rescale
  history and the persisted file read back the same after every non-2xx answer.

The request count is printed. Hypothesis runs derandomized in CI (the same
requests every run).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_schema_validator import OAS30Validator
from openapi_schema_validator import validate as validate_value
from prometheus_client.parser import text_string_to_metric_families

import spark_adaptive
from spark_adaptive.rest import openapi
from spark_adaptive.testing.streaming import wait_until

pytestmark = pytest.mark.timeout(300)

TOKEN = "fuzz-s3cret"
REQUESTS = 300
METHODS = ["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT",
           "get", "put", "Get", "BREW", "PROPFIND", "M-SEARCH"]
REQUIREMENTS = "/queries/{id}/resource-requirements"
ROUTES = ["/queries", "/queries/{id}", "/queries/{id}/resource-requirements",
          "/queries/{id}/rescales", "/queries/{id}/autoscaler", "/openapi.json", "/",
          "/queries/{id}/samples", "/metrics", "/ui/app.js", "/ui/style.css", "/ui/{id}",
          "/queries/{id}/cancel", "/jobs/{id}/resource-requirements", "/queries/{id}/"]


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10),
                        st.floats(allow_nan=False, allow_infinity=False))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=10)


BOUND = st.one_of(st.integers(-3, 40000), st.sampled_from([2**63, -1, 0, 1, 2, True, None,
                                                           "1", 1.5, [], {}]))


def _bodies() -> st.SearchStrategy[bytes | None]:
    requirements = st.builds(
        lambda lo, up, extra: {"parallelism": {"lowerBound": lo, "upperBound": up, **extra}},
        BOUND, BOUND, st.dictionaries(st.sampled_from(["step", "x"]), st.integers(), max_size=1))
    return st.one_of(  # the first branch is hypothesis's simplest: drawn most
        requirements.map(lambda b: json.dumps(b).encode()),
        _json_values().map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=64),
        st.sampled_from([b"", b"   ", b"{", b"null", b"NaN", b'{"parallelism": NaN}',
                         b"[" * 1000 + b"]" * 1000, b'{"parallelism": ' + b"[" * 1000,
                         b"\xff\xfe", b'"' + b"\\" * 33, b"9" * 5000, b" " * 70_000]),
        st.none())


KINDS = ["read", "put", "put", "content-type", "framing", "method", "auth", "target",
         "header", "size"]
GOOD_AUTH = [f"Bearer {TOKEN}", f"bearer {TOKEN}"]
BAD_AUTH = [None, "Bearer", "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN} x",
            f"Bearer {TOKEN[:-1]}"]
JSON_TYPES = ["application/json", "application/json; charset=utf-8", "Application/JSON"]
OTHER_TYPES = [None, "text/plain", "application/json; charset=latin-1",
               "application/x-www-form-urlencoded", "application/jsonx", ""]


@st.composite
def requests(draw: st.DrawFn, idents: list[str]) -> dict[str, Any]:
    """One request of a kind (KINDS: each breaks one thing, ``read`` and ``put`` nothing
    but the body), the rest drawn around it. Hypothesis does not sample evenly (it favours
    its simplest choices), so the kind is drawn first to reach every case."""
    kind = draw(st.sampled_from(KINDS))
    ident = draw(st.sampled_from([*idents, "?"]))
    if ident == "?":
        ident = draw(st.text(max_size=12))
    route = REQUIREMENTS if kind in ("put", "content-type", "framing") else draw(
        st.sampled_from(ROUTES))
    path = route.replace("{id}", quote(ident, safe=""))
    if draw(st.booleans()):
        path += draw(st.sampled_from(["", "?", "?x=1", "#frag", "/", "//"]))
    method = "GET" if kind == "read" else draw(st.sampled_from(["PUT", "GET"]))
    if kind in ("put", "content-type", "framing"):
        method = "PUT"
    elif kind == "method":
        method = draw(st.one_of(st.sampled_from(METHODS),
                                st.from_regex(r"[A-Za-z]{1,8}", fullmatch=True)))
    if kind == "target":
        path = draw(st.one_of(st.sampled_from(["*", "127.0.0.1:1", "http://x/queries",
                                               "queries", "/queries/a b"]),
                              st.text(alphabet="/%?#.abc\x00 é", max_size=12)))
    body = draw(_bodies()) if method == "PUT" or draw(st.integers(0, 3)) == 3 else None
    if kind == "size":
        body = draw(st.sampled_from([b" " * 70_000, b"[" * 60_000, b"9" * 5000]))
    return {
        "method": method,
        "path": path,
        "auth": draw(st.sampled_from(BAD_AUTH if kind == "auth" else GOOD_AUTH)),
        "content_type": draw(st.sampled_from(OTHER_TYPES if kind == "content-type"
                                             else JSON_TYPES)),
        "body": body,
        "framing": draw(st.sampled_from(["chunked", "short", "+", "twice"]))
        if kind == "framing" else draw(st.sampled_from(["length", "length", "chunked"])),
        "extra": draw(st.sampled_from([
            "Expect: 100-continue", "Connection: close", "X-A: \x80", "Upgrade: h2c",
            "Bad Header: 1", "Content-Length: 4_7", "Content-Length: 1", "Host: y",
            "Transfer-Encoding: gzip", "X-Long: " + "a" * 20_000]))
        if kind == "header" else None,
    }


def _encode(r: dict[str, Any]) -> bytes:
    lines = [f"{r['method']} {r['path']} HTTP/1.1", "Host: 127.0.0.1"]
    if r["auth"] is not None:
        lines.append(f"Authorization: {r['auth']}")
    if r["content_type"] is not None:
        lines.append(f"Content-Type: {r['content_type']}")
    if r["extra"]:
        lines.append(r["extra"])
    body: bytes = r["body"] or b""
    framing = r["framing"]
    if framing == "chunked" and body:
        lines.append("Transfer-Encoding: chunked")
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    elif r["body"] is not None:
        n = len(body)
        lines += {"short": [f"Content-Length: {n + 7}"], "+": [f"Content-Length: +{n}"],
                  "twice": [f"Content-Length: {n}", f"Content-Length: {n + 1}"]}.get(
            framing, [f"Content-Length: {n}"])
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
    return head + body


def _exchange(port: int, data: bytes, head: bool) -> tuple[bytes, dict[str, str], Any]:
    """Send, half-close, read to the end: the status line, headers and the body (decoded
    JSON when it is JSON, else text)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        buf = b""
        while chunk := sock.recv(65536):
            buf += chunk
    while buf.startswith(b"HTTP/1.1 100 "):
        buf = buf[buf.index(b"\r\n\r\n") + 4:]
    head_end = buf.index(b"\r\n\r\n")
    status_line, *lines = buf[:head_end].decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    body = buf[head_end + 4:]
    if head and not body:  # a HEAD request the server could parse: no body
        return status_line.encode(), headers, None
    assert len(body) == int(headers["content-length"]), (headers, body)
    if headers["content-type"] != "application/json":
        return status_line.encode(), headers, body.decode("utf-8")
    return status_line.encode(), headers, json.loads(body)


def _operation(doc: dict[str, Any], method: str, path: str) -> tuple[str | None, Any]:
    """The document's path template for ``path`` and its operation for ``method`` (None:
    not documented)."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    if path.startswith("http://"):
        path = urlsplit(path).path
    if len(path) > 1:
        path = path.rstrip("/")
    for template, item in doc["paths"].items():
        pattern = re.escape(template).replace(r"\{id\}", "[^/]+").replace(r"\{file\}", "[^/]+")
        if re.fullmatch(pattern, path):
            name = "get" if method == "HEAD" else method.lower()  # HEAD: wherever GET is
            return template, item.get(name) if method.isupper() else None
    return None, None


def _state(port: int, key: str, persisted: Path) -> Any:
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    out = []
    for route in ("resource-requirements", "rescales"):
        data = (f"GET /queries/{quote(key, safe='')}/{route} HTTP/1.1\r\nHost: x\r\n{auth}"
                "\r\n").encode()
        status, _, body = _exchange(port, data, head=False)
        assert status.startswith(b"HTTP/1.1 200 "), (status, body)
        out.append(body)
    return out, persisted.exists() and persisted.read_bytes()


def test_no_request_breaks_the_rest_api(spark_session: Any, tmp_path: Path) -> None:
    rt = spark_adaptive.enable(spark_session, **{"rest.port": "0", "rest.token": TOKEN})
    query = None
    try:
        assert rt.rest is not None
        port = rt.rest.port or 0
        checkpoint = tmp_path / "checkpoint"
        query = (spark_session.readStream.format("rate").option("rowsPerSecond", 5).load()
                 .writeStream.format("noop").queryName("fuzzed")
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="1 second")
                 .start())
        listed = wait_until(what="the query to run", timeout=120, check=lambda: [
            q for q in _exchange(port, (f"GET /queries HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                        f"Bearer {TOKEN}\r\n\r\n").encode(), False)[2]
            if q["name"] == "fuzzed" and q["state"] == "Executing"
            and q["lastProgress"] is not None])
        key, query_id = listed[0]["key"], listed[0]["id"]
        doc = _exchange(port, (f"GET /openapi.json HTTP/1.1\r\nHost: x\r\nAuthorization: "
                               f"Bearer {TOKEN}\r\n\r\n").encode(), False)[2]
        persisted = checkpoint / "spark-adaptive" / "requirements.json"
        before = _state(port, key, persisted)
        seen: dict[int, int] = {}
        started = time.monotonic()

        @settings(max_examples=REQUESTS, deadline=None, database=None,
                  derandomize=bool(os.environ.get("CI")),
                  suppress_health_check=list(HealthCheck))
        @given(r=requests([query_id, key, "fuzzed", "nope", query_id[:8], "%00", ".."]))
        def one(r: dict[str, Any]) -> None:
            nonlocal before
            status_line, headers, body = _exchange(port, _encode(r), head=r["method"] == "HEAD")
            status = int(status_line.split()[1])
            seen[status] = seen.get(status, 0) + 1
            assert re.fullmatch(rb"HTTP/1\.1 [1-5][0-9]{2} [A-Za-z -]*", status_line), status_line
            assert status < 500, (r, status, body)
            template, op = _operation(doc, r["method"], r["path"])
            media = headers["content-type"].split(";")[0].strip()
            if status < 300:
                assert op is not None, (r, status)
                assert media in op["responses"]["200"]["content"], (r, headers)
                before = _state(port, key, persisted)  # an accepted PUT may change it
                if media != "application/json":  # the page, its files, the metrics
                    if template == "/metrics" and body is not None:
                        assert list(text_string_to_metric_families(body)), body[:200]
                    return
                schema = op["responses"]["200"]["content"]["application/json"]["schema"]
            else:
                assert headers["content-type"] == "application/json", headers
                schema = {"$ref": "#/components/schemas/Error"}
                if op is not None:
                    assert str(status) in op["responses"] or str(status) in (
                        openapi.TRANSPORT_ERRORS), (r, status, body)
                elif template is not None and status == 405:
                    allowed = [m.upper() for m in doc["paths"][template] if m != "parameters"]
                    allowed += ["HEAD"] if "GET" in allowed else []
                    assert headers["allow"] == ", ".join(sorted(allowed)), headers
                assert _state(port, key, persisted) == before, (r, status, body)
            if status == 401:
                assert headers["www-authenticate"].startswith("Bearer")
            if body is not None:
                validate_value(body, {"components": doc["components"], **schema},
                               cls=OAS30Validator)

        one()
        took = time.monotonic() - started
        count = sum(seen.values())
        print(f"\nREST fuzz: {count} requests in {took:.1f} s, by status: "
              f"{dict(sorted(seen.items()))}")
        assert count >= REQUESTS, seen
        assert query.isActive
    finally:
        if query is not None:
            query.stop()
        rt.shutdown()
