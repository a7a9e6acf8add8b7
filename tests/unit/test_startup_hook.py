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
    """A SparkContext that connects to a JVM without system properties first, as PySpark's
    does (``_ensure_initialized``), then starts with ``conf`` or one holding ``values``."""
    return _submitted_module({}, values)


def _recorder(calls: list[Any]) -> Any:
    """A fake activate_context that records the contexts the hook activates, each
    activated as just started (the executors' hold before the first query relies on it)."""
    def activate(sc: Any, **kw: Any) -> None:
        assert kw == {"at_start": True}
        calls.append(sc)
    return activate


def test_absent_key_never_imports_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = _recorder(calls)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    for conf in ({}, {"spark.adaptive.enabled": "false"}):
        mod = _module(conf)
        hook._patch(mod)
        mod.SparkContext()
    assert calls == []


def test_enabled_key_activates_right_after_init(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = _recorder(calls)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    mod = _module({"spark.adaptive.enabled": " True "})
    hook._patch(mod)
    hook._patch(mod)  # patching twice wraps once
    sc = mod.SparkContext()
    assert calls == [sc]


def test_a_bad_setting_stops_the_context_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("spark_adaptive.activation")

    def refuse(sc: Any, **kw: Any) -> None:
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
    fake.activate_context = lambda sc, **kw: None  # type: ignore[attr-defined]
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

    def clearProperty(self, key: str) -> None:  # noqa: N802 - Java's name
        self.props.pop(key, None)


def _submitted_module(props: dict[str, str], values: dict[str, str] | None = None,
                      launch: Any = None) -> Any:
    """A SparkContext whose JVM (connected in ``_ensure_initialized``, as PySpark's
    ``__init__`` does first) holds ``props``; the conf it starts with is those properties
    overlaid with the conf given (else ``values``), as PySpark's is. ``launch`` stands in
    for launching the JVM (it may raise, as without Java)."""
    system = _System(props)

    class SparkContext:
        _jvm: Any = None
        initialized: list[Any] = []
        stopped = False

        @classmethod
        def _ensure_initialized(cls, instance: Any = None, gateway: Any = None,
                                conf: Any = None) -> None:
            cls.initialized.append(instance)
            if launch is not None:
                launch()
            cls._jvm = types.SimpleNamespace(java=types.SimpleNamespace(
                lang=types.SimpleNamespace(System=system)))

        def __init__(self, conf: Any = None) -> None:
            SparkContext._ensure_initialized(self, None, conf)
            given = conf.values if conf is not None else dict(values or {})
            self._conf = _Conf({**system.props, **given})

        def stop(self) -> None:
            self.stopped = True

    return types.SimpleNamespace(SparkContext=SparkContext, system=system)


def test_heartbeat_interval_is_set_when_spark_submit_enabled_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # spark-submit --conf spark.adaptive.enabled=true, then SparkSession.builder.getOrCreate():
    # the builder's conf does not hold the key; the driver JVM's system properties do.
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = _recorder(calls)  # type: ignore[attr-defined]
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


def _fake_activation(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    fake = types.ModuleType("spark_adaptive.activation")
    fake.activate_context = _recorder(calls)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_adaptive.activation", fake)
    return calls


def test_a_builder_that_enables_it_keeps_the_heartbeat_spark_submit_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # spark-submit --conf spark.executor.heartbeatInterval=5s, and the app's builder sets
    # spark.adaptive.enabled=true: the builder's conf does not hold the 5s, the JVM does.
    calls = _fake_activation(monkeypatch)
    mod = _submitted_module({"spark.executor.heartbeatInterval": "5s"})
    hook._patch(mod)
    conf = _Conf({"spark.adaptive.enabled": "true"})
    sc = mod.SparkContext(conf=conf)
    assert "spark.executor.heartbeatInterval" not in conf.values
    assert sc._conf.values["spark.executor.heartbeatInterval"] == "5s"
    assert calls == [sc]


def test_the_conf_given_decides_over_the_submitted_properties(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_activation(monkeypatch)
    # The app switches it off in its conf, over spark-submit's true: nothing is set.
    mod = _submitted_module({"spark.adaptive.enabled": "true"})
    hook._patch(mod)
    off = _Conf({"spark.adaptive.enabled": "false"})
    assert "spark.executor.heartbeatInterval" not in mod.SparkContext(conf=off)._conf.values
    # A conf made with the JVM up is the context's whole conf (PySpark uses it as it is):
    # the system properties are not consulted.
    mod = _submitted_module({"spark.executor.heartbeatInterval": "5s"})
    hook._patch(mod)
    whole = _Conf({"spark.adaptive.enabled": "true"})
    whole._jconf = object()  # type: ignore[attr-defined]
    mod.SparkContext(conf=whole)
    assert whole.values["spark.executor.heartbeatInterval"] == "3s"


def test_the_heartbeat_set_as_a_system_property_is_gone_after_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_activation(monkeypatch)
    mod = _submitted_module({"spark.adaptive.enabled": "true"})
    hook._patch(mod)
    sc = mod.SparkContext()
    assert sc._conf.values["spark.executor.heartbeatInterval"] == "3s"
    # A later context of the process, with spark-adaptive off, does not inherit it.
    assert "spark.executor.heartbeatInterval" not in mod.system.props


def test_the_hook_never_launches_the_jvm_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Java, PySpark's one launch fails, once; an executor's SparkContext() is
    refused before any launch (PySpark checks that before connecting)."""
    _fake_activation(monkeypatch)
    launches: list[int] = []

    def no_java() -> None:
        launches.append(1)
        raise RuntimeError("Java gateway process exited before sending its port number")

    for conf in (None, _Conf({}), _Conf({"spark.adaptive.enabled": "true"})):
        launches.clear()
        mod = _submitted_module({}, launch=no_java)
        hook._patch(mod)
        with pytest.raises(RuntimeError, match="Java gateway"):
            mod.SparkContext(conf=conf)
        assert launches == [1]


@pytest.mark.parametrize("value", ["yes", "1", "ture", "on", ""])
def test_a_bad_value_of_the_key_itself_stops_the_context_and_names_it(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from spark_adaptive import activation
    from spark_adaptive.errors import ConfigurationError

    monkeypatch.setattr(activation, "conf_dict", lambda sc: dict(sc._conf.values))
    mod = _module({"spark.adaptive.enabled": value})
    stopped: list[Any] = []
    mod.SparkContext.stop = lambda self: stopped.append(self)
    hook._patch(mod)
    with pytest.raises(ConfigurationError, match=f"spark.adaptive.enabled='{value}'"):
        mod.SparkContext()
    assert len(stopped) == 1
    assert "spark.executor.heartbeatInterval" not in mod.system.props


@pytest.mark.parametrize("value", ["TRUE", " false ", "False"])
def test_the_key_is_read_as_spark_reads_a_boolean(monkeypatch: pytest.MonkeyPatch,
                                                   value: str) -> None:
    calls = _fake_activation(monkeypatch)
    mod = _module({"spark.adaptive.enabled": value})
    hook._patch(mod)
    sc = mod.SparkContext()
    assert calls == ([sc] if value.strip().lower() == "true" else [])


@pytest.mark.parametrize(("conf", "env"), [
    ({"spark.plugins": "com.acme.Plugin, org.apache.spark.sql.connect.SparkConnectPlugin"}, {}),
    ({"spark.api.mode": "Connect"}, {}),
    ({}, {"SPARK_LOCAL_REMOTE": "1"}),
])
def test_a_local_connect_server_is_not_activated_and_one_warning_says_why(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        conf: dict[str, str], env: dict[str, str]) -> None:
    """builder.remote("local[1]"): PySpark starts a classic SparkContext in this process to
    run the Connect server; the Connect session's queries never pass through PySpark."""
    calls = _fake_activation(monkeypatch)
    monkeypatch.setattr(hook, "_connect_warned", False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    mod = _module({})
    hook._patch(mod)
    given = _Conf({"spark.adaptive.enabled": "true", **conf})
    mod.SparkContext(conf=given)
    assert calls == []
    assert "spark.executor.heartbeatInterval" not in given.values
    # The Connect client session PySpark builds next says nothing more.
    connect = _connect_module()
    hook._patch(connect)
    connect.SparkSession.Builder().config("spark.adaptive.enabled", "true").getOrCreate()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and hook.CONNECT_MESSAGE in err[0]


def test_the_keys_of_the_options_the_jvm_was_launched_with_are_remembered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark launches the driver JVM with the first context's options (as ``--conf``),
    which the JVM keeps as system properties; their keys are remembered (the test helpers
    clear them between sessions). A later context, on the JVM already there, changes
    nothing; nor does a JVM PySpark only connects to (spark-submit's), which takes none."""
    _fake_activation(monkeypatch)
    monkeypatch.setattr(hook, "launch_options", None)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    system = _System({})

    class Conf(_Conf):
        def getAll(self) -> list[tuple[str, str]]:  # noqa: N802 - PySpark's name
            return list(self.values.items())

    class SparkContext:
        _gateway: Any = None
        _jvm: Any = None

        @classmethod
        def _ensure_initialized(cls, instance: Any = None, gateway: Any = None,
                                conf: Any = None) -> None:
            if not cls._gateway:
                cls._gateway = object()
                cls._jvm = types.SimpleNamespace(java=types.SimpleNamespace(
                    lang=types.SimpleNamespace(System=system)))

        def __init__(self, conf: Any = None) -> None:
            SparkContext._ensure_initialized(self, None, conf)
            self._conf = conf

        def stop(self) -> None:
            pass

    mod = types.SimpleNamespace(SparkContext=SparkContext)
    hook._patch(mod)
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")
    mod.SparkContext(conf=Conf({"spark.executor.cores": "2"}))
    assert hook.launch_options is None
    SparkContext._gateway = None
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")
    mod.SparkContext(conf=Conf({"spark.master": "local[1]", "spark.executor.cores": "1"}))
    assert hook.launch_options == (("spark.master", "local[1]"), ("spark.executor.cores", "1"))
    mod.SparkContext(conf=Conf({"spark.app.name": "later"}))
    assert hook.launch_options == (("spark.master", "local[1]"), ("spark.executor.cores", "1"))
