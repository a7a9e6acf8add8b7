"""The option registry: declared defaults, parsing, and errors that name the key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from spark_adaptive import configdocs
from spark_adaptive.core.autoscaler import autoscaler_options
from spark_adaptive.core.options import format_duration, parse_duration, parse_size
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.settings import Settings, all_options

ROOT = Path(__file__).resolve().parents[2]


def test_declared_keys_and_promised_defaults() -> None:
    """The public contract of DESIGN.md, pinned: changing one must be deliberate."""
    s = Settings()
    # The autoscaler's keys are pinned in tests/unit/autoscaler/test_autoscaler_config.py.
    autoscaler = {o.full_key: o.default for o in autoscaler_options()}
    assert {o.full_key: o.default for o in all_options()} == {**autoscaler, 
        "spark.adaptive.enabled": False,
        "spark.adaptive.listener": "auto",
        "spark.adaptive.shim.jar": "",
        "spark.adaptive.scheduler.mode": "adaptive",
        "spark.adaptive.scheduler.submission.resource-wait-timeout": 300.0,
        "spark.adaptive.scheduler.submission.resource-stabilization-timeout": 10.0,
        "spark.adaptive.scheduler.executing.cooldown-after-rescaling": 30.0,
        "spark.adaptive.scheduler.executing.resource-stabilization-timeout": 60.0,
        "spark.adaptive.scheduler.rescale-trigger.max-delay": None,
        "spark.adaptive.scheduler.scaling-interval.max": None,
        "spark.adaptive.scheduler.min-parallelism-increase": 1,
        "spark.adaptive.scheduler.executor-loss-grace": 10.0,
        "spark.adaptive.scheduler.warm-up-new-executors": True,
        "spark.adaptive.scheduler.non-replayable-sources": "",
        "spark.adaptive.failure-detection.timeout": 20.0,
        "spark.adaptive.parallelism.lower-bound": 1,
        "spark.adaptive.parallelism.upper-bound": None,
        "spark.adaptive.max-parallelism": 32768,
        "spark.adaptive.restart-strategy.type": "none",
        "spark.adaptive.restart-strategy.fixed-delay.attempts": 1,
        "spark.adaptive.restart-strategy.fixed-delay.delay": 1.0,
        "spark.adaptive.restart-strategy.failure-rate.max-failures-per-interval": 1,
        "spark.adaptive.restart-strategy.failure-rate.failure-rate-interval": 60.0,
        "spark.adaptive.restart-strategy.failure-rate.delay": 1.0,
        "spark.adaptive.restart-strategy.exponential-delay.initial-backoff": 1.0,
        "spark.adaptive.restart-strategy.exponential-delay.max-backoff": 60.0,
        "spark.adaptive.restart-strategy.exponential-delay.backoff-multiplier": 1.5,
        "spark.adaptive.restart-strategy.exponential-delay.reset-backoff-threshold": 3600.0,
        "spark.adaptive.restart-strategy.exponential-delay.jitter-factor": 0.1,
        "spark.adaptive.restart-strategy.exponential-delay.attempts-before-reset-backoff": None,
        "spark.adaptive.batch.enabled": False,
        "spark.adaptive.batch.avg-data-volume-per-task": 64 << 20,
        "spark.adaptive.batch.source-split-size": None,
        "spark.adaptive.batch.min-parallelism": 1,
        "spark.adaptive.batch.max-parallelism": 128,
        "spark.adaptive.batch.default-source-parallelism": None,
        "spark.adaptive.batch.skewed-factor": 4.0,
        "spark.adaptive.batch.skewed-threshold": None,
        "spark.adaptive.batch.executor-idle-timeout": 60.0,
        "spark.adaptive.batch.shuffle-partitions-from-estimate": True,
        "spark.adaptive.batch.use-held-slots": True,
        "spark.adaptive.rest.enabled": True,
        "spark.adaptive.rest.host": "127.0.0.1",
        "spark.adaptive.rest.port": 4050,
        "spark.adaptive.rest.token": None,
        "spark.adaptive.rest.samples.interval": 2.0,
        "spark.adaptive.rest.samples.capacity": 300,
        "spark.adaptive.metrics.spark-source.enabled": True,
        "spark.adaptive.listener.queue.capacity": 10000
    }
    assert s == Settings.from_conf({})


def test_reads_spark_formats() -> None:
    s = Settings.from_conf({
        "spark.adaptive.enabled": "TRUE",
        "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "2min",
        "spark.adaptive.scheduler.executor-loss-grace": "500ms",
        "spark.adaptive.batch.avg-data-volume-per-task": "16m",
        "spark.adaptive.restart-strategy.type": "FixedDelay",
        "spark.adaptive.parallelism.upper-bound": "-1",
        "spark.other.key": "ignored",
    })
    assert s.enabled is True
    assert s.scheduler.cooldown == 120.0
    assert s.scheduler.executor_loss_grace == 0.5
    assert s.batch.avg_data_volume_per_task == 16 * 1024 * 1024
    assert s.restart.type == "fixed-delay"
    assert s.scheduler.upper_bound is None


def test_alias_is_accepted_and_double_setting_refused() -> None:
    aliased = Settings.from_conf({"spark.adaptive.scheduler.scaling-interval.min": "5s"})
    assert aliased.scheduler.cooldown == 5
    with pytest.raises(ConfigurationError, match="set twice"):
        Settings.from_conf({
            "spark.adaptive.scheduler.scaling-interval.min": "5s",
            "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "6s",
        })


def test_reactive_mode_changes_only_unset_defaults() -> None:
    r = Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive"}).scheduler
    assert r.resource_wait_timeout == math.inf and r.submission_stabilization == 0.0
    assert r.effective_upper_bound(4) == 32768
    r2 = Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive",
                             "spark.adaptive.scheduler.submission.resource-wait-timeout": "1min"})
    assert r2.scheduler.resource_wait_timeout == 60.0
    assert Settings().scheduler.effective_upper_bound(4) == 4


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("spark.adaptive.foo", "1", "spark.adaptive.foo is not a spark-adaptive option"),
    ("spark.adaptive.scheduler.mode", "fast",
     "spark.adaptive.scheduler.mode='fast' is not valid: accepted values: adaptive, reactive"),
    ("spark.adaptive.enabled", "yes",
     "spark.adaptive.enabled='yes' is not valid: accepted values: true, false"),
    ("spark.adaptive.scheduler.executor-loss-grace", "-1s",
     "negative durations are not accepted"),
    ("spark.adaptive.scheduler.executing.cooldown-after-rescaling", "soon",
     "expected a duration such as 500ms, 30s, 5min, 1h"),
    ("spark.adaptive.max-parallelism", "40000", "must be <= 32768"),
    ("spark.adaptive.parallelism.lower-bound", "0", "must be >= 1"),
    ("spark.adaptive.batch.avg-data-volume-per-task", "lots", "expected a size"),
    ("spark.adaptive.batch.source-split-size", "big", "expected a size"),
    ("spark.adaptive.batch.source-split-size", "0", "must be >= 1"),
    ("spark.adaptive.restart-strategy.type", "sometimes",
     "accepted values: none, fixed-delay, failure-rate, exponential-delay"),
    ("spark.adaptive.rest.port", "http", "expected an integer"),
])
def test_bad_input_names_the_key_and_what_is_accepted(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_conf({key: value})
    assert expected in str(err.value)
    assert key in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_conf({"spark.adaptive.foo": "1", "spark.adaptive.bar": "2",
                            "spark.adaptive.scheduler.mode": "x"})
    assert len(err.value.problems) == 3


def test_cross_checks() -> None:
    with pytest.raises(ConfigurationError, match="upper-bound=2 is below"):
        Settings.from_conf({"spark.adaptive.parallelism.lower-bound": "3",
                            "spark.adaptive.parallelism.upper-bound": "2"})
    with pytest.raises(ConfigurationError, match="rest.token"):
        Settings.from_conf({"spark.adaptive.rest.host": "0.0.0.0"})
    assert Settings.from_conf({"spark.adaptive.rest.host": "0.0.0.0",
                               "spark.adaptive.rest.token": "s3cret"}).rest.token == "s3cret"
    with pytest.raises(ConfigurationError, match="spark.dynamicAllocation.enabled=false"):
        Settings.from_conf({"spark.adaptive.enabled": "true",
                            "spark.dynamicAllocation.enabled": "true"})
    # Dynamic allocation alone is none of our business.
    Settings.from_conf({"spark.dynamicAllocation.enabled": "true"})


def test_token_value_is_never_echoed() -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_conf({"spark.adaptive.rest.host": "10.0.0.1",
                            "spark.adaptive.rest.token": ""})
    assert "rest.token" in str(err.value)


def test_duration_and_size_parsers() -> None:
    assert parse_duration("30") == 30.0
    assert parse_duration("30", unit="ms") == 0.03
    assert parse_duration("1h") == 3600.0
    assert parse_duration("-1") == math.inf
    assert parse_size("1g") == 1 << 30
    assert parse_size("64MB") == 64 << 20
    assert parse_size("100") == 100
    with pytest.raises(ValueError):
        parse_duration("3 fortnights")


def test_as_conf_round_trips() -> None:
    s = Settings.from_conf({"spark.adaptive.enabled": "true",
                            "spark.adaptive.scheduler.executing.cooldown-after-rescaling": "45s",
                            "spark.adaptive.batch.avg-data-volume-per-task": "32m"})
    assert Settings.from_conf(s.as_conf()) == s


def test_reference_and_conf_template_match_the_registry() -> None:
    """Regenerate with `make docs` when this fails."""
    assert (ROOT / "docs" / "configuration.md").read_text() == configdocs.reference()
    template = (ROOT / "conf" / "spark-defaults.conf.template").read_text()
    assert template == configdocs.template()
    for o in all_options():
        assert f"`{o.full_key}`" in configdocs.reference()


def test_text_file_split_follows_the_source_split_size() -> None:
    assert Settings().batch.text_file_split_bytes == 64 << 20
    given = Settings.from_conf({"spark.adaptive.batch.source-split-size": "32m"})
    assert given.batch.source_split_size == given.batch.text_file_split_bytes == 32 << 20


def test_the_autoscaler_with_reactive_mode_is_an_error_naming_both_keys() -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_conf({"spark.adaptive.autoscaler.enabled": "true",
                            "spark.adaptive.scheduler.mode": "reactive"})
    (problem,) = err.value.problems
    assert "spark.adaptive.autoscaler.enabled=true" in problem
    assert "spark.adaptive.scheduler.mode=reactive" in problem
    on = Settings.from_conf({"spark.adaptive.autoscaler.enabled": "true"})
    assert on.autoscaler.enabled and on.scheduler.mode == "adaptive"


def test_autoscaler_keys_are_read_with_every_other_key() -> None:
    s = Settings.from_conf({"spark.adaptive.autoscaler.metrics.window": "5min",
                            "spark.adaptive.autoscaler.utilization.target": "0.8"})
    assert (s.autoscaler.metrics_window, s.autoscaler.utilization_target) == (300.0, 0.8)
    with pytest.raises(ConfigurationError, match="utilization.target"):
        Settings.from_conf({"spark.adaptive.autoscaler.utilization.target": "0.99"})


# -- found by tests/unit/test_options_fuzz.py ----------------------------------------------
@pytest.mark.parametrize(("key", "value", "expected"), [
    # 400 digits: OverflowError (math.isinf of an int) before; counts now fit a Java int.
    ("spark.adaptive.batch.default-source-parallelism", "9" * 400, "must be between"),
    ("spark.adaptive.rest.port", "9" * 400, "must be between"),
    ("spark.adaptive.scheduler.min-parallelism-increase", "2147483648", "must be between"),
    ("spark.adaptive.batch.min-parallelism", "1_000", "expected an integer"),
    ("spark.adaptive.batch.min-parallelism", "\u0663", "expected an integer"),
    # A size whose number overflows a float: OverflowError (int(inf)) before.
    ("spark.adaptive.batch.avg-data-volume-per-task", "9" * 400 + "g", "expected a size"),
    ("spark.adaptive.batch.skewed-threshold", "9" * 20 + "t", "expected a size"),
    # float() read 0.5_0 as 0.5 and other scripts' digits as numbers; ints never did.
    ("spark.adaptive.autoscaler.utilization.min", "0.5_0", "expected a number"),
    ("spark.adaptive.autoscaler.utilization.min", "\u0660.\u0665", "expected a number"),
    # NaN passed every bound check, inf skipped the maximum.
    ("spark.adaptive.restart-strategy.exponential-delay.jitter-factor", "nan", "finite"),
    ("spark.adaptive.restart-strategy.exponential-delay.jitter-factor", "inf", "finite"),
    ("spark.adaptive.autoscaler.utilization.target", "-Infinity", "finite"),
    # 400 digits of seconds read as infinity: "negative durations are not accepted" before.
    ("spark.adaptive.scheduler.executor-loss-grace", "9" * 400, "expected a duration"),
    # Named only max-backoff, left at its default, not the key that was set.
    ("spark.adaptive.restart-strategy.exponential-delay.initial-backoff", "2min",
     "max-backoff=1min is below spark.adaptive.restart-strategy.exponential-delay."
     "initial-backoff=2min"),
])
def test_values_the_fuzz_found(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_conf({key: value})
    assert key in str(err.value) and expected in str(err.value)


def test_a_forever_duration_is_still_minus_one() -> None:
    key = "spark.adaptive.scheduler.submission.resource-wait-timeout"
    assert Settings.from_conf({key: "-1"}).scheduler.resource_wait_timeout == math.inf
    with pytest.raises(ConfigurationError, match="expected a duration"):
        Settings.from_conf({key: "9" * 400})  # not forever: too large


@pytest.mark.parametrize("text", ["1us", "1001us", "0.5us", "1.0000001s", "1.5ms", "0",
                                  "90s", "7ms", "0.0000001"])
def test_durations_are_written_back_exactly(text: str) -> None:
    """as_conf wrote sub-millisecond durations rounded to ms (1us came back as 0ms)."""
    seconds = parse_duration(text)
    assert parse_duration(format_duration(seconds)) == seconds
    assert format_duration(0.5) == "500ms" and format_duration(1e-6) == "0.000001s"
