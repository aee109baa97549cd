"""expire_snapshots: drop snapshots past retention, then delete the files only they referenced."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, RemoveSnapshotsUpdate

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionOutcome, ActionRequest, Hooks
from autooptimize.domain.durations import format_duration
from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.iceberg.commits import retry_commit
from autooptimize.iceberg.fileio import filesystem
from autooptimize.iceberg.paths import canonical, is_within, normalise_path
from autooptimize.iceberg.references import ReferenceReader, delete_files
from autooptimize.services.buffer.batch_commit import BATCH_ID_PROPERTY, unrecorded_batches
from autooptimize.services.hygiene.common import (
    AUDIT_PATHS,
    SAMPLE,
    age_options,
    audit_action,
    check_option_names,
    in_flight_action_ids,
    int_option,
)
from autooptimize.services.hygiene.digest import live_digest
from autooptimize.services.refusals import record_refusals
from autooptimize.services.rewrite.kind import CheckpointWriter

log = logging.getLogger(__name__)


def validate_expire_snapshots(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The checked options (older_than a duration ≥ 1 h unless allow_short_retention, retain_last ≥ 1);
    InvalidArgument otherwise."""
    kind = "expire_snapshots"
    check_option_names(kind, options, ("older_than", "retain_last", "allow_short_retention"))
    out = age_options(kind, options, "older_than", "allow_short_retention")
    if "retain_last" in options:
        out["retain_last"] = int_option(kind, "retain_last", options["retain_last"], 1)
    return out


def _stat(table: Table, paths: Iterable[str]) -> dict[str, int]:
    """Sizes of the files that exist (path → bytes)."""
    import pyarrow.fs as pafs

    sizes: dict[str, int] = {}
    for path in paths:
        fs, local, _ = filesystem(table.io, path)  # the table's own FileIO: its endpoint and keys
        info = fs.get_file_info(local)
        if info.type == pafs.FileType.File:
            sizes[path] = int(info.size or 0)
    return sizes


_DELETE_ORDER = {"data": 0, "delete": 0, "statistics": 1, "manifest": 2, "manifest-list": 3, "metadata": 4}


def _delete_unreferenced(settings: Settings, table: Table, reader: ReferenceReader, candidates: dict[str, str],
                         action_id: str, event: str) -> dict[str, Any]:
    """Delete the candidates that the refreshed table references nowhere and that lie in its location.

    Manifest lists go last, so an interrupted clean-up can be finished from them.
    """
    table.refresh()
    references = reader.table_references(table)
    referenced = {canonical(p) for p in references}  # one file, whatever spelling each snapshot used

    def live(path: str) -> bool:
        return path in references or canonical(path) in referenced

    location = table.location()
    still_referenced = [p for p in candidates if live(p)]
    outside = [p for p in candidates if not live(p) and not is_within(location, p)]
    doomed = sorted((p for p in candidates if not live(p) and is_within(location, p)),
                    key=lambda p: (_DELETE_ORDER.get(candidates[p], 5), p))
    sizes = _stat(table, doomed)
    deletion = delete_files(location, [p for p in doomed if p in sizes], table.io)
    record_refusals(settings, deletion.refused[:AUDIT_PATHS], action_id=action_id)
    deleted = deletion.deleted
    table.refresh()
    gone_but_referenced = {canonical(p) for p in deleted} & {canonical(p) for p in reader.table_references(table)}
    if gone_but_referenced:  # a commit since the last look references a file just deleted: say so, loudly
        raise VerificationFailed(f"expiry deleted {len(gone_but_referenced)} file(s) the table references now, "
                                 f"e.g. {sorted(gone_but_referenced)[0]}")
    freed = sum(sizes[p] for p in deleted)
    result = {
        "files_deleted": len(deleted),
        "bytes_deleted": freed,
        "by_kind": dict(Counter(candidates[p] for p in deleted)),
        "kept_still_referenced": len(still_referenced),
        "kept_outside_location": len(outside),
        "refused": len(deletion.refused),
        "deleted_sample": deleted[:SAMPLE],
    }
    if deleted or outside:
        audit_action(settings, action_id, event, files=len(deleted), bytes=freed, paths=deleted[:AUDIT_PATHS],
               kept_outside_location=outside[:AUDIT_PATHS])
    return result


@dataclass
class ExpiryPlan:
    expire: list[Snapshot] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)  # why each retained snapshot stays, counted
    older_than: int = 0
    retain_last: int = 1


def _table_int(table: Table, key: str) -> int | None:
    try:
        value = table.properties.get(key)
        return int(value) if value is not None else None
    except ValueError:
        return None


def retention(settings: Settings, table: Table, options: dict[str, Any]) -> tuple[int, int]:
    """(older_than seconds, retain_last): the action's options, else the table's own
    ``history.expire.*`` properties, else AO_SNAPSHOT_MAX_AGE_SECONDS / AO_SNAPSHOT_RETAIN_LAST."""
    age_ms = _table_int(table, "history.expire.max-snapshot-age-ms")
    keep = _table_int(table, "history.expire.min-snapshots-to-keep")
    older_than = options.get("older_than")
    if older_than is None:
        older_than = age_ms // 1000 if age_ms is not None and age_ms >= 0 else settings.snapshot_max_age_seconds
    retain_last = options.get("retain_last") or (keep if keep and keep > 0 else settings.snapshot_retain_last)
    return int(older_than), int(retain_last)


def plan_expiry(table: Table, older_than: int, retain_last: int, now_ms: int,
                in_flight: set[str] | frozenset[str] = frozenset(),
                unrecorded_batches: set[str] | frozenset[str] = frozenset()) -> ExpiryPlan:
    """Snapshots older than ``older_than`` seconds, except: the current one, every branch and tag head,
    the ``retain_last`` newest ancestors of every branch (more if the branch asks, and those within a
    branch's own max age), any snapshot committed by an action still queued or running, and any
    snapshot of a consolidation batch whose commit PostgreSQL has not recorded yet (its snapshot is what
    tells a resumed consolidation that the batch landed)."""
    metadata = table.metadata
    keep: dict[int, str] = {}

    def protect(snapshot_id: int | None, why: str) -> None:
        if snapshot_id is not None and snapshot_id not in keep:
            keep[snapshot_id] = why

    protect(metadata.current_snapshot_id, "current")
    for ref in metadata.refs.values():
        protect(ref.snapshot_id, "branch_head" if ref.snapshot_ref_type == SnapshotRefType.BRANCH else "tag")
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            continue
        count = max(retain_last, ref.min_snapshots_to_keep or 0)
        branch_cutoff = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms else None
        snapshot_id: int | None = ref.snapshot_id
        seen = 0
        while snapshot_id is not None:
            snapshot = metadata.snapshot_by_id(snapshot_id)
            if snapshot is None:
                break
            if seen < count:
                protect(snapshot_id, "retain_last")
            elif branch_cutoff is not None and snapshot.timestamp_ms >= branch_cutoff:
                protect(snapshot_id, "branch_max_age")
            seen += 1
            snapshot_id = snapshot.parent_snapshot_id
    cutoff = now_ms - older_than * 1000
    for snapshot in metadata.snapshots:
        if snapshot.timestamp_ms >= cutoff:
            protect(snapshot.snapshot_id, "younger")
        action_id = snapshot.summary.get(ACTION_ID_PROPERTY) if snapshot.summary is not None else None
        if action_id in in_flight:
            protect(snapshot.snapshot_id, "in_flight_action")
        batch_id = snapshot.summary.get(BATCH_ID_PROPERTY) if snapshot.summary is not None else None
        if batch_id in unrecorded_batches:
            protect(snapshot.snapshot_id, "unrecorded_batch")
    plan = ExpiryPlan(older_than=older_than, retain_last=retain_last)
    plan.expire = [s for s in metadata.snapshots if s.snapshot_id not in keep]
    plan.kept = dict(Counter(keep[s.snapshot_id] for s in metadata.snapshots if s.snapshot_id in keep))
    return plan


def _expiry_candidates(table: Table, reader: ReferenceReader, expired: list[dict[str, Any]],
                       statistics: list[str], *, missing_ok: bool = False) -> dict[str, str]:
    candidates: dict[str, str] = {}
    for item in expired:
        candidates.update(reader.manifest_list_files(item["manifest_list"], missing_ok=missing_ok))
    candidates.update({normalise_path(p): "statistics" for p in statistics})
    return candidates


def _statistics(table: Table, ids: set[int]) -> list[str]:
    """The statistics files (table and partition) of the snapshots ``ids``: they go with them."""
    paths = [f.statistics_path for f in table.metadata.statistics if f.snapshot_id in ids]
    return paths + [f.statistics_path for f in table.metadata.partition_statistics if f.snapshot_id in ids]


def _commit_expiry(table: Table, snapshot_ids: list[int]) -> None:
    """Remove the snapshots in one metadata commit that also asserts every ref is where it was planned,
    so a concurrent rollback to an expiring snapshot fails the commit instead of losing it."""
    metadata = table.metadata
    requirements: tuple[Any, ...] = (AssertTableUUID(uuid=metadata.table_uuid),) + tuple(
        AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id) for name, ref in metadata.refs.items()
    )
    table.catalog.commit_table(table, requirements, (RemoveSnapshotsUpdate(snapshot_ids=snapshot_ids),))
    table.refresh()


def run_expire_snapshots(settings: Settings, request: ActionRequest, spark: Any,
                         save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> ActionOutcome:
    """Expire old snapshots, then delete the files that only they referenced (inside the table location).

    files in/out are snapshots before/after, bytes_in the bytes freed. The current snapshot's content
    (rows and live-file digest) is checked unchanged.
    """
    hooks = hooks or Hooks()
    started = time.monotonic()
    table = load_table(settings, request.identifier)
    reader = ReferenceReader(table)
    checkpoint = request.checkpoint or {}
    if checkpoint.get("expired") and not request.dry_run:
        ids = {int(item["snapshot_id"]) for item in checkpoint["expired"]}
        if not any(table.metadata.snapshot_by_id(i) for i in ids):
            # an earlier attempt committed the expiry; finish deleting what only those snapshots referenced
            candidates = _expiry_candidates(table, reader, checkpoint["expired"], checkpoint.get("statistics", []),
                                            missing_ok=True)
            deleted = _delete_unreferenced(settings, table, reader, candidates, request.action_id,
                                           "snapshots.files_deleted")
            return ActionOutcome(state="succeeded", reason="resumed_from_checkpoint", checkpoint=checkpoint,
                                files_in=checkpoint.get("snapshots_before"), files_out=len(table.metadata.snapshots),
                                bytes_in=deleted["bytes_deleted"], plan={**checkpoint, "deleted": deleted})
    older_than, retain_last = retention(settings, table, request.options)
    current = table.current_snapshot()
    outcome = ActionOutcome(state="skipped", base_snapshot_id=current.snapshot_id if current else None)
    files, rows, digest = live_digest(table, current)
    outcome.rows_in, outcome.checksum_in = rows, digest
    outcome.files_in = len(table.metadata.snapshots)
    def plan_on_head() -> tuple[Any, set[int]]:
        plan = plan_expiry(table, older_than, retain_last, int(time.time() * 1000), in_flight_action_ids(settings),
                           unrecorded_batches(settings, table.metadata.snapshots))
        outcome.plan = {
            "older_than": format_duration(older_than), "retain_last": retain_last,
            "snapshots": len(table.metadata.snapshots), "kept": plan.kept,
            "expire": [s.snapshot_id for s in plan.expire][:SAMPLE], "expire_count": len(plan.expire),
        }
        return plan, {s.snapshot_id for s in plan.expire}

    plan, ids = plan_on_head()
    if not plan.expire:
        outcome.reason = "nothing_to_expire"
        outcome.files_out = outcome.files_in
        return outcome
    if request.dry_run:
        expired = [{"snapshot_id": s.snapshot_id, "manifest_list": s.manifest_list} for s in plan.expire]
        candidates = _expiry_candidates(table, reader, expired, _statistics(table, ids))
        remaining = {p for s in table.metadata.snapshots if s.snapshot_id not in ids
                     for p in reader.snapshot_files(s)}
        would = sorted(p for p in candidates if p not in remaining and is_within(table.location(), p))
        outcome.reason = "dry_run"
        outcome.plan.update(would_delete=len(would), would_delete_sample=would[:SAMPLE])
        return outcome
    if hooks.before_commit:
        hooks.before_commit()

    def attempt(n: int) -> bool:
        """Plan on the head this attempt sees (a concurrent commit may change what is old enough or
        referenced), record the plan, then commit it; False when a concurrent commit won."""
        nonlocal plan, ids, checkpoint
        if n > 1:
            plan, ids = plan_on_head()
        if not plan.expire:
            return True
        expired = [{"snapshot_id": s.snapshot_id, "manifest_list": s.manifest_list} for s in plan.expire]
        checkpoint = {"expired": expired, "statistics": _statistics(table, ids), "snapshots_before": outcome.files_in,
                      "older_than": older_than, "retain_last": retain_last}
        save_checkpoint(checkpoint)
        outcome.checkpoint = checkpoint
        try:
            _commit_expiry(table, sorted(ids))
        except CommitFailedException as exc:
            log.info("expire_snapshots %s: concurrent update, planning again (%s)", request.action_id, exc)
            return False
        return True

    retry_commit(table, attempt)
    if not plan.expire:
        outcome.reason = "nothing_to_expire"
        outcome.files_out = outcome.files_in
        return outcome
    if hooks.after_commit:
        hooks.after_commit(table.metadata.current_snapshot_id or 0)
    after_files, after_rows, after_digest = live_digest(table, table.current_snapshot())
    if outcome.base_snapshot_id == table.metadata.current_snapshot_id and after_digest != digest:
        raise VerificationFailed("expiring snapshots changed what the current snapshot reads")
    candidates = _expiry_candidates(table, reader, checkpoint["expired"], checkpoint["statistics"])
    deleted = _delete_unreferenced(settings, table, reader, candidates, request.action_id, "snapshots.files_deleted")
    outcome.state, outcome.reason = "succeeded", None
    outcome.files_out = len(table.metadata.snapshots)
    outcome.bytes_in = deleted["bytes_deleted"]
    outcome.rows_out, outcome.checksum_out = after_rows, after_digest
    outcome.plan["deleted"] = deleted
    outcome.timings["total"] = time.monotonic() - started
    return outcome
