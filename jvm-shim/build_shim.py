"""Compile the JVM shim into a jar: ``javac --release 17`` against pyspark's own jars.

One code path for every build of the jar:

* the package build (``build_py`` in ``setup.py``): every wheel carries the jar at
  ``spark_adaptive/jars/spark-adaptive-shim.jar``, where the package looks for it;
* ``jvm-shim/build.sh`` (``make setup``): the jar of an editable install, written
  into the source tree;
* ``python jvm-shim/build_shim.py --out PATH`` by hand.

It needs a JDK 17 or newer (``$JAVA_HOME/bin/javac``, else ``javac`` on the PATH)
and pyspark importable by the Python that runs it (the Spark classes to compile
against). Standard library only: it runs inside pip's isolated build environment.
The jar is written with :mod:`zipfile` and fixed timestamps, so the same sources
and Spark jars give the same bytes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: The Java release the classes target: Spark 4 itself needs Java 17.
RELEASE = 17
JAR_NAME = "spark-adaptive-shim.jar"
SOURCES = Path(__file__).resolve().parent / "src" / "main" / "java"
_EPOCH = (1980, 1, 1, 0, 0, 0)

NO_JDK = (
    "building spark-adaptive needs a JDK {release} or newer to compile its JVM shim "
    "(javac), and {found}.\n"
    "Install one and build again:\n"
    "  - Debian/Ubuntu: sudo apt-get install openjdk-17-jdk-headless\n"
    "  - or point JAVA_HOME at a JDK {release}+ (its bin/javac is used)\n"
    "Spark itself needs a Java {release} runtime; the JDK adds the compiler. "
    "A wheel of spark-adaptive carries the compiled shim and installs without a JDK."
)


class BuildError(Exception):
    """The shim cannot be built; the message says what is missing and how to get it."""


def find_javac() -> Path:
    """``$JAVA_HOME/bin/javac`` or ``javac`` on the PATH, checked to be release 17+."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        javac = Path(java_home, "bin", "javac")
        if not javac.is_file():
            raise BuildError(NO_JDK.format(
                release=RELEASE, found=f"JAVA_HOME={java_home} has no bin/javac"))
    else:
        which = shutil.which("javac")
        if which is None:
            raise BuildError(NO_JDK.format(
                release=RELEASE, found="JAVA_HOME is not set and there is no javac on the PATH"))
        javac = Path(which)
    version = javac_version(javac)
    if version is None or version < RELEASE:
        raise BuildError(NO_JDK.format(
            release=RELEASE, found=f"{javac} is Java {version or 'of an unknown version'}"))
    return javac


def javac_version(javac: Path) -> int | None:
    """The feature release of ``javac`` (17 for ``javac 17.0.15``; 8 for ``javac 1.8.0``)."""
    try:
        p = subprocess.run([str(javac), "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"javac (\d+)(?:\.(\d+))?", p.stdout + p.stderr)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def spark_jars() -> Path:
    """The ``jars`` directory of the pyspark this Python imports."""
    try:
        import pyspark
    except ImportError as e:
        raise BuildError(
            "building the JVM shim needs pyspark importable at build time (its jars are "
            f"the Spark classes the shim compiles against), and {sys.executable} has "
            "none. pip's isolated build installs it by itself; with "
            "--no-build-isolation, install pyspark first.") from e
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not any(jars.glob("spark-core_*.jar")):
        raise BuildError(f"the pyspark at {jars.parent} has no Spark jars in {jars}")
    return jars


def build_jar(out: Path, jars: Path | None = None, javac: Path | None = None) -> int:
    """Compile every source into the jar ``out``; returns the number of sources."""
    javac = javac or find_javac()
    jars = jars or spark_jars()
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    if not sources:
        raise BuildError(f"no Java sources under {SOURCES}")
    with tempfile.TemporaryDirectory(prefix="spark-adaptive-shim-") as tmp:
        classes = Path(tmp)
        cmd = [str(javac), "--release", str(RELEASE), "-nowarn", "-encoding", "UTF-8",
               "-cp", str(jars / "*"), "-d", str(classes), *sources]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise BuildError(f"javac failed to compile the JVM shim against {jars}:\n"
                             f"{p.stdout}{p.stderr}")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            _add(jar, "META-INF/MANIFEST.MF",
                 b"Manifest-Version: 1.0\r\nCreated-By: spark-adaptive build_shim.py\r\n\r\n")
            for f in sorted(classes.rglob("*.class")):
                _add(jar, f.relative_to(classes).as_posix(), f.read_bytes())
        partial.replace(out)
    return len(sources)


def _add(jar: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    jar.writestr(info, data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the jar to write")
    args = ap.parse_args(argv)
    try:
        javac = find_javac()
        jars = spark_jars()
        n = build_jar(args.out, jars, javac)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"built {args.out} ({n} sources, javac --release {RELEASE}, against {jars})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
