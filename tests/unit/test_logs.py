"""spark-adaptive's lines as Spark writes its own: log4j names, levels, the fallback."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from spark_adaptive.spark import logs


@pytest.mark.parametrize(("python", "log4j"), [
    ("spark_adaptive.scheduler", "spark_adaptive.SparkAdaptiveScheduler"),
    ("spark_adaptive.spark.warm_up", "spark_adaptive.spark.SparkAdaptiveWarmUp"),
    ("spark_adaptive", "spark_adaptive.SparkAdaptive"),
])
def test_log4j_names_keep_the_hierarchy_and_read_like_spark_classes(python: str,
                                                                   log4j: str) -> None:
    assert logs.log4j_name(python) == log4j


@pytest.mark.parametrize(("name", "level"), [
    ("WARN", logging.WARNING), ("info", logging.INFO), ("TRACE", logging.DEBUG),
    ("ERROR", logging.ERROR), ("OFF", logging.CRITICAL + 10), ("bogus", logging.INFO)])
def test_log4j_levels_become_python_levels(name: str, level: int) -> None:
    assert logs.python_level(name) == level


def _record(level: int, msg: str = "query q: a -> b: why") -> logging.LogRecord:
    return logging.LogRecord("spark_adaptive.scheduler", level, __file__, 1, msg, (), None)


def test_a_line_in_sparks_pattern_spells_warn_as_spark_does() -> None:
    line = logs.spark_line(_record(logging.WARNING))
    assert line.endswith(" WARN SparkAdaptiveScheduler: query q: a -> b: why")
    assert line[2] == "/" and line[8] == " "  # yy/MM/dd HH:mm:ss


class FakeLogger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda message: self.lines.append((level, message))


class FakeContext:
    def __init__(self, jvm: Any) -> None:
        self._jvm = jvm


class FakeJvm:
    def __init__(self) -> None:
        self.logger = FakeLogger()
        self.names: list[str] = []
        log4j = self

        class LogManager:
            @staticmethod
            def getLogger(name: str) -> FakeLogger:  # noqa: N802 - log4j's name
                log4j.names.append(name)
                return log4j.logger

        self.org = type("org", (), {"apache": type("apache", (), {
            "logging": type("logging", (), {"log4j": type("log4j", (), {
                "LogManager": LogManager})})})})


def test_records_go_to_log4j_at_their_level() -> None:
    jvm = FakeJvm()
    handler = logs.Log4jHandler(FakeContext(jvm))  # type: ignore[arg-type]
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
        handler.emit(_record(level, f"at {level}"))
    assert jvm.logger.lines == [("debug", "at 10"), ("info", "at 20"), ("warn", "at 30"),
                                ("error", "at 40")]
    assert jvm.names == ["spark_adaptive.SparkAdaptiveScheduler"]  # looked up once


def test_without_a_jvm_lines_go_to_stderr_in_sparks_pattern(
        capsys: pytest.CaptureFixture[str]) -> None:
    handler = logs.Log4jHandler(FakeContext(None))  # type: ignore[arg-type]
    handler.emit(_record(logging.ERROR, "gone"))
    assert capsys.readouterr().err.strip().endswith("ERROR SparkAdaptiveScheduler: gone")
