"""What a streaming checkpoint says, read through Hadoop's FileSystem (any store Spark uses).

A micro-batch N is *complete* when ``commits/N`` exists for the last
``offsets/N``. Spark's offline state repartition refuses a checkpoint whose last
batch is not complete, and restarting from one re-runs that batch, so the query
driver checks this after every stop. The offset log's metadata also records
the partition count the state was written with (``spark.sql.shuffle.partitions``)
and the state store provider.

**An unfinished repartition, rolled back.** Spark's offline repartition
(``OfflineStateRepartitionRunner``) writes a batch N+1 of its own: first
``offsets/N+1`` (the last committed offsets with the new partition count), then
the state rewritten as the state stores' next version, then ``commits/N+1``. It
only adds files (nothing of batch N or before is changed or deleted), and
``commits/N+1`` is its single atomic switch. But one that fails or dies before
that commit leaves an *unfinished repartition batch*, and Spark then refuses the
checkpoint at any other partition count: the query does not start
(``STREAMING_UNFINISHED_REPARTITION_DETECTED``), and a repartition to another
count is refused (``LAST_BATCH_ABANDONED_REPARTITION``). So the checkpoint would
be usable only by retrying that very repartition. :func:`roll_back_unfinished_repartition`
puts it back instead: deleting ``offsets/N+1`` (one file) leaves the checkpoint as
a query that died after committing batch N leaves it, which Spark recovers from
by design: the next run plans batch N+1 afresh from the committed offsets and
writes the state's next version over whatever the repartition had written of it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.ports import StartedBatch
from spark_adaptive.spark.jvm import jvm

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
JOIN_FORMAT_KEY = "spark.sql.streaming.join.stateFormatVersion"
#: Stream-stream join state formats Spark 4.3's offline repartition breaks: it reports
#: success, and the restarted query fails reading the join's state (an internal error).
BROKEN_JOIN_FORMATS = frozenset({"4"})


@dataclass(frozen=True)
class CheckpointState:
    location: str
    exists: bool
    last_offset: int | None = None
    last_commit: int | None = None
    shuffle_partitions: int | None = None
    state_provider: str | None = None
    has_state: bool = False
    join_state_format: str | None = None
    """``spark.sql.streaming.join.stateFormatVersion`` recorded with the last batch."""
    previous_partitions: int | None = None
    """When the last batch is not committed: the partition count of the batch before it."""
    repeats_previous_offsets: bool = False
    """When the last batch is not committed: its source offsets are those of the batch
    before it (it reads no new input, as a repartition batch)."""

    @property
    def complete(self) -> bool:
        """No batch is left unfinished (an empty checkpoint is complete too)."""
        return self.last_offset is None or self.last_offset == self.last_commit

    @property
    def unfinished_repartition(self) -> bool:
        """The last batch is a state repartition that did not commit: Spark's own test (an
        uncommitted batch whose partition count differs from the batch before it), on a
        checkpoint with state, whose last batch reads no new input (so no sink can hold
        anything of it)."""
        return (not self.complete and self.has_state and self.repeats_previous_offsets
                and self.previous_partitions is not None
                and self.shuffle_partitions is not None
                and self.shuffle_partitions != self.previous_partitions)

    def describe(self) -> str:
        if not self.exists:
            return f"no checkpoint yet at {self.location}"
        return (f"checkpoint {self.location}: last batch {self.last_offset}, last commit "
                f"{self.last_commit}, {self.shuffle_partitions} partitions, "
                f"{'stateful' if self.has_state else 'no state'}")


def inspect_checkpoint(spark: SparkSession, location: str) -> CheckpointState:
    sc = spark.sparkContext
    j = jvm(sc)
    root = j.org.apache.hadoop.fs.Path(location)
    fs = root.getFileSystem(sc._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return CheckpointState(location, exists=False)
    last_offset = _last_batch(fs, j.org.apache.hadoop.fs.Path(root, "offsets"))
    last_commit = _last_batch(fs, j.org.apache.hadoop.fs.Path(root, "commits"))
    partitions = provider = previous = join_format = None
    repeats = False
    if last_offset is not None:
        last = _batch(j, fs, root, last_offset)
        partitions, provider, join_format = _conf(last)
        if last_offset != last_commit and last_offset > 0:
            before = _batch(j, fs, root, last_offset - 1)
            previous, _, _ = _conf(before)
            repeats = before is not None and last is not None and last[2:] == before[2:]
    state = j.org.apache.hadoop.fs.Path(root, "state")
    has_state = bool(fs.exists(state) and len(fs.listStatus(state)) > 0)
    return CheckpointState(location, True, last_offset, last_commit, partitions, provider,
                           has_state, join_format, previous, repeats)


def roll_back_unfinished_repartition(spark: SparkSession,
                                     cp: CheckpointState) -> CheckpointState | None:
    """Put a checkpoint that ends with an unfinished repartition batch back at its last
    committed batch (see the module's doc) and return what it says then; None, and
    nothing done, when it does not end with one. Raises when the store refuses the
    deletion. The caller says what happened, in one line."""
    if not cp.unfinished_repartition or cp.last_offset is None:
        return None
    sc = spark.sparkContext
    j = jvm(sc)
    root = j.org.apache.hadoop.fs.Path(cp.location)
    fs = root.getFileSystem(sc._jsc.hadoopConfiguration())
    entry = j.org.apache.hadoop.fs.Path(root, f"offsets/{cp.last_offset}")
    # One file: the batch exists, or it does not (a checksummed file system deletes its
    # checksum file with it).
    if fs.exists(entry) and not fs.delete(entry, False):
        raise OSError(f"cannot delete {entry.toString()}")
    return inspect_checkpoint(spark, cp.location)


def describe_roll_back(before: CheckpointState) -> str:
    """What :func:`roll_back_unfinished_repartition` did, for a log line."""
    return (f"its unfinished repartition batch {before.last_offset} ({before.previous_partitions}"
            f" -> {before.shuffle_partitions} partitions, not committed) was removed, so the "
            f"checkpoint ends at its last committed batch {before.last_commit} at "
            f"{before.previous_partitions} partitions, which Spark resumes from")


def _batch(j: Any, fs: Any, root: Any, batch: int) -> list[str] | None:
    """The lines of a batch's offset-log entry: the log's version, the batch's metadata
    (its SQL conf among it), then one line per source; None if there is none."""
    path = j.org.apache.hadoop.fs.Path(root, f"offsets/{batch}")
    if not fs.exists(path):
        return None
    return _read(j, fs, path).splitlines()


class CheckpointOffsetLog:
    """The offset log of streaming checkpoints (:class:`~spark_adaptive.core.ports.OffsetLog`):
    one existence check and one small read per batch looked up, through the Hadoop
    FileSystem of the checkpoint's root (kept per location), on one small daemon thread of
    its own (started at the first read). Only a checkpoint's newest batch matters, so a read
    not yet done is replaced by a newer one rather than queued behind it."""

    def __init__(self, sc: SparkContext, name: str = "spark-adaptive-offset-log") -> None:
        self._sc = sc
        self._name = name
        self._roots: dict[str, tuple[Any, Any]] = {}
        self._cond = threading.Condition()
        self._waiting: dict[str, tuple[int, Callable[[StartedBatch | None], None]]] = {}
        self._closed = False
        self._thread: threading.Thread | None = None

    def read(self, checkpoint_location: str, batch_id: int,
             on_done: Callable[[StartedBatch | None], None]) -> None:
        with self._cond:
            if self._closed:
                return
            self._waiting[checkpoint_location] = (batch_id, on_done)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def close(self) -> None:
        """Stop reading; reads not yet done are dropped. Idempotent."""
        with self._cond:
            self._closed = True
            self._waiting.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting or self._closed)
                if self._closed:
                    return
                location, (batch_id, on_done) = self._waiting.popitem()
            started = self.started_batch(location, batch_id)
            try:
                on_done(started)
            except Exception:  # the caller's; this thread reads on for the others
                log.exception("handing over batch %d of %s's offset log failed", batch_id,
                              location)

    def started_batch(self, checkpoint_location: str, batch_id: int) -> StartedBatch | None:
        """The entry of ``batch_id``, read now on the caller's thread; None when there is
        none (yet) or it cannot be read. Never raises."""
        try:
            j = jvm(self._sc)
            root, fs = self._root(j, checkpoint_location)
            return started_batch(_batch(j, fs, root, batch_id), batch_id)
        except Exception as e:  # a store that fails now is read again at the next batch
            log.debug("reading batch %d of %s's offset log failed: %s", batch_id,
                      checkpoint_location, e)
            return None

    def _root(self, j: Any, location: str) -> tuple[Any, Any]:
        known = self._roots.get(location)
        if known is None:
            root = j.org.apache.hadoop.fs.Path(location)
            fs = root.getFileSystem(self._sc._jsc.hadoopConfiguration())
            known = self._roots[location] = (root, fs)
        return known


def started_batch(lines: list[str] | None, batch_id: int) -> StartedBatch | None:
    """A batch's offset-log entry (Spark's ``v1`` format: the version, the batch's metadata
    with its timestamp, then one line per source, ``-`` for none), or None if it is not
    one."""
    if lines is None or len(lines) < 3 or lines[0].strip() != "v1":
        return None
    try:
        stamp = json.loads(lines[1]).get("batchTimestampMs")
    except ValueError:
        return None
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or stamp <= 0:
        return None
    offsets = tuple(None if line.strip() in ("", "-") else line.strip() for line in lines[2:])
    return StartedBatch(batch_id, stamp / 1000.0, offsets)


def _conf(lines: list[str] | None) -> tuple[int | None, str | None, str | None]:
    """The partition count, state store provider and join state format recorded with a
    batch's offsets."""
    if lines is None or len(lines) < 2:
        return None, None, None
    conf = json.loads(lines[1]).get("conf", {})
    partitions = conf.get("spark.sql.shuffle.partitions")
    join_format = conf.get(JOIN_FORMAT_KEY)
    return ((int(partitions) if partitions is not None else None), conf.get(PROVIDER_KEY),
            None if join_format is None else str(join_format))


def _last_batch(fs: Any, path: Any) -> int | None:
    if not fs.exists(path):
        return None
    ids = [int(n) for n in (s.getPath().getName() for s in fs.listStatus(path)) if n.isdigit()]
    return max(ids) if ids else None


def _read(j: Any, fs: Any, path: Any) -> str:
    stream = fs.open(path)
    try:
        return str(j.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()
