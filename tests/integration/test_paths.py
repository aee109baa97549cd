"""Nothing outside a table's resolved location (or the buffer root) is deleted or written: symlinks and
``..`` are resolved before the check, refusals are audited as ``path.refused`` (real tables, PostgreSQL)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from autooptimize.errors import ActionRefused
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.services import actions, tracking
from autooptimize.services.buffer import landing
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import AuditLog
from autooptimize.storage.repositories import audit_events
from tests.integration.tables import DAY1, DAY2, batch, files_on_disk, identifier, make_table

OLD = time.time() - 10 * 86400


def _old_parquet(path: Path, first_id: int = 10_000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(batch(first_id, 5), path)
    os.utime(path, (OLD, OLD))
    return path


def _age_all(table) -> None:
    for path in files_on_disk(table):
        os.utime(path, (OLD, OLD))


def _run(settings, table, kind, spark=None, **options):
    action_id = actions.submit(settings, identifier(table), kind=kind, options=options, dispatch=False)
    return actions.execute(settings, action_id, spark=spark)


def _refusals(settings, action_id=None, table=None) -> list[dict]:
    with session_scope(settings) as s:
        if action_id is not None:
            return [e.detail for e in audit_events(s, action_id) if e.event == "path.refused"]
        rows = s.scalars(select(AuditLog).where(AuditLog.event == "path.refused"))
        return [e.detail for e in rows if e.detail.get("table") == table]


def test_remove_orphans_never_follows_a_symlink_out_of_the_table(settings, catalog, tmp_path):
    table = make_table(catalog, {DAY1: 2}, rows=10)
    data = Path(table.location().removeprefix("file://")) / "data"
    outside = tmp_path / "outside"
    precious = _old_parquet(outside / "precious.parquet")
    also_precious = _old_parquet(outside / "linked-file.parquet", 20_000)
    (data / "link").symlink_to(outside, target_is_directory=True)
    (data / "file-link.parquet").symlink_to(also_precious)
    stray = _old_parquet(data / "day=2026-01-01" / "stray.parquet")
    _age_all(table)
    os.utime(data / "file-link.parquet", (OLD, OLD), follow_symlinks=False)
    checksum = table_checksum(table)

    out = _run(settings, table, "remove_orphans", min_age="1h")

    assert out["state"] == "succeeded", out
    assert precious.exists() and also_precious.exists(), "a file outside the table was deleted"
    assert (data / "link").is_symlink() and (data / "file-link.parquet").is_symlink()
    assert not stray.exists(), "the real orphan inside the table stays deletable"
    assert out["plan"]["kept"] == {"symlink": 2}, "both links are listed as links, neither followed"
    assert out["files_out"] == 1
    assert table_checksum(table) == checksum


def test_expire_refuses_a_file_whose_path_leads_out_of_the_table(settings, catalog, tmp_path):
    """A data file registered through a link (``<location>/data/link/x.parquet``, link → outside): once
    only expired snapshots read it, expiry would delete it; the path resolves outside, so it is refused."""
    table = make_table(catalog, {DAY1: 1}, rows=10)
    data = Path(table.location().removeprefix("file://")) / "data"
    outside = tmp_path / "outside"
    outside.mkdir()
    (data / "link").symlink_to(outside, target_is_directory=True)
    pq.write_table(batch(900, 5), outside / "registered.parquet")
    table.add_files([f"{data}/link/registered.parquet"])
    table.overwrite(batch(0, 10, DAY2))  # from here on only older snapshots read the registered file
    time.sleep(1.1)

    out = _run(settings, table, "expire_snapshots", older_than="1s", allow_short_retention="true", retain_last=1)

    assert out["state"] == "succeeded", out
    assert (outside / "registered.parquet").exists(), "expiry deleted a file outside the table"
    assert out["plan"]["deleted"]["refused"] == 1
    refused = _refusals(settings, out["id"])
    assert [(r["path"].rsplit("/", 1)[-1], r["reason"], r["operation"]) for r in refused] == [
        ("registered.parquet", "resolves_outside_root", "delete")]


@pytest.mark.spark
@pytest.mark.parametrize("escape", ["dotdot", "symlink"])
def test_a_merge_never_writes_outside_the_table(settings, spark, catalog, tmp_path, escape):
    table = make_table(catalog, {DAY1: 3}, rows=10)
    location = table.location().rstrip("/")
    if escape == "dotdot":
        victim = Path(location.removeprefix("file://")).parent / f"victim-{os.getpid()}-{id(table)}"
        data_path = f"{location}/../{victim.name}"
    else:
        victim = tmp_path / "victim"
        victim.mkdir()
        (Path(location.removeprefix("file://")) / "escape").symlink_to(victim, target_is_directory=True)
        data_path = f"{location}/escape"
    with table.transaction() as tx:
        tx.set_properties({"write.data.path": data_path})
    checksum = table_checksum(table)
    tracking.track(settings, identifier(table), target_file_size="1MiB")
    action_id = actions.submit(settings, identifier(table), partition="day=2026-01-01", dispatch=False)

    out = actions.execute(settings, action_id, spark=spark)

    assert (out["state"], out["reason"]) == ("refused", "path_refused"), out
    assert not victim.exists() or not any(victim.rglob("*")), "the merge wrote outside the table"
    assert table_checksum(table) == checksum
    refused = _refusals(settings, action_id)
    assert len(refused) == 1 and refused[0]["path"] == data_path
    assert refused[0]["reason"] == ("outside_root" if escape == "dotdot" else "resolves_outside_root")


def test_buffer_sweep_never_follows_a_link_out_of_the_buffer(settings, catalog, tmp_path):
    table = make_table(catalog, {DAY1: 1}, rows=10)
    ident = identifier(table)
    zone = settings.buffer_dir / ident
    zone.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "elsewhere"
    copy = _old_parquet(outside / "c-0123456789abcdef.parquet")  # would be swept as a dead lander's copy
    (zone / "2020010100").symlink_to(outside, target_is_directory=True)
    own = _old_parquet(zone / "2020010101" / "c-fedcba9876543210.parquet")

    swept = landing.sweep_orphans(settings, ident, min_age=60)

    assert copy.exists(), "the sweep deleted a file outside the buffer root"
    assert not own.exists() and swept == {"adopted": 0, "deleted": 1}


def test_landing_refuses_a_zone_that_leads_out_of_the_buffer(settings, catalog, tmp_path):
    table = make_table(catalog, {DAY1: 1}, rows=10)
    ident = identifier(table)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    settings.buffer_dir.mkdir(parents=True, exist_ok=True)
    (settings.buffer_dir / ident).symlink_to(outside, target_is_directory=True)
    source = tmp_path / "in.parquet"
    pq.write_table(batch(0, 5), source)

    try:
        result = landing.land(settings, ident, [source], notify=False)
    except ActionRefused as exc:
        result = exc

    assert not any(outside.rglob("*")), "landing wrote outside the buffer root"
    assert isinstance(result, ActionRefused) and result.reason == "path_refused", result
    refused = _refusals(settings, table=ident)
    assert [(r["reason"], r["operation"]) for r in refused] == [("resolves_outside_root", "write")]
