"""The REST API's routes and rules, apart from HTTP plumbing: a request in, a response out.

Routes (JSON in and out; ``{id}`` is a key, Spark query id or name, URL-encoded)::

    GET  /queries                              every managed query
    GET  /queries/{id}                         one query
    GET  /queries/{id}/resource-requirements   {"parallelism": {"lowerBound": L, "upperBound": U}}
    PUT  /queries/{id}/resource-requirements   same body; 200 with {} once accepted
    GET  /queries/{id}/rescales                history (newest last) and counters
    GET  /queries/{id}/autoscaler              the autoscaler's window, rates, last decision
    GET  /openapi.json                         the OpenAPI 3.0 document of all this

Errors have Flink's REST error shape, ``{"errors": ["reason", ...]}``:
400 (every reason at once), 404 (unknown query or path), 405 (with ``Allow``),
409 (an update of the query in flight, or the query has finished),
500 (could not persist; nothing changed), 503 (the scheduler did not answer).

PUT follows Flink's ``JobResourceRequirementsUpdateHandler`` and
``Dispatcher.updateJobResourceRequirements``, in this order:

1. a body that is not JSON, or an empty one → 400 (Flink's JSON decoding and
   its empty-map check come before anything else);
2. the query is looked up → 404 (Flink resolves the job id as it reaches the
   JobMaster; a query that does not exist cannot have an update in flight);
3. another update of the same query in flight → 409;
4. the body is validated with every rule (types, unknown and missing fields,
   bounds) → 400 with all reasons; reactive mode → 400 (see below);
5. the bounds are persisted beside the checkpoint → 500 "… Please retry."
   (nothing changed);
6. the scheduler applies them; should that still fail (the query finished in
   the meantime), the persisted file is put back as it was.

A refused request changes nothing: steps 1-5 only read until the write of
step 5, and step 6 undoes it on failure.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.errors import (
    ConflictError,
    PersistenceError,
    RequirementsError,
    UnknownQueryError,
)
from spark_adaptive.rest import wire
from spark_adaptive.rest.facade import InFlight, SchedulerFacade

log = logging.getLogger(__name__)

PERSISTED_HEADER = "Spark-Adaptive-Persisted"
"""``true`` when an accepted PUT was written beside the checkpoint, ``false`` when the
query has no checkpoint location (the bounds then last until the driver stops)."""


@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    """JSON-serialisable."""
    headers: tuple[tuple[str, str], ...] = ()


def error(status: int, *reasons: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, {"errors": list(reasons)}, headers)


_QUERY = r"/queries/(?P<id>[^/]+)"
_ROUTES: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = (
    (re.compile(r"/queries"), {"GET": "list_queries"}),
    (re.compile(_QUERY), {"GET": "get_query"}),
    (re.compile(_QUERY + r"/resource-requirements"),
     {"GET": "get_requirements", "PUT": "put_requirements"}),
    (re.compile(_QUERY + r"/rescales"), {"GET": "get_rescales"}),
    (re.compile(_QUERY + r"/autoscaler"), {"GET": "get_autoscaler"}),
    (re.compile(r"/openapi\.json"), {"GET": "get_openapi"}),
)


class RestApi:
    """Answers requests with a :class:`SchedulerFacade`. Thread-safe (one per server)."""

    def __init__(self, facade: SchedulerFacade,
                 openapi: Callable[[], dict[str, Any]] = dict) -> None:
        self._facade = facade
        self._openapi = openapi
        self.in_flight = InFlight()

    def handle(self, method: str, path: str, body: bytes = b"") -> Response:
        """Route one request; never raises (unexpected errors are logged and answer 500)."""
        path = path.split("?", 1)[0].split("#", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        for pattern, methods in _ROUTES:
            m = pattern.fullmatch(path)
            if m is None:
                continue
            if method not in methods:
                return error(405, f"Method {method} is not allowed on {path}; allowed: "
                             f"{', '.join(sorted(methods))}.",
                             headers=(("Allow", ", ".join(sorted(methods))),))
            ident = unquote(m.group("id")) if "id" in m.groupdict() else ""
            try:
                result: Response = getattr(self, "_" + methods[method])(ident, body)
                return result
            except Exception as e:
                return self._refusal(e, method, path)
        return error(404, f"No such resource: {path}. See /openapi.json for the routes.")

    # -- routes ---------------------------------------------------------------------
    def _list_queries(self, _ident: str, _body: bytes) -> Response:
        return Response(200, [wire.query_json(q) for q in self._facade.queries()])

    def _get_query(self, ident: str, _body: bytes) -> Response:
        return Response(200, wire.query_json(self._facade.query(ident)))

    def _get_requirements(self, ident: str, _body: bytes) -> Response:
        key = self._facade.key_of(ident)
        return Response(200, wire.requirements_json(self._facade.requirements(key)))

    def _get_rescales(self, ident: str, _body: bytes) -> Response:
        view = self._facade.rescales(self._facade.key_of(ident))
        return Response(200, wire.rescales_json(view.query_id, view.key, view.records,
                                                view.counters))

    def _get_autoscaler(self, ident: str, _body: bytes) -> Response:
        status = self._facade.autoscaler(self._facade.key_of(ident))
        if status is None:
            return error(404, "The autoscaler is off for this application "
                              "(spark.adaptive.autoscaler.enabled=false).")
        return Response(200, wire.autoscaler_json(status))

    def _get_openapi(self, _ident: str, _body: bytes) -> Response:
        return Response(200, self._openapi())

    def _put_requirements(self, ident: str, raw: bytes) -> Response:
        body = decode_body(raw)
        if body is None or body == "" or body == {}:
            raise RequirementsError([wire.EMPTY_BODY])
        key = self._facade.key_of(ident)
        with self.in_flight.claim(key, ident):
            new = self._check(key, body)
            try:
                undo = self._facade.persist_requirements(key, new)
            except PersistenceError as e:
                raise PersistenceError(
                    f"The resource requirements of the query [{ident}] could not be persisted "
                    f"({e}). Nothing was changed. Please retry.") from e
            try:
                self._facade.apply_requirements(key, new)
            except BaseException:
                if undo is not None:
                    try:
                        undo()
                    except Exception:
                        log.exception("query %s: putting back its persisted requirements "
                                      "failed", key)
                raise
        persisted = "true" if undo is not None else "false"
        return Response(200, {}, ((PERSISTED_HEADER, persisted),))

    def _check(self, key: str, body: Any) -> ResourceRequirements:
        """Every reason the body is refused at once: how it is written, then the bounds."""
        return wire.requirements_from_body(
            body, lambda lower, upper: self._facade.check_requirements(key, lower, upper))

    # -- errors ---------------------------------------------------------------------
    @staticmethod
    def _refusal(e: Exception, method: str, path: str) -> Response:
        if isinstance(e, RequirementsError):
            # Reactive mode is refused here too, with Flink's message. Flink's status for
            # it is unverified; 400 rather than 409 because in this API 409 means "retry
            # once the other update is done", and no retry can succeed while the app runs
            # in reactive mode: the request itself is what cannot be served.
            return error(400, *e.reasons)
        if isinstance(e, UnknownQueryError):
            return error(404, str(e))
        if isinstance(e, ConflictError):
            return error(409, str(e))
        if isinstance(e, PersistenceError):
            log.warning("%s %s: %s", method, path, e)
            return error(500, str(e))
        if isinstance(e, TimeoutError):
            log.warning("%s %s: %s", method, path, e)
            return error(503, f"The scheduler did not answer in time ({e}). Please retry.")
        log.exception("%s %s failed", method, path)
        return error(500, f"Internal error: {type(e).__name__}: {e}")


def decode_body(raw: bytes) -> Any:
    """JSON-decode a request body; empty → None. Not JSON → :class:`RequirementsError`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequirementsError([f"The request body is not UTF-8 text: {e}."]) from None
    if not text.strip():
        return None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:
        raise RequirementsError([f"The request body is not valid JSON: {e}."]) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
