"""SQLAlchemy 2.0 models of autooptimize's state. Every table is prefixed ``ao_``: the catalog's own
tables (pyiceberg's SqlCatalog may share the database) are never touched by our migrations."""

from __future__ import annotations

import enum
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Numeric,
    Sequence,
    String,
    Text,
    UniqueConstraint,
    false,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column, validates
from sqlalchemy.types import TIMESTAMP

from autooptimize.domain.actions import ActionState
from autooptimize.redact import redact, redact_value

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class CatalogTableKey:
    """The key of a row that stands for one Iceberg table: an id, and (catalog, identifier) unique."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        # a fresh constraint per table: one constraint object cannot belong to two tables
        return (UniqueConstraint("catalog", "identifier"),)

    # sort_order: first in the table, as the migrations created them
    id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-3)
    catalog: Mapped[str] = mapped_column(String(200), sort_order=-2)
    identifier: Mapped[str] = mapped_column(String(500), sort_order=-1)


def _now() -> Any:
    return func.now()


class Trigger(str, enum.Enum):
    EVENT = "event"
    SCHEDULE = "schedule"
    AD_HOC = "ad-hoc"


class TrackedTable(CatalogTableKey, Base):
    __tablename__ = "ao_tracked_tables"

    target_file_size: Mapped[int] = mapped_column(BigInteger)
    tolerance: Mapped[int] = mapped_column(BigInteger)
    min_input_files: Mapped[int] = mapped_column(Integer, default=2)
    priority_class: Mapped[str] = mapped_column(String(50), default="normal")
    weight: Mapped[int] = mapped_column(Integer, default=1)
    sort_order: Mapped[str | None] = mapped_column(Text, nullable=True)
    zorder_columns: Mapped[str | None] = mapped_column(Text, nullable=True)  # "a, b" (migration 0008)
    allowed_actions: Mapped[list[str]] = mapped_column(JSONB, default=lambda: ["merge"])
    max_bytes_per_action: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    min_interval_seconds: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # the merge tuning (migration 0009; NULL: the service's defaults) and AutoAnalyze's last suggestion
    merge_fan_in: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cold_after_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    # a partition is cold after this many times its recent gaps between writes (migration 0014; NULL:
    # AO_COLD_GAP_FACTOR; 0: only the cold-after time)
    cold_gap_factor: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the priced live rule's price (migration 0017; NULL: AO_MERGE_PRICE; 0: the tiers)
    merge_price: Mapped[int | None] = mapped_column(Integer, nullable=True)
    leave_alone_below: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    quiet_merge: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # the cold finish gives its remainder a home (migration 0018; NULL: AO_COLD_ABSORB)
    cold_absorb: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    auto_tune: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    suggested_tuning: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    suggested_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    # who the table belongs to in the fair dispatch (migration 0013_tenant; NULL: its namespace's first level)
    tenant: Mapped[str | None] = mapped_column(String(63), nullable=True)
    created_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=_now())
    updated_at: Mapped[datetime] = mapped_column(
        TIMESTAMP(timezone=True), server_default=_now(), onupdate=_now()
    )


class PartitionStats(Base):
    """Current File Size Entropy of one partition: N and SSE are kept, MSE is derived."""

    __tablename__ = "ao_partition_stats"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"), primary_key=True
    )
    spec_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    partition_key: Mapped[str] = mapped_column(Text, primary_key=True)
    partition_values: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    n_files: Mapped[int] = mapped_column(BigInteger, default=0)
    sse: Mapped[Decimal] = mapped_column(Numeric(40, 0), default=0)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    small_files: Mapped[int] = mapped_column(BigInteger, default=0)
    # Σ bytes of the files under the target (migration 0009): the health rule's capped bytes
    small_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # when a writer last added a file here (a REPLACE is not a write; migration 0009): the policy's clock
    last_write_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    # seconds between the partition's last writes, newest first, at most 3 (migration 0014): its own
    # cold-after time (autooptimize.domain.policy.partition_cold_after); NULL until its second write
    write_gaps: Mapped[list[float] | None] = mapped_column(ARRAY(Float), nullable=True)
    # the value of its spec's time field (hour, day, month or year) and the most partitions behind the
    # spec's newest that a write to it landed (migration 0015): the table's late horizon
    ordinal: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    late_lag: Mapped[int | None] = mapped_column(Integer, nullable=True)
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        TIMESTAMP(timezone=True), server_default=_now(), onupdate=_now()
    )
    # decide's last verdict ("skip:<reason>" or the kind submitted) and when; see services/submit_decided
    last_decision: Mapped[str | None] = mapped_column(String(60), nullable=True)
    last_decision_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)


class SpecSpan(Base):
    """One time-partitioned spec of a table as the listener has seen it (migration 0016): the newest and
    oldest ordinal of its partitions and its late horizon (the most partitions behind the newest that a
    write has landed; NULL before a write was seen). Only grows: a partition that is later removed does
    not narrow it."""

    __tablename__ = "ao_spec_spans"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"), primary_key=True
    )
    spec_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    newest: Mapped[int] = mapped_column(BigInteger)
    oldest: Mapped[int] = mapped_column(BigInteger)
    horizon: Mapped[int | None] = mapped_column(Integer, nullable=True)


class EntropyHistory(Base):
    __tablename__ = "ao_entropy_history"
    __table_args__ = (Index("ix_ao_entropy_history_partition", "table_id", "spec_id", "partition_key"),
                      Index("ix_ao_entropy_history_recorded_at", "recorded_at"))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"))
    spec_id: Mapped[int] = mapped_column(Integer)
    partition_key: Mapped[str] = mapped_column(Text)
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    source: Mapped[str] = mapped_column(String(20))  # snapshot | scan | action
    n_files: Mapped[int] = mapped_column(BigInteger)
    sse: Mapped[Decimal] = mapped_column(Numeric(40, 0))
    mse: Mapped[float] = mapped_column(Float)
    recorded_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=_now())


class Action(Base):
    """One unit of work with an id decided before any work; the id goes into the commit's summary."""

    __tablename__ = "ao_actions"
    __table_args__ = (
        Index("ix_ao_actions_table_state", "table_id", "state"),
        Index("ix_ao_actions_created_at", "created_at"),
        Index("ix_ao_actions_finished_at", "finished_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"))
    spec_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    partition_key: Mapped[str | None] = mapped_column(Text, nullable=True)  # None: every partition
    partition_values: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    kind: Mapped[str] = mapped_column(String(30))
    trigger: Mapped[str] = mapped_column(String(20))
    priority_class: Mapped[str] = mapped_column(String(50))
    state: Mapped[str] = mapped_column(String(20), default=ActionState.QUEUED.value)
    reason: Mapped[str | None] = mapped_column(String(100), nullable=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    base_snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    committed_snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    files_in: Mapped[int | None] = mapped_column(Integer, nullable=True)
    files_out: Mapped[int | None] = mapped_column(Integer, nullable=True)
    bytes_in: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    bytes_out: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    rows_in: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    rows_out: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    checksum_in: Mapped[str | None] = mapped_column(String(100), nullable=True)
    checksum_out: Mapped[str | None] = mapped_column(String(100), nullable=True)
    mse_before: Mapped[float | None] = mapped_column(Float, nullable=True)
    mse_after: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    timings: Mapped[dict[str, float]] = mapped_column(JSONB, default=dict)
    created_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=_now())
    started_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    # a decided action: its partition's last writer commit when decide chose it (None: ad hoc)
    prompted_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)

    @validates("error")
    def _masked(self, _key: str, value: str | None) -> str | None:
        return redact(value) if value else value  # an error may quote a URL with its password


#: Fencing tokens: every lease taken gets the next value, so a later holder always has the larger token.
LEASE_TOKENS = Sequence("ao_lease_tokens", metadata=Base.metadata)


class ActionLease(Base):
    """Which attempt may work on an action (one row per action, see storage/leases.py). ``token`` is the
    fencing token of the current holder; times are PostgreSQL's clock."""

    __tablename__ = "ao_action_leases"

    action_id: Mapped[str] = mapped_column(ForeignKey("ao_actions.id", ondelete="CASCADE"), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str] = mapped_column(Text)  # JSON: role, host, pid and what proves the process is gone
    acquired_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    renewed_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    released_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)


class AuditLog(Base):
    """Append-only: a database trigger rejects UPDATE and DELETE (DELETE passes only for the retention job,
    services/retention.py). Secrets in ``detail`` are masked."""

    __tablename__ = "ao_audit_log"
    __table_args__ = (Index("ix_ao_audit_log_action", "action_id"), Index("ix_ao_audit_log_at", "at"))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=_now())
    action_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    table_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    event: Mapped[str] = mapped_column(String(60))
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)

    @validates("detail")
    def _masked(self, _key: str, value: dict[str, Any]) -> dict[str, Any]:
        return redact_value(value)  # append-only: a secret written here could never be removed
