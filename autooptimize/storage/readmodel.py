"""Read-only aggregates over the action log and the partition statistics, for metrics, the console and
``history``. Every figure is computed by PostgreSQL at the time of the call, so it is the same whichever
process asks and however many workers wrote the rows. Repositories: take a Session, never commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Integer, and_, cast, func, select
from sqlalchemy.orm import Session

from autooptimize.domain.entropy import partition_needs_attention
from autooptimize.storage.models import Action, ActionState, AuditLog, PartitionStats, TrackedTable
from autooptimize.storage.observe_models import TableCursor

#: Kinds whose bytes_in are data files read and written again (hygiene kinds free or list bytes instead).
REWRITE_KINDS = ("merge", "sort", "zorder", "compact_deletes")
#: Upper bounds (seconds) of the action duration histogram's buckets.
SECONDS_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


@dataclass(frozen=True)
class DurationBuckets:
    """Finished actions of one kind: cumulative counts at each bound of SECONDS_BUCKETS, count and sum."""

    cumulative: tuple[int, ...]
    count: int
    total_seconds: float


@dataclass(frozen=True)
class TableFigures:
    """What the partition statistics say about one tracked table (the listener keeps them current)."""

    identifier: str
    files: int
    bytes: int
    small_files: int
    partitions: int
    over_threshold: int


def action_counts(session: Session) -> list[tuple[str, str, str, int]]:
    """``(kind, state, trigger, actions)`` for every combination present."""
    rows = session.execute(select(Action.kind, Action.state, Action.trigger, func.count())
                           .group_by(Action.kind, Action.state, Action.trigger)
                           .order_by(Action.kind, Action.state, Action.trigger))
    return [(kind, state, trigger, int(n)) for kind, state, trigger, n in rows]


def action_durations(session: Session, bounds: Sequence[float] = SECONDS_BUCKETS) -> dict[str, DurationBuckets]:
    """Seconds from first start to finish of every finished action, bucketed per kind."""
    seconds = func.extract("epoch", Action.finished_at - Action.started_at)
    columns = [func.count().filter(seconds <= bound) for bound in bounds]
    rows = session.execute(
        select(Action.kind, *columns, func.count(), func.coalesce(func.sum(seconds), 0))
        .where(Action.finished_at.is_not(None), Action.started_at.is_not(None))
        .group_by(Action.kind).order_by(Action.kind))
    out: dict[str, DurationBuckets] = {}
    for row in rows:
        kind, *counts = row
        total = float(counts.pop())
        count = int(counts.pop())
        out[kind] = DurationBuckets(tuple(int(c) for c in counts), count, total)
    return out


def bytes_rewritten(session: Session) -> dict[str, int]:
    """Input bytes of the committed rewrites, per kind (an action committed in parts counts its parts)."""
    rows = session.execute(select(Action.kind, func.coalesce(func.sum(Action.bytes_in), 0))
                           .where(Action.kind.in_(REWRITE_KINDS), Action.committed_snapshot_id.is_not(None))
                           .group_by(Action.kind))
    return {kind: int(total or 0) for kind, total in rows}


def commit_conflicts(session: Session) -> dict[str, int]:
    """Commits that met a concurrent writer: ``retried`` counts races lost and re-applied on the new head
    (from each action's ``plan.commit.conflicts``), ``aborted`` the actions whose inputs a concurrent
    change removed (state aborted, reason conflict)."""
    conflicts = cast(Action.plan["commit"]["conflicts"].astext, Integer)
    retried = session.execute(select(func.coalesce(func.sum(conflicts), 0))
                              .where(Action.plan.is_not(None))).scalar_one()
    aborted = session.execute(select(func.count()).select_from(Action).where(
        Action.state == ActionState.ABORTED.value, Action.reason == "conflict")).scalar_one()
    return {"retried": int(retried or 0), "aborted": int(aborted or 0)}


def decision_failure_count(session: Session) -> int:
    """Every ``decision.failed`` record (a partition decide could not handle)."""
    return int(session.execute(select(func.count()).select_from(AuditLog)
                               .where(AuditLog.event == "decision.failed")).scalar_one())


def table_figures(session: Session, catalog: str) -> list[TableFigures]:
    """Files, bytes, small files and partitions that need attention (the health rule, the domain's
    rule) per tracked table of ``catalog`` that the listener has observed, from the partition statistics
    (a table not observed yet has none to report)."""
    rows = session.execute(
        select(TrackedTable.identifier, TrackedTable.tolerance, TrackedTable.target_file_size,
               PartitionStats.n_files, PartitionStats.sse, PartitionStats.total_bytes, PartitionStats.small_files,
               PartitionStats.small_bytes)
        .join(TableCursor, TableCursor.table_id == TrackedTable.id)
        .join(PartitionStats, PartitionStats.table_id == TrackedTable.id, isouter=True)
        .where(TrackedTable.catalog == catalog, TableCursor.target_file_size.is_not(None))
        .order_by(TrackedTable.identifier))
    figures: dict[str, list[int]] = {}
    for identifier, tolerance, target, n, sse, total, small, small_bytes in rows:
        entry = figures.setdefault(identifier, [0, 0, 0, 0, 0])
        if n is None:  # no statistics yet
            continue
        entry[0] += int(n)
        entry[1] += int(total)
        entry[2] += int(small)
        entry[3] += 1 if n else 0
        entry[4] += partition_needs_attention(int(sse), int(n), int(small), int(small_bytes), int(target),
                                              int(tolerance))
    return [TableFigures(name, *values) for name, values in figures.items()]


@dataclass(frozen=True)
class HistoryFilter:
    """Which actions to list: each field narrows the list when set; newest first."""

    table: str | None = None
    kind: str | None = None
    state: str | None = None
    trigger: str | None = None
    partition: str | None = None  # the partition key (canonical JSON)
    limit: int = 50
    offset: int = 0


def action_history(session: Session, catalog: str, where: HistoryFilter
                   ) -> tuple[list[tuple[Action, TrackedTable]], int]:
    """The actions matching ``where`` with their tracked table, newest first, and how many match."""
    conditions = [TrackedTable.catalog == catalog]
    if where.table is not None:
        conditions.append(TrackedTable.identifier == where.table)
    for column, value in ((Action.kind, where.kind), (Action.state, where.state), (Action.trigger, where.trigger),
                          (Action.partition_key, where.partition)):
        if value is not None:
            conditions.append(column == value)
    base = select(Action, TrackedTable).join(TrackedTable, TrackedTable.id == Action.table_id)
    total = session.execute(select(func.count()).select_from(Action)
                            .join(TrackedTable, TrackedTable.id == Action.table_id)
                            .where(and_(*conditions))).scalar_one()
    rows = session.execute(base.where(and_(*conditions))
                           .order_by(Action.created_at.desc(), Action.id)
                           .limit(where.limit).offset(where.offset))
    return [(action, table) for action, table in rows], int(total)


def last_actions(session: Session, catalog: str) -> dict[str, Action]:
    """The newest action of each tracked table of ``catalog`` that has one."""
    ranked = (select(Action.id, func.row_number().over(partition_by=Action.table_id,
                                                       order_by=Action.created_at.desc()).label("rank"))
              .subquery())
    rows = session.execute(
        select(Action, TrackedTable.identifier)
        .join(ranked, and_(ranked.c.id == Action.id, ranked.c.rank == 1))
        .join(TrackedTable, TrackedTable.id == Action.table_id)
        .where(TrackedTable.catalog == catalog))
    return {identifier: action for action, identifier in rows}


def distinct_values(session: Session) -> dict[str, list[str]]:
    """The kinds, states and triggers present in the action log (the console's filter choices)."""
    out: dict[str, list[str]] = {}
    for name, column in (("kind", Action.kind), ("state", Action.state), ("trigger", Action.trigger)):
        out[name] = [v for (v,) in session.execute(select(column).distinct().order_by(column))]
    return out
