"""The listener's write clock of each partition: when a writer last added a file to it and the gaps between
its recent writes (``ao_partition_stats.last_write_at`` and ``write_gaps``, kept by
:func:`autooptimize.storage.stats.apply_delta`). The policy takes a partition as cold from them
(:func:`autooptimize.domain.policy.partition_cold_after`). And the spec's late horizon, from each time
partition's ordinal and late lag (:func:`is_past_late_horizon`)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autooptimize.domain.policy import past_late_horizon
from autooptimize.storage.models import PartitionStats
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
    """The largest time ordinal among the spec's partitions the listener has seen written (None: none)."""
    c = PartitionStats.__table__.c
    value = session.execute(select(func.max(c.ordinal)).where(c.table_id == table_id, c.spec_id == spec_id)).scalar()
    return None if value is None else int(value)


def _spans(session: Session, table_id: int, spec_id: int | None = None) -> dict[int, tuple[int, int, int | None]]:
    """Per spec of the table (or of ``spec_id``): its newest and oldest time ordinals and its late horizon
    (the largest late lag; None before one is known)."""
    c = PartitionStats.__table__.c
    where = [c.table_id == table_id, c.ordinal.is_not(None)]
    if spec_id is not None:
        where.append(c.spec_id == spec_id)
    rows = session.execute(select(c.spec_id, func.max(c.ordinal), func.min(c.ordinal), func.max(c.late_lag))
                           .where(*where).group_by(c.spec_id)).all()
    return {int(s): (int(hi), int(lo), None if lag is None else int(lag)) for s, hi, lo, lag in rows}


def is_past_late_horizon(session: Session, table_id: int, spec_id: int, partition_key: str) -> bool:
    """True when the partition is past its spec's late horizon
    (:func:`autooptimize.domain.policy.past_late_horizon`), from the listener's ordinals and late lags."""
    c = PartitionStats.__table__.c
    ordinal = session.execute(select(c.ordinal).where(c.table_id == table_id, c.spec_id == spec_id,
                                                      c.partition_key == partition_key)).scalar()
    if ordinal is None:
        return False
    span = _spans(session, table_id, spec_id).get(spec_id)
    return span is not None and past_late_horizon(int(ordinal), *span)


def past_horizon_partitions(session: Session, table_id: int) -> set[PartitionId]:
    """Every partition of the table past its spec's late horizon (as :func:`is_past_late_horizon`)."""
    c = PartitionStats.__table__.c
    spans = _spans(session, table_id)
    rows = session.execute(select(c.spec_id, c.partition_key, c.ordinal)
                           .where(c.table_id == table_id, c.ordinal.is_not(None))).all()
    return {(r.spec_id, r.partition_key) for r in rows
            if r.spec_id in spans and past_late_horizon(int(r.ordinal), *spans[r.spec_id])}
