"""The option defaults the streaming scheduler depends on, pinned; and the core stays pure."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

import spark_adaptive.core as core
from spark_adaptive.settings import Settings


def test_scheduler_defaults_are_flinks() -> None:
    s, r = Settings().scheduler, Settings().restart
    assert s.mode == "adaptive"
    assert s.resource_wait_timeout == 300.0
    assert s.submission_stabilization == 10.0
    assert s.cooldown == 30.0
    assert s.executing_stabilization == 60.0
    assert s.trigger_max_delay is None
    assert s.scaling_interval_max is None
    assert s.min_parallelism_increase == 1
    assert s.executor_loss_grace == 10.0
    assert s.failure_detection_timeout == 20.0
    assert (s.lower_bound, s.upper_bound, s.max_parallelism) == (1, None, 32768)
    assert r.type == "none"  # a failed query fails, as on plain Spark
    assert (r.fixed_delay_attempts, r.fixed_delay_delay) == (1, 1.0)
    assert (r.failure_rate_max_failures, r.failure_rate_interval, r.failure_rate_delay) == (
        1, 60.0, 1.0)
    assert (r.exp_initial_backoff, r.exp_max_backoff, r.exp_multiplier, r.exp_reset_threshold,
            r.exp_jitter, r.exp_attempts_before_reset) == (1.0, 60.0, 1.5, 3600.0, 0.1, None)


def test_reactive_defaults() -> None:
    s = Settings.from_conf({"spark.adaptive.scheduler.mode": "reactive"}).scheduler
    assert s.resource_wait_timeout == math.inf
    assert s.submission_stabilization == 0.0
    assert s.effective_upper_bound(configured_partitions=4) == 32768


def test_default_upper_bound_is_the_configured_partitions() -> None:
    assert Settings().scheduler.effective_upper_bound(configured_partitions=12) == 12


def test_the_core_imports_neither_pyspark_nor_py4j() -> None:
    offenders = []
    for path in Path(core.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("pyspark", "py4j") or name.startswith(
                        "spark_adaptive.spark"):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_failure_detection_never_below_three_heartbeat_intervals(
        caplog: pytest.LogCaptureFixture) -> None:
    from spark_adaptive.core.streaming.scheduler import failure_detection_timeout

    assert failure_detection_timeout(20.0, 3.0) == 20.0  # 3 s heartbeats: 20 s is safe
    with caplog.at_level("WARNING"):
        assert failure_detection_timeout(20.0, 10.0) == 30.0  # Spark's default interval
    assert "spark.executor.heartbeatInterval" in caplog.text
