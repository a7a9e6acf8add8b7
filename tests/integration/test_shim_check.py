"""The JVM shim at activation: used when it loads, else one WARNING naming what is lost.

Quick local tier (pytest-spark's ``spark_session``, local[2]); the jar is the one the
set-up builds (also on the oldest supported pyspark: ``make test-oldest``).
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

import pytest

from spark_adaptive.settings import Settings
from spark_adaptive.spark.jvm import PACKAGED_SHIM
from spark_adaptive.spark.shim_check import shim_problem, usable_shim

pytestmark = pytest.mark.internals


def _settings(**conf: str) -> Settings:
    return Settings.from_conf({f"spark.adaptive.{k}": v for k, v in conf.items()})


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith("spark_adaptive")]


def test_every_class_of_the_built_shim_loads_on_this_spark(spark_session: Any,
                                                           caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    assert PACKAGED_SHIM.is_file(), "the set-up builds the shim (make setup)"
    sc = spark_session.sparkContext
    assert shim_problem(sc) is None
    caplog.set_level(logging.INFO)
    assert usable_shim(sc, _settings()) == PACKAGED_SHIM
    assert _warnings(caplog) == []


def test_a_missing_jar_is_one_warning_naming_what_is_lost_and_how_to_get_it(
        spark_session: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    absent = tmp_path / "absent.jar"
    sc = spark_session.sparkContext
    caplog.set_level(logging.INFO)
    assert usable_shim(sc, _settings(**{"shim.jar": str(absent)})) is None
    [warning] = _warnings(caplog)
    assert f"runs without its JVM shim: spark.adaptive.shim.jar={absent} is not a file" in warning
    for lost in ("per-task event filtering in the JVM", "clean stops at micro-batch boundaries",
                 "fast removal of hung executors", "range reads of the RDD helpers"):
        assert lost in warning
    assert "install spark-adaptive from a wheel" in warning
    assert "jvm-shim/build.sh" in warning


def test_a_jar_without_the_shim_classes_is_named(spark_session: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jar"
    with zipfile.ZipFile(empty, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    problem = shim_problem(spark_session.sparkContext, str(empty))
    assert problem is not None
    assert f"{empty}: io.sparkadaptive.shim.AdaptiveListener does not load" in problem
    assert "ClassNotFoundException" in problem


def test_listener_shim_leaves_the_failure_to_the_listener(spark_session: Any,
                                                          tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    caplog.set_level(logging.INFO)
    settings = _settings(listener="shim", **{"shim.jar": str(tmp_path / "absent.jar")})
    assert usable_shim(spark_session.sparkContext, settings) is None
    assert _warnings(caplog) == []
