"""The budget's record (migration 0012_budget): one row per automatic candidate that competed for the
budget, with its value, estimated cost, verdict and the action it became (services/budget.py)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import TIMESTAMP

from autooptimize.storage.models import Base, _now


class BudgetDecision(Base):
    """A candidate of decide judged by the budget. ``verdict``: ``pending`` until the next tick ranks it,
    then ``admit`` or ``defer`` (a deferred one is ranked again at every tick until admitted or replaced by
    a newer candidate for its partition). ``mode`` is the budget mode it was judged under: in ``shadow``
    its action ran at once whatever the verdict (``action_id``), in ``enforce`` only once admitted."""

    __tablename__ = "ao_budget_decisions"
    __table_args__ = (
        Index("ix_ao_budget_decisions_open", "verdict", "arrived_at"),
        Index("ix_ao_budget_decisions_admitted_at", "admitted_at"),
        Index("ix_ao_budget_decisions_partition", "table_id", "spec_id", "partition_key"),
        Index("ix_ao_budget_decisions_action", "action_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"))
    spec_id: Mapped[int] = mapped_column(Integer)
    partition_key: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(30))
    mode: Mapped[str] = mapped_column(String(10))
    files_removed: Mapped[int] = mapped_column(BigInteger)
    distance_closed: Mapped[float] = mapped_column(Float)
    files_in: Mapped[int] = mapped_column(BigInteger)
    bytes_in: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Float)
    cost: Mapped[float] = mapped_column(Float)  # estimated core-seconds
    verdict: Mapped[str] = mapped_column(String(10))
    reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    deferrals: Mapped[int] = mapped_column(Integer, default=0)
    budget: Mapped[float | None] = mapped_column(Float, nullable=True)  # the hourly budget when last judged
    spent: Mapped[float | None] = mapped_column(Float, nullable=True)  # the rolling hour's spend when last judged
    action_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    arrived_at: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=True), server_default=_now())
    decided_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
    admitted_at: Mapped[datetime | None] = mapped_column(TIMESTAMP(timezone=True), nullable=True)
