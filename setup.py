"""Ships spark_adaptive_startup.pth at the root of site-packages (zero-code activation).

Everything else is in pyproject.toml. setuptools has no declarative way to place
a file beside the packages, so build_py copies it there, as setuptools does for
its own distutils-precedence.pth.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "spark_adaptive_startup.pth"


class BuildPyWithStartupHook(build_py):
    def run(self):
        super().run()
        self.copy_file(str(Path(__file__).parent / PTH), str(Path(self.build_lib) / PTH))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithStartupHook})
