"""Faults inside spark-adaptive never stop the app's query and never lose data.

Each test injects one fault into a live driver (pytest-spark's ``local[2]`` session, no
cluster) while a stateful query runs (:func:`rate_aggregation`: Spark's rate source
counted per key, each batch's complete aggregate written by batch id), and checks that
the query goes on, or stays at the parallelism it had, that every row the source
produced is counted exactly once, and that exactly one log line says why:

a. a bus subscriber raising;
b. (the autoscaler's policy raising: the autoscaler runs only on a cluster, so that is
   tests/unit/test_faults.py, on virtual time);
c. a REST route raising something unexpected;
d. the actuator's py4j calls raising;
e. the write of persisted requirements failing (a read-only directory, a full disk);
f. a state repartition failing half-way during a restart rescale (once: Spark's retry
   finishes it; twice: the checkpoint is rolled back and the query keeps its
   partitions), and one left unfinished by a driver that died;
g. the JVM shim jar missing or not loading.

Local mode rescales nothing and refuses new bounds, so e and f run the driver *as on a
cluster*: the runtime is told the master has no fixed pool (``local_slots``), and the
local executor's two cores are announced as one executor's slots, so that bounds can be
PUT and a restart rescale repartitions the query's state as it would on a cluster.
"""

from __future__ import annotations

import contextlib
import glob
import http.client
import json
import logging
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.query import StreamingCheckpointManager

import spark_adaptive
from spark_adaptive.core import events as ev
from spark_adaptive.core.ports import ExecutorRelease
from spark_adaptive.spark import actuator as actuator_module
from spark_adaptive.spark import runtime as runtime_module
from spark_adaptive.spark.checkpoint import inspect_checkpoint
from spark_adaptive.testing.streaming import (
    assert_counted_exactly_once,
    history,
    rate_aggregation,
    snapshot,
    wait_until,
)

pytestmark = [pytest.mark.timeout(300)]

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SESSION_CONF = {"spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.stateStore.providerClass": ROCKSDB}
QUICK = {
    "rest.port": "0",
    "scheduler.submission.resource-stabilization-timeout": "0s",
    "scheduler.executing.cooldown-after-rescaling": "0s",
    "scheduler.executing.resource-stabilization-timeout": "0s",
    # The executor announced by hand sends no heartbeat spark-adaptive would wait for.
    "failure-detection.timeout": "1h",
}
#: What the driver *as on a cluster* says once because local mode has no cluster manager.
NO_CLUSTER_MANAGER = "cannot add or remove executors"


# -- fixtures ----------------------------------------------------------------------------
@pytest.fixture
def spark(spark_session: Any) -> Iterator[Any]:
    """The local session with two shuffle partitions and the RocksDB state store (Spark
    repartitions state offline only there); put back as it was afterwards."""
    before = {k: spark_session.conf.get(k, None) for k in SESSION_CONF}
    for k, v in SESSION_CONF.items():
        spark_session.conf.set(k, v)
    yield spark_session
    for q in spark_session.streams.active:
        with contextlib.suppress(Exception):
            q.stop()
    for k, v in before.items():
        if v is None:
            spark_session.conf.unset(k)
        else:
            spark_session.conf.set(k, v)


@pytest.fixture
def rt(spark: Any) -> Iterator[Any]:
    """spark-adaptive in local mode, as an app gets it."""
    runtime = spark_adaptive.enable(spark, **QUICK)
    yield runtime
    runtime.shutdown()


@pytest.fixture
def cluster_rt(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """spark-adaptive as on a cluster of one two-slot executor (see the module's doc)."""
    monkeypatch.setattr(runtime_module, "local_slots", lambda master, task_cpus=1: None)
    runtime = spark_adaptive.enable(spark, **QUICK)
    runtime.post(ev.ExecutorAdded(time.time(), "local", "127.0.0.1", 2))
    wait_until(lambda: runtime.scheduler.resources.live_slots == 2,
               what="the executor's two slots")
    yield runtime
    runtime.shutdown()


# -- helpers -----------------------------------------------------------------------------
def _start(spark: Any, tmp: Path, name: str = "counts") -> Any:
    return rate_aggregation(spark, out=tmp / "out", checkpoint=tmp / "cp",
                            rows_per_second=20, trigger="500 milliseconds", name=name)


def _batch(rt: Any, query: Any) -> int:
    progress = snapshot(rt, query.key)["lastProgress"]
    return -1 if progress is None else int(progress["batchId"])


def _goes_on(rt: Any, query: Any, batches: int = 2) -> None:
    """Wait until the scheduler has seen ``batches`` more micro-batches of the query."""
    after = _batch(rt, query)
    wait_until(lambda: _batch(rt, query) >= after + batches,
               what=f"{batches} more micro-batches after batch {after}")
    assert query.isActive and query.exception() is None


def _committed_aggregate(out: Path) -> dict[str, list[Any]]:
    """The newest batch output whose write committed (``_SUCCESS``) and holds rows: the
    query may be writing the next one meanwhile."""
    done = sorted(glob.glob(str(out / "batch=*" / "_SUCCESS")),
                  key=lambda p: int(Path(p).parent.name.split("=")[1]))
    for marker in reversed(done):
        table: dict[str, list[Any]] = pq.read_table(str(Path(marker).parent)).to_pydict()
        if table.get("n"):
            return table
    return {}


def _problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """spark-adaptive's WARNING and ERROR lines, but the one a driver *as on a cluster*
    says because local mode has no cluster manager."""
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("spark_adaptive") and r.levelno >= logging.WARNING
            and NO_CLUSTER_MANAGER not in r.getMessage()]


def _request(rt: Any, method: str, path: str, body: Any = None) -> tuple[int, Any, str]:
    parts = urlsplit(rt.rest.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    raw = None if body is None else json.dumps(body).encode()
    headers = {} if raw is None else {"Content-Type": "application/json"}
    try:
        conn.request(method, path, body=raw, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null"), resp.getheader("Content-Type")
    finally:
        conn.close()


def _bounds(lower: int, upper: int) -> dict[str, Any]:
    return {"parallelism": {"lowerBound": lower, "upperBound": upper}}


def _last_commit(checkpoint: str | os.PathLike[str]) -> int:
    return max(int(n) for n in os.listdir(Path(checkpoint, "commits")) if n.isdigit())


@contextlib.contextmanager
def _obstacle_to_the_rewritten_state(checkpoint: str | os.PathLike[str]) -> Iterator[Path]:
    """Make Spark's offline repartition fail half-way: it writes its batch's offsets
    first, then rewrites the state as the state store's next version (batch N+2's
    ``N+2.zip`` of each new partition), then commits. A non-empty directory where
    partition 0's new version goes makes that rewrite fail after the offsets were
    written; it is taken away afterwards, as a passing fault goes."""
    obstacle = Path(checkpoint, "state", "0", "0", f"{_last_commit(checkpoint) + 2}.zip")
    obstacle.mkdir(parents=True)
    (obstacle / "in-the-way").write_text("")
    try:
        yield obstacle
    finally:
        shutil.rmtree(obstacle)


# -- a. a bus subscriber raising --------------------------------------------------------
def test_a_failing_event_handler_is_one_line_and_the_query_goes_on(
        rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 1)
    failed: list[ev.Event] = []

    def fails_once(event: ev.Event) -> None:
        if isinstance(event, ev.QueryProgress) and not failed:
            failed.append(event)
            raise RuntimeError("injected: a handler's bug")

    caplog.set_level(logging.INFO, logger="spark_adaptive")
    rt.subscribe(fails_once, "faulty handler", replay_executors=False)
    _goes_on(rt, query)

    assert failed and rt.bus.handler_failures == 1
    [line] = _problems(caplog)
    assert line.startswith("faulty handler failed on QueryProgress(")
    assert "the other handlers still ran" in line
    # The scheduler, subscribed before, got that very progress all the same.
    assert _batch(rt, query) > failed[0].batch_id
    assert snapshot(rt, query.key)["state"] == "Executing"
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


# -- c. a REST route raising ------------------------------------------------------------
def test_c_a_failing_rest_route_answers_500_json_and_the_query_goes_on(
        rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 1)

    def broken(ident: str) -> Any:
        raise KeyError("injected: a route's bug")

    caplog.set_level(logging.INFO, logger="spark_adaptive")
    monkeypatch.setattr(rt.facade, "query", broken)
    status, body, content_type = _request(rt, "GET", "/queries/counts")
    assert status == 500 and content_type == "application/json"
    assert body == {"errors": ["Internal error: KeyError: \"injected: a route's bug\""]}

    # The other routes, the scheduler and the query are untouched.
    status, listed, _ = _request(rt, "GET", "/queries")
    assert status == 200 and [q["name"] for q in listed] == ["counts"]
    assert listed[0]["state"] == "Executing"
    _goes_on(rt, query)
    [line] = _problems(caplog)
    assert line == "GET /queries/counts failed"
    [record] = [r for r in caplog.records if r.getMessage() == line]
    assert record.levelno == logging.ERROR and record.exc_info is not None  # the traceback
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


# -- d. the actuator's py4j calls raising -----------------------------------------------
def test_d_failing_executor_calls_are_one_line_each_and_the_query_goes_on(
        rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real py4j calls, given arguments no JVM method takes: the gateway answers with
    an error, as it does for a Spark whose method changed."""
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 1)
    actuator = rt.actuator
    monkeypatch.setattr(actuator, "supported", True)  # local mode has no cluster manager
    monkeypatch.setattr("spark_adaptive.spark.actuator.empty_scala_map", lambda sc: 42)
    real_seq = actuator_module.scala_string_seq
    monkeypatch.setattr("spark_adaptive.spark.actuator.scala_string_seq", lambda sc, ids: 42)
    caplog.set_level(logging.INFO, logger="spark_adaptive")
    seven = [ExecutorRelease("7", "a test")]  # local mode has no executor of its own
    actuator.request_total_executors(3, seven)
    assert actuator.drain()

    assert actuator.requested == [] and actuator.killed == []
    kill, request = _problems(caplog)
    assert request.startswith("requesting 3 executor(s) in total failed (")
    assert kill.startswith("releasing executor(s) 7 failed (")
    for line in (request, kill):
        assert line.endswith("not done, and the queries run on with the executors they "
                             "have")
        assert "Py4JError" in line or "does not exist" in line, line
    # The executor whose release failed is still the app's: a lower total releases it
    # again (the reconciler names it again: tests/unit/test_stream_executors.py).
    assert actuator.request_total_executors(0, seven) == ["7"]
    assert actuator.drain()
    # A release the cluster manager refuses (local mode's scheduler kills nothing and
    # answers false) leaves it the app's too.
    monkeypatch.setattr("spark_adaptive.spark.actuator.scala_string_seq", real_seq)
    actuator.request_total_executors(0, seven)
    assert actuator.drain()
    assert actuator.killed == []
    assert ("releasing executor(s) 7 (a test) was refused by the cluster manager; they "
            "count as the app's again") in _problems(caplog)
    assert actuator.request_total_executors(0, seven) == ["7"]
    assert actuator.drain()
    _goes_on(rt, query)
    assert snapshot(rt, query.key)["state"] == "Executing"
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


# -- e. persisting requirements failing ------------------------------------------------
@contextlib.contextmanager
def _read_only(directory: Path) -> Iterator[None]:
    """``directory`` refuses new files, for root too (the immutable attribute)."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode:
            pytest.skip("chattr +i is not allowed here")
        undo = ["chattr", "-i", str(directory)]
    else:
        directory.chmod(0o555)
        undo = ["chmod", "755", str(directory)]
    try:
        with pytest.raises(OSError):
            (directory / "probe").write_text("")
        yield
    finally:
        subprocess.run(undo, check=True)


@contextlib.contextmanager
def _full_disk(directory: Path, mount: Path) -> Iterator[None]:
    """``directory`` lives on a file system with no space left (a small tmpfs, filled)."""
    mount.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                      capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        with contextlib.suppress(OSError), open(mount / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        (mount / "spark-adaptive").mkdir()
        if directory.exists():
            shutil.rmtree(directory)
        directory.symlink_to(mount / "spark-adaptive")
        yield
    finally:
        if directory.is_symlink():
            directory.unlink()
        # Not lazily: a write that failed on the full disk must have left no file open
        # (Hadoop's checksummed local file system did: its close stopped at the flush).
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("fault", ["read-only directory", "full disk"])
def test_e_a_failed_write_of_the_requirements_answers_500_and_changes_nothing(
        cluster_rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        fault: str) -> None:
    rt = cluster_rt
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 1)
    assert snapshot(rt, query.key)["parallelism"] == 2
    home = tmp_path / "cp" / "spark-adaptive"
    injected = (_read_only(home) if fault == "read-only directory"
                else _full_disk(home, tmp_path / "small-disk"))
    caplog.set_level(logging.INFO, logger="spark_adaptive")
    records = len(history(rt, query.key))

    with injected:
        status, body, _ = _request(rt, "PUT", "/queries/counts/resource-requirements",
                                   _bounds(1, 1))
        assert status == 500
        [reason] = body["errors"]
        assert reason.startswith("The resource requirements of the query [counts] could not "
                                 "be persisted (cannot write ")
        assert reason.endswith("). Nothing was changed. Please retry.")
        assert not (home / "requirements.json").exists()

    # Nothing changed: the bounds, the query's parallelism, its history.
    status, bounds, _ = _request(rt, "GET", "/queries/counts/resource-requirements")
    assert (status, bounds) == (200, _bounds(1, 2))
    _goes_on(rt, query)
    snap = snapshot(rt, query.key)
    assert (snap["state"], snap["parallelism"]) == ("Executing", 2)
    assert len(history(rt, query.key)) == records
    lines = [line for line in _problems(caplog) if "requirements" in line]
    assert lines == [f"PUT /queries/counts/resource-requirements: {reason}"]
    # The retry the answer asks for works once the store does (same bounds: no restart).
    status, body, _ = _request(rt, "PUT", "/queries/counts/resource-requirements",
                               _bounds(1, 2))
    assert (status, body) == (200, {})
    assert (home / "requirements.json").exists()
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


# -- f. a repartition failing half-way, or left unfinished by a dead driver ------------
def test_f_a_repartition_failing_half_way_is_rolled_back_and_the_query_keeps_its_partitions(
        cluster_rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    rt = cluster_rt
    checkpoint = tmp_path / "cp"
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 1)
    assert snapshot(rt, query.key)["parallelism"] == 2
    original = StreamingCheckpointManager.repartition
    left: list[Any] = []  # the checkpoint as each failed attempt left it

    def fails_half_way(self: Any, location: str, partitions: int, *args: Any) -> None:
        with _obstacle_to_the_rewritten_state(location):
            try:
                original(self, location, partitions, *args)
            except Exception:
                left.append(inspect_checkpoint(spark, location))
                raise
        raise AssertionError("the obstacle did not make the repartition fail")

    monkeypatch.setattr(StreamingCheckpointManager, "repartition", fails_half_way)
    caplog.set_level(logging.INFO, logger="spark_adaptive")
    status, _, _ = _request(rt, "PUT", "/queries/counts/resource-requirements", _bounds(1, 1))
    assert status == 200

    # The restart rescale 2 -> 1 stops the query cleanly, its repartition fails twice
    # (Spark's retry of the same batch included), and the query is started again at 2.
    wait_until(lambda: [r["outcome"] for r in history(rt, query.key)
                        if r["kind"] == "restart"] == ["failed"],
               what="the restart rescale to end as failed")
    assert len(left) == 2
    assert all(cp.unfinished_repartition and cp.shuffle_partitions == 1 for cp in left), left
    _goes_on(rt, query)
    snap = snapshot(rt, query.key)
    assert (snap["state"], snap["parallelism"]) == ("Executing", 2)
    assert snap["lastProgress"]["statePartitions"] == 2
    [restart] = [r for r in history(rt, query.key) if r["kind"] == "restart"]
    assert (restart["fromParallelism"], restart["toParallelism"]) == (2, 1)
    assert "repartition" in dict(restart["timings"])
    assert "its state could not be repartitioned to 1 (" in snap["lastDecision"]["reason"]
    # No restart loop: the query keeps its partitions while nothing changes.
    assert snapshot(rt, query.key)["counters"]["restarts"] == 1
    [line] = _problems(caplog)
    assert line.startswith(f"query counts: repartitioning its state in {checkpoint} from 2 to "
                           "1 partitions failed twice (")
    assert (f"its unfinished repartition batch {left[0].last_offset} (2 -> 1 partitions, not "
            f"committed) was removed, so the checkpoint ends at its last committed batch "
            f"{left[0].last_commit} at 2 partitions") in line
    assert line.endswith("the query goes on at its 2 partitions")

    query.stop_with_savepoint()
    cp = inspect_checkpoint(spark, str(checkpoint))
    assert cp.complete and cp.shuffle_partitions == 2
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


def test_f_a_repartition_failing_once_half_way_is_finished_by_its_retry(
        cluster_rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A passing fault: Spark's retry of the same repartition continues the batch the
    failed attempt left, and the rescale completes."""
    rt = cluster_rt
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 1)
    original = StreamingCheckpointManager.repartition
    attempts: list[str] = []

    def fails_once(self: Any, location: str, partitions: int, *args: Any) -> None:
        attempts.append(location)
        if len(attempts) > 1:
            original(self, location, partitions, *args)
            return
        with _obstacle_to_the_rewritten_state(location):
            original(self, location, partitions, *args)

    monkeypatch.setattr(StreamingCheckpointManager, "repartition", fails_once)
    caplog.set_level(logging.INFO, logger="spark_adaptive")
    status, _, _ = _request(rt, "PUT", "/queries/counts/resource-requirements", _bounds(1, 1))
    assert status == 200
    wait_until(lambda: [r["outcome"] for r in history(rt, query.key)
                        if r["kind"] == "restart"] == ["completed"],
               what="the restart rescale to complete")
    assert len(attempts) == 2
    snap = snapshot(rt, query.key)
    assert (snap["state"], snap["parallelism"]) == ("Executing", 1)
    assert snap["lastProgress"]["statePartitions"] == 1
    [line] = _problems(caplog)
    assert line.startswith(f"query counts: repartitioning its state in {tmp_path / 'cp'} from 2 "
                           "to 1 partitions failed (")
    assert line.endswith("); the retry succeeded")
    query.stop_with_savepoint()
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


def test_f_a_repartition_a_dead_driver_left_unfinished_is_rolled_back_at_the_next_start(
        rt: Any, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A driver killed during a repartition leaves what one failing half-way leaves,
    with nobody to roll it back: the offsets of the repartition batch, part of the state
    rewritten, no commit. Spark then refuses to start the query; the app's next start
    of it, with spark-adaptive, rolls the checkpoint back and runs on exactly once."""
    checkpoint = tmp_path / "cp"
    query = _start(spark, tmp_path)
    _goes_on(rt, query, 2)
    query.stop_with_savepoint()
    done = _last_commit(checkpoint)
    with _obstacle_to_the_rewritten_state(checkpoint), pytest.raises(Exception) as died:
        spark._streamingCheckpointManager.repartition(str(checkpoint), 1)
    assert "zip" in str(died.value) or "state" in str(died.value).lower()
    left = inspect_checkpoint(spark, str(checkpoint))
    assert left.unfinished_repartition and (left.last_offset, left.last_commit) == (done + 1,
                                                                                   done)

    caplog.set_level(logging.INFO, logger="spark_adaptive")
    again = _start(spark, tmp_path)
    _goes_on(rt, again, 2)
    snap = snapshot(rt, again.key)
    assert (snap["state"], snap["parallelism"]) == ("Executing", 2)
    assert snap["lastProgress"]["statePartitions"] == 2
    [line] = _problems(caplog)
    assert line == (f"query counts: its checkpoint {checkpoint} ended with a state "
                    f"repartition that did not finish; its unfinished repartition batch "
                    f"{done + 1} (2 -> 1 partitions, not committed) was removed, so the "
                    f"checkpoint ends at its last committed batch {done} at 2 partitions, "
                    "which Spark resumes from")
    again.stop_with_savepoint()
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))


# -- g. the JVM shim missing or not loading ---------------------------------------------
@pytest.mark.parametrize("jar", ["missing", "broken"])
def test_g_without_a_loadable_shim_the_query_is_managed_on_py4j_and_stops_cleanly(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, jar: str) -> None:
    path = tmp_path / f"{jar}.jar"
    if jar == "broken":  # a jar, but without the shim's classes
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    caplog.set_level(logging.INFO, logger="spark_adaptive")
    rt = spark_adaptive.enable(spark, **QUICK, **{"shim.jar": str(path)})
    try:
        assert rt.listener_path == "py4j"
        query = _start(spark, tmp_path)
        _goes_on(rt, query, 2)
        query.stop_with_savepoint()  # the clean stop without the shim's BatchBoundary
        snap = snapshot(rt, query.key)
        assert (snap["state"], snap["status"]) == ("Finished", "FINISHED")
    finally:
        rt.shutdown()
    assert inspect_checkpoint(spark, str(tmp_path / "cp")).complete
    [line] = _problems(caplog)
    assert line.startswith("spark-adaptive runs without its JVM shim: ")
    assert (f"{path} is not a file" if jar == "missing"
            else f"{path}: io.sparkadaptive.shim.AdaptiveListener does not load") in line
    assert_counted_exactly_once(_committed_aggregate(tmp_path / "out"))
