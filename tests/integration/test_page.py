"""The operators' page in a real browser, and /metrics, on a real driver and cluster.

One cluster (two one-core workers), one stateful query ``counts`` at parallelism 2,
the REST API behind a bearer token, the autoscaler on in recommend-only mode (so its
figures are exported and it changes nothing). Headless Chromium, the system's, driven
by Playwright:

* the page asks for the token; a wrong one is refused with the API's message;
* with the right one it lists the query, its state and parallelism;
* a bad bound in the form shows the API's message word for word and changes nothing;
* lowering the upper bound in the form rescales the query 2 -> 1 (a restart), the page's
  history shows it, and the executor beyond the bound is given back;
* ``/metrics``, read with ``prometheus_client``'s parser, shows the parallelism gauge
  go from 2 to 1 and the restart counter of that trigger grow; every metric the example
  Grafana dashboard and alert rules name is one the driver really exports.

A screenshot of the page and the last scrape go to ``SPARK_ADAPTIVE_SCREENSHOTS`` (a
folder) when set; the docs' picture is taken that way.
"""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dashboard_names import (
    alert_expressions,
    dashboard_expressions,
    exported_names,
    metric_names,
)
from prometheus_client.parser import text_string_to_metric_families

import spark_adaptive
from spark_adaptive.rest.client import RestClient
from spark_adaptive.testing.session import wait_for_executors
from spark_adaptive.testing.streaming import (
    assert_counted_exactly_once,
    latest_aggregate,
    rate_aggregation,
    wait_until,
)

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "page-s3cret"
CONF = {
    "scheduler.submission.resource-stabilization-timeout": "3s",
    "scheduler.executing.cooldown-after-rescaling": "1s",
    "scheduler.executing.resource-stabilization-timeout": "2s",
    "rest.port": "0",
    "rest.token": TOKEN,
    "rest.samples.interval": "1s",
    "autoscaler.enabled": "true",
    "autoscaler.scaling.enabled": "false",
    "autoscaler.evaluation.interval": "2s",
    "autoscaler.metrics.window": "10s",
}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]


def _chromium() -> str:
    for path in (os.environ.get("SPARK_ADAPTIVE_CHROMIUM", ""), "/usr/bin/chromium",
                 "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if path and Path(path).exists():
            return path
    pytest.fail("no Chromium: run tests/ensure-chromium.sh (make test-integration does)")


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _scrape_text(url: str) -> str:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.read().decode()
    finally:
        conn.close()


def _scrape(url: str) -> dict[str, Any]:
    """The samples of one scrape by (name, labels)."""
    samples: dict[str, Any] = {}
    for family in text_string_to_metric_families(_scrape_text(url)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def _value(samples: dict[str, Any], name: str, **labels: str) -> float | None:
    for (n, got), value in samples.items():
        if n == name and all(dict(got).get(k) == v for k, v in labels.items()):
            return float(value)
    return None


def test_the_page_and_metrics_on_a_live_query(
        local_cluster_factory: Any, cluster_spark_factory: Any, tmp_path: Path,
        browser: Any) -> None:
    cluster = local_cluster_factory(2)
    spark = cluster_spark_factory(cluster, **{"spark.sql.shuffle.partitions": "2"})
    rt = spark_adaptive.enable(spark, **CONF)
    assert rt.rest is not None
    url = rt.rest.url
    api = RestClient(url, TOKEN)
    wait_for_executors(spark, 2)
    query = rate_aggregation(spark, tmp_path / "out", tmp_path / "checkpoint",
                             rows_per_second=20, keys=5, name="counts")
    wait_until(what="counts at parallelism 2 with a batch done", check=lambda: next(
        (q for q in api.get("/queries") if q["state"] == "Executing"
         and q["parallelism"] == 2 and q["lastProgress"]), None))

    before = _scrape(url)
    assert _value(before, "spark_adaptive_query_parallelism", query="counts") == 2
    restarts = {"name": "spark_adaptive_query_rescales_total", "query": "counts",
                "kind": "restart", "trigger": "REQUIREMENTS_CHANGED"}
    assert _value(before, **restarts) == 0

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    # Chromium logs every 4xx answer of a fetch as "Failed to load resource": the 401s of
    # the token flow and the 400 of the bad bound are expected; anything else is a problem.
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" and "Failed to load resource" not in m.text else None)
    page.goto(url + "/")

    # -- the token: asked for, a wrong one refused with the API's message -------------------
    page.wait_for_selector("#token-form", state="visible")
    page.fill("#token", "wrong")
    page.click("#token-submit")
    page.wait_for_function(
        "() => document.querySelector('#token-message').textContent.includes('bearer token')")
    page.fill("#token", TOKEN)
    page.click("#token-submit")
    page.wait_for_selector("#token-form", state="hidden")

    # -- the query, as the API has it ------------------------------------------------------
    row = page.locator(f'#queries tr[data-query="{query.id}"]')
    row.wait_for()
    assert "counts" in row.inner_text() and "Executing" in row.inner_text()
    page.wait_for_function("() => document.querySelector('#lower').value !== ''")
    assert page.input_value("#upper") == "2"

    # -- a bad bound: the API's message word for word, nothing changed -----------------------
    page.fill("#lower", "3")
    page.fill("#upper", "2")
    page.click("#apply")
    message = page.locator("#form-message")
    message.filter(has_text="greater than the upper bound").wait_for()
    assert "The lower bound 3 is greater than the upper bound 2." in message.inner_text()
    assert api.get(api.query_path("counts", "resource-requirements"))["parallelism"] == {
        "lowerBound": 1, "upperBound": 2}

    # -- lowering the upper bound rescales the query, and the history shows it --------------
    page.fill("#lower", "1")
    page.fill("#upper", "1")
    page.click("#apply")
    message.filter(has_text="Accepted").wait_for()
    history = page.locator("#history")
    history.filter(has_text="REQUIREMENTS_CHANGED").wait_for(timeout=120_000)
    wait_until(what="the rescale to 1 to complete", check=lambda: any(
        r["trigger"] == "REQUIREMENTS_CHANGED" and r["outcome"] == "completed"
        for r in api.get(api.query_path("counts", "rescales"))["rescales"]))
    page.wait_for_function(
        "() => [...document.querySelectorAll('#history tr')].some(r => "
        "r.textContent.includes('REQUIREMENTS_CHANGED') && r.textContent.includes('completed'))",
        timeout=30_000)
    row.filter(has_text="Executing").wait_for()
    page.wait_for_timeout(3000)  # a few samples after the rescale for the chart
    shots = os.environ.get("SPARK_ADAPTIVE_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / "page.png"), full_page=True)
    assert page.locator("#chart").locator("path, polyline").count() > 0
    assert not problems, problems

    # -- /metrics saw it ---------------------------------------------------------------------
    after = wait_until(what="the metrics to show parallelism 1", check=lambda: (
        lambda s: s if _value(s, "spark_adaptive_query_parallelism", query="counts") == 1
        else None)(_scrape(url)))
    assert _value(after, **restarts) == 1
    assert _value(after, "spark_adaptive_query_rescale_duration_seconds_count",
                  query="counts", kind="restart") == 1
    assert _value(after, "spark_adaptive_query_state", query="counts", state="Executing") == 1
    # The executor beyond the new bound is given back at a micro-batch boundary, as with the
    # autoscaler off: recommend-only mode changes nothing of its own.
    wait_until(what="the executor beyond the bound to be given back", check=lambda: _value(
        _scrape(url), "spark_adaptive_executors_alive") == 1)
    assert (_value(after, "spark_adaptive_autoscaler_decisions_total", query="counts",
                   outcome="not-ready") or 0) + (
        _value(after, "spark_adaptive_autoscaler_decisions_total", query="counts",
               outcome="no-change") or 0) + (
        _value(after, "spark_adaptive_autoscaler_decisions_total", query="counts",
               outcome="scale-down") or 0) >= 1

    # -- the dashboard and the alerts name only what the driver exports ----------------------
    text = _scrape_text(url)
    if shots:
        (Path(shots) / "metrics.txt").write_text(text)
    exported = exported_names(text)
    used = set()
    for expr in [*dashboard_expressions(ROOT / "examples/grafana/spark-adaptive.json"),
                 *alert_expressions(ROOT / "examples/prometheus/alerts.yml")]:
        used |= metric_names(expr)
    assert used and not used - exported, sorted(used - exported)

    query.stop()
    assert_counted_exactly_once(latest_aggregate(tmp_path / "out"), keys=5)
