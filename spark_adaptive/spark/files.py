"""Input files as Hadoop's ``FileSystem`` lists them, read in the driver JVM (py4j)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

RECURSIVE = "mapreduce.input.fileinputformat.input.dir.recursive"


def hadoop_conf_get(sc: SparkContext, key: str) -> str | None:
    """``key`` of the SparkContext's Hadoop configuration, None when unset."""
    value = sc._jsc.hadoopConfiguration().get(key)
    return None if value is None else str(value)


def listed_bytes(sc: SparkContext, paths: Iterable[str]) -> int | None:
    """The bytes of ``paths`` as Hadoop's ``FileInputFormat`` lists them: each a glob; a
    directory contributes its files but not hidden ones (names starting with ``_`` or
    ``.``), and its subdirectories only with :data:`RECURSIVE`. None when a path matches
    nothing or the file system cannot say (a few py4j calls per file)."""
    try:
        jvm: Any = sc._jvm
        conf = sc._jsc.hadoopConfiguration()
        recursive = str(conf.get(RECURSIVE, "false")).lower() == "true"
        total = 0
        for one in paths:
            hpath = jvm.org.apache.hadoop.fs.Path(one)
            fs = hpath.getFileSystem(conf)
            matches = fs.globStatus(hpath)
            if matches is None or len(matches) == 0:
                return None
            for status in matches:
                if not status.isDirectory():
                    total += int(status.getLen())
                    continue
                for child in fs.listStatus(status.getPath()):
                    name = str(child.getPath().getName())
                    if name.startswith(("_", ".")):
                        continue
                    if not child.isDirectory():
                        total += int(child.getLen())
                    elif recursive:
                        total += int(fs.getContentSummary(child.getPath()).getLength())
        return total
    except Exception as e:  # noqa: BLE001 - any failure leaves the source as Spark makes it
        log.debug("size of %s unknown: %s", list(paths), e)
        return None


#: The most splits :func:`splits_have_locations` looks at: each costs a few py4j calls per
#: RDD of the chain (about a millisecond in all), so a source of more splits is left as
#: Spark splits it rather than spend seconds of the driver's time before its first task.
MAX_SPLITS_LOOKED_AT = 1000
ONE_TO_ONE = "org.apache.spark.OneToOneDependency"


def splits_have_locations(rdd: Any, most: int = MAX_SPLITS_LOOKED_AT) -> bool | None:
    """Whether a split of the PySpark RDD ``rdd`` has preferred locations where Spark's
    ``coalesce`` looks for them: the RDD's own (public ``RDD.preferredLocations``), else
    those of the same split of its one-to-one parents, down to the source (as the
    DAGScheduler's ``getPreferredLocs`` walks narrow dependencies; a new ``textFile`` has
    no cached blocks). With none, ``coalesce`` groups neighbouring splits in order; with
    any, it groups them by host. None when that cannot be told: more than ``most``
    splits, or a parent that is not one-to-one."""
    top = rdd._jrdd.rdd()
    chain = [top]
    while True:
        deps = chain[-1].dependencies()
        count = int(deps.length())
        if count == 0:
            break
        dep = deps.apply(0)
        if count > 1 or str(dep.getClass().getName()) != ONE_TO_ONE:
            return None
        chain.append(dep.rdd())
    splits = len(top.partitions())
    if splits > most:
        return None
    for level in reversed(chain):  # the source first: that is where locations come from
        parts = level.partitions()
        for i in range(splits):
            if not level.preferredLocations(parts[i]).isEmpty():
                return True
    return False
