"""The operators' page's script in a headless Chromium, against the real server over a fake
scheduler: which query it shows first, and how it shows a record without a duration.

Skipped where Playwright or Chromium is missing (``make chromium`` installs Chromium; the
browser test of a real driver is ``tests/integration/test_page.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_fakes import FakeQuery, FakeScheduler, serving

from spark_adaptive.core.autoscaler.forecast import Forecast
from spark_adaptive.core.streaming import requirements as req
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.core.streaming.history import RescaleRecord, Trigger
from spark_adaptive.core.streaming.samples import Sample
from spark_adaptive.rest.facade import RescaleView

pytestmark = pytest.mark.timeout(120)

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LIVE_ID = "9a8b7c6d-0000-4000-8000-00000000000a"


def _chromium() -> str | None:
    for path in (os.environ.get("SPARK_ADAPTIVE_CHROMIUM", ""), "/usr/bin/chromium",
                 "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if path and Path(path).exists():
            return path
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    path = _chromium()
    if path is None:
        pytest.skip("no Chromium (make chromium installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _record(id_: int, outcome: Any, duration: float | None, reason: str) -> RescaleRecord:
    return RescaleRecord(id_, 1.7e9 + id_, Trigger.AUTOSCALER, "live", from_parallelism=4,
                         to_parallelism=4, from_slots=2, to_slots=4, reason=reason,
                         started=0.0, duration=duration, outcome=outcome)


class Restarted(FakeScheduler):
    """``orders`` finished (listed first), then started again from another checkpoint; the
    live one's history has a record its driver's stop cut short, and a pending one."""

    def __init__(self) -> None:
        super().__init__()
        self.queries_by_key["query-1"].finished = True
        self.add(FakeQuery("query-2", LIVE_ID, "orders", req.ResourceRequirements(1, 4),
                           checkpoint="/checkpoints/orders-2"))

    def rescales(self, key: str) -> RescaleView:
        view = super().rescales(key)
        if view.query_id != LIVE_ID:
            return view
        records = (_record(2, "failed", None, "cut short"),
                   _record(3, "completed", 2.5, "done"),
                   _record(4, "pending", None, "under way"))
        return RescaleView(view.query_id, view.key, records, view.counters)


def test_the_page_shows_the_live_query_first_and_a_dash_for_an_unknown_duration(
        browser: Any) -> None:
    with serving(Restarted()) as server:
        page = browser.new_page()
        try:
            page.goto(server.url + "/")
            page.wait_for_selector("#queries tbody tr.selected")
            selected = page.get_attribute("#queries tbody tr.selected", "data-query")
            assert selected == LIVE_ID  # not the finished one listed before it
            page.wait_for_function(
                "document.querySelectorAll('#history tbody tr').length === 3")
            rows = page.eval_on_selector_all(
                "#history tbody tr",
                "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        finally:
            page.close()
    durations = {row[-1]: row[5] for row in rows}  # newest first; the reason is last
    assert durations == {"under way": "…", "done": "2.5", "cut short": "–"}


class Forecasting(FakeScheduler):
    """One query whose samples carry the autoscaler's forecast: it expects the rise a
    minute before the input shows it."""

    def __init__(self, forecast: bool = True) -> None:
        super().__init__()
        q = self.queries_by_key["query-1"]
        t0 = 1.7e9
        q.samples = tuple(Sample(
            time=t0 + 2 * i, state="EXECUTING", parallelism=4, slots=1 if i < 40 else 4,
            executors=1 if i < 30 else 4, input_rate=100.0 if i < 60 else 900.0,
            processed_rate=100.0 if i < 60 else 880.0, backlog=None, batch_duration=1.0,
            forecast_rate=(900.0 if 30 <= i < 90 else 100.0) if forecast else None)
            for i in range(90))
        self.autoscaler_status = AutoscalerStatus(
            q.id, True, True, 20.0, 2.0, 1.0, False, None, {},
            forecast=Forecast(900.0, True, "F7: a rise forecast within 60s, 1 period back, "
                              "the forecast off by 4% over the last period", 60.0, 0.04, 1)
            if forecast else None,
            ahead=1 if forecast else 0)


def test_the_page_draws_the_forecast_beside_the_input_rate_and_only_when_there_is_one(
        browser: Any, tmp_path: Path) -> None:
    for scheduler, shown in ((Forecasting(), True), (Forecasting(forecast=False), False)):
        with serving(scheduler) as server:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            try:
                page.goto(server.url + "/")
                page.wait_for_selector("#chart path.s-in")  # the samples are drawn
                page.wait_for_selector("#autoscaler dl")
                box = page.inner_text("#autoscaler")
                legends = page.eval_on_selector_all(
                    "#chart .legend", "ts => ts.map(t => t.textContent)")
                lines = page.eval_on_selector_all("#chart path.s-fc", "ps => ps.length")
                if shown:
                    page.screenshot(path=str(tmp_path / "forecast.png"), full_page=True)
            finally:
                page.close()
        assert ("Forecast" in legends) is shown, legends
        assert ("in use, confidence 96 %; 1 scale-up ahead (F7" in box) is shown, box
        assert (lines > 0) is shown, lines
    if os.environ.get("SPARK_ADAPTIVE_SCREENSHOTS"):
        Path(os.environ["SPARK_ADAPTIVE_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        (tmp_path / "forecast.png").replace(
            Path(os.environ["SPARK_ADAPTIVE_SCREENSHOTS"]) / "forecast.png")
