"""The OpenAPI document: valid OpenAPI 3.0, and it describes every route, method and answer."""

from __future__ import annotations

import re
from typing import Any

import pytest
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30Validator
from openapi_schema_validator import validate as validate_value
from openapi_spec_validator import validate
from rest_fakes import QUERY_ID, FakeScheduler, bounds, call, serving

from spark_adaptive.core.autoscaler import (
    AutoscalerConfig,
    LoadSample,
    QueryAutoscaler,
    QueryView,
)
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.rest import openapi
from spark_adaptive.rest.api import _ROUTES

# Every (path, method) the API routes, with the statuses it can answer (401 aside, and the
# HTTP layer's answers to any request, each operation's "default").
EXPECTED = {
    ("/queries", "get"): {"200", "503"},
    ("/queries/{id}", "get"): {"200", "404", "503"},
    ("/queries/{id}/resource-requirements", "get"): {"200", "404", "503"},
    ("/queries/{id}/resource-requirements", "put"):
        {"200", "400", "404", "409", "413", "415", "500", "503"},
    ("/queries/{id}/rescales", "get"): {"200", "404", "503"},
    ("/queries/{id}/autoscaler", "get"): {"200", "404", "503"},
    ("/queries/{id}/samples", "get"): {"200", "404", "503"},
    ("/metrics", "get"): {"200", "503"},
    ("/", "get"): {"200"},
    ("/ui/{file}", "get"): {"200", "404"},
    ("/openapi.json", "get"): {"200"},
}
PUBLIC = {("/", "get"), ("/ui/{file}", "get")}  # the page: no token asked


@pytest.mark.parametrize("token", [False, True])
def test_the_document_is_valid_openapi(token: bool) -> None:
    validate(openapi.document("http://127.0.0.1:4050", token))


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    return {(path, method): set(op["responses"]) - {"default"}
            for path, item in doc["paths"].items()
            for method, op in item.items() if method != "parameters"}


def test_every_route_and_status_is_documented() -> None:
    assert _operations(openapi.document()) == EXPECTED
    with_token = _operations(openapi.document(token_required=True))
    assert with_token == {k: v if k in PUBLIC else v | {"401"} for k, v in EXPECTED.items()}


def test_the_documented_routes_are_the_routed_ones() -> None:
    routed = set()
    for pattern, methods in _ROUTES:
        path = re.sub(r"\(\?P<(\w+)>\[\^/\]\+\)", r"{\1}", pattern.pattern).replace("\\.", ".")
        routed |= {(path, m.lower()) for m in methods}
    assert routed == set(EXPECTED)


def test_error_answers_use_the_error_schema() -> None:
    doc = openapi.document()
    for (path, method), codes in EXPECTED.items():
        for code in (codes - {"200"}) | {"default"}:
            schema = doc["paths"][path][method]["responses"][code]["content"][
                "application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, code)


def test_transport_errors_and_405_are_described() -> None:
    doc = openapi.document()
    for item in doc["paths"].values():
        for method, op in item.items():
            if method != "parameters":
                text = op["responses"]["default"]["description"]
                assert all(f"{code} " in text for code in openapi.TRANSPORT_ERRORS), text
    answer = doc["components"]["responses"]["MethodNotAllowed"]
    assert answer["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"}
    assert "Allow" in answer["headers"]


def _conforms(value: Any, schema: dict[str, Any], doc: dict[str, Any]) -> None:
    """A JSON value against a schema of the document, by an OpenAPI 3.0 schema validator
    (``nullable``, ``$ref`` into the document's components, every keyword)."""
    validate_value(value, {"components": doc["components"], **schema}, cls=OAS30Validator)


def test_answers_conform_to_the_document() -> None:
    with serving(FakeScheduler()) as server:
        doc = call(server.url, "GET", "/openapi.json").body
        ok = doc["paths"]

        def schema_of(path: str, method: str, code: str = "200") -> dict[str, Any]:
            return dict(ok[path][method]["responses"][code]["content"]["application/json"][
                "schema"])

        _conforms(call(server.url, "GET", "/queries").body, schema_of("/queries", "get"), doc)
        _conforms(call(server.url, "GET", f"/queries/{QUERY_ID}").body,
                  schema_of("/queries/{id}", "get"), doc)
        path = "/queries/{id}/resource-requirements"
        _conforms(call(server.url, "GET", "/queries/orders/resource-requirements").body,
                  schema_of(path, "get"), doc)
        _conforms(call(server.url, "GET", "/queries/orders/rescales").body,
                  schema_of("/queries/{id}/rescales", "get"), doc)
        refused = call(server.url, "PUT", "/queries/orders/resource-requirements", bounds(0, 1))
        _conforms(refused.body, schema_of(path, "put", "400"), doc)
        with pytest.raises(ValidationError):  # the check has teeth
            _conforms({"errors": [1]}, schema_of(path, "put", "400"), doc)
        answer = call(server.url, "GET", f"/queries/{QUERY_ID}").body
        with pytest.raises(ValidationError):
            _conforms({**answer, "lastDecision": {"time": 1.0}},
                      schema_of("/queries/{id}", "get"), doc)
        _conforms({**answer, "lastDecision": None}, schema_of("/queries/{id}", "get"), doc)


def test_the_autoscaler_answer_conforms_and_is_404_when_it_is_off() -> None:
    scheduler = FakeScheduler()
    with serving(scheduler) as server:
        doc = call(server.url, "GET", "/openapi.json").body
        answers = doc["paths"]["/queries/{id}/autoscaler"]["get"]["responses"]
        off = call(server.url, "GET", "/queries/orders/autoscaler")
        assert off.status == 404 and "autoscaler.enabled=false" in off.body["errors"][0]
        _conforms(off.body, answers["404"]["content"]["application/json"]["schema"], doc)
        policy = QueryAutoscaler(AutoscalerConfig(enabled=True), query="orders", started_at=0.0)
        decision = policy.evaluate(QueryView(now=5.0, slots=2, partitions=4))
        scheduler.autoscaler_status = AutoscalerStatus(
            QUERY_ID, True, True, 180.0, 10.0, 4.5, False, decision, policy.snapshot())
        on = call(server.url, "GET", "/queries/orders/autoscaler")
        assert on.status == 200
        assert (on.body["id"], on.body["lastDecision"]["outcome"]) == (QUERY_ID, "not-ready")
        assert on.body["recommendation"]["slots"] == 2 and on.body["nextEvaluation"] == 4.5
        _conforms(on.body, answers["200"]["content"]["application/json"]["schema"], doc)


def _described(value: Any, schema: dict[str, Any], doc: dict[str, Any], path: str = "$"
               ) -> list[str]:
    """Where ``value`` holds what its schema does not describe: an object whose schema lists
    no properties (nor a schema for any key), or a key it does not list."""
    schemas = doc["components"]["schemas"]
    while "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in schema:
        if value is None:
            return []
        (schema,) = [s for s in schema["anyOf"] if "$ref" in s]
        return _described(value, schema, doc, path)
    found = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and not isinstance(extra, dict):
            return [f"{path}: an object without properties"]
        for k, v in value.items():
            if props is not None and k in props:
                found += _described(v, props[k], doc, f"{path}.{k}")
            elif isinstance(extra, dict):
                found += _described(v, extra, doc, f"{path}.{k}")
            else:
                found.append(f"{path}.{k}: not described")
    elif isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            found += _described(v, schema["items"], doc, f"{path}[{i}]")
    return found


def _blocked_policy() -> QueryAutoscaler:
    """A policy whose last decision blocked a scale-up found ineffective: every figure of its
    answer is set (its window, inputs, the scalability fit over two slot counts, the block)."""
    policy = QueryAutoscaler(AutoscalerConfig(
        enabled=True, evaluation_interval=10.0, metrics_window=60.0,
        stabilization_interval=30.0, utilization_target=0.8, utilization_min=0.5,
        utilization_max=0.9, catch_up_duration=100.0, restart_time=10.0,
        executor_startup_time=0.0, restart_time_tracking=False, observed_scalability=True,
        effectiveness_detection=True, effectiveness_expiry=600.0), query="orders",
        started_at=0.0)
    t, batch, slots, partitions, rate = 0.0, 0, 8, 48, 7600.0

    def run(seconds: float) -> None:
        nonlocal t, batch
        end = t + seconds
        while t + 5.0 <= end:
            t, batch = t + 5.0, batch + 1
            per_slot = 1000.0 if slots <= 8 else 8000.0 / slots
            rows = rate * 5.0
            duration = max(0.5, rows / (per_slot * slots))
            policy.observe(LoadSample(
                time=t, slots=slots, partitions=partitions, batch_id=batch,
                num_input_rows=rows, input_rows_per_second=rate,
                processed_rows_per_second=rows / duration, batch_duration=duration,
                trigger_interval=5.0, backlog=0.0, busy_time=rows / per_slot))

    run(90)
    up = policy.evaluate(QueryView(now=t, slots=slots, partitions=partitions, upper=240))
    assert up.outcome == "scale-up"
    slots = up.target_slots
    policy.on_rescale_completed(t, slots=slots, partitions=partitions, kind=up.kind,
                                downtime=None)
    for _ in range(9):
        run(10)
        last = policy.evaluate(QueryView(now=t, slots=slots, partitions=partitions, upper=240))
    assert last.outcome == "blocked"
    return policy


def test_every_figure_of_the_autoscaler_answer_is_described() -> None:
    scheduler = FakeScheduler()
    policy = _blocked_policy()
    snapshot = policy.snapshot()
    assert snapshot["scalabilityFit"] is not None and snapshot["blockedUntil"] is not None
    scheduler.autoscaler_status = AutoscalerStatus(
        QUERY_ID, True, True, 60.0, 10.0, 4.5, True, policy.last_decision, snapshot)
    with serving(scheduler) as server:
        doc = call(server.url, "GET", "/openapi.json").body
        schema = doc["paths"]["/queries/{id}/autoscaler"]["get"]["responses"]["200"][
            "content"]["application/json"]["schema"]
        answer = call(server.url, "GET", "/queries/orders/autoscaler").body
    _conforms(answer, schema, doc)
    assert _described(answer, schema, doc) == []
    assert answer["lastDecision"]["inputs"]["scalabilityCoefficient"] is not None
    assert set(answer["policy"]) == {
        "query", "stabilizedAt", "windowSamples", "pendingScaleDownSince", "blockedUntil",
        "scalabilityObservations", "scalabilityFit", "rejectedSamples", "lastRejection"}
    with pytest.raises(ValidationError):  # typed, not bare objects
        _conforms({**answer, "window": {**answer["window"], "span": "long"}}, schema, doc)
    with pytest.raises(ValidationError):
        _conforms({**answer, "policy": {**answer["policy"], "scalabilityFit": [1.0]}},
                  schema, doc)
    inputs = doc["components"]["schemas"]["ScalingDecision"]["properties"]["inputs"]
    for name in ("inputRate", "targetRate", "capacity", "trueRatePerSlot"):
        assert "Rows per second" in inputs["properties"][name]["description"], name
    for name in ("windowSpan", "restartDowntime", "executorStartup"):
        assert "Seconds" in inputs["properties"][name]["description"], name


def test_the_autoscaler_times_are_described_as_epoch_seconds() -> None:
    schemas = openapi.document()["components"]["schemas"]
    assert "Epoch seconds" in schemas["ScalingDecision"]["properties"]["time"]["description"]
    policy = schemas["Autoscaler"]["properties"]["policy"]
    assert "epoch seconds" in policy["description"]
    for name in ("stabilizedAt", "pendingScaleDownSince", "blockedUntil"):
        assert name in policy["description"]
        prop = policy["properties"][name]
        assert (prop["type"], prop["nullable"]) == ("number", True)
        assert "epoch seconds" in prop["description"]


def test_a_null_duration_is_described_as_unknown() -> None:
    record = openapi.document()["components"]["schemas"]["RescaleRecord"]
    duration = record["properties"]["duration"]
    assert duration["nullable"] is True
    assert "null when unknown (pending, or cut short by a driver stop)" in (
        duration["description"])
