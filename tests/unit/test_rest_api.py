"""The REST API over a real socket with a hand-written scheduler facade: every route and error."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rest_fakes import (
    CHECKPOINT,
    QUERY_ID,
    BlockingStore,
    FailingStore,
    FakeQuery,
    FakeScheduler,
    Reply,
    bounds,
    call,
    serving,
)

from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.core.streaming.scheduler import REACTIVE_REQUIREMENTS
from spark_adaptive.rest.api import _ROUTES
from spark_adaptive.rest.wire import EMPTY_BODY

REQ = "/queries/orders/resource-requirements"


@pytest.fixture
def sched() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def url(sched: FakeScheduler) -> Any:
    with serving(sched) as server:
        yield server.url


def put(url: str, body: Any = None, **kw: Any) -> Reply:
    return call(url, "PUT", REQ, body, **kw)


def assert_unchanged(url: str, sched: FakeScheduler) -> None:
    """A refused request changed nothing: same bounds, nothing applied, nothing persisted."""
    assert call(url, "GET", REQ).body == bounds(1, 4)
    assert sched.queries_by_key["query-1"].applied == []
    assert sched.store.load(CHECKPOINT) is None


# -- reads ------------------------------------------------------------------------------
def test_the_autoscaler_route_says_why_it_has_nothing(url: str) -> None:
    reply = call(url, "GET", "/queries/orders/autoscaler")
    assert reply.status == 404
    error = reply.body["errors"][0]
    assert "spark.adaptive.autoscaler.enabled=false" in error and "local master" in error


def test_list_and_get_a_query_by_id_key_or_name(url: str) -> None:
    listed = call(url, "GET", "/queries")
    assert listed.status == 200 and listed.headers["content-type"] == "application/json"
    assert [q["id"] for q in listed.body] == [QUERY_ID]
    for ident in (QUERY_ID, "query-1", "orders", "orders/"):
        got = call(url, "GET", f"/queries/{ident}")
        assert got.status == 200, ident
        assert got.body["state"] == "Executing"
        assert got.body["requirements"] == bounds(1, 4)
        assert got.body["lastDecision"]["reason"] == "started at parallelism 2"


def test_a_name_is_url_decoded(sched: FakeScheduler, url: str) -> None:
    sched.add(FakeQuery("query-2", "q2", "daily totals", ResourceRequirements(2, 3)))
    assert call(url, "GET", "/queries/daily%20totals/resource-requirements").body == bounds(2, 3)


def test_get_requirements_and_rescales(url: str) -> None:
    assert call(url, "GET", REQ).body == bounds(1, 4)
    history = call(url, "GET", "/queries/orders/rescales")
    assert history.status == 200
    assert history.body["id"] == QUERY_ID
    assert [r["trigger"] for r in history.body["rescales"]] == ["INITIAL_SCHEDULE"]
    assert history.body["counters"]["restarts"] == 1


def test_openapi_document_is_served(url: str) -> None:
    doc = call(url, "GET", "/openapi.json").body
    assert doc["openapi"].startswith("3.0") and doc["servers"] == [{"url": url}]
    assert "security" not in doc


# -- a good PUT -------------------------------------------------------------------------
def test_put_is_persisted_then_applied(sched: FakeScheduler, url: str) -> None:
    reply = put(url, bounds(2, 3))
    assert (reply.status, reply.body) == (200, {})
    assert reply.headers["spark-adaptive-persisted"] == "true"
    assert sched.store.load(CHECKPOINT) == ResourceRequirements(2, 3)
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 3)]
    assert call(url, "GET", REQ).body == bounds(2, 3)


def test_minus_one_means_the_default(sched: FakeScheduler, url: str) -> None:
    assert put(url, bounds(-1, -1)).status == 200
    assert call(url, "GET", REQ).body == bounds(1, 4)  # upper: the configured partitions
    assert sched.store.load(CHECKPOINT) == ResourceRequirements(1, 4)


def test_a_query_without_checkpoint_is_updated_but_not_persisted(sched: FakeScheduler,
                                                                 url: str) -> None:
    sched.add(FakeQuery("query-2", "q2", "scratch", ResourceRequirements(1, 4), checkpoint=None))
    reply = call(url, "PUT", "/queries/scratch/resource-requirements", bounds(1, 2))
    assert reply.status == 200 and reply.headers["spark-adaptive-persisted"] == "false"
    assert sched.queries_by_key["query-2"].requirements == ResourceRequirements(1, 2)
    assert sched.store.files == {}


# -- 400: every reason, and nothing changes ---------------------------------------------
@pytest.mark.parametrize(("body", "reasons"), [
    (None, [EMPTY_BODY]),
    ({}, [EMPTY_BODY]),
    (b"   ", [EMPTY_BODY]),
    (b"null", [EMPTY_BODY]),
    (b"{nope", ["The request body is not valid JSON: Expecting property name enclosed in "
                "double quotes: line 1 column 2 (char 1)."]),
    (b"\xff\xfe", None),
    (b'{"parallelism": {"lowerBound": NaN, "upperBound": 2}}', None),
    ([1, 2], ["The request body must be a JSON object, got an array."]),
    ({"parallelism": 3}, ["Field 'parallelism' must be a JSON object with 'lowerBound' and "
                          "'upperBound', got a number (3)."]),
    ({"p": 1}, ["Unknown field 'p'; the body holds only 'parallelism'.",
                "Missing field 'parallelism'."]),
    ({"parallelism": {"lowerBound": 1}}, ["Missing field 'parallelism.upperBound'."]),
    (bounds("1", 2.0), ["Field 'parallelism.lowerBound' must be an integer, got a string ('1').",
                        "Field 'parallelism.upperBound' must be an integer, got a number (2.0)."]),
    (bounds(True, 2), ["Field 'parallelism.lowerBound' must be an integer, got a boolean (true)."]),
    (bounds(0, 2), ["The lower bound must be greater than 0 (or -1 for the default), got 0."]),
    (bounds(1, -5), ["The upper bound must be greater than 0 (or -1 for the default), got -5."]),
    (bounds(3, 2), ["The lower bound 3 is greater than the upper bound 2."]),
    (bounds(1, 40000), ["The upper bound 40000 exceeds the max parallelism 32768."]),
    ({**bounds(1, 2), "extra": 1}, ["Unknown field 'extra'; the body holds only 'parallelism'."]),
])
def test_each_refusal_has_its_reason_and_changes_nothing(
        sched: FakeScheduler, url: str, body: Any, reasons: list[str] | None) -> None:
    reply = put(url, raw=body) if isinstance(body, bytes) else put(url, body)
    assert reply.status == 400, reply.body
    if reasons is None:
        assert len(reply.body["errors"]) == 1
    else:
        assert reply.body == {"errors": reasons}
    assert_unchanged(url, sched)


def test_all_reasons_at_once(sched: FakeScheduler, url: str) -> None:
    body = {"parallelism": {"lowerBound": 0, "upperBound": "x", "step": 1}, "id": 2}
    reply = put(url, body)
    assert reply.status == 400
    assert reply.body["errors"] == [
        "Unknown field 'id'; the body holds only 'parallelism'.",
        "Unknown field 'parallelism.step'; expected 'lowerBound' and 'upperBound'.",
        "Field 'parallelism.upperBound' must be an integer, got a string ('x').",
        "The lower bound must be greater than 0 (or -1 for the default), got 0.",
    ]
    both = put(url, bounds(0, 50000)).body["errors"]
    assert len(both) == 2 and "lower bound" in both[0] and "max parallelism" in both[1]
    assert_unchanged(url, sched)


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"parallelism": {"lowerBound": 0, "upperBound": 2}, '
     b'"parallelism": {"lowerBound": 2, "upperBound": 2}}', "parallelism"),
    (b'{"parallelism": {"lowerBound": 3, "lowerBound": 2, "upperBound": 2}}',
     "parallelism.lowerBound"),
])
def test_a_field_given_twice_is_refused_not_read_as_the_last_one(
        sched: FakeScheduler, url: str, raw: bytes, field: str) -> None:
    reply = put(url, raw=raw)  # the last one alone would be accepted
    assert reply.status == 400, reply.body
    assert reply.body == {"errors": [f"The request body gives the field {field!r} more than "
                                     "once; each field may appear only once."]}
    assert_unchanged(url, sched)


def test_reactive_mode_refuses_with_flinks_message() -> None:
    sched = FakeScheduler(mode="reactive")
    with serving(sched) as server:
        reply = put(server.url, bounds(1, 2))
        assert (reply.status, reply.body) == (400, {"errors": [REACTIVE_REQUIREMENTS]})
        assert call(server.url, "GET", REQ).body == bounds(1, 4)
    assert sched.store.files == {}


# -- 404, 405 ---------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/queries/nope"), ("GET", "/queries/nope/resource-requirements"),
    ("PUT", "/queries/nope/resource-requirements"), ("GET", "/queries/nope/rescales")])
def test_unknown_query_is_404(url: str, method: str, path: str) -> None:
    reply = call(url, method, path, bounds(1, 2) if method == "PUT" else None)
    assert reply.status == 404
    assert reply.body == {"errors": ["no query managed by spark-adaptive has id or name 'nope'"]}


@pytest.mark.parametrize("path", ["/jobs", "/queries/orders/cancel", "/queries//x",
                                  "/ui", "/ui/x/y"])
def test_unknown_path_is_404(url: str, path: str) -> None:
    reply = call(url, "GET", path)
    assert reply.status == 404 and "/openapi.json" in reply.body["errors"][0]


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("POST", "/queries", "GET, HEAD"), ("DELETE", "/queries/orders", "GET, HEAD"),
    ("POST", REQ, "GET, HEAD, PUT"), ("PATCH", REQ, "GET, HEAD, PUT"),
    ("PUT", "/openapi.json", "GET, HEAD")])
def test_wrong_method_is_405_with_allow(url: str, method: str, path: str, allow: str) -> None:
    reply = call(url, method, path, {})
    assert reply.status == 405 and reply.headers["allow"] == allow
    assert reply.body["errors"][0].startswith(f"Method {method} is not allowed")


# One path of each GET route (the autoscaler's answers 404: its GET does too).
GET_PATHS = ["/queries", "/queries/orders", REQ, "/queries/orders/rescales",
             "/queries/orders/autoscaler", "/queries/orders/samples", "/openapi.json",
             "/metrics", "/", "/ui/app.js"]


def test_every_get_route_is_in_the_head_test() -> None:
    routes = [pattern for pattern, methods in _ROUTES if "GET" in methods]
    assert all(any(p.fullmatch(path) for path in GET_PATHS) for p in routes)


@pytest.mark.parametrize("path", GET_PATHS)
def test_head_answers_as_get_without_the_body(url: str, path: str) -> None:
    """RFC 9110 section 9.1: HEAD wherever GET; the same status and headers, no body."""
    got = call(url, "GET", path)
    head = call(url, "HEAD", path)
    assert head.status == got.status
    assert not head.body and got.body  # None (JSON) or "" (text): nothing was read
    if path == "/metrics":  # its figures (the scrape's own) may change the length
        assert int(head.headers.pop("content-length")) > 0
        got.headers.pop("content-length")
    assert head.headers == got.headers


def test_head_without_the_token_is_401_on_the_api_but_not_the_page(sched: FakeScheduler) -> None:
    with serving(sched, token="t0ken") as server:
        assert call(server.url, "HEAD", "/queries").status == 401
        assert call(server.url, "HEAD", "/").status == 200


# -- 409: one update of a query at a time -----------------------------------------------
def test_a_second_put_while_one_is_in_flight_gets_409_and_changes_nothing() -> None:
    store = BlockingStore()
    sched = FakeScheduler(store)
    with serving(sched) as server:
        first: list[Reply] = []
        t = threading.Thread(target=lambda: first.append(put(server.url, bounds(1, 2))))
        t.start()
        assert store.saving.wait(10)
        second = put(server.url, bounds(1, 3))
        assert second.status == 409
        assert second.body == {"errors": ["Another update to the query [orders] resource "
                                          "requirements is in progress."]}
        # Another name for the same query is the same query.
        third = call(server.url, "PUT", f"/queries/{QUERY_ID}/resource-requirements",
                     bounds(1, 3))
        assert third.status == 409
        store.release()
        t.join(10)
        assert first[0].status == 200
        assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(1, 2)]
        assert store.load(CHECKPOINT) == ResourceRequirements(1, 2)
        # Once the first is done, the next update goes through.
        assert put(server.url, bounds(1, 3)).status == 200


def test_a_finished_query_is_409(sched: FakeScheduler, url: str) -> None:
    sched.queries_by_key["query-1"].finished = True
    reply = put(url, bounds(1, 2))
    assert reply.status == 409 and "has finished" in reply.body["errors"][0]
    assert_unchanged(url, sched)


def test_apply_failing_after_persisting_puts_the_old_file_back(sched: FakeScheduler,
                                                               url: str) -> None:
    assert put(url, bounds(1, 3)).status == 200
    q = sched.queries_by_key["query-1"]
    original = sched.apply_requirements

    def finish_then_apply(key: str, requirements: ResourceRequirements) -> None:
        q.finished = True  # the query ends between validation and apply
        original(key, requirements)

    sched.apply_requirements = finish_then_apply  # type: ignore[method-assign]
    assert put(url, bounds(2, 2)).status == 409
    assert sched.store.load(CHECKPOINT) == ResourceRequirements(1, 3)
    assert q.requirements == ResourceRequirements(1, 3)


# -- 413, 500 (framing: test_rest_http.py) -----------------------------------------
def test_a_body_over_the_limit_is_413() -> None:
    sched = FakeScheduler()
    with serving(sched, max_body=1024) as server:
        reply = put(server.url, raw=b" " * 1025)
        assert reply.status == 413
        assert reply.body == {"errors": ["The request body of 1025 bytes exceeds the limit of "
                                         "1024 bytes."]}
        assert reply.headers["connection"] == "close"
        assert put(server.url, raw=b" " * 1024).status == 400  # at the limit: read, empty
    assert sched.queries_by_key["query-1"].applied == []


def test_persistence_failure_is_500_and_changes_nothing() -> None:
    sched = FakeScheduler(FailingStore())
    with serving(sched) as server:
        reply = put(server.url, bounds(1, 2))
        assert reply.status == 500
        (reason,) = reply.body["errors"]
        assert reason.startswith("The resource requirements of the query [orders] could not "
                                 "be persisted (cannot write /checkpoints/orders/")
        assert "disk full" in reason and reason.endswith("Please retry.")
        assert call(server.url, "GET", REQ).body == bounds(1, 4)
    assert sched.queries_by_key["query-1"].applied == []


def test_keep_alive_serves_several_requests_on_one_connection(url: str) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/queries")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read()
    finally:
        conn.close()
