"""The merge action on a Spark Connect session: plan → rewrite → verify → checkpoint → commit.

Exactly once (DESIGN.md): the action id goes into the snapshot summary. Before working, an action
already in the table's history only records its result; a checkpointed, verified output whose inputs
are still live is committed without rewriting; otherwise the partition is rewritten. Output that is not
committed is removed, and never a file that a snapshot references.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.job_groups import cap_groups, per_commit
from autooptimize.domain.planning import Plan, PlanFile, balance_outputs, plan_bin_pack
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_KIND_PROPERTY,
    ACTION_PART_PROPERTY,
    ACTION_PARTS_PROPERTY,
    action_added_paths,
    action_parts,
    commit_replace,
    data_file_from_footer,
    find_action_snapshot,
    live_data_paths,
)
from autooptimize.iceberg.files import LiveFile, PartitionFiles, live_partitions
from autooptimize.services import evolution
from autooptimize.services.evolution import evolution_data_files, evolution_rewrite
from autooptimize.services.progress import Progress, write_groups
from autooptimize.services.sizing import NO_SIZING, Sizing, calibrate, calibration_sample

log = logging.getLogger(__name__)

#: The default of AO_MAX_GROUP_BYTES: the most input bytes one rewrite group (one Spark job) reads.
DEFAULT_MAX_GROUP_BYTES = 8 * 1024**3


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
    max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES  # no group reads more (AO_MAX_GROUP_BYTES)
    concurrency: int = 2  # group jobs in flight (AO_REWRITE_CONCURRENCY)


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


def select_partitions(table: Table, spec_id: int | None, key: str | None) -> list[PartitionFiles]:
    parts = live_partitions(table)
    if key is not None:
        pf = parts.get((spec_id if spec_id is not None else table.spec().spec_id, key))
        return [pf] if pf is not None else []
    # every spec: an older-spec partition merges within itself, or moves to the current spec (respec)
    return [pf for _, pf in sorted(parts.items())]


def refusal(table: Table, pf: PartitionFiles) -> ActionRefused | None:
    """Why this partition cannot be merged safely by this version, or None."""
    if pf.delete_files:
        return ActionRefused(
            "has_delete_files",
            f"partition {pf.key or '(unpartitioned)'} has {len(pf.delete_files)} delete file(s); "
            "fold them into the data first with the compact_deletes action, then merge",
        )
    from spark_actors.types import unsupported_reason

    reason = unsupported_reason(table.schema())
    if reason is not None:
        return ActionRefused("unsupported_type", reason)
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
        if order is not None:
            from autooptimize.services.sort import plan_sort

            files = _plan_files(pf, request.sizing)
            plan, method = plan_sort(files, [f.data_file for f in pf.data_files], table, order[0],
                                     request.target_file_size, request.tolerance, request.min_input_files,
                                     request.max_bytes, max_group_bytes=request.max_group_bytes)
            if method == "ordered":  # consecutive runs: capping keeps their ranges disjoint
                plan = cap_groups(plan, files, request.max_group_bytes, request.min_input_files)
            if plan.is_empty:
                skipped[pf.key] = "already_sorted" if method == "ordered" else "nothing_to_sort"
            else:
                plans.append((pf, plan))
            continue
        plan = _plan_partition(table, pf, request)
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


def _plan_partition(table: Table, pf: PartitionFiles, request: MergeRequest) -> Plan:
    files = _plan_files(pf, request.sizing)
    if pf.spec_id != table.spec().spec_id and evolution.wants_respec(request.options):
        # a respec moves single files too; one alone larger than the cap stays in its older spec
        return cap_groups(evolution.plan_respec(files, request.target_file_size, request.tolerance), files,
                          request.max_group_bytes, min_input_files=1)
    with_ids, without_ids = evolution.split_by_field_ids(table, files)
    subsets = [s for s in (with_ids, without_ids) if s]  # read by id and by name: never one group
    plans = [balance_outputs(plan_bin_pack(s, request.target_file_size, request.tolerance,
                                           min_input_files=request.min_input_files, max_bytes=request.max_bytes),
                             s, min_input_files=request.min_input_files)
             for s in subsets]
    plan = plans[0] if len(plans) == 1 else evolution.combine_plans(files, plans, request.target_file_size,
                                                                      request.tolerance)
    return cap_groups(plan, files, request.max_group_bytes, request.min_input_files)


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

    progress = Progress.of(request.options)
    done: list[dict[str, Any]] = []  # groups committed by earlier parts of this action (partial progress)
    if request.checkpoint and not request.dry_run:
        if progress.partial:
            done = _resume_parts(settings, table, request, hooks, save_checkpoint)
        else:
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
    if not plans and done:  # earlier parts did everything still needed
        return _parts_outcome(request, done, "completed_in_parts")
    if not plans:
        outcome.reason = next(iter(skipped.values()), "nothing_to_merge") if len(set(skipped.values())) == 1 \
            else "nothing_to_merge"
        return outcome
    if request.dry_run:
        outcome.reason = "dry_run"
        outcome.mse_after = _mse_after(partitions, plans, request.target_file_size)
        return outcome

    by_path: dict[str, LiveFile] = {f.path: f for pf, _ in plans for f in pf.data_files}

    write_started = time.monotonic()
    codec = table.properties.get("write.parquet.compression-codec", "zstd")
    written_dirs = sorted({action_dir(table, pf, request.action_id) for pf, _ in plans})
    _fence_earlier_writer(settings, table, request)
    # leftovers of an earlier attempt of this action (never the output of its committed parts)
    _remove_uncommitted(table, written_dirs, request.action_id)
    writer = {"spark_session_id": getattr(spark, "session_id", None)}
    state: dict[str, Any] = {"base_snapshot_id": outcome.base_snapshot_id, "writer": writer,
                             "dirs": sorted({*written_dirs, *(request.checkpoint or {}).get("dirs", [])})}
    if progress.partial:
        state["partial"] = True
    save_checkpoint({**state, "groups": list(done)})  # no new groups: nothing to resume yet
    # partial progress: directories unique to this attempt (an earlier part's g0 is committed output)
    suffix = f"-{uuid.uuid4().hex[:8]}" if progress.partial else ""
    jobs = [functools.partial(_rewrite, spark, table, pf, group, f"{action_dir(table, pf, request.action_id)}"
                                                                 f"/g{index}{suffix}",
                              codec, by_path, hooks, request)
            for pf, plan in plans for index, group in enumerate(plan.groups)]
    parts = _Parts(settings, request, hooks, save_checkpoint, state, done, len(jobs), progress)
    tag = f"ao-{request.action_id}"
    try:
        entries = write_groups([_tagged(spark, tag, job) for job in jobs], request.concurrency, parts.finished,
                               interrupt=lambda: _interrupt(spark, tag, written_dirs))
        outcome.timings["rewrite"] = time.monotonic() - write_started
        commit_started = time.monotonic()
        if progress.partial:
            snapshot_id = parts.commit_rest()
            entries = parts.done
        else:
            checkpoint = {**state, "groups": entries}
            save_checkpoint(checkpoint)
            if hooks.before_commit:
                hooks.before_commit()
            snapshot_id = _commit(table, request, entries)
        outcome.timings["commit"] = time.monotonic() - commit_started
    except (ConflictAbort, VerificationFailed, ActionRefused) as exc:
        _remove_uncommitted(table, written_dirs, request.action_id)
        if parts.done:  # what earlier parts committed stays committed: the failure record says so
            exc.outcome = _parts_outcome(request, parts.done, "partially_committed")  # type: ignore[attr-defined]
        raise
    except BaseException:
        # Unknown outcome (crash, lost connection): keep the output, the retry decides from history.
        raise
    if hooks.after_commit and not progress.partial:
        hooks.after_commit(snapshot_id)
    stale = [d for d in _action_dirs(table, request.action_id) if d not in written_dirs]
    _remove_uncommitted(table, stale, request.action_id)  # an earlier attempt's output elsewhere
    _fill(outcome, entries)
    outcome.state = "succeeded"
    outcome.committed_snapshot_id = snapshot_id
    outcome.checkpoint = {**state, "groups": entries}
    outcome.mse_after = _mse_after(partitions, plans, request.target_file_size,
                                   entries if not progress.partial else parts.this_attempt)
    outcome.timings["total"] = time.monotonic() - started
    return outcome


def _tagged(spark: Any, tag: str, job: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``job`` with the Spark operations it starts tagged (tags are per thread), so a failure can stop them."""
    def run() -> dict[str, Any]:
        if spark is None or not hasattr(spark, "addTag"):
            return job()
        spark.addTag(tag)
        try:
            return job()
        finally:
            spark.removeTag(tag)
    return run


def _interrupt(spark: Any, tag: str, directories: list[str]) -> None:
    """Stop this action's running group jobs and wait until Spark has removed their ``_temporary``."""
    if spark is None or not hasattr(spark, "interruptTag"):
        return
    spark.interruptTag(tag)
    deadline = time.monotonic() + WRITER_WAIT_SECONDS
    while _writing(directories) and time.monotonic() < deadline:
        time.sleep(0.2)


class _Parts:
    """Partial progress: commits finished groups in batches, each its own REPLACE snapshot (a part).

    Before each commit the checkpoint records the part's groups (so a retry finds a part that was
    committed but not recorded in the history, and commits one that was checkpointed but not
    committed); ``done`` holds every committed group of the action, earlier attempts' included.
    """

    def __init__(self, settings: Settings, request: MergeRequest, hooks: Hooks, save: CheckpointWriter,
                 state: dict[str, Any], done: list[dict[str, Any]], jobs: int, progress: Progress) -> None:
        self.request, self.hooks, self.save, self.state, self.progress = request, hooks, save, state, progress
        self.settings = settings
        self.done = list(done)
        self.this_attempt: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.jobs, self.finished_count = jobs, 0
        self.batch = per_commit(jobs, progress.max_commits)
        self.table: Table | None = None  # its own Table: the writers' threads read theirs meanwhile
        self.last_snapshot: int | None = None

    def finished(self, _index: int, entry: dict[str, Any]) -> None:
        self.finished_count += 1
        if not self.progress.partial:
            return
        self.pending.append(entry)
        if len(self.pending) >= self.batch and self.finished_count < self.jobs:
            self._commit(final=False)

    def commit_rest(self) -> int:
        self._commit(final=True)
        assert self.last_snapshot is not None
        return self.last_snapshot

    def _commit(self, final: bool) -> None:
        if self.table is None:
            self.table = load_table(self.settings, self.request.identifier)
        number = max([int(e["part"]) for e in self.done] + list(action_parts(self.table, self.request.action_id)),
                     default=0) + 1
        part = [{**e, "part": number} for e in self.pending]
        self.save({**self.state, "groups": self.done + part})
        if self.hooks.before_commit:
            self.hooks.before_commit()
        parts = len({int(e["part"]) for e in self.done} | {number}) if final else None
        snapshot_id = _commit(self.table, self.request, part, part=number, parts=parts)
        self.done.extend(part)
        self.this_attempt.extend(part)
        self.pending = []
        self.last_snapshot = snapshot_id
        log.info("action %s: committed part %d (%d groups) as snapshot %d", self.request.action_id, number,
                 len(part), snapshot_id)
        if self.hooks.after_commit:
            self.hooks.after_commit(snapshot_id)


#: How long a retry waits for an interrupted earlier write of its action to clean up after itself.
WRITER_WAIT_SECONDS = 120.0
#: Once nothing of the earlier attempt runs, how long to wait for its job's _temporary to go.
WRITER_GRACE_SECONDS = 10.0


def _fence_earlier_writer(settings: Settings, table: Table, request: MergeRequest, wait: float = WRITER_WAIT_SECONDS
                          ) -> None:
    """Stop a killed attempt's Spark job before touching its output (see spark_actors.session.fence).

    Raises Retry when the interrupted job has not cleaned up within ``wait`` seconds: the action is
    tried again later rather than racing a writer.
    """
    from autooptimize.errors import Retry
    from spark_actors.session import fence

    previous = ((request.checkpoint or {}).get("writer") or {}).get("spark_session_id")
    if not previous:
        return
    interrupted = fence(settings, previous)
    if not interrupted:
        return  # nothing of it runs (it finished, or its server died): leftovers are inert
    log.warning("action %s: interrupted %d operation(s) of an earlier attempt", request.action_id, interrupted)
    deadline = time.monotonic() + wait
    quiet_since: float | None = None
    while True:
        time.sleep(0.5)
        # interrupting again until nothing runs; then give the aborted job a moment to remove its
        # _temporary directory (it usually does at once; if not, the leftovers are inert)
        now_ = time.monotonic()
        if fence(settings, previous):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now_
        if quiet_since is not None and (not _writing(_action_dirs(table, request.action_id))
                                        or now_ - quiet_since >= WRITER_GRACE_SECONDS):
            return
        if now_ >= deadline:
            raise Retry(f"an earlier write of action {request.action_id} is still running", delay=60)


def _action_dirs(table: Table, action_id: str) -> list[str]:
    """Every ``ao-<action_id>`` directory under the table's data location."""
    import pyarrow.fs as pafs

    location = data_location(table)
    fs, root = pafs.FileSystem.from_uri(location)
    prefix = location.split("://", 1)[0] + "://" if "://" in location else ""
    return sorted(
        prefix + info.path
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        if info.type == pafs.FileType.Directory and info.base_name == f"ao-{action_id}"
    )


def _writing(directories: list[str]) -> bool:
    """True while a Spark job's ``_temporary`` directory exists below one of ``directories``."""
    import pyarrow.fs as pafs

    for directory in directories:
        fs, root = pafs.FileSystem.from_uri(directory)
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.Directory and info.base_name == "_temporary":
                return True
    return False


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
        if not all(evolution.has_field_ids(table, p) for p in sample):
            return request
        codec = table.properties.get("write.parquet.compression-codec", "zstd")
        sizing = calibrate(spark, table, sample, f"{action_dir(table, pf, request.action_id)}/calibration", codec)
        log.info("action %s: calibrated output at %.2f bytes/row from %d files", request.action_id,
                 sizing.bytes_per_row or 0, len(sample))
        return dataclasses.replace(request, sizing=sizing)
    return request


def _rewrite(spark: Any, table: Table, pf: PartitionFiles, group: Any, directory: str, codec: str,
             by_path: dict[str, LiveFile], hooks: Hooks, request: MergeRequest) -> dict[str, Any]:
    from spark_actors.rewrite import content_digest, rewrite_group
    from spark_actors.types import SPARK, engine_for

    inputs = [f.path for f in group.files]
    order = sort_spec(table, request)
    respec = pf.spec_id != table.spec().spec_id and evolution.wants_respec(request.options)
    with_ids = {evolution.has_field_ids(table, p) for p in inputs}
    if len(with_ids) != 1:
        raise VerificationFailed(f"group {directory} mixes files with and without field ids")
    spark_can = engine_for(table.schema(), field_ids=with_ids.pop()) == SPARK
    if order is not None and (respec or not spark_can):
        raise ActionRefused("sort_not_supported",
                            "sorting needs the Spark path: this group has types or files without field ids that "
                            "only the pyarrow path rewrites faithfully; merge it instead")
    if respec or not spark_can:
        return evolution_rewrite(table, pf, inputs, directory, group.files_out, codec, by_path, hooks, respec)
    sort = [(c.name, c.descending, c.nulls_first) for c in order[0]] if order else None
    result = rewrite_group(spark, table.schema(), inputs, directory, group.files_out, codec, sort=sort,
                           io=table.io)
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
        "engine": "spark",
    }


def _commit(table: Table, request: MergeRequest, entries: list[dict[str, Any]], part: int | None = None,
            parts: int | None = None) -> int:
    """One REPLACE snapshot of ``entries`` (whole groups); ``part``/``parts`` mark a partial-progress part."""
    table.refresh()
    live = {f.path: f for pf in live_partitions(table).values() for f in pf.data_files}
    inputs = [p for e in entries for p in e["inputs"]]
    gone = [p for p in inputs if p not in live]
    if gone:
        raise ConflictAbort(f"{len(gone)} input file(s) are no longer live, e.g. {gone[0]}")
    partition_of = {p: (live[p].data_file.spec_id, live[p].data_file.partition) for p in inputs}
    added: list[Any] = []
    for entry in entries:
        if "output_partitions" in entry:  # rewritten into another spec: each output has its own partition
            added.extend(evolution_data_files(table, entry))
            continue
        spec_id, record = partition_of[entry["inputs"][0]]
        added.extend(data_file_from_footer(table, p, spec_id, record, entry.get("sort_order_id"))
                     for p in entry["outputs"])
    properties = {
        ACTION_ID_PROPERTY: request.action_id,
        ACTION_KIND_PROPERTY: request.kind,
    }
    if part is not None:
        properties[ACTION_PART_PROPERTY] = str(part)
    if parts is not None:
        properties[ACTION_PARTS_PROPERTY] = str(parts)
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
        _remove_uncommitted(table, checkpoint.get("dirs", []), request.action_id)
        return None
    if hooks.before_commit:
        hooks.before_commit()
    try:
        snapshot_id = _commit(table, request, entries)
    except ConflictAbort:
        _remove_uncommitted(table, checkpoint.get("dirs", []), request.action_id)
        raise
    if hooks.after_commit:
        hooks.after_commit(snapshot_id)
    outcome = MergeOutcome(state="succeeded", reason="resumed_from_checkpoint",
                           base_snapshot_id=checkpoint.get("base_snapshot_id"),
                           committed_snapshot_id=snapshot_id, checkpoint=checkpoint)
    _fill(outcome, entries)
    return outcome


def _resume_parts(settings: Settings, table: Table, request: MergeRequest, hooks: Hooks,
                  save_checkpoint: CheckpointWriter) -> list[dict[str, Any]]:
    """Partial progress on retry: the groups of every part now committed, earlier attempts' included.

    A checkpointed part found in the table's history is only recorded. One checkpointed but not
    committed is committed when its inputs are still live and its outputs exist; otherwise it is
    dropped and its output removed (the caller rewrites what is still needed).
    """
    checkpoint = request.checkpoint or {}
    entries = checkpoint.get("groups") or []
    history = action_parts(table, request.action_id)
    done = [e for e in entries if e.get("part") in history]
    waiting: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("part") is not None and e["part"] not in history:
            waiting.setdefault(int(e["part"]), []).append(e)
    _fence_earlier_writer(settings, table, request)  # nothing of the earlier attempt may still write
    for number, part in sorted(waiting.items()):
        live = live_data_paths(table.refresh())
        if not (all(p in live for e in part for p in e["inputs"])
                and all(table.io.new_input(p).exists() for e in part for p in e["outputs"])):
            log.info("action %s: dropping checkpointed part %d (inputs changed or output gone)",
                     request.action_id, number)
            continue
        if hooks.before_commit:
            hooks.before_commit()
        try:
            snapshot_id = _commit(table, request, part, part=number)
        except ConflictAbort as exc:
            log.info("action %s: dropping checkpointed part %d: %s", request.action_id, number, exc)
            continue
        done.extend(part)
        if hooks.after_commit:
            hooks.after_commit(snapshot_id)
    save_checkpoint({**checkpoint, "groups": done})
    _remove_uncommitted(table, _action_dirs(table, request.action_id), request.action_id)
    return done


def _parts_outcome(request: MergeRequest, done: list[dict[str, Any]], reason: str) -> MergeOutcome:
    """The outcome of an action's committed parts: figures summed over them, the last part's snapshot."""
    checkpoint = {**(request.checkpoint or {}), "groups": done, "partial": True}
    outcome = MergeOutcome(state="succeeded", reason=reason, checkpoint=checkpoint,
                           base_snapshot_id=checkpoint.get("base_snapshot_id"))
    _fill(outcome, done)
    return outcome


def committed_parts(settings: Settings, request: MergeRequest) -> MergeOutcome | None:
    """For an action given up on: the figures of its parts already in the table's history, or None."""
    checkpoint = request.checkpoint or {}
    if not checkpoint.get("partial"):
        return None
    table = load_table(settings, request.identifier)
    history = action_parts(table, request.action_id)
    done = [e for e in checkpoint.get("groups") or [] if e.get("part") in history]
    if not done:
        return None
    outcome = _parts_outcome(request, done, "partially_committed")
    outcome.committed_snapshot_id = history[max(history)].snapshot_id
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


def _remove_uncommitted(table: Table, directories: list[str], action_id: str | None = None) -> None:
    """Delete our output directories, never a file the table references.

    A file is referenced when it is live, or (given ``action_id``) when a snapshot of that action added
    it: parts committed under partial progress may since have been replaced, yet history keeps them. A
    directory holding referenced files is descended into, and only its unreferenced subdirectories go.
    """
    if not directories:
        return
    table.refresh()
    keep = live_data_paths(table) | (action_added_paths(table, action_id) if action_id else set())
    location = table.location().rstrip("/") + "/"
    for directory in directories:
        if not directory.startswith(location) or "/ao-" not in directory:
            raise VerificationFailed(f"refusing to delete {directory}: not an autooptimize output in the table")
        _prune(directory, keep)


def _prune(directory: str, keep: set[str]) -> None:
    import pyarrow.fs as pafs

    from spark_actors.rewrite import delete_dir, list_parquet

    if not any(p in keep for p in list_parquet(directory)):
        delete_dir(directory)
        return
    fs, root = pafs.FileSystem.from_uri(directory)
    prefix = directory.split("://", 1)[0] + "://" if "://" in directory else ""
    children = [prefix + info.path for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
                if info.type == pafs.FileType.Directory]
    if not children:
        log.info("keeping %s: it holds files the table references", directory)
    for child in children:
        _prune(child, keep)


def abandon(settings: Settings, request: MergeRequest) -> int | None:
    """Give an action up: returns the snapshot id if it was in fact committed, else removes its
    uncommitted output (never a file the table references) and returns None."""
    table = load_table(settings, request.identifier)
    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        return committed.snapshot_id
    try:
        _fence_earlier_writer(settings, table, request, wait=30.0)
    except Exception as exc:  # unreachable server or a slow abort: clean what can be cleaned, orphan removal does the rest
        log.warning("action %s: could not fence its earlier writer: %s", request.action_id, exc)
    # output may exist without a checkpoint (crash during the write): look for the action's directories
    dirs = list((request.checkpoint or {}).get("dirs") or []) + _action_dirs(table, request.action_id)
    _remove_uncommitted(table, sorted(set(dirs)), request.action_id)
    return None
