"""What to do when a query fails: restart after a backoff, or give up.

Flink's ``RestartBackoffTimeStrategy`` family, with Flink's keys and defaults
(``restart-strategy.*`` in :class:`~spark_adaptive.core.options.Settings`).
A strategy is told of every failure (:meth:`RestartBackoffStrategy.notify_failure`)
and then answers whether the query may restart and after how long. The
scheduler only uses strategies for failures; a rescale restarts with backoff 0.

Times are the scheduler's monotonic seconds (``Timers.now()``), passed in, so
strategies need no clock of their own and are tested on plain numbers.

:func:`handle_failure` turns a failure into a :class:`FailureResult`, the
value the scheduler states act on.
"""

from __future__ import annotations

import random as _random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from spark_adaptive.core.ports import StartResult
from spark_adaptive.core.streaming.settings import RestartStrategySettings


class RestartBackoffStrategy(Protocol):
    def notify_failure(self, time: float) -> None:
        """A failure happened at ``time`` (monotonic seconds)."""
        ...

    def can_restart(self) -> bool:
        """After the failures notified so far, may the query restart?"""
        ...

    def backoff(self) -> float:
        """Seconds to wait before the restart (meaningful when :meth:`can_restart`)."""
        ...


class NoRestart:
    """``none``: every failure is final."""

    def notify_failure(self, time: float) -> None:
        pass

    def can_restart(self) -> bool:
        return False

    def backoff(self) -> float:
        return 0.0

    def __str__(self) -> str:
        return "NoRestartBackoffTimeStrategy"


class FixedDelay:
    """``fixed-delay``: up to ``attempts`` restarts in the query's life, ``delay`` apart."""

    def __init__(self, attempts: int, delay: float) -> None:
        if attempts < 0 or delay < 0:
            raise ValueError("attempts and delay must be >= 0")
        self.attempts = attempts
        self.delay = delay
        self._failures = 0

    def notify_failure(self, time: float) -> None:
        self._failures += 1

    def can_restart(self) -> bool:
        return self._failures <= self.attempts

    def backoff(self) -> float:
        return self.delay

    def __str__(self) -> str:
        return (f"FixedDelayRestartBackoffTimeStrategy(attempts={self.attempts}, "
                f"delay={self.delay}s)")


class FailureRate:
    """``failure-rate``: restart while at most ``max_failures`` fell within ``interval``.

    With ``max_failures=3`` three failures in one interval restart, the fourth
    inside the same interval fails the query (Flink's current semantics).
    """

    def __init__(self, max_failures: int, interval: float, delay: float) -> None:
        if max_failures < 1 or interval <= 0 or delay < 0:
            raise ValueError("max_failures >= 1, interval > 0 and delay >= 0 are required")
        self.max_failures = max_failures
        self.interval = interval
        self.delay = delay
        # One more than allowed: the oldest of them decides whether the rate is exceeded.
        self._times: deque[float] = deque(maxlen=max_failures + 1)
        self._now = 0.0

    def notify_failure(self, time: float) -> None:
        self._times.append(time)
        self._now = time

    def can_restart(self) -> bool:
        if len(self._times) <= self.max_failures:
            return True
        return self._now - self._times[0] > self.interval

    def backoff(self) -> float:
        return self.delay

    def __str__(self) -> str:
        return ("FailureRateRestartBackoffTimeStrategy("
                f"maxFailuresPerInterval={self.max_failures}, interval={self.interval}s, "
                f"delay={self.delay}s)")


class ExponentialDelay:
    """``exponential-delay``: waits grow by ``multiplier`` up to ``max_backoff``.

    * The first wait is ``initial``; each further failure multiplies it, capped at
      ``max_backoff``.
    * A query that ran ``reset_threshold`` seconds since its last restart
      without failing starts over at ``initial`` (and its attempt count at 0).
    * ``jitter`` spreads each wait uniformly by ± that fraction of it, using
      ``random`` (a source of floats in [0, 1), injected for tests); as in Flink,
      the result stays within [``initial``, ``max_backoff``].
    * ``attempts_before_reset``: restarts allowed between two resets; None is
      unlimited (Flink's default).
    """

    def __init__(
        self,
        initial: float,
        max_backoff: float,
        multiplier: float,
        reset_threshold: float,
        jitter: float,
        attempts_before_reset: int | None = None,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if initial < 0 or max_backoff < initial or multiplier < 1 or not 0 <= jitter <= 1:
            raise ValueError("need 0 <= initial <= max_backoff, multiplier >= 1, 0 <= jitter <= 1")
        self.initial = initial
        self.max_backoff = max_backoff
        self.multiplier = multiplier
        self.reset_threshold = reset_threshold
        self.jitter = jitter
        self.attempts_before_reset = attempts_before_reset
        self._random = random
        self._base: float | None = None  # the wait before jitter; None: next one is the first
        self._attempts = 0
        self._restart_at: float | None = None  # when the last restart happened (roughly)
        self._backoff = 0.0

    def notify_failure(self, time: float) -> None:
        if self._restart_at is not None and time - self._restart_at >= self.reset_threshold:
            self._base = None
            self._attempts = 0
        if self._base is None:
            self._base = self.initial
        else:
            self._base = min(self._base * self.multiplier, self.max_backoff)
        self._attempts += 1
        spread = self._base * self.jitter * (2.0 * self._random() - 1.0)
        self._backoff = min(max(self.initial, self._base + spread), self.max_backoff)
        self._restart_at = time + self._backoff

    def can_restart(self) -> bool:
        return self.attempts_before_reset is None or self._attempts <= self.attempts_before_reset

    def backoff(self) -> float:
        return self._backoff

    def __str__(self) -> str:
        return (f"ExponentialDelayRestartBackoffTimeStrategy(initial={self.initial}s, "
                f"max={self.max_backoff}s, multiplier={self.multiplier}, "
                f"resetThreshold={self.reset_threshold}s, jitter={self.jitter}, "
                f"attemptsBeforeReset={self.attempts_before_reset or 'unlimited'})")


def strategy_from_settings(
    settings: RestartStrategySettings,
    restartable: bool,
    random: Callable[[], float] = _random.random,
) -> RestartBackoffStrategy:
    """The strategy ``restart-strategy.type`` names, with its keys from ``settings``.

    ``none`` by default: a failed query fails, as it does on plain Spark. A strategy
    applies only to a ``restartable`` query (a checkpoint location and sources that can
    replay): any other would start over from its sources' first offsets, or lose data.
    """
    kind = settings.type if restartable else "none"
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(settings.fixed_delay_attempts, settings.fixed_delay_delay)
    if kind == "failure-rate":
        return FailureRate(settings.failure_rate_max_failures, settings.failure_rate_interval,
                           settings.failure_rate_delay)
    if kind == "exponential-delay":
        return ExponentialDelay(
            settings.exp_initial_backoff, settings.exp_max_backoff, settings.exp_multiplier,
            settings.exp_reset_threshold, settings.exp_jitter, settings.exp_attempts_before_reset,
            random=random)
    raise ValueError(f"unknown restart strategy {kind!r}")


@dataclass(frozen=True)
class Failure:
    """Why a query failed, kept as Spark said it so ``awaitTermination()`` can raise it.

    ``origin``: ``query`` (the running query terminated with an exception),
    ``start`` (starting it failed), ``stop`` (it failed while being stopped) or
    ``resources`` (there were never enough slots to start it).

    ``recoverable`` is False for an error that every retry would meet again (Spark's
    analysis refused the query, its checkpoint's metadata cannot be read): the query
    then fails without asking the restart strategy, as Flink fails a job on an
    unrecoverable error.
    """

    message: str
    error_class: str | None = None
    origin: str = "query"
    recoverable: bool = True


@dataclass(frozen=True)
class FailedStart(StartResult):
    """A start that failed, with what the driver knows of Spark's error: its error class,
    and whether starting again can succeed at all (see :attr:`Failure.recoverable`)."""

    ok: bool = False
    error_class: str | None = None
    recoverable: bool = True


def start_failure(result: StartResult) -> Failure:
    """The failure a start that failed (``result.ok`` False) reported."""
    message = result.error or "the query failed to start"
    if isinstance(result, FailedStart):
        return Failure(message, result.error_class, origin="start",
                       recoverable=result.recoverable)
    return Failure(message, origin="start")


@dataclass(frozen=True)
class FailureResult:
    """What to do about one failure: restart after :attr:`backoff`, or fail with :attr:`failure`."""

    failure: Failure
    can_restart: bool
    backoff_time: float | None = None
    strategy: str = ""

    @classmethod
    def restart(cls, failure: Failure, backoff: float, strategy: str = "") -> FailureResult:
        return cls(failure, True, backoff, strategy)

    @classmethod
    def fail(cls, failure: Failure, strategy: str = "") -> FailureResult:
        return cls(failure, False, None, strategy)

    @property
    def backoff(self) -> float:
        if not self.can_restart or self.backoff_time is None:
            raise ValueError("a failure that cannot restart has no backoff")
        return self.backoff_time


UNRECOVERABLE = "no restart can get past this error"
"""The verdict's ``strategy`` for an unrecoverable failure (the strategy was not asked)."""


def handle_failure(strategy: RestartBackoffStrategy, failure: Failure, now: float) -> FailureResult:
    """Tell ``strategy`` of ``failure`` and return its verdict. An unrecoverable failure
    fails without the strategy hearing of it (Flink's ``howToHandleFailure``)."""
    if not failure.recoverable:
        return FailureResult.fail(failure, UNRECOVERABLE)
    strategy.notify_failure(now)
    if strategy.can_restart():
        return FailureResult.restart(failure, strategy.backoff(), str(strategy))
    return FailureResult.fail(failure, str(strategy))
