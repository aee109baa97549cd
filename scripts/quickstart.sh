#!/usr/bin/env bash
# The Quick start without make: `bash scripts/quickstart.sh demo` or `bash scripts/quickstart.sh test`
# (the Makefile's `make demo` and `make test` run this). Sets everything up first (scripts/bootstrap.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export VENV

bash scripts/bootstrap.sh
case "${1:-demo}" in
  demo) exec "$VENV/bin/autooptimize" demo "${@:2}" ;;
  test)
    bash scripts/browser.sh || echo "quickstart: no headless Chromium; the console's browser test will be skipped"
    # two pytest-xdist workers, each a session of its own (tests/conftest.py); a module stays on one worker
    exec "$VENV/bin/python" -m pytest -q -n "${AO_TEST_WORKERS:-2}" --dist loadfile --durations=20 "${@:2}" ;;
  *) echo "usage: bash scripts/quickstart.sh demo|test [arguments]" >&2; exit 2 ;;
esac
