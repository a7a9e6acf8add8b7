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
with a fixed sleep. Every process the cluster starts runs in its own process
group, so closing the cluster ends workers *and* their executors; closing is
registered with :mod:`atexit` too, so a failing test leaves nothing behind.

The cluster survives the Python process that started it when started from the
command line (``python -m spark_adaptive.testing.cluster up``): its state is
written to ``<work_dir>/cluster.json`` and :meth:`LocalCluster.attach` picks it
up again.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from spark_adaptive.errors import ClusterError

log = logging.getLogger(__name__)

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


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


class LocalCluster:
    """A standalone master and workers on 127.0.0.1. Use as a context manager."""

    def __init__(
        self,
        workers: int = 1,
        cores_per_worker: int = 1,
        memory_per_worker: str = "1g",
        work_dir: str | os.PathLike[str] | None = None,
        daemon_memory: str = "384m",
        startup_timeout: float = 120.0,
    ) -> None:
        self.initial_workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.daemon_memory = daemon_memory
        self.startup_timeout = startup_timeout
        self._owned_tmp = work_dir is None
        wd = Path(work_dir or tempfile.mkdtemp(prefix="spark-adaptive-cluster-"))
        wd.mkdir(parents=True, exist_ok=True)
        self._state = _State(str(wd), free_port(), free_port())
        self._spark_home = spark_home()
        self._closed = False

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
        self._state.master_pid = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(self._state.master_port),
             "--webui-port", str(self._state.master_webui_port)],
        )
        atexit.register(self.close)
        self._wait(lambda: self.status() is not None, "the master to answer")
        for _ in range(self.initial_workers):
            self.add_worker(wait=False)
        self.wait_for_workers(self.initial_workers)
        self._save()
        log.info("local cluster up: %s with %d worker(s), work dir %s",
                 self.master_url, self.initial_workers, self.work_dir)
        return self

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End every process this cluster started: workers, their executors, the master."""
        if self._closed:
            return
        self._closed = True
        for w in self._state.workers:
            _kill_group(w.pid, signal.SIGKILL)
        if self._state.master_pid:
            _kill_group(self._state.master_pid, signal.SIGKILL)
        for w in self._state.workers:
            w.alive = False
        with contextlib.suppress(OSError):
            (self.work_dir / "cluster.json").unlink()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)

    def detach(self) -> None:
        """Leave the processes running when this Python process exits (the command line)."""
        self._save()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)

    @classmethod
    def attach(cls, work_dir: str | os.PathLike[str]) -> LocalCluster:
        """Reconnect to a cluster started by another process (the command line)."""
        path = Path(work_dir) / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no local cluster recorded in {work_dir} (start one with 'up')")
        raw = json.loads(path.read_text())
        self = cls.__new__(cls)
        self._state = _State(
            raw["work_dir"], raw["master_port"], raw["master_webui_port"], raw["master_pid"],
            [Worker(**w) for w in raw["workers"]], raw["next_worker"],
        )
        self._spark_home = spark_home()
        self._closed = False
        self._owned_tmp = False
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
        port, webui = free_port(), free_port()
        wdir = self.work_dir / name
        wdir.mkdir(parents=True, exist_ok=True)
        cores = cores or self.cores_per_worker
        memory = memory or self.memory_per_worker
        pid = self._spawn(
            name,
            "org.apache.spark.deploy.worker.Worker",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui),
             "--cores", str(cores), "--memory", memory, "--work-dir", str(wdir),
             self.master_url],
        )
        worker = Worker(name, port, webui, cores, memory, pid, str(wdir))
        self._state.workers.append(worker)
        self._save()
        if wait:
            self._wait(lambda: self._worker_alive_at_master(worker), f"{name} to register")
        log.info("%s started (%d cores, %s, pid %d)", name, cores, memory, pid)
        return worker

    def stop_worker(self, worker: Worker | str | None = None) -> Worker:
        """SIGTERM a worker: it shuts down and takes its executors with it."""
        w = self._pick(worker)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(w.pid).send_signal(signal.SIGTERM)
        w.alive = False
        self._save()
        self._wait(lambda: not self._worker_alive_at_master(w), f"{w.name} to leave", 90)
        return w

    def kill_worker(self, worker: Worker | str | None = None) -> Worker:
        """SIGKILL a worker and its executors at once: a lost node."""
        w = self._pick(worker)
        _kill_group(w.pid, signal.SIGKILL)
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
            with urllib.request.urlopen(self.master_web_url + "/json/", timeout=2) as r:
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
    def _spawn(self, name: str, main_class: str, args: list[str]) -> int:
        logs = self.work_dir / "logs"
        logs.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.update(
            SPARK_HOME=self._spark_home,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_LOG_DIR=str(logs),
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        )
        env.pop("SPARK_CONF_DIR", None)
        out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        cmd = [str(Path(self._spark_home, "bin", "spark-class")), main_class, *args]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        return proc.pid

    def _wait(self, ready: Any, what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        delay = 0.05
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        raise ClusterError(f"timed out waiting for {what}; logs in {self.work_dir / 'logs'}")


def _arg(cmd: list[str], flag: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return cmd[cmd.index(flag) + 1]
    return None


def _kill_group(pid: int, sig: int) -> None:
    """Signal a process group started with ``start_new_session`` (worker + executors)."""
    try:
        os.killpg(os.getpgid(pid), sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
        psutil.Process(pid).wait(timeout=10)


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
    try:
        if args.cmd == "up":
            if (Path(args.dir) / "cluster.json").exists():
                raise ClusterError(f"a cluster is already recorded in {args.dir}; 'down' it first")
            c = LocalCluster(args.workers, args.cores, args.memory, work_dir=args.dir)
            c.start()
            c.detach()
            print(c.describe())
            print(f"master: {c.master_url}")
            return 0
        c = LocalCluster.attach(args.dir)
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
