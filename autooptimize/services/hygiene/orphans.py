"""remove_orphans: delete files in the table's directories that nothing references and no guard keeps."""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionOutcome, ActionRequest, Hooks
from autooptimize.domain.durations import format_duration
from autooptimize.errors import ActionRefused, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.fileio import exists
from autooptimize.iceberg.paths import PathRefused, canonical, is_within, normalise_path
from autooptimize.iceberg.references import (
    ReferenceReader,
    StoredFile,
    delete_files,
    stored_files,
    table_directories,
)
from autooptimize.services.hygiene.common import (
    AUDIT_PATHS,
    MIN_SAFE_AGE_SECONDS,
    SAMPLE,
    action_states,
    age_options,
    audit_action,
    check_option_names,
    in_flight_action_ids,
)
from autooptimize.services.hygiene.digest import live_digest
from autooptimize.services.refusals import record_refusals
from autooptimize.services.rewrite.kind import CheckpointWriter
from autooptimize.storage.models import ActionState

_AO_DIR = re.compile(r"^ao-(.+)$")
_UUID_TEXT = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID = re.compile(f"^{_UUID_TEXT}$")
# a manifest an action wrote before its commit (services/rewrite/ahead.py): ao-<action id>-<uuid>-m<n>.avro
_AO_MANIFEST = re.compile(rf"^ao-({_UUID_TEXT})-.+\.avro$")
# a sample written to measure and removed by its writer within seconds, never committed and never an action
# (explain's sizing, AutoAnalyze's output calibration): left only by a crash, then litter like a finished action's
_PROBE = re.compile(r"^(explain|calibrate)-[0-9a-f]{12}$")


def validate_remove_orphans(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The checked options (min_age a duration ≥ 1 h unless allow_short_min_age); InvalidArgument otherwise."""
    kind = "remove_orphans"
    check_option_names(kind, options, ("min_age", "allow_short_min_age"))
    return age_options(kind, options, "min_age", "allow_short_min_age")


@dataclass
class OrphanScan:
    listed: int = 0
    referenced: int = 0
    orphans: list[StoredFile] = field(default_factory=list)
    kept: Counter[str] = field(default_factory=Counter)
    kept_sample: dict[str, list[str]] = field(default_factory=dict)
    skipped_dirs: dict[str, str] = field(default_factory=dict)
    existing: dict[str, str] = field(default_factory=dict)  # canonical path → URI of every file listed

    def keep(self, reason: str, path: str) -> None:
        self.kept[reason] += 1
        sample = self.kept_sample.setdefault(reason, [])
        if len(sample) < 10:
            sample.append(path)


def _ao_segments(relative: str) -> list[str]:
    """The action ids a path belongs to: its ``ao-<id>`` directories, and for a manifest an action wrote
    ahead of its commit the id its name starts with."""
    return [m.group(1) for part in relative.split("/") if (m := _AO_MANIFEST.match(part) or _AO_DIR.match(part))]


def scan_orphans(settings: Settings, table: Table, reader: ReferenceReader, min_age: int, now: float) -> OrphanScan:
    """Files in the data and metadata directories that no snapshot or metadata references and that no
    guard keeps: younger than ``min_age``, inside the ``ao-<id>`` directory of an action that is not
    finished (or not known; a calibration sample's ``ao-explain-…`` or ``ao-calibrate-…`` counts as finished)
    or a manifest such an action wrote ahead of its commit (``ao-<id>-….avro``),
    hidden (``.x``/``_x``) unless inside a finished action's directory (Spark's ``_temporary`` left by a
    killed job), Hadoop's version hint, a symlink (listed, never followed, never deleted), or of unknown
    age."""
    scan = OrphanScan()
    location = normalise_path(table.location()).rstrip("/")
    references = reader.table_references(table)
    files: dict[str, StoredFile] = {}
    for name, directory in table_directories(table).items():
        if directory is None:
            scan.skipped_dirs[name] = "outside_table_location"
            continue
        try:
            for stored in stored_files(table.location(), directory, table.io):
                files.setdefault(stored.path, stored)
        except PathRefused:  # the directory itself leads out of the table (a link on its way)
            scan.skipped_dirs[name] = "resolves_outside_table_location"
    referenced = {canonical(p) for p in references}  # both sides canonical: links and spellings resolved
    ao_ids = {i for f in files.values() for i in _ao_segments(f.path[len(location):])}
    states = action_states(settings, [i for i in ao_ids if _UUID.match(i)])
    states.update({i: ActionState.SUCCEEDED.value for i in ao_ids if _PROBE.match(i)})
    for path, stored in sorted(files.items()):
        scan.listed += 1
        scan.existing[canonical(stored.uri)] = stored.uri
        if path in references or canonical(stored.uri) in referenced:
            scan.referenced += 1
            continue
        if not is_within(location, path):
            scan.keep("outside_table_location", path)
            continue
        relative = path[len(location) + 1:]
        parts = relative.split("/")
        ao = _ao_segments(relative)
        # a finished action's leftovers (Spark's _temporary after a killed job) are its own, not hidden
        finished_output = bool(ao) and all(i in states and ActionState(states[i]).terminal for i in ao)
        if stored.link:
            scan.keep("symlink", path)
        elif any(p.startswith((".", "_")) for p in parts) and not finished_output:
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


def missing_references(table: Table, reader: ReferenceReader, existing: dict[str, str]) -> list[str]:
    """Files the table's metadata or snapshots reference that existed when they were listed
    (``existing``: canonical path → URI) and exist no more (sorted)."""
    referenced = {canonical(p) for p in reader.table_references(table)}
    return sorted(uri for c, uri in existing.items() if c in referenced and not exists(table.io, uri))


def run_remove_orphans(settings: Settings, request: ActionRequest, spark: Any,
                       save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> ActionOutcome:
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
    outcome = ActionOutcome(state="skipped", base_snapshot_id=current.snapshot_id if current else None)
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
    if request.dry_run:  # a dry run records nothing (services/preview.py): the outcome lists them
        outcome.reason = "dry_run"
        return outcome
    if not scan.orphans:
        outcome.reason = "no_orphans"
        return outcome
    if hooks.before_commit:
        hooks.before_commit()
    # Last look before deleting: a commit since the scan may reference a file, an action may have started.
    table.refresh()
    references = reader.table_references(table)
    referenced = {canonical(p) for p in references}
    in_flight = in_flight_action_ids(settings)
    location = normalise_path(table.location()).rstrip("/")
    doomed = [f for f in scan.orphans
              if f.path not in references and canonical(f.uri) not in referenced
              and not set(_ao_segments(f.path[len(location):])) & in_flight]
    deletion = delete_files(table.location(), [f.uri for f in doomed], table.io)
    record_refusals(settings, deletion.refused[:AUDIT_PATHS], action_id=request.action_id)
    deleted = set(deletion.deleted)
    gone = [f for f in doomed if f.uri in deleted]
    outcome.files_out = len(gone)
    outcome.bytes_out = sum(f.size for f in gone)
    if gone:
        audit_action(settings, request.action_id, "orphans.deleted", files=len(gone), bytes=outcome.bytes_out,
               paths=[f.uri for f in gone[:AUDIT_PATHS]])
    table.refresh()
    missing = missing_references(table, reader, scan.existing)
    if missing:
        raise VerificationFailed(f"after removing orphans, {len(missing)} file(s) the table references are "
                                 f"missing, e.g. {', '.join(missing[:3])}")
    after_files, after_rows, after_digest = live_digest(table, table.current_snapshot())
    outcome.rows_out, outcome.checksum_out = after_rows, after_digest
    outcome.plan.update(deleted=len(gone), deleted_bytes=outcome.bytes_out,
                        deleted_sample=[f.uri for f in gone[:SAMPLE]],
                        kept_at_last_look=len(scan.orphans) - len(doomed),
                        refused=[r.audit_detail() for r in deletion.refused[:SAMPLE]])
    outcome.state, outcome.reason = "succeeded", None
    outcome.timings["total"] = time.monotonic() - started
    return outcome
