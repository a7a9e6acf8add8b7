"""cluster_spark_factory stops the sessions it made, and only those; the opt-in
spark_adaptive.testing.pytest_spark_session gives the tests after it a spark_session.

Each case is a pytest run of its own (pytester), on fake sessions: a process has one
SparkContext (``SparkContext._active_spark_context``), and making one stops the one
running, as on PySpark.
"""

from __future__ import annotations

import pyspark
import pytest

# Imported here, before the runs: a module a run imports is dropped after it (pytester
# restores sys.modules), and the next run would patch one module and use another.
import spark_adaptive.testing.pytest_plugin
import spark_adaptive.testing.pytest_spark_session
import spark_adaptive.testing.session  # noqa: F401

pytest_plugins = ["pytester"]

CONFTEST = '''
import pyspark
import pytest

from spark_adaptive.testing import pytest_spark_session, session

pytest_plugins = {plugins!r}


class FakeContext:
    stopped = False

    def stop(self):
        self.stopped = True
        if pyspark.SparkContext._active_spark_context is self:
            pyspark.SparkContext._active_spark_context = None


class FakeSession:
    def __init__(self, name):
        stop_active()
        self.name = name
        self.sparkContext = FakeContext()
        pyspark.SparkContext._active_spark_context = self.sparkContext

    def stop(self):
        self.sparkContext.stop()

    def count(self):
        assert not self.sparkContext.stopped, f"{{self.name}}'s session is stopped"
        return 3


def stop_active():
    if pyspark.SparkContext._active_spark_context is not None:
        pyspark.SparkContext._active_spark_context.stop()


@pytest.fixture(autouse=True)
def _fake_spark(monkeypatch):
    monkeypatch.setattr(session, "stop_active_session", stop_active)
    monkeypatch.setattr(session, "cluster_session",
                        lambda cluster, app_name="app", **conf: FakeSession(cluster))
    monkeypatch.setattr(pytest_spark_session, "_local_session",
                        lambda: FakeSession("pytest-spark again"))


@pytest.fixture(scope="session")
def {session_fixture}():
    """Stands for pytest-spark's."""
    yield FakeSession("pytest-spark")
'''

FACTORY = ["spark_adaptive.testing.pytest_plugin"]
RESTORING = [*FACTORY, "spark_adaptive.testing.pytest_spark_session"]


@pytest.fixture(autouse=True)
def _no_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", None)


def _run(pytester: pytest.Pytester, tests: str, plugins: list[str],
         session_fixture: str = "spark_session", *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(CONFTEST.format(plugins=plugins, session_fixture=session_fixture))
    pytester.makepyfile(tests)
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_asking_for_the_factory_without_calling_it_stops_nothing(
        pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        def test_a(spark_session):
            assert spark_session.count() == 3

        def test_b(cluster_spark_factory):
            pass

        def test_c(spark_session):
            assert spark_session.count() == 3
    """, FACTORY)
    result.assert_outcomes(passed=3)


def test_the_factory_stops_the_sessions_it_made_and_only_those(
        pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        from conftest import FakeSession

        made = {}

        def test_two_sessions(cluster_spark_factory):
            made["first"] = cluster_spark_factory("one")
            made["second"] = cluster_spark_factory("two")
            assert made["first"].sparkContext.stopped
            assert made["second"].count() == 3

        def test_the_last_one_was_stopped_at_the_end():
            assert made["second"].sparkContext.stopped

        def test_a_session_of_the_test_s_own(cluster_spark_factory):
            cluster_spark_factory("three")
            made["own"] = FakeSession("the test's own")

        def test_it_was_left_running():
            assert made["own"].count() == 3
    """, FACTORY)
    result.assert_outcomes(passed=4)


def test_without_the_restoring_plugin_pytest_spark_s_session_stays_stopped(
        pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        def test_a(spark_session):
            assert spark_session.count() == 3

        def test_b(cluster_spark_factory):
            cluster_spark_factory("one")

        def test_c(spark_session):
            assert spark_session.count() == 3
    """, FACTORY)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*pytest-spark's session is stopped*"])


RESTORED = """
    seen = {}

    def test_pytest_spark_s(spark_session):
        assert spark_session.name == "pytest-spark"

    def test_on_a_cluster(cluster_spark_factory):
        cluster_spark_factory("one")

    def test_made_again(spark_session, spark_context):
        assert spark_session.name == "pytest-spark again"
        assert spark_session.count() == 3
        assert spark_context is spark_session.sparkContext
        seen["again"] = spark_session

    def test_kept_for_the_tests_after(spark_session):
        assert spark_session is seen["again"]
"""


@pytest.mark.parametrize("how", ["conftest", "-p"])
def test_the_restoring_plugin_makes_pytest_spark_s_session_again(
        pytester: pytest.Pytester, how: str) -> None:
    if how == "conftest":
        result = _run(pytester, RESTORED, RESTORING, "_spark_session")
    else:
        result = _run(pytester, RESTORED, FACTORY, "_spark_session",
                      "-p", "spark_adaptive.testing.pytest_spark_session")
    result.assert_outcomes(passed=4)
