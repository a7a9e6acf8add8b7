"""Resource requirements kept beside a query's checkpoint, so they survive a driver restart.

Flink persists the requirements a REST ``PUT`` accepted
(``executionPlanWriter.putJobResourceRequirements``) before it applies them,
so that a JobManager failover keeps them. Here the natural home is the
query's checkpoint: it already survives the driver, it is what identifies the
query across restarts, and it lives on whatever store the app uses (local
disk, HDFS, S3). The layout is one small JSON file::

    <checkpoint>/spark-adaptive/requirements.json
    {"version": 1, "parallelism": {"lowerBound": 1, "upperBound": 4}, "updated": 1.7e9}

This module is the pure part: the file format (:func:`encode`,
:func:`decode`), the :class:`RequirementsStore` port that reads and writes it
(implemented over Hadoop's FileSystem in :mod:`spark_adaptive.spark.store`, in
memory by :class:`MemoryRequirementsStore`), and
:class:`PersistedRequirements`, which knows each managed query's checkpoint.

Contract of :class:`PersistedRequirements`:

* :meth:`~PersistedRequirements.restore` (:meth:`~PersistedRequirements.remember`
  then :meth:`~PersistedRequirements.load`) is called once per query as it is
  registered. It returns the stored bounds, re-validated against the current
  settings, or ``None`` (use the defaults) when there are none, they cannot be
  read, they no longer fit (e.g. max-parallelism was lowered) or the app runs
  in reactive mode (where requirements cannot be set). It never raises.
* :meth:`~PersistedRequirements.persist` writes new bounds and returns an undo
  function that puts back exactly what was there before (including nothing),
  for when applying them fails afterwards; ``None`` when the query has no
  checkpoint and nothing was written. Failure raises
  :class:`~spark_adaptive.errors.PersistenceError` and leaves the old file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from spark_adaptive.core.ports import QueryInfo
from spark_adaptive.core.streaming import requirements as req
from spark_adaptive.core.streaming.settings import SchedulerSettings
from spark_adaptive.errors import RequirementsError

log = logging.getLogger(__name__)

RELATIVE_PATH = "spark-adaptive/requirements.json"
"""Where the requirements live, relative to the query's checkpoint location."""
FORMAT_VERSION = 1

Undo = Callable[[], None]


def encode(requirements: req.ResourceRequirements, updated: float | None = None) -> str:
    """The file's content: the bounds in the REST API's shape, a format version and the wall
    time of the write."""
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "parallelism": {"lowerBound": requirements.lower, "upperBound": requirements.upper},
        "updated": time.time() if updated is None else updated}
    return json.dumps(doc, sort_keys=True) + "\n"


def json_object(text: str) -> dict[str, Any]:
    """The JSON object a file beside the checkpoint holds; ``ValueError`` when it is none."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def decode(text: str) -> req.ResourceRequirements:
    """Read a file written by :func:`encode`; ``ValueError`` says what is wrong with it."""
    doc = json_object(text)
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {doc.get('version')!r}")
    bounds = doc.get("parallelism")
    if not isinstance(bounds, dict):
        raise ValueError("'parallelism' must be a JSON object")
    lower, upper = bounds.get("lowerBound"), bounds.get("upperBound")
    for name, value in (("lowerBound", lower), ("upperBound", upper)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"'parallelism.{name}' is not an integer: {value!r}")
    try:
        return req.ResourceRequirements(lower, upper)  # type: ignore[arg-type]
    except RequirementsError as e:
        raise ValueError(str(e)) from None


class RequirementsStore(Protocol):
    """Reads and writes the requirements file of a checkpoint location.

    Implementations raise :class:`~spark_adaptive.errors.PersistenceError` when
    the store cannot be reached or written; ``save`` replaces the file
    atomically, so a reader sees the old content or the new, never a mix.
    """

    def load(self, checkpoint: str) -> req.ResourceRequirements | None:
        """The stored bounds; ``None`` if there is no file. A corrupt file raises ValueError."""
        ...

    def save(self, checkpoint: str, requirements: req.ResourceRequirements) -> None: ...

    def remove(self, checkpoint: str) -> None:
        """Delete the file if there is one."""
        ...


class MemoryRequirementsStore:
    """A :class:`RequirementsStore` in a dict (tests; apps without durable storage)."""

    def __init__(self) -> None:
        self.files: dict[str, req.ResourceRequirements] = {}

    def load(self, checkpoint: str) -> req.ResourceRequirements | None:
        return self.files.get(checkpoint)

    def save(self, checkpoint: str, requirements: req.ResourceRequirements) -> None:
        self.files[checkpoint] = requirements

    def remove(self, checkpoint: str) -> None:
        self.files.pop(checkpoint, None)


class PersistedRequirements:
    """The managed queries' checkpoints, and their requirements kept there. Thread-safe."""

    def __init__(self, store: RequirementsStore, settings: SchedulerSettings) -> None:
        self._store = store
        self._settings = settings
        self._lock = threading.Lock()
        self._checkpoints: dict[str, tuple[str | None, str]] = {}

    def checkpoint(self, key: str) -> str | None:
        """The checkpoint location of the query with this key (None: it has none)."""
        with self._lock:
            return self._checkpoints.get(key, (None, key))[0]

    def restore(self, info: QueryInfo) -> req.ResourceRequirements | None:
        """Remember the query's checkpoint; return its persisted bounds if they still apply."""
        self.remember(info)
        return self.load(info)

    def remember(self, info: QueryInfo) -> None:
        """Where the query with ``info.key`` keeps its requirements, for :meth:`persist`."""
        with self._lock:
            self._checkpoints[info.key] = (info.checkpoint_location, info.name or info.key)

    def load(self, info: QueryInfo) -> req.ResourceRequirements | None:
        """The bounds persisted in the query's checkpoint, if they still apply (never raises)."""
        label = info.name or info.key
        location = info.checkpoint_location
        if location is None:
            return None
        try:
            saved = self._store.load(location)
        except Exception as e:  # corrupt file, store unreachable: the defaults still work
            log.warning("query %s: ignoring the requirements persisted in %s (%s); using the "
                        "defaults", label, location, e)
            return None
        if saved is None:
            return None
        if self._settings.mode == "reactive":
            log.info("query %s: reactive mode uses every slot; the requirements [%d, %d] "
                     "persisted in %s are ignored", label, saved.lower, saved.upper, location)
            return None
        try:
            checked = req.validate(
                saved.lower, saved.upper, max_parallelism=self._settings.max_parallelism,
                default_upper=self._settings.effective_upper_bound(info.configured_partitions))
        except RequirementsError as e:
            log.warning("query %s: the requirements [%d, %d] persisted in %s no longer apply "
                        "(%s); using the defaults", label, saved.lower, saved.upper, location,
                        " ".join(e.reasons))
            return None
        log.info("query %s: requirements [%d, %d] restored from %s", label, checked.lower,
                 checked.upper, location)
        return checked

    def persist(self, key: str, requirements: req.ResourceRequirements) -> Undo | None:
        """Write the query's new bounds; return how to undo it (None: nothing written)."""
        with self._lock:
            location, label = self._checkpoints.get(key, (None, key))
        if location is None:
            log.warning("query %s has no checkpoint location: requirements [%d, %d] are not "
                        "persisted and last until the driver stops", label, requirements.lower,
                        requirements.upper)
            return None
        try:
            before = self._store.load(location)
        except ValueError:
            before = None  # a corrupt file is replaced, and an undo removes the new one
        self._store.save(location, requirements)
        log.info("query %s: requirements [%d, %d] persisted in %s", label, requirements.lower,
                 requirements.upper, location)

        def undo() -> None:
            if before is None:
                self._store.remove(location)
            else:
                self._store.save(location, before)
            log.info("query %s: persisted requirements in %s rolled back", label, location)

        return undo
