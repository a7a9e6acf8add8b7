"""The package's PEP 517 build backend: setuptools, plus what the JVM shim needs.

Every wheel carries the shim jar, compiled by ``build_py`` (``setup.py``) with
``javac`` against pyspark's own jars. So building a **wheel** needs

* a JDK 17+: checked here first, before pip installs pyspark into the build
  environment, so a machine without one stops in seconds with how to get one;
* pyspark in the build environment: added to the wheel's build requirements
  here, so pip's isolated build installs it (from its cache after the first time).

An **sdist** and an **editable** install need neither: the sdist carries the Java
sources, and an editable install's jar is built in the source tree by
``jvm-shim/build.sh`` (``make setup``). Everything else is setuptools' own
``build_meta``, as its documentation shows for in-tree backends.
"""

from __future__ import annotations

import sys
from typing import Any

import build_shim
from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F403 - the hooks this module does not change

#: The Spark classes the shim compiles against: any pyspark the package supports.
PYSPARK = "pyspark>=4.2,<5"


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    try:
        build_shim.find_javac()
    except build_shim.BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    return [*_orig.get_requires_for_build_wheel(config_settings), PYSPARK]
