"""The REST API's JSON shapes: the core's typed values in, camelCase JSON out, and back.

Everything the API answers is built here, from the core's frozen values
(:class:`~spark_adaptive.core.streaming.query.QuerySnapshot`,
:class:`~spark_adaptive.core.streaming.history.RescaleRecord`, ...), and the one
body it takes, Flink's ``{"parallelism": {"lowerBound": L, "upperBound": U}}``,
is read here (:func:`parse_requirements`) before the core validates the bounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from spark_adaptive.core.autoscaler import ScalingDecision
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.core.streaming.history import Counters, Decision, RescaleRecord
from spark_adaptive.core.streaming.query import QuerySnapshot
from spark_adaptive.core.streaming.requirements import INCOMPLETE, ResourceRequirements
from spark_adaptive.errors import RequirementsError
from spark_adaptive.rest.facade import SamplesView

EMPTY_BODY = "Request body does not specify resource requirements."
_FIELDS = ("lowerBound", "upperBound")


def requirements_json(r: ResourceRequirements) -> dict[str, dict[str, int]]:
    """The requirements as GET returns them and PUT takes them."""
    return {"parallelism": {"lowerBound": r.lower, "upperBound": r.upper}}


def decision_json(d: Decision) -> dict[str, Any]:
    return {"time": d.time, "action": d.action, "reason": d.reason}


def counters_json(c: Counters) -> dict[str, int]:
    return {"restarts": c.restarts, "rescales": c.rescales, "liveRescales": c.live_rescales,
            "failures": c.failures}


def record_json(r: RescaleRecord) -> dict[str, Any]:
    """One entry of ``GET /queries/{id}/rescales``."""
    return {
        "id": r.id,
        "time": r.time,
        "trigger": r.trigger.value,
        "kind": r.kind,
        "fromParallelism": r.from_parallelism,
        "toParallelism": r.to_parallelism,
        "fromSlots": r.from_slots,
        "toSlots": r.to_slots,
        "duration": r.duration,
        "outcome": r.outcome,
        "timings": dict(r.timings),
        "reason": r.reason,
    }


def query_json(s: QuerySnapshot) -> dict[str, Any]:
    """``GET /queries/{id}`` (and each element of ``GET /queries``)."""
    p = s.progress
    return {
        "id": s.id, "key": s.key, "name": s.name, "state": str(s.state),
        "parallelism": s.parallelism, "slots": s.slots, "executors": s.executors,
        "requirements": requirements_json(s.requirements),
        "lastDecision": None if s.last_decision is None else decision_json(s.last_decision),
        "counters": counters_json(s.counters), "runId": s.run_id,
        "lastProgress": None if p is None else {
            "batchId": p.batch_id, "time": p.time, "numInputRows": p.num_input_rows,
            "inputRowsPerSecond": p.input_rows_per_second,
            "processedRowsPerSecond": p.processed_rows_per_second,
            "batchDuration": p.batch_duration, "statePartitions": p.state_partitions},
        "status": s.status, "error": s.error, "errorClass": s.error_class,
    }


def rescales_json(query_id: str, key: str, records: tuple[RescaleRecord, ...],
                  counters: Counters) -> dict[str, Any]:
    """``GET /queries/{id}/rescales``: the history, newest last, and its counters."""
    return {"id": query_id, "key": key, "rescales": [record_json(r) for r in records],
            "counters": counters_json(counters)}


def samples_json(view: SamplesView) -> dict[str, Any]:
    """``GET /queries/{id}/samples``: the query's recent samples, oldest first."""
    return {"id": view.query_id, "interval": view.interval, "capacity": view.capacity,
            "samples": [{"time": s.time, "state": s.state, "parallelism": s.parallelism,
                         "slots": s.slots, "executors": s.executors,
                         "inputRate": s.input_rate, "processedRate": s.processed_rate,
                         "backlog": s.backlog, "batchDuration": s.batch_duration,
                         "forecastRate": s.forecast_rate}
                        for s in view.samples]}


def scaling_decision_json(d: ScalingDecision) -> dict[str, Any]:
    """An autoscaler decision: its outcome, target, reason, and the figures it used."""
    out = {_camel(f.name): getattr(d, f.name) for f in dataclasses.fields(d)
           if f.name != "inputs"}
    out["inputs"] = {_camel(f.name): getattr(d.inputs, f.name)
                     for f in dataclasses.fields(d.inputs)}
    return out


def autoscaler_json(s: AutoscalerStatus) -> dict[str, Any]:
    """``GET /queries/{id}/autoscaler``: the window, the rates, the recommendation, the last
    decision and why, and when the next evaluation is."""
    d = s.decision
    inputs = None if d is None else d.inputs
    return {
        "id": s.query_id, "enabled": s.enabled, "scalingEnabled": s.scaling_enabled,
        "evaluationInterval": s.evaluation_interval, "nextEvaluation": s.next_evaluation,
        "waitingForResources": s.waiting_for_resources,
        "window": {"length": s.metrics_window,
                   "span": None if inputs is None else inputs.window_span,
                   "samples": None if inputs is None else inputs.sample_count},
        "inputRate": None if inputs is None else inputs.input_rate,
        "backlog": None if inputs is None else inputs.backlog,
        "trueRatePerSlot": None if inputs is None else inputs.true_rate_per_slot,
        "targetRate": None if inputs is None else inputs.target_rate,
        "utilization": None if inputs is None else inputs.utilization,
        "recommendation": None if d is None else {
            "slots": d.target_slots, "partitions": d.target_partitions, "kind": d.kind,
            "outcome": d.outcome, "applied": d.applied},
        "lastDecision": None if d is None else scaling_decision_json(d),
        "forecast": None if s.forecast is None else {**s.forecast.as_dict(),
                                                     "aheadScaleUps": s.ahead},
        "policy": {_camel(k): v for k, v in s.policy.items() if k != "lastDecision"},
    }


def _camel(name: str) -> str:
    if "_" not in name:
        return name
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def parse_requirements(body: Any) -> tuple[int | None, int | None, list[str]]:
    """Read the bounds from a JSON-decoded PUT body; return ``(lower, upper, reasons)``.

    Every problem is reported at once. A bound that is missing or of the wrong type
    comes back as ``None`` with its reason. JSON booleans are not integers, and neither
    is ``3.0``.
    """
    if body is None or body == "" or (isinstance(body, dict) and not body):
        return None, None, [EMPTY_BODY]
    if not isinstance(body, dict):
        return None, None, [f"The request body must be a JSON object, got {_json_type(body)}."]
    reasons = [f"Unknown field {key!r}; the body holds only 'parallelism'."
               for key in body if key != "parallelism"]
    if "parallelism" not in body:
        return None, None, [*reasons, "Missing field 'parallelism'."]
    inner = body["parallelism"]
    if not isinstance(inner, dict):
        return None, None, [*reasons, "Field 'parallelism' must be a JSON object with "
                            f"'lowerBound' and 'upperBound', got {_json_type(inner)}."]
    reasons += [f"Unknown field 'parallelism.{key}'; expected 'lowerBound' and 'upperBound'."
                for key in inner if key not in _FIELDS]
    values: list[int | None] = []
    for name in _FIELDS:
        if name not in inner:
            reasons.append(f"Missing field 'parallelism.{name}'.")
            values.append(None)
            continue
        v = inner[name]
        if isinstance(v, bool) or not isinstance(v, int):
            reasons.append(f"Field 'parallelism.{name}' must be an integer, got {_json_type(v)}.")
            values.append(None)
            continue
        values.append(v)
    return values[0], values[1], reasons


def requirements_from_body(
    body: Any, check: Callable[[int | None, int | None], ResourceRequirements]
) -> ResourceRequirements:
    """Read a PUT body and validate its bounds with ``check(lower, upper)`` (the core's
    rules); raise :class:`RequirementsError` with every reason at once: how the body is
    written, then what is wrong with the bounds it holds."""
    lower, upper, reasons = parse_requirements(body)
    try:
        requirements = check(lower, upper)
    except RequirementsError as e:
        raise RequirementsError([*reasons, *(r for r in e.reasons if r != INCOMPLETE)]) from None
    if reasons:  # e.g. an unknown field beside two good bounds
        raise RequirementsError(reasons)
    return requirements


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, (int, float)):
        return f"a number ({v!r})"
    if isinstance(v, str):
        return f"a string ({v!r})"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__
