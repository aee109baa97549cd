"""rewrite_manifests: cluster the current snapshot's data manifests by partition (see iceberg/manifests.py)."""

from __future__ import annotations

import time
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionOutcome, ActionRequest, Hooks
from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY, ACTION_KIND_PROPERTY, find_action_snapshot
from autooptimize.iceberg.manifests import (
    ManifestSet,
    commit_manifest_rewrite,
    data_manifests,
    manifest_target_size,
)
from autooptimize.services.hygiene.common import SAMPLE, check_option_names, int_option
from autooptimize.services.hygiene.digest import live_digest
from autooptimize.services.rewrite.kind import CheckpointWriter
from autooptimize.services.tracking import size_arg


def validate_rewrite_manifests(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The checked options (manifest_threshold ≥ 1, target_manifest_size a size); InvalidArgument otherwise."""
    kind = "rewrite_manifests"
    check_option_names(kind, options, ("manifest_threshold", "target_manifest_size"))
    out: dict[str, Any] = {}
    if "manifest_threshold" in options:
        out["manifest_threshold"] = int_option(kind, "manifest_threshold", options["manifest_threshold"], 1)
    if "target_manifest_size" in options:
        out["target_manifest_size"] = size_arg(f"option target_manifest_size of {kind}", options["target_manifest_size"])
    return out


def run_rewrite_manifests(settings: Settings, request: ActionRequest, spark: Any,
                          save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> ActionOutcome:
    """Rewrite the current snapshot's data manifests clustered by partition when there are more than
    ``manifest_threshold`` of them; files in/out are manifests, rows and the live-file digest must not change."""
    hooks = hooks or Hooks()
    started = time.monotonic()
    table = load_table(settings, request.identifier)
    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        summary = committed.summary or {}
        return ActionOutcome(state="succeeded", reason="already_committed",
                            base_snapshot_id=committed.parent_snapshot_id,
                            committed_snapshot_id=committed.snapshot_id,
                            files_in=int(summary.get("manifests-replaced", 0)),
                            files_out=int(summary.get("manifests-created", 0)))
    threshold = int(request.options.get("manifest_threshold") or settings.manifest_threshold)
    target = int(request.options.get("target_manifest_size") or manifest_target_size(table))
    base = table.current_snapshot()
    outcome = ActionOutcome(state="skipped", base_snapshot_id=base.snapshot_id if base else None)
    if base is None:
        outcome.reason = "no_snapshot"
        return outcome
    manifests = ManifestSet.of(data_manifests(table, base))
    files, rows, digest = live_digest(table, base)
    outcome.files_in, outcome.bytes_in = manifests.count, manifests.total_bytes
    outcome.rows_in, outcome.checksum_in = rows, digest
    outcome.plan = {"data_manifests": manifests.count, "manifest_threshold": threshold,
                    "target_manifest_size": target, "live_files": files}
    if manifests.count <= threshold:
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
    outcome.files_in, outcome.bytes_in = report.before.count, report.before.total_bytes
    outcome.files_out, outcome.bytes_out = report.after.count, report.after.total_bytes
    outcome.rows_in, outcome.checksum_in = parent_rows, parent_digest
    outcome.rows_out, outcome.checksum_out = rows_out, digest_out
    outcome.plan.update(partitions=report.partitions, delete_manifests_kept=report.delete_manifests_kept,
                        manifests_written=report.written[:SAMPLE])
    outcome.timings["total"] = time.monotonic() - started
    return outcome
