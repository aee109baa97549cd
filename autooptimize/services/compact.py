"""Delete compaction (Netflix's "compaction"): fold a partition's row-level deletes into its data files.

plan → rewrite (Spark applies the deletes) → verify → checkpoint → commit, exactly once as in
services/merge.py. The plan picks, in one partition, the data files at least one live delete file applies
to (Iceberg's rules: a position delete applies to the files it names whose data sequence number is <= its
own; an equality delete to every data file of its partition, or of the table when its spec is
unpartitioned, whose data sequence number is strictly lower). The commit is ONE REPLACE snapshot that
removes those data files, adds the rewritten ones, and removes every delete file known at plan time that
applies to no data file still live afterwards. The outputs get the new snapshot's sequence number, so no
remaining equality delete applies to them (they were applied already) and no position delete names them.

Before committing: rows read == the inputs' metadata row count, rows out == rows read − rows deleted,
and the checksum of the written files == the checksum of the delete-applied input observed in the
same Spark pass. At commit, every input and every applied delete file must still be live, and no
delete file unknown at plan time may apply to an input (else ConflictAbort; nothing is committed and
the output is removed). Concurrent appends are not conflicts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.entropy import EntropyStats
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_KIND_PROPERTY,
    commit_replace,
    data_file_from_footer,
    find_action_snapshot,
)
from autooptimize.iceberg.deletes import POS_FILE_PATH_ID
from autooptimize.iceberg.files import LiveFile, PartitionFiles, live_partitions
from autooptimize.services.evolution import has_field_ids
from autooptimize.services.merge import (
    CheckpointWriter,
    Hooks,
    MergeOutcome,
    MergeRequest,
    _fence_earlier_writer,
    _fill,
    _remove_uncommitted,
    action_dir,
    committed_outcome,
)

log = logging.getLogger(__name__)

KIND = "compact_deletes"
BROADCAST_DELETE_ROWS = 1_000_000


def _seq(f: LiveFile) -> int:
    # v1 files upgraded to v2 carry sequence number 0
    return int(f.sequence_number or 0)


def _is_position(f: LiveFile) -> bool:
    return f.data_file.content == DataFileContent.POSITION_DELETES


def _read_position_deletes(table: Table, delete_file: LiveFile) -> pa.Table:
    with table.io.new_input(delete_file.path).open() as stream:
        data = pq.read_table(stream, columns=["file_path", "pos"])
    if data.column("file_path").null_count or data.column("pos").null_count:
        raise ActionRefused("malformed_delete_file", f"position delete file {delete_file.path} has null values")
    return data


def position_references(table: Table, delete_file: LiveFile) -> frozenset[str]:
    """The data file paths a position delete file names (its ``file_path`` column)."""
    return frozenset(str(p) for p in pc.unique(_read_position_deletes(table, delete_file).column("file_path"))
                     .to_pylist())


def count_position_deletes(table: Table, deletes: list[LiveFile], inputs: list[LiveFile]) -> int:
    """Distinct (file, position) pairs of ``deletes`` that delete a row of ``inputs`` (sequence rules applied).

    Read with pyarrow, apart from the Spark job: the compaction must delete exactly this many rows when
    no equality delete applies, and at least this many otherwise.
    """
    pairs: set[tuple[str, int]] = set()
    for d in (d for d in deletes if _is_position(d)):
        rows = {f.path: f.record_count for f in inputs if _seq(d) >= _seq(f)}
        data = _read_position_deletes(table, d)
        named = data.filter(pc.is_in(data.column("file_path"), pa.array(list(rows), pa.string())))
        for path, pos in zip(named.column("file_path").to_pylist(), named.column("pos").to_pylist(), strict=True):
            if pos < rows[path]:
                pairs.add((path, pos))
    return len(pairs)


def applies(delete: LiveFile, data: LiveFile, refs: dict[str, frozenset[str]]) -> bool:
    """Whether ``delete`` (already known to be in ``data``'s scope) applies to ``data``."""
    if _is_position(delete):
        return data.path in refs[delete.path] and _seq(delete) >= _seq(data)
    return _seq(delete) > _seq(data)


@dataclass
class CompactionPlan:
    """What one partition's delete compaction rewrites and which delete files it applies."""

    partition: PartitionFiles
    inputs: list[LiveFile]
    deletes: list[LiveFile]  # delete files applying to at least one input
    scope: list[LiveFile]  # every delete file in the partition's scope at plan time
    refs: dict[str, frozenset[str]]  # position delete file → data file paths it names
    files_out: int
    position_rows: int  # distinct input rows the position deletes remove (counted without Spark)

    @property
    def bytes_in(self) -> int:
        return sum(f.size for f in self.inputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_id": self.partition.spec_id,
            "partition": self.partition.key,
            "partition_values": self.partition.values,
            "files_in": len(self.inputs),
            "files_out": self.files_out,
            "bytes_rewritten": self.bytes_in,
            "delete_files_applied": len(self.deletes),
            "delete_files_in_scope": len(self.scope),
            "position_deleted_rows": self.position_rows,
            "groups": [{"files": [f.path for f in self.inputs], "bytes_in": self.bytes_in,
                        "files_out": self.files_out}],
        }


def scope_deletes(parts: dict[tuple[int, str], PartitionFiles], pf: PartitionFiles, table: Table) -> list[LiveFile]:
    """Delete files that may apply to ``pf``'s data: its own, and equality deletes of unpartitioned specs."""
    specs = table.specs()
    found = list(pf.delete_files)
    for (spec_id, _), other in sorted(parts.items()):
        if other is pf or specs[spec_id].fields:
            continue
        found += [d for d in other.delete_files if d.data_file.content == DataFileContent.EQUALITY_DELETES]
    return found


def _may_name(delete_file: LiveFile, paths: set[str]) -> bool:
    """Whether a position delete file's ``file_path`` bounds (possibly truncated) admit one of ``paths``."""
    lower = (delete_file.data_file.lower_bounds or {}).get(POS_FILE_PATH_ID)
    upper = (delete_file.data_file.upper_bounds or {}).get(POS_FILE_PATH_ID)
    if lower is None or upper is None:
        return True
    return any(lower <= p.encode() <= upper for p in paths)


def _cross_partition(path: str, other: str) -> ActionRefused:
    return ActionRefused(
        "position_delete_outside_partition",
        f"position delete file {path} names data file {other} of another partition. The Iceberg spec applies a "
        "position delete only within its own partition but readers differ (pyiceberg applies it anyway), so "
        "rewriting would pick one reading; fix or remove that delete file first",
    )


def plan_compaction(table: Table, parts: dict[tuple[int, str], PartitionFiles], pf: PartitionFiles,
                    target_file_size: int, bytes_per_row: float | None = None) -> CompactionPlan | str:
    """The compaction plan of ``pf``, or the reason there is nothing to do.

    Raises ActionRefused when a position delete file names a live data file of another partition (in
    either direction): that is outside the spec and readers disagree on what it means.
    """
    scope = scope_deletes(parts, pf, table)
    if not scope:
        return "no_delete_files"
    refs = {d.path: position_references(table, d) for d in scope if _is_position(d)}
    home = {f.path for f in pf.data_files}
    elsewhere = {f.path for other in parts.values() if other is not pf for f in other.data_files}
    for path, named in refs.items():
        if named & elsewhere:
            raise _cross_partition(path, sorted(named & elsewhere)[0])
    for other in parts.values():
        for d in other.delete_files if other is not pf else []:
            if _is_position(d) and _may_name(d, home):
                named = position_references(table, d) & home
                if named:
                    raise _cross_partition(d.path, sorted(named)[0])
    inputs = [f for f in pf.data_files if any(applies(d, f, refs) for d in scope)]
    if not inputs:
        return "no_applicable_deletes"
    deletes = [d for d in scope if any(applies(d, f, refs) for f in inputs)]
    # output size: the rows kept times the bytes per row the table's rewrites measured (services/sizing);
    # raw input bytes before the first rewrite (small files compress far worse than merged ones)
    deleted = count_position_deletes(table, deletes, inputs)
    rows_kept = max(0, sum(f.record_count for f in inputs) - deleted)
    estimate = rows_kept * bytes_per_row if bytes_per_row else sum(f.size for f in inputs)
    files_out = max(1, round(estimate / target_file_size))
    return CompactionPlan(pf, inputs, deletes, scope, refs, files_out, deleted)


def compaction_refusal(table: Table, pf: PartitionFiles) -> ActionRefused | None:
    if pf.spec_id != table.spec().spec_id:
        return ActionRefused(
            "older_spec",
            f"partition {pf.key} belongs to partition spec {pf.spec_id}, not the current spec "
            f"{table.spec().spec_id}; rewriting older specs is not supported yet",
        )
    return None


def run_compact_deletes(
    settings: Settings,
    request: MergeRequest,
    spark: Any,
    save_checkpoint: CheckpointWriter,
    hooks: Hooks | None = None,
) -> MergeOutcome:
    """Execute (or finish) one delete-compaction action; see the module docstring for the guarantees."""
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
    parts = live_partitions(table)
    current = table.spec().spec_id
    if request.partition_key is not None:
        key = (request.spec_id if request.spec_id is not None else current, request.partition_key)
        chosen = [parts[key]] if key in parts else []
    else:
        chosen = [pf for (sid, _), pf in sorted(parts.items()) if sid == current and pf.data_files]
    if not chosen:
        outcome.reason = "no_live_files"
        return outcome

    plans: list[CompactionPlan] = []
    skipped: dict[str, str] = {}
    for pf in chosen:
        problem = compaction_refusal(table, pf)
        if problem is not None:
            if request.partition_key is not None:
                raise problem
            skipped[pf.key] = problem.reason
            continue
        try:
            plan = plan_compaction(table, parts, pf, request.target_file_size, request.sizing.bytes_per_row)
        except ActionRefused as refused:
            if request.partition_key is not None:
                raise
            plan = refused.reason
        if isinstance(plan, str):
            skipped[pf.key] = plan
        else:
            plans.append(plan)
    outcome.plan = {"partitions": [p.to_dict() for p in plans], "skipped": skipped}
    outcome.mse_before = _mse([f.size for p in plans for f in p.partition.data_files], request.target_file_size)
    outcome.timings["plan"] = time.monotonic() - started
    if not plans:
        reasons = set(skipped.values())
        outcome.reason = reasons.pop() if len(reasons) == 1 else "no_delete_files"
        return outcome
    if request.dry_run:
        outcome.reason = "dry_run"
        return outcome
    for path in (f.path for p in plans for f in p.inputs):
        if not has_field_ids(table, path):
            raise ActionRefused(
                "files_without_field_ids",
                f"input {path} has no Parquet field ids (added by name mapping); not supported yet",
            )

    codec = table.properties.get("write.parquet.compression-codec", "zstd")
    written_dirs = sorted({action_dir(table, p.partition, request.action_id) for p in plans})
    _fence_earlier_writer(settings, table, request)  # a killed attempt's Spark job must not land files later
    _remove_uncommitted(table, written_dirs)  # leftovers of an earlier attempt of this action
    writer = {"spark_session_id": getattr(spark, "session_id", None)}
    save_checkpoint({"writer": writer, "dirs": written_dirs})  # no groups: nothing to resume yet
    entries: list[dict[str, Any]] = []
    write_started = time.monotonic()
    try:
        for plan in plans:
            directory = f"{action_dir(table, plan.partition, request.action_id)}/g0"
            entries.append(_rewrite(spark, table, plan, directory, codec, hooks))
        outcome.timings["rewrite"] = time.monotonic() - write_started
        checkpoint = {"base_snapshot_id": outcome.base_snapshot_id, "groups": entries, "dirs": written_dirs,
                      "writer": writer}
        save_checkpoint(checkpoint)
        outcome.checkpoint = checkpoint
        if hooks.before_commit:
            hooks.before_commit()
        commit_started = time.monotonic()
        snapshot_id, dropped = _commit(table, request, entries)
        outcome.timings["commit"] = time.monotonic() - commit_started
    except (ConflictAbort, VerificationFailed, ActionRefused):
        _remove_uncommitted(table, written_dirs)
        raise
    if hooks.after_commit:
        hooks.after_commit(snapshot_id)
    _fill(outcome, entries)
    outcome.plan["delete_files_removed"] = dropped
    outcome.plan["rows_deleted"] = sum(e["rows_deleted"] for e in entries)
    outcome.state = "succeeded"
    outcome.committed_snapshot_id = snapshot_id
    replaced = {p for e in entries for p in e["inputs"]}
    outcome.mse_after = _mse([f.size for p in plans for f in p.partition.data_files if f.path not in replaced]
                             + [s for e in entries for s in e["output_sizes"]], request.target_file_size)
    outcome.timings["total"] = time.monotonic() - started
    return outcome


def _rewrite(spark: Any, table: Table, plan: CompactionPlan, directory: str, codec: str,
             hooks: Hooks) -> dict[str, Any]:
    from spark_actors.deletes import SequencedFile, compact_group
    from spark_actors.rewrite import content_digest

    data = [SequencedFile(f.path, _seq(f)) for f in plan.inputs]
    deletes = [
        SequencedFile(d.path, _seq(d), None if _is_position(d) else tuple(d.data_file.equality_ids or ()))
        for d in plan.deletes
    ]
    if any(d.equality_ids == () for d in deletes):
        raise ActionRefused("malformed_delete_file", "an equality delete file has no equality field ids")
    # below ~1M delete rows (tens of MB as file numbers, positions and keys) a broadcast beats a shuffle
    broadcast = sum(d.record_count for d in plan.deletes) <= BROADCAST_DELETE_ROWS
    result = compact_group(spark, table.schema(), data, deletes, directory, plan.files_out, codec, broadcast)
    if hooks.after_write:
        hooks.after_write(list(result.paths))
        digest_out = content_digest(spark, table.schema(), list(result.paths))
    else:
        digest_out = result.digest_out
    rows_in = sum(f.record_count for f in plan.inputs)
    if result.rows_read != rows_in:
        raise VerificationFailed(
            f"Spark read {result.rows_read} rows from {len(plan.inputs)} inputs but their metadata says {rows_in}"
        )
    rows_deleted = result.rows_deleted
    equality = any(d.equality_ids is not None for d in deletes)
    if rows_deleted < plan.position_rows or (not equality and rows_deleted != plan.position_rows):
        raise VerificationFailed(
            f"the rewrite of {directory} removed {rows_deleted} rows but the position deletes alone remove "
            f"{plan.position_rows}" + (" (at least)" if equality else "")
        )
    if digest_out != result.digest_kept or rows_in - rows_deleted != digest_out.rows:
        raise VerificationFailed(
            f"output of {directory} differs from its inputs with deletes applied: {rows_in} rows in − "
            f"{rows_deleted} deleted, {digest_out.rows} out; checksum {result.digest_kept.checksum} → "
            f"{digest_out.checksum}"
        )
    outputs = [data_file_from_footer(table, p, plan.partition.spec_id, plan.partition.record) for p in result.paths]
    # Spark writes an empty file when every row is deleted; the inputs are then removed with no output
    for empty in [o for o in outputs if int(o.record_count) == 0]:
        table.io.delete(str(empty.file_path))
    outputs = [o for o in outputs if int(o.record_count) > 0]
    if not outputs:
        from spark_actors.rewrite import delete_dir

        delete_dir(directory)
    footer_rows = sum(int(o.record_count) for o in outputs)
    if footer_rows != digest_out.rows:
        raise VerificationFailed(f"output footers of {directory} hold {footer_rows} rows, expected {digest_out.rows}")
    return {
        "spec_id": plan.partition.spec_id,
        "partition": plan.partition.key,
        "inputs": [f.path for f in plan.inputs],
        "outputs": [str(o.file_path) for o in outputs],
        "deletes": [d.path for d in plan.deletes],
        "scope": [d.path for d in plan.scope],
        "refs": {k: sorted(v) for k, v in plan.refs.items()},
        "bytes_in": plan.bytes_in,
        "bytes_out": sum(int(o.file_size_in_bytes) for o in outputs),
        "rows_in": rows_in,
        "rows_deleted": rows_deleted,
        "rows_out": digest_out.rows,
        "checksum_in": result.digest_kept.checksum,
        "checksum_out": digest_out.checksum,
        "output_sizes": [int(o.file_size_in_bytes) for o in outputs],
    }


def _commit(table: Table, request: MergeRequest, entries: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """Commit the outputs; returns the snapshot id and the delete files it removed."""
    table.refresh()
    parts = live_partitions(table)
    live = {f.path: f for pf in parts.values() for f in pf.data_files}
    live_deletes = {f.path: f for pf in parts.values() for f in pf.delete_files}
    inputs = [p for e in entries for p in e["inputs"]]
    gone = [p for p in inputs if p not in live]
    if gone:
        raise ConflictAbort(f"{len(gone)} input file(s) are no longer live, e.g. {gone[0]}")
    unapplied = [p for e in entries for p in e["deletes"] if p not in live_deletes]
    if unapplied:
        raise ConflictAbort(f"delete file {unapplied[0]} the output applied is no longer live")
    replaced = set(inputs)
    remaining = [f for path, f in live.items() if path not in replaced]
    remaining_paths = {f.path for f in remaining}
    specs = table.specs()
    refs = {k: frozenset(v) for e in entries for k, v in e["refs"].items()}
    dropped: list[str] = []
    for path in sorted({p for e in entries for p in e["scope"]}):
        d = live_deletes.get(path)
        if d is None:
            continue
        if _is_position(d):
            still = bool(refs[path] & remaining_paths)
        else:
            unpartitioned = not specs[d.data_file.spec_id].fields
            still = any(
                _seq(f) < _seq(d) for f in remaining
                if unpartitioned or (f.data_file.spec_id, f.data_file.partition) == (d.data_file.spec_id,
                                                                                     d.data_file.partition)
            )
        if not still:
            dropped.append(path)
    added: list[Any] = []
    for entry in entries:
        first = live[entry["inputs"][0]].data_file
        added.extend(data_file_from_footer(table, p, first.spec_id, first.partition) for p in entry["outputs"])
    if sum(e["rows_out"] for e in entries) != sum(int(f.record_count) for f in added):
        raise VerificationFailed("the checkpointed outputs do not hold the verified number of rows")
    properties = {ACTION_ID_PROPERTY: request.action_id, ACTION_KIND_PROPERTY: KIND}
    removed = [live[p].data_file for p in inputs] + [live_deletes[p].data_file for p in dropped]
    allowed = frozenset(p for e in entries for p in e["scope"])
    snapshot = commit_replace(table, removed, added, properties, allowed_deletes=allowed, allow_no_output=True)
    return snapshot.snapshot_id, dropped


def _resume_from_checkpoint(table: Table, request: MergeRequest, hooks: Hooks) -> MergeOutcome | None:
    """Commit a verified checkpoint when its inputs are still live and its outputs exist."""
    checkpoint = request.checkpoint or {}
    entries = checkpoint.get("groups") or []
    if not entries:
        return None
    outputs_exist = all(table.io.new_input(p).exists() for e in entries for p in e["outputs"])
    if not outputs_exist:
        _remove_uncommitted(table, checkpoint.get("dirs", []))
        return None
    if hooks.before_commit:
        hooks.before_commit()
    try:
        snapshot_id, dropped = _commit(table, request, entries)
    except ConflictAbort:
        # inputs or applied deletes changed since the checkpoint: rewrite from the current table
        _remove_uncommitted(table, checkpoint.get("dirs", []))
        return None
    if hooks.after_commit:
        hooks.after_commit(snapshot_id)
    outcome = MergeOutcome(state="succeeded", reason="resumed_from_checkpoint",
                           base_snapshot_id=checkpoint.get("base_snapshot_id"),
                           committed_snapshot_id=snapshot_id, checkpoint=checkpoint,
                           plan={"delete_files_removed": dropped,
                                 "rows_deleted": sum(e["rows_deleted"] for e in entries)})
    _fill(outcome, entries)
    return outcome


def _mse(sizes: list[int], target: int) -> float:
    return EntropyStats.from_sizes(sizes, target).mse
