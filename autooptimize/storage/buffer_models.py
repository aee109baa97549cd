"""Models of the buffer zone (migration 0003): buffered tables with their rules, landed files, and
consolidation batches. A batch's id is decided before any work and claims its files by row."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, validates
from sqlalchemy.types import TIMESTAMP

from autooptimize.redact import redact
from autooptimize.storage.models import Base, CatalogTableKey


class FileState(str, enum.Enum):
    BUFFERED = "buffered"  # landed, waiting for a batch
    CLAIMED = "claimed"  # belongs to a batch that is not committed yet
    COMMITTED = "committed"  # its rows are in the table (the buffer copy is removed afterwards)
    QUARANTINED = "quarantined"  # unreadable at consolidation; moved aside with a reason


class BatchState(str, enum.Enum):
    CLAIMED = "claimed"  # id decided, files claimed; nothing durable written yet
    WRITTEN = "written"  # output written, verified and checkpointed
    COMMITTED = "committed"  # in the table's history; buffer files may still exist
    DONE = "done"  # buffer files removed
    EMPTY = "empty"  # every file was quarantined; nothing to commit


class BufferTable(CatalogTableKey, Base):
    """A table that takes buffered writes, with its consolidation rules (None: the service default)."""

    __tablename__ = "ao_buffer_tables"
    max_age_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    min_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_files: Mapped[int | None] = mapped_column(Integer, nullable=True)
    combinable: Mapped[bool] = mapped_column(Boolean, server_default=true())
    callback_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=func.now(),
                                                 onupdate=func.now())


class BufferFile(Base):
    """One landed Parquet file: the checkpointed buffer state of its table."""

    __tablename__ = "ao_buffer_files"
    __table_args__ = (
        Index("ix_ao_buffer_files_table_state_arrived", "buffer_table_id", "state", "arrived_at"),
        Index("ix_ao_buffer_files_batch", "batch_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    buffer_table_id: Mapped[int] = mapped_column(ForeignKey("ao_buffer_tables.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text, unique=True)  # in the buffer zone, never in the table
    source: Mapped[str] = mapped_column(Text)  # where the producer's file came from
    partitions: Mapped[list[str]] = mapped_column(JSONB, default=list)  # partition paths its rows fall in
    schema_fp: Mapped[str] = mapped_column(String(64))  # files with one fingerprint are read together
    rows: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    arrived_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=func.now())
    state: Mapped[str] = mapped_column(String(20), default=FileState.BUFFERED.value)
    batch_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    @validates("reason")
    def _masked(self, _key: str, value: str | None) -> str | None:
        return redact(value) if value else value


class BufferBatch(Base):
    """One consolidation: its id goes into the append snapshot's summary (``autooptimize.batch-id``)."""

    __tablename__ = "ao_buffer_batches"
    __table_args__ = (Index("ix_ao_buffer_batches_table_state", "buffer_table_id", "state"),
                      Index("ix_ao_buffer_batches_finished_at", "finished_at"))

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    buffer_table_id: Mapped[int] = mapped_column(ForeignKey("ao_buffer_tables.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(20), default=BatchState.CLAIMED.value)
    trigger: Mapped[str] = mapped_column(String(40))  # the rule that fired, or "flush"
    files: Mapped[int] = mapped_column(Integer, default=0)
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0)
    rows_in: Mapped[int] = mapped_column(BigInteger, default=0)
    files_out: Mapped[int | None] = mapped_column(Integer, nullable=True)
    bytes_out: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    rows_out: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    checksum_in: Mapped[str | None] = mapped_column(String(100), nullable=True)
    checksum_out: Mapped[str | None] = mapped_column(String(100), nullable=True)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    committed_snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    timings: Mapped[dict[str, float]] = mapped_column(JSONB, default=dict)
    created_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=func.now())
    committed_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)

    @validates("error")
    def _masked(self, _key: str, value: str | None) -> str | None:
        return redact(value) if value else value
    finished_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
