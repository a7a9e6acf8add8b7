"""The metric names the monitoring examples use, read from their PromQL.

Plain functions, no pytest: the dashboard's and the alert rules' tests use them, and so can a
test that compares them with what a real driver's ``GET /metrics`` exports.

* :func:`metric_names` -- the ``spark_adaptive_*`` metric names one expression refers to;
* :func:`dashboard_expressions` -- every ``expr`` of a Grafana dashboard's panel targets
  (rows and nested panels included) and every query of its templating variables;
* :func:`alert_expressions` -- every ``expr`` of a Prometheus rule file (:func:`load_yaml`
  reads one);
* :func:`as_promql` -- an expression with Grafana's variables replaced, for a PromQL parser;
* :func:`exported_names` -- the names a ``/metrics`` text offers to expressions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "spark_adaptive_"

# String literals: "..." and '...' with backslash escapes, `...` raw.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', re.DOTALL)
_COMMENT = re.compile(r"#[^\n]*")
# Label matchers: {job="x", state=~"..."} (strings are gone by then, so no brace is quoted).
_MATCHERS = re.compile(r"\{[^{}]*\}")
# Label lists: by (...), without (...), on (...), ignoring (...), group_left (...),
# group_right (...).
_LABEL_LIST = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
# Grafana's label_values(metric, label): its last argument is a label name.
_LABEL_VALUES = re.compile(r"\blabel_values\s*\(([^()]*?),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)")
# A Grafana variable: $name, ${name}, ${name:format}, [[name]].
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]")
# A whole identifier (not part of a longer word) that is not a function (followed by "(").
_NAME = re.compile(r"(?<![A-Za-z0-9_:$.])([A-Za-z_:][A-Za-z0-9_:]*)(?![A-Za-z0-9_:]|\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` refers to: identifiers that start with ``spark_adaptive_``.

    Label names (in matchers, ``by``/``without``/``on``/``ignoring``/``group_*`` lists and
    ``label_values``' last argument), quoted strings (label values, regexes), comments,
    function names and Grafana variables are not metric names, whatever they look like.
    """
    text = _STRING.sub('""', expr)
    text = _COMMENT.sub("", text)
    text = _GRAFANA_VARIABLE.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _LABEL_LIST.sub("", text)
    text = _LABEL_VALUES.sub(r"label_values(\1)", text)
    return {name for name in _NAME.findall(text) if name.startswith(PREFIX)}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel of a dashboard, rows and the panels nested in (collapsed) rows included."""
    return list(_panels(dashboard.get("panels") or []))


def _variable_query(variable: dict[str, Any]) -> str | None:
    if variable.get("type") != "query":
        return None
    query = variable.get("query")
    if isinstance(query, dict):  # the variable editor's form: {"query": "...", "refId": ...}
        query = query.get("query")
    return query if isinstance(query, str) and query.strip() else None


def dashboard_expressions(path: str | Path) -> list[str]:
    """Every ``expr`` of every panel target (rows and nested panels included) and the query
    of every templating variable of type ``query``, in the order of the file."""
    dashboard = json.loads(Path(path).read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in panels(dashboard)
             for target in panel.get("targets") or [] if target.get("expr")]
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = _variable_query(variable)
        if query is not None:
            exprs.append(query)
    return exprs


def load_yaml(path: str | Path) -> Any:
    """A YAML file (a Prometheus configuration or rule file) as Python values."""
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def alert_expressions(path: str | Path) -> list[str]:
    """Every ``expr`` of a Prometheus rule file (alerting and recording rules alike)."""
    document = load_yaml(path) or {}
    return [str(rule["expr"]) for group in document.get("groups") or []
            for rule in group.get("rules") or [] if "expr" in rule]


# Values for Grafana's variables that keep an expression valid PromQL.
_SUBSTITUTES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h",
                "__interval_ms": "60000", "__range_s": "3600", "__range_ms": "3600000"}


def as_promql(expr: str) -> str:
    """``expr`` with Grafana's variables replaced so that a PromQL parser takes it: the
    built-in intervals by durations, any other variable (used in a regex matcher) by
    ``.*``; a ``label_values(selector, label)`` query becomes its selector."""

    def value(match: re.Match[str]) -> str:
        name = match.group(0).strip("${}[]").split(":")[0]
        return _SUBSTITUTES.get(name, ".*")

    text = _GRAFANA_VARIABLE.sub(value, expr)
    m = re.fullmatch(r"\s*label_values\s*\((.*?)(?:,\s*[A-Za-z_][A-Za-z0-9_]*)?\s*\)\s*",
                     text, re.DOTALL)
    return m.group(1) if m else text


def exported_names(text: str) -> set[str]:
    """The names an expression may use against this exposition: every series written, and
    every gauge or counter family declared, with or without a value yet (a counter's series
    is its name with ``_total``; a histogram has only its ``_bucket``, ``_sum``, ``_count``)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names |= {s.name for s in family.samples}
        if family.type == "gauge":
            names.add(family.name)
        elif family.type == "counter":
            names.add(family.name + "_total")
    return names
