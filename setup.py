"""Ships the JVM shim jar and spark_adaptive_startup.pth in the wheel.

Everything else is in pyproject.toml.

* ``spark_adaptive_startup.pth`` goes to the root of site-packages (zero-code
  activation). setuptools has no declarative way to place a file beside the
  packages, so build_py copies it there, as setuptools does for its own
  distutils-precedence.pth.
* ``spark_adaptive/jars/spark-adaptive-shim.jar`` is compiled from ``jvm-shim/``
  by ``jvm-shim/build_shim.py`` (javac, against the build environment's pyspark;
  ``jvm-shim/build_backend.py`` puts pyspark there and checks for a JDK first).
  It is always compiled, never copied from the source tree, so a wheel never
  carries a stale jar. An editable install skips it: ``jvm-shim/build.sh``
  builds that jar in place.
"""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "jvm-shim"))
import build_shim  # noqa: E402

PTH = "spark_adaptive_startup.pth"
JAR = Path("spark_adaptive", "jars", build_shim.JAR_NAME)


class BuildPyWithStartupHookAndShim(build_py):
    def run(self):
        super().run()
        self.copy_file(str(HERE / PTH), str(Path(self.build_lib) / PTH))
        if not self.editable_mode:
            try:
                n = build_shim.build_jar(Path(self.build_lib) / JAR)
            except build_shim.BuildError as e:
                sys.exit(f"error: {e}")
            self.announce(f"compiled the JVM shim ({n} sources) into {JAR}", level=2)

    def get_outputs(self, include_bytecode=True):
        extra = [PTH] if self.editable_mode else [PTH, str(JAR)]
        return [*super().get_outputs(include_bytecode),
                *(str(Path(self.build_lib) / p) for p in extra)]


setup(cmdclass={"build_py": BuildPyWithStartupHookAndShim})
