#!/usr/bin/env bash
# Sets up everything the Quick start needs on a fresh Debian-like machine with Python 3.11:
# Java 17 (apt, if missing), PostgreSQL and Redis answering (started if installed but stopped),
# and a virtualenv in .venv with autooptimize and its test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

if ! command -v java >/dev/null 2>&1; then
  echo "bootstrap: installing Java 17 (Spark needs it)"
  as_root apt-get update -qq && as_root apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "bootstrap: starting PostgreSQL"
  as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
if command -v redis-cli >/dev/null 2>&1 && ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
  echo "bootstrap: starting Redis"
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing autooptimize into $VENV (pyspark builds from source: about a minute)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
  rm -f "$VENV"/.installed-* && touch "$stamp"
fi
