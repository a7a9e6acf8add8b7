"""The OpenAPI 3.0 document of the REST API, served at ``GET /openapi.json``.

Built from the same names the code uses (state names, trigger causes, the
error shape), so it cannot drift far from what the server answers; a unit
test checks every route, method and status code of :mod:`spark_adaptive.rest.api`
against it and validates it with ``openapi-spec-validator``, and a fuzz test
checks live answers against it (``tests/integration/test_rest_fuzz.py``).

Each operation lists the answers of its route; its ``default`` answer covers
what the HTTP layer may answer any request before routing
(:data:`TRANSPORT_ERRORS`). A method a path does not serve gets 405
(``components.responses.MethodNotAllowed``); OpenAPI has no place for
operations that do not exist, so that answer is described once. HEAD, served
wherever GET is, is not listed as operations of its own (as most servers'
documents do not): the document says so once, in ``info.description``.
"""

from __future__ import annotations

from typing import Any

from spark_adaptive.core.streaming.history import Trigger
from spark_adaptive.core.streaming.states import StateName
from spark_adaptive.rest.facade import POLICY_TIMES
from spark_adaptive.version import __version__

STATES = [str(name) for name in StateName]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _int(description: str, minimum: int | None = 0) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    return schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def _nullable_ref(name: str) -> dict[str, Any]:
    """A referenced object, or null. OpenAPI 3.0's ``nullable`` counts only beside a ``type``
    (3.0.3), so ``{"nullable": true, "allOf": [ref]}`` refuses null for a strict validator;
    this is the form that says what is meant."""
    return {"anyOf": [_ref(name), {"type": "object", "nullable": True, "enum": [None]}]}


OUTCOMES = ["not-ready", "no-change", "scale-up", "scale-down", "scale-down-pending", "blocked"]
KINDS = ["none", "live", "restart"]


def _number(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


def _inputs() -> dict[str, Any]:
    """``ScalingDecision.inputs``: the figures a decision was computed from."""
    rate = "Rows per second"
    return {
        "type": "object",
        "description": "The figures the decision was computed from; null where not available.",
        "properties": {
            "windowSpan": _number("Seconds the window's micro-batches span."),
            "sampleCount": _int("Micro-batches in the window."),
            "inputRate": _nullable(_number(f"{rate} the decision used as the input rate.")),
            "inputRateWindow": _nullable(_number(f"{rate} read over the window.")),
            "inputRateRecent": _nullable(_number(f"{rate} read by the newest micro-batches.")),
            "inputRateStarted": _nullable(_number(
                f"{rate} the micro-batch running now reads (from its offsets), when it set "
                "the input rate.")),
            "backlog": _nullable(_number("Rows behind the source's latest offset.")),
            "trueRatePerSlot": _nullable(_number(f"{rate} one task slot processes when busy.")),
            "rateSource": {"type": "string", "description": "How the true rate per slot was "
                           "measured, or why it could not be."},
            "capacity": _nullable(_number(f"{rate} the query processes on its slots now.")),
            "targetRate": _nullable(_number(
                f"{rate} the query must process: input plus the backlog over the catch-up "
                "duration.")),
            "utilization": _nullable(_number("Input rate over the capacity (1: every slot "
                                             "busy).")),
            "recommendedSlots": _nullable(_number("Slots the target rate needs, unrounded.")),
            "scalabilityCoefficient": _nullable(_number(
                "Rate per slot at the recommended slots over the rate per slot now (1: "
                "linear scaling).")),
            "restartDowntime": _nullable(_number("Seconds a restart rescale is expected to "
                                                 "stop the query.")),
            "executorStartup": _nullable(_number("Seconds new executors are expected to take "
                                                 "to run tasks.")),
            "forecastRate": _nullable(_number(
                f"{rate} the query's recurring load is forecast to reach within the horizon "
                "ahead, when the forecast is in use and reads above the input rate.")),
        },
    }


def _forecast() -> dict[str, Any]:
    """``Autoscaler.forecast``: the forecast of the query's recurring load."""
    return _nullable({
        "type": "object",
        "required": ["rate", "inUse", "reason", "horizon", "error", "confidence", "periods",
                     "aheadScaleUps"],
        "description": "The forecast of the query's recurring load (autoscaler.forecast.*); "
                       "null while forecast.enabled=false or before its first evaluation.",
        "properties": {
            "rate": _nullable(_number("Rows per second: the highest forecast over the "
                                      "horizon.")),
            "inUse": {"type": "boolean", "description": "The autoscaler acts on it: the "
                      "periods back agree and a rise is forecast (rule F7)."},
            "reason": {"type": "string", "description": "Why it is (not) in use: the rule, "
                       "F1 to F7, and its figures."},
            "horizon": _number("Seconds ahead it looks."),
            "error": _nullable(_number("Its relative error over the last period.")),
            "confidence": _nullable(_number("1 - error, at least 0.")),
            "periods": _int("Whole periods back it rests on."),
            "aheadScaleUps": _int("Scale-ups taken ahead of a forecast rise (trigger "
                                  "FORECAST), by this driver."),
        },
    })


def _policy() -> dict[str, Any]:
    """``Autoscaler.policy``: the policy's own state (empty before its first sample)."""
    instant = {
        "stabilizedAt": "The end of the stabilization interval after the last start or "
                        "rescale",
        "pendingScaleDownSince": "When the wait of scale-down.interval started: the first "
                                 "reading below the band (a restart's: its first "
                                 "recommendation)",
        "blockedUntil": "When the block on more slots after an ineffective scale-up ends",
    }
    return {
        "type": "object",
        "description": "The policy's own state (empty before its first sample). Its "
                       "instants are epoch seconds (null when unset): "
                       + ", ".join(POLICY_TIMES) + ".",
        "properties": {
            "query": {"type": "string", "description": "The query's name, else its key."},
            **{k: _nullable(_number(f"{instant[k]}; epoch seconds.")) for k in POLICY_TIMES},
            "windowSamples": _int("Micro-batches in the metrics window."),
            "scalabilityObservations": _int("Distinct slot counts the rate per slot was "
                                            "observed at."),
            "scalabilityFit": _nullable({
                "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number"},
                "description": "[a, b] of 1/r(s) = a + b*s, r(s) the rate per slot (rows per "
                               "second) on s slots: a in slot-seconds per row, b in "
                               "slot-seconds per row per slot; null while not used."}),
            "rejectedSamples": _int("Micro-batches the window did not use."),
            "lastRejection": {"type": "string", "description": "Why the last of them was not "
                              "used (empty: none was)."},
        },
    }


def _schemas() -> dict[str, Any]:
    bound = {"type": "integer", "description": "A positive bound, or -1 for the default "
             "(lower: 1; upper: the query's configured partitions, reactive mode: "
             "max-parallelism). GET always returns resolved values."}
    return {
        "Error": {
            "type": "object", "required": ["errors"],
            "properties": {"errors": {"type": "array", "items": {"type": "string"},
                                      "description": "Every reason, one per entry."}},
        },
        "ResourceRequirements": {
            "type": "object", "required": ["parallelism"], "additionalProperties": False,
            "properties": {"parallelism": {
                "type": "object", "required": ["lowerBound", "upperBound"],
                "additionalProperties": False,
                "properties": {"lowerBound": bound, "upperBound": bound}}},
        },
        "Decision": {
            "type": "object", "required": ["time", "action", "reason"],
            "properties": {"time": {"type": "number", "description": "Epoch seconds."},
                           "action": {"type": "string"}, "reason": {"type": "string"}},
        },
        "Counters": {
            "type": "object",
            "required": ["restarts", "rescales", "liveRescales", "failures"],
            "properties": {k: _int(d) for k, d in (
                ("restarts", "Restarts, failures and restart rescales alike."),
                ("rescales", "Rescales, restart and live."),
                ("liveRescales", "Rescales without a restart."),
                ("failures", "Failures of the query, restarted or not."))},
        },
        "Query": {
            "type": "object",
            "required": ["id", "key", "name", "state", "parallelism", "slots", "executors",
                         "requirements", "lastDecision", "counters"],
            "properties": {
                "id": {"type": "string", "description": "Spark's query id (stable across "
                       "restarts from one checkpoint); the key until the query first runs."},
                "key": {"type": "string", "description": "spark-adaptive's handle."},
                "name": _nullable({"type": "string"}),
                "state": {"type": "string", "enum": STATES},
                "parallelism": _int("Partitions of the running query; 0 while none runs."),
                "slots": _int("The query's share of the task slots."),
                "executors": _int("Executors of the application."),
                "requirements": _ref("ResourceRequirements"),
                "lastDecision": _nullable_ref("Decision"),
                "counters": _ref("Counters"),
                "runId": _nullable({"type": "string"}),
                "status": _nullable({"type": "string",
                                     "enum": ["FINISHED", "CANCELED", "FAILED", None]}),
                "error": _nullable({"type": "string"}),
                "errorClass": _nullable({"type": "string"}),
                "lastProgress": _nullable({
                    "type": "object",
                    "description": "The query's last completed micro-batch (of any run).",
                    "properties": {
                        "batchId": _int("Spark's batch id."),
                        "time": {"type": "number", "description": "Epoch seconds."},
                        "numInputRows": _int("Rows the batch read."),
                        "inputRowsPerSecond": {"type": "number"},
                        "processedRowsPerSecond": {"type": "number"},
                        "batchDuration": {"type": "number", "description": "Seconds."},
                        "statePartitions": _nullable(_int("State partitions; null when "
                                                          "stateless.")),
                    },
                }),
            },
        },
        "RescaleRecord": {
            "type": "object",
            "required": ["id", "time", "trigger", "kind", "fromParallelism", "toParallelism",
                         "fromSlots", "toSlots", "duration", "outcome", "timings", "reason"],
            "properties": {
                "id": _int("Sequence number within the query.", 1),
                "time": {"type": "number", "description": "Epoch seconds of the decision."},
                "trigger": {"type": "string", "enum": [t.value for t in Trigger]},
                "kind": {"type": "string", "enum": ["initial", "live", "restart"]},
                "fromParallelism": _int("Partitions before."),
                "toParallelism": _int("Partitions after."),
                "fromSlots": _int("Slots before."),
                "toSlots": _int("Slots after."),
                "duration": _nullable({"type": "number", "description": "Seconds from the "
                                       "decision to the first micro-batch completed after it "
                                       "(or to its failure or supersession); null when "
                                       "unknown (pending, or cut short by a driver stop)."}),
                "outcome": {"type": "string",
                            "enum": ["pending", "completed", "failed", "superseded"]},
                "timings": {"type": "object", "additionalProperties": {"type": "number"},
                            "description": "Seconds per phase: stop, repartition, start."},
                "reason": {"type": "string"},
            },
        },
        "ScalingDecision": {
            "type": "object",
            "required": ["time", "outcome", "kind", "currentSlots", "targetSlots",
                         "currentPartitions", "targetPartitions", "reason", "applied",
                         "inputs"],
            "properties": {
                "time": {"type": "number", "description": "Epoch seconds of the decision."},
                "outcome": {"type": "string", "enum": OUTCOMES},
                "kind": {"type": "string", "enum": KINDS},
                "currentSlots": _int("Slots the query runs on."),
                "targetSlots": _int("Slots the decision asks for."),
                "currentPartitions": _int("The query's partitions."),
                "targetPartitions": _int("The partitions the decision asks for."),
                "reason": {"type": "string"},
                "applied": {"type": "boolean", "description": "Carried out (false in "
                            "recommend-only mode and for outcomes that change nothing)."},
                "ahead": {"type": "boolean", "description": "A scale-up taken ahead of a "
                          "forecast rise (its rescales carry the trigger FORECAST)."},
                "inputs": _inputs(),
            },
        },
        "Autoscaler": {
            "type": "object",
            "required": ["id", "enabled", "scalingEnabled", "evaluationInterval",
                         "nextEvaluation", "waitingForResources", "window", "lastDecision"],
            "properties": {
                "id": {"type": "string"},
                "enabled": {"type": "boolean"},
                "scalingEnabled": {"type": "boolean", "description": "false: recommend only."},
                "evaluationInterval": {"type": "number", "description": "Seconds."},
                "nextEvaluation": _nullable({"type": "number",
                                             "description": "Seconds from now."}),
                "waitingForResources": {"type": "boolean", "description": "The slots the "
                                        "autoscaler asked for have not come (yet)."},
                "window": {
                    "type": "object", "required": ["length", "span", "samples"],
                    "description": "The metrics window (span and samples: null before the "
                                   "first decision).",
                    "properties": {
                        "length": _number("Seconds: autoscaler.metrics.window."),
                        "span": _nullable(_number("Seconds the window's micro-batches span.")),
                        "samples": _nullable(_int("Micro-batches in the window.")),
                    }},
                "inputRate": _nullable(_number("Rows per second.")),
                "backlog": _nullable(_number("Rows behind the source's latest offset.")),
                "trueRatePerSlot": _nullable(_number("Rows per second one busy slot "
                                                     "processes.")),
                "targetRate": _nullable(_number("Rows per second the query must process.")),
                "utilization": _nullable(_number("Input rate over the capacity.")),
                "recommendation": _nullable({
                    "type": "object",
                    "required": ["slots", "partitions", "kind", "outcome", "applied"],
                    "description": "What the last decision recommends.",
                    "properties": {
                        "slots": _int("Slots."), "partitions": _int("Partitions."),
                        "kind": {"type": "string", "enum": KINDS},
                        "outcome": {"type": "string", "enum": OUTCOMES},
                        "applied": {"type": "boolean", "description": "Carried out."},
                    }}),
                "lastDecision": _nullable_ref("ScalingDecision"),
                "forecast": _forecast(),
                "policy": _policy(),
            },
        },
        "Samples": {
            "type": "object", "required": ["id", "interval", "capacity", "samples"],
            "properties": {
                "id": {"type": "string"},
                "interval": {"type": "number", "description": "Seconds between two samples."},
                "capacity": {"type": "integer", "description": "The most samples kept."},
                "samples": {"type": "array", "description": "Oldest first.", "items": {
                    "type": "object",
                    "required": ["time", "state", "parallelism", "slots", "executors",
                                 "inputRate", "processedRate", "backlog", "batchDuration"],
                    "properties": {
                        "time": {"type": "number", "description": "Epoch seconds."},
                        "state": {"type": "string", "enum": STATES},
                        "parallelism": _int("Partitions of the running query (0: none runs)."),
                        "slots": _int("The query's slot share."),
                        "executors": _int("Executors of the application."),
                        "inputRate": _nullable({"type": "number",
                                                "description": "Rows per second."}),
                        "processedRate": _nullable({"type": "number",
                                                    "description": "Rows per second."}),
                        "backlog": _nullable({"type": "number", "description": "Rows behind "
                                              "the source's latest offset, if it says."}),
                        "batchDuration": _nullable({"type": "number",
                                                    "description": "Seconds."}),
                        "forecastRate": _nullable(_number(
                            "Rows per second the autoscaler's forecast of the query's "
                            "recurring load expects at most within its horizon "
                            "(forecast.enabled).")),
                    }}},
            },
        },
        "Rescales": {
            "type": "object", "required": ["id", "key", "rescales", "counters"],
            "properties": {"id": {"type": "string"}, "key": {"type": "string"},
                           "rescales": {"type": "array", "items": _ref("RescaleRecord"),
                                        "description": "Oldest first, newest last."},
                           "counters": _ref("Counters")},
        },
    }


_ERRORS = {
    "400": "Refused: every reason is listed. Nothing was changed.",
    "401": "Missing or wrong bearer token.",
    "404": "No managed query has this id, key or name (for /ui: no such file).",
    "409": "Another update of this query's requirements is in progress, or the query has "
           "finished. Nothing was changed.",
    "413": "The request body is larger than the limit.",
    "415": "The request body is not sent as 'Content-Type: application/json' (a charset "
           "parameter may say utf-8, nothing else). Nothing was changed.",
    "500": "The requirements could not be persisted beside the checkpoint. Nothing was "
           "changed; retry.",
    "503": "The scheduler did not answer in time; retry.",
}


TRANSPORT_ERRORS = {
    "400": "a malformed request: request line, headers, framing (Content-Length, chunked), "
           "or a body that ended early",
    "408": "the request did not arrive whole in time",
    "413": "a body over the limit (64 KiB)",
    "431": "a header section over the limit (16 KiB)",
    "503": "every connection has a request in progress (with Retry-After)",
}
"""What the HTTP layer may answer any request before it is routed (each operation's
``default``); nothing is done for any of them."""


def _errors(*codes: str) -> dict[str, Any]:
    out = {c: _json(_ref("Error"), _ERRORS[c]) for c in codes}
    out["default"] = _json(_ref("Error"), "Refused before routing; nothing was done: " + "; ".join(
        f"{code} {why}" for code, why in TRANSPORT_ERRORS.items()) + ".")
    return out


def document(url: str | None = None, token_required: bool = False) -> dict[str, Any]:
    """The OpenAPI 3.0.3 document; ``url`` becomes its server, ``token_required`` adds
    the bearer security scheme and the 401 answers."""
    ident = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
             "description": "Spark query id, spark-adaptive key or query name."}
    auth = ("401",) if token_required else ()
    query_errors = _errors(*auth, "404", "503")

    def op(op_id: str, summary: str, ok: dict[str, Any], errors: dict[str, Any],
           **extra: Any) -> dict[str, Any]:
        return {"operationId": op_id, "summary": summary,
                "responses": {"200": ok, **errors}, **extra}

    paths = {
        "/queries": {"get": op("listQueries", "Every managed streaming query.",
                               _json({"type": "array", "items": _ref("Query")}, "The queries."),
                               _errors(*auth, "503"))},
        "/queries/{id}": {"parameters": [ident], "get": op(
            "getQuery", "One query: state, parallelism, slots, requirements, last decision.",
            _json(_ref("Query"), "The query."), query_errors)},
        "/queries/{id}/resource-requirements": {
            "parameters": [ident],
            "get": op("getResourceRequirements", "The query's parallelism bounds.",
                      _json(_ref("ResourceRequirements"), "The bounds."), query_errors),
            "put": op(
                "updateResourceRequirements",
                "Declare new parallelism bounds (Flink's externalized declarative resource "
                "management). Persisted beside the checkpoint, then applied by the scheduler "
                "within its rescale timing rules. Refused in reactive mode.",
                _json({"type": "object", "additionalProperties": False,
                       "description": "Empty: accepted (Flink answers an empty body)."},
                      "Accepted. The Spark-Adaptive-Persisted header says whether the bounds "
                      "were written beside the checkpoint."),
                _errors("400", *auth, "404", "409", "413", "415", "500", "503"),
                requestBody={"required": True, "content": {"application/json": {
                    "schema": _ref("ResourceRequirements")}}}),
        },
        "/queries/{id}/rescales": {"parameters": [ident], "get": op(
            "getRescales", "The query's rescale and restart history, and its counters.",
            _json(_ref("Rescales"), "The history, newest last."), query_errors)},
        "/queries/{id}/autoscaler": {"parameters": [ident], "get": op(
            "getAutoscaler", "The query's autoscaler: its metrics window, true processing rate "
            "per slot, target rate, recommendation, last decision and why, next evaluation. "
            "404 when the autoscaler is off.",
            _json(_ref("Autoscaler"), "The autoscaler's view of the query."), query_errors)},
        "/queries/{id}/samples": {"parameters": [ident], "get": op(
            "getSamples", "The query's recent samples (state, parallelism, slots, executors, "
            "rates, backlog), oldest first: what the operators' page charts.",
            _json(_ref("Samples"), "The samples."), query_errors)},
        "/metrics": {"get": op(
            "getMetrics", "Every figure in Prometheus' text exposition format (OpenMetrics "
            "when the Accept header prefers it).",
            {"description": "The metrics.", "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/openmetrics-text": {"schema": {"type": "string"}}}},
            _errors(*auth, "503"))},
        "/": {"get": op(
            "getPage", "The operators' page (HTML). Needs no token: it asks for it.",
            {"description": "The page.", "content": {"text/html": {
                "schema": {"type": "string"}}}}, _errors(), security=[])},
        "/ui/{file}": {"parameters": [{"name": "file", "in": "path", "required": True,
                                       "schema": {"type": "string"},
                                       "description": "A file of the page."}],
                       "get": op("getPageFile", "A file of the operators' page (JavaScript, "
                                 "CSS). Needs no token.",
                                 {"description": "The file.", "content": {
                                     "text/javascript": {"schema": {"type": "string"}},
                                     "text/css": {"schema": {"type": "string"}}}},
                                 _errors("404"), security=[])},
        "/openapi.json": {"get": op("getOpenApi", "This document.",
                                    _json({"type": "object"}, "OpenAPI 3.0 document."),
                                    _errors(*auth))},
    }
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "spark-adaptive REST API", "version": __version__,
                 "description": "Declarative resource management of the Structured Streaming "
                                "queries managed by spark-adaptive on this driver. Errors are "
                                "{\"errors\": [reasons]}. A method a path does not serve "
                                "is 405 with Allow (components.responses.MethodNotAllowed); "
                                "a request body must be application/json. Every GET also "
                                "answers HEAD (its status and headers, no body), not listed "
                                "as an operation of its own."},
        "paths": paths,
        "components": {"schemas": _schemas(), "responses": {"MethodNotAllowed": {
            **_json(_ref("Error"), "Any method a path does not serve (OPTIONS, TRACE, CONNECT, "
                    "lowercase get, made-up ones): nothing was done."),
            "headers": {"Allow": {"description": "The methods the path serves, HEAD wherever "
                                  "GET, e.g. 'GET, HEAD, PUT'.",
                                  "schema": {"type": "string"}}}}}},
    }
    if url:
        doc["servers"] = [{"url": url}]
    if token_required:
        doc["components"]["securitySchemes"] = {
            "bearerAuth": {"type": "http", "scheme": "bearer",
                           "description": "The value of spark.adaptive.rest.token."}}
        doc["security"] = [{"bearerAuth": []}]
    return doc
