"""Building the JVM shim: a clear stop without a JDK, and the build backend's requirements."""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

SHIM_DIR = Path(__file__).resolve().parents[2] / "jvm-shim"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SHIM_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # build_backend imports build_shim by name
    spec.loader.exec_module(module)
    return module


build_shim = _load("build_shim")
build_backend = _load("build_backend")


def _fake_javac(home: Path, says: str, to_stderr: bool = False) -> Path:
    javac = home / "bin" / "javac"
    javac.parent.mkdir(parents=True)
    javac.write_text(f"#!/bin/sh\necho '{says}'{' >&2' if to_stderr else ''}\n")
    javac.chmod(javac.stat().st_mode | stat.S_IXUSR)
    return javac


@pytest.mark.parametrize(("says", "to_stderr", "release"), [
    ("javac 17.0.15", False, 17), ("javac 21", False, 21), ("javac 11.0.2", False, 11),
    ("javac 1.8.0_392", True, 8), ("something else", False, None),
])
def test_javac_version(tmp_path: Path, says: str, to_stderr: bool, release: int | None) -> None:
    assert build_shim.javac_version(_fake_javac(tmp_path, says, to_stderr)) == release


def test_no_jdk_stops_the_build_saying_how_to_get_one(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac anywhere
    with pytest.raises(build_shim.BuildError) as err:
        build_shim.find_javac()
    text = str(err.value)
    assert "no javac on the PATH" in text
    assert "apt-get install openjdk-17-jdk-headless" in text and "JAVA_HOME" in text

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(build_shim.BuildError, match="JAVA_HOME=.*nowhere has no bin/javac"):
        build_shim.find_javac()


def test_a_jdk_older_than_17_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_javac(tmp_path, "javac 11.0.2")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(build_shim.BuildError, match=r"javac is Java 11\."):
        build_shim.find_javac()
    _fake_javac(tmp_path / "jdk17", "javac 17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk17"))
    assert build_shim.find_javac() == tmp_path / "jdk17" / "bin" / "javac"


def test_a_wheel_build_checks_the_jdk_before_asking_for_pyspark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # setuptools' own hook (it runs setup.py) is not what is under test here.
    monkeypatch.setattr(build_backend, "_orig", SimpleNamespace(
        get_requires_for_build_wheel=lambda config_settings=None: ["wheel"]))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        build_backend.get_requires_for_build_wheel()
    assert exit_.value.code == 1
    assert "error: building spark-adaptive needs a JDK 17" in capsys.readouterr().err

    _fake_javac(tmp_path / "jdk", "javac 17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert build_backend.get_requires_for_build_wheel() == ["wheel", build_backend.PYSPARK]


def test_an_sdist_and_an_editable_install_need_neither_jdk_nor_pyspark() -> None:
    from setuptools import build_meta

    assert build_backend.get_requires_for_build_sdist is build_meta.get_requires_for_build_sdist
    assert (build_backend.get_requires_for_build_editable
            is build_meta.get_requires_for_build_editable)
