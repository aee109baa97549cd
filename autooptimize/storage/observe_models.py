"""Models of the Observe step (migration 0002): the per-table snapshot cursor, and the indexes it adds to
tables declared in :mod:`autooptimize.storage.models` (declared here so Alembic's metadata matches)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, String, Text, false, func, text
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import TIMESTAMP

from autooptimize.storage.models import Base, EntropyHistory


class TableCursor(Base):
    """Where the listener stands on one table: stats hold exactly the changes up to ``last_snapshot_id``.

    The stats of a table and its cursor change in one transaction, so a crash never half-applies a snapshot.
    """

    __tablename__ = "ao_table_cursors"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"), primary_key=True
    )
    last_snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_sequence_number: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    metadata_location: Mapped[str | None] = mapped_column(Text, nullable=True)
    table_uuid: Mapped[str | None] = mapped_column(String(36), nullable=True)
    target_file_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    needs_scan: Mapped[bool] = mapped_column(Boolean, server_default=false(), default=False)
    scan_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    snapshots_applied: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    scans: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    attention_enqueued: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    skipped_below_threshold: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    skipped_pending: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_error_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    observed_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        TIMESTAMP(timezone=True), server_default=func.now(), onupdate=func.now()
    )


# A snapshot's effect on a partition is recorded once (scans may repeat at one snapshot).
Index(
    "uq_ao_entropy_history_snapshot",
    EntropyHistory.table_id,
    EntropyHistory.spec_id,
    EntropyHistory.partition_key,
    EntropyHistory.snapshot_id,
    unique=True,
    postgresql_where=text("source = 'snapshot'"),
)
Index("ix_ao_entropy_history_table_snapshot", EntropyHistory.table_id, EntropyHistory.snapshot_id)
