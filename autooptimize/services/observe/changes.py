"""Finding the tracked tables that may have changed: one query where the catalog allows, polling otherwise."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import get_catalog
from autooptimize.storage.db import session_scope
from autooptimize.storage.observe_work import changed_tables_from_locations, changed_tables_in_catalog_db
from autooptimize.storage.repositories import tracked_tables


@dataclass
class PollSchedule:
    """Bounded-rate polling for catalogs without a table list to query: each table at most once every
    ``min_interval`` seconds, and at most ``max_per_call`` tables per call (least recently polled first)."""

    min_interval: float = 30.0
    max_per_call: int = 50
    clock: Callable[[], float] = time.monotonic
    _last: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.min_interval < 0:
            raise InvalidArgument(f"min_interval must be ≥ 0 seconds, got {self.min_interval!r}")
        if self.max_per_call < 1:
            raise InvalidArgument(f"max_per_call must be ≥ 1, got {self.max_per_call!r}")

    def due(self, identifiers: Iterable[str]) -> list[str]:
        with self._lock:
            now = self.clock()
            names = sorted(set(identifiers), key=lambda n: (self._last.get(n, float("-inf")), n))
            chosen = [n for n in names if now - self._last.get(n, float("-inf")) >= self.min_interval]
            chosen = chosen[: self.max_per_call]
            for name in chosen:
                self._last[name] = now
            return chosen


_default_polls: dict[str, PollSchedule] = {}


def _same_database(a: Any, b: str) -> bool:
    ua, ub = make_url(a), make_url(b)
    return (ua.host or "localhost", ua.port or 5432, ua.database, ua.username) == (
        ub.host or "localhost", ub.port or 5432, ub.database, ub.username)


def changed_tables(settings: Settings, *, poll: PollSchedule | None = None, force_polling: bool = False,
                   only: Callable[[str], bool] | None = None) -> list[str]:
    """Tracked tables that may have new snapshots (or were never observed, or wait for a scan).

    With pyiceberg's SqlCatalog in our database: one query joining its ``iceberg_tables`` with the
    cursors. With a SqlCatalog elsewhere: one query there, one here. Other catalogs have no cheap table
    list, so every tracked table is polled at a bounded rate (``poll``); ``observe_table`` then finds out
    whether anything changed. ``force_polling`` or AO_FORCE_POLLING polls on a SqlCatalog too. ``only``
    keeps the tables it accepts (a sharded listener's own), before the poll schedule counts them.
    """
    keep = only if only is not None else (lambda _name: True)
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    catalog = get_catalog(settings)
    if isinstance(catalog, SqlCatalog) and not (force_polling or settings.force_polling):
        if _same_database(catalog.engine.url, settings.database_url):
            with session_scope(settings) as session:
                return [n for n in changed_tables_in_catalog_db(session, settings.catalog) if keep(n)]
        with Session(catalog.engine) as catalog_session:
            locations = {
                f"{r.table_namespace}.{r.table_name}": r.metadata_location
                for r in catalog_session.execute(
                    select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location)
                    .where(IcebergTables.catalog_name == settings.catalog)
                )
            }
        with session_scope(settings) as session:
            return [n for n in changed_tables_from_locations(session, settings.catalog, locations) if keep(n)]
    with session_scope(settings) as session:
        names = [r.identifier for r in tracked_tables(session, settings.catalog) if keep(r.identifier)]
    schedule = poll if poll is not None else _default_polls.setdefault(settings.catalog, PollSchedule())
    return schedule.due(names)


def stale_tables(settings: Settings) -> list[str]:
    """Tracked, enabled tables the listener has never observed or not within AO_RESCAN_AFTER_SECONDS."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import or_, select

    from autooptimize.storage.models import TrackedTable
    from autooptimize.storage.observe_models import TableCursor

    cutoff = datetime.now(UTC) - timedelta(seconds=settings.rescan_after_seconds)
    with session_scope(settings) as session:
        rows = session.execute(
            select(TrackedTable.identifier)
            .outerjoin(TableCursor, TableCursor.table_id == TrackedTable.id)
            .where(TrackedTable.catalog == settings.catalog, TrackedTable.enabled.is_(True))
            .where(or_(TableCursor.observed_at.is_(None), TableCursor.observed_at < cutoff))
            .order_by(TrackedTable.identifier)
        ).scalars()
        return list(rows)
