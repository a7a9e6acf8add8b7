"""Run an unmodified PySpark app with ``spark-submit`` on a local cluster, and watch it.

:func:`submit` starts ``spark-submit --master <cluster> [--conf ...] app.py`` as
a child process (its output goes to a log file) and returns a
:class:`SubmittedApp`, which reads the app's spark-adaptive REST API: the
queries, their state, parallelism and rescale history. This is how an
operator sees a production app, and it needs nothing inside the app.

``spark-submit`` is the pyspark install's (``bin/spark-submit`` of
:func:`~spark_adaptive.testing.cluster.spark_home`), as the cluster's daemons are.
The driver runs in a process group of its own, which :meth:`SubmittedApp.kill`
ends; use the app as a context manager so that a failing test ends it too::

    with submit(cluster, "app.py", conf={...}) as app:
        query = app.wait_for_query()

On Linux the driver is also sent SIGTERM when the Python process that submitted
it ends, however it ends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_adaptive.errors import ClusterError
from spark_adaptive.testing.cluster import (
    LocalCluster,
    free_port,
    loopback_urlopen,
    popen,
    spark_home,
)


@dataclass
class SubmittedApp:
    """A driver started by :func:`submit`; as a context manager, it is killed on leaving."""

    process: subprocess.Popen[bytes]
    log_path: Path
    rest_url: str

    def __enter__(self) -> SubmittedApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def get(self, path: str) -> Any:
        """``GET path`` of the app's REST API, as JSON. When the driver has ended, the
        connection's error says so with the end of its log, where the reason is (still an
        :class:`OSError`, as callers that wait for the server expect)."""
        try:
            with loopback_urlopen(self.rest_url + path, timeout=5) as r:
                return json.load(r)
        except OSError as e:
            if self.running():
                raise
            raise ConnectionError(
                f"GET {self.rest_url}{path}: {e}; the app has ended (exit "
                f"{self.process.returncode}); the end of {self.log_path}:\n{self.tail()}"
            ) from e

    def queries(self) -> list[dict[str, Any]]:
        result = self.get("/queries")
        assert isinstance(result, list)
        return result

    def rescales(self, query: str) -> dict[str, Any]:
        result = self.get(f"/queries/{query}/rescales")
        assert isinstance(result, dict)
        return result

    def running(self) -> bool:
        return self.process.poll() is None

    def wait_for_query(self, timeout: float = 180.0) -> dict[str, Any]:
        """The app's first query, once the REST API answers and lists one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise ClusterError(f"the app ended (exit {self.process.returncode}); "
                                   f"see {self.log_path}:\n{self.tail()}")
            self.learn_rest_url()
            try:
                found = self.queries()
                if found:
                    return found[0]
            except (OSError, ValueError):
                pass  # not up yet
            time.sleep(0.5)
        raise ClusterError(f"no query reported by {self.rest_url} within {timeout}s; "
                           f"see {self.log_path}")

    def learn_rest_url(self) -> None:
        """The server takes the next free port when its own is taken: read where it went."""
        match = re.search(r"REST API at (http://[\d.:]+)", self.tail(400))
        if match:
            self.rest_url = match.group(1)

    def wait(self, timeout: float = 120.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ClusterError(f"the app did not end within {timeout}s; see {self.log_path}"
                               ) from None

    def kill(self) -> None:
        """SIGKILL the driver's process group (the driver, and the Python app it runs)."""
        if self.running():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def submit(cluster: LocalCluster, app: str | os.PathLike[str], *args: str,
           conf: dict[str, str] | None = None, log_path: str | os.PathLike[str] | None = None,
           rest_port: int | None = None) -> SubmittedApp:
    """``spark-submit`` ``app`` to ``cluster`` with ``conf``; the REST API on a free port."""
    port = rest_port or free_port()
    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.adaptive.rest.port": str(port),
        **(conf or {}),
    }
    home = spark_home()
    cmd = [str(Path(home, "bin", "spark-submit")), "--master", cluster.master_url]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += [str(app), *args]
    log = Path(log_path) if log_path else cluster.work_dir / "logs" / f"app-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": home, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as out:
        process = popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                        stdin=subprocess.DEVNULL, start_new_session=True)
    return SubmittedApp(process, log, f"http://127.0.0.1:{port}")
