"""The package as users install it: built wheel and checkout, in fresh virtual environments.

No editable install and no Makefile: the sdist and the wheel are built once per session
with ``python -m build`` (the wheel from the sdist, so the sdist must carry everything);
one fresh venv gets the wheel without extras, its own ``spark-submit`` runs an
unmodified streaming app with ``--conf spark.adaptive.enabled=true`` on a local
cluster, and the app's log must show the shim in use, from the jar inside that venv.
The same venv then takes ``pip install <a copy of the checkout>`` (pip builds the wheel
itself) and runs the app again; and pytest runs a test file of its own there, with no
``testing`` extra installed, to show that the package's pytest plugin stays out of it.

The venv gets the dev venv's pyspark version (from pip's cache after the first time), so
that the app and the cluster run the same Spark.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from spark_adaptive.testing.cluster import LocalCluster

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
JAR_IN_WHEEL = "spark_adaptive/jars/spark-adaptive-shim.jar"
SHIM_LINE = "listening to Spark through the JVM shim"


def _copy_checkout(dest: Path) -> None:
    """What a fresh clone of this working tree has: tracked files and new ones not ignored
    (so no venv, no built jar, no build/ or dist/)."""
    p = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, p.stdout.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


APP = textwrap.dedent("""
    import sys, time
    from pyspark.sql import SparkSession, functions as F

    spark = SparkSession.builder.appName("plain-streaming-app").getOrCreate()
    counts = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
              .groupBy((F.col("value") % 3).alias("k")).count())
    batches = []
    query = (counts.writeStream.outputMode("complete")
             .foreachBatch(lambda df, i: batches.append(df.count()))
             .option("checkpointLocation", sys.argv[1])
             .trigger(processingTime="1 second").start())
    deadline = time.monotonic() + 120
    while len(batches) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    print(f"RESULT batches={len(batches)} loaded={'spark_adaptive' in sys.modules}")
    spark.stop()
""")


@dataclass
class Venv:
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def env(self) -> dict[str, str]:
        """The environment of a shell with this venv activated and nothing of the test's."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "SPARK_HOME", "SPARK_CONF_DIR", "PYTHONHOME")
               and not k.startswith("PYTEST")}
        env.update(VIRTUAL_ENV=str(self.path), PATH=f"{self.path / 'bin'}:{env.get('PATH', '')}",
                   PYSPARK_PYTHON=str(self.python), PYSPARK_DRIVER_PYTHON=str(self.python))
        return env

    def run(self, *args: str | Path, cwd: Path | None = None, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
        # Never in the checkout: its spark_adaptive/ and egg-info would shadow the install.
        return subprocess.run([str(a) for a in args], cwd=cwd or self.path.parent,
                              env=self.env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)

    def pip_install(self, *args: str | Path) -> None:
        p = self.run(self.python, "-m", "pip", "install", "-q", *args)
        assert p.returncode == 0, p.stdout[-4000:]

    def spark_submit(self, cluster: LocalCluster, app: Path, *args: str
                     ) -> subprocess.CompletedProcess[str]:
        conf = {"spark.adaptive.enabled": "true", "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1", "spark.executor.memory": "512m",
                "spark.ui.enabled": "false", "spark.adaptive.rest.port": "0",
                "spark.sql.shuffle.partitions": "2"}
        cmd: list[str | Path] = [self.path / "bin" / "spark-submit", "--master",
                                 cluster.master_url]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return self.run(*cmd, app, *args, cwd=app.parent, timeout=300)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it, once, as ``make dist`` builds them."""
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                       text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:]
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [found] = dist.glob("spark_adaptive-*-py3-none-any.whl")
    return found


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    """A new venv with the wheel installed, no extras, and the dev venv's pyspark."""
    v = Venv(tmp_path_factory.mktemp("venv") / "venv")
    venv.create(v.path, with_pip=True)
    v.pip_install(wheel, f"pyspark=={pyspark.__version__}")
    return v


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(1, 1, work_dir=tmp_path_factory.mktemp("packaging-cluster")) as c:
        yield c


def _app(tmp_path: Path) -> Path:
    app = tmp_path / "plain_app.py"
    app.write_text(APP)
    return app


def _assert_managed_through_the_shim(p: subprocess.CompletedProcess[str], v: Venv) -> None:
    assert p.returncode == 0, p.stdout[-4000:]
    assert "RESULT batches=2 loaded=True" in p.stdout, p.stdout[-4000:]
    [line] = [ln for ln in p.stdout.splitlines() if SHIM_LINE in ln]
    assert f"{v.path}/lib/" in line and line.rstrip().endswith(f"{JAR_IN_WHEEL})"), line
    assert "managing streaming query" in p.stdout
    assert "runs without its JVM shim" not in p.stdout
    assert "Traceback" not in p.stdout


def test_sdist_carries_the_java_sources_and_no_jar(dist: Path) -> None:
    [sdist] = dist.glob("spark_adaptive-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    java = {p.relative_to(ROOT).as_posix() for p in (ROOT / "jvm-shim" / "src").rglob("*.java")}
    assert java and java <= names
    assert {"jvm-shim/build_shim.py", "jvm-shim/build_backend.py", "setup.py",
            "spark_adaptive_startup.pth", "_spark_adaptive_startup.py"} <= names
    assert not [n for n in names if n.endswith(".jar")]


def test_wheel_carries_the_shim_with_every_class(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        assert "spark_adaptive_startup.pth" in names
        with zipfile.ZipFile(whl.open(JAR_IN_WHEEL)) as jar:
            classes = {n for n in jar.namelist() if n.endswith(".class") and "$" not in n}
    sources = {f"io/sparkadaptive/shim/{p.stem}.class"
               for p in (ROOT / "jvm-shim" / "src").rglob("*.java")}
    assert classes == sources


def test_plain_app_from_the_wheel_runs_through_the_shim(fresh_venv: Venv, cluster: LocalCluster,
                                                       tmp_path: Path) -> None:
    app = _app(tmp_path)
    p = fresh_venv.spark_submit(cluster, app, str(tmp_path / "checkpoint"))
    _assert_managed_through_the_shim(p, fresh_venv)


def test_pytest_of_another_project_runs_without_the_testing_extra(fresh_venv: Venv,
                                                                   tmp_path: Path) -> None:
    fresh_venv.pip_install("pytest")
    assert fresh_venv.run(fresh_venv.python, "-c", "import psutil").returncode != 0, (
        "psutil comes only with the testing extra")
    (tmp_path / "test_theirs.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    p = fresh_venv.run(fresh_venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "test_theirs.py", cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "1 passed" in p.stdout
    # The plugin is there for whoever asks for it, and then names what it needs.
    p = fresh_venv.run(fresh_venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-p", "spark_adaptive.testing.pytest_plugin", "test_theirs.py",
                       cwd=tmp_path, timeout=120)
    assert p.returncode != 0 and "No module named 'psutil'" in p.stdout, p.stdout[-3000:]


def test_plain_app_after_pip_install_of_a_checkout_runs_through_the_shim(
        fresh_venv: Venv, cluster: LocalCluster, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    _copy_checkout(checkout)
    assert not (checkout / "spark_adaptive" / "jars").exists()
    # Replaces the wheel's files, jar included; pyspark stays.
    fresh_venv.pip_install("--force-reinstall", "--no-deps", checkout)
    p = fresh_venv.run(fresh_venv.python, "-m", "pip", "show", "-f", "spark-adaptive")
    assert JAR_IN_WHEEL in p.stdout, p.stdout
    direct = fresh_venv.run(fresh_venv.python, "-c",
                            "import importlib.metadata as m; "
                            "print(m.distribution('spark-adaptive').read_text('direct_url.json'))")
    assert checkout.as_uri() in direct.stdout, direct.stdout
    app = _app(tmp_path)
    p = fresh_venv.spark_submit(cluster, app, str(tmp_path / "checkpoint"))
    _assert_managed_through_the_shim(p, fresh_venv)
