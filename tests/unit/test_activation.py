"""Activation on stand-in SparkContexts (no JVM): enable() on a running runtime, a start that
fails partway, the settings checked against Spark's own keys."""

from __future__ import annotations

import gc
import threading
import time
import types
import weakref
from typing import Any

import pytest

from spark_adaptive import activation
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.settings import Settings
from spark_adaptive.spark import runtime


def _running(monkeypatch: pytest.MonkeyPatch, conf: dict[str, str]) -> tuple[Any, Any]:
    """A session whose SparkContext has ``conf`` and a runtime started from it."""
    sc = types.SimpleNamespace(name="sc")
    session = types.SimpleNamespace(sparkContext=sc)
    rt = types.SimpleNamespace(settings=Settings.from_conf(conf),
                               remember_session=lambda spark: None)
    monkeypatch.setattr(activation, "conf_dict", lambda _: dict(conf))
    monkeypatch.setattr(activation, "runtime_for", lambda c: rt if c is sc else None)
    return session, rt


def test_enable_on_a_running_runtime_refuses_other_settings_and_names_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session, rt = _running(monkeypatch, {"spark.adaptive.enabled": "true",
                                         "spark.adaptive.rest.token": "s3cret"})
    with pytest.raises(ConfigurationError) as e:
        activation.enable(session, **{"scheduler.mode": "reactive",  # type: ignore[arg-type]
                                      "rest.token": "n3wvalue", "listener": "auto",
                                      "parallelism.upper-bound": "4"})
    text = str(e.value)
    assert "already running" in text
    assert "spark.adaptive.scheduler.mode=reactive (running: adaptive)" in text
    assert ("spark.adaptive.parallelism.upper-bound=4 (running: unset: the query's partitions "
            "(reactive: max-parallelism))") in text
    assert "spark.adaptive.rest.token" in text and "n3wvalue" not in text  # a secret: no value
    assert "s3cret" not in text
    assert "spark.adaptive.listener" not in text  # the same as running: not named


def test_enable_on_a_running_runtime_validates_what_it_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session, _ = _running(monkeypatch, {"spark.adaptive.enabled": "true"})
    with pytest.raises(ConfigurationError, match="spark.adaptive.bogus.key is not a"):
        activation.enable(session, **{"bogus.key": "x"})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="spark.adaptive.scheduler.mode='elastic'"):
        activation.enable(session, **{"scheduler.mode": "elastic"})  # type: ignore[arg-type]


def test_enable_on_a_running_runtime_with_its_own_settings_returns_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session, rt = _running(monkeypatch, {"spark.adaptive.enabled": "true",
                                         "spark.adaptive.scheduler.mode": "reactive"})
    assert activation.enable(session) is rt  # type: ignore[arg-type]
    assert activation.enable(session, **{  # type: ignore[arg-type]
        "scheduler.mode": "Reactive", "spark.adaptive.enabled": "true",
        "max_parallelism": "32768"}) is rt


def test_keyword_names_without_a_dot_read_underscores_as_dashes() -> None:
    assert activation._full_key("max_parallelism") == "spark.adaptive.max-parallelism"
    assert activation._full_key("scheduler.mode") == "spark.adaptive.scheduler.mode"
    assert activation._full_key("spark.adaptive.rest.port") == "spark.adaptive.rest.port"
    doc = activation.enable.__doc__ or ""
    assert "underscores read as dashes" in doc and "dots or underscores" not in doc


# -- a start that fails partway ----------------------------------------------------------
class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _NoJvm:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("no JVM in the unit tests")


def _context() -> Any:
    return types.SimpleNamespace(_conf=_Conf({}), master="spark://fake:7077", _jsc=_NoJvm(),
                                 _jvm=_NoJvm(), uiWebUrl=None)


def _scheduler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spark-adaptive-scheduler"]


class _Listener:
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def quiet_runtime(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The runtime module with its Spark side stood in for; the exit hooks it registers."""
    hooks: list[Any] = []
    monkeypatch.setattr(runtime, "atexit", types.SimpleNamespace(register=hooks.append))
    monkeypatch.setattr(runtime, "_exit_hook_registered", False, raising=False)
    monkeypatch.setattr(runtime, "usable_shim", lambda sc, settings: None)
    monkeypatch.setattr(runtime, "live_executors", lambda sc: [])
    monkeypatch.setattr(runtime, "install_writer_hooks", lambda find: None)
    return hooks


SETTINGS = Settings.from_conf({"spark.adaptive.enabled": "true",
                               "spark.adaptive.rest.enabled": "false"})


def test_a_start_that_fails_partway_leaves_no_thread_running(
        monkeypatch: pytest.MonkeyPatch, quiet_runtime: list[Any]) -> None:
    def refuse(*args: Any) -> Any:
        raise RuntimeError("the listener did not attach")

    monkeypatch.setattr(runtime, "attach_spark_listener", refuse)
    before = _scheduler_threads()
    sc = _context()
    with pytest.raises(RuntimeError, match="did not attach"):
        runtime.start_runtime(sc, SETTINGS)
    assert _scheduler_threads() == before
    assert runtime.runtime_for(sc) is None
    assert quiet_runtime == []


def test_a_runtime_that_shut_down_is_not_kept_for_the_exit(
        monkeypatch: pytest.MonkeyPatch, quiet_runtime: list[Any]) -> None:
    listener = _Listener()
    monkeypatch.setattr(runtime, "attach_spark_listener", lambda *a: (listener, "py4j"))
    refs = []
    for _ in range(2):
        rt = runtime.start_runtime(_context(), SETTINGS)
        refs.append(weakref.ref(rt))
        rt.shutdown()
        del rt
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert listener.closed
    assert quiet_runtime == [runtime.shutdown_all]  # one exit hook, for those still running


def _shutdown_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spark-adaptive-shutdown"]


def test_spark_ending_the_application_shuts_the_runtime_down_on_a_thread_of_its_own(
        monkeypatch: pytest.MonkeyPatch, quiet_runtime: list[Any]) -> None:
    # Spark stopped the SparkContext itself (the master killed the app, a fatal scheduler
    # error): Python's stop() never ran, and onApplicationEnd is the only word of it. The
    # callback runs on the thread that delivers Spark's events, which shutting down waits for.
    release = threading.Event()
    closed_on: list[str] = []

    class BlockingListener:
        def close(self) -> None:
            closed_on.append(threading.current_thread().name)
            release.wait(30)

    attached: list[tuple[Any, ...]] = []

    def attach(*args: Any) -> Any:
        attached.append(args)
        return BlockingListener(), "py4j"

    monkeypatch.setattr(runtime, "attach_spark_listener", attach)
    sc = _context()
    rt = runtime.start_runtime(sc, SETTINGS)
    application_ended = attached[0][5]
    application_ended()  # returns at once, while the shutdown waits on the listener's close
    try:
        deadline = time.monotonic() + 30
        while not closed_on and time.monotonic() < deadline:
            time.sleep(0.01)
        assert closed_on == ["spark-adaptive-shutdown"]
        assert runtime.runtime_for(sc) is None
        [thread] = _shutdown_threads()
    finally:
        release.set()
    thread.join(30)
    assert closed_on == ["spark-adaptive-shutdown"]
    assert _scheduler_threads() == []
    application_ended()  # again, or Python's stop() after it: nothing more happens
    rt.shutdown()
    assert _shutdown_threads() == [] and closed_on == ["spark-adaptive-shutdown"]


def test_events_the_shim_lost_in_a_failed_delivery_count_as_dropped(
        monkeypatch: pytest.MonkeyPatch, quiet_runtime: list[Any]) -> None:
    from spark_adaptive.spark.listener import ShimListener

    class JvmListener:
        def delivered(self) -> int:
            return 100

        def batches(self) -> int:
            return 4

        def failures(self) -> int:
            return 1

        def lost(self) -> int:
            return 7

        def queued(self) -> int:
            return 3

        def dropped(self) -> int:
            return 5

    shim = object.__new__(ShimListener)
    shim._jlistener = JvmListener()
    shim.close = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr(runtime, "attach_spark_listener", lambda *a: (shim, "shim"))
    rt = runtime.start_runtime(_context(), SETTINGS)
    try:
        assert shim.stats()["lost"] == 7
        figures = rt.loop.call_sync(rt._figures)
        assert figures.events_dropped == 5 + 7
    finally:
        rt.shutdown()


def test_a_batch_wing_that_fails_to_start_shuts_the_runtime_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[Any] = []
    rt = types.SimpleNamespace(shutdown=lambda: stopped.append(rt))

    def refuse(runtime: Any) -> None:
        raise RuntimeError("the batch wing did not start")

    monkeypatch.setattr(activation, "conf_dict", lambda sc: {"spark.adaptive.enabled": "true"})
    monkeypatch.setattr(activation, "check_versions", lambda sc: None)
    monkeypatch.setattr(activation.logs, "configure", lambda sc: None)
    monkeypatch.setattr(activation, "start_runtime", lambda sc, settings, at_start: rt)
    monkeypatch.setattr(activation, "_install_context_hooks", lambda: None)
    monkeypatch.setattr(activation, "start_batch", refuse)
    with pytest.raises(RuntimeError, match="batch wing"):
        activation.activate_context(types.SimpleNamespace())  # type: ignore[arg-type]
    assert stopped == [rt]


# -- the settings against Spark's own keys -----------------------------------------------
@pytest.mark.parametrize(("master", "refused"), [
    ("local", False), ("local[2]", False), ("local[*]", False), ("local[2,3]", False),
    ("local-cluster[2,1,1024]", True), ("spark://host:7077", True), ("yarn", True),
    (None, True),
])
def test_dynamic_allocation_is_refused_where_spark_runs_it(master: str | None,
                                                           refused: bool) -> None:
    """Spark ignores dynamic allocation in local mode (``Utils.isDynamicAllocationEnabled``);
    ``local-cluster`` has executors and runs it."""
    conf = {"spark.adaptive.enabled": "true", "spark.dynamicAllocation.enabled": "true"}
    if master is not None:
        conf["spark.master"] = master
    if refused:
        with pytest.raises(ConfigurationError, match="spark.dynamicAllocation.enabled=true"):
            Settings.from_conf(conf)
    else:
        assert Settings.from_conf(conf).enabled


def test_dynamic_allocation_testing_runs_it_in_local_mode_too() -> None:
    with pytest.raises(ConfigurationError, match="spark.dynamicAllocation.enabled=true"):
        Settings.from_conf({"spark.adaptive.enabled": "true", "spark.master": "local[2]",
                            "spark.dynamicAllocation.enabled": "true",
                            "spark.dynamicAllocation.testing": "true"})
