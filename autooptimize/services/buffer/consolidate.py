"""Consolidation of buffered files into one append snapshot per batch, exactly once.

A batch's id is decided before any work: a row in ``ao_buffer_batches`` claims its files. The append
snapshot's summary carries the id (``autooptimize.batch-id``). On every run, and so on every retry:

1. the id is in the table's history, or a checkpointed output is live in the table (its snapshot may
   have been expired by another engine) → only the bookkeeping is left (mark committed, remove buffer
   files). Our own expiry keeps a batch's snapshot until this bookkeeping has recorded it;
2. the batch's output is checkpointed and still on disk → commit it without rewriting;
3. otherwise read the files with Spark, cast them to the table's schema by name, write target-size files
   per partition under ``<data>/ao-batch-<id>/a<attempt>/``, verify rows and content checksum of the cast
   input against the written output, checkpoint, commit.

Buffered files are removed only after the commit and its bookkeeping are durable. A file Spark cannot
read, or whose rows break the table's schema, is quarantined with its reason and the rest of its batch
goes on without it. One consolidator per table at a time (a PostgreSQL advisory lock), so a batch found
unfinished by the lock holder was abandoned by a dead worker and is resumed, oldest first. The lock is
the consolidator's fence (domain/fencing.py): before each catalog swap and each deletion it asks
PostgreSQL whether the lock is still its own, and a consolidator that lost it (connection dropped, server
restarted) stops there and leaves its batch to the next holder.
Writing a batch lives in batch_write, its commit and bookkeeping in batch_commit.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update

from autooptimize.config import Settings
from autooptimize.domain import fencing
from autooptimize.domain.buffer_rules import evaluate
from autooptimize.domain.fencing import fenced
from autooptimize.errors import LeaseLost, ServiceUnavailable, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.paths import PathRefused
from autooptimize.services.buffer.batch_commit import (
    UNFINISHED,
    batch_view,
    commit_append,
    delete_uncommitted,
    find_batch_snapshot,
    find_committed_outputs,
    finish_committed,
    record_commit,
)
from autooptimize.services.buffer.batch_write import checkpointed_files, write_verified
from autooptimize.services.buffer.hooks import BufferHooks, call_hook
from autooptimize.services.buffer.landing import request_consolidation, sweep_orphans, table_info
from autooptimize.services.buffer.rules import buffer_level, rules_of
from autooptimize.services.buffer.watch import poll_watch
from autooptimize.services.ports import Dispatch
from autooptimize.services.refusals import record_refusals
from autooptimize.services.rewrite.outputs import data_location
from autooptimize.storage.buffer_models import BatchState, BufferBatch, BufferFile, BufferTable, FileState
from autooptimize.storage.db import session_scope
from autooptimize.storage.locks import AdvisoryLock
from autooptimize.storage.repositories import audit, now
from spark_actors.session import get_session

log = logging.getLogger(__name__)


# --- the per-table loop --------------------------------------------------------------------------

def consolidate_table(settings: Settings, identifier: str, *, spark: Any = None, flush: bool = False,
                      hooks: BufferHooks | None = None, wait: float | None = None,
                      dispatch: Dispatch | None = None) -> dict[str, Any]:
    """Finish abandoned batches of ``identifier``, then consolidate while a rule fires (``flush``: until
    everything buffered when called is consolidated, whatever the rules say).

    ``finished`` counts committed batches whose buffer files were only now removed (an earlier run died
    after its bookkeeping). ``busy`` is True when another consolidator holds the table (``wait``: seconds
    to wait for it). Once the table is held, ``dispatch`` (when given) forgets the queued request, so
    landings from then on may queue another. ``lost`` is True when the lock went away midway: the run
    stopped before its next commit or deletion and left its batch to the next holder.
    """
    info = table_info(settings, identifier)
    table_id = info.buffer_table_id
    hooks = hooks or BufferHooks()
    batches: list[dict[str, Any]] = []
    with AdvisoryLock(settings, f"ao.consolidate:{table_id}", wait=wait) as lock, fenced(lock):
        if not lock.held:
            return {"table": identifier, "busy": True, "batches": [], "finished": 0}
        if dispatch is not None:
            _clear_request(dispatch, identifier)
        try:
            lock.ensure("remove the buffer files of committed batches")
            finished = finish_committed(settings, table_id)
            spark_session = spark
            for batch_id in _unfinished(settings, table_id):
                spark_session = spark_session or _spark(settings)
                lock.ensure(f"resume batch {batch_id}")
                batches.append(run_batch(settings, batch_id, spark_session, hooks))
            flush_until = _db_time(settings) if flush else None
            while True:
                lock.ensure("claim a batch")
                claimed = claim_batch(settings, table_id, flush_until=flush_until)
                if claimed is None:
                    break
                call_hook(hooks.after_claim, claimed)
                spark_session = spark_session or _spark(settings)
                batches.append(run_batch(settings, claimed, spark_session, hooks))
        except LeaseLost as exc:  # the next holder resumes the batch; nothing more is done here
            log.warning("consolidation of %s stopped: %s", identifier, exc)
            with session_scope(settings) as session:
                audit(session, "buffer.lock_lost", table=identifier, error=str(exc))
            return {"table": identifier, "busy": True, "lost": True, "batches": batches, "finished": 0}
    return {"table": identifier, "busy": False, "batches": batches, "finished": finished}


def _spark(settings: Settings) -> Any:
    return get_session(settings)


def _clear_request(dispatch: Dispatch, identifier: str) -> None:
    try:
        dispatch.consolidation_started(identifier)
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

def run_batch(settings: Settings, batch_id: str, spark: Any, hooks: BufferHooks | None = None) -> dict[str, Any]:
    """Execute (or finish) one batch; see the module docstring for the guarantees."""
    hooks = hooks or BufferHooks()
    started = time.monotonic()
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id, with_for_update=True)
        if batch is None:
            raise VerificationFailed(f"batch {batch_id} does not exist")
        identifier = session.get(BufferTable, batch.buffer_table_id).identifier  # type: ignore[union-attr]
        if batch.state not in UNFINISHED:
            return batch_view(batch, identifier)
        # the row is locked: a consolidator that lost the table's lock must not count (or write) anything
        fencing.before_commit(f"record attempt {batch.attempts + 1} of batch {batch_id}")
        batch.attempts += 1
        attempt = batch.attempts
        checkpoint = batch.checkpoint
        state = batch.state
    table = load_table(settings, identifier)
    committed = find_batch_snapshot(table, batch_id)
    if committed is not None:
        return record_commit(settings, batch_id, identifier, committed.snapshot_id, hooks, reason="already_committed")

    if state == BatchState.WRITTEN.value and checkpoint:
        landed = find_committed_outputs(table, checkpoint)  # its snapshot may be gone, its files are not
        if landed is not None:
            return record_commit(settings, batch_id, identifier, landed, hooks, reason="already_committed")
        data_files = checkpointed_files(table, checkpoint)
        if data_files is not None:
            snapshot_id = commit_append(settings, table, batch_id, data_files)
            call_hook(hooks.after_commit, snapshot_id)
            return record_commit(settings, batch_id, identifier, snapshot_id, hooks, reason="resumed_from_checkpoint")
        log.warning("batch %s: checkpointed output is gone; consolidating again", batch_id)

    try:
        batch_dir = f"{data_location(table)}/ao-batch-{batch_id}"
        delete_uncommitted(table, batch_dir)  # leftovers of an earlier attempt: nothing of it is committed
    except PathRefused as exc:  # nothing is written where the table would not find it
        record_refusals(settings, [exc], batch=batch_id, table=identifier)
        raise
    output_dir = f"{batch_dir}/a{attempt}"
    result = write_verified(settings, spark, table, batch_id, identifier, output_dir, hooks)
    if result is None:  # every file was quarantined
        delete_uncommitted(table, batch_dir)
        with session_scope(settings) as session:
            batch = session.get(BufferBatch, batch_id, with_for_update=True)
            assert batch is not None
            batch.state, batch.finished_at = BatchState.EMPTY.value, now()
            audit(session, "buffer.batch_empty", batch=batch_id, table=identifier)
            return batch_view(batch, identifier)
    checkpoint, data_files = result
    with session_scope(settings) as session:
        batch = session.get(BufferBatch, batch_id, with_for_update=True)
        assert batch is not None
        fencing.before_commit(f"checkpoint batch {batch_id}")  # the new holder's checkpoint is never overwritten
        batch.state, batch.checkpoint = BatchState.WRITTEN.value, checkpoint
        batch.timings = {**(batch.timings or {}), "write": round(time.monotonic() - started, 3)}
        audit(session, "buffer.batch_checkpointed", batch=batch_id, table=identifier,
              files_out=len(data_files), rows=checkpoint["rows_out"])
    call_hook(hooks.after_checkpoint)
    snapshot_id = commit_append(settings, table, batch_id, data_files)
    call_hook(hooks.after_commit, snapshot_id)
    out = record_commit(settings, batch_id, identifier, snapshot_id, hooks, reason=None,
                         seconds=time.monotonic() - started)
    return out


# --- the periodic tick ---------------------------------------------------------------------------

def tick(settings: Settings, dispatch: Dispatch) -> dict[str, Any]:
    """Beat's buffer tick: land settled files from the watched folder, then ask ``dispatch`` for a
    consolidation of every table whose rules fire or that has an abandoned or unfinished batch."""
    watched = poll_watch(settings, dispatch=dispatch)
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
        request_consolidation(dispatch, identifier)
    return {"watched": watched, "requested": requested}

