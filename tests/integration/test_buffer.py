"""Buffered writes against real tables, PostgreSQL, Redis and a Spark Connect server."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.services.buffer import landing
from autooptimize.services.buffer import rules as buffer_rules
from autooptimize.services.buffer import watch as watched_folder
from autooptimize.services.buffer.batch_commit import BATCH_ID_PROPERTY
from autooptimize.services.buffer.consolidate import consolidate_table, tick
from autooptimize.storage.buffer_models import BufferBatch, BufferFile, BufferTable
from autooptimize.storage.db import session_scope
from tasks.send import CeleryDispatch
from tests.helpers import cli
from tests.integration.tables import DAY1, DAY2, SCHEMA, SPEC, batch, files_on_disk, live_files

pytestmark = pytest.mark.spark
_names = itertools.count()


@pytest.fixture()
def table(catalog):
    identifier = f"test.buf_{next(_names)}_{os.getpid()}"
    return catalog.create_table(identifier, schema=SCHEMA, partition_spec=SPEC)


def land(settings, identifier, files, **kw):
    """Landing as the API and the CLI do it: a rule that fires queues a consolidation."""
    return landing.land(settings, identifier, files, dispatch=CeleryDispatch(settings), **kw)


def ident(table) -> str:
    return ".".join(table.name()[-2:])


def write_files(tmp_path: Path, count: int, rows: int = 20, first_id: int = 0, days=(DAY1,)) -> list[Path]:
    """``count`` small producer files, ids unique, alternating over ``days``; no field ids (like most writers)."""
    paths = []
    for i in range(count):
        day = days[i % len(days)]
        data = batch(first_id + i * rows, rows, day)
        path = tmp_path / f"in-{first_id + i * rows}.parquet"
        pq.write_table(data, path)
        paths.append(path)
    return paths


def expected_ids(count: int, rows: int = 20, first_id: int = 0) -> list[int]:
    return list(range(first_id, first_id + count * rows))


def committed_ids(table) -> list[int]:
    table.refresh()
    return sorted(table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist())


def second_reader_ids(table) -> list[int]:
    """Ids read with plain pyarrow from the live files, not through pyiceberg's scan."""
    ids: list[int] = []
    for path in live_files(table):
        ids += pq.read_table(path.removeprefix("file://"), columns=["id"])["id"].to_pylist()
    return sorted(ids)


def stray_data_files(table) -> set[str]:
    live = {p.removeprefix("file://") for p in live_files(table)}
    return {f for f in files_on_disk(table) if "/metadata/" not in f} - live


def buffer_rows(settings, identifier):
    with session_scope(settings) as s:
        bt = buffer_rules.ensure_buffer_table(settings, identifier)
        return list(s.scalars(select(BufferFile).where(BufferFile.buffer_table_id == bt).order_by(BufferFile.id)))


def test_land_then_flush_commits_every_row_once_in_one_snapshot(settings, spark, catalog, table, tmp_path):
    identifier = ident(table)
    files = write_files(tmp_path, 12, days=(DAY1, DAY2))
    source = pa.concat_tables([pq.read_table(p) for p in files])
    result = land(settings, identifier, files)
    assert len(result["landed"]) == 12 and result["rejected"] == []
    assert all(Path(p).exists() for p in files), "landing copies; the producer keeps its files"
    landed = buffer_rows(settings, identifier)
    assert {r.state for r in landed} == {"buffered"}
    assert all(str(settings.buffer_dir) in r.path for r in landed)
    assert {tuple(r.partitions) for r in landed} == {("day=2026-01-01",), ("day=2026-01-02",)}
    assert table.refresh().current_snapshot() is None, "nothing reaches the table before consolidation"

    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark, flush=True)

    assert [b["state"] for b in out["batches"]] == ["done"]
    b = out["batches"][0]
    assert b["files"] == 12 and b["rows_in"] == b["rows_out"] == 240
    assert b["checksum_in"] == b["checksum_out"]
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    snapshot = table.current_snapshot()
    assert snapshot.summary[BATCH_ID_PROPERTY] == b["batch"]
    assert snapshot.summary.operation.value == "append"
    assert committed_ids(table) == second_reader_ids(table) == expected_ids(12)
    assert table_checksum(table) == arrow_checksum(source.cast(table.scan().to_arrow().schema))
    parts = {str(r["partition"]) for r in table.inspect.files().select(["partition"]).to_pylist()}
    assert len(live_files(table)) == 2 and len(parts) == 2, "one file per partition"
    assert table.schema().find_field("id").required
    assert {r.state for r in buffer_rows(settings, identifier)} == {"committed"}
    assert not any(Path(r.path).exists() for r in buffer_rows(settings, identifier))
    assert not stray_data_files(table)
    assert not [f for f in files_on_disk(table) if f.endswith(".crc") or "/_" in f]
    from autooptimize.storage.models import AuditLog

    with session_scope(settings) as s:
        events = [e.detail for e in s.scalars(select(AuditLog).where(AuditLog.event == "buffer.batch_committed"))
                  if e.detail.get("batch") == b["batch"]]
    assert len(events) == 1
    assert events[0]["snapshot_id"] == snapshot.snapshot_id and events[0]["rows"] == 240
    assert sorted(events[0]["partitions"]) == ["day=2026-01-01", "day=2026-01-02"]


def test_malformed_files_are_rejected_at_landing_and_change_nothing(settings, catalog, table, tmp_path):
    identifier = ident(table)
    good = write_files(tmp_path, 2)
    junk = tmp_path / "junk.parquet"
    junk.write_text("this is not parquet")
    wrong_type = tmp_path / "wrong-type.parquet"
    pq.write_table(pa.table({"id": ["a"], "day": pa.array([DAY1], pa.date32())}), wrong_type)
    unknown_col = tmp_path / "unknown.parquet"
    pq.write_table(batch(900, 3).append_column("extra", pa.array([1, 2, 3])), unknown_col)
    no_required = tmp_path / "no-day.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), no_required)
    null_required = tmp_path / "null-id.parquet"
    pq.write_table(pa.table({"id": pa.array([None, 5], pa.int64()), "day": pa.array([DAY1, DAY1], pa.date32())}),
                   null_required)
    narrower = tmp_path / "narrow-int.parquet"  # int32 ids cast safely to long: accepted
    pq.write_table(pa.table({"id": pa.array([7000, 7001], pa.int32()), "day": pa.array([DAY2, DAY2], pa.date32())}),
                   narrower)
    bad = [junk, wrong_type, unknown_col, no_required, null_required, tmp_path / "missing.parquet"]

    result = land(settings, identifier, [*good, *bad, narrower])

    assert [item["file"] for item in result["landed"]] == [str(p) for p in [*good, narrower]]
    reasons = {Path(r["file"]).name: r["reason"] for r in result["rejected"]}
    assert set(reasons) == {p.name for p in bad}
    assert "not a readable Parquet file" in reasons["junk.parquet"]
    assert "'id' is string" in reasons["wrong-type.parquet"] and "int64" in reasons["wrong-type.parquet"]
    assert "'extra' is not in the table" in reasons["unknown.parquet"] and "id, day, v, x" in reasons["unknown.parquet"]
    assert "required column 'day' is missing" in reasons["no-day.parquet"]
    assert "'id' holds 1 null" in reasons["null-id.parquet"]
    assert reasons["missing.parquet"] == "no such file"
    assert len(buffer_rows(settings, identifier)) == 3
    assert all(p.exists() for p in bad[:-1]), "a rejected file is left where it was"


def test_a_landing_that_is_recorded_never_fails_so_a_retry_cannot_land_it_twice(settings, catalog, table, tmp_path,
                                                                                  monkeypatch):
    """Found by the soak: the files were recorded, then evaluating the rules hit a killed connection and the
    call failed; the producer retried and every row was landed twice."""
    from autooptimize.services.buffer import landing

    identifier = ident(table)
    files = write_files(tmp_path, 2)
    before = len(buffer_rows(settings, identifier))

    def connection_killed(*_args, **_kwargs):
        raise ConnectionError("server closed the connection unexpectedly")

    monkeypatch.setattr(landing, "_after_landing", connection_killed)
    result = land(settings, identifier, files)
    assert [item["file"] for item in result["landed"]] == [str(p) for p in files]
    assert result["fires"] is None
    assert len(buffer_rows(settings, identifier)) == before + 2


def test_land_refuses_a_bad_table_or_file_list_without_writing(settings, catalog, tmp_path):
    from autooptimize.errors import InvalidArgument, TableNotFound

    files = write_files(tmp_path, 1)
    with pytest.raises(TableNotFound, match="test.nope"):
        land(settings, "test.nope", files)
    with pytest.raises(InvalidArgument, match="namespace.table"):
        land(settings, "no_namespace", files)
    with pytest.raises(InvalidArgument, match="non-empty list"):
        land(settings, "test.nope", [])
    assert not (settings.buffer_dir / "test.nope").exists()


def test_unreadable_file_is_quarantined_and_the_rest_of_its_batch_commits(settings, spark, catalog, table, tmp_path):
    identifier = ident(table)
    files = write_files(tmp_path, 6)
    land(settings, identifier, files)
    rows = buffer_rows(settings, identifier)
    # the buffered copy of the third file is damaged after landing (disk fault, a rogue process)
    Path(rows[2].path).write_bytes(b"PAR1" + b"\x00garbage" * 100)

    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark, flush=True)

    assert [b["state"] for b in out["batches"]] == ["done"]
    ids = committed_ids(table)
    assert ids == second_reader_ids(table)
    assert ids == [i for i in expected_ids(6) if not 40 <= i < 60]
    states = {r.id: (r.state, r.reason) for r in buffer_rows(settings, identifier)}
    assert states[rows[2].id][0] == "quarantined" and "Parquet" in states[rows[2].id][1]
    quarantined = next(r for r in buffer_rows(settings, identifier) if r.state == "quarantined")
    assert "/.quarantine/" in quarantined.path and Path(quarantined.path).exists()
    assert not stray_data_files(table)


def test_rules_fire_on_landing_and_batches_take_the_oldest_files_first(settings, spark, catalog, table, tmp_path):
    import redis

    identifier = ident(table)
    buffer_rules.set_rules(settings, identifier, max_files=4, max_age="1h")
    client = redis.Redis.from_url(settings.redis_url)
    client.delete("ao.buffer")
    files = write_files(tmp_path, 10)

    first = land(settings, identifier, files[:3])
    assert first["fires"] is None
    second = land(settings, identifier, files[3:])
    assert second["fires"] == "max_files"
    queued = [json.loads(m) for m in client.lrange("ao.buffer", 0, -1)]
    assert len(queued) == 1, "one request per table while one is queued"
    assert queued[0]["headers"]["task"] == "autooptimize.consolidate"
    [status] = buffer_rules.buffer_status(settings, identifier)
    assert status["buffered_files"] == 10 and status["fires_now"] == "max_files"

    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark)

    assert [b["files"] for b in out["batches"]] == [4, 4], "two full batches; the last two files wait"
    with session_scope(settings) as s:
        landed = list(s.scalars(select(BufferFile).where(BufferFile.source.in_([str(p) for p in files]))
                                .order_by(BufferFile.id)))
    assert [r.batch_id for r in landed[:4]] == [out["batches"][0]["batch"]] * 4
    assert [r.state for r in landed[8:]] == ["buffered", "buffered"]
    [status] = buffer_rules.buffer_status(settings, identifier)
    assert status["buffered_files"] == 2 and status["fires_now"] is None and status["next_rule"] == "max_files"
    assert committed_ids(table) == expected_ids(8)

    buffer_rules.set_rules(settings, identifier, max_age="1s")
    time.sleep(1.2)
    client.delete("ao.buffer", f"ao:buffer:requested:{settings.catalog}:{identifier}")
    assert identifier in tick(settings, CeleryDispatch(settings))["requested"]
    assert client.llen("ao.buffer") == 1
    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark)
    assert _batches(settings, out) == [{"files": 2, "trigger": "max_age"}]
    assert committed_ids(table) == expected_ids(10)
    client.delete("ao.buffer")


def _batches(settings, out):
    with session_scope(settings) as s:
        rows = [s.get(BufferBatch, b["batch"]) for b in out["batches"]]
        return [{"files": r.files, "trigger": r.trigger} for r in rows]


def test_not_combinable_batches_hold_one_partition_each(settings, spark, catalog, table, tmp_path):
    identifier = ident(table)
    buffer_rules.set_rules(settings, identifier, combinable=False)
    land(settings, identifier, write_files(tmp_path, 6, days=(DAY1, DAY2)))
    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark, flush=True)
    assert [b["files"] for b in out["batches"]] == [3, 3]
    table.refresh()
    assert len(table.metadata.snapshots) == 2
    assert committed_ids(table) == expected_ids(6)


def test_rules_validation_names_the_input(settings, catalog, table):
    from autooptimize.errors import InvalidArgument

    identifier = ident(table)
    with pytest.raises(InvalidArgument, match="max-age must be a duration .*'soon'"):
        buffer_rules.set_rules(settings, identifier, max_age="soon")
    with pytest.raises(InvalidArgument, match="max-files must be a whole number from 1"):
        buffer_rules.set_rules(settings, identifier, max_files=0)
    with pytest.raises(InvalidArgument, match="is below min_bytes"):
        buffer_rules.set_rules(settings, identifier, min_bytes="2MiB", max_bytes="1MiB")
    with session_scope(settings) as s:  # inconsistent rules wrote nothing, not even the table's row
        assert s.scalar(select(func.count()).select_from(BufferTable).where(BufferTable.identifier == identifier)) == 0
    with pytest.raises(InvalidArgument, match="http"):
        buffer_rules.set_rules(settings, identifier, callback_url="ftp://x")
    rules = buffer_rules.set_rules(settings, identifier, max_age="15m")
    assert rules["max_age_seconds"] == 900 and rules["overrides"] == ["max_age_seconds"]


KILL_SCRIPT = """
import os, sys
from autooptimize.config import get_settings
from autooptimize.services.buffer.consolidate import consolidate_table
from autooptimize.services.buffer.hooks import BufferHooks
from tasks.send import CeleryDispatch

def die(*_):
    os.kill(os.getpid(), 9)

settings = get_settings()
consolidate_table(settings, sys.argv[1], flush=True, hooks=BufferHooks(**{sys.argv[2]: die}),
                  dispatch=CeleryDispatch(settings))
print("survived")
"""


@pytest.mark.parametrize("step", ["after_claim", "after_write", "after_checkpoint", "after_commit",
                                  "after_bookkeeping"])
def test_kill_9_of_the_consolidation_worker_at_each_step(settings, spark, catalog, table, tmp_path, step):
    import subprocess
    import sys

    identifier = ident(table)
    files = write_files(tmp_path, 8, days=(DAY1, DAY2))
    land(settings, identifier, files)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = subprocess.run([sys.executable, "-c", KILL_SCRIPT, identifier, step], env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    table.refresh()
    committed_before_retry = [s for s in table.metadata.snapshots if s.summary.get(BATCH_ID_PROPERTY)]
    assert len(committed_before_retry) == (1 if step in ("after_commit", "after_bookkeeping") else 0)

    # PostgreSQL frees the dead worker's table lock once it notices the closed connection (may take a moment)
    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark, flush=True, wait=60)

    assert not out["busy"]
    if step == "after_bookkeeping":  # committed and recorded: only the buffer files were left to remove
        assert out["batches"] == [] and out["finished"] == 1
    else:
        assert [b["state"] for b in out["batches"]] == ["done"] and out["finished"] == 0
        expected_reason = {"after_checkpoint": "resumed_from_checkpoint", "after_commit": "already_committed"}
        assert out["batches"][0]["reason"] == expected_reason.get(step)
    table.refresh()
    batch_snapshots = [s for s in table.metadata.snapshots if s.summary.get(BATCH_ID_PROPERTY)]
    assert len(batch_snapshots) == 1, "the batch committed exactly once"
    assert committed_ids(table) == expected_ids(8), "every landed row exactly once (pyiceberg)"
    assert second_reader_ids(table) == expected_ids(8), "every landed row exactly once (pyarrow over live files)"
    rows = buffer_rows(settings, identifier)
    assert {r.state for r in rows} == {"committed"}
    assert not any(Path(r.path).exists() for r in rows), "the buffer holds nothing already committed"
    leftovers = [p for p in (settings.buffer_dir / identifier).rglob("*") if p.is_file()]
    assert not leftovers, leftovers
    assert not stray_data_files(table), "no uncommitted file left in the table location"
    with session_scope(settings) as s:
        batch_ids = {r.batch_id for r in rows}
        assert [b.state for b in s.scalars(select(BufferBatch).where(BufferBatch.id.in_(batch_ids)))] == ["done"]
        assert batch_ids == {batch_snapshots[0].summary[BATCH_ID_PROPERTY]}


def test_cli_land_status_rules_flush(settings, spark, catalog, table, tmp_path):
    identifier = ident(table)
    files = write_files(tmp_path, 4)
    junk = tmp_path / "junk.parquet"
    junk.write_text("nope")

    landed = cli("land", identifier, *map(str, files), str(junk), "--json")
    assert landed.returncode == 2, landed.stderr
    assert len(json.loads(landed.stdout)["landed"]) == 4
    assert "rejected" in landed.stderr and "junk.parquet" in landed.stderr and "not a readable Parquet" in landed.stderr

    rules = cli("buffer", "rules", identifier, "--max-age", "10m", "--max-files", "50", "--json")
    assert rules.returncode == 0, rules.stderr
    assert json.loads(rules.stdout)["max_age_seconds"] == 600
    bad_rules = cli("buffer", "rules", identifier, "--max-age", "later")
    assert bad_rules.returncode == 2 and "max-age must be a duration" in bad_rules.stderr and "'later'" in bad_rules.stderr

    status = cli("buffer", "status", identifier, "--json")
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    assert row["buffered_files"] == 4 and row["buffered_bytes"] == sum(p.stat().st_size for p in files)
    assert row["next_rule"] in ("max_age", "max_files") and row["fires_now"] is None
    assert 0 <= row["oldest_age_seconds"] < 300 and 300 < row["seconds_to_max_age"] <= 600
    text = cli("buffer", "status")
    assert identifier in text.stdout and "next rule" in text.stdout

    flushed = cli("buffer", "flush", identifier, "--wait", "--json", timeout=300)
    assert flushed.returncode == 0, flushed.stderr
    summary = json.loads(flushed.stdout)
    assert summary["batches"] == 1 and summary["files"] == 4 and summary["rows"] == 80
    assert committed_ids(table) == expected_ids(4)
    [row] = json.loads(cli("buffer", "status", identifier, "--json").stdout)
    assert row["buffered_files"] == 0 and row["last_commit"]["snapshot_id"] == table.current_snapshot().snapshot_id

    assert cli("land", "test.does_not_exist", str(files[0])).returncode == 2
    assert cli("buffer", "flush", "bad-name", "--wait").returncode == 2


def test_watched_folder_lands_settled_files_and_quarantines_bad_ones(settings, catalog, table, tmp_path):
    identifier = ident(table)
    watch = tmp_path / "watch"
    folder = watch / identifier
    folder.mkdir(parents=True)
    settled = write_files(folder, 3)
    in_progress = folder / ".part-9.parquet"  # write-then-rename: not finished yet
    pq.write_table(batch(5000, 5), in_progress)
    fresh = folder / "fresh.parquet"
    pq.write_table(batch(6000, 5), fresh)
    bad = folder / "bad.parquet"
    bad.write_text("not parquet")
    old = time.time() - 60
    for p in [*settled, in_progress, bad]:
        os.utime(p, (old, old))
    (watch / "not a table").mkdir()
    pq.write_table(batch(7000, 1), watch / "not a table" / "x.parquet")
    os.utime(watch / "not a table" / "x.parquet", (old, old))

    result = watched_folder.poll_watch(settings.model_copy(update={"buffer_settle_seconds": 30}), watch)

    assert result["landed"] == 3 and result["rejected"] == 1
    assert "not a table" in result["errors"] and "not a valid identifier" in result["errors"]["not a table"]
    assert not any(p.exists() for p in settled), "landed files are moved out of the watched folder"
    assert in_progress.exists() and fresh.exists(), "unsettled and in-progress files wait"
    assert (folder / ".quarantine" / "bad.parquet").exists()
    assert "not a readable Parquet file" in (folder / ".quarantine" / "bad.parquet.reason").read_text()
    assert sorted(r.source for r in buffer_rows(settings, identifier)) == sorted(map(str, settled))


def test_landing_keeps_working_during_a_consolidation_and_the_callback_hears_of_each_commit(
        settings, spark, catalog, table, tmp_path):
    import http.server
    import threading

    from autooptimize.services.buffer.hooks import BufferHooks

    received: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        identifier = ident(table)
        buffer_rules.set_rules(settings, identifier, callback_url=f"http://127.0.0.1:{server.server_port}/done")
        land(settings, identifier, write_files(tmp_path, 4))
        late = write_files(tmp_path, 3, first_id=10_000)
        during: list[dict] = []

        def land_while_consolidating(_paths):
            during.append(land(settings, identifier, late))

        out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark, flush=True,
                                hooks=BufferHooks(after_write=land_while_consolidating))
    finally:
        server.shutdown()
        server.server_close()
    assert len(during[0]["landed"]) == 3
    assert [b["files"] for b in out["batches"]] == [4], "files landed after the flush began wait their turn"
    [row] = buffer_rules.buffer_status(settings, identifier)
    assert row["buffered_files"] == 3
    assert [r["batch"] for r in received] == [out["batches"][0]["batch"]]
    assert received[0]["snapshot_id"] == out["batches"][0]["snapshot_id"] and received[0]["rows"] == 80
    out = consolidate_table(settings, identifier, dispatch=CeleryDispatch(settings), spark=spark, flush=True)
    assert committed_ids(table) == sorted(expected_ids(4) + expected_ids(3, first_id=10_000))


def test_orphans_of_a_lander_that_died_are_adopted_if_moved_and_deleted_if_copied(settings, catalog, table, tmp_path):
    identifier = ident(table)
    land(settings, identifier, write_files(tmp_path, 1))  # a recorded file is never touched
    bucket = settings.buffer_dir / identifier / "2026010100"
    bucket.mkdir(parents=True)
    moved, copied, temp = bucket / "m-aaaa.parquet", bucket / "c-bbbb.parquet", bucket / ".c-cccc.parquet.tmp"
    for i, path in enumerate((moved, copied, temp)):
        pq.write_table(batch(50_000 + i * 10, 10), path)
    recent = bucket / "m-dddd.parquet"  # could be a landing in progress: too young to judge
    pq.write_table(batch(60_000, 10), recent)
    old = time.time() - 3600
    for path in (moved, copied, temp):
        os.utime(path, (old, old))

    assert landing.sweep_orphans(settings, identifier) == {"adopted": 1, "deleted": 2}

    rows = buffer_rows(settings, identifier)
    assert len(rows) == 2 and all(Path(r.path).exists() for r in rows)
    assert rows[1].source == str(moved) and rows[1].rows == 10
    assert not moved.exists() and not copied.exists() and not temp.exists() and recent.exists()
    assert landing.sweep_orphans(settings, identifier) == {"adopted": 0, "deleted": 0}
