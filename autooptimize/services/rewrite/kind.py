"""What a rewrite kind (merge/sort, compact_deletes) supplies to the one lifecycle: its planning, its
rewrite of one group, and its commit of verified groups."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyiceberg.table import Table

from autooptimize.domain.actions import ActionRequest, GroupResult, Hooks
from autooptimize.domain.profile import phase
from autooptimize.errors import ConflictAbort
from autooptimize.iceberg.commits import CommitStats
from autooptimize.iceberg.files import LiveFile, PartitionFiles, live_partitions
from autooptimize.iceberg.staging import StagedRemoval

CheckpointWriter = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Unit:
    """One group to rewrite: its partition, its index there (names its directory) and the kind's plan."""

    partition: PartitionFiles
    index: int
    work: Any


@dataclass(frozen=True)
class Planned:
    """A kind's plan of an action: the groups to rewrite, the partitions left alone and why, the plan
    as the outcome records it, the MSE before, and the MSE after (given the written groups, or None
    for the planned estimate; None when the kind has no estimate)."""

    units: tuple[Unit, ...]
    skipped: dict[str, str]
    summary: dict[str, Any]
    mse_before: float
    mse_after: Callable[[list[GroupResult] | None], float | None]
    request: ActionRequest  # the request the groups are rewritten with (e.g. calibrated sizing)


@dataclass(frozen=True)
class Committed:
    snapshot_id: int
    plan_facts: dict[str, Any] = field(default_factory=dict)  # added to the outcome's plan


def commit_facts(stats: CommitStats) -> dict[str, Any]:
    """What a commit cost, as the action's plan records it (``plan.commit``; the conflicts metric sums it)."""
    return {"commit": {"attempts": stats.attempts, "conflicts": stats.conflicts,
                       "seconds": round(stats.apply_seconds, 3)}}


class RewriteKind(Protocol):
    #: the reason when nothing was planned and partitions were skipped for different reasons
    nothing_reason: str
    #: whether a resumed checkpoint whose commit conflicts is rewritten (True) or fails the attempt
    rewrite_on_resume_conflict: bool

    def plan(self, table: Table, request: ActionRequest, spark: Any) -> Planned | None:
        """The plan on the current snapshot, or None when no partition has live files."""

    def check_writable(self, table: Table, planned: Planned) -> None:
        """Raise ActionRefused when the planned groups cannot be rewritten (checked after a dry run)."""

    def concurrency(self, request: ActionRequest) -> int:
        """Group jobs in flight."""

    def rewrite(self, spark: Any, table: Table, unit: Unit, directory: str, codec: str, hooks: Hooks,
                request: ActionRequest) -> GroupResult:
        """Rewrite one group into ``directory`` and verify it (services/rewrite/verify.verify_group)."""

    def rewrite_action(self, spark: Any, table: Table, units: list[Unit], directories: list[str], codec: str,
                       hooks: Hooks, request: ActionRequest, tag: str | None = None) -> list[GroupResult]:
        """Every group of the action (the ``spark`` engine), rewritten as the tasks of one Spark job on the
        executors and verified here from the figures they return; results in ``units`` order."""

    def removals(self, table: Table, planned: Planned) -> list[Any] | None:
        """The files the commit of every planned group removes, known from the plan alone (their DELETED
        manifests are then written while the Spark job runs, services/rewrite/ahead.py), or None."""

    def commit(self, table: Table, request: ActionRequest, groups: list[GroupResult], part: int | None = None,
               parts: int | None = None, ahead: StagedRemoval | None = None) -> Committed:
        """One REPLACE snapshot of whole ``groups``; ConflictAbort when an input is no longer live. ``ahead``:
        a StagedRemoval written ahead, taken only if it removes exactly what this commit removes."""


def group_result(pf: PartitionFiles, inputs: list[str], bytes_in: int, paths: list[str], outputs: list[Any],
                 rows_in: int, checksum_in: str, digest_out: Any, **facts: Any) -> GroupResult:
    """A verified group's record: ``outputs`` are the written DataFiles (read from their footers)."""
    sizes = tuple(int(o.file_size_in_bytes) for o in outputs)
    return GroupResult(spec_id=pf.spec_id, partition=pf.key, inputs=tuple(inputs), outputs=tuple(paths),
                       bytes_in=bytes_in, bytes_out=sum(sizes), rows_in=rows_in, rows_out=digest_out.rows,
                       checksum_in=checksum_in, checksum_out=digest_out.checksum, output_sizes=sizes, **facts)


def live_inputs(table: Table, groups: list[GroupResult]) -> tuple[dict[str, LiveFile], dict[str, LiveFile]]:
    """The table's live data and delete files by path, on its reloaded head, before a commit; ConflictAbort
    when an input of ``groups`` is no longer live (someone else rewrote or deleted it meanwhile)."""
    with phase("commit.reload"):
        table.refresh()
        partitions = live_partitions(table)
        live = {f.path: f for pf in partitions.values() for f in pf.data_files}
        live_deletes = {f.path: f for pf in partitions.values() for f in pf.delete_files}
    gone = [p for g in groups for p in g.inputs if p not in live]
    if gone:
        raise ConflictAbort(f"{len(gone)} input file(s) are no longer live, e.g. {gone[0]}")
    return live, live_deletes
