"""The REST API and the CLI on a real cluster, and requirements surviving a driver restart.

One cluster (two one-core workers) and one stateful query, ``counts``: the
API and the CLI read it, refused PUTs change nothing, an accepted PUT lowers
its upper bound below its parallelism and the scheduler restart-rescales it
2 -> 1; then the driver goes away and a new one (with a bearer token this
time) starts the same query from the same checkpoint, which comes back with
the persisted bounds and its rescale history: the records and counters of the
first driver, the new run's initial schedule after them.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import spark_adaptive
from spark_adaptive import cli
from spark_adaptive.rest.client import ConnectionProblem, RestClient
from spark_adaptive.testing.session import wait_for_executors
from spark_adaptive.testing.streaming import rate_aggregation, wait_until

pytestmark = pytest.mark.timeout(600)

FAST = {
    "scheduler.submission.resource-stabilization-timeout": "3s",
    "scheduler.executing.cooldown-after-rescaling": "1s",
    "scheduler.executing.resource-stabilization-timeout": "2s",
    "rest.port": "0",  # other apps may hold 4050 and the next ports
}
TOKEN = "integration-s3cret"






def _request(url: str, method: str, path: str, raw: bytes | None = None,
             token: str | None = None) -> tuple[int, Any]:
    import http.client

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if raw:
        headers["Content-Type"] = "application/json"  # anything else is 415
    try:
        conn.request(method, path, body=raw, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def _start_counts(spark: Any, out: Path, checkpoint: Path) -> Any:
    return rate_aggregation(spark, out, checkpoint, rows_per_second=20, keys=5, name="counts")


def _bounds(lower: int, upper: int) -> dict[str, Any]:
    return {"parallelism": {"lowerBound": lower, "upperBound": upper}}


def test_rest_api_and_cli_on_a_live_query_and_requirements_survive_a_driver_restart(
        local_cluster_factory: Any, cluster_spark_factory: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    cluster = local_cluster_factory(2)
    checkpoint = tmp_path / "checkpoint"
    persisted_file = checkpoint / "spark-adaptive" / "requirements.json"
    history_file = checkpoint / "spark-adaptive" / "history.json"
    spark = cluster_spark_factory(cluster, **{"spark.sql.shuffle.partitions": "2"})
    rt = spark_adaptive.enable(spark, **FAST)
    assert rt.rest is not None
    url = rt.rest.url
    api = RestClient(url)
    wait_for_executors(spark, 2)
    query = _start_counts(spark, tmp_path / "out", checkpoint)

    # -- reading -----------------------------------------------------------------------
    snap = wait_until(what="counts to run at parallelism 2", check=lambda: next(
        (q for q in api.get("/queries")
         if q["state"] == "Executing" and q["parallelism"] == 2), None))
    assert snap["name"] == "counts" and snap["id"] == query.id and snap["slots"] == 2
    assert snap["requirements"] == _bounds(1, 2) and snap["lastDecision"]["reason"]
    for ident in (query.id, "counts", query.key):
        assert api.get(api.query_path(ident))["key"] == query.key
    assert api.get(api.query_path("counts", "resource-requirements")) == _bounds(1, 2)
    assert api.get(api.query_path("counts", "rescales"))["rescales"][0]["trigger"] == (
        "INITIAL_SCHEDULE")
    assert api.get("/openapi.json")["servers"] == [{"url": url}]

    # -- refused requests change nothing -------------------------------------------------
    req_path = "/queries/counts/resource-requirements"
    for raw, reason in (
            (b'{"parallelism": {"lowerBound": 3, "upperBound": 2}}', "greater than the upper"),
            (b'{"parallelism": {"lowerBound": 1, "upperBound": 40000}}', "max parallelism"),
            (b'{"parallelism": {"lowerBound": 0, "upperBound": 2}}', "greater than 0"),
            (b'{"parallelism": {"lowerBound": "1", "upperBound": 2}}', "integer"),
            (b'{"parallelism": {"lowerBound": 1, "upperBound": 2, "step": 1}}', "Unknown field"),
            (b"[1, 2]", ""), (b"{", ""), (b"", "does not specify")):
        status, answer = _request(url, "PUT", req_path, raw)
        assert status == 400 and answer["errors"], (raw, status, answer)
        assert reason in " ".join(answer["errors"]), (raw, answer)
    assert _request(url, "PUT", "/queries/nope/resource-requirements",
                    json.dumps(_bounds(1, 1)).encode())[0] == 404
    assert _request(url, "GET", "/no/such/path")[0] == 404
    assert _request(url, "POST", req_path, b"{}")[0] == 405
    assert api.get(api.query_path("counts", "resource-requirements")) == _bounds(1, 2)
    assert api.get(api.query_path("counts"))["lastDecision"]["action"] != "update requirements"
    assert not persisted_file.exists()

    # -- 409 while another update of the query is in flight ------------------------------
    # The checkpoint store is made slow (as an object store can be): the first PUT holds
    # the query's update slot while it persists; a second one is refused and changes nothing.
    store = rt.persisted._store
    real_save, entered, release = store.save, threading.Event(), threading.Event()

    def slow_save(checkpoint_dir: str, requirements: Any) -> None:
        entered.set()
        release.wait(30)
        real_save(checkpoint_dir, requirements)

    store.save = slow_save
    first: dict[str, Any] = {}
    put = threading.Thread(target=lambda: first.update(answer=_request(
        url, "PUT", req_path, json.dumps(_bounds(1, 2)).encode())))
    put.start()
    try:
        assert entered.wait(30), "the first PUT never reached the store"
        status, answer = _request(url, "PUT", req_path, json.dumps(_bounds(1, 1)).encode())
        assert status == 409 and "Another update to the query" in answer["errors"][0], answer
        assert api.get(api.query_path("counts", "resource-requirements")) == _bounds(1, 2)
    finally:
        release.set()
        put.join(30)
        store.save = real_save
    assert first["answer"][0] == 200  # same bounds as before: persisted, nothing to rescale
    assert json.loads(persisted_file.read_text())["parallelism"] == _bounds(1, 2)["parallelism"]

    # -- the CLI, in process and as the installed command --------------------------------
    assert cli.main(["--url", url, "status"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["ID", "NAME", "STATE"]
    assert table[1].split()[:6] == [query.id[:8], "counts", "Executing", "2", "2", "2"]
    command = Path(sys.executable).with_name("spark-adaptive")
    got = subprocess.run([str(command), "--url", url, "requirements", "get", query.id[:8]],
                         capture_output=True, text=True, timeout=60)
    assert (got.returncode, got.stdout.strip()) == (
        0, f"query {query.id}: parallelism between 1 and 2 [1, 2]"), got.stderr
    refused = subprocess.run([str(command), "--url", url, "requirements", "set", "counts",
                              "--lower", "2", "--upper", "1"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "The lower bound 2 is greater than the upper bound 1." in refused.stderr

    # -- an accepted PUT: persisted, then a restart rescale 2 -> 1 ----------------------
    assert cli.main(["--url", url, "requirements", "set", "counts", "--lower", "1",
                     "--upper", "1"]) == 0
    assert "persisted beside the query's checkpoint" in capsys.readouterr().out
    assert json.loads(persisted_file.read_text())["parallelism"] == {
        "lowerBound": 1, "upperBound": 1}
    wait_until(what="the rescale to 1 to complete", check=lambda: any(
        r["trigger"] == "REQUIREMENTS_CHANGED" and r["outcome"] == "completed"
        for r in api.get(api.query_path("counts", "rescales"))["rescales"]))
    last = api.get(api.query_path("counts", "rescales"))["rescales"][-1]
    assert (last["kind"], last["fromParallelism"], last["toParallelism"]) == ("restart", 2, 1)
    assert "repartition" in last["timings"]
    snap = api.get(api.query_path("counts"))
    assert (snap["state"], snap["parallelism"], snap["requirements"]) == (
        "Executing", 1, _bounds(1, 1))
    assert snap["id"] == query.id  # the same query, from the same checkpoint
    assert cli.main(["--url", url, "history", "counts"]) == 0
    history = capsys.readouterr().out
    assert "REQUIREMENTS_CHANGED" in history and "2 -> 1" in history
    before = api.get(api.query_path("counts", "rescales"))
    rescaled = next(r for r in before["rescales"] if r["trigger"] == "REQUIREMENTS_CHANGED")

    # -- the driver goes away; a new one (with a token) finds the persisted bounds --------
    query.stop()
    spark.stop()
    # The history was saved beside the checkpoint (the last write at shutdown at the latest).
    saved = json.loads(history_file.read_text())
    assert saved["version"] == 1 and saved["counters"] == before["counters"]
    assert rescaled["id"] in [r["id"] for r in saved["records"]]
    with pytest.raises(ConnectionProblem):
        api.get("/queries")  # that server is gone with its driver
    spark = cluster_spark_factory(cluster, **{"spark.sql.shuffle.partitions": "2"})
    with caplog.at_level(logging.INFO, "spark_adaptive"):
        rt = spark_adaptive.enable(spark, **FAST, **{"rest.token": TOKEN})
        assert rt.rest is not None
        url = rt.rest.url
        query = _start_counts(spark, tmp_path / "out", checkpoint)
    assert "requirements [1, 2]" not in caplog.text
    assert f"query counts: requirements [1, 1] restored from {checkpoint}" in caplog.text
    assert f"query counts: rescale history restored from {history_file}" in caplog.text
    assert _request(url, "GET", "/queries")[0] == 401
    assert _request(url, "GET", "/queries", token="wrong")[0] == 401
    assert _request(url, "PUT", req_path, json.dumps(_bounds(1, 2)).encode())[0] == 401
    authed = RestClient(url, TOKEN)
    assert authed.get(authed.query_path("counts", "resource-requirements")) == _bounds(1, 1)
    snap = wait_until(what="counts to run again", check=lambda: next(
        (q for q in authed.get("/queries") if q["state"] == "Executing"), None))
    assert (snap["id"], snap["parallelism"], snap["requirements"]) == (
        query.id, 1, _bounds(1, 1))
    assert json.loads(persisted_file.read_text())["parallelism"]["upperBound"] == 1
    # The history goes on: the first driver's rescale as it was shown, its counters carried
    # over, the new run's initial schedule after them with the next id.
    after = authed.get(authed.query_path("counts", "rescales"))
    assert rescaled in after["rescales"]
    assert after["counters"] == before["counters"]
    assert after["counters"]["restarts"] >= 1 and after["counters"]["rescales"] >= 1
    ids = [r["id"] for r in after["rescales"]]
    assert ids == sorted(set(ids)) and ids[-1] > rescaled["id"]
    assert after["rescales"][-1]["trigger"] == "INITIAL_SCHEDULE"
    assert len(after["rescales"]) == len(before["rescales"]) + 1
    query.stop()
    # A finished query's bounds cannot change: 409, and nothing is persisted.
    status, answer = _request(url, "PUT", req_path, json.dumps(_bounds(1, 2)).encode(), TOKEN)
    assert status == 409 and "finished" in answer["errors"][0], answer
    assert json.loads(persisted_file.read_text())["parallelism"]["upperBound"] == 1
