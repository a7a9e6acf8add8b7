"""The supported pyspark range: one claim, checked at activation, equal everywhere it is written."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pyspark
import pytest

from spark_adaptive.errors import UnsupportedSparkError
from spark_adaptive.spark import versions
from spark_adaptive.spark.versions import check_versions, release, supported

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "expected"), [
    ("4.3.0", (4, 3)), ("4.2.0.dev1", (4, 2)), ("4.1.0-SNAPSHOT", (4, 1)), ("10.12", (10, 12)),
    ("four", None), ("", None),
])
def test_release_reads_major_and_minor(text: str, expected: tuple[int, int] | None) -> None:
    assert release(text) == expected


@pytest.mark.parametrize(("text", "ok"), [
    ("4.2.0", True), ("4.2.1", True), ("4.3.0", True), ("4.9.2", True),
    ("4.1.1", False), ("3.5.3", False), ("5.0.0", False), ("5.0.0-preview1", False), ("?", False),
])
def test_supported_range(text: str, ok: bool) -> None:
    assert supported(text) is ok


def test_an_unsupported_pyspark_or_spark_stops_activation_naming_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sc = SimpleNamespace(version="3.5.3")
    monkeypatch.setattr(pyspark, "__version__", "3.5.3")
    with pytest.raises(UnsupportedSparkError) as err:
        check_versions(sc)  # type: ignore[arg-type]
    text = str(err.value)
    assert "pyspark 3.5.3 and Spark 3.5.3 in the driver JVM" in text
    assert ">=4.2,<5" in text and "pip install 'pyspark>=4.2,<5'" in text

    monkeypatch.setattr(pyspark, "__version__", "4.3.0")
    with pytest.raises(UnsupportedSparkError, match=r"runs Spark 5\.0\.0 in the driver JVM\."):
        check_versions(SimpleNamespace(version="5.0.0"))  # type: ignore[arg-type]
    check_versions(SimpleNamespace(version="4.2.0"))  # type: ignore[arg-type]


def test_the_installed_pyspark_is_supported() -> None:
    assert supported(pyspark.__version__), pyspark.__version__


def test_the_range_is_the_same_in_pyproject_the_build_and_the_makefile() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"pyspark{versions.SUPPORTED}"' in pyproject  # the dependency
    backend = (ROOT / "jvm-shim" / "build_backend.py").read_text()
    assert f'PYSPARK = "pyspark{versions.SUPPORTED}"' in backend  # the wheel's build env
    # CI's oldest pyspark is the first release of the range.
    oldest = re.search(r"^OLDEST_PYSPARK := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert oldest is not None
    assert oldest.group(1) == f"{versions.MINIMUM[0]}.{versions.MINIMUM[1]}.0"
    assert versions.SUPPORTED == (f">={versions.MINIMUM[0]}.{versions.MINIMUM[1]},"
                                  f"<{versions.BELOW[0]}")


def test_activation_refuses_an_unsupported_spark_before_starting_anything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_adaptive import activation

    started: list[object] = []
    monkeypatch.setattr(activation, "start_runtime", lambda *a: started.append(a))
    monkeypatch.setattr(pyspark, "__version__", "3.5.3")
    confs = {"on": {"spark.adaptive.enabled": "true"}, "off": {}}
    monkeypatch.setattr(activation, "conf_dict", lambda sc: dict(confs[sc.name]))
    sc = SimpleNamespace(name="on", version="3.5.3")
    with pytest.raises(UnsupportedSparkError, match="runs pyspark 3.5.3 and Spark 3.5.3"):
        activation.activate_context(sc)  # type: ignore[arg-type]
    assert started == []
    # Not enabled: nothing is checked, nothing starts, as on plain Spark.
    off = SimpleNamespace(name="off", version="3.5.3")
    assert activation.activate_context(off) is None  # type: ignore[arg-type]
