"""RDD file sources: Flink's source inference with held slots, and splits made into tasks."""

from __future__ import annotations

import pytest

from spark_adaptive.core.batch.sources import decide_source, plan_source, split_paths

MiB = 1 << 20
V = 64 * MiB


def test_source_tasks_follow_the_bytes_within_the_bound() -> None:
    d = decide_source(1000 * MiB, avg_bytes_per_task=V, min_p=1, max_p=128,
                      default_source_parallelism=None)
    assert d.parallelism == 16 and d.computed == 16
    capped = decide_source(1000 * MiB, avg_bytes_per_task=V, min_p=1, max_p=128,
                           default_source_parallelism=10)
    assert capped.parallelism == 10 and "default source parallelism 10" in capped.reason
    by_max = decide_source(1000 * MiB, avg_bytes_per_task=V, min_p=1, max_p=8,
                           default_source_parallelism=10)
    assert by_max.parallelism == 8


def test_held_slots_raise_a_small_source_while_each_task_reads_1_mib() -> None:
    d = decide_source(10 * MiB, avg_bytes_per_task=V, min_p=1, max_p=128,
                      default_source_parallelism=None, slots=4)
    assert d.parallelism == 4 and "4 task slots held" in d.reason and d.computed == 1
    tiny = decide_source(3 * MiB, avg_bytes_per_task=V, min_p=1, max_p=128,
                         default_source_parallelism=None, slots=8)
    assert tiny.parallelism == 3
    alone = decide_source(10 * MiB, avg_bytes_per_task=V, min_p=1, max_p=128,
                          default_source_parallelism=None, slots=1)
    assert alone.parallelism == 1


def test_min_parallelism_raises_but_never_above_the_source_bound() -> None:
    d = decide_source(10 * MiB, avg_bytes_per_task=V, min_p=6, max_p=128,
                      default_source_parallelism=None, slots=2)
    assert d.parallelism == 6 and "min-parallelism 6" in d.reason
    bounded = decide_source(10 * MiB, avg_bytes_per_task=V, min_p=6, max_p=128,
                            default_source_parallelism=4)
    assert bounded.parallelism == 4
    with pytest.raises(ValueError, match="min_p"):
        decide_source(1, avg_bytes_per_task=V, min_p=0, max_p=4,
                      default_source_parallelism=None)
    with pytest.raises(ValueError, match="input_bytes"):
        decide_source(-1, avg_bytes_per_task=V, min_p=1, max_p=4,
                      default_source_parallelism=None)


def test_more_splits_than_tasks_are_grouped_fewer_run_one_each() -> None:
    d = decide_source(10 * MiB, avg_bytes_per_task=V, min_p=1, max_p=128,
                      default_source_parallelism=None, slots=2)
    small_files = plan_source("/in", 10 * MiB, d, 200)
    assert small_files.parallelism == 2 and small_files.coalesced
    assert "200 splits grouped into 2 tasks" in small_files.reason
    exact = plan_source("/in", 10 * MiB, d, 2)
    assert exact.parallelism == 2 and not exact.coalesced
    one_file = plan_source("/in", 10 * MiB, d, 1)
    assert one_file.parallelism == 1 and not one_file.coalesced
    assert "fewest the input format makes" in one_file.reason
    data = small_files.to_json()
    assert data["splits"] == 200 and data["parallelism"] == 2 and data["inputBytes"] == 10 * MiB


def test_paths_split_at_commas_outside_glob_braces() -> None:
    assert split_paths("/a,/b/{x,y}/*.csv,,/c") == ["/a", "/b/{x,y}/*.csv", "/c"]
    assert split_paths("/only") == ["/only"]
