"""Reading spark-adaptive's keys from the driver's SparkConf, with their values as set."""

from __future__ import annotations

from batch_fakes import FakeSC

from spark_adaptive.settings import Settings
from spark_adaptive.spark.jvm import spark_conf


def test_values_spark_redacts_in_its_dumps_are_read_as_set() -> None:
    sc = FakeSC({
        "spark.adaptive.enabled": "true",
        "spark.adaptive.rest.token": "s3cretvalue",
        "spark.adaptive.shim.jar": "/opt/secrets-free/shim.jar",
        "spark.adaptive.scheduler.non-replayable-sources": "com.acme.TokenStreamSource",
        "spark.master": "local[2]",
        "spark.app.name": "my app",
    })
    assert "s3cretvalue" not in sc.live.toDebugString()  # what Spark's dump shows
    assert spark_conf(sc) == {  # type: ignore[arg-type]
        "spark.adaptive.enabled": "true",
        "spark.adaptive.rest.token": "s3cretvalue",
        "spark.adaptive.shim.jar": "/opt/secrets-free/shim.jar",
        "spark.adaptive.scheduler.non-replayable-sources": "com.acme.TokenStreamSource",
        "spark.master": "local[2]",
    }
    settings = Settings.from_conf(spark_conf(sc))  # type: ignore[arg-type]
    assert settings.rest.token == "s3cretvalue"
    assert settings.shim_jar == "/opt/secrets-free/shim.jar"


def test_only_the_keys_the_settings_are_checked_against_are_read() -> None:
    sc = FakeSC({"spark.dynamicAllocation.enabled": "true", "spark.executor.cores": "2",
                 "spark.adaptive.listener": "py4j", "spark.adaptivex": "1"})
    assert spark_conf(sc) == {  # type: ignore[arg-type]
        "spark.dynamicAllocation.enabled": "true", "spark.adaptive.listener": "py4j"}
    assert spark_conf(FakeSC()) == {}  # type: ignore[arg-type]
