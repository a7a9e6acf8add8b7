"""``batch.text_file`` keeps ``sc.textFile``'s line order: splits are grouped (Spark's
``coalesce``) only when none has preferred locations, since Spark's coalescer groups
located splits by host, not by position."""

from __future__ import annotations

from typing import Any

import pytest
from batch_fakes import Dependency, FakeSC, JvmRDD, PyRDD

from spark_adaptive.batch import sources
from spark_adaptive.core.batch.sources import decide_source, plan_source
from spark_adaptive.spark.files import splits_have_locations

MiB = 1 << 20


def text_file_rdd(hosts: list[list[str]]) -> PyRDD:
    """sc.textFile's RDD: a map (no locations of its own) over the HadoopRDD."""
    hadoop = JvmRDD(hosts)
    return PyRDD(JvmRDD([[] for _ in hosts], [Dependency(hadoop)]))


def read(monkeypatch: pytest.MonkeyPatch, rdd: PyRDD, size: int = 10 * MiB) -> Any:
    monkeypatch.setattr(sources, "_sized_text_file", lambda sc, path, jar, uni: (rdd, size))
    monkeypatch.setattr(sources, "_in_chunks", lambda sc, r, jar, uni: r)
    return sources.text_file(FakeSC(), "/in")  # type: ignore[arg-type]


def test_hdfs_splits_are_not_grouped_by_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 small files on HDFS: their splits prefer their blocks' hosts.
    rdd = text_file_rdd([[f"dn{i % 3}"] for i in range(200)])
    out = read(monkeypatch, rdd)
    assert rdd.coalesced_to is None, "coalesce would group the splits by host"
    plan = sources.source_decision_of(out)
    assert plan is not None and plan.parallelism == 200 and not plan.coalesced
    assert "200 splits kept" in plan.reason and "preferred locations" in plan.reason


def test_splits_without_locations_are_grouped_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # A local or object-store path (Hadoop reports "localhost", which Spark drops).
    rdd = text_file_rdd([[] for _ in range(200)])
    out = read(monkeypatch, rdd)
    plan = sources.source_decision_of(out)
    assert plan is not None and plan.coalesced and rdd.coalesced_to == plan.parallelism == 4


def test_locations_are_looked_for_down_one_to_one_parents_within_a_bound() -> None:
    located = text_file_rdd([[] for _ in range(9)] + [["dn1"]])
    assert splits_have_locations(located) is True
    assert splits_have_locations(text_file_rdd([[]] * 10)) is False
    assert splits_have_locations(text_file_rdd([[]] * 10), most=9) is None, "too many"
    shuffled = PyRDD(JvmRDD([[]] * 4, [Dependency(JvmRDD([[]] * 4),
                                                  "org.apache.spark.ShuffleDependency")]))
    assert splits_have_locations(shuffled) is None
    # The source is looked at first, where locations come from: one look suffices.
    hadoop = JvmRDD([["dn1"]] * 500)
    top = JvmRDD([[]] * 500, [Dependency(hadoop)])
    assert splits_have_locations(PyRDD(top)) is True
    assert hadoop.looked_at == 1 and top.looked_at == 0


def test_unknown_locations_keep_the_splits() -> None:
    d = decide_source(10 * MiB, avg_bytes_per_task=64 * MiB, min_p=1, max_p=128,
                      default_source_parallelism=None, slots=2)
    unknown = plan_source("/in", 10 * MiB, d, 2000, located=None)
    assert unknown.parallelism == 2000 and not unknown.coalesced
    assert "not known" in unknown.reason
    assert plan_source("/in", 10 * MiB, d, 2000, located=False).parallelism == 2
