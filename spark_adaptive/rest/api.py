"""The REST API's routes and rules, apart from HTTP plumbing: a request in, a response out.

Routes (JSON in and out; ``{id}`` is a key, Spark query id or name, URL-encoded)::

    GET  /queries                              every managed query
    GET  /queries/{id}                         one query
    GET  /queries/{id}/resource-requirements   {"parallelism": {"lowerBound": L, "upperBound": U}}
    PUT  /queries/{id}/resource-requirements   same body; 200 with {} once accepted
    GET  /queries/{id}/rescales                history (newest last) and counters
    GET  /queries/{id}/autoscaler              the autoscaler's window, rates, last decision
    GET  /queries/{id}/samples                 recent samples (what the page charts)
    GET  /openapi.json                         the OpenAPI 3.0 document of all this
    GET  /metrics                              Prometheus' text format (not JSON)
    GET  /, /ui/{file}                         the operators' page (HTML, CSS, JavaScript)

Every GET route answers ``HEAD`` too (RFC 9110 section 9.1): the GET's status and
headers, ``Content-Length`` included, without the body (the HTTP layer leaves it out).
HEAD is not declared per route: it follows GET, in ``Allow`` as well.

The page and its files are the only answers that need no bearer token (they hold
no data: the page asks for the token and sends it with each API call).

Errors have Flink's REST error shape, ``{"errors": ["reason", ...]}``:
400 (every reason at once), 404 (unknown query or path), 405 (with ``Allow``,
for any method a route does not serve: ``OPTIONS``, ``TRACE``, ``CONNECT``,
lowercase ``get``, made-up ones), 409 (an update of the query in flight, or
the query has finished), 415 (a body that is not ``application/json``),
500 (could not persist; nothing changed), 503 (the scheduler did not answer).
The HTTP layer (:mod:`~spark_adaptive.rest.server`) adds 401, 408, 413 and
framing errors before a request gets here.

PUT follows Flink's ``JobResourceRequirementsUpdateHandler`` and
``Dispatcher.updateJobResourceRequirements``, in this order:

1. a body whose ``Content-Type`` is not ``application/json`` → 415; a body
   that is not JSON, gives a field twice in one object (JSON leaves that
   open; it is refused rather than read as the last one), nests deeper than
   :data:`MAX_DEPTH`, or is empty → 400
   (Flink's JSON decoding and its empty-map check come before anything else);
2. the query is looked up → 404 (Flink resolves the job id as it reaches the
   JobMaster; a query that does not exist cannot have an update in flight);
3. another update of the same query in flight → 409;
4. the body is validated with every rule (types, unknown and missing fields,
   bounds) → 400 with all reasons; reactive mode → 400 (see below);
5. the bounds are persisted beside the checkpoint → 500 "… Please retry."
   (nothing changed);
6. the scheduler applies them; should that still fail (the query finished in
   the meantime → 409; the scheduler thread did not take the call in time →
   503, and the call is withdrawn so that it never runs), the persisted file
   is put back as it was.

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
from urllib.parse import unquote, urlsplit

from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.errors import (
    ConflictError,
    PersistenceError,
    RequirementsError,
    UnknownQueryError,
)
from spark_adaptive.rest import page, wire
from spark_adaptive.rest.facade import InFlight, SchedulerFacade
from spark_adaptive.rest.metrics import Exporter

log = logging.getLogger(__name__)

PERSISTED_HEADER = "Spark-Adaptive-Persisted"
"""``true`` when an accepted PUT was written beside the checkpoint, ``false`` when the
query has no checkpoint location (the bounds then last until the driver stops)."""


@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    """JSON-serialisable; ignored when ``raw`` is given."""
    headers: tuple[tuple[str, str], ...] = ()
    raw: bytes | None = None
    """A body that is not JSON (the metrics, the page), sent as it is."""
    content_type: str = "application/json"


def error(status: int, *reasons: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, {"errors": list(reasons)}, headers)


MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a request body may have (the PUT body has 2)."""

ALL_METHODS = ("GET", "HEAD", "PUT")
"""Every method some route serves (the ``Allow`` of ``OPTIONS *`` and ``CONNECT``)."""

_QUERY = r"/queries/(?P<id>[^/]+)"
_ROUTES: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = (
    (re.compile(r"/queries"), {"GET": "list_queries"}),
    (re.compile(_QUERY), {"GET": "get_query"}),
    (re.compile(_QUERY + r"/resource-requirements"),
     {"GET": "get_requirements", "PUT": "put_requirements"}),
    (re.compile(_QUERY + r"/rescales"), {"GET": "get_rescales"}),
    (re.compile(_QUERY + r"/autoscaler"), {"GET": "get_autoscaler"}),
    (re.compile(_QUERY + r"/samples"), {"GET": "get_samples"}),
    (re.compile(r"/openapi\.json"), {"GET": "get_openapi"}),
    (re.compile(r"/metrics"), {"GET": "get_metrics"}),
    (re.compile(r"/"), {"GET": "get_page"}),
    (re.compile(r"/ui/(?P<file>[^/]+)"), {"GET": "get_asset"}),
)


def _with_head(methods: dict[str, str]) -> dict[str, str]:
    """A route's methods, HEAD added where GET is (served by the GET's handler)."""
    return {**methods, "HEAD": methods["GET"]} if "GET" in methods else methods


def is_public(target: str) -> bool:
    """Whether a request target is the page or one of its files, served without the bearer
    token. Read as :meth:`RestApi.handle` routes it (query and fragment dropped, trailing
    slashes too, an absolute-form target by its path), so that what is public is exactly
    what the page's two routes answer."""
    if target.startswith(("http://", "https://")):
        try:
            target = urlsplit(target).path or "/"
        except ValueError:
            return False
    path = target.split("?", 1)[0].split("#", 1)[0]
    if len(path) > 1:
        path = path.rstrip("/")
    return path == "/" or _PAGE_FILE.fullmatch(path) is not None


_PAGE_FILE = re.compile(r"/ui/[^/]+")


@dataclass(frozen=True)
class Incoming:
    """What a route reads of its request: the ``{id}`` (or file name) of the path, the
    body, and the ``Accept`` header."""

    ident: str
    body: bytes = b""
    accept: str | None = None


class RestApi:
    """Answers requests with a :class:`SchedulerFacade`. Thread-safe (one per server)."""

    def __init__(self, facade: SchedulerFacade,
                 openapi: Callable[[], dict[str, Any]] = dict) -> None:
        self._facade = facade
        self._openapi = openapi
        self._exporter = Exporter(facade)
        self.in_flight = InFlight()

    def handle(self, method: str, path: str, body: bytes = b"",
               content_type: str | None = None, accept: str | None = None) -> Response:
        """Route one request; never raises (unexpected errors are logged and answer 500).

        ``method`` as sent (case matters: ``get`` is not ``GET``); ``content_type``: the
        request's ``Content-Type`` header, if any (a non-empty body must be JSON);
        ``accept``: its ``Accept`` header (``/metrics`` answers OpenMetrics if asked)."""
        path = path.split("?", 1)[0].split("#", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        for pattern, declared in _ROUTES:
            m = pattern.fullmatch(path)
            if m is None:
                continue
            methods = _with_head(declared)
            if method not in methods:
                return error(405, f"Method {method} is not allowed on {path}; allowed: "
                             f"{', '.join(sorted(methods))}.",
                             headers=(("Allow", ", ".join(sorted(methods))),))
            if method == "PUT" and body and not is_json(content_type):  # GET bodies: ignored
                return error(415, "The request body must be JSON, sent with 'Content-Type: "
                             f"application/json'; got {content_type or 'no Content-Type'}.")
            ident = unquote(next(iter(m.groupdict().values()), ""))  # {id} or {file}
            try:
                incoming = Incoming(ident, body, accept)
                result: Response = getattr(self, "_" + methods[method])(incoming)
                return result
            except Exception as e:
                return self._refusal(e, method, path)
        return error(404, f"No such resource: {path}. See /openapi.json for the routes.")

    # -- routes ---------------------------------------------------------------------
    def _list_queries(self, r: Incoming) -> Response:
        return Response(200, [wire.query_json(q) for q in self._facade.queries()])

    def _get_query(self, r: Incoming) -> Response:
        return Response(200, wire.query_json(self._facade.query(r.ident)))

    def _get_requirements(self, r: Incoming) -> Response:
        key = self._facade.key_of(r.ident)
        return Response(200, wire.requirements_json(self._facade.requirements(key)))

    def _get_rescales(self, r: Incoming) -> Response:
        view = self._facade.rescales(self._facade.key_of(r.ident))
        return Response(200, wire.rescales_json(view.query_id, view.key, view.records,
                                                view.counters))

    def _get_autoscaler(self, r: Incoming) -> Response:
        status = self._facade.autoscaler(self._facade.key_of(r.ident))
        if status is None:
            return error(404, "The autoscaler is off for this application "
                              "(spark.adaptive.autoscaler.enabled=false, or a local master, "
                              "which has no executors to scale).")
        return Response(200, wire.autoscaler_json(status))

    def _get_samples(self, r: Incoming) -> Response:
        view = self._facade.samples(self._facade.key_of(r.ident))
        return Response(200, wire.samples_json(view))

    def _get_openapi(self, r: Incoming) -> Response:
        return Response(200, self._openapi())

    def _get_metrics(self, r: Incoming) -> Response:
        data, content_type = self._exporter.render(r.accept)
        return Response(200, None, raw=data, content_type=content_type)

    def _get_page(self, r: Incoming) -> Response:
        return self._get_asset(Incoming("index.html"))

    def _get_asset(self, r: Incoming) -> Response:
        asset = page.asset(r.ident)
        if asset is None:
            return error(404, f"No such file of the page: {r.ident}.")
        data, content_type = asset
        return Response(200, None, headers=page.HEADERS, raw=data, content_type=content_type)

    def _put_requirements(self, r: Incoming) -> Response:
        body = decode_body(r.body)
        if body is None or body == "" or body == {}:
            raise RequirementsError([wire.EMPTY_BODY])
        key = self._facade.key_of(r.ident)
        with self.in_flight.claim(key, r.ident):
            new = self._check(key, body)
            try:
                undo = self._facade.persist_requirements(key, new)
            except PersistenceError as e:
                raise PersistenceError(
                    f"The resource requirements of the query [{r.ident}] could not be persisted "
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
    if _depth(text) > MAX_DEPTH:
        raise RequirementsError([f"The request body nests arrays or objects deeper than "
                                 f"{MAX_DEPTH} levels."])
    try:
        body = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_Object.of)
    except ValueError as e:
        raise RequirementsError([f"The request body is not valid JSON: {e}."]) from None
    except RecursionError:  # _depth counts what json would nest; this is a second guard
        raise RequirementsError(["The request body nests too deeply."]) from None
    repeated = _repeated(body)
    if repeated:  # JSON leaves it open; json.loads would keep the last one silently
        raise RequirementsError([f"The request body gives the field {name!r} more than once; "
                                 "each field may appear only once." for name in repeated])
    return body


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers the names it was given more than once, its own
    (``name``) and its nested objects' (``name.inner``)."""

    repeated: tuple[str, ...] = ()

    @classmethod
    def of(cls, pairs: list[tuple[str, Any]]) -> _Object:
        obj = cls(pairs)
        repeated: list[str] = []
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen and name not in repeated:
                repeated.append(name)
            seen.add(name)
        for name, value in obj.items():  # the kept value of a repeated name only
            repeated += [f"{name}.{inner}" for inner in _repeated(value)]
        obj.repeated = tuple(repeated)
        return obj


def _repeated(value: Any) -> tuple[str, ...]:
    """The repeated names in a decoded JSON value (objects within arrays included)."""
    if isinstance(value, _Object):
        return value.repeated
    if isinstance(value, list):
        return tuple(name for item in value for name in _repeated(item))
    return ()


# A string, closed or not (so that an unclosed one ends the scan instead of being tried again
# from every later quote, which would take quadratic time), or a bracket.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def _depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets in strings aside), in
    one linear pass and without recursion: ``json.loads`` recurses per level and would
    raise ``RecursionError`` for a thousand ``[``. Not JSON is for ``json.loads`` to say."""
    depth = deepest = 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def is_json(content_type: str | None) -> bool:
    """``application/json``, any case, with no parameter but ``charset=utf-8``."""
    if not content_type:
        return False
    media, *params = (p.strip().lower() for p in content_type.split(";"))
    return media == "application/json" and all(
        p.replace(" ", "") in ("charset=utf-8", 'charset="utf-8"') for p in params)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
