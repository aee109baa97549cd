"""Table hygiene actions (rewrite_manifests, expire_snapshots, remove_orphans) against real tables on disk,
real PostgreSQL, and — for the in-flight merge — a real Spark Connect server."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from autooptimize.domain.actions import Hooks
from autooptimize.errors import InvalidArgument, TableNotFound
from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.iceberg.manifests import data_manifests
from autooptimize.iceberg.references import ReferenceReader
from autooptimize.services import actions, hygiene, tracking
from autooptimize.services.preview import preview
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, AuditLog, TrackedTable
from autooptimize.storage.repositories import audit_events
from tests.integration.tables import (
    ARROW,
    DAY1,
    DAY2,
    batch,
    files_on_disk,
    identifier,
    live_files,
    make_table,
)

OLD = time.time() - 10 * 86400


class Crash(BaseException):
    """Stands for the worker dying at a chosen point (not an Exception: nothing may catch it)."""


def _local(path: str) -> str:
    from autooptimize.iceberg.references import normalise_path

    return normalise_path(path).removeprefix("file://")


def pyarrow_checksum(table) -> str:
    """The second reader: plain pyarrow over the live files the metadata lists (not pyiceberg's scan)."""
    parts = [pq.read_table(_local(p)).select(ARROW.names).cast(ARROW) for p in live_files(table)]
    return arrow_checksum(pa.concat_tables(parts)) if parts else "0:0"


def both_readers(table) -> tuple[str, str]:
    return table_checksum(table), pyarrow_checksum(table)


def _run(settings, table, kind, dry_run=False, hooks=None, **options):
    ident = identifier(table)
    if dry_run:
        return preview(settings, ident, kind=kind, options=options)
    action_id = actions.submit(settings, ident, kind=kind, options=options, dispatch=False)
    return actions.execute(settings, action_id, spark=None, hooks=hooks)


def _age_all(table, when: float = OLD) -> None:
    for path in files_on_disk(table):
        os.utime(path, (when, when))


def _write_stray(path: str, when: float | None = OLD) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(batch(10_000, 5), path)
    if when is not None:
        os.utime(path, (when, when))
    return path


def _counts(settings) -> tuple[int, int]:
    with session_scope(settings) as s:
        return (s.scalar(select(func.count()).select_from(Action)),
                s.scalar(select(func.count()).select_from(AuditLog)))


def _entries(table) -> dict[str, tuple]:
    table.refresh()
    rows = table.inspect.entries().to_pylist()
    return {r["data_file"]["file_path"]: (r["snapshot_id"], r["sequence_number"], r["file_sequence_number"])
            for r in rows if r["status"] != 2}


# ---------------------------------------------------------------------------------------- rewrite_manifests


def test_rewrite_manifests_clusters_by_partition_and_keeps_every_file(settings, catalog):
    table = make_table(catalog, {DAY1: 4, DAY2: 4}, rows=20)
    before = both_readers(table)
    assert before[0] == before[1]
    files_before, entries_before = sorted(live_files(table)), _entries(table)
    assert len(data_manifests(table)) == 8

    # one byte of target size: every partition starts a new manifest, so the clustering shows
    out = _run(settings, table, "rewrite_manifests", manifest_threshold=3, target_manifest_size=1)

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"]) == (8, 2)
    assert out["rows_in"] == out["rows_out"] == 160
    assert out["checksum_in"] == out["checksum_out"]
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary[ACTION_ID_PROPERTY] == out["id"]
    manifests = data_manifests(table)
    assert len(manifests) == 2
    for manifest in manifests:  # one partition per manifest: tight bounds
        (summary,) = manifest.partitions
        assert summary.lower_bound == summary.upper_bound
    assert sorted(live_files(table)) == files_before
    assert _entries(table) == entries_before, "snapshot ids or sequence numbers changed"
    assert both_readers(table) == before
    with session_scope(settings) as s:
        events = [e.event for e in audit_events(s, out["id"])]
    assert events == ["action.submitted", "action.started", "action.succeeded"]

    again = _run(settings, table, "rewrite_manifests", manifest_threshold=3)
    assert (again["state"], again["reason"]) == ("skipped", "below_threshold")
    assert table.current_snapshot().snapshot_id == snapshot.snapshot_id


def test_rewrite_manifests_retry_after_a_crash_finds_its_commit(settings, catalog):
    table = make_table(catalog, {DAY1: 3, DAY2: 2}, rows=10)
    before = both_readers(table)

    def crash(_snapshot_id: int) -> None:
        raise Crash()

    ident = identifier(table)
    action_id = actions.submit(settings, ident, kind="rewrite_manifests", options={"manifest_threshold": "2"},
                               dispatch=False)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=None, hooks=Hooks(after_commit=crash))
    out = actions.execute(settings, action_id, spark=None)
    assert (out["state"], out["reason"]) == ("succeeded", "already_committed")
    assert (out["files_in"], out["files_out"]) == (5, 1)
    table.refresh()
    assert [s for s in table.metadata.snapshots if s.summary.get(ACTION_ID_PROPERTY) == action_id] != []
    assert len([s for s in table.metadata.snapshots if s.summary.get(ACTION_ID_PROPERTY) == action_id]) == 1
    assert both_readers(table) == before


def test_rewrite_manifests_dry_run_and_threshold_change_nothing(settings, catalog):
    table = make_table(catalog, {DAY1: 3}, rows=10)
    snapshot_id, on_disk = table.current_snapshot().snapshot_id, files_on_disk(table)
    dry = _run(settings, table, "rewrite_manifests", dry_run=True, manifest_threshold=1)
    assert (dry["state"], dry["reason"], dry["files_in"]) == ("skipped", "dry_run", 3)
    below = _run(settings, table, "rewrite_manifests")  # default threshold 100
    assert (below["state"], below["reason"]) == ("skipped", "below_threshold")
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot_id
    assert files_on_disk(table) == on_disk


# ----------------------------------------------------------------------------------------- expire_snapshots


def _history_table(catalog):
    """s1..s3 append f1..f3 (s1 tagged), then an overwrite replaces everything with f4."""
    table = make_table(catalog, {DAY1: 3}, rows=10)
    first = table.metadata.snapshots[0]
    table.manage_snapshots().create_tag(first.snapshot_id, "audit").commit()
    f1, f2, f3 = sorted(live_files(table), key=lambda p: os.path.getmtime(_local(p)))
    table.overwrite(batch(1000, 10, DAY2))
    table.refresh()
    return table, first, (f1, f2, f3)


def test_expire_snapshots_keeps_current_and_tags_and_deletes_only_unreferenced_files(settings, catalog):
    table, first, (f1, f2, f3) = _history_table(catalog)
    before = both_readers(table)
    current = table.current_snapshot().snapshot_id
    snapshots_before = len(table.metadata.snapshots)
    time.sleep(1.1)

    out = _run(settings, table, "expire_snapshots", older_than="1s", allow_short_retention="true", retain_last=1)

    assert out["state"] == "succeeded", out
    table.refresh()
    remaining = {s.snapshot_id for s in table.metadata.snapshots}
    assert remaining == {current, first.snapshot_id}
    assert (out["files_in"], out["files_out"]) == (snapshots_before, 2)
    assert out["checksum_in"] == out["checksum_out"]
    # f1 is still read by the tagged snapshot; f2, f3 only by expired ones
    assert os.path.exists(_local(f1))
    assert not os.path.exists(_local(f2)) and not os.path.exists(_local(f3))
    assert out["plan"]["deleted"]["by_kind"]["data"] == 2
    assert out["bytes_in"] > 0
    assert both_readers(table) == before
    assert table.scan(snapshot_id=first.snapshot_id).to_arrow().num_rows == 10
    # every file any remaining snapshot references is still on disk
    on_disk = {_local(p) for p in files_on_disk(table)}
    reader = ReferenceReader(table)
    assert {_local(p) for p in reader.table_references(table)} <= on_disk
    with session_scope(settings) as s:
        events = [e.event for e in audit_events(s, out["id"])]
    assert events == ["action.submitted", "action.started", "action.checkpointed", "snapshots.files_deleted",
                      "action.succeeded"]

    again = _run(settings, table, "expire_snapshots", older_than="1s", allow_short_retention="true")
    assert (again["state"], again["reason"]) == ("skipped", "nothing_to_expire")


def test_expire_snapshots_retain_last_and_dry_run(settings, catalog):
    table = make_table(catalog, {DAY1: 4}, rows=10)
    ids = [s.snapshot_id for s in table.metadata.snapshots]
    on_disk = files_on_disk(table)
    time.sleep(1.1)
    dry = _run(settings, table, "expire_snapshots", dry_run=True, older_than="0s", allow_short_retention=True,
               retain_last=3)
    assert (dry["state"], dry["reason"]) == ("skipped", "dry_run")
    assert dry["plan"]["expire"] == [ids[0]]
    assert dry["plan"]["kept"] == {"current": 1, "retain_last": 2}
    assert files_on_disk(table) == on_disk
    out = _run(settings, table, "expire_snapshots", older_than="0s", allow_short_retention=True, retain_last=3)
    table.refresh()
    assert out["state"] == "succeeded"
    assert [s.snapshot_id for s in table.metadata.snapshots] == ids[1:]
    # appends share data files with later snapshots: only the expired manifest list goes
    assert out["plan"]["deleted"]["by_kind"] == {"manifest-list": 1}


def test_expire_snapshots_wins_against_a_writer_through_the_one_commit_loop(settings, catalog, monkeypatch):
    """A writer commits before each of the first six expiry attempts (more than any fixed small retry count):
    every attempt plans again on the new head, waits its jittered backoff, and the seventh commits."""
    from autooptimize.services.hygiene import expire

    table = make_table(catalog, {DAY1: 4}, rows=10)
    old_ids = [s.snapshot_id for s in table.metadata.snapshots]
    time.sleep(1.1)
    writer = catalog.load_table(table.name())
    commit = expire._commit_expiry
    raced = []

    def racing_commit(t, ids):
        if len(raced) < 6:
            writer.append(batch(50_000 + 10 * len(raced), 10, DAY2))
            raced.append(ids)
        return commit(t, ids)

    monkeypatch.setattr(expire, "_commit_expiry", racing_commit)
    out = _run(settings, table, "expire_snapshots", older_than="1s", allow_short_retention=True, retain_last=2)
    assert out["state"] == "succeeded", out
    assert len(raced) == 6
    table.refresh()
    remaining = [s.snapshot_id for s in table.metadata.snapshots]
    assert not set(old_ids[:3]) & set(remaining) and len(remaining) >= 2
    assert table.scan().to_arrow().num_rows == 40 + 60, "every row the writer committed is read"


def test_expire_snapshots_resumes_deleting_after_a_crash(settings, catalog):
    table, _first, (_f1, f2, f3) = _history_table(catalog)
    before = both_readers(table)
    time.sleep(1.1)
    ident = identifier(table)
    action_id = actions.submit(settings, ident, kind="expire_snapshots", dispatch=False,
                               options={"older_than": "1s", "allow_short_retention": "yes"})

    def crash(_snapshot_id: int) -> None:
        raise Crash()

    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=None, hooks=Hooks(after_commit=crash))
    assert os.path.exists(_local(f2)), "the crash came before any deletion"
    out = actions.execute(settings, action_id, spark=None)
    assert (out["state"], out["reason"]) == ("succeeded", "resumed_from_checkpoint")
    assert not os.path.exists(_local(f2)) and not os.path.exists(_local(f3))
    assert both_readers(table) == before


# ------------------------------------------------------------------------------------------- remove_orphans


def test_remove_orphans_deletes_only_old_unreferenced_files_and_dry_run_lists_them(settings, catalog):
    table = make_table(catalog, {DAY1: 2, DAY2: 1}, rows=10)
    first = table.metadata.snapshots[0]
    table.overwrite(batch(500, 10, DAY1))  # earlier files: referenced only by older snapshots now
    ident = identifier(table)
    before = both_readers(table)
    referenced_before = sorted(ReferenceReader(table).table_references(table))
    data = table.location().removeprefix("file://") + "/data"
    tracking.track(settings, ident)

    # an action still queued owns its output directory; one that failed leaves litter behind
    queued = actions.submit(settings, ident, kind="merge", partition="day=2026-01-01", dispatch=False)
    failed = actions.submit(settings, ident, kind="merge", partition="day=2026-01-02", dispatch=False)
    actions.fail_permanently(settings, failed, "test: gave up")
    _age_all(table)  # from here on age alone protects nothing that was there before
    stray = _write_stray(f"{data}/day=2026-01-01/00000-stray.parquet")
    leftover = _write_stray(f"{data}/day=2026-01-02/ao-{failed}/g0/part-0.parquet")
    in_flight = _write_stray(f"{data}/day=2026-01-01/ao-{queued}/g0/part-0.parquet")
    unknown = _write_stray(f"{data}/day=2026-01-01/ao-{uuid.uuid4()}/g0/part-0.parquet")
    hidden = _write_stray(f"{data}/.hidden.parquet")
    young = _write_stray(f"{data}/day=2026-01-01/young.parquet", when=None)
    # a calibration sample a crash left (never an action, never committed): litter once old; one being
    # written now stays
    probe = _write_stray(f"{data}/day=2026-01-02/ao-calibrate-0123456789ab/g3/part-0.parquet")
    probing = _write_stray(f"{data}/day=2026-01-01/ao-explain-ba9876543210/calibration/part-0.parquet", when=None)
    on_disk = files_on_disk(table)

    dry = _run(settings, table, "remove_orphans", dry_run=True, min_age="1h")
    assert (dry["state"], dry["reason"]) == ("skipped", "dry_run")
    listed = {_local(p) for p in dry["plan"]["orphan_sample"]}
    assert listed == {stray, leftover, probe}
    assert dry["files_in"] == 3
    assert dry["plan"]["kept"] == {"in_flight_action": 1, "unknown_ao_directory": 1, "hidden": 1, "too_young": 2}
    assert files_on_disk(table) == on_disk, "a dry run deleted something"

    out = _run(settings, table, "remove_orphans", min_age="1h")
    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"]) == (3, 3)
    assert out["bytes_out"] == out["bytes_in"] > 0
    assert files_on_disk(table) == on_disk - {stray, leftover, probe}
    for kept in (in_flight, unknown, hidden, young, probing):
        assert os.path.exists(kept)
    assert sorted(ReferenceReader(table).table_references(table)) == referenced_before
    assert {_local(p) for p in referenced_before} <= files_on_disk(table)
    assert both_readers(table) == before
    assert table.scan(snapshot_id=first.snapshot_id).to_arrow().num_rows == 10  # time travel still reads
    with session_scope(settings) as s:
        events = [e.event for e in audit_events(s, out["id"])]
        deleted = next(e for e in audit_events(s, out["id"]) if e.event == "orphans.deleted").detail
    assert events == ["action.submitted", "action.started", "orphans.deleted", "action.succeeded"]
    assert {_local(p) for p in deleted["paths"]} == {stray, leftover, probe}

    again = _run(settings, table, "remove_orphans", min_age="1h")
    assert (again["state"], again["reason"]) == ("skipped", "no_orphans")


def test_remove_orphans_normalises_path_spellings(settings, catalog):
    """Files registered as ``file:/x`` and ``/x`` are the files listed as ``file:///x``: never orphans."""
    table = make_table(catalog, {DAY1: 1}, rows=10)
    data = table.location().removeprefix("file://") + "/data/added"
    short = _write_stray(f"{data}/short-form.parquet", when=None)
    bare = _write_stray(f"{data}/bare-path.parquet", when=None)
    table.add_files([f"file:{short}", bare])
    table.refresh()
    stored = {str(p) for p in live_files(table)}
    assert f"file:{short}" in stored and bare in stored
    before = both_readers(table)
    _age_all(table)
    out = _run(settings, table, "remove_orphans", min_age="1h")
    assert (out["state"], out["reason"]) == ("skipped", "no_orphans"), out
    assert os.path.exists(short) and os.path.exists(bare)
    assert both_readers(table) == before


def test_remove_orphans_keeps_the_young_files_of_an_uncommitted_writer(settings, catalog):
    """A pyiceberg transaction writes its data file, manifest and manifest list before it commits."""
    table = make_table(catalog, {DAY1: 1}, rows=10)
    _age_all(table)
    before_disk = files_on_disk(table)
    tx = table.transaction()
    tx.append(batch(7000, 10))
    staged = files_on_disk(table) - before_disk
    assert any(p.endswith(".parquet") for p in staged) and any(p.endswith(".avro") for p in staged)

    out = _run(settings, table, "remove_orphans", min_age="1h")
    assert out["plan"]["kept"].get("too_young", 0) >= len(staged), out
    assert out["files_out"] in (0, None)
    assert staged <= files_on_disk(table)

    tx.commit_transaction()
    table.refresh()
    assert table.scan().to_arrow().num_rows == 20
    assert pyarrow_checksum(table) == table_checksum(table)


@pytest.mark.spark
def test_remove_orphans_never_touches_a_running_merge_output(settings, spark, catalog):
    """Done-when 3: the output of an in-flight merge survives an orphan removal run between its write and
    its commit — even with every file aged past min_age, so only the in-flight rule protects it."""
    table = make_table(catalog, {DAY1: 4}, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    before = both_readers(table)
    seen: dict = {}

    def orphan_run_mid_merge() -> None:
        _age_all(table)
        # its data output, and the manifests written while its Spark job ran (services/rewrite/ahead.py)
        seen["outputs"] = {p for p in files_on_disk(table) if "/ao-" in p}
        seen["ahead"] = {p for p in files_on_disk(table) if f"/metadata/ao-{merge_id}-" in p}
        seen["orphans"] = _run(settings, table, "remove_orphans", min_age="1h")
        seen["after"] = {p for p in files_on_disk(table) if "/ao-" in p}

    merge_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)
    out = actions.execute(settings, merge_id, spark=spark, hooks=Hooks(before_commit=orphan_run_mid_merge))

    assert seen["outputs"], "the merge wrote nothing before its commit"
    assert seen["ahead"] and seen["ahead"] <= seen["outputs"]
    assert seen["after"] == seen["outputs"]
    assert seen["orphans"]["plan"]["kept"]["in_flight_action"] == len(seen["outputs"])
    assert out["state"] == "succeeded", out
    assert both_readers(table) == before
    # after the commit the outputs are referenced; the merge inputs are still read by older snapshots
    again = _run(settings, table, "remove_orphans", min_age="1h")
    assert (again["state"], again["reason"]) == ("skipped", "no_orphans"), again
    assert both_readers(table) == before


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("kind", "options", "needles"), [
    ("remove_orphans", {"min_age": "10m"}, ["min_age", "10m", "allow_short_min_age"]),
    ("remove_orphans", {"min_age": "soon"}, ["min_age", "soon", "7d"]),
    ("remove_orphans", {"dry_run": "true"}, ["--dry-run"]),
    ("remove_orphans", {"min_age": "3d", "allow_short_min_age": "perhaps"}, ["allow_short_min_age", "perhaps"]),
    ("remove_orphans", {"older_than": "3d"}, ["older_than", "valid: min_age, allow_short_min_age"]),
    ("expire_snapshots", {"older_than": "5m"}, ["older_than", "allow_short_retention"]),
    ("expire_snapshots", {"retain_last": "0"}, ["retain_last", "≥ 1"]),
    ("rewrite_manifests", {"manifest_threshold": "many"}, ["manifest_threshold", "many"]),
    ("rewrite_manifests", {"target_manifest_size": "-1"}, ["target_manifest_size"]),
])
def test_bad_options_are_named_and_change_nothing(settings, catalog, kind, options, needles):
    table = make_table(catalog, {DAY1: 1}, rows=5)
    tracking.track(settings, identifier(table))
    counts = _counts(settings)
    with pytest.raises(InvalidArgument) as info:
        actions.submit(settings, identifier(table), kind=kind, options=options, dispatch=False)
    for needle in needles:
        assert needle in str(info.value)
    assert _counts(settings) == counts


def test_unknown_table_and_partition_are_refused(settings, catalog):
    counts = _counts(settings)
    with pytest.raises(TableNotFound, match="test.nope"):
        actions.submit(settings, "test.nope", kind="remove_orphans", dispatch=False)
    table = make_table(catalog, {DAY1: 1}, rows=5)
    with pytest.raises(InvalidArgument, match="whole table"):
        actions.submit(settings, identifier(table), kind="expire_snapshots", partition="day=2026-01-01",
                       dispatch=False)
    assert _counts(settings)[0] == counts[0]


# ---------------------------------------------------------------------------------------------- the sweep


def test_sweep_submits_what_each_table_needs_and_respects_allowed_actions(settings, catalog):
    busy = make_table(catalog, {DAY1: 5}, rows=5)
    busy.transaction().set_properties({"history.expire.max-snapshot-age-ms": "1"}).commit_transaction()
    quiet = make_table(catalog, {DAY1: 1}, rows=5)
    limited = make_table(catalog, {DAY1: 5}, rows=5)
    tracking.track(settings, identifier(busy), allow="expire_snapshots,remove_orphans")
    tracking.track(settings, identifier(quiet), allow=["expire_snapshots", "remove_orphans"])
    tracking.track(settings, identifier(limited), allowed_actions="merge,rewrite_manifests")
    swept = settings.model_copy(update={"manifest_threshold": 3})
    time.sleep(0.01)

    first = hygiene.sweep_hygiene(swept, dispatch=False)

    assert sorted(first[identifier(busy)]) == ["expire_snapshots", "remove_orphans", "rewrite_manifests"]
    assert first[identifier(quiet)] == ["remove_orphans"]  # one manifest, snapshots within 5 days
    assert first[identifier(limited)] == ["rewrite_manifests"]
    with session_scope(settings) as s:
        rows = s.execute(select(Action.kind, Action.trigger, Action.state)
                         .where(Action.kind.in_(hygiene.HYGIENE_KINDS))).tuples().all()
    count = len(rows)
    assert {(t, st) for _, t, st in rows} >= {("schedule", "queued")}

    hygiene.sweep_hygiene(swept, dispatch=False)  # still queued: deduplicated, nothing new
    with session_scope(settings) as s:
        assert s.scalar(select(func.count()).select_from(Action)
                        .where(Action.kind.in_(hygiene.HYGIENE_KINDS))) == count

    # the queued actions run like any other; the manifest rewrite leaves one manifest
    ident = identifier(busy)
    with session_scope(settings) as s:
        rewrite_id = s.scalar(select(Action.id).join(TrackedTable, TrackedTable.id == Action.table_id)
                              .where(TrackedTable.identifier == ident, Action.kind == "rewrite_manifests"))
    before = both_readers(busy)
    out = actions.execute(swept, rewrite_id, spark=None)
    assert out["state"] == "succeeded" and out["trigger"] == "schedule", out
    assert both_readers(busy) == before
    assert "rewrite_manifests" not in hygiene.sweep_hygiene(swept, dispatch=False).get(ident, [])


def test_orphan_sweep_interval(settings, catalog):
    table = make_table(catalog, {DAY1: 1}, rows=5)
    now = datetime.now(UTC)
    week = timedelta(seconds=settings.orphan_sweep_interval_seconds)
    kinds = lambda last: [d.kind for d in hygiene.hygiene_decisions(settings, table, hygiene.HYGIENE_KINDS, last, now)]  # noqa: E731
    assert kinds(None) == ["remove_orphans"]
    assert kinds(now - week + timedelta(hours=1)) == []
    assert kinds(now - week) == ["remove_orphans"]
    assert hygiene.hygiene_decisions(settings.model_copy(update={"orphan_sweep_interval_seconds": 0}), table,
                                     hygiene.HYGIENE_KINDS, None, now) == []
    assert hygiene.hygiene_decisions(settings, table, ("merge",), None, now) == []


def test_beat_task_submits_through_the_queue(settings, catalog):
    from tasks.control import hygiene_sweep

    table = make_table(catalog, {DAY1: 1}, rows=5)
    ident = identifier(table)
    tracking.track(settings, ident, allow="remove_orphans")
    submitted = hygiene_sweep.run()
    assert submitted[ident] == ["remove_orphans"]
    with session_scope(settings) as s:
        row = s.execute(select(Action.trigger, Action.state).join(TrackedTable, TrackedTable.id == Action.table_id)
                        .where(TrackedTable.identifier == ident)).one()
    assert tuple(row) == ("schedule", "queued")


def test_cli_dry_run_lists_orphans_and_bad_option_exits_2(settings, catalog):
    import json
    import subprocess
    import sys

    table = make_table(catalog, {DAY1: 1}, rows=5)
    ident = identifier(table)
    stray = _write_stray(table.location().removeprefix("file://") + "/data/old-stray.parquet")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "autooptimize.cli", "optimize", ident, "--action",
                               "remove_orphans", *args], capture_output=True, text=True, timeout=120)

    done = cli("--dry-run", "--option", "min-age=1h", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["reason"] == "dry_run" and [_local(p) for p in shown["plan"]["orphan_sample"]] == [stray]
    bad = cli("--option", "min-age=5m")
    assert bad.returncode == 2 and "allow_short_min_age" in bad.stderr
    assert os.path.exists(stray)
