"""The zero-code start-up hook, on a stand-in SparkContext module (no JVM)."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest

import _spark_adaptive_startup as hook


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str) -> str:
        return self.values.get(key, default)

    def contains(self, key: str) -> bool:
        return key in self.values

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


def _module(values: dict[str, str]) -> Any:
    class SparkContext:
        stopped = False

        def __init__(self, conf: Any = None) -> None:
            self._conf = conf or _Conf(values)

        def stop(self) -> None:
            self.stopped = True

    return types.SimpleNamespace(SparkContext=SparkContext)


def test_absent_key_never_imports_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = calls.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    for conf in ({}, {"spark.adaptive.enabled": "false"}):
        mod = _module(conf)
        hook._patch(mod)
        mod.SparkContext()
    assert calls == []


def test_enabled_key_activates_right_after_init(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = calls.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    mod = _module({"spark.adaptive.enabled": " True "})
    hook._patch(mod)
    hook._patch(mod)  # patching twice wraps once
    sc = mod.SparkContext()
    assert calls == [sc]


def test_a_bad_setting_stops_the_context_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("spark_adaptive.activation")

    def refuse(sc: Any) -> None:
        raise ValueError("spark.adaptive.foo is not a spark-adaptive option")

    fake.activate_context = refuse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    mod = _module({"spark.adaptive.enabled": "true"})
    stopped: list[Any] = []
    mod.SparkContext.stop = lambda self: stopped.append(self)
    hook._patch(mod)
    with pytest.raises(ValueError, match="spark.adaptive.foo"):
        mod.SparkContext()
    assert len(stopped) == 1  # the app does not go on with an unmanaged context


def test_interpreter_start_up_is_cheap_and_loads_nothing_of_ours() -> None:
    """The .pth is installed in this venv: a plain interpreter must not import the package."""
    code = ("import sys; print('spark_adaptive' in sys.modules, 'pyspark' in sys.modules, "
            "'_spark_adaptive_startup' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]


def test_heartbeat_interval_is_set_before_an_enabled_context_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = lambda sc: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    mod = _module({})
    hook._patch(mod)
    enabled = _Conf({"spark.adaptive.enabled": "true"})
    mod.SparkContext(conf=enabled)
    assert enabled.values["spark.executor.heartbeatInterval"] == "3s"
    own = _Conf({"spark.adaptive.enabled": "true", "spark.executor.heartbeatInterval": "5s"})
    mod.SparkContext(conf=own)
    assert own.values["spark.executor.heartbeatInterval"] == "5s"  # the app's own setting stays
    plain = _Conf({})
    mod.SparkContext(conf=plain)
    assert plain.values == {}  # not enabled: nothing touched


class _System:
    """The driver JVM's system properties, as spark-submit leaves them."""

    def __init__(self, props: dict[str, str]) -> None:
        self.props = props

    def getProperty(self, key: str) -> str | None:  # noqa: N802 - Java's name
        return self.props.get(key)

    def setProperty(self, key: str, value: str) -> None:  # noqa: N802 - Java's name
        self.props[key] = value


def _submitted_module(props: dict[str, str]) -> Any:
    """A SparkContext whose JVM (connected in ``_ensure_initialized``) holds ``props``; the
    conf it starts with is the one given plus those properties, as PySpark's is."""
    system = _System(props)

    class SparkContext:
        _jvm: Any = None
        initialized: list[Any] = []

        @classmethod
        def _ensure_initialized(cls, instance: Any = None, gateway: Any = None,
                                conf: Any = None) -> None:
            cls.initialized.append(instance)
            cls._jvm = types.SimpleNamespace(java=types.SimpleNamespace(
                lang=types.SimpleNamespace(System=system)))

        def __init__(self, conf: Any = None) -> None:
            self._ensure_initialized(self, None, conf)
            self._conf = _Conf({**system.props, **(conf.values if conf else {})})

        def stop(self) -> None:
            pass

    return types.SimpleNamespace(SparkContext=SparkContext)


def test_heartbeat_interval_is_set_when_spark_submit_enabled_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # spark-submit --conf spark.adaptive.enabled=true, then SparkSession.builder.getOrCreate():
    # the builder's conf does not hold the key; the driver JVM's system properties do.
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = calls.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    for conf in (None, _Conf({"spark.app.name": "app"})):
        mod = _submitted_module({"spark.adaptive.enabled": "true"})
        hook._patch(mod)
        sc = mod.SparkContext(conf=conf)
        assert sc._conf.values["spark.executor.heartbeatInterval"] == "3s"
        assert calls[-1] is sc
    own = _submitted_module({"spark.adaptive.enabled": "true",
                             "spark.executor.heartbeatInterval": "5s"})
    hook._patch(own)
    assert own.SparkContext()._conf.values["spark.executor.heartbeatInterval"] == "5s"
    plain = _submitted_module({})
    hook._patch(plain)
    assert "spark.executor.heartbeatInterval" not in plain.SparkContext()._conf.values


def _connect_module() -> Any:
    class Builder:
        def __init__(self) -> None:
            self._options: dict[str, str] = {}

        def config(self, key: str, value: str) -> Builder:
            self._options[key] = value
            return self

        def getOrCreate(self) -> str:  # noqa: N802 - PySpark's name
            return "connect session"

        def create(self) -> str:
            return "new connect session"

    module = types.ModuleType("pyspark.sql.connect.session")
    module.SparkSession = types.SimpleNamespace(Builder=Builder)  # type: ignore[attr-defined]
    return module


def test_a_connect_session_with_the_key_gets_one_warning(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(hook, "_connect_warned", False)
    mod = _connect_module()
    hook._patch(mod)
    hook._patch(mod)  # wrapped once
    assert mod.SparkSession.Builder().getOrCreate() == "connect session"
    assert capsys.readouterr().err == ""  # without the key: nothing said
    builder = mod.SparkSession.Builder().config("spark.adaptive.enabled", "true")
    assert builder.getOrCreate() == "connect session"
    assert builder.create() == "new connect session"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and " WARN SparkAdaptive: " in err[0]
    assert hook.CONNECT_MESSAGE in err[0]


def test_enable_on_a_connect_session_says_why_it_cannot() -> None:
    import spark_adaptive
    from spark_adaptive.errors import ConfigurationError

    connect_session = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    with pytest.raises(ConfigurationError, match="Spark Connect session"):
        spark_adaptive.enable(connect_session)
