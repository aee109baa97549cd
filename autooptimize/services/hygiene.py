"""Table hygiene actions: rewrite_manifests, expire_snapshots and remove_orphans.

Each is an action kind (services/kinds.py) run by the executor like a merge, with the same audit trail.
The rules they share:

- A file that any snapshot of the table references is never deleted, nor any file outside the table's
  location. Referenced means what ``iceberg/references.py`` says, with paths compared in one normal form.
- Retrying is safe. rewrite_manifests carries the action id in its snapshot summary and a retry that
  finds it only records it; expire_snapshots checkpoints the snapshots it expires before committing, and
  a retry that finds them gone finishes deleting their files; a rerun of either with nothing left to do
  is skipped; remove_orphans recomputes everything each time.
- When in doubt nothing is deleted and the reason is recorded: a file too young, one in the output
  directory (``ao-<id>``) of an action that is queued, running or unknown, a hidden file, one whose age
  the filesystem does not give.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, RemoveSnapshotsUpdate
from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.checks import bool_option
from autooptimize.domain.durations import format_duration, parse_duration
from autooptimize.errors import ActionRefused, ConflictAbort, InvalidArgument, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY, ACTION_KIND_PROPERTY, find_action_snapshot
from autooptimize.iceberg.manifests import commit_manifest_rewrite, data_manifests, manifest_target_size
from autooptimize.iceberg.references import (
    ReferenceReader,
    StoredFile,
    delete_files,
    is_within,
    list_files,
    normalise_path,
    table_directories,
)
from autooptimize.services.merge import CheckpointWriter, Hooks, MergeOutcome, MergeRequest
from autooptimize.services.ports import Dispatch
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, Trigger
from autooptimize.storage.repositories import audit, tracked_tables

log = logging.getLogger(__name__)

MIN_SAFE_AGE_SECONDS = 3600  # below this, orphan removal and expiry need an explicit allow_short_* option
SAMPLE = 100  # paths kept in an outcome's plan; the audit log keeps up to AUDIT_PATHS
AUDIT_PATHS = 1000
_AO_DIR = re.compile(r"^ao-(.+)$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# ---------------------------------------------------------------------------------------------- options


def _bool(kind: str, name: str, value: Any) -> bool:
    return bool_option(name, value, kind)


def _int(kind: str, name: str, value: Any, minimum: int) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise InvalidArgument(f"option {name} of {kind} must be an integer ≥ {minimum} (got {value!r})")
    return number


def _check_names(kind: str, options: dict[str, Any], valid: tuple[str, ...]) -> None:
    if "dry_run" in options:
        raise InvalidArgument(f"{kind}: ask for a dry run with --dry-run (API: dry_run=True), not an option")
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidArgument(f"unknown option(s) {', '.join(unknown)} for {kind}; valid: {', '.join(valid)}")


def _age(kind: str, name: str, value: Any, allow_short: bool, allow_name: str) -> int:
    seconds = parse_duration(value, f"option {name} of {kind}")
    if seconds < MIN_SAFE_AGE_SECONDS and not allow_short:
        raise InvalidArgument(
            f"option {name} of {kind} is {format_duration(seconds)}, below the safe minimum of "
            f"{format_duration(MIN_SAFE_AGE_SECONDS)}: files of writers still in flight could be lost. "
            f"Use a longer {name}, or also pass {allow_name}=true if you are sure"
        )
    return seconds


def validate_rewrite_manifests(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    kind = "rewrite_manifests"
    _check_names(kind, options, ("manifest_threshold", "target_manifest_size"))
    out: dict[str, Any] = {}
    if "manifest_threshold" in options:
        out["manifest_threshold"] = _int(kind, "manifest_threshold", options["manifest_threshold"], 1)
    if "target_manifest_size" in options:
        from autooptimize.services.tracking import size_arg

        out["target_manifest_size"] = size_arg(f"option target_manifest_size of {kind}", options["target_manifest_size"])
    return out


def validate_expire_snapshots(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    kind = "expire_snapshots"
    _check_names(kind, options, ("older_than", "retain_last", "allow_short_retention"))
    out: dict[str, Any] = {}
    allow = _bool(kind, "allow_short_retention", options.get("allow_short_retention", False))
    if allow:
        out["allow_short_retention"] = True
    if "older_than" in options:
        out["older_than"] = _age(kind, "older_than", options["older_than"], allow, "allow_short_retention")
    if "retain_last" in options:
        out["retain_last"] = _int(kind, "retain_last", options["retain_last"], 1)
    return out


def validate_remove_orphans(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    kind = "remove_orphans"
    _check_names(kind, options, ("min_age", "allow_short_min_age"))
    out: dict[str, Any] = {}
    allow = _bool(kind, "allow_short_min_age", options.get("allow_short_min_age", False))
    if allow:
        out["allow_short_min_age"] = True
    if "min_age" in options:
        out["min_age"] = _age(kind, "min_age", options["min_age"], allow, "allow_short_min_age")
    return out


# ------------------------------------------------------------------------------------------ shared bits


def _audit(settings: Settings, action_id: str, event: str, **detail: Any) -> None:
    with session_scope(settings) as session:
        action = session.get(Action, action_id)
        audit(session, event, action_id=action_id, table_id=action.table_id if action else None, **detail)


def live_digest(table: Table, snapshot: Snapshot | None) -> tuple[int, int, str]:
    """Files, rows and a digest of the live data and delete files of ``snapshot`` (path, rows, size)."""
    if snapshot is None:
        return 0, 0, hashlib.sha256().hexdigest()[:32]
    items = sorted(
        (normalise_path(str(e.data_file.file_path)), int(e.data_file.record_count), int(e.data_file.file_size_in_bytes))
        for m in snapshot.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    )
    digest = hashlib.sha256("\n".join(f"{p}\t{r}\t{s}" for p, r, s in items).encode()).hexdigest()[:32]
    return len(items), sum(r for _, r, _ in items), digest


def _action_states(settings: Settings, ids: Iterable[str]) -> dict[str, str]:
    ids = sorted(set(ids))
    if not ids:
        return {}
    with session_scope(settings) as session:
        return dict(session.execute(select(Action.id, Action.state).where(Action.id.in_(ids))).tuples().all())


def _in_flight_action_ids(settings: Settings) -> set[str]:
    with session_scope(settings) as session:
        return set(session.scalars(select(Action.id).where(
            Action.state.in_([ActionState.QUEUED.value, ActionState.RUNNING.value]))))


def _stat(table: Table, paths: Iterable[str]) -> dict[str, int]:
    """Sizes of the files that exist (path → bytes)."""
    import pyarrow.fs as pafs

    sizes: dict[str, int] = {}
    for path in paths:
        fs, local = pafs.FileSystem.from_uri(path)
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
    location = table.location()
    still_referenced = [p for p in candidates if p in references]
    outside = [p for p in candidates if p not in references and not is_within(location, p)]
    doomed = sorted((p for p in candidates if p not in references and is_within(location, p)),
                    key=lambda p: (_DELETE_ORDER.get(candidates[p], 5), p))
    sizes = _stat(table, doomed)
    deleted = delete_files(location, [p for p in doomed if p in sizes])
    freed = sum(sizes[p] for p in deleted)
    result = {
        "files_deleted": len(deleted),
        "bytes_deleted": freed,
        "by_kind": dict(Counter(candidates[p] for p in deleted)),
        "kept_still_referenced": len(still_referenced),
        "kept_outside_location": len(outside),
        "deleted_sample": deleted[:SAMPLE],
    }
    if deleted or outside:
        _audit(settings, action_id, event, files=len(deleted), bytes=freed, paths=deleted[:AUDIT_PATHS],
               kept_outside_location=outside[:AUDIT_PATHS])
    return result


# ------------------------------------------------------------------------------------ rewrite_manifests


def run_rewrite_manifests(settings: Settings, request: MergeRequest, spark: Any,
                          save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> MergeOutcome:
    """Rewrite the current snapshot's data manifests clustered by partition when there are more than
    ``manifest_threshold`` of them; files in/out are manifests, rows and the live-file digest must not change."""
    hooks = hooks or Hooks()
    started = time.monotonic()
    table = load_table(settings, request.identifier)
    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        summary = committed.summary or {}
        return MergeOutcome(state="succeeded", reason="already_committed",
                            base_snapshot_id=committed.parent_snapshot_id,
                            committed_snapshot_id=committed.snapshot_id,
                            files_in=int(summary.get("manifests-replaced", 0)),
                            files_out=int(summary.get("manifests-created", 0)))
    threshold = int(request.options.get("manifest_threshold") or settings.manifest_threshold)
    target = int(request.options.get("target_manifest_size") or manifest_target_size(table))
    base = table.current_snapshot()
    outcome = MergeOutcome(state="skipped", base_snapshot_id=base.snapshot_id if base else None)
    if base is None:
        outcome.reason = "no_snapshot"
        return outcome
    manifests = data_manifests(table, base)
    files, rows, digest = live_digest(table, base)
    outcome.files_in, outcome.bytes_in = len(manifests), sum(int(m.manifest_length) for m in manifests)
    outcome.rows_in, outcome.checksum_in = rows, digest
    outcome.plan = {"data_manifests": len(manifests), "manifest_threshold": threshold,
                    "target_manifest_size": target, "live_files": files}
    if len(manifests) <= threshold:
        outcome.reason = "below_threshold"
        return outcome
    if request.dry_run:
        outcome.reason = "dry_run"
        return outcome
    if hooks.before_commit:
        hooks.before_commit()
    properties = {ACTION_ID_PROPERTY: request.action_id, ACTION_KIND_PROPERTY: "rewrite_manifests"}
    snapshot, report = commit_manifest_rewrite(table, properties, target)
    if hooks.after_commit:
        hooks.after_commit(snapshot.snapshot_id)
    # The committed snapshot must read exactly what its parent read (the parent may be a concurrent append).
    parent = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    parent_files, parent_rows, parent_digest = live_digest(table, parent)
    files_out, rows_out, digest_out = live_digest(table, snapshot)
    if (files_out, rows_out, digest_out) != (parent_files, parent_rows, parent_digest):
        raise VerificationFailed(
            f"snapshot {snapshot.snapshot_id} reads {files_out} files / {rows_out} rows, its parent "
            f"{parent_files} / {parent_rows}: the manifest rewrite changed the table's content"
        )
    outcome.state, outcome.reason = "succeeded", None
    outcome.committed_snapshot_id = snapshot.snapshot_id
    outcome.base_snapshot_id = snapshot.parent_snapshot_id
    outcome.files_in, outcome.bytes_in = report.manifests_before, report.bytes_before
    outcome.files_out, outcome.bytes_out = report.manifests_after, report.bytes_after
    outcome.rows_in, outcome.checksum_in = parent_rows, parent_digest
    outcome.rows_out, outcome.checksum_out = rows_out, digest_out
    outcome.plan.update(partitions=report.partitions, delete_manifests_kept=report.delete_manifests_kept,
                        manifests_written=report.written[:SAMPLE])
    outcome.timings["total"] = time.monotonic() - started
    return outcome


# -------------------------------------------------------------------------------------- expire_snapshots


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
                in_flight: set[str] | frozenset[str] = frozenset()) -> ExpiryPlan:
    """Snapshots older than ``older_than`` seconds, except: the current one, every branch and tag head,
    the ``retain_last`` newest ancestors of every branch (more if the branch asks, and those within a
    branch's own max age), and any snapshot committed by an action still queued or running."""
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


def _commit_expiry(table: Table, snapshot_ids: list[int]) -> None:
    """Remove the snapshots in one metadata commit that also asserts every ref is where it was planned,
    so a concurrent rollback to an expiring snapshot fails the commit instead of losing it."""
    metadata = table.metadata
    requirements: tuple[Any, ...] = (AssertTableUUID(uuid=metadata.table_uuid),) + tuple(
        AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id) for name, ref in metadata.refs.items()
    )
    table.catalog.commit_table(table, requirements, (RemoveSnapshotsUpdate(snapshot_ids=snapshot_ids),))
    table.refresh()


def run_expire_snapshots(settings: Settings, request: MergeRequest, spark: Any,
                         save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> MergeOutcome:
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
            return MergeOutcome(state="succeeded", reason="resumed_from_checkpoint", checkpoint=checkpoint,
                                files_in=checkpoint.get("snapshots_before"), files_out=len(table.metadata.snapshots),
                                bytes_in=deleted["bytes_deleted"], plan={**checkpoint, "deleted": deleted})
    older_than, retain_last = retention(settings, table, request.options)
    current = table.current_snapshot()
    outcome = MergeOutcome(state="skipped", base_snapshot_id=current.snapshot_id if current else None)
    files, rows, digest = live_digest(table, current)
    outcome.rows_in, outcome.checksum_in = rows, digest
    outcome.files_in = len(table.metadata.snapshots)
    for attempt in range(settings.commit_retries + 1):
        plan = plan_expiry(table, older_than, retain_last, int(time.time() * 1000), _in_flight_action_ids(settings))
        outcome.plan = {
            "older_than": format_duration(older_than), "retain_last": retain_last,
            "snapshots": len(table.metadata.snapshots), "kept": plan.kept,
            "expire": [s.snapshot_id for s in plan.expire][:SAMPLE], "expire_count": len(plan.expire),
        }
        if not plan.expire:
            outcome.reason = "nothing_to_expire"
            outcome.files_out = outcome.files_in
            return outcome
        expired = [{"snapshot_id": s.snapshot_id, "manifest_list": s.manifest_list} for s in plan.expire]
        ids = {s.snapshot_id for s in plan.expire}
        statistics = [f.statistics_path for f in table.metadata.statistics if f.snapshot_id in ids]
        statistics += [f.statistics_path for f in table.metadata.partition_statistics if f.snapshot_id in ids]
        if request.dry_run:
            candidates = _expiry_candidates(table, reader, expired, statistics)
            remaining = {p for s in table.metadata.snapshots if s.snapshot_id not in ids
                         for p in reader.snapshot_files(s)}
            would = sorted(p for p in candidates if p not in remaining and is_within(table.location(), p))
            outcome.reason = "dry_run"
            outcome.plan.update(would_delete=len(would), would_delete_sample=would[:SAMPLE])
            return outcome
        checkpoint = {"expired": expired, "statistics": statistics, "snapshots_before": outcome.files_in,
                      "older_than": older_than, "retain_last": retain_last}
        save_checkpoint(checkpoint)
        outcome.checkpoint = checkpoint
        if hooks.before_commit:
            hooks.before_commit()
        try:
            _commit_expiry(table, sorted(ids))
            break
        except CommitFailedException as exc:
            if attempt == settings.commit_retries:
                raise ConflictAbort(f"expiry kept failing on concurrent updates: {exc}") from None
            log.info("expire_snapshots %s: concurrent update, planning again (%s)", request.action_id, exc)
            table = load_table(settings, request.identifier)
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


# --------------------------------------------------------------------------------------- remove_orphans


@dataclass
class OrphanScan:
    listed: int = 0
    referenced: int = 0
    orphans: list[StoredFile] = field(default_factory=list)
    kept: Counter[str] = field(default_factory=Counter)
    kept_sample: dict[str, list[str]] = field(default_factory=dict)
    skipped_dirs: dict[str, str] = field(default_factory=dict)

    def keep(self, reason: str, path: str) -> None:
        self.kept[reason] += 1
        sample = self.kept_sample.setdefault(reason, [])
        if len(sample) < 10:
            sample.append(path)


def _ao_segments(relative: str) -> list[str]:
    return [m.group(1) for part in relative.split("/") if (m := _AO_DIR.match(part))]


def scan_orphans(settings: Settings, table: Table, reader: ReferenceReader, min_age: int, now: float) -> OrphanScan:
    """Files in the data and metadata directories that no snapshot or metadata references and that no
    guard keeps: younger than ``min_age``, inside the ``ao-<id>`` directory of an action that is not
    finished (or not known), hidden (``.x``/``_x``), Hadoop's version hint, or of unknown age."""
    scan = OrphanScan()
    location = normalise_path(table.location()).rstrip("/")
    references = reader.table_references(table)
    files: dict[str, StoredFile] = {}
    for name, directory in table_directories(table).items():
        if directory is None:
            scan.skipped_dirs[name] = "outside_table_location"
            continue
        for stored in list_files(directory):
            files.setdefault(stored.path, stored)
    ao_ids = {i for f in files.values() for i in _ao_segments(f.path[len(location):])}
    states = _action_states(settings, [i for i in ao_ids if _UUID.match(i)])
    for path, stored in sorted(files.items()):
        scan.listed += 1
        if path in references:
            scan.referenced += 1
            continue
        if not is_within(location, path):
            scan.keep("outside_table_location", path)
            continue
        relative = path[len(location) + 1:]
        parts = relative.split("/")
        ao = _ao_segments(relative)
        if any(p.startswith((".", "_")) for p in parts):
            scan.keep("hidden", path)
        elif parts[-1] == "version-hint.text":
            scan.keep("version_hint", path)
        elif any(i not in states for i in ao):
            scan.keep("unknown_ao_directory", path)
        elif any(not ActionState(states[i]).terminal for i in ao):
            scan.keep("in_flight_action", path)
        elif stored.mtime is None:
            scan.keep("unknown_age", path)
        elif now - stored.mtime < min_age:
            scan.keep("too_young", path)
        else:
            scan.orphans.append(stored)
    return scan


def run_remove_orphans(settings: Settings, request: MergeRequest, spark: Any,
                       save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> MergeOutcome:
    """Delete files in the table's data and metadata directories that nothing references and no guard
    keeps (see :func:`scan_orphans`); a dry run lists them. files_in/bytes_in: orphans found;
    files_out/bytes_out: deleted."""
    hooks = hooks or Hooks()
    started = time.monotonic()
    options = request.options
    min_age = int(options.get("min_age") or settings.orphan_min_age_seconds)
    if min_age < MIN_SAFE_AGE_SECONDS and not options.get("allow_short_min_age"):
        raise ActionRefused("min_age_too_short", f"min_age {format_duration(min_age)} is below "
                            f"{format_duration(MIN_SAFE_AGE_SECONDS)} and allow_short_min_age is not set")
    table = load_table(settings, request.identifier)
    current = table.current_snapshot()
    outcome = MergeOutcome(state="skipped", base_snapshot_id=current.snapshot_id if current else None)
    reader = ReferenceReader(table)
    scan = scan_orphans(settings, table, reader, min_age, time.time())
    outcome.files_in = len(scan.orphans)
    outcome.bytes_in = sum(f.size for f in scan.orphans)
    files, rows, digest = live_digest(table, current)
    outcome.rows_in, outcome.checksum_in = rows, digest
    outcome.plan = {
        "min_age": format_duration(min_age), "listed": scan.listed, "referenced": scan.referenced,
        "orphans": len(scan.orphans), "orphan_bytes": outcome.bytes_in,
        "orphan_sample": [f.uri for f in scan.orphans[:SAMPLE]],
        "kept": dict(scan.kept), "kept_sample": scan.kept_sample, "skipped_dirs": scan.skipped_dirs,
        "dry_run": request.dry_run,
    }
    if request.dry_run:
        outcome.reason = "dry_run"
        if scan.orphans:
            _audit(settings, request.action_id, "orphans.listed", files=len(scan.orphans), bytes=outcome.bytes_in,
                   paths=[f.uri for f in scan.orphans[:AUDIT_PATHS]])
        return outcome
    if not scan.orphans:
        outcome.reason = "no_orphans"
        return outcome
    if hooks.before_commit:
        hooks.before_commit()
    # Last look before deleting: a commit since the scan may reference a file, an action may have started.
    table.refresh()
    references = reader.table_references(table)
    in_flight = _in_flight_action_ids(settings)
    location = normalise_path(table.location()).rstrip("/")
    doomed = [f for f in scan.orphans
              if f.path not in references and not set(_ao_segments(f.path[len(location):])) & in_flight]
    deleted = set(delete_files(table.location(), [f.uri for f in doomed]))
    gone = [f for f in doomed if f.uri in deleted]
    outcome.files_out = len(gone)
    outcome.bytes_out = sum(f.size for f in gone)
    if gone:
        _audit(settings, request.action_id, "orphans.deleted", files=len(gone), bytes=outcome.bytes_out,
               paths=[f.uri for f in gone[:AUDIT_PATHS]])
    after_files, after_rows, after_digest = live_digest(table, table.current_snapshot())
    outcome.rows_out, outcome.checksum_out = after_rows, after_digest
    outcome.plan.update(deleted=len(gone), deleted_bytes=outcome.bytes_out,
                        deleted_sample=[f.uri for f in gone[:SAMPLE]],
                        kept_at_last_look=len(scan.orphans) - len(doomed))
    outcome.state, outcome.reason = "succeeded", None
    outcome.timings["total"] = time.monotonic() - started
    return outcome


# ------------------------------------------------------------------------------------------ the sweep

HYGIENE_KINDS = ("rewrite_manifests", "expire_snapshots", "remove_orphans")


@dataclass(frozen=True)
class HygieneDecision:
    kind: str
    reason: str


def hygiene_decisions(settings: Settings, table: Table, allowed: Iterable[str],
                      last_orphan_run: datetime | None, now: datetime) -> list[HygieneDecision]:
    """What the sweep submits for one table (pure reads of its metadata): rewrite_manifests over the
    threshold, expire_snapshots when a snapshot is past retention, remove_orphans every
    AO_ORPHAN_SWEEP_INTERVAL_SECONDS. Only kinds in the table's ``allowed_actions``."""
    allowed = set(allowed)
    decisions: list[HygieneDecision] = []
    if table.current_snapshot() is None:
        return decisions
    if "rewrite_manifests" in allowed:
        count = len(data_manifests(table))
        if count > settings.manifest_threshold:
            decisions.append(HygieneDecision("rewrite_manifests",
                                             f"{count} data manifests > threshold {settings.manifest_threshold}"))
    if "expire_snapshots" in allowed:
        older_than, retain_last = retention(settings, table, {})
        plan = plan_expiry(table, older_than, retain_last, int(now.timestamp() * 1000))
        if plan.expire:
            decisions.append(HygieneDecision("expire_snapshots", f"{len(plan.expire)} snapshot(s) past retention "
                                             f"{format_duration(older_than)}, keeping {retain_last}"))
    interval = settings.orphan_sweep_interval_seconds
    if "remove_orphans" in allowed and interval > 0:
        if last_orphan_run is None or (now - last_orphan_run).total_seconds() >= interval:
            decisions.append(HygieneDecision("remove_orphans", "never run" if last_orphan_run is None
                                             else f"last run {last_orphan_run.isoformat()}"))
    return decisions


def sweep_hygiene(settings: Settings, *, dispatch: Dispatch | None = None,
                  now: datetime | None = None) -> dict[str, list[str]]:
    """Submit the hygiene actions every enabled tracked table needs (trigger: schedule); returns the kinds
    submitted per table. Idempotent: a queued or running action of the same kind is not duplicated."""
    from autooptimize.services.actions import submit

    now = now or datetime.now(UTC)
    with session_scope(settings) as session:
        rows = [(t.id, t.identifier, tuple(t.allowed_actions or ())) for t in tracked_tables(session, settings.catalog)
                if t.enabled]
        last_runs = dict(session.execute(
            select(Action.table_id, Action.created_at).where(Action.kind == "remove_orphans")
            .order_by(Action.table_id, Action.created_at.desc()).distinct(Action.table_id)
        ).tuples().all())
    submitted: dict[str, list[str]] = {}
    for table_id, identifier, allowed in rows:
        if not set(allowed) & set(HYGIENE_KINDS):
            continue
        try:
            table = load_table(settings, identifier)
            decisions = hygiene_decisions(settings, table, allowed, last_runs.get(table_id), now)
        except Exception:  # one broken table must not stop the sweep; the next one tries again
            log.exception("hygiene sweep: cannot decide for %s", identifier)
            continue
        for decision in decisions:
            try:
                action_id = submit(settings, identifier, kind=decision.kind, trigger=Trigger.SCHEDULE,
                                   dispatch=dispatch)
            except Exception:
                log.exception("hygiene sweep: submitting %s for %s failed", decision.kind, identifier)
                continue
            _audit(settings, action_id, "hygiene.decided", kind=decision.kind, reason=decision.reason)
            submitted.setdefault(identifier, []).append(decision.kind)
    return submitted

