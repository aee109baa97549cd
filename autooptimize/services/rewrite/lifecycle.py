"""The one lifecycle of every rewrite action: plan → rewrite → verify → checkpoint → commit → bookkeeping.

Exactly once (docs/architecture.md, docs/actions.md "How a merge stays safe"): the action id goes into the snapshot summary. Before working, an action
already in the table's history only records its result; a checkpointed, verified output whose inputs
are still live is committed without rewriting; otherwise the groups are rewritten. A killed earlier
attempt's Spark job is fenced before its output is touched. Output that is not committed is removed,
and never a file that a snapshot references. With partial progress, groups commit in parts
(services/rewrite/parts.py) and a failure keeps the parts already committed. Every attempt runs under
the action's lease (services/attempt.py, docs/reliability.md): each catalog swap and each deletion below
asks the lease first (domain/fencing.py), so an attempt that lost it stops there.

A kind (services/rewrite/kind.RewriteKind) supplies only its planning, its rewrite of one group and
its commit; everything else lives here.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.actions import (
    ActionOutcome,
    ActionRequest,
    ActionState,
    Checkpoint,
    Engine,
    GroupResult,
    Hooks,
)
from autooptimize.domain.profile import carry
from autooptimize.errors import ActionRefused, CommitOutcomeUnknown, ConflictAbort, Retry, VerificationFailed
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import action_parts, find_action_snapshot
from autooptimize.iceberg.staging import metadata_path
from autooptimize.services.progress import PartialProgress, write_groups
from autooptimize.services.rewrite.ahead import removal_ahead
from autooptimize.services.rewrite.kind import CheckpointWriter, RewriteKind
from autooptimize.services.rewrite.outputs import (
    WRITER_WAIT_SECONDS,
    action_dir,
    action_dirs,
    fence_earlier_writer,
    remove_uncommitted,
    still_writing,
)
from autooptimize.services.rewrite.parts import Parts, inputs_live_outputs_exist, resume_parts

log = logging.getLogger(__name__)


def run_rewrite(kind: RewriteKind, settings: Settings, request: ActionRequest, spark: Any,
                save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> ActionOutcome:
    """Execute (or finish) one rewrite action of ``kind``; see the module docstring for the guarantees.

    A commit whose answer was lost (CommitOutcomeUnknown) leaves everything written in place and is
    recorded in the checkpoint (``unsettled_commit``) before it is raised: the next attempt settles it
    from the table's history, and nothing removes that output while the commit may still land."""
    saved: list[dict[str, Any]] = [request.checkpoint] if request.checkpoint else []

    def remember(checkpoint: dict[str, Any]) -> None:
        saved[:] = [checkpoint]
        save_checkpoint(checkpoint)

    try:
        return _run_rewrite(kind, settings, request, spark, remember, hooks)
    except CommitOutcomeUnknown as exc:
        unsettled = dict(saved[-1]) if saved else {}
        unsettled["unsettled_commit"] = {"snapshot_id": exc.snapshot_id, "parent_id": exc.parent_id}
        save_checkpoint(unsettled)
        raise


def _run_rewrite(kind: RewriteKind, settings: Settings, request: ActionRequest, spark: Any,
                 save_checkpoint: CheckpointWriter, hooks: Hooks | None = None) -> ActionOutcome:
    hooks = hooks or Hooks()
    started = time.monotonic()
    table = load_table(settings, request.identifier)

    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        return committed_outcome(request, committed.snapshot_id)

    progress = PartialProgress.of(request.options)
    unsettled = request.resume_point.unsettled_commit
    if unsettled is not None and not commit_settled(table, *unsettled):
        # an earlier attempt's commit may still land: re-commit its verified output (the catalog then takes
        # exactly one of the two) or wait; never rewrite or remove what that commit references
        resumed = None if progress.partial else _resume_from_checkpoint(kind, table, request, hooks)
        if resumed is not None:
            return resumed
        raise Retry(f"action {request.action_id}: the outcome of its commit of snapshot {unsettled[0]} is not "
                    "settled yet; its output is kept", delay=30.0)
    done: list[GroupResult] = []  # groups committed by earlier parts of this action (partial progress)
    if request.checkpoint and not request.dry_run:
        if progress.partial:
            done = resume_parts(kind, settings, table, request, hooks, save_checkpoint)
        else:
            resumed = _resume_from_checkpoint(kind, table, request, hooks)
            if resumed is not None:
                return resumed

    base = table.current_snapshot()
    outcome = ActionOutcome(state=ActionState.SKIPPED.value, base_snapshot_id=base.snapshot_id if base else None)
    planned = kind.plan(table, request, spark)
    if planned is None:
        outcome.reason = "no_live_files"
        return outcome
    request = planned.request
    outcome.mse_before = planned.mse_before
    outcome.plan = planned.summary
    outcome.timings["plan"] = time.monotonic() - started
    if not planned.units and done:  # earlier parts did everything still needed
        return _parts_outcome(request, done, "completed_in_parts")
    if not planned.units:
        reasons = set(planned.skipped.values())
        outcome.reason = reasons.pop() if len(reasons) == 1 else kind.nothing_reason
        return outcome
    if request.dry_run:
        outcome.reason = "dry_run"
        outcome.mse_after = planned.mse_after(None)
        return outcome
    kind.check_writable(table, planned)
    metadata_path(table, "check.avro")  # its manifests must go inside the table too: refused before any work

    write_started = time.monotonic()
    codec = table.properties.get("write.parquet.compression-codec", "zstd")
    written_dirs = sorted({action_dir(table, u.partition, request.action_id) for u in planned.units})
    fence_earlier_writer(settings, table, request)  # a killed attempt's Spark job must not land files later
    # leftovers of an earlier attempt of this action (never the output of its committed parts)
    remove_uncommitted(table, written_dirs, request.action_id)
    state = Checkpoint(base_snapshot_id=outcome.base_snapshot_id, writer_session_id=getattr(spark, "session_id", None),
                       dirs=tuple(sorted({*written_dirs, *request.resume_point.dirs})), partial=progress.partial)
    save_checkpoint(state.with_groups(done).to_dict())  # no new groups: nothing to resume yet
    # partial progress: directories unique to this attempt (an earlier part's g0 is committed output)
    suffix = f"-{uuid.uuid4().hex[:8]}" if progress.partial else ""
    directories = [f"{action_dir(table, unit.partition, request.action_id)}/g{unit.index}{suffix}"
                   for unit in planned.units]
    parts = Parts(kind, settings, request, hooks, save_checkpoint, state, done, len(directories), progress)
    tag = spark_tag(request.action_id)
    plan_facts: dict[str, Any] = {"engine": request.engine}
    ahead = None  # the inputs' DELETED manifests, written while the Spark job runs (services/rewrite/ahead.py)
    try:
        if request.engine == Engine.SPARK.value:  # every group a task of one Spark job on the executors
            if not progress.partial:
                ahead = removal_ahead(table, kind.removals(table, planned), request.action_id)
            groups = _in_one_job(kind, spark, table, list(planned.units), directories, codec, hooks, request, tag,
                                 parts.finished, lambda: _interrupt(spark, tag, written_dirs))
        else:
            jobs = [functools.partial(kind.rewrite, spark, table, unit, directory, codec, hooks, request)
                    for unit, directory in zip(planned.units, directories, strict=True)]
            groups = write_groups([carry(_tagged(spark, tag, job)) for job in jobs], kind.concurrency(request),
                                  parts.finished, interrupt=lambda: _interrupt(spark, tag, written_dirs))
        outcome.timings["rewrite"] = time.monotonic() - write_started
        commit_started = time.monotonic()
        if progress.partial:
            snapshot_id = parts.commit_rest()
            groups = parts.done
        else:
            save_checkpoint(state.with_groups(groups).to_dict())
            if hooks.before_commit:
                hooks.before_commit()
            result = kind.commit(table, request, groups, ahead=ahead.take() if ahead is not None else None)
            snapshot_id, plan_facts = result.snapshot_id, {**plan_facts, **result.plan_facts}
        outcome.timings["commit"] = time.monotonic() - commit_started
    except (ConflictAbort, VerificationFailed, ActionRefused) as exc:
        landed = _landed(table, request)  # an earlier attempt's unsettled commit may be what conflicted
        if landed is not None:
            return landed
        remove_uncommitted(table, written_dirs, request.action_id)
        if parts.done:  # what earlier parts committed stays committed: the failure record says so
            exc.outcome = _parts_outcome(request, parts.done, "partially_committed")  # type: ignore[attr-defined]
        raise
    finally:
        if ahead is not None:  # not taken by a commit (the job failed, or the commit removed other files)
            ahead.discard()
    # any other error (crash, lost connection) leaves the outcome unknown: the output stays, the retry
    # decides from the table's history
    if hooks.after_commit and not progress.partial:
        hooks.after_commit(snapshot_id)
    stale = [d for d in action_dirs(table, request.action_id) if d not in written_dirs]
    remove_uncommitted(table, stale, request.action_id)  # an earlier attempt's output elsewhere
    outcome.add_figures(groups)
    outcome.state = ActionState.SUCCEEDED.value
    outcome.committed_snapshot_id = snapshot_id
    outcome.checkpoint = state.with_groups(groups).to_dict()
    outcome.plan = {**outcome.plan, **plan_facts}
    outcome.mse_after = planned.mse_after(groups if not progress.partial else parts.this_attempt)
    outcome.timings["total"] = time.monotonic() - started
    return outcome


def _in_one_job(kind: RewriteKind, spark: Any, table: Any, units: list[Any], directories: list[str], codec: str,
                hooks: Hooks, request: ActionRequest, tag: str, on_done: Callable[[int, GroupResult], None],
                interrupt: Callable[[], None]) -> list[GroupResult]:
    """The ``spark`` engine: the kind's groups as the tasks of one Spark job (``kind.rewrite_action``),
    then ``on_done`` for each verified group in order. On any failure the job's tasks are stopped by tag
    and waited for before the error is raised (nobody cleans output a task is still writing)."""
    try:
        groups = kind.rewrite_action(spark, table, units, directories, codec, hooks, request, tag)
        for i, group in enumerate(groups):
            on_done(i, group)
        return groups
    except BaseException:
        try:
            interrupt()
        except Exception as exc:  # stopping early is an optimisation; the job has ended or its server is gone
            log.warning("could not interrupt the action's Spark job: %s", exc)
        raise


def _resume_from_checkpoint(kind: RewriteKind, table: Any, request: ActionRequest, hooks: Hooks
                            ) -> ActionOutcome | None:
    """Commit a verified checkpoint when its inputs are still live and its outputs exist; None to rewrite."""
    checkpoint = request.resume_point
    if not checkpoint.groups:
        return None
    if not inputs_live_outputs_exist(table, checkpoint.groups):
        remove_uncommitted(table, checkpoint.dirs, request.action_id)
        return None
    if hooks.before_commit:
        hooks.before_commit()
    try:
        result = kind.commit(table, request, list(checkpoint.groups))
    except ConflictAbort:
        landed = _landed(table, request)  # the earlier attempt's unsettled commit landed meanwhile
        if landed is not None:
            return landed
        remove_uncommitted(table, checkpoint.dirs, request.action_id)
        if kind.rewrite_on_resume_conflict:  # e.g. an applied delete file is gone: rewrite from the table
            return None
        raise
    if hooks.after_commit:
        hooks.after_commit(result.snapshot_id)
    outcome = ActionOutcome(state=ActionState.SUCCEEDED.value, reason="resumed_from_checkpoint",
                           base_snapshot_id=checkpoint.base_snapshot_id, committed_snapshot_id=result.snapshot_id,
                           checkpoint=request.checkpoint, plan=result.plan_facts or None)
    outcome.add_figures(checkpoint.groups)
    return outcome


def _landed(table: Any, request: ActionRequest) -> ActionOutcome | None:
    """The action's outcome when a fresh look at the table's history finds it committed, else None."""
    table.refresh()
    committed = find_action_snapshot(table, request.action_id)
    return committed_outcome(request, committed.snapshot_id) if committed is not None else None


def _parts_outcome(request: ActionRequest, done: list[GroupResult], reason: str) -> ActionOutcome:
    """The outcome of an action's committed parts: figures summed over them, the last part's snapshot."""
    checkpoint = replace(request.resume_point, groups=tuple(done), partial=True)
    outcome = ActionOutcome(state=ActionState.SUCCEEDED.value, reason=reason, checkpoint=checkpoint.to_dict(),
                           base_snapshot_id=checkpoint.base_snapshot_id)
    outcome.add_figures(done)
    return outcome


def committed_parts(settings: Settings, request: ActionRequest) -> ActionOutcome | None:
    """For an action given up on: the figures of its parts already in the table's history, or None."""
    checkpoint = request.resume_point
    if not checkpoint.partial:
        return None
    table = load_table(settings, request.identifier)
    history = action_parts(table, request.action_id)
    done = [g for g in checkpoint.groups if g.part in history]
    if not done:
        return None
    outcome = _parts_outcome(request, done, "partially_committed")
    outcome.committed_snapshot_id = history[max(history)].snapshot_id
    return outcome


def committed_outcome(request: ActionRequest, snapshot_id: int) -> ActionOutcome:
    """The outcome of an action found in the table's history: its checkpoint's figures."""
    outcome = ActionOutcome(state=ActionState.SUCCEEDED.value, reason="already_committed",
                           committed_snapshot_id=snapshot_id, checkpoint=request.checkpoint)
    outcome.add_figures(request.resume_point.groups)
    if request.checkpoint:
        outcome.base_snapshot_id = request.resume_point.base_snapshot_id
    return outcome


def abandon(settings: Settings, request: ActionRequest) -> int | None:
    """Give an action up: returns the snapshot id if it was in fact committed, else removes its
    uncommitted output (never a file the table references) and returns None.

    Raises CommitOutcomeUnknown, removing nothing, while a commit whose answer was lost may still land
    (the branch has not moved past the head it was sent on)."""
    table = load_table(settings, request.identifier)
    committed = find_action_snapshot(table, request.action_id)
    if committed is not None:
        return committed.snapshot_id
    unsettled = request.resume_point.unsettled_commit
    if unsettled is not None and not commit_settled(table, *unsettled):
        raise CommitOutcomeUnknown(
            f"action {request.action_id}: its commit of snapshot {unsettled[0]} may still land (the branch is "
            "still at the head it was sent on); its output is kept", snapshot_id=unsettled[0], parent_id=unsettled[1])
    try:
        fence_earlier_writer(settings, table, request, wait=30.0)
    except Exception as exc:  # unreachable server or a slow abort: clean what can be cleaned, orphan removal does the rest
        log.warning("action %s: could not fence its earlier writer: %s", request.action_id, exc)
    # output may exist without a checkpoint (crash during the write): look for the action's directories
    dirs = list(request.resume_point.dirs) + action_dirs(table, request.action_id)
    remove_uncommitted(table, sorted(set(dirs)), request.action_id)
    return None


def commit_settled(table: Any, snapshot_id: int, parent_id: int | None) -> bool:
    """Whether a commit of ``snapshot_id`` on top of ``parent_id`` whose answer was lost can no longer
    land: it is in the metadata, or the main branch has moved past ``parent_id`` without it (the catalog
    swaps only on the parent it was sent with)."""
    if table.metadata.snapshot_by_id(snapshot_id) is not None:
        return True
    head = table.current_snapshot()
    return (head.snapshot_id if head is not None else None) != parent_id


def spark_tag(action_id: str) -> str:
    """The tag on every Spark operation of the action's group jobs: ``interruptTag`` stops them all."""
    return f"ao-{action_id}"


def _tagged(spark: Any, tag: str, job: Callable[[], GroupResult]) -> Callable[[], GroupResult]:
    """``job`` with the Spark operations it starts tagged (tags are per thread), so a failure can stop them."""
    def run() -> GroupResult:
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
    while still_writing(directories) and time.monotonic() < deadline:
        time.sleep(0.2)
