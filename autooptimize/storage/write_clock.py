"""The listener's write clock of each partition: when a writer last added a file to it and the gaps between
its recent writes (``ao_partition_stats.last_write_at`` and ``write_gaps``, kept by
:func:`autooptimize.storage.stats.apply_delta`). The policy takes a partition as cold from them
(:func:`autooptimize.domain.policy.partition_cold_after`). And the spec's late horizon, from each time
partition's ordinal and late lag (:func:`late_horizon_facts`)."""

from __future__ import annotations

from typing import Any

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


def late_horizon_facts(session: Session, table_id: int, spec_id: int,
                       partition_key: str) -> tuple[int | None, int | None, int | None, int | None]:
    """(the partition's ordinal, the spec's newest and oldest ordinals, its late horizon: the largest late
    lag), as :func:`autooptimize.domain.policy.past_late_horizon` takes them; None where unknown."""
    c = PartitionStats.__table__.c
    mine = session.execute(select(c.ordinal).where(c.table_id == table_id, c.spec_id == spec_id,
                                                   c.partition_key == partition_key)).scalar()
    row = session.execute(select(func.max(c.ordinal), func.min(c.ordinal), func.max(c.late_lag))
                          .where(c.table_id == table_id, c.spec_id == spec_id, c.ordinal.is_not(None))).one()

    def num(v: Any) -> int | None:
        return None if v is None else int(v)

    return num(mine), num(row[0]), num(row[1]), num(row[2])


def past_horizon_partitions(session: Session, table_id: int) -> set[PartitionId]:
    """The table's partitions past their spec's late horizon
    (:func:`autooptimize.domain.policy.past_late_horizon`), from the listener's ordinals and late lags."""
    c = PartitionStats.__table__.c
    rows = session.execute(select(c.spec_id, c.partition_key, c.ordinal, c.late_lag)
                           .where(c.table_id == table_id, c.ordinal.is_not(None))).all()
    spans: dict[int, tuple[int, int, int | None]] = {}
    for r in rows:
        newest, oldest, horizon = spans.get(r.spec_id, (r.ordinal, r.ordinal, None))
        lag = horizon if r.late_lag is None else max(horizon or 0, r.late_lag)
        spans[r.spec_id] = (max(newest, r.ordinal), min(oldest, r.ordinal), lag)
    return {(r.spec_id, r.partition_key) for r in rows if past_late_horizon(r.ordinal, *spans[r.spec_id])}
