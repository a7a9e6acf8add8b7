"""A fake ``SPARK_HOME`` for LocalCluster's tests: ``bin/spark-class`` in Python, no JVM.

Its master serves ``/json/`` on ``--webui-port``, listing the workers registered
(by a file each in ``SPARK_LOG_DIR``) as ALIVE while their process runs. A worker
listens on its ``--webui-port``, registers and starts one fake executor child (a
process whose command line is an executor's), and on SIGTERM ends it and exits. A
port that is taken fails a daemon as Spark's fail ("Address already in use").
``FAKE_MODE`` makes it misbehave:

* ``die``: the master exits at once, as without Java;
* ``noworker``: a worker never registers;
* ``workerexits``: a worker exits ``FAKE_WORKER_EXIT_AFTER`` seconds (default 2) after
  registering, and its executor lives on.

Each daemon prints its ``SPARK_DAEMON_JAVA_OPTS`` first, to its log. ``bin/spark-submit``
writes its arguments to ``$FAKE_SUBMIT_ARGS`` and sleeps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import psutil

SPARK_CLASS = r'''
import glob, http.server, json, os, signal, socket, subprocess, sys, time

import psutil

main, args = sys.argv[1], sys.argv[2:]


def arg(flag):
    return args[args.index(flag) + 1]


logdir = os.environ["SPARK_LOG_DIR"]
mode = os.environ.get("FAKE_MODE", "")
print("SPARK_DAEMON_JAVA_OPTS=" + os.environ.get("SPARK_DAEMON_JAVA_OPTS", ""), flush=True)
if main.endswith("Master"):
    if mode == "die":
        print("JAVA_HOME is not set / java: not found", flush=True)
        sys.exit(1)

    class Status(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            workers = []
            for f in glob.glob(os.path.join(logdir, "reg-*")):
                port, pid = open(f).read().split()
                try:
                    ended = psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
                except psutil.NoSuchProcess:
                    ended = True
                state = "DEAD" if ended else "ALIVE"
                workers.append({"id": f"worker-1-127.0.0.1-{port}", "state": state,
                                "cores": 1, "coresused": 0})
            body = json.dumps({"workers": workers, "activeapps": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.HTTPServer(("127.0.0.1", int(arg("--webui-port"))), Status).serve_forever()
else:
    if mode == "noworker":
        time.sleep(3600)
    port = arg("--port")
    ui = socket.socket()
    ui.bind(("127.0.0.1", int(arg("--webui-port"))))
    ui.listen()
    executor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)",
         "org.apache.spark.executor.CoarseGrainedExecutorBackend",
         "--executor-id", "0", "--app-id", "app-fake"])
    with open(os.path.join(logdir, f"reg-{port}"), "w") as f:
        f.write(f"{port} {os.getpid()}")
    if mode == "workerexits":
        time.sleep(float(os.environ.get("FAKE_WORKER_EXIT_AFTER", "2")))
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *a: (executor.kill(), sys.exit(0)))
    time.sleep(3600)
'''

SPARK_SUBMIT = r'''
import json, os, sys, time

with open(os.environ["FAKE_SUBMIT_ARGS"], "w") as f:
    json.dump({"argv0": sys.argv[0], "args": sys.argv[1:],
               "spark_home": os.environ.get("SPARK_HOME")}, f)
time.sleep(3600)
'''


def make_spark_home(root: Path) -> Path:
    """Write the fake ``bin/spark-class`` and ``bin/spark-submit`` under ``root``."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("spark-class", SPARK_CLASS), ("spark-submit", SPARK_SUBMIT)):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{text}")
        path.chmod(0o755)
    return root


def process_ended(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie that nobody reaped has ended too)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_ended(pids: list[int], timeout: float = 15.0) -> list[int]:
    """Wait until every pid has ended; the ones still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if not process_ended(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill_left(pids: list[int]) -> None:
    """SIGKILL what a failed test left running."""
    for pid in pids:
        if not process_ended(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
