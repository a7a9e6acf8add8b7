#!/usr/bin/env bash
# Make sure a JDK 17 or newer (java and javac) is on the PATH; install one with
# apt-get when it is missing (Debian/Ubuntu). Spark 4 needs Java 17+, and the
# JVM shim is compiled with javac.
set -euo pipefail

major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }

if command -v java >/dev/null && command -v javac >/dev/null; then
  v=$(major java)
  if [ -n "$v" ] && [ "$v" -ge 17 ]; then
    echo "Java $v found: $(command -v java)"
    exit 0
  fi
  echo "Java ${v:-?} found but Spark 4 needs 17 or newer"
fi

if ! command -v apt-get >/dev/null; then
  echo "error: no JDK 17+ and no apt-get; install a JDK 17 and put java and javac on the PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "installing openjdk-17-jdk-headless with apt-get"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
echo "Java $(major java) installed: $(command -v java)"
