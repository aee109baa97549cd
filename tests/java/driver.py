"""Iceberg's Java library as another engine for the tests: a Spark 3.5 session (local[1]) with Iceberg
1.10.2's runtime and a JdbcCatalog on our PostgreSQL, driven line by line over stdin/stdout.

Run by the Python of the virtualenv scripts/iceberg_java.sh builds (pyspark 3.5), never imported by
the tests' own interpreter. Each request is one JSON line ``{"sql": [...], "query": "..."}``: the
statements run in order, then the query's rows come back as one JSON line ``{"rows": [...]}`` (values
as JSON: decimals, dates and timestamps as strings, bytes as hex), or ``{"error": "..."}``.

Started as ``python driver.py CONFIG_JSON`` with the catalog's name, JDBC URL, warehouse URI and jar
paths; prints ``{"ready": true}`` once the session is up.
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import traceback


def _jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, (decimal.Decimal, datetime.date, datetime.datetime)):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "asDict"):
        return _jsonable(value.asDict(recursive=True))
    return value


def main() -> None:
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession

    name = config["catalog"]
    prefix = f"spark.sql.catalog.{name}"
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("iceberg-java-tests")
        .config("spark.jars", ",".join(config["jars"]))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(prefix, "org.apache.iceberg.spark.SparkCatalog")
        .config(f"{prefix}.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
        .config(f"{prefix}.uri", config["jdbc_url"])
        .config(f"{prefix}.jdbc.user", config.get("user", "postgres"))
        .config(f"{prefix}.warehouse", config["warehouse"])
        .config(f"{prefix}.cache-enabled", "false")  # the service commits to the same tables meanwhile
        .config("spark.sql.defaultCatalog", name)
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", config.get("memory", "768m"))
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            for statement in request.get("sql", []):
                spark.sql(statement).collect()
            rows = None
            if request.get("query"):
                rows = [_jsonable(r.asDict(recursive=True)) for r in spark.sql(request["query"]).collect()]
            answer = {"rows": rows}
        except Exception as exc:  # the test gets the message and decides
            causes = [line.strip() for line in str(exc).splitlines()
                      if line.strip().startswith(("Caused by", ": "))]
            answer = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                               + "".join(f"\n{c}" for c in causes)[:4000],
                      "trace": traceback.format_exc()[-4000:]}
        print(json.dumps(answer), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
