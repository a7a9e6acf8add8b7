"""What a streaming checkpoint says, read through Hadoop's FileSystem (any store Spark uses).

A micro-batch N is *complete* when ``commits/N`` exists for the last
``offsets/N``. Spark's offline state repartition refuses a checkpoint whose last
batch is not complete, and restarting from one re-runs that batch, so the query
driver checks this after every stop. The offset log's metadata also records
the partition count the state was written with (``spark.sql.shuffle.partitions``)
and the state store provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_adaptive.spark.jvm import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


@dataclass(frozen=True)
class CheckpointState:
    location: str
    exists: bool
    last_offset: int | None = None
    last_commit: int | None = None
    shuffle_partitions: int | None = None
    state_provider: str | None = None
    has_state: bool = False

    @property
    def complete(self) -> bool:
        """No batch is left unfinished (an empty checkpoint is complete too)."""
        return self.last_offset is None or self.last_offset == self.last_commit

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
    partitions = provider = None
    if last_offset is not None:
        text = _read(j, fs, j.org.apache.hadoop.fs.Path(root, f"offsets/{last_offset}"))
        lines = text.splitlines()
        if len(lines) > 1:
            conf = json.loads(lines[1]).get("conf", {})
            if "spark.sql.shuffle.partitions" in conf:
                partitions = int(conf["spark.sql.shuffle.partitions"])
            provider = conf.get(PROVIDER_KEY)
    state = j.org.apache.hadoop.fs.Path(root, "state")
    has_state = bool(fs.exists(state) and len(fs.listStatus(state)) > 0)
    return CheckpointState(location, True, last_offset, last_commit, partitions, provider,
                           has_state)


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
