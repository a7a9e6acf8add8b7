"""A real Spark standalone cluster on 127.0.0.1, started from the installed pyspark.

pip's pyspark ships no ``start-master.sh``, but ``bin/spark-class`` runs the
standalone ``Master`` and ``Worker`` classes. :class:`LocalCluster` starts one
master and N workers on free ports, each worker with its own cores and memory,
and drives them the way a real cluster misbehaves:

* :meth:`LocalCluster.add_worker` - a node joins;
* :meth:`LocalCluster.stop_worker` - SIGTERM, a node is decommissioned;
* :meth:`LocalCluster.kill_worker` - SIGKILL of the worker and its executors, a
  node is lost;
* :meth:`LocalCluster.kill_executor`, :meth:`LocalCluster.freeze_executor` /
  :meth:`LocalCluster.thaw_executor` - SIGKILL, SIGSTOP/SIGCONT of one executor
  process, a crashed or hung executor.

Readiness is read from the master's JSON status (``/json/``), never guessed
with a fixed sleep, and never through a proxy of ``http_proxy``. A daemon that
exits while the cluster waits for it fails the wait at once, with its exit code
and the end of its log; one that exits because a port it was given has been
taken since is started again on other free ports.

Every process the cluster starts runs in its own process group, so closing the
cluster ends workers *and* their executors. Closing is registered with
:mod:`atexit` too, and on Linux each daemon gets a parent-death signal
(SIGTERM, ``PR_SET_PDEATHSIG``), so the daemons end with the Python process that
started them even when it is killed.

The cluster survives the Python process that started it when started from the
command line (``python -m spark_adaptive.testing.cluster up``, or
``LocalCluster(detached=True)``): its state is written to
``<work_dir>/cluster.json`` and :meth:`LocalCluster.attach` picks it up again.
Each daemon is recorded with its start time, so a pid that another process has
been given since is never signalled.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import functools
import json
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from spark_adaptive.errors import ClusterError

log = logging.getLogger(__name__)

T = TypeVar("T")

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

#: Spark settings of the master and the workers, given ahead of ``SPARK_DAEMON_JAVA_OPTS``
#: (whose own ``-D`` settings win): no REST submission server, which would take the fixed
#: port 6066 on every cluster; and a port found taken fails the daemon instead of moving
#: it silently to the next one, where nothing would look for it (the cluster starts it
#: again on other free ports).
DAEMON_CONF = {"spark.master.rest.enabled": "false", "spark.port.maxRetries": "0"}

#: What a daemon's log says when a port it was given is taken.
_PORT_TAKEN = re.compile(r"Address already in use|could not bind|Failed to bind")
#: Starts of one daemon whose port was taken, the first included.
_PORT_ATTEMPTS = 3
#: How far two readings of one process's start time may differ: the boot time it is
#: computed from moves when the wall clock is stepped.
_START_TIME_SLACK = 1.0
_PR_SET_PDEATHSIG = 1

_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def loopback_urlopen(request: str | urllib.request.Request, timeout: float) -> Any:
    """``urllib.request.urlopen`` for servers on 127.0.0.1 (the master's status, an app's
    REST API): never through a proxy set in ``http_proxy`` or ``https_proxy``, which would
    not reach them."""
    return _LOOPBACK.open(request, timeout=timeout)


def spark_home() -> str:
    """SPARK_HOME of the installed pyspark (its package directory)."""
    env = os.environ.get("SPARK_HOME")
    if env and Path(env, "bin", "spark-class").exists():
        return env
    import pyspark

    return str(Path(pyspark.__file__).parent)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    name: str
    port: int
    webui_port: int
    cores: int
    memory: str
    pid: int
    work_dir: str
    alive: bool = True
    started: float = 0.0
    """The process's start time (``psutil.Process.create_time``), which tells the worker
    from a later process given the same pid."""

    @property
    def worker_id_suffix(self) -> str:
        return f"-127.0.0.1-{self.port}"


@dataclass(frozen=True)
class ExecutorProcess:
    executor_id: str
    app_id: str
    pid: int
    worker: str


@dataclass
class _State:
    work_dir: str
    master_port: int
    master_webui_port: int
    master_pid: int = 0
    workers: list[Worker] = field(default_factory=list)
    next_worker: int = 1
    master_started: float = 0.0


@dataclass
class _Daemon:
    """A daemon this Python process started, and where its output begins in its log."""

    process: subprocess.Popen[bytes]
    log: Path
    offset: int

    def output(self) -> str:
        with contextlib.suppress(OSError), open(self.log, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")
        return ""


class LocalCluster:
    """A standalone master and workers on 127.0.0.1. Use as a context manager.

    Without ``work_dir``, the cluster works in a temporary directory that :meth:`close`
    removes (unless the start failed: it is kept for its logs, and the error names it).
    With ``detached``, the processes outlive this Python process (the command line's
    ``up``); otherwise they end with it, also when it is killed (on Linux).
    """

    def __init__(
        self,
        workers: int = 1,
        cores_per_worker: int = 1,
        memory_per_worker: str = "1g",
        work_dir: str | os.PathLike[str] | None = None,
        daemon_memory: str = "384m",
        startup_timeout: float = 120.0,
        detached: bool = False,
    ) -> None:
        self.initial_workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.daemon_memory = daemon_memory
        self.startup_timeout = startup_timeout
        self._owned_tmp = work_dir is None
        wd = (Path(work_dir).resolve() if work_dir is not None
              else Path(tempfile.mkdtemp(prefix="spark-adaptive-cluster-")))
        wd.mkdir(parents=True, exist_ok=True)
        self._state = _State(str(wd), free_port(), free_port())
        self._spark_home = spark_home()
        self._detached = detached
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._closed = False
        self._start_failed = False
        self._procs: dict[str, _Daemon] = {}
        self._attempts: dict[str, int] = {}

    # -- lifecycle ------------------------------------------------------------
    @property
    def work_dir(self) -> Path:
        return Path(self._state.work_dir)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self._state.master_port}"

    @property
    def master_web_url(self) -> str:
        return f"http://127.0.0.1:{self._state.master_webui_port}"

    def start(self) -> LocalCluster:
        """Start the master and the first workers; return once the master lists them.
        A start that fails ends what it started before it raises."""
        atexit.register(self.close)
        try:
            self._spawn_master()
            self._wait(lambda: self.status() is not None, "the master to answer")
            for _ in range(self.initial_workers):
                self.add_worker(wait=False)
            names = [w.name for w in self._state.workers]
            self._wait(lambda: self.alive_worker_count() == self.initial_workers,
                       f"{self.initial_workers} live worker(s)", watch=("master", *names))
        except BaseException:
            self._start_failed = True
            self.close()
            raise
        self._save()
        log.info("local cluster up: %s with %d worker(s), work dir %s",
                 self.master_url, self.initial_workers, self.work_dir)
        return self

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End every process this cluster started: workers, their executors, the master.
        A temporary work dir the cluster made itself goes too, unless the start failed."""
        if self._closed:
            return
        self._closed = True
        for w in self._state.workers:
            self._end(w.name, w.pid, w.started, WORKER_CLASS)
            w.alive = False
        if self._state.master_pid:
            self._end("master", self._state.master_pid, self._state.master_started,
                      MASTER_CLASS)
        with contextlib.suppress(OSError):
            (self.work_dir / "cluster.json").unlink()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._owned_tmp:
            if self._start_failed:
                log.warning("the local cluster did not start; its logs are kept in %s",
                            self.work_dir / "logs")
            else:
                _remove_tree(self.work_dir)

    # -- reuse ------------------------------------------------------------------
    def active_apps(self) -> list[str]:
        """Ids of the applications the master lists as running."""
        return [a.get("id", "") for a in (self.status() or {}).get("activeapps", [])]

    def settle(self, timeout: float = 15.0) -> bool:
        """Make the cluster fit for another use once its apps have ended: wait (up to
        ``timeout``) for the master to list no running app and for the executors of the apps
        that ended to exit; a worker with an executor process left after that (a frozen one,
        say) is ended, and so is one added with other cores or memory than the cluster's.
        False when an app still runs: the cluster is not fit."""
        if self._closed:
            return False
        deadline = time.monotonic() + timeout
        while self.active_apps():
            if time.monotonic() > deadline or self.status() is None:
                return False
            time.sleep(0.1)
        while self.executors() and time.monotonic() < deadline:
            time.sleep(0.1)
        busy = {e.worker for e in self.executors()}
        for w in list(self.workers):
            if w.name in busy or (w.cores, w.memory) != (self.cores_per_worker,
                                                         self.memory_per_worker):
                self.kill_worker(w)
        return True

    def resize(self, workers: int) -> LocalCluster:
        """Run exactly ``workers`` live workers, as a fresh :meth:`start` of that many would:
        the newest beyond them are ended, missing ones start; return once the master lists
        exactly these as ALIVE."""
        for w in self.workers[workers:]:
            self.kill_worker(w)
        for _ in range(workers - len(self.workers)):
            self.add_worker(wait=False)
        names = tuple(w.name for w in self.workers)
        self._wait(lambda: len(self._alive_at_master()) == workers
                   and len(self.registered_workers()) == workers,
                   f"exactly {workers} live worker(s)", watch=("master", *names))
        self.initial_workers = workers
        return self

    def detach(self) -> None:
        """Leave the processes running when this Python process exits (the command line)."""
        self._save()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)

    @classmethod
    def attach(cls, work_dir: str | os.PathLike[str]) -> LocalCluster:
        """Reconnect to a cluster started by another process (the command line)."""
        path = Path(work_dir).resolve() / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no local cluster recorded in {work_dir} (start one with 'up')")
        raw = json.loads(path.read_text())
        self = cls.__new__(cls)
        self._state = _State(
            str(path.parent), raw["master_port"], raw["master_webui_port"], raw["master_pid"],
            [Worker(**w) for w in raw["workers"]], raw["next_worker"],
            raw.get("master_started", 0.0),
        )
        self._spark_home = spark_home()
        self._owned_tmp = False
        self._detached = True
        self._init_runtime()
        self.cores_per_worker = raw.get("cores_per_worker", 1)
        self.memory_per_worker = raw.get("memory_per_worker", "1g")
        self.daemon_memory = raw.get("daemon_memory", "384m")
        self.startup_timeout = 120.0
        self.initial_workers = len(self._state.workers)
        return self

    def _save(self) -> None:
        data: dict[str, Any] = asdict(self._state)
        data.update(cores_per_worker=self.cores_per_worker,
                    memory_per_worker=self.memory_per_worker, daemon_memory=self.daemon_memory)
        (self.work_dir / "cluster.json").write_text(json.dumps(data, indent=2))

    # -- workers ----------------------------------------------------------------
    @property
    def workers(self) -> list[Worker]:
        return [w for w in self._state.workers if w.alive]

    def add_worker(self, cores: int | None = None, memory: str | None = None,
                   wait: bool = True) -> Worker:
        """Start a worker (a node joins); with ``wait``, return once the master lists it."""
        n = self._state.next_worker
        self._state.next_worker += 1
        name = f"worker-{n}"
        wdir = self.work_dir / name
        wdir.mkdir(parents=True, exist_ok=True)
        worker = Worker(name, free_port(), free_port(), cores or self.cores_per_worker,
                        memory or self.memory_per_worker, 0, str(wdir))
        self._spawn_worker(worker)
        self._state.workers.append(worker)
        self._save()
        if wait:
            self._wait(lambda: self._worker_alive_at_master(worker), f"{name} to register",
                       watch=("master", name))
        log.info("%s started (%d cores, %s, pid %d)", name, worker.cores, worker.memory,
                 worker.pid)
        return worker

    def stop_worker(self, worker: Worker | str | None = None) -> Worker:
        """SIGTERM a worker: it shuts down and takes its executors with it."""
        w = self._pick(worker)
        if self._identity(w.name, w.pid, w.started, WORKER_CLASS):
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGTERM)
        w.alive = False
        self._save()
        self._wait(lambda: not self._worker_alive_at_master(w), f"{w.name} to leave", 90)
        return w

    def kill_worker(self, worker: Worker | str | None = None) -> Worker:
        """SIGKILL a worker and its executors at once: a lost node."""
        w = self._pick(worker)
        self._end(w.name, w.pid, w.started, WORKER_CLASS)
        w.alive = False
        self._save()
        return w

    def _pick(self, worker: Worker | str | None) -> Worker:
        alive = self.workers
        if not alive:
            raise ClusterError("no live worker to act on")
        if worker is None:
            return alive[-1]
        name = worker if isinstance(worker, str) else worker.name
        for w in alive:
            if w.name == name:
                return w
        raise ClusterError(f"no live worker named {name!r}; live: {[w.name for w in alive]}")

    def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Wait until the master lists exactly ``n`` live workers."""
        self._wait(lambda: self.alive_worker_count() == n, f"{n} live worker(s)", timeout)

    def alive_worker_count(self) -> int:
        st = self.status() or {}
        return sum(1 for w in st.get("workers", []) if w.get("state") == "ALIVE")

    def registered_workers(self) -> list[Worker]:
        """Live workers the master lists as ALIVE (a worker just started is not yet)."""
        listed = self._alive_at_master()
        return [w for w in self.workers if any(i.endswith(w.worker_id_suffix) for i in listed)]

    def _worker_alive_at_master(self, w: Worker) -> bool:
        return any(i.endswith(w.worker_id_suffix) for i in self._alive_at_master())

    def _alive_at_master(self) -> list[str]:
        """Ids of the workers the master lists as ALIVE."""
        return [x.get("id", "") for x in (self.status() or {}).get("workers", [])
                if x.get("state") == "ALIVE"]

    # -- executors ---------------------------------------------------------------
    def executors(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """Executor processes running under this cluster's workers. A process the executor
        JVM is forking (to start its Python workers) carries the executor's command line for
        a moment; it is the executor's child, and is not counted."""
        out: list[ExecutorProcess] = []
        for w in self.workers:
            if not self._identity(w.name, w.pid, w.started, WORKER_CLASS):
                continue
            try:
                children = psutil.Process(w.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            found: dict[int, tuple[ExecutorProcess, int]] = {}
            for p in children:
                try:
                    cmd = p.cmdline()
                    parent = p.ppid()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if EXECUTOR_CLASS not in cmd:
                    continue
                eid = _arg(cmd, "--executor-id")
                aid = _arg(cmd, "--app-id")
                if eid is None or (app_id is not None and aid != app_id):
                    continue
                found[p.pid] = (ExecutorProcess(eid, aid or "", p.pid, w.name), parent)
            out.extend(e for e, parent in found.values() if parent not in found)
        return out

    def executor(self, executor_id: str, app_id: str | None = None) -> ExecutorProcess:
        for e in self.executors(app_id):
            if e.executor_id == str(executor_id):
                return e
        raise ClusterError(f"no executor process with id {executor_id!r}"
                           + (f" in app {app_id}" if app_id else ""))

    def kill_executor(self, executor_id: str, app_id: str | None = None) -> ExecutorProcess:
        """SIGKILL one executor process (its worker stays)."""
        e = self.executor(executor_id, app_id)
        os.kill(e.pid, signal.SIGKILL)
        return e

    def freeze_executor(self, executor_id: str, app_id: str | None = None) -> ExecutorProcess:
        """SIGSTOP one executor: it stays connected but silent, like a hung node."""
        e = self.executor(executor_id, app_id)
        os.kill(e.pid, signal.SIGSTOP)
        return e

    def thaw_executor(self, executor_id: str, app_id: str | None = None) -> ExecutorProcess:
        e = self.executor(executor_id, app_id)
        os.kill(e.pid, signal.SIGCONT)
        return e

    # -- status -------------------------------------------------------------------
    def status(self) -> dict[str, Any] | None:
        """The master's JSON status, or None while it does not answer."""
        try:
            with loopback_urlopen(self.master_web_url + "/json/", timeout=2) as r:
                return dict(json.load(r))
        except (OSError, ValueError):
            return None

    def describe(self) -> str:
        st = self.status() or {}
        lines = [f"master {self.master_url}  ui {self.master_web_url}  work dir {self.work_dir}"]
        for w in st.get("workers", []):
            lines.append(f"  {w['id']:<48} {w['state']:<6} cores {w['coresused']}/{w['cores']}")
        for a in st.get("activeapps", []):
            lines.append(f"  app {a['id']} {a['name']!r} cores {a.get('cores')}")
        return "\n".join(lines)

    # -- internals -------------------------------------------------------------
    def _spawn(self, name: str, main_class: str, args: list[str]) -> _Daemon:
        logs = self.work_dir / "logs"
        logs.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.update(
            SPARK_HOME=self._spark_home,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=" ".join(
                [*(f"-D{k}={v}" for k, v in DAEMON_CONF.items()),
                 env.get("SPARK_DAEMON_JAVA_OPTS", "")]).strip(),
            SPARK_LOG_DIR=str(logs),
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        )
        env.pop("SPARK_CONF_DIR", None)
        path = logs / f"{name}.log"
        cmd = [str(Path(self._spark_home, "bin", "spark-class")), main_class, *args]
        with open(path, "ab") as out:
            offset = out.tell()  # before the child shares the file, and moves it
            daemon = _Daemon(
                popen(cmd, die_with_parent=not self._detached, stdout=out,
                      stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
                      start_new_session=True),
                path, offset)
        self._procs[name] = daemon
        return daemon

    def _spawn_master(self) -> None:
        s = self._state
        d = self._spawn("master", MASTER_CLASS,
                        ["--host", "127.0.0.1", "--port", str(s.master_port),
                         "--webui-port", str(s.master_webui_port)])
        s.master_pid, s.master_started = d.process.pid, _start_time(d.process.pid)

    def _spawn_worker(self, w: Worker) -> None:
        d = self._spawn(w.name, WORKER_CLASS,
                        ["--host", "127.0.0.1", "--port", str(w.port),
                         "--webui-port", str(w.webui_port), "--cores", str(w.cores),
                         "--memory", w.memory, "--work-dir", w.work_dir, self.master_url])
        w.pid, w.started = d.process.pid, _start_time(d.process.pid)

    def _identity(self, name: str, pid: int, started: float, main_class: str) -> bool | None:
        """Whether ``pid`` is still the daemon ``name`` (see :func:`_is_ours`). A daemon this
        process started and has not reaped keeps its pid whatever it has done since."""
        d = self._procs.get(name)
        if d is not None and d.process.pid == pid and d.process.returncode is None:
            return True
        return _is_ours(pid, started, main_class)

    def _end(self, name: str, pid: int, started: float, main_class: str) -> None:
        """SIGKILL a daemon's process group, and reap the daemon."""
        ours = self._identity(name, pid, started, main_class)
        if ours is False:
            log.info("%s is already gone (pid %d belongs to another process now)", name, pid)
            return
        # Also when the daemon itself is gone: a process group keeps its id while any of
        # its processes lives, so executors that outlived their worker are ended with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        d = self._procs.get(name)
        if d is not None and d.process.pid == pid:
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.process.wait(10)
        elif ours:
            _wait_ended(pid, 10)

    def _wait(self, ready: Callable[[], bool], what: str, timeout: float | None = None,
              watch: Iterable[str] = ("master",)) -> None:
        """Poll ``ready`` until it holds. A daemon named in ``watch`` that exits meanwhile
        fails the wait at once, unless a port of its was taken and it could be started
        again on others."""
        names = tuple(watch)
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        delay = 0.05
        while not ready():
            for name in names:
                self._check_running(name, what)
            if time.monotonic() >= deadline:
                raise ClusterError(f"timed out waiting for {what}; "
                                   f"logs in {self.work_dir / 'logs'}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _check_running(self, name: str, what: str) -> None:
        d = self._procs.get(name)
        if d is None or d.process.poll() is None:
            return
        output = d.output()
        if _PORT_TAKEN.search(output) and self._start_again(name):
            return
        tail = "\n".join(output.splitlines()[-20:])
        raise ClusterError(f"{name} exited with code {d.process.returncode} while waiting for "
                           f"{what}; the end of its log, {d.log}:\n{tail}")

    def _start_again(self, name: str) -> bool:
        """Start a daemon that found a port of its taken again, on other free ports: a
        worker, or the master while no worker has been given its address."""
        attempt = self._attempts.get(name, 1)
        if attempt >= _PORT_ATTEMPTS:
            return False
        if name == "master":
            if self._state.workers:
                return False
            self._state.master_port, self._state.master_webui_port = free_port(), free_port()
            log.info("master: a port was taken; starting it again on %d (ui %d)",
                     self._state.master_port, self._state.master_webui_port)
            self._spawn_master()
        else:
            w = next((w for w in self.workers if w.name == name), None)
            if w is None:
                return False
            w.port, w.webui_port = free_port(), free_port()
            log.info("%s: a port was taken; starting it again on %d (ui %d)",
                     name, w.port, w.webui_port)
            self._spawn_worker(w)
            self._save()
        self._attempts[name] = attempt + 1
        return True


def _arg(cmd: list[str], flag: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return cmd[cmd.index(flag) + 1]
    return None


def _start_time(pid: int) -> float:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


def _is_ours(pid: int, started: float, main_class: str) -> bool | None:
    """Whether ``pid`` is still the daemon recorded with it: ``None`` when no process has
    the pid, ``False`` when another process has it now. The daemon's command line names
    its main class (``spark-class`` and the JVM it becomes both carry it), and its start
    time must be ``started`` (0 in a record from before start times were kept)."""
    try:
        p = psutil.Process(pid)
        if started and abs(p.create_time() - started) > _START_TIME_SLACK:
            return False
        try:
            return main_class in p.cmdline()
        except psutil.ZombieProcess:
            return bool(started)  # ended, not reaped yet: only its start time tells
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return False


def _wait_ended(pid: int, timeout: float) -> None:
    """Wait until ``pid`` has ended: gone, or a zombie (which its parent, when this process
    is not it, reaps in its own time)."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(psutil.NoSuchProcess):
        p = psutil.Process(pid)
        while p.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            with contextlib.suppress(psutil.TimeoutExpired, ChildProcessError):
                p.wait(timeout=0.1)


def _remove_tree(path: Path) -> None:
    """Remove ``path``; a JVM that was killed may still be writing its last files."""
    for _ in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.2)


# -- starting processes that end with this one -------------------------------------------
@functools.cache
def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _parent_death_signal(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent SIGTERM when its parent ends (Linux)."""
    prctl = _prctl()
    if prctl is None:
        return None

    # Built before the fork: the child, forked from a process with threads, allocates as
    # little as it can before exec.
    args = (_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), ctypes.c_ulong(0),
            ctypes.c_ulong(0), ctypes.c_ulong(0))

    def preexec() -> None:
        prctl(*args)
        if os.getppid() != parent:  # the parent ended before the signal was asked for
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _Spawner:
    """A thread that lives as long as the process, to start children for other threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def call(self, job: Callable[[], T]) -> T:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="spark-adaptive-spawner")
                self._thread.start()
        self._jobs.put((job, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.set_result(job())
            except BaseException as e:  # raised again in the caller's thread
                done.set_exception(e)


_SPAWNER = _Spawner()


def popen(cmd: list[str], *, die_with_parent: bool = True,
          **kw: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **kw)``; with ``die_with_parent``, on Linux, the child is
    sent SIGTERM when this process ends, however it ends (``PR_SET_PDEATHSIG``). The
    kernel sends it when the *thread* that started the child ends, so a thread other than
    the main one has the child started by a thread kept for that, which lives as long as
    the process."""
    preexec = _parent_death_signal(os.getpid()) if die_with_parent else None
    if preexec is None:
        return subprocess.Popen(cmd, **kw)
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(cmd, preexec_fn=preexec, **kw)
    return _SPAWNER.call(lambda: subprocess.Popen(cmd, preexec_fn=preexec, **kw))


# -- command line ---------------------------------------------------------------------
DEFAULT_DIR = ".spark-adaptive/cluster"


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_adaptive.testing.cluster up|add|stop|kill|status|down``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m spark_adaptive.testing.cluster",
                                 description="A local Spark standalone cluster on 127.0.0.1.")
    ap.add_argument("--dir", default=os.environ.get("SPARK_ADAPTIVE_CLUSTER_DIR", DEFAULT_DIR),
                    help="where the cluster keeps its state and logs (default: %(default)s)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a master and workers")
    up.add_argument("--workers", type=int, default=1)
    up.add_argument("--cores", type=int, default=1, help="cores per worker")
    up.add_argument("--memory", default="1g", help="memory per worker")
    add = sub.add_parser("add", help="start one more worker")
    add.add_argument("--cores", type=int, default=None)
    add.add_argument("--memory", default=None)
    for verb, text in (("stop", "SIGTERM a worker"),
                       ("kill", "SIGKILL a worker and its executors")):
        p = sub.add_parser(verb, help=text)
        p.add_argument("worker", nargs="?", help="worker name (default: the newest)")
    sub.add_parser("status", help="show the master's view")
    sub.add_parser("down", help="end every process of the cluster")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    work_dir = Path(args.dir).resolve()
    try:
        if args.cmd == "up":
            if (work_dir / "cluster.json").exists():
                raise ClusterError(f"a cluster is already recorded in {work_dir}; 'down' it first")
            c = LocalCluster(args.workers, args.cores, args.memory, work_dir=work_dir,
                             detached=True)
            c.start()
            c.detach()
            print(c.describe())
            print(f"master: {c.master_url}")
            return 0
        c = LocalCluster.attach(work_dir)
        if args.cmd == "add":
            w = c.add_worker(args.cores, args.memory)
            print(f"{w.name} joined")
        elif args.cmd == "stop":
            print(f"{c.stop_worker(args.worker).name} stopped (SIGTERM)")
        elif args.cmd == "kill":
            print(f"{c.kill_worker(args.worker).name} killed (SIGKILL)")
        elif args.cmd == "status":
            print(c.describe())
        elif args.cmd == "down":
            c.close()
            print("cluster down")
        if args.cmd != "down":
            c.detach()
        return 0
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
