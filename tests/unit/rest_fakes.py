"""Hand-written fakes for the REST API's unit tests (no mocking library).

* :class:`FakeScheduler` implements :class:`~spark_adaptive.rest.facade.SchedulerFacade`
  with Flink's validation (the real :func:`~spark_adaptive.core.streaming.requirements.from_body`)
  and the real :class:`~spark_adaptive.core.streaming.persistence.PersistedRequirements`
  over a store of the test's choosing; it records what was applied.
* :class:`BlockingStore` holds every ``save`` until the test releases it, so
  that a second PUT arrives while the first is in flight.
* :class:`FailingStore` cannot write.
* :func:`serving` runs a real server on 127.0.0.1, port 0; :func:`call` talks
  to it with ``http.client`` (full control of headers and bodies).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from spark_adaptive.core.ports import QueryInfo
from spark_adaptive.core.streaming import requirements as req
from spark_adaptive.core.streaming.autoscaling import AutoscalerStatus
from spark_adaptive.core.streaming.history import (
    Counters,
    Decision,
    RescaleRecord,
    Tallies,
    Trigger,
)
from spark_adaptive.core.streaming.persistence import (
    MemoryRequirementsStore,
    PersistedRequirements,
    Undo,
)
from spark_adaptive.core.streaming.query import QuerySnapshot
from spark_adaptive.core.streaming.samples import Sample
from spark_adaptive.core.streaming.scheduler import REACTIVE_REQUIREMENTS
from spark_adaptive.core.streaming.settings import SchedulerSettings
from spark_adaptive.core.streaming.states import StateName
from spark_adaptive.errors import (
    ConflictError,
    PersistenceError,
    RequirementsError,
    UnknownQueryError,
)
from spark_adaptive.rest import openapi
from spark_adaptive.rest.api import RestApi
from spark_adaptive.rest.facade import AppFigures, MetricsView, RescaleView, SamplesView
from spark_adaptive.rest.server import RestServer

QUERY_ID = "0f9c8b1e-4d2a-4e6b-9a51-2b7c0d3e8f14"
COUNTERS = Counters(restarts=1, rescales=1, live_rescales=0, failures=0)
CHECKPOINT = "/checkpoints/orders"


@dataclass
class FakeQuery:
    key: str
    id: str
    name: str | None
    requirements: req.ResourceRequirements
    partitions: int = 4
    checkpoint: str | None = CHECKPOINT
    finished: bool = False
    applied: list[req.ResourceRequirements] = field(default_factory=list)

    tallies: Tallies = Tallies()
    samples: tuple[Sample, ...] = ()

    def snapshot(self) -> QuerySnapshot:
        return QuerySnapshot(
            id=self.id, key=self.key, name=self.name,
            state=StateName.FINISHED if self.finished else StateName.EXECUTING,
            parallelism=2, slots=2, executors=2, requirements=self.requirements,
            last_decision=Decision(1.7e9, "CreatingExecutionGraph -> Executing",
                                   "started at parallelism 2"),
            counters=COUNTERS, run_id="run-1", status="CANCELED" if self.finished else None,
            state_seconds=12.5, tallies=self.tallies)


class FakeScheduler:
    """A :class:`SchedulerFacade` with one query, ``orders`` (key ``query-1``), bounds [1, 4]."""

    def __init__(self, store: MemoryRequirementsStore | None = None, *, mode: str = "adaptive",
                 max_parallelism: int = 32768) -> None:
        self.store = store if store is not None else MemoryRequirementsStore()
        self.settings = SchedulerSettings(mode=mode, max_parallelism=max_parallelism)
        self.persisted = PersistedRequirements(self.store, self.settings)
        self.queries_by_key: dict[str, FakeQuery] = {}
        #: What GET /queries/{id}/autoscaler answers (None: the autoscaler is off).
        self.autoscaler_status: AutoscalerStatus | None = None
        #: The application's figures /metrics exports.
        self.app = AppFigures(mode=mode, listener="shim", executors_declared=2,
                              executors_alive=2, events_received=120, events_dropped=0,
                              events_queued=1, listener_lag=0.004, samples_held=0)
        self.add(FakeQuery("query-1", QUERY_ID, "orders", req.ResourceRequirements(1, 4)))

    def add(self, q: FakeQuery) -> FakeQuery:
        self.queries_by_key[q.key] = q
        self.persisted.restore(QueryInfo(q.key, q.name, q.partitions, q.checkpoint, 1.0))
        return q

    def _find(self, ident: str) -> FakeQuery:
        for q in self.queries_by_key.values():
            if ident in (q.key, q.id, q.name):
                return q
        raise UnknownQueryError(ident)

    # -- SchedulerFacade --------------------------------------------------------------
    def queries(self) -> list[QuerySnapshot]:
        return [q.snapshot() for q in self.queries_by_key.values()]

    def query(self, ident: str) -> QuerySnapshot:
        return self._find(ident).snapshot()

    def key_of(self, ident: str) -> str:
        return self._find(ident).key

    def requirements(self, key: str) -> req.ResourceRequirements:
        return self._find(key).requirements

    def rescales(self, key: str) -> RescaleView:
        q = self._find(key)
        record = RescaleRecord(
            1, 1.7e9, Trigger.INITIAL_SCHEDULE, "initial", from_parallelism=0,
            to_parallelism=2, from_slots=0, to_slots=2, reason="sufficient resources",
            started=0.0, duration=3.25, outcome="completed", timings=(("start", 1.5),))
        return RescaleView(q.id, q.key, (record,), COUNTERS)

    def check_requirements(self, key: str, lower: int | None,
                           upper: int | None) -> req.ResourceRequirements:
        q = self._find(key)
        if self.settings.mode == "reactive":
            raise RequirementsError([REACTIVE_REQUIREMENTS])
        if q.finished:
            raise ConflictError(f"query {key} has finished; its requirements cannot change")
        return req.validate(lower, upper, max_parallelism=self.settings.max_parallelism,
                            default_upper=q.partitions)

    def autoscaler(self, key: str) -> AutoscalerStatus | None:
        self._find(key)
        return self.autoscaler_status

    def samples(self, key: str) -> SamplesView:
        q = self._find(key)
        return SamplesView(q.id, 2.0, 300, q.samples)

    def metrics(self) -> MetricsView:
        statuses = {} if self.autoscaler_status is None else {
            k: self.autoscaler_status for k in self.queries_by_key}
        return MetricsView(tuple(self.queries()), statuses, self.app)

    def persist_requirements(self, key: str, requirements: req.ResourceRequirements
                             ) -> Undo | None:
        return self.persisted.persist(key, requirements)

    def apply_requirements(self, key: str, requirements: req.ResourceRequirements) -> None:
        q = self._find(key)
        if q.finished:
            raise ConflictError(f"query {key} has finished; its requirements cannot change")
        q.requirements = requirements
        q.applied.append(requirements)


class BlockingStore(MemoryRequirementsStore):
    """Every ``save`` waits for :meth:`release`; :attr:`saving` is set once one waits."""

    def __init__(self) -> None:
        super().__init__()
        self.saving = threading.Event()
        self._go = threading.Event()

    def save(self, checkpoint: str, requirements: req.ResourceRequirements) -> None:
        self.saving.set()
        assert self._go.wait(10), "the test never released the store"
        super().save(checkpoint, requirements)

    def release(self) -> None:
        self._go.set()


class FailingStore(MemoryRequirementsStore):
    def save(self, checkpoint: str, requirements: req.ResourceRequirements) -> None:
        raise PersistenceError(f"cannot write {checkpoint}/spark-adaptive/requirements.json: "
                               "java.io.IOException: disk full")


@contextmanager
def serving(facade: Any, token: str | None = None, **kw: Any) -> Iterator[RestServer]:
    holder: list[RestServer] = []
    api = RestApi(facade, lambda: openapi.document(holder[0].url, holder[0].token_required))
    kw.setdefault("poll_interval", 0.01)
    server = RestServer(api, host="127.0.0.1", port=0, token=token, **kw)
    holder.append(server)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


def call(url: str, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str | None] | None = None) -> Reply:
    """One request on a fresh connection; ``body`` is sent as JSON, ``raw`` as it is, both
    with ``Content-Type: application/json`` unless ``headers`` give one (None: none)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = dict(headers or {})
    if data is not None:
        sent.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data,
                     headers={k: v for k, v in sent.items() if v is not None})
        resp = conn.getresponse()
        text = resp.read()
        got = {k.lower(): v for k, v in resp.getheaders()}
        if not got.get("content-type", "").startswith("application/json"):
            return Reply(resp.status, got, text.decode("utf-8"))  # the metrics, the page
        return Reply(resp.status, got, json.loads(text) if text else None)
    finally:
        conn.close()


def bounds(lower: Any, upper: Any) -> dict[str, Any]:
    return {"parallelism": {"lowerBound": lower, "upperBound": upper}}
