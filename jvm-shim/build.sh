#!/usr/bin/env bash
# Build the JVM shim from source against the installed pyspark's own jars.
#   PYTHON=.venv/bin/python jvm-shim/build.sh
# Writes spark_adaptive/jars/spark-adaptive-shim.jar in the source tree, where an
# editable install (make setup) finds it at run time. A wheel gets its jar from the
# package build instead; both compile with build_shim.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON:-python3}" "$here/build_shim.py" --out "$here/../spark_adaptive/jars/spark-adaptive-shim.jar"
