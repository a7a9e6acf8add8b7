"""The soak's exactly-once check finds values lost and values counted twice, key by key."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_adaptive.testing.soak import KEYS, check_counts


def _write(tmp: Path, batch: int, top: int, change: dict[int, tuple[int, int]]) -> None:
    rows: dict[str, list[int]] = {"key": [], "count": [], "total": [], "latest": []}
    for key in range(KEYS):
        values = list(range(key, top + 1, KEYS))
        count, total = change.get(key, (len(values), sum(values)))
        rows["key"].append(key)
        rows["count"].append(count)
        rows["total"].append(total)
        rows["latest"].append(max(values) if values else 0)
    (tmp / "out" / f"batch={batch}").mkdir(parents=True)
    pq.write_table(pa.table(rows), tmp / "out" / f"batch={batch}" / "part.parquet")
    (tmp / "ck" / "commits").mkdir(parents=True, exist_ok=True)
    (tmp / "ck" / "commits" / str(batch)).write_text("v1")


def test_every_value_once(tmp_path: Path) -> None:
    _write(tmp_path, 3, 1234, {})
    assert check_counts(tmp_path / "out", tmp_path / "ck") == (KEYS, 1235, 0, 0)


def test_lost_and_duplicated_values_are_counted(tmp_path: Path) -> None:
    values = list(range(7, 1235, KEYS))
    _write(tmp_path, 5, 1234, {7: (len(values) - 2, sum(values[:-2])),
                               8: (len(values) + 1, sum(values) + 8)})
    assert check_counts(tmp_path / "out", tmp_path / "ck")[2:] == (2, 1)


def test_the_last_committed_batch_with_output_is_read(tmp_path: Path) -> None:
    _write(tmp_path, 1, 500, {})
    _write(tmp_path, 2, 900, {3: (0, 0)})
    (tmp_path / "out" / "batch=3").mkdir()  # written, never committed
    (tmp_path / "ck" / "commits" / "4").write_text("v1")  # a repartition's: no output
    assert check_counts(tmp_path / "out", tmp_path / "ck")[2] > 0  # batch 2 is read


def test_an_empty_aggregate_counts_nothing(tmp_path: Path) -> None:
    # A first micro-batch of the rate source reads no rows: its aggregate is empty, and a
    # run whose query committed nothing after it must say so (no values), not crash.
    (tmp_path / "out" / "batch=0").mkdir(parents=True)
    empty = pa.table({"key": pa.array([], pa.int64()), "count": pa.array([], pa.int64()),
                      "total": pa.array([], pa.int64()), "latest": pa.array([], pa.int64())})
    pq.write_table(empty, tmp_path / "out" / "batch=0" / "part.parquet")
    (tmp_path / "ck" / "commits").mkdir(parents=True)
    (tmp_path / "ck" / "commits" / "0").write_text("v1")
    assert check_counts(tmp_path / "out", tmp_path / "ck") == (0, 0, 0, 0)
