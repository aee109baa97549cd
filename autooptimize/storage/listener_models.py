"""Models of the sharded listeners (migration 0011): live listeners, shard leases, pushed notices.
Declared so Alembic's metadata matches the schema; the SQL is in ``shard_leases.py`` and ``notices.py``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import TIMESTAMP

from autooptimize.storage.models import Base


class ListenerMember(Base):
    """A live listener of a catalog until ``expires_at`` (renewed with its shard leases)."""

    __tablename__ = "ao_listener_members"

    catalog: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(Text, primary_key=True)  # JSON: role, host, pid, start time
    started_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))


class ShardLease(Base):
    """Which listener observes the tables of one shard, with the fencing token of its current lease."""

    __tablename__ = "ao_listener_shards"

    catalog: Mapped[str] = mapped_column(String(200), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str] = mapped_column(Text)
    acquired_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    renewed_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
    released_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)


class ListenerNotice(Base):
    """A pushed notice that a table has a new snapshot, kept until the listener has observed the table."""

    __tablename__ = "ao_listener_notices"

    table_id: Mapped[int] = mapped_column(ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"), primary_key=True)
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    notified_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True))
