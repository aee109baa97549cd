"""Delete compaction and buffered-write consolidation on an ``s3://`` warehouse served on loopback by a
real S3-protocol server (moto's server mode, spoken to over HTTP; see tests/conftest.py). Each case
checks rows and the content checksum against a reader that shares no code with the action."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.iceberg.fileio import list_files
from autooptimize.services import actions, tracking
from autooptimize.services.buffer import landing
from autooptimize.services.buffer.consolidate import consolidate_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tasks.send import CeleryDispatch
from tests.integration.deletes import data_files as live_data_files
from tests.integration.deletes import delete_equal, delete_files, delete_positions, reference_read
from tests.integration.tables import DAY1, DAY2, SCHEMA, SPEC, batch, identifier, live_files, make_table

pytestmark = [pytest.mark.s3, pytest.mark.spark]


def _ids_read_through_fileio(table) -> list[int]:
    ids: list[int] = []
    for path in live_files(table):
        with table.io.new_input(path).open() as stream:
            ids += pq.read_table(stream, columns=["id"])["id"].to_pylist()
    return sorted(ids)


def test_delete_compaction_on_s3_applies_position_and_equality_deletes_in_spark_tasks(s3_settings, s3_catalog,
                                                                                     spark):
    table = make_table(s3_catalog, {DAY1: 3, DAY2: 1}, rows=50)
    day1 = live_data_files(table, "day=2026-01-01")
    delete_positions(table, {day1[1]: [0, 1, 2], day1[2]: [10]})
    delete_equal(table, day1[0], ["id", "v"], [{"id": 5, "v": "value-5"}, {"id": 20, "v": "nope"}])
    reference = reference_read(table)  # applies the spec's rules in plain Python, reading through the FileIO
    ident = identifier(table)
    tracking.track(s3_settings, ident, target_file_size="1MiB")
    day2_before = set(live_data_files(table, "day=2026-01-02"))

    action_id = actions.submit(s3_settings, ident, partition="day=2026-01-01", kind="compact_deletes",
                               dispatch=False)
    out = actions.execute(s3_settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["rows_in"], out["rows_out"]) == (150, 150 - 4 - 1)
    assert out["checksum_out"] == arrow_checksum(reference.filter(pa.compute.equal(reference["day"], DAY1)))
    with session_scope(s3_settings) as s:
        assert {g["engine"] for g in get_action(s, action_id).checkpoint["groups"]} == {"spark"}
    assert delete_files(table) == []
    assert table_checksum(table) == arrow_checksum(reference) == arrow_checksum(reference_read(table))
    ids = _ids_read_through_fileio(table)
    assert 20 in ids and not {5, 50, 51, 52, 110} & set(ids)
    assert day2_before <= set(live_data_files(table))
    written = set(list_files(table.io, table.location() + "/data", ".parquet"))
    assert set(live_data_files(table)) <= written


def test_buffered_writes_consolidate_into_an_s3_table(s3_settings, s3_catalog, spark, tmp_path):
    table = s3_catalog.create_table(f"test.s3buf_{random.randrange(10**9)}", schema=SCHEMA, partition_spec=SPEC)
    ident = identifier(table)
    files = []
    for i in range(8):  # producer files without field ids, alternating over two days
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(batch(i * 25, 25, (DAY1, DAY2)[i % 2]), path)
        files.append(path)
    source = pa.concat_tables([pq.read_table(p) for p in files])
    result = landing.land(s3_settings, ident, files, dispatch=CeleryDispatch(s3_settings))
    assert len(result["landed"]) == 8 and result["rejected"] == []

    out = consolidate_table(s3_settings, ident, dispatch=CeleryDispatch(s3_settings), spark=spark, flush=True)

    assert [b["state"] for b in out["batches"]] == ["done"], out
    b = out["batches"][0]
    assert b["files"] == 8 and b["rows_in"] == b["rows_out"] == 200
    assert b["checksum_in"] == b["checksum_out"]
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    live = live_files(table)
    assert len(live) == 2 and all(p.startswith(table.location() + "/data/") for p in live)
    assert _ids_read_through_fileio(table) == list(range(200))
    assert table_checksum(table) == arrow_checksum(source.cast(table.scan().to_arrow().schema))
    # nothing but the committed files was written to the store
    assert set(list_files(table.io, table.location() + "/data", ".parquet")) == set(live)


def _readme_s3_snippet() -> list[str]:
    """The command lines of docs/catalogs.md's "Running against S3" bash block."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "catalogs.md").read_text()
    section = text[text.index("### Running against S3"):]
    block = re.search(r"^```bash\n(.*?)^```$", section, re.M | re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.fixture
def fresh_database(settings):
    """A database of its own, dropped afterwards: AO_DATABASE_URL for a service started as on a new machine."""
    import uuid

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = f"ao_test_demo_{uuid.uuid4().hex[:8]}"
    admin = create_engine(os.environ["AO_TEST_ADMIN_URL"], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(settings.database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture
def fresh_redis(settings):
    """Another Redis db than the session's (this worker's spare), flushed before and after."""
    import redis

    from tests.helpers import spare_redis_url

    url = spare_redis_url()
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def test_demo_with_an_s3_warehouse_runs_the_readme_lines_end_to_end(settings, tmp_path, fresh_database, fresh_redis):
    """The documented lines as written, on a free port instead of 9000 and with a smaller demo table: an S3
    server, a bucket, the built-in catalog with the store's endpoint as its properties, and
    ``autooptimize demo --warehouse s3://…``, which starts the service, writes the table to the store
    and has it merged there."""
    import json
    import os
    import shlex
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.helpers import free_port
    from tests.integration.processes import TreeWatch, kill_leftovers

    repo = Path(__file__).resolve().parents[2]
    port = str(free_port())
    lines = [line.replace("9000", port).replace(".venv/bin/python", sys.executable) for line in _readme_s3_snippet()]
    server_line, bucket_line = lines[0], lines[1]
    exports = [line for line in lines if line.startswith("export ")]
    (demo_line,) = [line for line in lines if " demo " in line]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])),
           "AO_HOME": str(tmp_path / "home"), "AO_SPARK_PORT": str(free_port()),
           # as on a fresh machine: a database and a Redis db of its own, not the test session's (whose
           # queued actions and tracked tables a service started on them would take up first)
           "AO_DATABASE_URL": fresh_database, "AO_REDIS_URL": fresh_redis}
    env.pop("AO_CATALOG", None)
    for line in exports:
        for pair in shlex.split(line)[1:]:
            name, _, value = pair.partition("=")
            env[name] = value
    server = subprocess.Popen(shlex.split(server_line.split("&")[0]), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    log = tmp_path / "demo.log"
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(shlex.split(bucket_line), env=env, capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the documented S3 server did not take the bucket within 60 s"
            time.sleep(0.5)
        with open(log, "ab") as out:
            proc = subprocess.Popen([*shlex.split(demo_line), "--files", "16", "--partitions", "2", "--json"],
                                    env=env, cwd=repo, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        watch = TreeWatch(proc.pid)
        try:
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                service_logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}"
                                       for p in sorted((tmp_path / "home" / "logs").glob("*.log")))
                pytest.fail(f"the demo did not finish within 600 s:\n{log.read_text()[-3000:]}{service_logs}")
            text = log.read_text()
            assert proc.returncode == 0, text[-3000:]
            result = json.loads(text.strip().splitlines()[-1])
            assert result["location"] == "s3://lake/wh/demo/events"
            assert result["files_after"] * 4 <= result["files_before"] == 16
            assert (result["rows_after"], result["checksum_after"]) == (result["rows_before"],
                                                                        result["checksum_before"])
        finally:
            watch.stop()
            kill_leftovers(watch)
            if proc.poll() is None:
                proc.kill()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_demo_refuses_a_warehouse_that_is_not_a_store_uri(settings):
    from autooptimize.demo import demo_location
    from autooptimize.errors import InvalidArgument

    assert demo_location("s3://lake/wh/") == "s3://lake/wh/demo/events"
    for bad in ("lake/wh", "http://lake/wh", "s3://", "ftp://x/y"):
        with pytest.raises(InvalidArgument, match="is not a warehouse URI"):
            demo_location(bad)


def test_zorder_on_s3_clusters_two_columns_in_spark_tasks(s3_settings, s3_catalog, spark):
    from autooptimize.services import zorder

    table = make_table(s3_catalog, {DAY1: 6}, rows=400)
    ident = identifier(table)
    # small enough for several files once the output size is calibrated on an executor
    tracking.track(s3_settings, ident, target_file_size="2KiB", zorder_columns="id, x")
    before = table_checksum(table)
    second = _ids_read_through_fileio(table)

    action_id = actions.submit(s3_settings, ident, partition="day=2026-01-01", kind="zorder", dispatch=False)
    out = actions.execute(s3_settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["rows_in"], out["checksum_in"]) == (out["rows_out"], out["checksum_out"]) and out["rows_in"] == 2400
    with session_scope(s3_settings) as s:
        assert {g["engine"] for g in get_action(s, action_id).checkpoint["groups"]} == {"spark"}
    assert table_checksum(table) == before and _ids_read_through_fileio(table) == second
    files = [t.file for t in table.refresh().scan().plan_files()]
    assert len(files) == out["files_out"] >= 2
    columns = zorder.parse_zorder_columns(table, "id, x")
    assert max(zorder.overlap_counts(table, files, columns)) < len(files) - 1, "every file meets every other"
