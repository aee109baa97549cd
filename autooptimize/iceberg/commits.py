"""Every commit the service makes, through one retry loop with one error map.

A commit is staged once and applied many times. Staging writes what is expensive (the manifests of
added files and, for a replace, the rewritten manifests that mark the inputs DELETED). Applying puts
those manifests on top of the branch head in a new manifest list and asks the catalog to swap the
head atomically. When a concurrent writer wins, the loop reloads the head, re-validates only what
Iceberg's RewriteFiles validates (the inputs are still live, no new delete file applies to them),
and applies the same manifests again after a jittered backoff. Data is never rewritten because of a
conflict, and manifests are rewritten only when someone else rewrote the manifests holding the inputs.
Concurrent appends are not conflicts.

This is the idea of Iceberg's Java SnapshotProducer/MergingSnapshotProducer retry loop, written for
pyiceberg 0.12, whose own loop rebuilds every manifest on every attempt.

Immediately before each swap the loop asks the thread's fence (``domain/fencing.py``): an action
attempt's lease, a consolidation's lock. A holder that lost it raises there and the head is not touched.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import (
    ManifestFile,
    write_manifest_list,
)
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)

from autooptimize.domain import fencing
from autooptimize.errors import CommitOutcomeUnknown, ConflictAbort, Retry
from autooptimize.failures import FailureKind, classify, failure_text
from autooptimize.iceberg.staging import StagedAppend, StagedReplace, avro_codec, metadata_path, remove_files
from autooptimize.iceberg.v3 import ManifestListWriterV3

__all__ = ["CommitPolicy", "CommitStats", "Staged", "StagedAppend", "StagedReplace", "apply_with_retry", "remove_files"]

@dataclass(frozen=True)
class CommitPolicy:
    """How long a commit keeps trying against concurrent writers (table properties ``commit.retry.*``
    override the defaults, as in Iceberg). Each attempt is cheap, so waits start short."""

    attempts: int = 200
    total_seconds: float = 120.0
    min_wait: float = 0.01
    max_wait: float = 1.0

    @classmethod
    def of(cls, properties: dict[str, str]) -> CommitPolicy:
        def number(key: str, default: float) -> float:
            try:
                return max(0.0, float(properties.get(key, default)))
            except (TypeError, ValueError):
                return default

        return cls(
            attempts=max(1, int(number("commit.retry.num-retries", cls.attempts - 1)) + 1),
            total_seconds=number("commit.retry.total-timeout-ms", cls.total_seconds * 1000) / 1000,
            min_wait=number("commit.retry.min-wait-ms", cls.min_wait * 1000) / 1000,
            max_wait=number("commit.retry.max-wait-ms", cls.max_wait * 1000) / 1000,
        )

    def wait(self, attempt: int, rng: random.Random | None = None) -> float:
        """The pause before ``attempt`` (from 1): exponential, capped, with full jitter so that two
        losers of the same race do not meet again."""
        ceiling = min(self.max_wait, self.min_wait * (2 ** min(attempt, 30)))
        return (rng or random).uniform(self.min_wait, max(self.min_wait, ceiling))


@dataclass
class CommitStats:
    """What one commit cost: attempts (1 = no conflict), conflicts lost, seconds, and manifests that had to be
    rewritten again because someone else rewrote the manifests holding the inputs."""

    attempts: int = 0
    conflicts: int = 0
    apply_seconds: float = 0.0
    manifests_rewritten_on_retry: int = 0


class Staged(Protocol):
    """A change written once and applied on top of any head that still admits it."""

    snapshot_id: int
    operation: Operation
    rewrites_on_retry: int  # manifests written again after staging (0 unless the inputs' manifests moved)

    def validate(self, head: TableMetadata, table: Table) -> None:
        """Raise ConflictAbort when the change no longer applies on ``head``."""

    def manifests(self, head: TableMetadata, table: Table) -> list[ManifestFile]:
        """The new snapshot's manifests on top of ``head``."""

    def summary(self) -> dict[str, str]:
        """The added/removed part of the snapshot summary (totals are added per head)."""

    def written(self) -> list[str]:
        """Every file this change wrote (removed if it never commits)."""


def apply_with_retry(table: Table, staged: Staged, properties: dict[str, str], *,
                     policy: CommitPolicy | None = None, branch: str = MAIN_BRANCH,
                     stats: CommitStats | None = None, sleep: Callable[[float], None] = time.sleep) -> Snapshot:
    """Commit ``staged`` on ``branch``; the one retry loop of the service.

    Raises ConflictAbort (nothing committed, written files removed) when the change no longer applies,
    and Retry when the catalog kept refusing past the policy's limits (the caller may try the action
    again; it is idempotent). A lost answer is settled by looking for the snapshot id in the metadata.
    """
    stats = stats if stats is not None else CommitStats()
    lists: list[str] = []
    try:
        retry_commit(table, lambda attempt: _attempt(table, staged, properties, branch, attempt, lists),
                     policy=policy, stats=stats, sleep=sleep, fence=False)
    except (ConflictAbort, Retry):
        remove_files(table, staged.written() + lists)
        raise
    finally:
        stats.manifests_rewritten_on_retry = staged.rewrites_on_retry
    landed = table.metadata.snapshot_by_id(staged.snapshot_id)
    assert landed is not None, "the commit succeeded but its snapshot is not in the metadata"
    remove_files(table, [p for p in lists if p != landed.manifest_list])
    return landed


def retry_commit(table: Table, attempt: Callable[[int], bool], *, policy: CommitPolicy | None = None,
                 stats: CommitStats | None = None, sleep: Callable[[float], None] = time.sleep,
                 fence: bool = True) -> None:
    """The one retry loop: ``attempt(n)`` (n from 1) tries once on the table's current metadata and
    returns True when its change is in the table, False when a concurrent commit won the race; the loop
    then waits (jittered, :meth:`CommitPolicy.wait`), reloads the table and tries again. Raises Retry past
    the policy's limits; whatever ``attempt`` raises (ConflictAbort: the change no longer applies) goes
    through. Snapshot changes use :func:`apply_with_retry`; a metadata-only change (snapshot expiry)
    calls this directly with an attempt that plans on the head it is given; the thread's fence is asked
    before each such attempt (``fence``; apply_with_retry asks it itself, right before the swap)."""
    policy = policy or CommitPolicy.of(table.metadata.properties)
    stats = stats if stats is not None else CommitStats()
    started = time.monotonic()
    try:
        for n in range(1, policy.attempts + 1):
            stats.attempts = n
            if fence:
                fencing.before_commit(f"commit to {'.'.join(table.name())}")
            if attempt(n):
                return
            stats.conflicts += 1
            if time.monotonic() - started >= policy.total_seconds or n == policy.attempts:
                raise Retry(f"commit lost {n} races to concurrent writers in "
                            f"{time.monotonic() - started:.1f} s", delay=5.0)
            sleep(policy.wait(n))
            table.refresh()
    finally:
        stats.apply_seconds = time.monotonic() - started


def _attempt(table: Table, staged: Staged, properties: dict[str, str], branch: str, attempt: int,
             lists: list[str]) -> bool:
    """One attempt on the table's current head: True when the snapshot is in the table (committed now, or
    by an earlier attempt whose answer was lost), False when a concurrent commit won the race."""
    metadata = table.metadata
    if metadata.snapshot_by_id(staged.snapshot_id) is not None:
        return True
    staged.validate(metadata, table)
    head = metadata.snapshot_by_name(branch)
    parent_id = head.snapshot_id if head else None
    manifest_list, first_row_id, added_rows = _write_manifest_list(table, metadata, staged, head, attempt, lists)
    snapshot = Snapshot(
        snapshot_id=staged.snapshot_id,
        parent_snapshot_id=parent_id,
        sequence_number=metadata.next_sequence_number(),
        manifest_list=manifest_list,
        summary=_summary(staged, head, properties),
        schema_id=metadata.current_schema_id,
        first_row_id=first_row_id,
        added_rows=added_rows,
    )
    updates = (AddSnapshotUpdate(snapshot=snapshot),
               SetSnapshotRefUpdate(snapshot_id=staged.snapshot_id, parent_snapshot_id=parent_id, ref_name=branch,
                                    type=SnapshotRefType.BRANCH))
    requirements = (AssertTableUUID(uuid=metadata.table_uuid), AssertRefSnapshotId(snapshot_id=parent_id, ref=branch))
    fencing.before_commit(f"commit snapshot {staged.snapshot_id} to {'.'.join(table.name())}")
    try:
        response = table.catalog.commit_table(table, requirements, updates)
    except CommitFailedException:
        return False
    except Exception as exc:
        if classify(exc) == FailureKind.PERMANENT:
            raise  # refused before anything was applied
        # sent, answer lost: it may have landed, or land later; nothing written for it is removed here
        try:
            table.refresh()
        except Exception:
            pass
        if table.metadata.snapshot_by_id(staged.snapshot_id) is not None:
            return True
        raise CommitOutcomeUnknown(
            f"the catalog's answer to commit snapshot {staged.snapshot_id} of {'.'.join(table.name())} was lost "
            f"({failure_text(exc)}); it may still land", snapshot_id=staged.snapshot_id, parent_id=parent_id) from exc
    table.metadata, table.metadata_location = response.metadata, response.metadata_location
    return True


def _summary(staged: Staged, head: Snapshot | None, properties: dict[str, str]) -> Summary:
    summary = update_snapshot_summaries(
        Summary(operation=Operation.OVERWRITE if staged.operation == Operation.REPLACE else staged.operation,
                **staged.summary(), **properties),
        previous_summary=head.summary if head is not None else None,
    )
    # pyiceberg's totals arithmetic only knows append/overwrite/delete; a replace has the same totals
    return Summary(operation=staged.operation, **summary.additional_properties)


def _write_manifest_list(table: Table, metadata: TableMetadata, staged: Staged, head: Snapshot | None,
                         attempt: int, lists: list[str]) -> tuple[str, int | None, int | None]:
    """The manifest list's path, and on v3 the snapshot's first-row-id and added-rows (its row id space)."""
    path = metadata_path(table, f"snap-{staged.snapshot_id}-{attempt}-{uuid.uuid4()}.avro")
    lists.append(path)
    if metadata.format_version >= 3:  # pyiceberg 0.12 writes no v3 manifest list
        first_row_id = int(getattr(metadata, "next_row_id", None) or 0)
        with ManifestListWriterV3(table.io.new_output(path), staged.snapshot_id,
                                  head.snapshot_id if head else None, metadata.next_sequence_number(),
                                  first_row_id, avro_codec(metadata)) as v3_writer:
            v3_writer.add_manifests(staged.manifests(metadata, table))
        return path, first_row_id, v3_writer.added_rows
    with write_manifest_list(format_version=metadata.format_version, output_file=table.io.new_output(path),
                             snapshot_id=staged.snapshot_id,
                             parent_snapshot_id=head.snapshot_id if head else None,
                             sequence_number=metadata.next_sequence_number(),
                             avro_compression=avro_codec(metadata)) as writer:
        writer.add_manifests(staged.manifests(metadata, table))
    return path, None, None
