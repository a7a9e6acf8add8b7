"""LocalCluster's processes, on a fake spark-class (no JVM): how they start, fail, end.

See :mod:`fake_spark` for what the fake daemons do.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fake_spark import kill_left, make_spark_home, process_ended, wait_ended

from spark_adaptive.errors import ClusterError
from spark_adaptive.testing import cluster as cluster_module
from spark_adaptive.testing.cluster import LocalCluster, main

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="a parent-death signal is Linux's")


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = make_spark_home(tmp_path / "spark")
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.delenv("FAKE_MODE", raising=False)
    monkeypatch.delenv("SPARK_DAEMON_JAVA_OPTS", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a cluster's own dir goes
    return home


def _pids(c: LocalCluster) -> list[int]:
    return [c._state.master_pid, *(w.pid for w in c._state.workers)]


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spark_adaptive.testing.cluster", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=60)


# -- start-up failures --------------------------------------------------------------------
def test_a_daemon_that_dies_fails_the_start_at_once_with_its_exit_code_and_log(
        fake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "die")
    c = LocalCluster(startup_timeout=20, work_dir=tmp_path / "c")
    began = time.monotonic()
    with pytest.raises(ClusterError) as failed:
        c.start()
    assert time.monotonic() - began < 10
    message = str(failed.value)
    assert "master exited with code 1" in message
    assert "java: not found" in message
    assert str(tmp_path / "c" / "logs" / "master.log") in message


def test_a_start_that_fails_ends_what_it_started(
        fake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "noworker")
    c = LocalCluster(startup_timeout=0.8, work_dir=tmp_path / "c")
    try:
        with pytest.raises(ClusterError, match="timed out waiting for 1 live worker"), c:
            pass
        assert wait_ended(_pids(c), timeout=5) == []
    finally:
        kill_left(_pids(c))


def test_closing_reaps_every_daemon_so_none_warns_that_it_is_still_running(
        fake_home: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with LocalCluster(workers=2, startup_timeout=30, work_dir=tmp_path / "c") as c:
            c.add_worker()
            c.kill_worker()
            c.stop_worker()
        del c
        gc.collect()
    assert [str(w.message) for w in caught if "still running" in str(w.message)] == []


# -- the work dir --------------------------------------------------------------------------
def test_a_cluster_without_a_work_dir_removes_its_own_when_closed(fake_home: Path) -> None:
    with LocalCluster(startup_timeout=30) as c:
        own = c.work_dir
        assert (own / "logs" / "master.log").exists()
    assert not own.exists()


def test_a_cluster_that_did_not_start_keeps_its_own_work_dir_and_names_it(
        fake_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "die")
    c = LocalCluster(startup_timeout=20)
    with pytest.raises(ClusterError) as failed:
        c.start()
    assert (c.work_dir / "logs" / "master.log").exists()
    assert str(c.work_dir / "logs") in str(failed.value)
    c.close()
    assert c.work_dir.exists()


def test_the_work_dir_is_recorded_absolute(fake_home: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert LocalCluster(work_dir="rel").work_dir == tmp_path / "rel"
    up = _cli("--dir", "state", "up", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    recorded = json.loads((tmp_path / "state" / "cluster.json").read_text())
    pids = [recorded["master_pid"], *(w["pid"] for w in recorded["workers"])]
    try:
        assert recorded["work_dir"] == str(tmp_path / "state")
        assert [w["work_dir"] for w in recorded["workers"]] == [str(tmp_path / "state/worker-1")]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        c = LocalCluster.attach(tmp_path / "state")
        assert c.alive_worker_count() == 1
        assert main(["--dir", str(tmp_path / "state"), "down"]) == 0
        assert wait_ended(pids) == []
    finally:
        kill_left(pids)


# -- proxies -------------------------------------------------------------------------------
PROXIED = textwrap.dedent("""
    import http.server, sys, threading
    from spark_adaptive.testing import LocalCluster
    from spark_adaptive.testing.submit import SubmittedApp

    class Queries(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'[{"id": "q"}]'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with LocalCluster(startup_timeout=10, work_dir=sys.argv[1]) as c:
        assert c.status() is not None
        server = http.server.HTTPServer(("127.0.0.1", 0), Queries)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        app = SubmittedApp(None, c.work_dir / "app.log",
                           f"http://127.0.0.1:{server.server_address[1]}")
        assert app.queries() == [{"id": "q"}]
    print("ok")
""")


def test_the_cluster_and_an_app_s_rest_api_are_read_when_http_proxy_is_set(
        fake_home: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # where nothing listens
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update(http_proxy=nobody, HTTP_PROXY=nobody, https_proxy=nobody, HTTPS_PROXY=nobody)
    run = subprocess.run([sys.executable, "-c", PROXIED, str(tmp_path / "c")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


# -- recorded pids -------------------------------------------------------------------------
def _record(work_dir: Path, master_pid: int, worker_pid: int, started: float = 0.0) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "cluster.json").write_text(json.dumps({
        "work_dir": str(work_dir), "master_port": 1, "master_webui_port": 1,
        "master_pid": master_pid, "master_started": started, "next_worker": 2,
        "workers": [{"name": "worker-1", "port": 2, "webui_port": 3, "cores": 1,
                     "memory": "1g", "pid": worker_pid, "work_dir": str(work_dir / "w"),
                     "started": started}]}))


@pytest.fixture
def bystanders() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Unrelated programs, in process groups of their own, that may hold a recorded pid."""
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for p in made:
        p.kill()
        p.wait()


def _bystander(made: list[subprocess.Popen[bytes]], *args: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", *args],
                         start_new_session=True)
    made.append(p)
    return p


def test_down_and_kill_leave_alone_a_process_that_holds_a_recorded_pid_now(
        tmp_path: Path, bystanders: list[subprocess.Popen[bytes]]) -> None:
    master, worker = _bystander(bystanders), _bystander(bystanders)
    _record(tmp_path / "c", master.pid, worker.pid)  # a record without start times
    assert main(["--dir", str(tmp_path / "c"), "kill"]) == 0
    assert main(["--dir", str(tmp_path / "c"), "down"]) == 0
    time.sleep(0.3)
    assert master.poll() is None and worker.poll() is None


def test_a_recorded_pid_is_checked_by_start_time_too(
        tmp_path: Path, bystanders: list[subprocess.Popen[bytes]]) -> None:
    # Command lines that name the daemons' classes, of processes started at another time.
    master = _bystander(bystanders, cluster_module.MASTER_CLASS)
    worker = _bystander(bystanders, cluster_module.WORKER_CLASS)
    time.sleep(0.2)
    _record(tmp_path / "c", master.pid, worker.pid,
            started=psutil.Process(master.pid).create_time() - 60)
    assert main(["--dir", str(tmp_path / "c"), "down"]) == 0
    time.sleep(0.3)
    assert master.poll() is None and worker.poll() is None


def test_down_ends_the_daemons_it_recorded(fake_home: Path, tmp_path: Path) -> None:
    up = _cli("--dir", str(tmp_path / "c"), "up", "--workers", "2")
    assert up.returncode == 0, up.stderr
    recorded = json.loads((tmp_path / "c" / "cluster.json").read_text())
    pids = [recorded["master_pid"], *(w["pid"] for w in recorded["workers"])]
    executors = [e.pid for e in LocalCluster.attach(tmp_path / "c").executors()]
    try:
        assert len(executors) == 2
        assert main(["--dir", str(tmp_path / "c"), "kill"]) == 0
        assert wait_ended([pids[2], executors[1]]) == []
        assert main(["--dir", str(tmp_path / "c"), "down"]) == 0
        assert wait_ended(pids + executors) == []
    finally:
        kill_left(pids + executors)


# -- process groups ----------------------------------------------------------------------
SUBREAPER = textwrap.dedent("""
    import ctypes, json, os, subprocess, sys, time
    import psutil
    from spark_adaptive.testing.cluster import main
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here
    work = sys.argv[1]
    subprocess.run([sys.executable, "-m", "spark_adaptive.testing.cluster", "--dir", work,
                    "up"], check=True)
    record = json.load(open(os.path.join(work, "cluster.json")))
    worker = record["workers"][0]["pid"]
    [executor] = psutil.Process(worker).children()
    os.waitpid(worker, 0)  # the worker exits, and is reaped; its executor lives on
    main(["--dir", work, "down"])
    time.sleep(0.5)
    ended = os.waitpid(executor.pid, os.WNOHANG)[0] == executor.pid
    if not ended:
        executor.kill()
    print(json.dumps({"executor_ended": ended}))
""")


@linux_only
def test_down_ends_the_executors_of_a_worker_that_is_gone(
        fake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "workerexits")
    monkeypatch.setenv("FAKE_WORKER_EXIT_AFTER", "1.5")
    run = subprocess.run([sys.executable, "-c", SUBREAPER, str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {"executor_ended": True}


# -- the daemons end with the process that started them -------------------------------------
KILLED = textwrap.dedent("""
    import json, os, signal, sys
    from spark_adaptive.testing import LocalCluster
    c = LocalCluster(workers=1, startup_timeout=30, work_dir=sys.argv[1]).start()
    pids = [c._state.master_pid, c.workers[0].pid, *(e.pid for e in c.executors())]
    print(json.dumps(pids), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # as a CI timeout or a closed terminal does
""")


@linux_only
def test_the_daemons_end_when_the_process_that_started_them_is_killed(
        fake_home: Path, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGTERM, run.stderr
    pids = json.loads(run.stdout)
    try:
        assert len(pids) == 3
        assert wait_ended(pids) == []
    finally:
        kill_left(pids)


def test_the_command_line_cluster_outlives_the_command(fake_home: Path,
                                                        tmp_path: Path) -> None:
    up = _cli("--dir", str(tmp_path / "c"), "up")
    assert up.returncode == 0, up.stderr
    recorded = json.loads((tmp_path / "c" / "cluster.json").read_text())
    pids = [recorded["master_pid"], recorded["workers"][0]["pid"]]
    try:
        time.sleep(0.5)
        assert [p for p in pids if process_ended(p)] == []
        add = _cli("--dir", str(tmp_path / "c"), "add")
        assert add.returncode == 0, add.stderr
        pids.append(json.loads((tmp_path / "c" / "cluster.json").read_text())
                    ["workers"][1]["pid"])
        time.sleep(0.5)
        assert LocalCluster.attach(tmp_path / "c").alive_worker_count() == 2
        assert main(["--dir", str(tmp_path / "c"), "down"]) == 0
        assert wait_ended(pids) == []
    finally:
        kill_left(pids)


def test_a_cluster_started_by_a_thread_outlives_the_thread(fake_home: Path,
                                                          tmp_path: Path) -> None:
    started: list[LocalCluster] = []
    t = threading.Thread(target=lambda: started.append(
        LocalCluster(startup_timeout=30, work_dir=tmp_path / "c").start()))
    t.start()
    t.join()
    [c] = started
    try:
        time.sleep(0.5)
        assert [p for p in _pids(c) if process_ended(p)] == []
        c.add_worker()
        assert c.alive_worker_count() == 2
    finally:
        c.close()
    assert wait_ended(_pids(c)) == []


# -- the daemons' settings and ports -------------------------------------------------------
def test_the_daemons_run_without_a_rest_server_and_fail_on_a_taken_port(
        fake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-Dspark.port.maxRetries=5")
    with LocalCluster(startup_timeout=30, work_dir=tmp_path / "c"):
        pass
    for name in ("master", "worker-1"):
        first = (tmp_path / "c" / "logs" / f"{name}.log").read_text().splitlines()[0]
        assert first == ("SPARK_DAEMON_JAVA_OPTS=-Dspark.master.rest.enabled=false "
                         "-Dspark.port.maxRetries=0 -Dspark.port.maxRetries=5")


def test_a_master_whose_port_was_taken_is_started_on_others(fake_home: Path,
                                                            tmp_path: Path) -> None:
    c = LocalCluster(startup_timeout=10, work_dir=tmp_path / "c")
    taken = c._state.master_webui_port
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        with c:
            assert c.master_web_url != f"http://127.0.0.1:{taken}"
            assert c.alive_worker_count() == 1
    assert "Address already in use" in (tmp_path / "c" / "logs" / "master.log").read_text()


def test_a_worker_whose_port_was_taken_is_started_on_others(
        fake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s, LocalCluster(startup_timeout=10, work_dir=tmp_path / "c") as c:
        s.bind(("127.0.0.1", 0))
        taken = s.getsockname()[1]
        ports = iter([cluster_module.free_port(), taken])
        real = cluster_module.free_port
        monkeypatch.setattr(cluster_module, "free_port", lambda: next(ports, None) or real())
        w = c.add_worker()
        assert w.webui_port != taken
        assert c.alive_worker_count() == 2


def test_a_daemon_that_keeps_finding_its_port_taken_fails_the_start(
        fake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        taken = s.getsockname()[1]
        monkeypatch.setattr(cluster_module, "free_port", lambda: taken)
        c = LocalCluster(startup_timeout=10, work_dir=tmp_path / "c")
        with pytest.raises(ClusterError, match="master exited with code 1"):
            c.start()
    shutil.rmtree(tmp_path / "c")


def test_an_attached_cluster_knows_its_daemons_by_pid_and_start_time(fake_home: Path,
                                                          tmp_path: Path) -> None:
    with LocalCluster(startup_timeout=30, work_dir=tmp_path / "c") as c:
        c.detach()
        other = LocalCluster.attach(tmp_path / "c")
        assert [e.executor_id for e in other.executors()] == ["0"]
        assert other.workers[0].started == c.workers[0].started > 0
        assert os.getpgid(c.workers[0].pid) == c.workers[0].pid
