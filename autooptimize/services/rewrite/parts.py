"""Partial progress: an action's groups committed in batches (parts), and a retry's view of its parts."""

from __future__ import annotations

import logging

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionRequest, Checkpoint, GroupResult, Hooks
from autooptimize.domain.job_groups import per_commit
from autooptimize.errors import ConflictAbort
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import action_parts, live_data_paths
from autooptimize.services.progress import PartialProgress
from autooptimize.services.rewrite.kind import CheckpointWriter, RewriteKind
from autooptimize.services.rewrite.outputs import action_dirs, fence_earlier_writer, remove_uncommitted

log = logging.getLogger(__name__)


def inputs_live_outputs_exist(table: Table, groups: list[GroupResult] | tuple[GroupResult, ...]) -> bool:
    """Whether checkpointed ``groups`` may still be committed as they are."""
    live = live_data_paths(table)
    return (all(p in live for g in groups for p in g.inputs)
            and all(table.io.new_input(p).exists() for g in groups for p in g.outputs))


class Parts:
    """Partial progress: commits finished groups in batches, each its own REPLACE snapshot (a part).

    Before each commit the checkpoint records the part's groups (so a retry finds a part that was
    committed but not recorded in the history, and commits one that was checkpointed but not
    committed); ``done`` holds every committed group of the action, earlier attempts' included.
    """

    def __init__(self, kind: RewriteKind, settings: Settings, request: ActionRequest, hooks: Hooks,
                 save: CheckpointWriter, state: Checkpoint, done: list[GroupResult], jobs: int,
                 progress: PartialProgress) -> None:
        self.kind, self.request, self.hooks, self.save, self.state = kind, request, hooks, save, state
        self.settings, self.progress = settings, progress
        self.done = list(done)
        self.this_attempt: list[GroupResult] = []
        self.pending: list[GroupResult] = []
        self.jobs, self.finished_count = jobs, 0
        self.batch = per_commit(jobs, progress.max_commits)
        self.table: Table | None = None  # its own Table: the writers' threads read theirs meanwhile
        self.last_snapshot: int | None = None

    def finished(self, _index: int, group: GroupResult) -> None:
        self.finished_count += 1
        if not self.progress.partial:
            return
        self.pending.append(group)
        if len(self.pending) >= self.batch and self.finished_count < self.jobs:
            self._commit(final=False)

    def commit_rest(self) -> int:
        self._commit(final=True)
        assert self.last_snapshot is not None
        return self.last_snapshot

    def _commit(self, final: bool) -> None:
        if self.table is None:
            self.table = load_table(self.settings, self.request.identifier)
        number = max([int(g.part or 0) for g in self.done] + list(action_parts(self.table, self.request.action_id)),
                     default=0) + 1
        part = [g.in_part(number) for g in self.pending]
        self.save(self.state.with_groups(self.done + part).to_dict())
        if self.hooks.before_commit:
            self.hooks.before_commit()
        parts = len({int(g.part or 0) for g in self.done} | {number}) if final else None
        snapshot_id = self.kind.commit(self.table, self.request, part, part=number, parts=parts).snapshot_id
        self.done.extend(part)
        self.this_attempt.extend(part)
        self.pending = []
        self.last_snapshot = snapshot_id
        log.info("action %s: committed part %d (%d groups) as snapshot %d", self.request.action_id, number,
                 len(part), snapshot_id)
        if self.hooks.after_commit:
            self.hooks.after_commit(snapshot_id)


def resume_parts(kind: RewriteKind, settings: Settings, table: Table, request: ActionRequest, hooks: Hooks,
                 save_checkpoint: CheckpointWriter) -> list[GroupResult]:
    """Partial progress on retry: the groups of every part now committed, earlier attempts' included.

    A checkpointed part found in the table's history is only recorded. One checkpointed but not
    committed is committed when its inputs are still live and its outputs exist; otherwise it is
    dropped and its output removed (the caller rewrites what is still needed).
    """
    checkpoint = request.resume_point
    history = action_parts(table, request.action_id)
    done = [g for g in checkpoint.groups if g.part in history]
    waiting: dict[int, list[GroupResult]] = {}
    for g in checkpoint.groups:
        if g.part is not None and g.part not in history:
            waiting.setdefault(int(g.part), []).append(g)
    fence_earlier_writer(settings, table, request)  # nothing of the earlier attempt may still write
    for number, part in sorted(waiting.items()):
        if not inputs_live_outputs_exist(table.refresh(), part):
            log.info("action %s: dropping checkpointed part %d (inputs changed or output gone)",
                     request.action_id, number)
            continue
        if hooks.before_commit:
            hooks.before_commit()
        try:
            snapshot_id = kind.commit(table, request, part, part=number).snapshot_id
        except ConflictAbort as exc:
            log.info("action %s: dropping checkpointed part %d: %s", request.action_id, number, exc)
            continue
        done.extend(part)
        if hooks.after_commit:
            hooks.after_commit(snapshot_id)
    save_checkpoint(checkpoint.with_groups(done).to_dict())
    remove_uncommitted(table, action_dirs(table, request.action_id), request.action_id)
    return done
