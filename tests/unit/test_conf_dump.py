"""Reading a SparkConf in one py4j call: its debug string parsed back."""

from __future__ import annotations

from spark_adaptive.spark.jvm import parse_conf_dump


def test_pairs_values_with_equals_signs_and_lines() -> None:
    text = ("spark.app.name=my app\n"
            "spark.driver.extraJavaOptions=-Dx=1 -Dy=2\n"
            "spark.adaptive.enabled=true\n"
            "spark.some.script=line one\n"
            "line two has = inside\n"
            "spark.master=local[2]")
    assert parse_conf_dump(text) == {
        "spark.app.name": "my app",
        "spark.driver.extraJavaOptions": "-Dx=1 -Dy=2",
        "spark.adaptive.enabled": "true",
        "spark.some.script": "line one\nline two has = inside",
        "spark.master": "local[2]",
    }


def test_empty_values_and_an_empty_dump() -> None:
    assert parse_conf_dump("spark.a=\nspark.b=x") == {"spark.a": "", "spark.b": "x"}
    assert parse_conf_dump("") == {}
