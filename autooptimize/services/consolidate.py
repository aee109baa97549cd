"""Consolidation of buffered files into one append snapshot per batch, exactly once.

A batch's id is decided before any work: a row in ``ao_buffer_batches`` claims its files. The append
snapshot's summary carries the id (``autooptimize.batch-id``). On every run, and so on every retry:

1. the id is in the table's history → only the bookkeeping is left (mark committed, remove buffer files);
2. the batch's output is checkpointed and still on disk → commit it without rewriting;
3. otherwise read the files with Spark, cast them to the table's schema by name, write target-size files
   per partition under ``<data>/ao-batch-<id>/a<attempt>/``, verify rows and content checksum of the cast
   input against the written output, checkpoint, commit.

Buffered files are removed only after the commit and its bookkeeping are durable. A file Spark cannot
read, or whose rows break the table's schema, is quarantined with its reason and the rest of its batch
goes on without it. One consolidator per table at a time (a PostgreSQL advisory lock), so a batch found
unfinished by the lock holder was abandoned by a dead worker and is resumed, oldest first.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record
from sqlalchemy import func, select, text, update

from autooptimize.config import Settings
from autooptimize.domain.buffer_rules import evaluate
from autooptimize.errors import Retry, ServiceUnavailable, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import ACTION_KIND_PROPERTY, data_file_from_footer
from autooptimize.services.buffer import (
    QUARANTINE_DIR,
    Rejected,
    buffer_level,
    check_file,
    poll_watch,
    request_consolidation,
    rules_of,
    sweep_orphans,
)
from autooptimize.services.merge import data_location
from autooptimize.storage.buffer_models import BatchState, BufferBatch, BufferFile, BufferTable, FileState
from autooptimize.storage.db import get_engine, session_scope
from autooptimize.storage.repositories import audit, now

log = logging.getLogger(__name__)
BATCH_ID_PROPERTY = "autooptimize.batch-id"
LOCK_CLASS = 764252  # first key of the per-table advisory lock (the second is the buffer-table id)
UNFINISHED = (BatchState.CLAIMED.value, BatchState.WRITTEN.value)


@dataclass
class Hooks:
    """Fault-injection points (tests kill the process in them); each defaults to doing nothing."""

    after_claim: Callable[[str], None] | None = None
    after_write: Callable[[list[str]], None] | None = None
    after_checkpoint: Callable[[], None] | None = None
    after_commit: Callable[[int], None] | None = None
    after_bookkeeping: Callable[[], None] | None = None


def _call(hook: Callable[..., None] | None, *args: Any) -> None:
    if hook is not None:
        hook(*args)


# --- the per-table loop --------------------------------------------------------------------------

def consolidate_table(settings: Settings, identifier: str, *, spark: Any = None, flush: bool = False,
                      hooks: Hooks | None = None, wait: float | None = None) -> dict[str, Any]:
    """Finish abandoned batches of ``identifier``, then consolidate while a rule fires (``flush``: until
    everything buffered when called is consolidated, whatever the rules say).

    ``finished`` counts committed batches whose buffer files were only now removed (an earlier run died
    after its bookkeeping). ``busy`` is True when another consolidator holds the table (``wait``: seconds
    to wait for it).
    """
    from autooptimize.services.buffer import _table_info

    info = _table_info(settings, identifier)
    table_id = info.buffer_table_id
    hooks = hooks or Hooks()
    batches: list[dict[str, Any]] = []
    with _table_lock(settings, table_id, wait) as held:
        if not held:
            return {"table": identifier, "busy": True, "batches": [], "finished": 0}
        _clear_request(settings, identifier)
        finished = finish_committed(settings, table_id)
        spark_session = spark
        for batch_id in _unfinished(settings, table_id):
            spark_session = spark_session or _spark(settings)
            batches.append(run_batch(settings, batch_id, spark_session, hooks))
        flush_until = _db_time(settings) if flush else None
        while (claimed := claim_batch(settings, table_id, flush_until=flush_until)) is not None:
            _call(hooks.after_claim, claimed)
            spark_session = spark_session or _spark(settings)
            batches.append(run_batch(settings, claimed, spark_session, hooks))
    return {"table": identifier, "busy": False, "batches": batches, "finished": finished}


def _spark(settings: Settings) -> Any:
    from spark_actors.session import get_session

    return get_session(settings)


@contextmanager
def _table_lock(settings: Settings, table_id: int, wait: float | None) -> Iterator[bool]:
    """A session-level advisory lock on a dedicated connection: a dead worker's lock dies with it."""
    conn = get_engine(settings).connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        deadline = time.monotonic() + (wait or 0)
        while True:
            held = bool(conn.execute(text("SELECT pg_try_advisory_lock(:c, :t)"),
                                     {"c": LOCK_CLASS, "t": table_id}).scalar())
            if held or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        try:
            yield held
        finally:
            if held:
                conn.execute(text("SELECT pg_advisory_unlock(:c, :t)"), {"c": LOCK_CLASS, "t": table_id})
    finally:
        conn.close()


def _clear_request(settings: Settings, identifier: str) -> None:
    try:
        from tasks.dispatch import clear_consolidation_request

        clear_consolidation_request(settings, identifier)
    except ServiceUnavailable:
        pass


def _db_time(settings: Settings) -> datetime:
    with session_scope(settings) as session:
        return session.execute(select(text("now()"))).scalar_one()


def _unfinished(settings: Settings, table_id: int) -> list[str]:
    with session_scope(settings) as session:
        return list(session.scalars(select(BufferBatch.id).where(
            BufferBatch.buffer_table_id == table_id, BufferBatch.state.in_(UNFINISHED))
            .order_by(BufferBatch.created_at, BufferBatch.id)))


def claim_batch(settings: Settings, table_id: int, *, flush_until: datetime | None = None) -> str | None:
    """Claim the oldest buffered files (up to the rules' batch limits) for a new batch, when a rule fires
    (or, with ``flush_until``, while files that arrived before it wait). Returns the batch id or None."""
    with session_scope(settings) as session:
        row = session.get(BufferTable, table_id)
        assert row is not None
        rules = rules_of(settings, row)
        if flush_until is None:
            decision = evaluate(rules, buffer_level(session, table_id))
            if not decision.fire:
                return None
            trigger = decision.rule or "rule"
        else:
            trigger = "flush"
        stmt = (select(BufferFile.id, BufferFile.bytes, BufferFile.partitions)
                .where(BufferFile.buffer_table_id == table_id, BufferFile.state == FileState.BUFFERED.value)
                .order_by(BufferFile.arrived_at, BufferFile.id)
                .limit(rules.max_files).with_for_update(skip_locked=True))
        if flush_until is not None:
            stmt = stmt.where(BufferFile.arrived_at <= flush_until)
        candidates = session.execute(stmt).all()
        if not candidates:
            return None
        chosen: list[int] = []
        total = 0
        first_partitions = candidates[0].partitions
        for file_id, size, partitions in candidates:
            if not rules.combinable and partitions != first_partitions:
                continue
            if chosen and rules.max_bytes is not None and total + size > rules.max_bytes:
                break
            chosen.append(file_id)
            total += size
        batch_id = str(uuid.uuid4())
        rows = session.scalar(select(func.coalesce(func.sum(BufferFile.rows), 0)).where(BufferFile.id.in_(chosen)))
        session.add(BufferBatch(id=batch_id, buffer_table_id=table_id, state=BatchState.CLAIMED.value,
                                trigger=trigger, files=len(chosen), bytes_in=total, rows_in=int(rows or 0),
                                attempts=0, timings={}))
        session.flush()
        session.execute(update(BufferFile).where(BufferFile.id.in_(chosen))
                        .values(state=FileState.CLAIMED.value, batch_id=batch_id))
        audit(session, "buffer.batch_claimed", table_id=None, batch=batch_id, table=row.identifier,
              trigger=trigger, files=len(chosen), bytes=total)
    return batch_id


# --- one batch -----------------------------------------------------------------------------------

def run_batch(settings: Settings, batch_id: str, spark: Any, hooks: Hooks | None = None) -> dict[str, Any]:
    """Execute (or finish) one batch; see the module docstring for the guarantees."""
    hooks = hooks or Hooks()
    started = time.monotonic()
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id, with_for_update=True)
        if batch is None:
            raise VerificationFailed(f"batch {batch_id} does not exist")
        identifier = session.get(BufferTable, batch.buffer_table_id).identifier  # type: ignore[union-attr]
        if batch.state not in UNFINISHED:
            return _view(batch, identifier)
        batch.attempts += 1
        attempt = batch.attempts
        checkpoint = batch.checkpoint
        state = batch.state
    table = load_table(settings, identifier)
    committed = find_batch_snapshot(table, batch_id)
    if committed is not None:
        return _record_commit(settings, batch_id, identifier, committed.snapshot_id, hooks, reason="already_committed")

    if state == BatchState.WRITTEN.value and checkpoint:
        data_files = _checkpointed_files(table, checkpoint)
        if data_files is not None:
            snapshot_id = _commit_append(settings, table, batch_id, data_files)
            _call(hooks.after_commit, snapshot_id)
            return _record_commit(settings, batch_id, identifier, snapshot_id, hooks, reason="resumed_from_checkpoint")
        log.warning("batch %s: checkpointed output is gone; consolidating again", batch_id)

    batch_dir = f"{data_location(table)}/ao-batch-{batch_id}"
    _delete_uncommitted(table, batch_dir)  # leftovers of an earlier attempt: nothing of it is committed
    output_dir = f"{batch_dir}/a{attempt}"
    result = _write_verified(settings, spark, table, batch_id, identifier, output_dir, hooks)
    if result is None:  # every file was quarantined
        _delete_uncommitted(table, batch_dir)
        with session_scope(settings) as session:
            batch = session.get(BufferBatch, batch_id, with_for_update=True)
            assert batch is not None
            batch.state, batch.finished_at = BatchState.EMPTY.value, now()
            audit(session, "buffer.batch_empty", batch=batch_id, table=identifier)
            return _view(batch, identifier)
    checkpoint, data_files = result
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id, with_for_update=True)
        assert batch is not None
        batch.state, batch.checkpoint = BatchState.WRITTEN.value, checkpoint
        batch.timings = {**(batch.timings or {}), "write": round(time.monotonic() - started, 3)}
        audit(session, "buffer.batch_checkpointed", batch=batch_id, table=identifier,
              files_out=len(data_files), rows=checkpoint["rows_out"])
    _call(hooks.after_checkpoint)
    snapshot_id = _commit_append(settings, table, batch_id, data_files)
    _call(hooks.after_commit, snapshot_id)
    out = _record_commit(settings, batch_id, identifier, snapshot_id, hooks, reason=None,
                         seconds=time.monotonic() - started)
    return out


def _claimed_files(settings: Settings, batch_id: str) -> list[BufferFile]:
    with session_scope(settings) as session:
        return list(session.scalars(select(BufferFile).where(
            BufferFile.batch_id == batch_id, BufferFile.state == FileState.CLAIMED.value).order_by(BufferFile.id)))


def _write_verified(settings: Settings, spark: Any, table: Table, batch_id: str, identifier: str,
                    output_dir: str, hooks: Hooks) -> tuple[dict[str, Any], list[Any]] | None:
    """Write the batch's files, quarantining unreadable ones; None when none is left."""
    from spark_actors.consolidate import consolidate_files
    from spark_actors.rewrite import delete_dir

    schema, spec = table.schema(), table.spec()
    for _ in range(3):
        files = _claimed_files(settings, batch_id)
        missing = [f for f in files if not Path(f.path).is_file()]
        for f in missing:
            _quarantine(settings, f.id, identifier, "file vanished from the buffer zone")
        files = [f for f in files if f not in missing]
        if not files:
            return None
        groups: dict[str, list[str]] = {}
        for f in files:
            groups.setdefault(f.schema_fp, []).append(Path(f.path).as_uri())
        rows_in = sum(f.rows for f in files)
        bytes_in = sum(f.bytes for f in files)
        rows_per_file = max(1, int(_target_size(settings, table) / max(1.0, bytes_in / max(1, rows_in))))
        codec = table.properties.get("write.parquet.compression-codec", "zstd")
        try:
            out = consolidate_files(spark, schema, spec, list(groups.values()), output_dir, rows_per_file, codec)
            _call(hooks.after_write, [p for part in out.partitions for p in part.paths])
            if out.required_nulls:
                raise VerificationFailed(f"{out.required_nulls} row(s) have nulls in required columns")
        except (VerificationFailed, Rejected) as exc:
            bad = _probe(settings, identifier, files, schema, spec)
            delete_dir(output_dir)
            if not bad:
                raise VerificationFailed(f"batch {batch_id}: {exc}") from None
            continue
        except ServiceUnavailable:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("pyspark"):
                bad = _probe(settings, identifier, files, schema, spec)
                delete_dir(output_dir)
                if bad:
                    continue
                raise Retry(f"batch {batch_id}: Spark failed ({type(exc).__name__}); will retry", delay=10) from None
            raise
        if out.digest_in.rows != rows_in:
            delete_dir(output_dir)
            raise VerificationFailed(f"batch {batch_id}: Spark read {out.digest_in.rows} rows but the landed "
                                     f"footers hold {rows_in}")
        if out.digest_out != out.digest_in:
            delete_dir(output_dir)
            raise VerificationFailed(
                f"batch {batch_id}: output differs from its input: rows {out.digest_in.rows} → {out.digest_out.rows}, "
                f"checksum {out.digest_in.checksum} → {out.digest_out.checksum}")
        data_files = []
        partitions = []
        for part in out.partitions:
            record = Record(*part.values)
            for path in part.paths:
                data_files.append(data_file_from_footer(table, path, spec.spec_id, record))
            partitions.append({"values": [_json_value(v) for v in part.values], "outputs": list(part.paths),
                               "key": spec.partition_to_path(record, schema) if spec.fields else ""})
        footer_rows = sum(int(d.record_count) for d in data_files)
        if footer_rows != out.digest_out.rows:
            delete_dir(output_dir)
            raise VerificationFailed(f"batch {batch_id}: output footers hold {footer_rows} rows, "
                                     f"expected {out.digest_out.rows}")
        checkpoint = {
            "spec_id": spec.spec_id, "output_dir": output_dir, "file_ids": [f.id for f in files],
            "partitions": partitions, "rows_in": rows_in, "rows_out": footer_rows,
            "checksum_in": out.digest_in.checksum, "checksum_out": out.digest_out.checksum,
            "bytes_out": sum(int(d.file_size_in_bytes) for d in data_files),
        }
        return checkpoint, data_files
    raise VerificationFailed(f"batch {batch_id}: files kept failing after quarantining the bad ones")


def _target_size(settings: Settings, table: Table) -> int:
    return int(table.properties.get("write.target-file-size-bytes", settings.default_target_file_size))


def _probe(settings: Settings, identifier: str, files: list[BufferFile], schema: Any, spec: Any) -> list[int]:
    """Read each file fully with pyarrow; quarantine the ones that are not usable. Returns their ids."""
    bad = []
    required = [f.name for f in schema.fields if f.required]
    for f in files:
        try:
            check_file(Path(f.path), schema, spec)
            data = pq.read_table(f.path)
            nulls = [n for n in required if n in data.column_names and data.column(n).null_count]
            if nulls:
                raise Rejected(f"required column(s) {', '.join(nulls)} hold nulls")
            for name in data.column_names:  # every value must survive the read (corrupt pages fail here)
                pc.count(data.column(name))
        except Rejected as exc:
            _quarantine(settings, f.id, identifier, str(exc))
            bad.append(f.id)
        except Exception as exc:
            _quarantine(settings, f.id, identifier, f"unreadable: {type(exc).__name__}: {str(exc)[:200]}")
            bad.append(f.id)
    return bad


def _quarantine(settings: Settings, file_id: int, identifier: str, reason: str) -> None:
    """Move a buffered file aside with its reason; it leaves its batch and is never committed."""
    with session_scope(settings) as session:
        f = session.get(BufferFile, file_id, with_for_update=True)
        assert f is not None
        source = Path(f.path)
        target = settings.buffer_dir / identifier / QUARANTINE_DIR / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.exists():
            source.replace(target)
        f.path, f.state, f.reason = str(target), FileState.QUARANTINED.value, reason
        audit(session, "buffer.file_quarantined", table=identifier, batch=f.batch_id, file=f.source, reason=reason)
    log.warning("quarantined %s of %s: %s", target, identifier, reason)


def _json_value(value: Any) -> Any:
    return {"decimal": str(value)} if isinstance(value, Decimal) else value


def _from_json(value: Any) -> Any:
    return Decimal(value["decimal"]) if isinstance(value, dict) and "decimal" in value else value


def _checkpointed_files(table: Table, checkpoint: dict[str, Any]) -> list[Any] | None:
    """DataFiles of a checkpoint whose outputs all exist with the checkpointed row count, else None."""
    paths = [p for part in checkpoint["partitions"] for p in part["outputs"]]
    if not all(table.io.new_input(p).exists() for p in paths):
        return None
    data_files = [
        data_file_from_footer(table, p, checkpoint["spec_id"], Record(*[_from_json(v) for v in part["values"]]))
        for part in checkpoint["partitions"] for p in part["outputs"]
    ]
    if sum(int(d.record_count) for d in data_files) != checkpoint["rows_out"]:
        return None
    return data_files


# --- commit and bookkeeping ----------------------------------------------------------------------

def find_batch_snapshot(table: Table, batch_id: str) -> Snapshot | None:
    """The snapshot that committed ``batch_id``, if the table's metadata still has it."""
    for snapshot in table.metadata.snapshots:
        if snapshot.summary is not None and snapshot.summary.get(BATCH_ID_PROPERTY) == batch_id:
            return snapshot
    return None


def _commit_append(settings: Settings, table: Table, batch_id: str, data_files: list[Any]) -> int:
    """One fast-append snapshot carrying the batch id; a concurrent commit is retried (appends never
    conflict), after checking that the batch did not in fact land."""
    properties = {BATCH_ID_PROPERTY: batch_id, ACTION_KIND_PROPERTY: "consolidate"}
    for attempt in range(settings.commit_retries + 1):
        try:
            with table.transaction() as tx:
                with tx.update_snapshot(snapshot_properties=properties).fast_append() as append:
                    for data_file in data_files:
                        append.append_data_file(data_file)
            break
        except CommitFailedException:
            table.refresh()
            if find_batch_snapshot(table, batch_id) is not None:
                break
            if attempt == settings.commit_retries:
                raise Retry(f"batch {batch_id}: commit kept failing on concurrent updates", delay=5) from None
            time.sleep(0.2 * (attempt + 1))
    snapshot = find_batch_snapshot(table, batch_id)
    if snapshot is None:
        table.refresh()
        snapshot = find_batch_snapshot(table, batch_id)
    assert snapshot is not None, "the append committed but its snapshot is not in the metadata"
    return snapshot.snapshot_id


def _record_commit(settings: Settings, batch_id: str, identifier: str, snapshot_id: int, hooks: Hooks,
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
    _call(hooks.after_bookkeeping)
    if callback:
        _notify(settings, callback, event)
    finish_committed(settings, table_id, only=batch_id)
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id)
        assert batch is not None
        return _view(batch, identifier, reason)


def _notify(settings: Settings, url: str, event: dict[str, Any]) -> None:
    """POST the committed batch to the table's callback (at least once per run; failures are audited)."""
    from autooptimize.config import redact_url

    body = json.dumps({"event": "buffer.batch_committed", **event}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - http(s) only, validated
            response.read()
    except Exception as exc:
        log.warning("callback %s failed for batch %s: %s", redact_url(url), event["batch"], type(exc).__name__)
        with session_scope(settings) as session:
            audit(session, "buffer.callback_failed", batch=event["batch"], url=redact_url(url),
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
            paths = list(session.scalars(select(BufferFile.path).where(
                BufferFile.batch_id == batch_id, BufferFile.state == FileState.COMMITTED.value)))
        for path in paths:
            Path(path).unlink(missing_ok=True)
        if checkpoint:
            _delete_strays(settings, identifier, checkpoint)
        with session_scope(settings) as session:
            session.execute(update(BufferBatch).where(BufferBatch.id == batch_id)
                            .values(state=BatchState.DONE.value, finished_at=now()))
    return len(pending)


def _delete_strays(settings: Settings, identifier: str, checkpoint: dict[str, Any]) -> None:
    """Delete files in the batch's directory that its commit does not reference (earlier attempts)."""
    import pyarrow.fs as pafs

    output_dir = checkpoint["output_dir"]
    batch_dir = output_dir.rsplit("/", 1)[0]
    keep = {p for part in checkpoint["partitions"] for p in part["outputs"]}
    table = load_table(settings, identifier)
    if not _owned_batch_dir(table, batch_dir):
        return
    fs, root = pafs.FileSystem.from_uri(batch_dir)
    prefix = batch_dir.split("://", 1)[0] + "://" if "://" in batch_dir else ""
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and (prefix + info.path) not in keep \
                and _normal(prefix + info.path) not in {_normal(k) for k in keep}:
            fs.delete_file(info.path)


def _normal(path: str) -> str:
    return path.replace("file:///", "file:/").replace("file://", "file:")


def _owned_batch_dir(table: Table, directory: str) -> bool:
    location = table.location().rstrip("/") + "/"
    return directory.startswith(location) and "/ao-batch-" in directory


def _delete_uncommitted(table: Table, batch_dir: str) -> None:
    """Remove a batch directory that no snapshot references (the caller checked the history)."""
    from autooptimize.iceberg.commit import live_data_paths
    from spark_actors.rewrite import delete_dir, list_parquet

    if not _owned_batch_dir(table, batch_dir):
        raise VerificationFailed(f"refusing to delete {batch_dir}: not a batch directory in the table")
    table.refresh()
    live = live_data_paths(table)
    if any(p in live for p in list_parquet(batch_dir)):
        raise VerificationFailed(f"refusing to delete {batch_dir}: the table references files in it")
    delete_dir(batch_dir)


def _view(batch: BufferBatch, identifier: str, reason: str | None = None) -> dict[str, Any]:
    return {"batch": batch.id, "table": identifier, "state": batch.state, "reason": reason,
            "trigger": batch.trigger, "files": batch.files, "rows_in": batch.rows_in, "rows_out": batch.rows_out,
            "files_out": batch.files_out, "bytes_in": batch.bytes_in, "bytes_out": batch.bytes_out,
            "checksum_in": batch.checksum_in, "checksum_out": batch.checksum_out,
            "snapshot_id": batch.committed_snapshot_id, "attempts": batch.attempts}


# --- the periodic tick ---------------------------------------------------------------------------

def tick(settings: Settings) -> dict[str, Any]:
    """Beat's buffer tick: land settled files from the watched folder, then ask for a consolidation of
    every table whose rules fire or that has an abandoned or unfinished batch."""
    watched = poll_watch(settings)
    requested = []
    with session_scope(settings) as session:
        rows = list(session.scalars(select(BufferTable).where(BufferTable.catalog == settings.catalog)))
    for row in rows:
        try:
            sweep_orphans(settings, row.identifier)
        except Exception as exc:  # one table's problem must not stop the tick for the others
            log.warning("orphan sweep of %s failed: %s", row.identifier, exc)
    with session_scope(settings) as session:
        for row in rows:
            fires = evaluate(rules_of(settings, row), buffer_level(session, row.id)).fire
            pending = session.scalar(select(text("1")).select_from(BufferBatch).where(
                BufferBatch.buffer_table_id == row.id,
                BufferBatch.state.in_((*UNFINISHED, BatchState.COMMITTED.value))).limit(1))
            if fires or pending:
                requested.append(row.identifier)
    for identifier in requested:
        request_consolidation(settings, identifier)
    return {"watched": watched, "requested": requested}

