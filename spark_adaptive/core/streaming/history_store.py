"""A query's rescale history kept beside its checkpoint, so it survives a driver restart.

The requirements a REST ``PUT`` accepted already live there
(:mod:`~spark_adaptive.core.streaming.persistence`); the history joins them, so
that what happened to a query (its records, Flink's ``numRestarts`` and
``numRescales``, the tallies behind ``/metrics``) is the query's, not one
driver's. The layout is one JSON file::

    <checkpoint>/spark-adaptive/history.json
    {"version": 1, "updated": 1.7e9, "nextId": 3,
     "counters": {"restarts": 1, "rescales": 1, "liveRescales": 0, "failures": 0},
     "tallies": {"opened": [...], "finished": [...], "durations": [...],
                 "lastDuration": 15.5},
     "records": [{"id": 1, "time": 1.7e9, "trigger": "INITIAL_SCHEDULE", ...}, ...],
     "load": {"period": 86400, "bucket": 300, "buckets": [[5760000, 1.2e6, 300.0, 0.0], ...]}}

``load`` (with ``autoscaler.forecast.enabled``) is the query's input rate per bucket of
its forecast period (:class:`~spark_adaptive.core.autoscaler.forecast.SavedLoad`):
rows and seconds observed per wall-clock bucket index, and the rows of them that
micro-batches spanning more than one bucket spread into it.

Records are stored as ``GET /queries/{id}/rescales`` shows them (wall-clock
``time``, ``duration`` in seconds, ``timings`` as ordered pairs), so a restored
history reads exactly as it did; the monotonic ``started`` of a record means
nothing in another process and is rebuilt from ``time`` by
:class:`~spark_adaptive.core.streaming.history.RescaleHistory`. Each duration
histogram carries its bucket bounds: one saved with other bounds than
:data:`~spark_adaptive.core.streaming.history.DURATION_BUCKETS` starts over.

This module is the pure part: the file format (:func:`encode`, :func:`decode`),
the :class:`HistoryStore` port that reads and writes it (over Hadoop's
FileSystem in :mod:`spark_adaptive.spark.store`, in memory by
:class:`MemoryHistoryStore`), the :class:`HistoryWriter` port through which
the scheduler thread hands a history over without waiting for the store, and
:func:`restore_history`, which reads a query's history as it starts and never
lets a bad file stop it.

A file that is there but cannot be read (the store did not answer, the file is
corrupt or of a newer format) is never replaced: the query's history then
starts empty as an :class:`UnreadHistory`, which its scheduler keeps in memory
only, so the saved one is still there for the next start of the query to read.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Protocol, get_args

from spark_adaptive.core.autoscaler.forecast import SavedLoad
from spark_adaptive.core.ports import QueryInfo
from spark_adaptive.core.streaming.history import (
    DURATION_BUCKETS,
    Counters,
    DurationHistogram,
    Kind,
    Outcome,
    RescaleRecord,
    SavedHistory,
    Tallies,
    Trigger,
)
from spark_adaptive.core.streaming.persistence import json_object

log = logging.getLogger(__name__)

HISTORY_PATH = "spark-adaptive/history.json"
"""Where the history lives, relative to the query's checkpoint location."""
FORMAT_VERSION = 1

_KINDS: tuple[str, ...] = get_args(Kind)
_OUTCOMES: tuple[str, ...] = get_args(Outcome)


def history_file(checkpoint: str) -> str:
    """The history file of a checkpoint location, as messages name it."""
    return f"{checkpoint.rstrip('/')}/{HISTORY_PATH}"


# -- the file format ------------------------------------------------------------------------
def _record(r: RescaleRecord) -> dict[str, Any]:
    return {"id": r.id, "time": r.time, "trigger": r.trigger.value, "kind": r.kind,
            "fromParallelism": r.from_parallelism, "toParallelism": r.to_parallelism,
            "fromSlots": r.from_slots, "toSlots": r.to_slots, "duration": r.duration,
            "outcome": r.outcome, "timings": [[name, s] for name, s in r.timings],
            "reason": r.reason}


def encode(history: SavedHistory, updated: float | None = None) -> str:
    """The file's content: the history, a format version and the wall time of the write.
    ``ValueError`` for a figure JSON cannot hold (not finite)."""
    c, t = history.counters, history.tallies
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "updated": time.time() if updated is None else updated,
        "nextId": history.next_id,
        "counters": {"restarts": c.restarts, "rescales": c.rescales,
                     "liveRescales": c.live_rescales, "failures": c.failures},
        "tallies": {
            "opened": [{"kind": kind, "trigger": trigger.value, "count": n}
                       for (kind, trigger), n in t.opened],
            "finished": [{"kind": kind, "outcome": outcome, "count": n}
                         for (kind, outcome), n in t.finished],
            "durations": [{"kind": kind, "le": list(DURATION_BUCKETS), "counts": list(h.counts),
                           "count": h.count, "sum": h.total} for kind, h in t.durations],
            "lastDuration": t.last_duration},
        "records": [_record(r) for r in history.records],
    }
    if history.load is not None:
        load = history.load
        doc["load"] = {"period": load.period, "bucket": load.bucket,
                       "buckets": [list(b) for b in load.buckets]}
    return json.dumps(doc, sort_keys=True, allow_nan=False) + "\n"


def _value(obj: dict[str, Any], key: str, where: str, kinds: tuple[type, ...],
           what: str) -> Any:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"'{where}{key}' is not {what}: {value!r}")
    return value


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    n: int = _value(obj, key, where, (int,), "an integer")
    return n


def _count(obj: dict[str, Any], key: str, where: str) -> int:
    n = _int(obj, key, where)
    if n < 0:
        raise ValueError(f"'{where}{key}' is negative: {n}")
    return n


def _number(obj: dict[str, Any], key: str, where: str) -> float:
    n = float(_value(obj, key, where, (int, float), "a number"))
    if not math.isfinite(n):
        raise ValueError(f"'{where}{key}' is not finite: {n}")
    return n


def _optional_number(obj: dict[str, Any], key: str, where: str) -> float | None:
    return None if obj.get(key) is None else _number(obj, key, where)


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    text: str = _value(obj, key, where, (str,), "a string")
    return text


def _list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    items: list[Any] = _value(obj, key, where, (list,), "a JSON array")
    return items


def _object(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    d: dict[str, Any] = _value(obj, key, where, (dict,), "a JSON object")
    return d


def _kind(value: str) -> Kind:
    if value not in _KINDS:
        raise ValueError(f"unknown kind {value!r}")
    return value  # type: ignore[return-value]


def _outcome(value: str) -> Outcome:
    if value not in _OUTCOMES:
        raise ValueError(f"unknown outcome {value!r}")
    return value  # type: ignore[return-value]


def _trigger(value: str) -> Trigger:
    try:
        return Trigger(value)
    except ValueError:
        raise ValueError(f"unknown trigger {value!r}") from None


def _objects(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    items = _list(doc, key, where)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"'{where}{key}[{i}]' is not a JSON object")
    return items


def _decode_record(r: dict[str, Any], where: str) -> RescaleRecord:
    timings = []
    for pair in _list(r, "timings", where):
        if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str)
                or isinstance(pair[1], bool) or not isinstance(pair[1], (int, float))):
            raise ValueError(f"'{where}timings' holds {pair!r}, not a [name, seconds] pair")
        timings.append((pair[0], float(pair[1])))
    wall = _number(r, "time", where)
    return RescaleRecord(
        id=_int(r, "id", where), time=wall, trigger=_trigger(_str(r, "trigger", where)),
        kind=_kind(_str(r, "kind", where)),
        from_parallelism=_count(r, "fromParallelism", where),
        to_parallelism=_count(r, "toParallelism", where),
        from_slots=_count(r, "fromSlots", where), to_slots=_count(r, "toSlots", where),
        reason=_str(r, "reason", where),
        started=wall,  # re-based on the restoring process's clock by RescaleHistory
        duration=_optional_number(r, "duration", where),
        outcome=_outcome(_str(r, "outcome", where)), timings=tuple(timings))


def _decode_tallies(t: dict[str, Any]) -> Tallies:
    w = "tallies."
    opened = tuple(((_kind(_str(o, "kind", w + "opened.")),
                     _trigger(_str(o, "trigger", w + "opened."))),
                    _count(o, "count", w + "opened."))
                   for o in _objects(t, "opened", w))
    finished = tuple(((_kind(_str(f, "kind", w + "finished.")),
                       _outcome(_str(f, "outcome", w + "finished."))),
                      _count(f, "count", w + "finished."))
                     for f in _objects(t, "finished", w))
    durations = []
    for d in _objects(t, "durations", w):
        where = w + "durations."
        kind = _kind(_str(d, "kind", where))
        bounds, counts = _list(d, "le", where), _list(d, "counts", where)
        if len(counts) != len(bounds) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            raise ValueError(f"'{where}counts' must hold a count for each bucket of 'le'")
        if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
            raise ValueError(f"'{where}le' must hold the buckets' upper bounds")
        histogram = DurationHistogram(tuple(counts), _count(d, "count", where),
                                      _number(d, "sum", where))
        if [float(b) for b in bounds] == list(DURATION_BUCKETS):
            durations.append((kind, histogram))
        else:
            log.info("rescale durations of kind %s were counted in other buckets (%s); their "
                     "histogram starts over", kind, bounds)
    return Tallies(opened=opened, finished=finished, durations=tuple(durations),
                   last_duration=_optional_number(t, "lastDuration", w))


def decode(text: str) -> SavedHistory:
    """Read a file written by :func:`encode`; ``ValueError`` says what is wrong with it
    (a file of a newer format version included)."""
    doc = json_object(text)
    version = doc.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise ValueError(f"written in format version {version}, newer than the version "
                         f"{FORMAT_VERSION} this spark-adaptive reads")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {version!r}")
    c = _object(doc, "counters", "")
    counters = Counters(
        restarts=_count(c, "restarts", "counters."), rescales=_count(c, "rescales", "counters."),
        live_rescales=_count(c, "liveRescales", "counters."),
        failures=_count(c, "failures", "counters."))
    tallies = _decode_tallies(_object(doc, "tallies", ""))
    records = tuple(_decode_record(r, f"records[{i}].")
                    for i, r in enumerate(_objects(doc, "records", "")))
    next_id = _int(doc, "nextId", "")
    if next_id < 1:
        raise ValueError(f"'nextId' must be at least 1: {next_id}")
    return SavedHistory(records, counters, tallies, next_id, _decode_load(doc))


def _decode_load(doc: dict[str, Any]) -> SavedLoad | None:
    """The forecast's buckets, if saved: an unreadable part of them is left out (and said),
    never the history with it; the forecast then learns again."""
    load = doc.get("load")
    if load is None:
        return None
    try:
        period, bucket = float(load["period"]), float(load["bucket"])
        buckets = tuple(_bucket(b) for b in load["buckets"])
    except (TypeError, ValueError, KeyError) as e:
        log.warning("the forecast's input rates in the history file cannot be read (%s: %s); "
                    "the forecast learns them again", type(e).__name__, e)
        return None
    return SavedLoad(period, bucket, buckets)


def _bucket(entry: Any) -> tuple[int, float, float, float]:
    """(index, rows, seconds, rows spread); a file saved before the fourth has three."""
    if not isinstance(entry, list) or len(entry) not in (3, 4):
        raise ValueError(f"a bucket is 3 or 4 figures, not {entry!r}")
    spread = float(entry[3]) if len(entry) == 4 else 0.0
    return int(entry[0]), float(entry[1]), float(entry[2]), spread


@dataclass(frozen=True)
class UnreadHistory(SavedHistory):
    """The history of a query whose saved history file exists but could not be read
    (``problem`` says why, naming the file). Its scheduler keeps it in memory and never
    writes it: a write would replace the history the file holds."""

    problem: str = ""


# -- the ports ---------------------------------------------------------------------------
class HistoryStore(Protocol):
    """Reads and writes the history file of a checkpoint location.

    ``load`` returns ``None`` when there is no file and raises ``ValueError`` for one
    it cannot read as a history; both methods raise
    :class:`~spark_adaptive.errors.PersistenceError` when the store cannot be reached or
    written. Their messages name the file. ``save`` replaces the file atomically.
    """

    def load(self, checkpoint: str) -> SavedHistory | None: ...

    def save(self, checkpoint: str, history: SavedHistory) -> None: ...


class HistoryWriter(Protocol):
    """Where the scheduler thread hands a query's history to be saved beside its checkpoint.

    ``write`` returns at once, whatever the store's speed; the newest history handed over
    for a checkpoint is the one that ends up saved. A write that fails is the writer's to
    report: the query goes on.
    """

    def write(self, checkpoint: str, label: str, history: SavedHistory) -> None: ...


class MemoryHistoryStore:
    """A :class:`HistoryStore` keeping each file's text in a dict (tests; apps without
    durable storage): what it saves and loads goes through :func:`encode` and
    :func:`decode`."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def load(self, checkpoint: str) -> SavedHistory | None:
        text = self.files.get(checkpoint)
        if text is None:
            return None
        try:
            return decode(text)
        except ValueError as e:
            raise ValueError(f"{history_file(checkpoint)} is not a rescale history: {e}"
                             ) from None

    def save(self, checkpoint: str, history: SavedHistory) -> None:
        self.files[checkpoint] = encode(history)


def why(error: Exception, checkpoint: str) -> str:
    """What went wrong with a checkpoint's history file, naming the file."""
    message = str(error).strip() or type(error).__name__
    file = history_file(checkpoint)
    if file in message or HISTORY_PATH in message:
        return message
    return f"{file}: {type(error).__name__}: {message}"


def restore_history(store: HistoryStore, info: QueryInfo) -> SavedHistory | None:
    """The history persisted beside the query's checkpoint, or ``None`` (it starts empty):
    there is none, or no checkpoint. A file that cannot be read (unreachable, corrupt,
    newer) gives an empty :class:`UnreadHistory`, with one WARNING naming the file and
    why: the query starts all the same, and the file is left as it is. Never raises."""
    label = info.name or info.key
    location = info.checkpoint_location
    if location is None:
        return None
    try:
        saved = store.load(location)
    except Exception as e:  # corrupt, newer, unreachable: the query starts all the same
        problem = why(e, location)
        log.warning("query %s: cannot read the rescale history persisted beside its "
                    "checkpoint (%s); its history starts empty and is kept in memory only: "
                    "the file is left as it is for the query's next start to read", label,
                    problem)
        return UnreadHistory(problem=problem)
    if saved is None:
        return None
    c = saved.counters
    pending = [r.id for r in saved.records if r.outcome == "pending"]
    log.info("query %s: rescale history restored from %s: %d records, restarts %d, rescales "
             "%d (live %d), failures %d%s", label, history_file(location), len(saved.records),
             c.restarts, c.rescales, c.live_rescales, c.failures,
             f"; record {pending[0]} was under way when the driver stopped: failed"
             if pending else "")
    return saved
