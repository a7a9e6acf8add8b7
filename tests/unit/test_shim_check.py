"""What the shim check loads and what its warning says is lost, against the shim's sources."""

from __future__ import annotations

import re
from pathlib import Path

from spark_adaptive.spark.shim_check import LOST, SHIM_CLASSES

SOURCES = Path(__file__).resolve().parents[2] / "jvm-shim" / "src" / "main" / "java"


def test_every_public_shim_class_is_loaded_by_the_check() -> None:
    # A class the check leaves out would fail (a Spark API it links against changed) only
    # where it is used: for the SQL rule, in every DataFrame query's planning.
    public = set()
    for source in SOURCES.rglob("*.java"):
        if re.search(rf"^public (?:final )?class {source.stem}\b", source.read_text(), re.M):
            public.add(source.stem)
    assert public >= {"ShufflePartitionsFromEstimate", "AdaptiveExtensions",
                      "AdaptiveMetricsSource", "AdaptiveListener"}
    assert set(SHIM_CLASSES) == public


def test_the_warning_names_the_task_figures_and_the_sql_rule() -> None:
    for lost in ("busy time", "slowest and median task", "spark.sql.shuffle.partitions",
                 "fewer partitions for small queries", "Spark's metrics system",
                 "per-task event filtering in the JVM", "clean stops at micro-batch boundaries",
                 "fast removal of hung executors", "range reads of the RDD helpers"):
        assert lost in LOST, lost
