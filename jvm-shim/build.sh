#!/usr/bin/env bash
# Build the JVM shim from source against the installed pyspark's own jars.
#   PYTHON=.venv/bin/python jvm-shim/build.sh
# Writes jvm-shim/target/spark-adaptive-shim.jar and installs a copy into
# spark_adaptive/jars/, where the package looks for it at run time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
spark_home=$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
out="$here/target"
rm -rf "$out/classes"
mkdir -p "$out/classes"
mapfile -t sources < <(find "$here/src/main/java" -name '*.java' | sort)
javac --release 17 -nowarn -encoding UTF-8 -cp "$spark_home/jars/*" -d "$out/classes" "${sources[@]}"
jar cf "$out/spark-adaptive-shim.jar" -C "$out/classes" .
install -D -m 0644 "$out/spark-adaptive-shim.jar" "$here/../spark_adaptive/jars/spark-adaptive-shim.jar"
echo "built $out/spark-adaptive-shim.jar (${#sources[@]} sources, against $spark_home/jars)"
