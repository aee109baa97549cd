#!/usr/bin/env bash
# Headless Chromium for the console's browser test (tests/integration/test_console_browser.py): Debian's
# chromium and chromium-driver packages, installed with apt when missing. Nothing is downloaded besides
# those packages. Safe to run again; exits non-zero only if they are missing and cannot be installed.
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: no apt-get here; install chromium and its driver to run the console's browser test" >&2
  exit 1
fi
echo "browser: installing chromium and chromium-driver (the console's browser test drives them headless)"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
