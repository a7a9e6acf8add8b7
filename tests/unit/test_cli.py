"""The ``spark-adaptive`` command against a real server with a fake scheduler."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator

import pytest
from rest_fakes import QUERY_ID, FailingStore, FakeQuery, FakeScheduler, serving

from spark_adaptive import cli
from spark_adaptive.core.autoscaler import AutoscalerConfig, QueryAutoscaler, QueryView
from spark_adaptive.core.autoscaler.forecast import Forecast
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.rest import tables


@pytest.fixture
def sched() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def url(sched: FakeScheduler, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("SPARK_ADAPTIVE_URL", raising=False)
    monkeypatch.delenv("SPARK_ADAPTIVE_TOKEN", raising=False)
    with serving(sched) as server:
        yield server.url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_table(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "status")
    assert code == 0
    assert out.splitlines() == [
        "ID        NAME    STATE      PARALLELISM  EXECUTORS  SLOTS  BOUNDS  LAST DECISION",
        "0f9c8b1e  orders  Executing  2            2          2      [1, 4]  "
        "CreatingExecutionGraph -> Executing: started at parallelism 2",
    ]


def test_status_json_and_url_after_the_command(url: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "status", "--url", url, "--json")
    assert code == 0 and json.loads(out)[0]["id"] == QUERY_ID


def test_status_without_queries(sched: FakeScheduler, url: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    sched.queries_by_key.clear()
    assert run(capsys, "--url", url, "status")[1].startswith("no streaming query is managed")


def test_url_from_the_environment(url: str, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPARK_ADAPTIVE_URL", url)
    assert run(capsys, "status")[0] == 0


def test_requirements_get_by_name_and_by_short_id(url: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "requirements", "get", "orders")
    assert (code, out) == (0, "query orders: parallelism between 1 and 4 [1, 4]\n")
    code, out, _ = run(capsys, "requirements", "get", "0f9c8b1e", "--url", url, "--json")
    assert (code, json.loads(out)) == (0, {"parallelism": {"lowerBound": 1, "upperBound": 4}})


def test_requirements_set(sched: FakeScheduler, url: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "requirements", "set", "orders", "--lower", "2",
                       "--upper", "-1")
    assert code == 0
    assert out.splitlines() == [
        "query orders: parallelism between 2 and 4 [2, 4]",
        "persisted beside the query's checkpoint",
        "the scheduler applies them within its rescale timing rules (see 'spark-adaptive "
        "status')",
    ]
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 4)]
    code, out, _ = run(capsys, "--url", url, "--json", "requirements", "set", "0f9c",
                       "--lower", "1", "--upper", "3")
    assert code == 0 and json.loads(out) == {
        "requirements": {"parallelism": {"lowerBound": 1, "upperBound": 3}}, "persisted": True}


def test_requirements_set_without_checkpoint(sched: FakeScheduler, url: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    sched.add(FakeQuery("query-2", "q2", "scratch", ResourceRequirements(1, 4), checkpoint=None))
    out = run(capsys, "--url", url, "requirements", "set", "scratch", "--lower", "1",
              "--upper", "2")[1]
    assert "not persisted: the query has no checkpoint location" in out


def test_a_refusal_prints_every_reason_and_exits_2(sched: FakeScheduler, url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--url", url, "requirements", "set", "orders", "--lower", "0",
                         "--upper", "99999")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "spark-adaptive: refused (HTTP 400):",
        "  - The lower bound must be greater than 0 (or -1 for the default), got 0.",
        "  - The upper bound 99999 exceeds the max parallelism 32768.",
    ]
    assert sched.queries_by_key["query-1"].applied == []


def test_an_unknown_query_exits_2(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--url", url, "history", "nope")
    assert code == 2 and "no query managed by spark-adaptive has id or name 'nope'" in err


def test_a_server_failure_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with serving(FakeScheduler(FailingStore())) as server:
        code, _, err = run(capsys, "--url", server.url, "requirements", "set", "orders",
                           "--lower", "1", "--upper", "2")
    assert code == 1 and "server error (HTTP 500)" in err and "Please retry." in err


def test_history_table(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "history", "orders")
    when = tables.clock(1.7e9)
    assert code == 0
    assert out.splitlines() == [
        f"query {QUERY_ID}",
        "TIME".ljust(len(when)) + "  TRIGGER           KIND     PARALLELISM  SLOTS   DURATION"
        "  OUTCOME    REASON",
        f"{when}  INITIAL_SCHEDULE  initial  0 -> 2       0 -> 2  3.2s      completed  "
        "sufficient resources",
        "restarts 1, rescales 1 (live 0), failures 0",
    ]
    code, out, _ = run(capsys, "--url", url, "history", "orders", "--json")
    assert json.loads(out)["rescales"][0]["duration"] == 3.25


def test_token(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SPARK_ADAPTIVE_TOKEN", raising=False)
    with serving(FakeScheduler(), token="t0ken") as server:
        code, _, err = run(capsys, "--url", server.url, "status")
        assert code == 2 and "HTTP 401" in err and "bearer token" in err
        assert run(capsys, "--url", server.url, "--token", "t0ken", "status")[0] == 0
        monkeypatch.setenv("SPARK_ADAPTIVE_TOKEN", "t0ken")
        assert run(capsys, "--url", server.url, "status")[0] == 0


def test_nothing_listening_exits_1_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    code, _, err = run(capsys, "--url", f"http://127.0.0.1:{port}", "status")
    assert code == 1
    assert f"cannot reach the spark-adaptive REST API at http://127.0.0.1:{port}" in err
    assert "--url or SPARK_ADAPTIVE_URL" in err


@pytest.mark.parametrize(("argv", "what"), [
    (["--url", "http://127.0.0.1:4x50"], "the URL 'http://127.0.0.1:4x50' is malformed (Port "
                                         "could not be cast to integer value as '4x50')"),
    (["--url", "http://[::1"], "the URL 'http://[::1' is malformed (Invalid IPv6 URL)"),
    (["--url", "http://127.0.0.1:1/a b"], "the URL 'http://127.0.0.1:1/a b' has a character a "
                                          "URL cannot hold as it is (' '; percent-encode it)"),
    (["--url", "127.0.0.1:4050"], "the URL '127.0.0.1:4050' does not start with http://"),
    (["--url", "http://127.0.0.1:1", "--token", "t\u20ac"],
     "the bearer token (--token or SPARK_ADAPTIVE_TOKEN) cannot be sent in an HTTP header: "
     "its character 2 is U+20AC"),
    (["--url", "http://127.0.0.1:1", "--token", "a\nb"], "its character 2 is U+000A"),
])
def test_a_url_or_token_that_cannot_be_sent_is_a_usage_error(
        argv: list[str], what: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv, "status")
    assert (code, out) == (2, "")
    assert err.startswith("spark-adaptive: ") and what in err and len(err.splitlines()) == 1, err


def _answering(reply: bytes) -> str:
    """A one-connection server that answers any request with ``reply`` and closes."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()

    def serve() -> None:
        with s:
            conn, _ = s.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                head, body = request.split(b"\r\n\r\n", 1)
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                while length and len(body) < int(length.group(1)):
                    body += conn.recv(65536)
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(("reply", "argv", "what"), [
    (b"SSH-2.0-OpenSSH_9.6\r\n", ["status"],
     "did not answer in HTTP (BadStatusLine: 'SSH-2.0-OpenSSH_9.6\\r\\n')"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1,2", ["status"],
     "/queries was cut short (4 bytes read, 96 more expected); please retry."),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",
     ["requirements", "set", "orders", "--lower", "1", "--upper", "2"],
     "was cut short (2 bytes read, 98 more expected); the update may or may not have been "
     "applied"),
])
def test_an_answer_that_is_not_the_apis_exits_1_with_a_message(
        reply: bytes, argv: list[str], what: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--url", _answering(reply), *argv)
    assert (code, out) == (1, "")
    assert err.startswith("spark-adaptive: ") and what in err and len(err.splitlines()) == 1


def _http(status: str, content_type: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


NOT_THE_API = "is this the spark-adaptive REST API (not the Spark UI)?"


@pytest.mark.parametrize(("reply", "argv", "what"), [
    (_http("404 Not Found", "text/html", b"<html>Spark UI</html>"), ["status"],
     "/queries answered HTTP 404 (Not Found) without the API's error JSON"),
    (_http("404 Not Found", "application/json", b'{"message": "no such app"}'),
     ["requirements", "get", "orders"], "answered HTTP 404 (Not Found) without the API's"),
    (_http("502 Bad Gateway", "text/plain", b"upstream down"), ["status"],
     "/queries answered HTTP 502 (Bad Gateway) without the API's error JSON"),
    (_http("200 OK", "application/json", b"[1, 2]"), ["status"],
     "/queries answered JSON that is not the API's answer"),
    (_http("200 OK", "application/json", b'{"a": 1}'), ["status"],
     "/queries answered JSON that is not the API's answer"),
    (_http("200 OK", "application/json", b'{"rescales": [{"time": "2024-01-01"}]}'),
     ["history", "orders"], "/queries/orders/rescales answered JSON that is not the API's"),
    (_http("200 OK", "application/json", b'{"rescales": 3}'),
     ["history", "orders"], "/queries/orders/rescales answered JSON that is not the API's"),
    (_http("200 OK", "application/json", b"[1, 2]"), ["autoscaler", "orders"],
     "/queries/orders/autoscaler answered JSON that is not the API's answer"),
    (_http("200 OK", "application/json", b"[1]"), ["requirements", "get", "orders"],
     "/queries/orders/resource-requirements answered JSON that is not the API's answer"),
], ids=["spark-ui-404", "json-404", "proxy-502", "list-of-numbers", "object-not-list",
        "time-as-text", "rescales-not-list", "autoscaler-list", "requirements-list"])
def test_another_servers_answer_exits_1_with_the_hint(
        reply: bytes, argv: list[str], what: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--url", _answering(reply), *argv)
    assert (code, out) == (1, "")
    assert err.startswith("spark-adaptive: ") and what in err, err
    assert err.rstrip().endswith(NOT_THE_API) and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [
    ["requirements", "set", "", "--lower", "2", "--upper", "2"],
    ["requirements", "get", ""],
    ["history", ""],
    ["autoscaler", ""],
])
def test_an_empty_query_is_refused_and_nothing_is_sent(
        sched: FakeScheduler, url: str, argv: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    # one query managed: "" would be the unique prefix of its id
    code, out, err = run(capsys, "--url", url, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("spark-adaptive: QUERY is empty")
    assert sched.queries_by_key["query-1"].applied == []


class ReadBackFails(FakeScheduler):
    def requirements(self, key: str) -> ResourceRequirements:
        raise TimeoutError("spark-adaptive-scheduler did not start the call within 30.0s")


@pytest.mark.parametrize("as_json", [False, True])
def test_an_accepted_update_is_reported_accepted_when_reading_it_back_fails(
        as_json: bool, capsys: pytest.CaptureFixture[str]) -> None:
    sched = ReadBackFails()
    with serving(sched) as server:
        code, out, err = run(capsys, "--url", server.url, *(["--json"] if as_json else []),
                             "requirements", "set", "orders", "--lower", "2", "--upper", "2")
    assert code == 0
    assert sched.queries_by_key["query-1"].applied == [ResourceRequirements(2, 2)]
    assert err.startswith("spark-adaptive: the new bounds were accepted, but reading them "
                          "back failed (HTTP 503: The scheduler did not answer in time")
    if as_json:
        assert json.loads(out) == {"requirements": None, "persisted": True}
    else:
        assert out.splitlines()[:2] == [
            "query orders: new bounds accepted (--lower 2 --upper 2)",
            "persisted beside the query's checkpoint"]


def test_a_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["requirements", "set", "orders", "--lower", "1"])
    assert e.value.code == 2


# -- the tables on their own -------------------------------------------------------------
def test_table_cuts_the_last_column_to_the_width() -> None:
    lines = tables.table(("A", "REASON"), [("x", "a long reason " * 5)], width=20)
    assert lines == ["A  REASON", "x  a long reason ..."]


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (0.04, "0.0s"), (12.345, "12.3s"), (65, "1m05s"), (3600, "60m00s")])
def test_duration(seconds: float | None, text: str) -> None:
    assert tables.duration(seconds) == text


def test_short_id_and_state() -> None:
    assert tables.short_id(QUERY_ID) == "0f9c8b1e"
    assert tables.short_id("query-3") == "query-3"
    lines = tables.status_lines([{"id": "query-3", "name": None, "state": "Finished",
                                  "status": "FAILED", "parallelism": 0, "executors": 1,
                                  "slots": 0, "requirements": {}, "lastDecision": None}])
    assert lines[1].split() == ["query-3", "-", "Finished(FAILED)", "0", "1", "0", "[?,", "?]",
                                "-"]


def test_autoscaler_lines_say_not_applied_only_of_a_rescale_recommended() -> None:
    def line(outcome: str, applied: bool) -> str:
        rec = {"outcome": outcome, "slots": 4, "partitions": 8, "kind": "live",
               "applied": applied}
        return next(x for x in tables.autoscaler_lines({"id": "q", "recommendation": rec})
                    if x.startswith("  recommendation"))

    assert line("scale-up", False).endswith("(live), not applied")
    assert line("scale-down", False).endswith("(live), not applied")
    assert line("scale-up", True).endswith("(live)")
    assert line("no-change", False).endswith("(live)")


def test_clock_shows_the_date_only_when_not_today() -> None:
    now = 1.7e9
    assert len(tables.clock(now, now=now)) == len("12:00:00")
    assert len(tables.clock(now - 3 * 86400, now=now)) == len("2023-11-11 12:00:00")


def test_autoscaler_lines_and_its_absence(sched: FakeScheduler, url: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--url", url, "autoscaler", "orders")
    assert code == 2 and "autoscaler.enabled=false" in err
    config = AutoscalerConfig(enabled=True, scaling_enabled=False)
    policy = QueryAutoscaler(config, query="orders", started_at=0.0)
    decision = policy.evaluate(QueryView(now=5.0, slots=2, partitions=4))
    sched.autoscaler_status = AutoscalerStatus(QUERY_ID, True, False, 180.0, 10.0, 4.5, True,
                                               decision, policy.snapshot())
    code, out, _ = run(capsys, "--url", url, "autoscaler", "orders")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "query 0f9c8b1e: autoscaler recommending only"
    assert lines[1] == "  window          0.0s of 3m00s, 0 micro-batches"
    assert "  recommendation  not-ready: 2 slots, 4 partitions (none)" in lines
    assert "  waiting for the slots it asked for to come" in lines
    assert lines[-1] == "  next evaluation in 4.5s"
    code, out, _ = run(capsys, "--url", url, "autoscaler", "orders", "--json")
    assert json.loads(out)["lastDecision"]["outcome"] == "not-ready"
    assert json.loads(out)["forecast"] is None  # forecast.enabled=false


def test_autoscaler_lines_show_the_forecast(sched: FakeScheduler, url: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    sched.autoscaler_status = AutoscalerStatus(
        QUERY_ID, True, True, 180.0, 10.0, 4.5, False, None, {},
        forecast=Forecast(1200.0, False, "F5: the newest buckets read 40% less than forecast",
                          900.0, 0.1, 2), ahead=3)
    code, out, _ = run(capsys, "--url", url, "autoscaler", "orders")
    assert code == 0
    lines = out.splitlines()
    at = lines.index("  forecast        1,200.0 rows/s within 15m00s, not in use, confidence 90%; "
                     "3 scale-ups ahead")
    assert lines[at + 1].strip().startswith("F5: the newest buckets")
    code, out, _ = run(capsys, "--url", url, "autoscaler", "orders", "--json")
    f = json.loads(out)["forecast"]
    assert (f["rate"], f["inUse"], f["aheadScaleUps"], f["confidence"]) == (1200.0, False, 3, 0.9)
