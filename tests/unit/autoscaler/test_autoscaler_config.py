"""The autoscaler's keys: names, defaults, parsing, and cross-key rules that name the keys."""

from __future__ import annotations

import math

import pytest

from spark_adaptive.core.autoscaler import AutoscalerConfig, autoscaler_options
from spark_adaptive.core.autoscaler.scalability import ScalabilityModel
from spark_adaptive.errors import ConfigurationError

P = "spark.adaptive.autoscaler."


def test_keys_and_defaults_are_pinned() -> None:
    """Changing one of these must be deliberate (and the docs' table with it)."""
    assert {o.full_key: o.default for o in autoscaler_options()} == {
        P + "enabled": False,
        P + "scaling.enabled": True,
        P + "evaluation.interval": 10.0,
        P + "metrics.window": 180.0,
        P + "stabilization.interval": 30.0,
        P + "utilization.target": 0.85,
        P + "utilization.min": 0.65,
        P + "utilization.max": 0.95,
        P + "scale-up.max-factor": 100000.0,
        P + "scale-down.max-factor": 0.8,
        P + "scale-down.interval": 300.0,
        P + "catch-up.duration": 120.0,
        P + "initial-slots": None,
        P + "restart.time": 10.0,
        P + "executor-startup.time": 10.0,
        P + "restart.time-tracking.enabled": True,
        P + "restart.time-tracking.limit": 300.0,
        P + "restart.max-partitions-per-slot": 12,
        P + "backlog-processing.lag-threshold": 15.0,
        P + "scaling.effectiveness.detection.enabled": True,
        P + "scaling.effectiveness.threshold": 0.1,
        P + "scaling.effectiveness.detection.expiry": 600.0,
        P + "observed-scalability.enabled": True,
        P + "observed-scalability.min-observations": 2,
        P + "observed-scalability.coefficient-min": 0.5,
        P + "forecast.enabled": False,
        P + "forecast.period": 86400.0,
        P + "forecast.bucket": 300.0,
        P + "forecast.horizon": 300.0,
        P + "forecast.periods": 3,
        P + "forecast.min-coverage": 0.8,
        P + "forecast.max-error": 0.25,
    }
    assert all(o.doc.strip() for o in autoscaler_options())


def test_flinks_key_names_are_kept() -> None:
    flink = {"enabled", "scaling.enabled", "metrics.window", "stabilization.interval",
             "utilization.target", "utilization.min", "utilization.max", "scale-up.max-factor",
             "scale-down.max-factor", "scale-down.interval", "catch-up.duration",
             "restart.time", "restart.time-tracking.enabled", "restart.time-tracking.limit",
             "backlog-processing.lag-threshold", "scaling.effectiveness.detection.enabled",
             "scaling.effectiveness.threshold", "observed-scalability.enabled",
             "observed-scalability.min-observations", "observed-scalability.coefficient-min"}
    ours = {o.key.removeprefix("autoscaler.") for o in autoscaler_options()}
    assert flink <= ours


def test_from_conf_reads_spark_formats() -> None:
    c = AutoscalerConfig.from_conf({
        P + "enabled": "true", P + "metrics.window": "15min", P + "scale-down.interval": "1h",
        P + "restart.time": "500ms", P + "utilization.target": "0.7", P + "initial-slots": "2",
        "spark.adaptive.scheduler.mode": "adaptive",  # not ours: ignored
    })
    assert (c.enabled, c.metrics_window, c.scale_down_interval, c.restart_time,
            c.utilization_target, c.initial_slots) == (True, 900.0, 3600.0, 0.5, 0.7, 2)
    assert c.as_conf() == {P + "enabled": "true", P + "metrics.window": "15min",
                           P + "scale-down.interval": "1h", P + "restart.time": "500ms",
                           P + "utilization.target": "0.7", P + "initial-slots": "2"}


def test_bad_values_and_unknown_keys_name_the_key() -> None:
    with pytest.raises(ConfigurationError) as e:
        AutoscalerConfig.from_conf({P + "metrics.window": "soon", P + "utilisation.target": "1",
                                    P + "scaling.enabled": "yes"})
    text = str(e.value)
    assert P + "metrics.window='soon' is not valid" in text
    assert (P + "utilisation.target is not a spark-adaptive option (did you mean "
            + P + "utilization.target?)") in text
    assert P + "scaling.enabled='yes' is not valid: accepted values: true, false" in text
    assert len(e.value.problems) == 3


def test_cross_key_rules_report_every_problem_naming_the_keys() -> None:
    with pytest.raises(ConfigurationError) as e:
        AutoscalerConfig(utilization_min=0.9, utilization_target=0.8, utilization_max=0.7)
    assert e.value.problems == [
        f"{P}utilization.min=0.9 is above {P}utilization.target=0.8",
        f"{P}utilization.target=0.8 is above {P}utilization.max=0.7",
    ]
    with pytest.raises(ConfigurationError) as e:
        AutoscalerConfig(scale_up_max_factor=0.0, scale_down_max_factor=0.0)
    assert any(f"{P}scale-up.max-factor=0 must be > 0" in p for p in e.value.problems)
    assert any(f"{P}scale-down.max-factor=0 must be > 0" in p for p in e.value.problems)
    with pytest.raises(ConfigurationError, match="utilization.target"):
        AutoscalerConfig.from_conf({P + "utilization.target": "0.5"})  # below min 0.65
    with pytest.raises(ConfigurationError, match="metrics.window"):
        AutoscalerConfig(metrics_window=-1.0)


def test_the_fit_is_exact_on_its_own_model_and_clamped() -> None:
    m = ScalabilityModel(min_observations=2, coefficient_min=0.5)
    for s in (4.0, 8.0):
        m.record(s, 1000.0 / (1 + 0.02 * (s - 1)), time=s, partitions=120)
    a, b = m.fit() or (0.0, 0.0)
    assert (a, b) == (pytest.approx(0.98e-3), pytest.approx(0.02e-3))
    assert m.ratio(8.0, 30.0) == pytest.approx(1.14 / 1.58)
    assert m.ratio(8.0, 1000.0) == 0.5  # never more than coefficient-min's drop
    assert m.slots_for(m.capacity(26.0, 8.0, 877.0), 8.0, 877.0) == pytest.approx(26.0)
    one = ScalabilityModel(min_observations=2, coefficient_min=0.5)
    one.record(4.0, 900.0, 0.0)
    one.record(4.5, 800.0, 1.0)  # too close together to trust a slope
    assert one.fit() is None and one.ratio(4.0, 40.0) == 1.0


def test_a_flat_throughput_sizes_fewer_slots_where_the_clamp_binds_not_at_zero() -> None:
    """Total throughput that does not grow with slots fits an intercept of 0: fewer slots
    keep the capacity only as far as coefficient-min lets the rate per slot rise."""
    m = ScalabilityModel(min_observations=2, coefficient_min=0.5)
    m.record(4.0, 100.0, time=0.0, partitions=8)
    m.record(8.0, 48.0, time=1.0, partitions=8)  # 400 and 384 rows/s in all
    a, _ = m.fit() or (1.0, 0.0)
    assert a == 0.0
    x = m.slots_for(150.0, 8.0, 48.0)
    assert x == pytest.approx(150.0 * 0.5 / 48.0)  # 1.56 slots at twice the rate per slot
    assert m.capacity(x, 8.0, 48.0) == pytest.approx(150.0)
    # The scale-down floor in rows/s turns back into its slots, not into none.
    floor = m.capacity(1.6, 8.0, 48.0)
    assert m.clamp(150.0, 8.0, 48.0, lo=1.6, hi=math.inf) == pytest.approx(floor)
