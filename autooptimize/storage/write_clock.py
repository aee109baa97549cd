"""The listener's write clock of each partition: when a writer last added a file to it and the gaps between
its recent writes (``ao_partition_stats.last_write_at`` and ``write_gaps``, kept by
:func:`autooptimize.storage.stats.apply_delta`). The policy takes a partition as cold from them
(:func:`autooptimize.domain.policy.partition_cold_after`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

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
