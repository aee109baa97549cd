"""Committing one snapshot producer (pyiceberg's ``_SnapshotProducer``) and mapping its refusals to ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot

from autooptimize.errors import ConflictAbort, VerificationFailed


def commit_producer(table: Table, tx: Transaction, producer: Any,
                    on_abort: Callable[[], None] | None = None) -> Snapshot:
    """Commit ``producer`` through ``tx`` (pyiceberg retries on concurrent commits); returns the snapshot.

    Raises ConflictAbort when a concurrent change invalidates the snapshot or commits keep winning,
    and lets VerificationFailed or ConflictAbort from the producer through after calling ``on_abort``
    (to remove what it wrote). Nothing is committed when it raises.
    """
    try:
        producer.commit()
        tx.commit_transaction()
    except (VerificationFailed, ConflictAbort):
        if on_abort is not None:
            on_abort()
        raise
    except ValidationException as exc:
        raise ConflictAbort(str(exc)) from None
    except CommitFailedException as exc:
        raise ConflictAbort(f"commit kept failing on concurrent updates: {exc}") from None
    snapshot = table.metadata.snapshot_by_id(producer.snapshot_id)
    assert snapshot is not None
    return snapshot
