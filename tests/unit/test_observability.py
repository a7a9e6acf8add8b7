"""What operators watch: the history's cumulative tallies, the sample ring, /metrics, and the
page's routes (served without the token, with a strict content security policy)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from openapi_schema_validator import OAS30Validator
from openapi_schema_validator import validate as validate_value
from prometheus_client.parser import text_string_to_metric_families
from rest_fakes import QUERY_ID, FakeQuery, FakeScheduler, call, serving
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.events import SourceProgress
from spark_adaptive.core.loop import EventLoop
from spark_adaptive.core.streaming import requirements as req
from spark_adaptive.core.streaming.history import (
    DURATION_BUCKETS,
    DurationHistogram,
    RescaleHistory,
    Trigger,
)
from spark_adaptive.core.streaming.persistence import (
    MemoryRequirementsStore,
    PersistedRequirements,
)
from spark_adaptive.core.streaming.samples import Sample, Sampler, SampleRing
from spark_adaptive.core.streaming.states import StateName
from spark_adaptive.rest import openapi, page
from spark_adaptive.rest.api import is_public
from spark_adaptive.rest.facade import RuntimeFacade
from spark_adaptive.rest.metrics import Exporter, flat_figures


def _open(h: RescaleHistory, trigger: Trigger, kind: Any) -> None:
    h.open(trigger, kind, from_parallelism=2, to_parallelism=4, from_slots=2, to_slots=4,
           reason="test")


def test_history_tallies_count_past_the_records_it_keeps() -> None:
    vt = VirtualTime()
    h = RescaleHistory(vt, limit=2)
    _open(h, Trigger.INITIAL_SCHEDULE, "initial")
    vt.advance(4)
    h.complete_pending()
    for seconds in (0.3, 1.5, 45.0):
        _open(h, Trigger.AUTOSCALER, "live")
        vt.advance(seconds)
        h.complete_pending()
    _open(h, Trigger.NEW_RESOURCES, "restart")
    _open(h, Trigger.FAILURE, "restart")  # supersedes the one before
    vt.advance(2)
    h.fail_pending()

    t = h.tallies
    assert len(h.records()) == 2  # the records are bounded; the tallies are not
    assert dict(t.opened) == {("live", Trigger.AUTOSCALER): 3,
                              ("restart", Trigger.NEW_RESOURCES): 1,
                              ("restart", Trigger.FAILURE): 1}
    assert dict(t.finished) == {("live", "completed"): 3, ("restart", "superseded"): 1,
                                ("restart", "failed"): 1}
    live = dict(t.durations)["live"]
    assert live.count == 3 and live.total == pytest.approx(46.8)
    assert dict(zip(DURATION_BUCKETS, live.counts, strict=True))[0.5] == 1
    assert dict(zip(DURATION_BUCKETS, live.counts, strict=True))[2.0] == 2
    assert dict(zip(DURATION_BUCKETS, live.counts, strict=True))[60.0] == 3
    assert "restart" not in dict(t.durations)  # neither restart completed
    assert t.last_duration == pytest.approx(45.0)  # the initial start is not a rescale


def test_duration_histogram_buckets_are_cumulative() -> None:
    h = DurationHistogram().observe(0.5).observe(7.0).observe(1000.0)
    assert h.counts[0] == 1  # le=0.5 includes 0.5
    assert h.counts[DURATION_BUCKETS.index(10.0)] == 2
    assert h.counts[-1] == 2 and h.count == 3  # 1000 s only in +Inf


def test_a_ring_keeps_its_newest_samples() -> None:
    ring = SampleRing(3)
    for i in range(5):
        ring.add(Sample(float(i), "Executing", 2, 2, 1, None, None, None, None))
    assert [s.time for s in ring.samples()] == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="at least 1"):
        SampleRing(0)


def _app_with_query() -> tuple[App, FakeDriver]:
    app = App()
    app.add("1", cores=2)
    app.add("2", cores=2)
    driver = FakeDriver(query_info("orders", partitions=4))
    app.register(driver)
    return app, driver


def test_the_sampler_samples_every_query_on_its_timer() -> None:
    app, driver = _app_with_query()
    sampler = Sampler(app.scheduler, app.vt, interval=2.0, capacity=4)
    app.advance(3)
    assert len(sampler.samples("orders")) == 1
    first = sampler.samples("orders")[0]
    assert (first.state, first.parallelism, first.executors) == ("Executing", 4, 2)
    assert first.input_rate is None  # no micro-batch yet

    progress = driver.progress()
    app.event(progress.__class__(**{**progress.__dict__, "input_rows_per_second": 120.0,
                                    "processed_rows_per_second": 150.0,
                                    "sources": (SourceProgress("s", 10, None, None,
                                                               end_offset="100",
                                                               latest_offset="160"),)}))
    app.advance(2)
    last = sampler.samples("orders")[-1]
    assert (last.input_rate, last.processed_rate, last.backlog) == (120.0, 150.0, 60.0)
    app.advance(20)
    assert len(sampler.samples("orders")) == 4  # bounded
    assert sampler.held() == 4
    assert sampler.samples("nope") == ()

    sampler.close()
    app.advance(10)
    assert len(sampler.samples("orders")) == 4  # no timer after close


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], name: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {name}{labels}")


def test_metrics_of_a_real_scheduler() -> None:
    app, driver = _app_with_query()
    sampler = Sampler(app.scheduler, app.vt, interval=2.0, capacity=10)
    q = app.scheduler.query("orders")
    q.history.open(Trigger.AUTOSCALER, "live", from_parallelism=4, to_parallelism=4,
                   from_slots=4, to_slots=2, reason="load fell")
    app.advance(3)
    q.history.complete_pending()
    facade = RuntimeFacade(EventLoop(), app.scheduler,  # a loop never started runs in place
                           PersistedRequirements(MemoryRequirementsStore(),
                                                 app.scheduler.settings), sampler=sampler)
    data, content_type = Exporter(facade).render()
    assert content_type.startswith("text/plain")
    fam = _families(data.decode())

    assert _value(fam, "spark_adaptive_query_parallelism", query="orders") == 4
    assert _value(fam, "spark_adaptive_query_state", query="orders", state="Executing") == 1
    assert _value(fam, "spark_adaptive_query_state", query="orders", state="Restarting") == 0
    assert _value(fam, "spark_adaptive_query_rescales_total", query="orders", kind="live",
                  trigger="AUTOSCALER") == 1
    assert _value(fam, "spark_adaptive_query_rescales_total", query="orders", kind="restart",
                  trigger="AUTOSCALER") == 0
    assert _value(fam, "spark_adaptive_query_rescale_duration_seconds_count", query="orders",
                  kind="live") == 1
    assert _value(fam, "spark_adaptive_query_rescale_duration_seconds_bucket", query="orders",
                  kind="live", le="5.0") == 1
    assert _value(fam, "spark_adaptive_query_rescale_duration_seconds_bucket", query="orders",
                  kind="live", le="2.0") == 0
    assert _value(fam, "spark_adaptive_query_last_rescale_duration_seconds",
                  query="orders") == pytest.approx(3.0)
    assert _value(fam, "spark_adaptive_query_state_seconds", query="orders") >= 3
    assert _value(fam, "spark_adaptive_query_parallelism_upper_bound", query="orders") == 4
    assert _value(fam, "spark_adaptive_executors_alive") == 2
    assert fam["spark_adaptive_query_rescales"].type == "counter"
    assert fam["spark_adaptive_query_rescale_duration_seconds"].type == "histogram"
    assert "spark_adaptive_autoscaler_target_rate" not in fam  # the autoscaler is off

    om, om_type = Exporter(facade).render("application/openmetrics-text; version=1.0.0")
    assert om_type.startswith("application/openmetrics-text") and om.endswith(b"# EOF\n")


def test_metrics_need_the_token_and_the_page_does_not() -> None:
    with serving(FakeScheduler(), token="s3cret") as server:
        assert call(server.url, "GET", "/metrics").status == 401
        reply = call(server.url, "GET", "/metrics",
                     headers={"Authorization": "Bearer s3cret"})
        assert reply.status == 200 and reply.headers["content-type"].startswith("text/plain")
        assert 'spark_adaptive_query_parallelism{query="orders"} 2.0' in reply.body

        page = call(server.url, "GET", "/")
        assert page.status == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "/ui/app.js" in page.body
        for name in ("app.js", "style.css"):
            assert call(server.url, "GET", f"/ui/{name}").status == 200

        # Only the page is public: the API, and what is not the page, still need the token.
        for path in ("/queries", "/openapi.json", "/ui/../queries", "/favicon.ico"):
            assert call(server.url, "GET", path).status == 401, path
        assert call(server.url, "PUT", "/", raw=b"{}").status == 401


@pytest.mark.parametrize("path", ["/ui/nope.js", "/ui/..%2Fapi.py", "/ui/.hidden.js",
                                  "/ui/__init__.py", "/ui/static"])
def test_only_the_page_files_are_served(path: str) -> None:
    with serving(FakeScheduler()) as server:
        reply = call(server.url, "GET", path)
        assert reply.status == 404
        assert reply.body["errors"]


def test_a_page_file_name_too_long_for_the_file_system_is_404(
        caplog: pytest.LogCaptureFixture) -> None:
    with serving(FakeScheduler(), token="s3cret") as server:  # no token: the page is public
        reply = call(server.url, "GET", "/ui/" + "a" * 300 + ".js")
    assert reply.status == 404, reply.body
    assert reply.body == {"errors": [f"No such file of the page: {'a' * 300}.js."]}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_page_files_are_looked_up_among_the_shipped_ones_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Any name may be asked for without the token: none reaches the file system, and none
    is kept (a cache of every name asked for would grow without bound)."""
    index = page.asset("index.html")
    assert index is not None and index[1] == "text/html; charset=utf-8"

    def no_file_system(*args: Any) -> Any:
        raise AssertionError("a requested name reached the file system")

    monkeypatch.setattr(page, "files", no_file_system)
    with serving(FakeScheduler(), token="s3cret") as server:
        for i in range(300):
            assert call(server.url, "GET", f"/ui/{'x' * 200}{i}.js").status == 404
        assert call(server.url, "GET", "/ui/app.js").status == 200
    assert page.asset("index.html") == index
    cache_info = getattr(page.asset, "cache_info", None)
    assert cache_info is None or cache_info().currsize <= 4, cache_info()


@pytest.mark.parametrize("accept", [
    "application/openmetrics-text; version=abc",
    "application/openmetrics-text; version=1.x",
    "text/plain; version=abc",
    'application/openmetrics-text; version="1.0.0"',
])
def test_an_unreadable_metrics_version_gets_the_text_format(
        accept: str, caplog: pytest.LogCaptureFixture) -> None:
    with serving(FakeScheduler()) as server:
        reply = call(server.url, "GET", "/metrics", headers={"Accept": accept})
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'spark_adaptive_query_parallelism{query="orders"} 2.0' in reply.body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_readable_metrics_version_beside_an_unreadable_one_is_served() -> None:
    data, content_type = Exporter(FakeScheduler()).render(
        "application/openmetrics-text; version=abc, application/openmetrics-text; "
        "version=1.0.0")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert data.endswith(b"# EOF\n")


def test_samples_answer_conforms_to_the_document() -> None:
    fake = FakeScheduler()
    fake.queries_by_key["query-1"].samples = (
        Sample(1.7e9, "Executing", 2, 2, 1, 10.0, 12.0, None, 0.8),
        Sample(1.7e9 + 2, "Restarting", 0, 0, 1, None, None, None, None))
    with serving(fake) as server:
        reply = call(server.url, "GET", f"/queries/{QUERY_ID}/samples")
    assert reply.status == 200
    assert reply.body["samples"][0]["inputRate"] == 10.0
    assert reply.body["interval"] == 2.0 and reply.body["capacity"] == 300
    doc = openapi.document()
    validate_value(reply.body, {**doc["components"]["schemas"]["Samples"],
                                "components": doc["components"]}, cls=OAS30Validator)


def test_two_queries_of_one_name_get_distinct_labels() -> None:
    fake = FakeScheduler()
    fake.add(FakeQuery("query-2", "second-id", "orders", req.ResourceRequirements(1, 2)))
    fam = _families(Exporter(fake).render()[0].decode())
    labels = {s.labels["query"] for s in fam["spark_adaptive_query_parallelism"].samples}
    # Both live: the bare name is the newest's, as GET /queries/orders resolves it.
    assert labels == {"orders", f"orders ({QUERY_ID})"}


def test_the_bare_name_label_is_the_live_querys() -> None:
    fake = FakeScheduler()
    fake.queries_by_key["query-1"].finished = True  # the app stopped it, and started it anew
    fake.add(FakeQuery("query-2", "second-id", "orders", req.ResourceRequirements(1, 2)))
    fam = _families(Exporter(fake).render()[0].decode())
    finished = {s.labels["query"] for s in fam["spark_adaptive_query_state"].samples
                if s.labels["state"] == "Finished" and s.value == 1}
    assert finished == {f"orders ({QUERY_ID})"}
    bound = {s.labels["query"]: s.value
             for s in fam["spark_adaptive_query_parallelism_upper_bound"].samples}
    assert bound == {"orders": 2, f"orders ({QUERY_ID})": 4}
    fake.queries_by_key["query-2"].finished = True  # none live: the newest keeps it
    fam = _families(Exporter(fake).render()[0].decode())
    bound = {s.labels["query"]: s.value
             for s in fam["spark_adaptive_query_parallelism_upper_bound"].samples}
    assert bound == {"orders": 2, f"orders ({QUERY_ID})": 4}


def test_a_name_started_again_forgets_its_older_finished_queries() -> None:
    """Each start of a named query from a new checkpoint is a new query: the live one takes
    the name's series, the newest finished one stays beside it (its end can be read), and
    older ones are forgotten with their samples, so nothing grows with each start."""
    app = App()
    app.add("1", cores=2)
    app.add("2", cores=2)
    sampler = Sampler(app.scheduler, app.vt, interval=2.0, capacity=300)
    for i in range(4):
        key = f"id-{i}"
        driver = FakeDriver(query_info(key, name="orders", checkpoint=f"/cp/{i}"),
                            query_id=key)
        app.register(driver)
        app.event(driver.progress())
        app.advance(10)
        if i < 3:
            app.event(driver.terminated())  # the app stops it, and starts it again
            app.advance(1)
    assert [q.key for q in app.scheduler.queries()] == ["id-2", "id-3"]
    assert app.scheduler.query("orders").key == "id-3"
    assert [r.trigger for r in app.scheduler.history("id-2")] == [Trigger.INITIAL_SCHEDULE]
    assert sampler.samples("id-0") == sampler.samples("id-1") == ()
    assert sampler.samples("id-2") and sampler.samples("id-3")
    facade = RuntimeFacade(EventLoop(), app.scheduler,
                           PersistedRequirements(MemoryRequirementsStore(),
                                                 app.scheduler.settings), sampler=sampler)
    fam = _families(Exporter(facade).render()[0].decode())
    parallelism = {s.labels["query"]: s.value
                   for s in fam["spark_adaptive_query_parallelism"].samples}
    assert parallelism == {"orders": 4, "orders (id-2)": 0}
    app.register(FakeDriver(query_info("other", checkpoint="/cp/other"), query_id="other"))
    assert len(app.scheduler.queries()) == 3  # another name forgets nothing


def test_flat_figures_for_sparks_metrics_system() -> None:
    fake = FakeScheduler()
    figures = flat_figures(fake.metrics())
    assert figures["query.orders.parallelism"] == 2.0
    assert figures["query.orders.state.code"] == list(StateName).index(StateName.EXECUTING)
    assert figures["executors.alive"] == 2.0 and figures["executors.declared"] == 2.0
    assert all(isinstance(v, float) for v in figures.values())
    fake.queries_by_key["query-1"].name = "a name.with dots/and slashes"
    assert "query.a_name_with_dots_and_slashes.parallelism" in flat_figures(fake.metrics())


def test_flat_names_stay_distinct_once_cleaned() -> None:
    fake = FakeScheduler()
    fake.add(FakeQuery("k3", "3c1d5e7a-0000-4000-8000-000000000003", "a.b",
                       req.ResourceRequirements(1, 2)))
    fake.add(FakeQuery("k4", "4d2e6f8b-0000-4000-8000-000000000004", "a_b",
                       req.ResourceRequirements(1, 3)))
    figures = flat_figures(fake.metrics())
    uppers = {k: v for k, v in figures.items() if k.endswith(".bounds.upper")}
    assert uppers == {"query.orders.bounds.upper": 4.0, "query.a_b.bounds.upper": 2.0,
                      "query.a_b_4d2e6f8b.bounds.upper": 3.0}


@pytest.mark.parametrize(("target", "public"), [
    ("/", True), ("/?x=1", True), ("/ui/app.js", True), ("/ui/app.js/", True),
    ("/ui/app.js?v=2#top", True), ("http://127.0.0.1:4050/ui/style.css", True),
    ("/ui", False), ("/ui/", False), ("/ui/x/y", False), ("/ui/../queries", False),
    ("/queries", False), ("/metrics", False), ("//", False), ("http://[::1/ui/a.js", False),
])
def test_exactly_the_page_routes_are_public(target: str, public: bool) -> None:
    assert is_public(target) is public


def test_the_page_files_answer_without_the_token_as_routed() -> None:
    with serving(FakeScheduler(), token="s3cret") as server:
        for path in ("/ui/app.js/", "/?from=bookmark"):
            assert call(server.url, "GET", path).status == 200, path
