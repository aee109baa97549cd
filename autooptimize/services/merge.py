"""The merge action on a Spark Connect session: plan → rewrite → verify → checkpoint → commit.

Exactly once (DESIGN.md): the action id goes into the snapshot summary. Before working, an action
already in the table's history only records its result; a checkpointed, verified output whose inputs
are still live is committed without rewriting; otherwise the partition is rewritten. Output that is not
committed is removed, and never a file that a snapshot references.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, balance_outputs, plan_bin_pack
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_KIND_PROPERTY,
    commit_replace,
    data_file_from_footer,
    find_action_snapshot,
    live_data_paths,
)
from autooptimize.iceberg.files import LiveFile, PartitionFiles, live_partitions
from autooptimize.services.sizing import NO_SIZING, Sizing, calibrate, calibration_sample

log = logging.getLogger(__name__)


@dataclass
class Hooks:
    """Fault-injection points for tests and operators' probes; each defaults to doing nothing."""

    after_write: Callable[[list[str]], None] | None = None
    before_commit: Callable[[], None] | None = None
    after_commit: Callable[[int], None] | None = None


@dataclass(frozen=True)
class MergeRequest:
    action_id: str
    identifier: str
    spec_id: int | None
    partition_key: str | None  # None: every partition of the current spec
    target_file_size: int
    tolerance: int
    min_input_files: int
    max_bytes: int | None
    checkpoint: dict[str, Any] | None
    dry_run: bool = False
    kind: str = "merge"
    sort_order: str | None = None  # the table's configured sort order ("col_a,col_b"), if any
    options: dict[str, Any] = field(default_factory=dict)  # the action's options as submitted
    sizing: Sizing = NO_SIZING  # output bytes per row learned from the table's rewrites (services/sizing)


@dataclass
class MergeOutcome:
    state: str  # succeeded | skipped
    reason: str | None = None
    base_snapshot_id: int | None = None
    committed_snapshot_id: int | None = None
    files_in: int = 0
    files_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    checksum_in: str | None = None
    checksum_out: str | None = None
    mse_before: float | None = None
    mse_after: float | None = None
    plan: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)


CheckpointWriter = Callable[[dict[str, Any]], None]


def _plan_files(pf: PartitionFiles, sizing: Sizing = NO_SIZING) -> list[PlanFile]:
    return [PlanFile(path=f.path, size=f.size, record_count=f.record_count, out_size=sizing.out_size(f.record_count))
            for f in pf.data_files]


def plan_to_dict(pf: PartitionFiles, plan: Plan) -> dict[str, Any]:
    return {
        "spec_id": pf.spec_id,
        "partition": pf.key,
        "partition_values": pf.values,
        "mse_before": plan.mse_before,
        "mse_after": plan.mse_after,
        "files_in": plan.files_in,
        "files_out": plan.files_out,
        "bytes_rewritten": plan.bytes_rewritten,
        "groups": [
            {"files": [f.path for f in g.files], "bytes_in": g.bytes_in, "files_out": g.files_out,
             "bytes_out_estimate": g.bytes_out}
            for g in plan.groups
        ],
    }


def data_location(table: Table) -> str:
    """Where rewritten files go; refuses a data path outside the table's location."""
    location = table.location().rstrip("/")
    data_path = table.properties.get("write.data.path", f"{location}/data").rstrip("/")
    if not (data_path + "/").startswith(location + "/"):
        raise ActionRefused(
            "data_path_outside_location",
            f"write.data.path {data_path} is outside the table location {location}; autooptimize never writes there",
        )
    return data_path


def action_dir(table: Table, pf: PartitionFiles, action_id: str) -> str:
    """The directory an action writes a partition's output to; owned by that action alone."""
    base = data_location(table)
    part = f"/{pf.key}" if pf.key else ""
    return f"{base}{part}/ao-{action_id}"


def _has_field_ids(table: Table, path: str) -> bool:
    with table.io.new_input(path).open() as stream:
        schema = pq.read_schema(stream)
    return all(f.metadata and b"PARQUET:field_id" in f.metadata for f in schema)


def select_partitions(table: Table, spec_id: int | None, key: str | None) -> list[PartitionFiles]:
    parts = live_partitions(table)
    if key is not None:
        pf = parts.get((spec_id if spec_id is not None else table.spec().spec_id, key))
        return [pf] if pf is not None else []
    return [pf for (sid, _), pf in sorted(parts.items()) if sid == table.spec().spec_id]


def refusal(table: Table, pf: PartitionFiles) -> ActionRefused | None:
    """Why this partition cannot be merged safely by this version, or None."""
    if pf.delete_files:
        return ActionRefused(
            "has_delete_files",
            f"partition {pf.key or '(unpartitioned)'} has {len(pf.delete_files)} delete file(s); "
            "merging it needs delete compaction, which is not supported yet",
        )
    if pf.spec_id != table.spec().spec_id:
        return ActionRefused(
            "older_spec",
            f"partition {pf.key} belongs to partition spec {pf.spec_id}, not the current spec "
            f"{table.spec().spec_id}; rewriting older specs is not supported yet",
        )
    return None


def plan_partitions(
    table: Table, partitions: list[PartitionFiles], request: MergeRequest
) -> tuple[list[tuple[PartitionFiles, Plan]], dict[str, str]]:
    """The merge plan of each partition, and a reason for each partition left alone.

    Pure planning on the current snapshot's metadata: ``explain`` and the action call this same
    function, so an explained plan is what the action executes while the table is unchanged.
    """
    plans: list[tuple[PartitionFiles, Plan]] = []
    skipped: dict[str, str] = {}
    order = sort_spec(table, request)
    for pf in partitions:
        problem = refusal(table, pf)
        if problem is not None:
            skipped[pf.key] = problem.reason
            continue
        files = _plan_files(pf, request.sizing)
        if order is not None:
            from autooptimize.services.sort import plan_sort

            plan, method = plan_sort(files, [f.data_file for f in pf.data_files], table, order[0],
                                     request.target_file_size, request.tolerance, request.min_input_files,
                                     request.max_bytes)
            if plan.is_empty:
                skipped[pf.key] = "already_sorted" if method == "ordered" else "nothing_to_sort"
            else:
                plans.append((pf, plan))
            continue
        plan = plan_bin_pack(
            files, request.target_file_size, request.tolerance,
            min_input_files=request.min_input_files, max_bytes=request.max_bytes,
        )
        plan = balance_outputs(plan, files, min_input_files=request.min_input_files)
        if plan.is_empty:
            skipped[pf.key] = "below_threshold" if plan.mse_before < request.tolerance**2 else "nothing_to_merge"
            continue
        plans.append((pf, plan))
    return plans, skipped


def sort_spec(table: Table, request: MergeRequest) -> tuple[Any, int | None] | None:
    """For a sort action, its columns and the table's sort order id when they are the table's order."""
    if request.kind != "sort":
        return None
    from autooptimize.services.sort import resolve_sort_order

    return resolve_sort_order(table, request.options.get("sort_order"), request.sort_order)


def run_merge(
    settings: Settings,
    request: MergeRequest,
    spark: Any,
    save_checkpoint: CheckpointWriter,
    hooks: Hooks | None = None,
) -> MergeOutcome:
    """Execute (or finish) one merge action; see the module docstring for the guarantees."""
    hooks = hooks or Hooks()
    started = time.monotonic()
    table = load_table(settings, request.identifier)

    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        return committed_outcome(request, committed.snapshot_id)

    if request.checkpoint and not request.dry_run:
        resumed = _resume_from_checkpoint(table, request, hooks)
        if resumed is not None:
            return resumed

    base = table.current_snapshot()
    outcome = MergeOutcome(state="skipped", base_snapshot_id=base.snapshot_id if base else None)
    partitions = select_partitions(table, request.spec_id, request.partition_key)
    if not partitions:
        outcome.reason = "no_live_files"
        return outcome

    if request.sizing.bytes_per_row is None and not request.dry_run and spark is not None:
        request = _calibrated(spark, table, partitions, request)
    plans, skipped = plan_partitions(table, partitions, request)
    if request.partition_key is not None and skipped:
        problem = refusal(table, partitions[0])
        if problem is not None:
            raise problem

    stats_before = [EntropyStats.from_sizes([f.size for f in pf.data_files], request.target_file_size)
                    for pf in partitions]
    outcome.mse_before = _mse(stats_before)
    outcome.plan = {"partitions": [plan_to_dict(pf, plan) for pf, plan in plans], "skipped": skipped,
                    "sizing": request.sizing.as_dict()}
    outcome.timings["plan"] = time.monotonic() - started
    if not plans:
        outcome.reason = next(iter(skipped.values()), "nothing_to_merge") if len(set(skipped.values())) == 1 \
            else "nothing_to_merge"
        return outcome
    if request.dry_run:
        outcome.reason = "dry_run"
        outcome.mse_after = _mse_after(partitions, plans, request.target_file_size)
        return outcome

    by_path: dict[str, LiveFile] = {f.path: f for pf, _ in plans for f in pf.data_files}
    for path in {f.path for _, plan in plans for g in plan.groups for f in g.files}:
        if not _has_field_ids(table, path):
            raise ActionRefused(
                "files_without_field_ids",
                f"input {path} has no Parquet field ids (added by name mapping); not supported yet",
            )

    write_started = time.monotonic()
    codec = table.properties.get("write.parquet.compression-codec", "zstd")
    entries: list[dict[str, Any]] = []
    written_dirs = sorted({action_dir(table, pf, request.action_id) for pf, _ in plans})
    _remove_uncommitted(table, written_dirs)  # leftovers of an earlier attempt of this action
    order = sort_spec(table, request)
    try:
        for pf, plan in plans:
            for index, group in enumerate(plan.groups):
                directory = f"{action_dir(table, pf, request.action_id)}/g{index}"
                entries.append(_rewrite(spark, table, pf, group, directory, codec, by_path, hooks, order))
        outcome.timings["rewrite"] = time.monotonic() - write_started

        checkpoint = {
            "base_snapshot_id": outcome.base_snapshot_id,
            "groups": entries,
            "dirs": written_dirs,
        }
        save_checkpoint(checkpoint)
        outcome.checkpoint = checkpoint
        if hooks.before_commit:
            hooks.before_commit()
        commit_started = time.monotonic()
        snapshot_id = _commit(table, request, entries)
        outcome.timings["commit"] = time.monotonic() - commit_started
    except (ConflictAbort, VerificationFailed, ActionRefused):
        _remove_uncommitted(table, written_dirs)
        raise
    except BaseException:
        # Unknown outcome (crash, lost connection): keep the output, the retry decides from history.
        raise
    if hooks.after_commit:
        hooks.after_commit(snapshot_id)
    _fill(outcome, entries)
    outcome.state = "succeeded"
    outcome.committed_snapshot_id = snapshot_id
    outcome.mse_after = _mse_after(partitions, plans, request.target_file_size, entries)
    outcome.timings["total"] = time.monotonic() - started
    return outcome


def _calibrated(spark: Any, table: Table, partitions: list[PartitionFiles], request: MergeRequest) -> MergeRequest:
    """The request with output bytes per row measured by a Spark sample, when sizing can matter.

    Only partitions this version may merge count, and only when one holds at least a target's worth
    of candidate files (smaller partitions write one file whatever the estimate). The sample is
    written under the action's own directory and removed.
    """
    import dataclasses

    target = request.target_file_size
    for pf in partitions:
        if refusal(table, pf) is not None:
            continue
        candidates = [(f.size, f.path) for f in pf.data_files if f.size < target]
        if sum(size for size, _ in candidates) < target or len(candidates) < request.min_input_files:
            continue
        sample = calibration_sample(candidates, target)
        if not all(_has_field_ids(table, p) for p in sample):
            return request
        codec = table.properties.get("write.parquet.compression-codec", "zstd")
        sizing = calibrate(spark, table, sample, f"{action_dir(table, pf, request.action_id)}/calibration", codec)
        log.info("action %s: calibrated output at %.2f bytes/row from %d files", request.action_id,
                 sizing.bytes_per_row or 0, len(sample))
        return dataclasses.replace(request, sizing=sizing)
    return request


def _rewrite(spark: Any, table: Table, pf: PartitionFiles, group: Any, directory: str, codec: str,
             by_path: dict[str, LiveFile], hooks: Hooks, order: tuple[Any, int | None] | None = None) -> dict[str, Any]:
    from spark_actors.rewrite import content_digest, rewrite_group

    inputs = [f.path for f in group.files]
    sort = [(c.name, c.descending, c.nulls_first) for c in order[0]] if order else None
    result = rewrite_group(spark, table.schema(), inputs, directory, group.files_out, codec, sort=sort)
    if hooks.after_write:
        hooks.after_write(list(result.paths))
        digest_out = content_digest(spark, table.schema(), list(result.paths))
    else:
        digest_out = result.digest_out
    metadata_rows = sum(by_path[p].record_count for p in inputs)
    if result.digest_in.rows != metadata_rows:
        raise VerificationFailed(
            f"Spark read {result.digest_in.rows} rows from {len(inputs)} inputs but their metadata says {metadata_rows}"
        )
    if digest_out != result.digest_in:
        raise VerificationFailed(
            f"output of {directory} differs from its inputs: rows {result.digest_in.rows} → {digest_out.rows}, "
            f"checksum {result.digest_in.checksum} → {digest_out.checksum}"
        )
    sort_order_id = order[1] if order else None
    outputs = [data_file_from_footer(table, p, pf.spec_id, pf.record, sort_order_id) for p in result.paths]
    footer_rows = sum(int(o.record_count) for o in outputs)
    if footer_rows != digest_out.rows:
        raise VerificationFailed(f"output footers of {directory} hold {footer_rows} rows, expected {digest_out.rows}")
    if order:
        from autooptimize.services.sort import check_sorted_outputs

        check_sorted_outputs(table, outputs, order[0][0])
    return {
        "sort_order_id": sort_order_id,
        "spec_id": pf.spec_id,
        "partition": pf.key,
        "inputs": inputs,
        "outputs": list(result.paths),
        "bytes_in": sum(by_path[p].size for p in inputs),
        "bytes_out": sum(int(o.file_size_in_bytes) for o in outputs),
        "rows_in": result.digest_in.rows,
        "rows_out": digest_out.rows,
        "checksum_in": result.digest_in.checksum,
        "checksum_out": digest_out.checksum,
        "output_sizes": [int(o.file_size_in_bytes) for o in outputs],
    }


def _commit(table: Table, request: MergeRequest, entries: list[dict[str, Any]]) -> int:
    table.refresh()
    live = {f.path: f for pf in live_partitions(table).values() for f in pf.data_files}
    inputs = [p for e in entries for p in e["inputs"]]
    gone = [p for p in inputs if p not in live]
    if gone:
        raise ConflictAbort(f"{len(gone)} input file(s) are no longer live, e.g. {gone[0]}")
    partition_of = {p: (live[p].data_file.spec_id, live[p].data_file.partition) for p in inputs}
    added: list[Any] = []
    for entry in entries:
        spec_id, record = partition_of[entry["inputs"][0]]
        added.extend(data_file_from_footer(table, p, spec_id, record, entry.get("sort_order_id"))
                     for p in entry["outputs"])
    properties = {
        ACTION_ID_PROPERTY: request.action_id,
        ACTION_KIND_PROPERTY: request.kind,
    }
    snapshot = commit_replace(table, [live[p].data_file for p in inputs], added, properties)
    return snapshot.snapshot_id


def _resume_from_checkpoint(table: Table, request: MergeRequest, hooks: Hooks) -> MergeOutcome | None:
    """Commit a verified checkpoint when its inputs are still live and its outputs exist."""
    checkpoint = request.checkpoint or {}
    entries = checkpoint.get("groups") or []
    if not entries:
        return None
    live = live_data_paths(table)
    inputs_live = all(p in live for e in entries for p in e["inputs"])
    outputs_exist = all(table.io.new_input(p).exists() for e in entries for p in e["outputs"])
    if not (inputs_live and outputs_exist):
        _remove_uncommitted(table, checkpoint.get("dirs", []))
        return None
    if hooks.before_commit:
        hooks.before_commit()
    try:
        snapshot_id = _commit(table, request, entries)
    except ConflictAbort:
        _remove_uncommitted(table, checkpoint.get("dirs", []))
        raise
    if hooks.after_commit:
        hooks.after_commit(snapshot_id)
    outcome = MergeOutcome(state="succeeded", reason="resumed_from_checkpoint",
                           base_snapshot_id=checkpoint.get("base_snapshot_id"),
                           committed_snapshot_id=snapshot_id, checkpoint=checkpoint)
    _fill(outcome, entries)
    return outcome


def committed_outcome(request: MergeRequest, snapshot_id: int) -> MergeOutcome:
    outcome = MergeOutcome(state="succeeded", reason="already_committed", committed_snapshot_id=snapshot_id,
                           checkpoint=request.checkpoint)
    _fill(outcome, (request.checkpoint or {}).get("groups") or [])
    if request.checkpoint:
        outcome.base_snapshot_id = request.checkpoint.get("base_snapshot_id")
    return outcome


def _fill(outcome: MergeOutcome, entries: list[dict[str, Any]]) -> None:
    outcome.files_in = sum(len(e["inputs"]) for e in entries)
    outcome.files_out = sum(len(e["outputs"]) for e in entries)
    outcome.bytes_in = sum(e["bytes_in"] for e in entries)
    outcome.bytes_out = sum(e["bytes_out"] for e in entries)
    outcome.rows_in = sum(e["rows_in"] for e in entries)
    outcome.rows_out = sum(e["rows_out"] for e in entries)
    outcome.checksum_in = _combine([e["checksum_in"] for e in entries])
    outcome.checksum_out = _combine([e["checksum_out"] for e in entries])


def _combine(checksums: list[str]) -> str | None:
    """Sum per-group digests (they are sums of row hashes, so they add up)."""
    if not checksums:
        return None
    rows = h1 = h2 = 0
    for c in checksums:
        r, a, b = c.split(":")
        rows, h1, h2 = rows + int(r), h1 + int(a, 16), h2 + int(b, 16)
    return f"{rows}:{h1:x}:{h2:x}"


def _mse(stats: list[EntropyStats]) -> float:
    total = EntropyStats.empty()
    for s in stats:
        total = total.merge(s)
    return total.mse


def _mse_after(partitions: list[PartitionFiles], plans: list[tuple[PartitionFiles, Plan]], target: int,
               entries: list[dict[str, Any]] | None = None) -> float:
    """MSE over the chosen partitions after the rewrite: measured output sizes when known, else planned."""
    replaced = {p for _, plan in plans for g in plan.groups for p in (f.path for f in g.files)}
    sizes = [f.size for pf in partitions for f in pf.data_files if f.path not in replaced]
    if entries is not None:
        sizes += [s for e in entries for s in e["output_sizes"]]
        return EntropyStats.from_sizes(sizes, target).mse
    planned = sum((plan.mse_after * len(pf.data_files) for pf, plan in plans), 0.0)
    return planned / max(1, sum(len(pf.data_files) for pf, _ in plans))


def _remove_uncommitted(table: Table, directories: list[str]) -> None:
    """Delete our output directories, refusing if any file in them is referenced by the table."""
    from spark_actors.rewrite import delete_dir, list_parquet

    if not directories:
        return
    table.refresh()
    live = live_data_paths(table)
    location = table.location().rstrip("/") + "/"
    for directory in directories:
        if not directory.startswith(location) or "/ao-" not in directory:
            raise VerificationFailed(f"refusing to delete {directory}: not an autooptimize output in the table")
        referenced = [p for p in list_parquet(directory) if p in live]
        if referenced:
            log.error("not removing %s: %d file(s) are live in the table", directory, len(referenced))
            continue
        delete_dir(directory)


def abandon(settings: Settings, request: MergeRequest) -> int | None:
    """Give an action up: returns the snapshot id if it was in fact committed, else removes its
    uncommitted output (never a file the table references) and returns None."""
    table = load_table(settings, request.identifier)
    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        return committed.snapshot_id
    dirs = list((request.checkpoint or {}).get("dirs") or [])
    location = data_location(table)
    # output may exist without a checkpoint (crash during the write): look for the action's directories
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(location)
    prefix = location.split("://", 1)[0] + "://" if "://" in location else ""
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.Directory and info.base_name == f"ao-{request.action_id}":
            dirs.append(prefix + info.path)
    _remove_uncommitted(table, sorted(set(dirs)))
    return None
