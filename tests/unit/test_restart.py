"""Restart backoff strategies, Flink's keys and defaults."""

from __future__ import annotations

import pytest

from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.restart import (
    ExponentialDelay,
    FailedStart,
    Failure,
    FailureRate,
    FailureResult,
    FixedDelay,
    NoRestart,
    handle_failure,
    start_failure,
    strategy_from_settings,
)
from spark_adaptive.core.streaming.settings import RestartStrategySettings
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.settings import Settings

BOOM = Failure("java.lang.RuntimeException: boom", "RUNTIME")


def test_none_never_restarts() -> None:
    s = NoRestart()
    s.notify_failure(0)
    assert not s.can_restart()


def test_fixed_delay_allows_attempts_restarts_then_fails() -> None:
    s = FixedDelay(attempts=2, delay=5)
    for t in (0, 100):
        s.notify_failure(t)
        assert s.can_restart()
        assert s.backoff() == 5
    s.notify_failure(200)
    assert not s.can_restart()


def test_fixed_delay_with_zero_attempts_fails_at_once() -> None:
    s = FixedDelay(attempts=0, delay=1)
    s.notify_failure(0)
    assert not s.can_restart()


def test_failure_rate_within_rate_keeps_restarting() -> None:
    s = FailureRate(max_failures=1, interval=60, delay=2)
    for t in (0, 61, 122, 183):
        s.notify_failure(t)
        assert s.can_restart(), t
        assert s.backoff() == 2


def test_failure_rate_exceeded_fails() -> None:
    s = FailureRate(max_failures=3, interval=60, delay=0)
    for t in (0, 10, 20):
        s.notify_failure(t)
        assert s.can_restart()
    s.notify_failure(30)  # the fourth within 60 s
    assert not s.can_restart()


def test_failure_rate_old_failures_leave_the_window() -> None:
    s = FailureRate(max_failures=2, interval=60, delay=0)
    for t in (0, 50, 100):  # 0 is out of the window at 100 (100 - 0 > 60)
        s.notify_failure(t)
    assert s.can_restart()
    s.notify_failure(101)  # 50, 100, 101 within 60 s
    assert not s.can_restart()


def test_exponential_delay_grows_to_the_cap_without_jitter() -> None:
    s = ExponentialDelay(initial=1, max_backoff=5, multiplier=2, reset_threshold=3600, jitter=0)
    waits = []
    t = 0.0
    for _ in range(5):
        s.notify_failure(t)
        assert s.can_restart()
        waits.append(s.backoff())
        t += s.backoff() + 1  # ran one second after each restart
    assert waits == [1, 2, 4, 5, 5]


def test_exponential_delay_resets_after_a_long_run() -> None:
    s = ExponentialDelay(initial=1, max_backoff=60, multiplier=2, reset_threshold=100, jitter=0)
    s.notify_failure(0)
    s.notify_failure(5)
    assert s.backoff() == 2
    s.notify_failure(5 + 2 + 100)  # ran 100 s since the restart
    assert s.backoff() == 1


def test_exponential_delay_jitter_uses_the_injected_random() -> None:
    low = ExponentialDelay(initial=10, max_backoff=60, multiplier=1.5, reset_threshold=3600,
                           jitter=0.1, random=lambda: 0.0)
    high = ExponentialDelay(initial=10, max_backoff=60, multiplier=1.5, reset_threshold=3600,
                            jitter=0.1, random=lambda: 0.999999)
    low.notify_failure(0)
    high.notify_failure(0)
    assert high.backoff() == pytest.approx(11.0, abs=1e-4)
    low.notify_failure(1)
    high.notify_failure(1)
    assert low.backoff() == pytest.approx(13.5)  # the second wait, 15, less 10 %
    assert high.backoff() == pytest.approx(16.5, abs=1e-4)


def test_exponential_delay_jitter_never_waits_less_than_the_initial_backoff() -> None:
    s = ExponentialDelay(initial=1.0, max_backoff=60.0, multiplier=1.5, reset_threshold=3600,
                         jitter=0.1, random=lambda: 0.0)
    s.notify_failure(0)
    assert s.backoff() == 1.0  # Flink: max(initialBackoff, min(backoff + jitter, max))


def test_exponential_delay_jitter_never_exceeds_max_backoff() -> None:
    s = ExponentialDelay(initial=60, max_backoff=60, multiplier=1.5, reset_threshold=3600,
                         jitter=0.5, random=lambda: 0.999)
    s.notify_failure(0)
    assert s.backoff() == 60


def test_exponential_delay_attempts_before_reset() -> None:
    s = ExponentialDelay(initial=1, max_backoff=60, multiplier=2, reset_threshold=3600,
                         jitter=0, attempts_before_reset=2)
    s.notify_failure(0)
    s.notify_failure(10)
    assert s.can_restart()
    s.notify_failure(20)
    assert not s.can_restart()


@pytest.mark.parametrize(("kind", "restartable", "expected"), [
    ("none", True, NoRestart),
    ("fixed-delay", True, FixedDelay),
    ("failure-rate", True, FailureRate),
    ("exponential-delay", True, ExponentialDelay),
    # A query that cannot resume where it stopped fails as on plain Spark, whatever is set.
    ("fixed-delay", False, NoRestart),
    ("exponential-delay", False, NoRestart),
])
def test_factory_picks_the_strategy(kind: str, restartable: bool, expected: type) -> None:
    settings = RestartStrategySettings(type=kind)
    assert isinstance(strategy_from_settings(settings, restartable), expected)


def test_by_default_a_failed_query_fails_as_on_plain_spark() -> None:
    default = RestartStrategySettings()
    assert isinstance(strategy_from_settings(default, restartable=True), NoRestart)


def test_factory_reads_flink_keys_from_settings() -> None:
    conf = {
        "spark.adaptive.restart-strategy.type": "fixeddelay",
        "spark.adaptive.restart-strategy.fixed-delay.attempts": "3",
        "spark.adaptive.restart-strategy.fixed-delay.delay": "7s",
    }
    s = strategy_from_settings(Settings.from_conf(conf).restart, restartable=True)
    assert isinstance(s, FixedDelay)
    assert (s.attempts, s.delay) == (3, 7.0)


def test_factory_exponential_defaults_are_flinks() -> None:
    s = strategy_from_settings(RestartStrategySettings(type="exponential-delay"),
                               restartable=True)
    assert isinstance(s, ExponentialDelay)
    assert (s.initial, s.max_backoff, s.multiplier, s.reset_threshold, s.jitter,
            s.attempts_before_reset) == (1.0, 60.0, 1.5, 3600.0, 0.1, None)


def test_handle_failure_returns_restart_with_backoff() -> None:
    result = handle_failure(FixedDelay(1, 3), BOOM, now=0)
    assert result == FailureResult.restart(BOOM, 3, result.strategy)
    assert result.can_restart and result.backoff == 3
    assert "FixedDelay" in result.strategy


def test_handle_failure_cannot_restart_has_no_backoff() -> None:
    result = handle_failure(NoRestart(), BOOM, now=0)
    assert not result.can_restart
    assert result.failure is BOOM
    with pytest.raises(ValueError, match="no backoff"):
        _ = result.backoff


def test_an_unrecoverable_failure_fails_without_asking_the_strategy() -> None:
    strategy = FixedDelay(attempts=3, delay=1)
    unrecoverable = Failure("[PATH_NOT_FOUND] Path does not exist: /in", "PATH_NOT_FOUND",
                            origin="start", recoverable=False)
    result = handle_failure(strategy, unrecoverable, now=0)
    assert not result.can_restart and result.failure is unrecoverable
    assert strategy.can_restart() and handle_failure(strategy, BOOM, now=1).can_restart
    assert handle_failure(strategy, BOOM, now=2).backoff == 1  # 2 of its 3 attempts used


def test_a_failed_start_keeps_sparks_error_class_and_whether_it_can_recover() -> None:
    failed = FailedStart(error="org.apache.spark.sql.AnalysisException: [PATH_NOT_FOUND] ...",
                         error_class="PATH_NOT_FOUND", recoverable=False)
    assert not failed.ok
    assert start_failure(failed) == Failure(failed.error or "", "PATH_NOT_FOUND",
                                            origin="start", recoverable=False)
    plain = StartResult(ok=False, error="java.io.IOException: hiccup")
    assert start_failure(plain) == Failure("java.io.IOException: hiccup", origin="start")


@pytest.mark.parametrize("interval", ["0s", "0"])
def test_an_empty_failure_rate_interval_is_refused_at_start_up(interval: str) -> None:
    key = "spark.adaptive.restart-strategy.failure-rate.failure-rate-interval"
    with pytest.raises(ConfigurationError) as err:
        Settings.from_conf({"spark.adaptive.restart-strategy.type": "failure-rate",
                            key: interval})
    assert key in str(err.value) and "must be > 0" in str(err.value)
