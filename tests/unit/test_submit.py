"""submit(): the pyspark install's spark-submit, and a driver that a failing test ends."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import types
from pathlib import Path
from typing import Any

import pytest
from fake_spark import make_spark_home, wait_ended

from spark_adaptive.testing.submit import SubmittedApp, submit


class _Started(Exception):
    """Raised by the stand-in for Popen, with the command it was given."""


def test_spark_submit_is_the_one_of_the_spark_home_the_cluster_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_spark_home(tmp_path / "spark")
    monkeypatch.setenv("SPARK_HOME", str(home))
    started: list[tuple[list[str], dict[str, Any]]] = []

    def popen(cmd: list[str], **kw: Any) -> None:
        started.append((cmd, kw))
        raise _Started

    monkeypatch.setattr(subprocess, "Popen", popen)
    cluster = types.SimpleNamespace(master_url="spark://127.0.0.1:1", work_dir=tmp_path)
    with pytest.raises(_Started):
        submit(cluster, "app.py", "--flag", conf={"spark.x": "1"})  # type: ignore[arg-type]
    [(cmd, kw)] = started
    assert cmd[0] == str(home / "bin" / "spark-submit")
    assert cmd[1:3] == ["--master", "spark://127.0.0.1:1"]
    assert cmd[-2:] == ["app.py", "--flag"]
    assert "spark.x=1" in cmd
    assert kw["env"]["SPARK_HOME"] == str(home)


def test_a_submitted_app_runs_the_fake_spark_submit(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_spark_home(tmp_path / "spark")
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("FAKE_SUBMIT_ARGS", str(tmp_path / "args.json"))
    cluster = types.SimpleNamespace(master_url="spark://127.0.0.1:1", work_dir=tmp_path)
    with submit(cluster, "app.py") as app:  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while not (tmp_path / "args.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        ran = json.loads((tmp_path / "args.json").read_text())
        assert ran["argv0"] == str(home / "bin" / "spark-submit")
        assert app.running()
    assert not app.running()


def test_leaving_the_with_block_kills_the_driver_also_when_the_test_fails(
        tmp_path: Path) -> None:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        with pytest.raises(AssertionError), SubmittedApp(process, tmp_path / "app.log",
                                                         "http://127.0.0.1:1") as app:
            assert app.running()
            raise AssertionError("the test failed")
        assert process.returncode is not None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert wait_ended([process.pid]) == []


def test_a_rest_call_to_an_ended_app_says_so_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("starting\nERROR the query failed: Python worker failed to connect back\n")
    ended = subprocess.Popen(["true"])
    ended.wait()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the connection is refused
    app = SubmittedApp(ended, log, f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectionError) as refused:
        app.queries()
    message = str(refused.value)
    assert "the app has ended (exit 0)" in message and "/queries" in message
    assert "Python worker failed to connect back" in message
