"""file_sink_files reads a file sink's log as Spark does: each committed file once."""

from __future__ import annotations

import json
from pathlib import Path

from spark_adaptive.testing.streaming import file_sink_files


def _log(path: Path, name: str, files: list[str]) -> None:
    lines = ["v1"] + [json.dumps({"path": f"file://{f}", "action": "add"}) for f in files]
    path.joinpath(name).write_text("\n".join(lines) + "\n")


def test_files_before_a_compaction_are_read_once(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    for batch in range(9):
        _log(log, str(batch), [f"/out/part-{batch}"])
    _log(log, "9.compact", [f"/out/part-{b}" for b in range(10)])
    _log(log, "10", ["/out/part-10"])
    _log(log, "11", ["/out/part-11"])
    log.joinpath(".11.crc").write_text("")
    assert file_sink_files(tmp_path) == [f"/out/part-{b}" for b in range(12)]


def test_without_a_compaction_every_batch_is_read(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    for batch in (2, 0, 1):
        _log(log, str(batch), [f"/out/part-{batch}"])
    assert file_sink_files(tmp_path) == ["/out/part-0", "/out/part-1", "/out/part-2"]


def test_paths_are_the_local_files_the_uris_name(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    uris = ["file:///tmp/my%20out/part-0.parquet", "file:/tmp/100%25/part-1.parquet",
            "/tmp/plain/part-2.parquet", "hdfs://nn:8020/out/part-3.parquet"]
    log.joinpath("0").write_text(
        "v1\n" + "".join(json.dumps({"path": u, "action": "add"}) + "\n" for u in uris))
    assert file_sink_files(tmp_path) == [
        "/tmp/my out/part-0.parquet",
        "/tmp/100%/part-1.parquet",
        "/tmp/plain/part-2.parquet",
        "hdfs://nn:8020/out/part-3.parquet",
    ]
