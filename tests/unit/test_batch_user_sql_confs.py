"""An app's own Spark SQL settings survive activation (do no harm): a key it set itself,
in its SparkConf (spark-defaults, --conf, the builder) or its session, is kept as it is."""

from __future__ import annotations

import logging

import pytest
from batch_fakes import FakeSC, FakeSession

from spark_adaptive.batch import sql
from spark_adaptive.batch.sql import apply_sql_confs, kept_confs, sql_confs
from spark_adaptive.settings import Settings
from spark_adaptive.spark.sqlconf import set_everywhere

AQE, FILES = "spark.sql.adaptive.", "spark.sql.files."
INITIAL = AQE + "coalescePartitions.initialPartitionNum"


def settings(**conf: str) -> Settings:
    return Settings.from_conf({
        "spark.adaptive.batch.enabled": "true",
        # The shim's extensions need a JVM; they are tested where one runs.
        "spark.adaptive.batch.shuffle-partitions-from-estimate": "false",
        **{f"spark.adaptive.batch.{k}": v for k, v in conf.items()}})


def test_explicit_sql_keys_are_kept_and_the_log_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    # spark-submit --conf spark.sql.adaptive.coalescePartitions.enabled=false ...
    own = {AQE + "coalescePartitions.enabled": "false",
           AQE + "advisoryPartitionSizeInBytes": "1m",
           FILES + "openCostInBytes": "8m",
           AQE + "skewJoin.skewedPartitionFactor": "10",
           AQE + "skewJoin.skewedPartitionThresholdInBytes": "1g"}
    sc = FakeSC(own)
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch.sql"):
        steering = apply_sql_confs(sc, settings())  # type: ignore[arg-type]
    for key, value in own.items():
        assert sc.live.entries[key] == value, key
        assert key not in steering.confs and key in steering.kept
    # What the app left unset is still steered.
    assert sc.live.entries[INITIAL] == "128"
    assert sc.live.entries[FILES + "maxPartitionNum"] == "128"
    line = next(r.getMessage() for r in caplog.records if "steered" in r.getMessage())
    assert "kept as the app set them" in line
    assert AQE + "coalescePartitions.enabled=false (set by the app)" in line


def test_an_explicit_shuffle_partitions_leaves_initial_partition_num_unset(
        caplog: pytest.LogCaptureFixture) -> None:
    # Spark's numShufflePartitions is initialPartitionNum when set (AQE and coalescing on):
    # setting it would make the app's spark.sql.shuffle.partitions no longer the count.
    sc = FakeSC({"spark.sql.shuffle.partitions": "1"})
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch.sql"):
        steering = apply_sql_confs(sc, settings())  # type: ignore[arg-type]
    assert INITIAL not in sc.live.entries and INITIAL in steering.kept
    assert sc.live.entries["spark.sql.shuffle.partitions"] == "1"
    assert AQE + "advisoryPartitionSizeInBytes" in sc.live.entries, "the rest is steered"
    assert any("spark.sql.shuffle.partitions stays" in r.getMessage() for r in caplog.records)


def test_keys_set_on_an_existing_session_are_kept_there_and_in_the_context() -> None:
    # spark_adaptive.enable(spark) after spark.conf.set(...)
    session = FakeSession({AQE + "coalescePartitions.enabled": "false",
                           "spark.sql.shuffle.partitions": "3"})
    sc = FakeSC(session=session)
    apply_sql_confs(sc, settings())  # type: ignore[arg-type]
    assert session.runtime.entries[AQE + "coalescePartitions.enabled"] == "false"
    assert AQE + "coalescePartitions.enabled" not in sc.live.entries
    assert INITIAL not in session.runtime.entries and INITIAL not in sc.live.entries
    assert session.runtime.entries[AQE + "advisoryPartitionSizeInBytes"] == str(64 << 20)


def test_an_explicit_split_size_wins_and_the_open_cost_and_report_follow_it() -> None:
    sc = FakeSC({FILES + "maxPartitionBytes": "256m"})
    sc._jvm = Jvm256m()  # type: ignore[assignment]
    steering = apply_sql_confs(sc, settings(**{"source-split-size": "16m"}))  # type: ignore[arg-type]
    assert sc.live.entries[FILES + "maxPartitionBytes"] == "256m"
    assert sc.live.entries[FILES + "openCostInBytes"] == str(2 << 20)  # 256 MiB / 128
    assert steering.split_bytes == 256 << 20
    unset = apply_sql_confs(FakeSC(), settings(**{"source-split-size": "16m"}))  # type: ignore[arg-type]
    assert unset.split_bytes == 16 << 20 and FILES + "maxPartitionBytes" in unset.confs


class Jvm256m:
    """Spark's size parser for the one value the test writes, and no default session."""

    class org:
        class apache:
            class spark:
                class network:
                    class util:
                        class JavaUtils:
                            @staticmethod
                            def byteStringAsBytes(text: str) -> int:
                                assert text == "256m"
                                return 256 << 20


def test_the_pure_rule_names_what_it_keeps() -> None:
    wanted = sql_confs(settings())
    assert kept_confs(wanted, {"spark.sql.shuffle.partitions"}) == {
        INITIAL: "left unset: the app's spark.sql.shuffle.partitions stays the partition "
                 "count shuffles are written in"}
    assert kept_confs(wanted, {INITIAL, "spark.sql.shuffle.partitions"}) == {
        INITIAL: "set by the app"}
    assert INITIAL not in sql_confs(settings(), explicit={"spark.sql.shuffle.partitions"})


def test_the_writer_itself_never_overwrites_a_key_the_app_set() -> None:
    sc = FakeSC({AQE + "coalescePartitions.enabled": "false"})
    applied = set_everywhere(sc, sql_confs(settings()))  # type: ignore[arg-type]
    assert sc.live.entries[AQE + "coalescePartitions.enabled"] == "false"
    assert applied.kept == {AQE + "coalescePartitions.enabled": "false"}
    assert sc.live.entries[AQE + "advisoryPartitionSizeInBytes"] == str(64 << 20)


# -- spark.sql.shuffle.partitions set on a session after activation ------------------------
class Shim:
    """The shim's SQL extension as activation sees it: registered or not, and told which
    initialPartitionNum is spark-adaptive's."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, loads: bool = True) -> None:
        self.registered = 0
        self.marked: list[tuple[str, int]] = []
        self.loads = loads
        monkeypatch.setattr(sql, "register_extensions", self.register)
        monkeypatch.setattr(sql, "mark_own_initial_partition_num", self.mark)

    def register(self, sc: object, settings: Settings, session_exists: bool) -> bool:
        self.registered += 1
        return self.loads

    def mark(self, sc: object, rule: str, n: int) -> str | None:
        self.marked.append((rule, n))
        return None


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_shims_rule_learns_that_initial_partition_num_is_spark_adaptives(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The zero-code path activates before the app's code runs: an app's later
    # spark.conf.set("spark.sql.shuffle.partitions", n) must stay the count its shuffles
    # are written in, which only the rule can tell from spark-adaptive's initialPartitionNum.
    # It is registered for that also where the estimate is off, which it then reads as off.
    shim = Shim(monkeypatch)
    sc = FakeSC()
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch.sql"):
        apply_sql_confs(sc, settings())  # type: ignore[arg-type]
    assert sc.live.entries[INITIAL] == "128"
    assert shim.registered == 1 and shim.marked == [(sql.SHIM_RULE, 128)]
    assert sc.live.entries[sql.ESTIMATE_KEY] == "false"
    assert _warnings(caplog) == []


def test_without_the_rule_an_app_is_told_its_later_shuffle_partitions_is_not_honoured(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    shim = Shim(monkeypatch, loads=False)
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch.sql"):
        apply_sql_confs(FakeSC(), settings())  # type: ignore[arg-type]
    assert shim.marked == []
    [warning] = _warnings(caplog)
    assert "spark.sql.shuffle.partitions set on a session from now on is not honoured in " \
           "any session" in warning
    assert f"{INITIAL}=128" in warning and "before the SparkContext starts" in warning


def test_a_session_that_existed_before_keeps_its_extensions_and_is_warned_about(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    shim = Shim(monkeypatch)
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch.sql"):
        apply_sql_confs(FakeSC(session=FakeSession()), settings())  # type: ignore[arg-type]
    assert shim.marked == [(sql.SHIM_RULE, 128)]
    [warning] = _warnings(caplog)
    assert "not honoured in the session that already exists" in warning


def test_an_app_count_set_before_activation_needs_no_rule_and_no_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    shim = Shim(monkeypatch)
    sc = FakeSC({"spark.sql.shuffle.partitions": "400"})
    with caplog.at_level(logging.INFO, logger="spark_adaptive.batch.sql"):
        apply_sql_confs(sc, settings())  # type: ignore[arg-type]
    assert INITIAL not in sc.live.entries
    assert shim.registered == 0 and shim.marked == [] and _warnings(caplog) == []
    assert sql.ESTIMATE_KEY not in sc.live.entries
