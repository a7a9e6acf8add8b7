"""Local mode is a fixed pool: its task slots from the master URL."""

from __future__ import annotations

import os

import pytest

from spark_adaptive.spark.runtime import local_slots


@pytest.mark.parametrize(("master", "task_cpus", "slots"), [
    ("local", 1, 1), ("local[2]", 1, 2), ("local[4]", 2, 2), ("local[3, 2]", 1, 3),
    ("local[*]", 1, os.cpu_count() or 1), ("local[*,4]", 1, os.cpu_count() or 1),
    ("local[1]", 2, 1),  # never below one slot
    ("local-cluster[2,1,512]", 1, None), ("spark://127.0.0.1:7077", 1, None),
    ("yarn", 1, None), ("k8s://https://host", 1, None),
])
def test_slots_of_a_master(master: str, task_cpus: int, slots: int | None) -> None:
    assert local_slots(master, task_cpus) == slots
