"""``GET /metrics``: the scheduler's figures in Prometheus' text exposition format.

Written with ``prometheus_client`` as a custom collector: each scrape reads one
:class:`~spark_adaptive.rest.facade.MetricsView` (one step of the scheduler
thread, so the figures of a scrape agree with each other) and turns it into
metric families. Nothing is kept between scrapes: counters and the rescale
histogram are the history's own cumulative tallies, so they only grow for the
life of the driver, as Prometheus expects of a ``_total``.

Names follow Prometheus' conventions: the ``spark_adaptive_`` prefix, base
units (seconds, rows per second), ``_total`` for counters. Per-query series
carry one ``query`` label: the query's name when it has one (stable across
restarts of the app), else its id. The registry is the server's own, not
``prometheus_client``'s global one, so an app that exports metrics of its own
with ``prometheus_client`` never sees ours mixed in, nor we its.

The full list, with what each means, is in docs/observability.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from spark_adaptive.core.streaming.history import DURATION_BUCKETS, Kind, Trigger
from spark_adaptive.core.streaming.load import backlog_rows
from spark_adaptive.core.streaming.query import QuerySnapshot
from spark_adaptive.core.streaming.states import StateName
from spark_adaptive.rest.facade import MetricsView, SchedulerFacade
from spark_adaptive.version import __version__

P = "spark_adaptive_"
_KINDS: tuple[Kind, ...] = ("live", "restart")
# Counted as Counters count them: a restart for a failure is a restart, not a rescale. A
# restart can carry INITIAL_SCHEDULE too (a query started again by its scheduler with no
# rescale under way).
_RESCALE_TRIGGERS = tuple(t.value for t in Trigger if t is not Trigger.FAILURE)
_OUTCOMES = ("not-ready", "no-change", "scale-up", "scale-down", "scale-down-pending",
             "blocked")


def query_label(q: QuerySnapshot) -> str:
    """The ``query`` label: its name, else its id."""
    return q.name or q.id


def query_labels(queries: tuple[QuerySnapshot, ...]) -> dict[str, str]:
    """Each query's label by key, unique. A name that several queries share (the app started
    its query again from a new checkpoint, or two sessions reuse it) is the bare label of
    the one the API resolves the name to, the live one (else the newest): the series of a
    name follow the query that runs under it. The others get their id appended."""
    named: dict[str, list[QuerySnapshot]] = {}
    for q in queries:
        named.setdefault(query_label(q), []).append(q)
    out: dict[str, str] = {}
    rest: list[tuple[str, QuerySnapshot]] = []
    for label, group in named.items():
        live = [q for q in group if q.state is not StateName.FINISHED]
        bare = (live or group)[-1]
        out[bare.key] = label
        rest += [(label, q) for q in group if q is not bare]
    taken = set(out.values())
    for label, q in rest:
        unique = f"{label} ({q.id})"
        if unique in taken:  # a name that looks like another query's label
            unique = f"{label} ({q.id}, {q.key})"
        taken.add(unique)
        out[q.key] = unique
    return out


class SchedulerCollector(Collector):
    """Reads the facade at each scrape."""

    def __init__(self, facade: SchedulerFacade) -> None:
        self._facade = facade

    def collect(self) -> Iterator[Metric]:
        view = self._facade.metrics()
        yield from _app(view)
        yield from _queries(view)
        yield from _autoscalers(view)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ("query",)) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, labels=list(labels))


def _counter(name: str, doc: str, labels: tuple[str, ...] = ("query",)) -> CounterMetricFamily:
    return CounterMetricFamily(P + name, doc, labels=list(labels))


def _app(view: MetricsView) -> Iterator[Metric]:
    a = view.app
    info = _gauge("info", "spark-adaptive on this driver: its version, listener and mode "
                  "(always 1).", ("version", "listener", "mode"))
    info.add_metric([__version__, a.listener, a.mode], 1)
    yield info
    declared = GaugeMetricFamily(P + "executors_declared", "Executors spark-adaptive last "
                                 "asked Spark for (no value before it asked).", labels=[])
    if a.executors_declared is not None:
        declared.add_metric([], a.executors_declared)
    yield declared
    yield GaugeMetricFamily(P + "executors_alive", "Executors registered with the driver.",
                            value=a.executors_alive)
    yield CounterMetricFamily(P + "events_received", "Spark events the scheduler received.",
                              value=a.events_received)
    yield CounterMetricFamily(P + "events_dropped", "Spark events dropped before the scheduler "
                              "saw them (the listener's queue was full, or a delivery to "
                              "Python failed).",
                              value=a.events_dropped)
    yield GaugeMetricFamily(P + "listener_queued_events", "Spark events waiting to be handled.",
                            value=a.events_queued)
    yield GaugeMetricFamily(P + "listener_lag_seconds", "Seconds the last event waited before "
                            "the scheduler handled it.", value=a.listener_lag)
    yield GaugeMetricFamily(P + "samples_held", "Samples held in memory for the operators' "
                            "page, all queries together.", value=a.samples_held)


def _queries(view: MetricsView) -> Iterator[Metric]:
    state = _gauge("query_state", "1 for the query's current state, 0 for the others.",
                   ("query", "state"))
    state_seconds = _gauge("query_state_seconds", "Seconds since the query entered its state.")
    parallelism = _gauge("query_parallelism", "Partitions of the running query (0 while "
                         "none runs).")
    slots = _gauge("query_slots", "The query's share of task slots.")
    executors = _gauge("query_executors", "Executors of the application the query runs on.")
    lower = _gauge("query_parallelism_lower_bound", "The query's lower parallelism bound.")
    upper = _gauge("query_parallelism_upper_bound", "The query's upper parallelism bound.")
    rescales = _counter("query_rescales", "Rescales begun, by kind (live: the query kept "
                        "running; restart: stopped and started again) and trigger.",
                        ("query", "kind", "trigger"))
    restarts = _counter("query_restarts", "Restarts begun, by trigger (FAILURE included).",
                        ("query", "trigger"))
    failures = _counter("query_failures", "Failures of the query, restarted or not.")
    durations = HistogramMetricFamily(
        P + "query_rescale_duration_seconds", "Seconds from a rescale's decision to the first "
        "micro-batch completed after it, completed rescales and restarts, by kind.",
        labels=["query", "kind"])
    last_duration = _gauge("query_last_rescale_duration_seconds",
                           "Duration of the last completed rescale or restart.")
    input_rate = _gauge("query_input_rows_per_second", "Input rate of the last micro-batch.")
    processed_rate = _gauge("query_processed_rows_per_second",
                            "Processing rate of the last micro-batch.")
    batch = _gauge("query_batch_duration_seconds", "Duration of the last micro-batch.")
    backlog = _gauge("query_backlog_rows", "Rows behind the source's latest offset after the "
                     "last micro-batch (only for sources that report it).")
    labels = query_labels(view.queries)
    for q in view.queries:
        label = labels[q.key]
        for name in StateName:
            state.add_metric([label, name.value], 1 if q.state is name else 0)
        state_seconds.add_metric([label], q.state_seconds)
        parallelism.add_metric([label], q.parallelism)
        slots.add_metric([label], q.slots)
        executors.add_metric([label], q.executors)
        lower.add_metric([label], q.requirements.lower)
        upper.add_metric([label], q.requirements.upper)
        opened = dict(q.tallies.opened)
        for kind in _KINDS:
            for trigger in _RESCALE_TRIGGERS:
                rescales.add_metric([label, kind, trigger],
                                    opened.get((kind, Trigger(trigger)), 0))
        for trigger in (t.value for t in Trigger):
            restarts.add_metric([label, trigger], opened.get(("restart", Trigger(trigger)), 0))
        failures.add_metric([label], q.counters.failures)
        hists = dict(q.tallies.durations)
        for kind in _KINDS:
            h = hists.get(kind)
            if h is None:
                buckets = [(_le(le), 0.0) for le in DURATION_BUCKETS] + [("+Inf", 0.0)]
                durations.add_metric([label, kind], buckets, 0.0)
                continue
            buckets = [(_le(le), float(c)) for le, c in zip(DURATION_BUCKETS, h.counts,
                                                             strict=True)]
            durations.add_metric([label, kind], buckets + [("+Inf", float(h.count))], h.total)
        if q.tallies.last_duration is not None:
            last_duration.add_metric([label], q.tallies.last_duration)
        p = q.progress
        if p is not None:
            input_rate.add_metric([label], p.input_rows_per_second)
            processed_rate.add_metric([label], p.processed_rows_per_second)
            batch.add_metric([label], p.batch_duration)
            rows = backlog_rows(p)
            if rows is not None:
                backlog.add_metric([label], rows)
    yield from (state, state_seconds, parallelism, slots, executors, lower, upper, rescales,
                restarts, failures, durations, last_duration, input_rate, processed_rate, batch,
                backlog)


def _autoscalers(view: MetricsView) -> Iterator[Metric]:
    if not view.autoscalers:
        return
    target = _gauge("autoscaler_target_rate", "Rows per second the query must process: input "
                    "plus the backlog over the catch-up duration.")
    per_slot = _gauge("autoscaler_true_rate_per_slot", "Rows per second one task slot "
                      "processes when busy.")
    utilization = _gauge("autoscaler_utilization", "Input rate over the query's capacity: 1 is "
                         "every slot busy, above 1 the query falls behind.")
    slots = _gauge("autoscaler_recommended_slots", "Slots the autoscaler's last decision "
                   "recommends.")
    partitions = _gauge("autoscaler_recommended_parallelism", "Partitions the autoscaler's "
                        "last decision recommends.")
    decisions = _counter("autoscaler_decisions", "Evaluations of the query by outcome.",
                         ("query", "outcome"))
    forecast = _gauge("autoscaler_forecast_rate", "Rows per second the query's recurring "
                      "load is forecast to reach within the horizon ahead (forecast.enabled).")
    forecast_in_use = _gauge("autoscaler_forecast_in_use", "1 while the autoscaler acts on "
                             "the forecast (the periods back agree), else 0.")
    ahead = _counter("autoscaler_forecast_scale_ups", "Scale-ups taken ahead of a forecast "
                     "rise (trigger FORECAST).", ("query",))
    labels = query_labels(view.queries)
    for key, status in view.autoscalers.items():
        label = labels.get(key)
        if label is None:
            continue
        d = status.decision
        if d is not None:
            slots.add_metric([label], d.target_slots)
            partitions.add_metric([label], d.target_partitions)
            for family, value in ((target, d.inputs.target_rate),
                                  (per_slot, d.inputs.true_rate_per_slot),
                                  (utilization, d.inputs.utilization)):
                if value is not None:
                    family.add_metric([label], value)
        counts = dict(status.decisions)
        for outcome in _OUTCOMES:
            decisions.add_metric([label, outcome], counts.get(outcome, 0))
        f = status.forecast
        if f is not None:
            if f.rate is not None:
                forecast.add_metric([label], f.rate)
            forecast_in_use.add_metric([label], 1.0 if f.in_use else 0.0)
            ahead.add_metric([label], status.ahead)
    yield from (target, per_slot, utilization, slots, partitions, decisions, forecast,
                forecast_in_use, ahead)


def _le(bound: float) -> str:
    return repr(float(bound))


class Exporter:
    """Renders ``/metrics`` for one facade (its own registry)."""

    def __init__(self, facade: SchedulerFacade) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SchedulerCollector(facade))

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition and its content type, as the ``Accept`` header asks (Prometheus'
        text format, or OpenMetrics when the scraper prefers it)."""
        encoder, content_type = choose_encoder(usable_accept(accept or ""))
        return encoder(self.registry), content_type


_VERSION = re.compile(r"\s*version\s*=\s*(.*?)\s*$", re.IGNORECASE)
_NUMBERS = re.compile(r"[0-9]+(\.[0-9]+)*")


def usable_accept(accept: str) -> str:
    """``accept`` without the media ranges whose ``version`` is not numbers and dots
    (``prometheus_client`` compares a version with ``(1, 0, 0)``, and one like ``abc``
    raises ``TypeError``). What is left is what it knows; with nothing left it answers
    the plain text format, as for any ``Accept`` it does not know."""
    kept = []
    for media_range in accept.split(","):
        versions = [m.group(1) for m in map(_VERSION.match, media_range.split(";")[1:]) if m]
        if all(_NUMBERS.fullmatch(v) for v in versions):
            kept.append(media_range)
    return ",".join(kept)


def _name_part(text: str) -> str:
    """A query's label as one part of a dotted Spark metric name."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text) or "_"


def flat_names(queries: tuple[QuerySnapshot, ...]) -> dict[str, str]:
    """Each query's part of the dotted names by key, unique after cleaning: two labels that
    differ only in characters made ``_`` (``a.b``, ``a_b``) would otherwise write the same
    gauges. A clash gets the short form of the query's id appended (its key, should that
    clash too); the queries with a bare ``query`` label choose first."""
    labels = query_labels(queries)
    bare = sorted(queries, key=lambda q: labels[q.key] != query_label(q))  # stable
    out: dict[str, str] = {}
    taken: set[str] = set()
    for q in bare:
        base = _name_part(labels[q.key])
        tried = [base, *(f"{base}_{_name_part(s)}" for s in (q.id[:8], q.id, q.key))]
        part = next((t for t in tried if t not in taken), None)
        n = 2
        while part is None or part in taken:
            part, n = f"{tried[-1]}_{n}", n + 1
        taken.add(part)
        out[q.key] = part
    return out


def flat_figures(view: MetricsView) -> dict[str, float]:
    """The figures Spark's metrics system carries, as dotted gauge names (Spark's names have
    no labels): ``executors.alive``, ``query.<name>.parallelism``, ... The per-trigger
    counts, the histogram and the states one by one stay at ``/metrics``; here a query's
    state is its position in :class:`StateName` (``state.code``)."""
    a = view.app
    out: dict[str, float] = {
        "executors.alive": a.executors_alive, "events.received": a.events_received,
        "events.dropped": a.events_dropped, "listener.queued": a.events_queued,
        "listener.lagSeconds": a.listener_lag,
    }
    if a.executors_declared is not None:
        out["executors.declared"] = a.executors_declared
    states = list(StateName)
    names = flat_names(view.queries)
    for q in view.queries:
        p = f"query.{names[q.key]}."
        c = q.counters
        out.update({
            p + "state.code": states.index(q.state), p + "state.seconds": q.state_seconds,
            p + "parallelism": q.parallelism, p + "slots": q.slots,
            p + "executors": q.executors, p + "bounds.lower": q.requirements.lower,
            p + "bounds.upper": q.requirements.upper, p + "rescales": c.rescales,
            p + "rescales.live": c.live_rescales, p + "restarts": c.restarts,
            p + "failures": c.failures})
        if q.tallies.last_duration is not None:
            out[p + "rescales.lastDurationSeconds"] = q.tallies.last_duration
        if q.progress is not None:
            out[p + "inputRowsPerSecond"] = q.progress.input_rows_per_second
            out[p + "processedRowsPerSecond"] = q.progress.processed_rows_per_second
            out[p + "batchDurationSeconds"] = q.progress.batch_duration
        status = view.autoscalers.get(q.key)
        d = None if status is None else status.decision
        if d is not None:
            out[p + "autoscaler.recommendedSlots"] = d.target_slots
            out[p + "autoscaler.recommendedParallelism"] = d.target_partitions
            if d.inputs.target_rate is not None:
                out[p + "autoscaler.targetRate"] = d.inputs.target_rate
            if d.inputs.true_rate_per_slot is not None:
                out[p + "autoscaler.trueRatePerSlot"] = d.inputs.true_rate_per_slot
    return {k: float(v) for k, v in out.items()}
