#!/usr/bin/env bash
# Make sure a Chromium is on this machine for the browser test of the operators' page
# (tests/integration/test_page.py) and of its script (tests/unit/test_page_script.py);
# install Debian's with apt-get when it is missing.
# Playwright drives it; its own browser download is never used.
set -euo pipefail

for b in "${SPARK_ADAPTIVE_CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [ -n "$b" ] && command -v "$b" >/dev/null; then
    echo "Chromium found: $(command -v "$b")"
    exit 0
  fi
done

if ! command -v apt-get >/dev/null; then
  echo "error: no Chromium and no apt-get; install Chromium, or set SPARK_ADAPTIVE_CHROMIUM" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "installing chromium with apt-get"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
echo "Chromium installed: $(command -v chromium)"
