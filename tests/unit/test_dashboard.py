"""The monitoring examples: the Grafana dashboard and the Prometheus alert rules.

They use only metric names that /metrics exports (the real exporter's output), and the
dashboard is one Grafana imports (valid JSON, a datasource input, unique panel ids and
titles, a query in every panel).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from dashboard_names import (
    alert_expressions,
    as_promql,
    dashboard_expressions,
    exported_names,
    load_yaml,
    metric_names,
    panels,
)
from rest_fakes import QUERY_ID, FakeScheduler

from spark_adaptive.core.autoscaler import AutoscalerConfig, QueryAutoscaler, QueryView
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.rest.metrics import Exporter

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "grafana" / "spark-adaptive.json"
ALERTS = ROOT / "examples" / "prometheus" / "alerts.yml"
SCRAPE_CONFIG = ROOT / "examples" / "prometheus" / "prometheus.yml"

def _exported() -> frozenset[str]:
    """Every name the real exporter writes, for a query with an autoscaler decision: the
    series, and the families declared without a value yet (a source with no backlog)."""
    fake = FakeScheduler()
    policy = QueryAutoscaler(AutoscalerConfig(enabled=True), query="orders", started_at=0.0)
    decision = policy.evaluate(QueryView(now=5.0, slots=2, partitions=4))
    fake.autoscaler_status = AutoscalerStatus(QUERY_ID, True, True, 180.0, 10.0, 4.5, False,
                                              decision, policy.snapshot())
    return frozenset(exported_names(Exporter(fake).render()[0].decode()))


EXPORTED = _exported()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _content_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(dashboard) if p.get("type") != "row"]


# metric_names


def test_metric_names_of_a_histogram_quantile() -> None:
    expr = ('histogram_quantile(0.95, sum by (le, query) (rate('
            'spark_adaptive_query_rescale_duration_seconds_bucket{query=~"$query"}[5m])))')
    assert metric_names(expr) == {"spark_adaptive_query_rescale_duration_seconds_bucket"}


def test_metric_names_ignore_label_values_that_look_like_metric_names() -> None:
    expr = ('spark_adaptive_query_state{state="spark_adaptive_query_failures_total", '
            "query=~'spark_adaptive_.*', job=`spark_adaptive_raw`} == 1")
    assert metric_names(expr) == {"spark_adaptive_query_state"}


def test_metric_names_ignore_label_names_functions_and_variables() -> None:
    expr = ("sum without (spark_adaptive_label)"
            " (spark_adaptive_query_slots{spark_adaptive_x=\"1\"})"
            " * on (query) group_left (spark_adaptive_other) spark_adaptive_executors_alive"
            " / ignoring (spark_adaptive_y)"
            " spark_adaptive_fn(spark_adaptive_info[$__rate_interval])"
            " + ${spark_adaptive_variable} # spark_adaptive_in_a_comment")
    assert metric_names(expr) == {"spark_adaptive_query_slots", "spark_adaptive_executors_alive",
                                  "spark_adaptive_info"}


def test_metric_names_of_grafana_variable_queries() -> None:
    assert metric_names("label_values(spark_adaptive_query_parallelism{job=~\"$job\"}, query)") \
        == {"spark_adaptive_query_parallelism"}
    assert metric_names("label_values(spark_adaptive_info, spark_adaptive_label)") \
        == {"spark_adaptive_info"}


def test_metric_names_of_other_metrics_and_numbers() -> None:
    assert metric_names("up{job=\"spark\"} == 0 and process_cpu_seconds_total > 1e3") == set()
    assert metric_names("spark_adaptive_query_slots offset 5m >= bool 2") \
        == {"spark_adaptive_query_slots"}


def test_as_promql_replaces_grafana_variables() -> None:
    assert as_promql('rate(x{query=~"$query", job=~"${job:regex}"}[$__rate_interval])') \
        == 'rate(x{query=~".*", job=~".*"}[1m])'
    assert as_promql('label_values(spark_adaptive_info{job=~"$job"}, instance)') \
        == 'spark_adaptive_info{job=~".*"}'


def test_dashboard_expressions_recurse_into_rows(tmp_path: Path) -> None:
    nested = {
        "panels": [
            {"type": "timeseries", "targets": [{"expr": "a_top", "refId": "A"}]},
            {"type": "row", "collapsed": True, "panels": [
                {"type": "timeseries", "targets": [{"expr": "b_nested", "refId": "A"},
                                                   {"refId": "B"}]}]}],
        "templating": {"list": [
            {"type": "query", "name": "q", "query": "label_values(c_string, query)"},
            {"type": "query", "name": "r", "query": {"query": "label_values(d_object, x)"}},
            {"type": "custom", "name": "s", "query": "one,two"},
            {"type": "datasource", "name": "ds", "query": "prometheus"}]},
    }
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(nested), encoding="utf-8")
    assert dashboard_expressions(path) == [
        "a_top", "b_nested", "label_values(c_string, query)", "label_values(d_object, x)"]


def test_alert_expressions_read_every_rule(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text("groups:\n"
                    "  - name: a\n"
                    "    rules:\n"
                    "      - alert: A\n"
                    "        expr: x > 1\n"
                    "      - record: b:sum\n"
                    "        expr: sum(y)\n"
                    "  - name: empty\n"
                    "    rules: []\n", encoding="utf-8")
    assert alert_expressions(path) == ["x > 1", "sum(y)"]


# The dashboard


def test_dashboard_is_importable_json(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] and dashboard["uid"]
    assert dashboard["id"] is None  # Grafana gives it one on import
    assert dashboard["schemaVersion"] >= 39
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"


def test_panel_ids_and_titles_are_unique(dashboard: dict[str, Any]) -> None:
    all_panels = panels(dashboard)
    ids = [p["id"] for p in all_panels]
    titles = [p["title"] for p in all_panels]
    assert len(ids) == len(set(ids)), ids
    assert len(titles) == len(set(titles)), titles
    assert all(isinstance(i, int) for i in ids)


def test_every_panel_has_a_target_a_description_and_the_datasource(
        dashboard: dict[str, Any]) -> None:
    content = _content_panels(dashboard)
    assert content
    for panel in content:
        targets = panel.get("targets") or []
        assert targets, panel["title"]
        assert all(t.get("expr", "").strip() for t in targets), panel["title"]
        ref_ids = [t["refId"] for t in targets]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        assert panel.get("description", "").strip(), panel["title"]
        for source in [panel["datasource"], *(t["datasource"] for t in targets)]:
            assert source == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]


def test_panels_fit_the_grid(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        assert pos["h"] > 0 and pos["y"] >= 0, panel["title"]


def test_the_query_variable_lists_the_queries(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    query = variables["query"]
    assert query["type"] == "query"
    assert query["multi"] and query["includeAll"]
    assert query["query"].startswith("label_values(spark_adaptive_query_parallelism")
    assert query["query"].rstrip().endswith(", query)")
    for v in variables.values():
        assert v["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def test_every_per_query_expression_is_filtered_by_the_query_variable() -> None:
    per_query = {n for n in EXPORTED
                 if n.startswith(("spark_adaptive_query_", "spark_adaptive_autoscaler_"))}
    for expr in dashboard_expressions(DASHBOARD):
        if metric_names(expr) & per_query and not expr.startswith("label_values("):
            assert 'query=~"$query"' in expr, expr


def test_the_dashboard_uses_only_exported_names() -> None:
    exprs = dashboard_expressions(DASHBOARD)
    used = set().union(*(metric_names(e) for e in exprs))
    assert used, "no metric name found in the dashboard"
    assert used <= EXPORTED, sorted(used - EXPORTED)


def test_the_dashboard_shows_every_exported_metric() -> None:
    used = set().union(*(metric_names(e) for e in dashboard_expressions(DASHBOARD)))
    # Families are shown through their series; the drivers' info and the samples held are
    # the drivers table's and nothing to chart.
    shown = {n for n in EXPORTED if n != "spark_adaptive_query_rescale_duration_seconds"
             and n != "spark_adaptive_samples_held"}
    assert shown <= used, sorted(shown - used)


# The alert rules and the scrape config


def test_the_alerts_use_only_exported_names() -> None:
    exprs = alert_expressions(ALERTS)
    assert exprs
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= EXPORTED, (expr, sorted(names - EXPORTED))


def test_every_alert_has_a_severity_and_a_summary() -> None:
    rules = [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_scrape_config_scrapes_metrics_with_the_token() -> None:
    config = load_yaml(SCRAPE_CONFIG)
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"]
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:4050"]
    assert config["rule_files"] == [ALERTS.name]


# With Prometheus's promtool on the PATH (Debian: apt-get install prometheus), every
# expression is parsed by Prometheus itself.
_PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(_PROMTOOL is None, reason="promtool is not installed")
def test_promtool_parses_every_expression(tmp_path: Path) -> None:
    assert _PROMTOOL is not None
    exprs = [as_promql(e) for e in dashboard_expressions(DASHBOARD)]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expression_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    recorded = tmp_path / "dashboard_rules.yml"
    recorded.write_text(json.dumps(rules), encoding="utf-8")  # JSON is YAML
    for path in (recorded, ALERTS):
        done = subprocess.run([_PROMTOOL, "check", "rules", str(path)], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
