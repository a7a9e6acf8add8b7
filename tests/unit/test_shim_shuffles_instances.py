"""The shim shuffles kept per SparkContext: one per context and jar, dropped with the context."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

from spark_adaptive.spark import shuffle


class FakeJavaContext:
    def __init__(self) -> None:
        self.jars: list[str] = []

    def sc(self) -> FakeJavaContext:
        return self

    def addJar(self, path: str) -> None:  # noqa: N802 - Spark's name
        self.jars.append(path)


class FakeContext:
    def __init__(self) -> None:
        self._jsc: FakeJavaContext | None = FakeJavaContext()
        self.applicationId = f"app-{id(self)}"

    def stop(self) -> None:
        self._jsc = None  # as PySpark lets go of its JVM context


@pytest.fixture(autouse=True)
def no_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shuffle, "shim_class", lambda sc, name, jar: object())
    monkeypatch.setattr(shuffle, "_instances", type(shuffle._instances)())


JAR = Path("/opt/shim.jar")


def test_one_instance_per_context_and_jar_shipping_the_jar_once_per_context() -> None:
    first, second = FakeContext(), FakeContext()
    a = shuffle.shim_shuffles(first, JAR)  # type: ignore[arg-type]
    assert a is not None and shuffle.shim_shuffles(first, JAR) is a  # type: ignore[arg-type]
    b = shuffle.shim_shuffles(second, JAR)  # type: ignore[arg-type]
    assert b is not None and b is not a
    for _ in range(2):
        a._ship_jar()
        b._ship_jar()
    assert first._jsc is not None and first._jsc.jars == [str(JAR)]
    assert second._jsc is not None and second._jsc.jars == [str(JAR)]


def test_a_stopped_or_gone_context_keeps_nothing() -> None:
    stopped, running = FakeContext(), FakeContext()
    kept: Any = weakref.ref(shuffle.shim_shuffles(stopped, JAR))  # type: ignore[arg-type]
    stopped.stop()
    shuffle.shim_shuffles(running, JAR)  # type: ignore[arg-type]
    gc.collect()
    assert kept() is None, "a stopped context's instance is dropped at the next look-up"
    assert list(shuffle._instances) == [running]

    gone = weakref.ref(running)
    del running
    gc.collect()
    assert gone() is None, "the instances hold no reference to their context"
    assert len(shuffle._instances) == 0
