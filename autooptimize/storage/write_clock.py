"""The listener's write clock of each partition: when a writer last added a file to it and the gaps between
its recent writes (``ao_partition_stats.last_write_at`` and ``write_gaps``, kept by
:func:`autooptimize.storage.stats.apply_delta`). The policy takes a partition as cold from them
(:func:`autooptimize.domain.policy.partition_cold_after`). And the spec's late horizon, from each time
partition's ordinal and its spec's span (``ao_spec_spans``, :func:`record_spans`; :func:`is_past_late_horizon`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from autooptimize.domain.policy import HORIZON_SPAN_MARGIN, sorted_median
from autooptimize.storage.models import PartitionStats, SpecSpan
from autooptimize.storage.stats import PartitionId


def write_clock(session: Session, table_id: int, spec_id: int,
                partition_key: str) -> tuple[int | None, tuple[float, ...]]:
    """When a writer last added a file to the partition (epoch ms, or None) and its recent gaps between
    writes (seconds, newest first; empty before its second write), as the listener saw them."""
    return write_clocks(session, table_id, (spec_id, partition_key)).get((spec_id, partition_key), (None, ()))


def write_clocks(session: Session, table_id: int,
                 only: PartitionId | None = None) -> dict[PartitionId, tuple[int | None, tuple[float, ...]]]:
    """:func:`write_clock` of every partition of the table the listener knows (or of ``only``)."""
    c = PartitionStats.__table__.c
    where = [c.table_id == table_id]
    if only is not None:
        where += [c.spec_id == only[0], c.partition_key == only[1]]
    return {(r.spec_id, r.partition_key): (None if r.last_write_at is None else int(r.last_write_at.timestamp() * 1000),
                                           tuple(float(g) for g in r.write_gaps or ()))
            for r in session.execute(select(c.spec_id, c.partition_key, c.last_write_at, c.write_gaps).where(*where))}


def newest_ordinal(session: Session, table_id: int, spec_id: int) -> int | None:
    """The largest time ordinal among the spec's partitions the listener has seen (None: none)."""
    value = session.execute(select(SpecSpan.newest).where(SpecSpan.table_id == table_id,
                                                          SpecSpan.spec_id == spec_id)).scalar()
    return None if value is None else int(value)


def record_spans(session: Session, table_id: int, ordinals: dict[PartitionId, int],
                 lags: dict[PartitionId, int]) -> None:
    """Widen each spec's span (``ao_spec_spans``) by one snapshot's partitions: their ``ordinals`` and, for
    a writer's snapshot, the ``lags`` of its writes behind the spec's newest. In the snapshot's transaction."""
    by_spec: dict[int, list[int]] = {}
    for (spec_id, _), o in ordinals.items():
        by_spec.setdefault(spec_id, []).append(o)
    c = SpecSpan.__table__.c
    for spec_id, values in sorted(by_spec.items()):
        spec_lags = [lag for (s, _), lag in lags.items() if s == spec_id]
        horizon = max(spec_lags) if spec_lags else None
        session.execute(insert(SpecSpan).values(
            table_id=table_id, spec_id=spec_id, newest=max(values), oldest=min(values), horizon=horizon,
        ).on_conflict_do_update(index_elements=[c.table_id, c.spec_id], set_={
            "newest": func.greatest(c.newest, max(values)),
            "oldest": func.least(c.oldest, min(values)),
            "horizon": c.horizon if horizon is None else func.greatest(c.horizon, horizon),
        }))


def resync_spans(session: Session, table_id: int) -> None:
    """Set the table's spans from the partitions it holds now (after a whole-table scan: a table dropped
    and created again under its name starts afresh instead of inheriting the old one's span)."""
    c = PartitionStats.__table__.c
    session.execute(delete(SpecSpan).where(SpecSpan.table_id == table_id))
    session.execute(insert(SpecSpan).from_select(
        ["table_id", "spec_id", "newest", "oldest", "horizon"],
        select(c.table_id, c.spec_id, func.max(c.ordinal), func.min(c.ordinal), func.max(c.late_lag))
        .where(c.table_id == table_id, c.ordinal.is_not(None)).group_by(c.table_id, c.spec_id)))


def past_horizon(p: Any = PartitionStats) -> ColumnElement[bool]:
    """:func:`autooptimize.domain.policy.past_late_horizon` in SQL, for a partition row ``p`` joined to its
    spec's span (:func:`with_span`): false where anything is unknown (NULL), as the domain rule."""
    return and_(p.ordinal.is_not(None), SpecSpan.newest - SpecSpan.oldest >= SpecSpan.horizon + HORIZON_SPAN_MARGIN,
                SpecSpan.newest - p.ordinal > SpecSpan.horizon)


def with_span(query: Any, p: Any = PartitionStats) -> Any:
    """``query`` over partition rows ``p``, joined to each one's spec span (rows without one kept)."""
    return query.outerjoin(SpecSpan, and_(SpecSpan.table_id == p.table_id, SpecSpan.spec_id == p.spec_id))


def partitions_where(session: Session, table_id: int, condition: ColumnElement[bool],
                     only: PartitionId | None = None) -> set[PartitionId]:
    """The table's partitions (or just ``only``) whose row, joined to its spec's span (:func:`with_span`),
    meets ``condition`` (:func:`past_horizon`, :func:`behind_newest`)."""
    p = PartitionStats
    where = [p.table_id == table_id, condition]
    if only is not None:
        where += [p.spec_id == only[0], p.partition_key == only[1]]
    rows = session.execute(with_span(select(p.spec_id, p.partition_key)).where(*where)).all()
    return {(r.spec_id, r.partition_key) for r in rows}


def is_past_late_horizon(session: Session, table_id: int, spec_id: int, partition_key: str) -> bool:
    """True when the partition is past its spec's late horizon (:func:`past_horizon`)."""
    return bool(partitions_where(session, table_id, past_horizon(), (spec_id, partition_key)))


def past_horizon_partitions(session: Session, table_id: int) -> set[PartitionId]:
    """Every partition of the table past its spec's late horizon (:func:`past_horizon`)."""
    return partitions_where(session, table_id, past_horizon())


def behind_newest() -> ColumnElement[bool]:
    """A partition row joined to its spec's span (:func:`with_span`) is a time partition behind its spec's
    newest: only late data reaches it (the priced live rule, ``autooptimize.domain.priced``)."""
    return and_(PartitionStats.ordinal.is_not(None), PartitionStats.ordinal < SpecSpan.newest)


def span_verdicts(session: Session, table_id: int, spec_id: int, partition_key: str) -> tuple[bool, bool]:
    """(past its spec's late horizon, behind its spec's newest) for one partition, in one read
    (:func:`past_horizon`, :func:`behind_newest`); (False, False) when the listener does not know it."""
    p = PartitionStats
    row = session.execute(with_span(select(past_horizon(), behind_newest())).where(
        p.table_id == table_id, p.spec_id == spec_id, p.partition_key == partition_key)).first()
    return (False, False) if row is None else (bool(row[0]), bool(row[1]))


def partitions_behind_newest(session: Session, table_id: int) -> set[PartitionId]:
    """Every time partition of the table behind its spec's newest (:func:`behind_newest`)."""
    return partitions_where(session, table_id, behind_newest())


def medians_without_each(session: Session, table_id: int, target: int | None = None) -> dict[PartitionId, int | None]:
    """``storage.stats.median_partition_bytes`` (with ``target``) of every partition of the table that holds
    files, each less itself, from one read: ``explain`` takes each partition's expected bytes as decide does."""
    c = PartitionStats.__table__.c
    rows = session.execute(select(c.spec_id, c.partition_key, c.total_bytes).where(
        c.table_id == table_id, c.n_files > 0)).all()
    ordered = sorted(int(r.total_bytes) for r in rows)
    full = [b for b in ordered if target is not None and b >= target]
    out: dict[PartitionId, int | None] = {}
    for r in rows:
        own = int(r.total_bytes)
        value = sorted_median(full, own if target is not None and own >= target else None)  # the others full
        out[(r.spec_id, r.partition_key)] = value if value is not None else sorted_median(ordered, own)
    return out

