"""Committing one batch: one fast-append snapshot carrying the batch id, then the bookkeeping (rows,
callback, removal of the buffered files and of leftovers of earlier attempts)."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from sqlalchemy import select, update

from autooptimize.config import Settings
from autooptimize.errors import ConflictAbort, VerificationFailed
from autooptimize.iceberg import paths
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import ACTION_KIND_PROPERTY, live_data_paths
from autooptimize.iceberg.commits import StagedAppend, apply_with_retry
from autooptimize.redact import redact
from autooptimize.services.buffer.hooks import BufferHooks, call_hook
from autooptimize.services.refusals import record_refusals
from autooptimize.storage.buffer_models import BatchState, BufferBatch, BufferFile, BufferTable, FileState
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit, now
from spark_actors.rewrite import list_parquet

log = logging.getLogger(__name__)
BATCH_ID_PROPERTY = "autooptimize.batch-id"
#: a batch in these states may have landed in the catalog without PostgreSQL knowing it yet
UNFINISHED = (BatchState.CLAIMED.value, BatchState.WRITTEN.value)


def find_batch_snapshot(table: Table, batch_id: str) -> Snapshot | None:
    """The snapshot that committed ``batch_id``, if the table's metadata still has it."""
    for snapshot in table.metadata.snapshots:
        if snapshot.summary is not None and snapshot.summary.get(BATCH_ID_PROPERTY) == batch_id:
            return snapshot
    return None


def find_committed_outputs(table: Table, checkpoint: dict[str, Any]) -> int | None:
    """The snapshot that added the checkpoint's outputs, when one of them is live in the table.

    Only this batch writes under its directory, so a live output means the batch landed, even when its
    snapshot has since been expired by another engine (our own expiry keeps it, see
    :func:`unrecorded_batches`). Reads the current snapshot's data manifests: only done on a resume.
    """
    outputs = {paths.normalise_path(p) for part in checkpoint.get("partitions", []) for p in part["outputs"]}
    snapshot = table.current_snapshot()
    if snapshot is None or not outputs:
        return None
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if paths.normalise_path(str(entry.data_file.file_path)) in outputs:
                return int(entry.snapshot_id) if entry.snapshot_id is not None else snapshot.snapshot_id
    return None


def unrecorded_batches(settings: Settings, snapshots: list[Snapshot]) -> set[str]:
    """Batch ids carried by ``snapshots`` whose commit PostgreSQL has not recorded yet.

    For such a batch the snapshot is the only sign that it landed: a resumed consolidation looks for it
    there, so expiry must keep it until :func:`record_commit` has run (from then on the batch's row says
    it is committed, whatever happens to the snapshot). Read after the snapshots: a batch's row exists
    before its commit, so every batch in them is either unfinished here or already recorded.
    """
    ids = {s.summary[BATCH_ID_PROPERTY] for s in snapshots if s.summary is not None and s.summary.get(BATCH_ID_PROPERTY)}
    if not ids:
        return set()
    with session_scope(settings) as session:
        return set(session.scalars(select(BufferBatch.id).where(BufferBatch.id.in_(ids),
                                                                BufferBatch.state.in_(UNFINISHED))))


class _BatchCommitted(ConflictAbort):
    """The head already holds the batch: an earlier attempt landed though its answer was lost."""

    def __init__(self, snapshot_id: int) -> None:
        super().__init__(f"batch already committed in snapshot {snapshot_id}")
        self.snapshot_id = snapshot_id


def commit_append(settings: Settings, table: Table, batch_id: str, data_files: list[Any]) -> int:
    """One append snapshot carrying the batch id, through the one commit loop
    (autooptimize.iceberg.commits): its manifest is written once and applied again on a moved head.
    Every attempt first checks the head for the batch id, so a batch is never committed twice."""
    properties = {BATCH_ID_PROPERTY: batch_id, ACTION_KIND_PROPERTY: "consolidate"}

    def not_yet_committed(head: Any) -> None:
        for snapshot in head.snapshots:
            if snapshot.summary is not None and snapshot.summary.get(BATCH_ID_PROPERTY) == batch_id:
                raise _BatchCommitted(snapshot.snapshot_id)

    try:
        return apply_with_retry(table, StagedAppend(table, data_files, check=not_yet_committed),
                                properties).snapshot_id
    except _BatchCommitted as done:
        return done.snapshot_id


def record_commit(settings: Settings, batch_id: str, identifier: str, snapshot_id: int, hooks: BufferHooks,
                   reason: str | None, seconds: float | None = None) -> dict[str, Any]:
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id, with_for_update=True)
        assert batch is not None
        checkpoint = batch.checkpoint or {}
        batch.state, batch.committed_snapshot_id, batch.committed_at = (
            BatchState.COMMITTED.value, snapshot_id, now())
        batch.rows_out = checkpoint.get("rows_out", batch.rows_out)
        batch.checksum_in, batch.checksum_out = checkpoint.get("checksum_in"), checkpoint.get("checksum_out")
        batch.files_out = sum(len(p["outputs"]) for p in checkpoint.get("partitions", [])) or batch.files_out
        batch.bytes_out = checkpoint.get("bytes_out", batch.bytes_out)
        if seconds is not None:
            batch.timings = {**(batch.timings or {}), "total": round(seconds, 3)}
        session.execute(update(BufferFile).where(BufferFile.batch_id == batch_id,
                                                 BufferFile.state == FileState.CLAIMED.value)
                        .values(state=FileState.COMMITTED.value))
        row = session.get(BufferTable, batch.buffer_table_id)
        assert row is not None
        callback = row.callback_url
        event: dict[str, Any] = {"batch": batch_id, "table": identifier, "snapshot_id": snapshot_id, "files": batch.files,
                 "rows": batch.rows_out, "files_out": batch.files_out, "checksum": batch.checksum_out,
                 "partitions": [p["key"] for p in checkpoint.get("partitions", [])], "reason": reason}
        audit(session, "buffer.batch_committed", batch=batch_id, table=identifier, snapshot_id=snapshot_id,
              files=event["files"], rows=event["rows"], files_out=event["files_out"], checksum=event["checksum"],
              partitions=event["partitions"], reason=reason)
        table_id = batch.buffer_table_id
    call_hook(hooks.after_bookkeeping)
    if callback:
        _notify(settings, callback, event)
    finish_committed(settings, table_id, only=batch_id)
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id)
        assert batch is not None
        return batch_view(batch, identifier, reason)


def _notify(settings: Settings, url: str, event: dict[str, Any]) -> None:
    """POST the committed batch to the table's callback (at least once per run; failures are audited)."""
    body = json.dumps({"event": "buffer.batch_committed", **event}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - http(s) only, validated
            response.read()
    except Exception as exc:
        log.warning("callback %s failed for batch %s: %s", redact(url), event["batch"], type(exc).__name__)
        with session_scope(settings) as session:
            audit(session, "buffer.callback_failed", batch=event["batch"], url=redact(url),
                  error=type(exc).__name__)


def finish_committed(settings: Settings, table_id: int, only: str | None = None) -> int:
    """Remove buffer files of committed batches (and uncommitted leftovers in their directories)."""
    with session_scope(settings) as session:
        stmt = select(BufferBatch.id, BufferBatch.checkpoint).where(
            BufferBatch.buffer_table_id == table_id, BufferBatch.state == BatchState.COMMITTED.value)
        if only is not None:
            stmt = stmt.where(BufferBatch.id == only)
        pending = session.execute(stmt).all()
        identifier = session.get(BufferTable, table_id).identifier  # type: ignore[union-attr]
    for batch_id, checkpoint in pending:
        with session_scope(settings) as session:
            buffered = list(session.scalars(select(BufferFile.path).where(
                BufferFile.batch_id == batch_id, BufferFile.state == FileState.COMMITTED.value)))
        refused = []
        for path in buffered:
            try:
                paths.delete_file(str(settings.buffer_dir), path)
            except paths.PathRefused as exc:  # recorded, left alone; the batch is done all the same
                refused.append(exc)
        record_refusals(settings, refused, batch=batch_id, table=identifier)
        if checkpoint:
            _delete_strays(settings, identifier, checkpoint)
        with session_scope(settings) as session:
            session.execute(update(BufferBatch).where(BufferBatch.id == batch_id)
                            .values(state=BatchState.DONE.value, finished_at=now()))
    return len(pending)


def _delete_strays(settings: Settings, identifier: str, checkpoint: dict[str, Any]) -> None:
    """Delete files in the batch's directory that its commit does not reference (earlier attempts)."""
    output_dir = checkpoint["output_dir"]
    batch_dir = output_dir.rsplit("/", 1)[0]
    keep = {paths.normalise_path(p) for part in checkpoint["partitions"] for p in part["outputs"]}
    table = load_table(settings, identifier)
    if not _owned_batch_dir(table, batch_dir):
        return
    refused = []
    for entry in paths.walk(table.location(), batch_dir, table.io):
        if entry.kind != "dir" and paths.normalise_path(entry.uri) not in keep:
            try:
                paths.delete_file(table.location(), entry.uri, table.io)
            except paths.PathRefused as exc:
                refused.append(exc)
    record_refusals(settings, refused, table=identifier)


def _owned_batch_dir(table: Table, directory: str) -> bool:
    """Whether ``directory`` is a batch directory resolving inside the table's location."""
    return "/ao-batch-" in directory and paths.refusal(table.location(), directory, "delete") is None


def delete_uncommitted(table: Table, batch_dir: str) -> None:
    """Remove a batch directory that no snapshot references (the caller checked the history).
    PathRefused for a directory that is not a batch directory resolving inside the table."""
    if "/ao-batch-" not in batch_dir:
        raise paths.PathRefused(batch_dir, table.location(), "not_a_batch_directory", "delete")
    paths.check(table.location(), batch_dir, "delete")
    table.refresh()
    live = {paths.normalise_path(p) for p in live_data_paths(table)}
    if any(paths.normalise_path(p) in live for p in list_parquet(batch_dir, table.io)):
        raise VerificationFailed(f"refusing to delete {batch_dir}: the table references files in it")
    paths.delete_tree(table.location(), batch_dir, table.io)


def batch_view(batch: BufferBatch, identifier: str, reason: str | None = None) -> dict[str, Any]:
    return {"batch": batch.id, "table": identifier, "state": batch.state, "reason": reason,
            "trigger": batch.trigger, "files": batch.files, "rows_in": batch.rows_in, "rows_out": batch.rows_out,
            "files_out": batch.files_out, "bytes_in": batch.bytes_in, "bytes_out": batch.bytes_out,
            "checksum_in": batch.checksum_in, "checksum_out": batch.checksum_out,
            "snapshot_id": batch.committed_snapshot_id, "attempts": batch.attempts}
