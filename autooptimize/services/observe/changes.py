"""Finding the tracked tables that may have changed: one query where the catalog allows, polling otherwise."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import get_catalog
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import TrackedTable
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.observe_work import (
    catalog_fingerprint,
    catalog_horizon,
    changed_tables_from_locations,
    changed_tables_in_catalog_db,
    moved_tables_in_catalog_db,
)
from autooptimize.storage.repositories import tracked_tables

log = logging.getLogger(__name__)


@dataclass
class PollSchedule:
    """Adaptive, rate-limited polling for catalogs without a table list to query.

    Each table has its own interval: ``min_interval`` after it changed (hot), doubling on every poll
    that found nothing, up to ``max_interval`` (cold). Across all tables at most ``calls_per_second``
    polls are handed out in any second (None: no limit) and at most
    ``max_per_call`` per call; the most overdue table goes first, a never-polled one before any other.
    The caller reports each poll's outcome with :meth:`observed`; a table never reported keeps polling
    every ``min_interval``.
    """

    min_interval: float = 30.0
    max_per_call: int = 50
    clock: Callable[[], float] = time.monotonic
    max_interval: float | None = None  # None: the same as min_interval (no back-off)
    calls_per_second: float | None = None
    _next: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _interval: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _handed: deque[float] = field(default_factory=deque, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.min_interval < 0:
            raise InvalidArgument(f"min_interval must be ≥ 0 seconds, got {self.min_interval!r}")
        if self.max_per_call < 1:
            raise InvalidArgument(f"max_per_call must be ≥ 1, got {self.max_per_call!r}")
        if self.max_interval is not None and self.max_interval < self.min_interval:
            raise InvalidArgument(f"max_interval must be ≥ min_interval ({self.min_interval}), got {self.max_interval!r}")
        if self.calls_per_second is not None and not self.calls_per_second > 0:
            raise InvalidArgument(f"calls_per_second must be > 0, got {self.calls_per_second!r}")

    @classmethod
    def from_settings(cls, settings: Settings, clock: Callable[[], float] = time.monotonic) -> PollSchedule:
        """The listener's schedule: AO_POLL_MIN_SECONDS, AO_POLL_MAX_SECONDS, AO_CATALOG_CALLS_PER_SECOND."""
        return cls(min_interval=settings.poll_min_seconds, max_interval=settings.poll_max_seconds,
                   calls_per_second=settings.catalog_calls_per_second,
                   max_per_call=max(1, int(settings.catalog_calls_per_second)) * 10, clock=clock)

    def _budget(self, now: float) -> int:
        # a sliding window: no span of one second (of 1/rate below one call a second) holds more calls
        if self.calls_per_second is None:
            return self.max_per_call
        window = max(1.0, 1.0 / self.calls_per_second)
        while self._handed and self._handed[0] <= now - window:
            self._handed.popleft()
        allowed = max(1, int(self.calls_per_second * window))
        return max(0, min(self.max_per_call, allowed - len(self._handed)))

    def due(self, identifiers: Iterable[str]) -> list[str]:
        """The tables to poll now (each counted against the rate limit)."""
        with self._lock:
            now = self.clock()
            names = set(identifiers)
            for gone in [n for n in self._next if n not in names]:  # untracked: forget it
                self._next.pop(gone, None)
                self._interval.pop(gone, None)
            budget = self._budget(now)
            ready = sorted((self._next.get(n, float("-inf")), n) for n in names)
            chosen = [n for at, n in ready if at <= now][:budget]
            if self.calls_per_second is not None:
                self._handed.extend(now for _ in chosen)
            for name in chosen:
                self._next[name] = now + self._interval.get(name, self.min_interval)
            return chosen

    def observed(self, name: str, changed: bool) -> None:
        """A poll of ``name`` found a change (hot again: ``min_interval``) or none (its interval doubles, up
        to ``max_interval``). Unknown names (never handed out) are ignored."""
        with self._lock:
            if name not in self._next:
                return
            longest = self.max_interval if self.max_interval is not None else self.min_interval
            interval = self.min_interval if changed else min(
                longest, max(self._interval.get(name, self.min_interval) * 2, self.min_interval))
            self._interval[name] = interval
            self._next[name] = self.clock() + interval

    def interval(self, name: str) -> float:
        """The table's current polling interval."""
        with self._lock:
            return self._interval.get(name, self.min_interval)


class CatalogWatch:
    """Finding changed tables on a SqlCatalog in our own database without comparing every table each pass:
    every ``full_every`` seconds (and on the first look, and after :meth:`look_again`) every tracked table
    is compared with its cursor; in between only the catalog rows written since the last look are (their
    ``xmin`` at or after the oldest transaction running then). A table missed in between (an observation
    that failed or was superseded, a scan flag) is found by the next full comparison."""

    def __init__(self, full_every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        if full_every <= 0:
            raise InvalidArgument(f"full_every must be > 0 seconds, got {full_every!r}")
        self.full_every, self._clock = full_every, clock
        self._since: int | None = None
        self._next_full = float("-inf")

    def look_again(self) -> None:
        """Compare every table next time (new tables were tracked)."""
        self._next_full = float("-inf")

    def changed(self, session: Any, catalog: str) -> list[str]:
        now = self._clock()
        horizon = catalog_horizon(session)  # before the look: what commits during it is seen next time
        if self._since is None or now >= self._next_full:
            names = changed_tables_in_catalog_db(session, catalog)
            self._next_full = now + self.full_every
        else:
            names = moved_tables_in_catalog_db(session, catalog, self._since)
        self._since = horizon
        return names


_default_polls: dict[str, PollSchedule] = {}


def _same_database(a: Any, b: str) -> bool:
    ua, ub = make_url(a), make_url(b)
    return (ua.host or "localhost", ua.port or 5432, ua.database, ua.username) == (
        ub.host or "localhost", ub.port or 5432, ub.database, ub.username)


def changed_tables(settings: Settings, *, poll: PollSchedule | None = None, force_polling: bool = False,
                   only: Callable[[str], bool] | None = None, watch: CatalogWatch | None = None) -> list[str]:
    """Tracked tables that may have new snapshots (or were never observed, or wait for a scan).

    With pyiceberg's SqlCatalog in our database: one query joining its ``iceberg_tables`` with the
    cursors. With a SqlCatalog elsewhere: one query there, one here. Other catalogs have no cheap table
    list, so every tracked table is polled at a bounded rate (``poll``); ``observe_table`` then finds out
    whether anything changed. ``force_polling`` or AO_FORCE_POLLING polls on a SqlCatalog too. ``only``
    keeps the tables it accepts (a sharded listener's own), before the poll schedule counts them. With
    ``watch`` a SqlCatalog in our database is compared in full only now and then (:class:`CatalogWatch`).
    """
    keep = only if only is not None else (lambda _name: True)
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    catalog = get_catalog(settings)
    if isinstance(catalog, SqlCatalog) and not (force_polling or settings.force_polling):
        if _same_database(catalog.engine.url, settings.database_url):
            with session_scope(settings) as session:
                if watch is not None:
                    return [n for n in watch.changed(session, settings.catalog) if keep(n)]
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
    schedule = poll if poll is not None else _default_polls.setdefault(settings.catalog,
                                                                       PollSchedule.from_settings(settings))
    return schedule.due(names)


def table_list_fingerprint(settings: Settings) -> tuple[int, int] | None:
    """What moves when a table is created or dropped, read in one small query, for a SqlCatalog in our own
    database (the auto-tracker lists the catalog only when it moves); None for other catalogs."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = get_catalog(settings)
    if not isinstance(catalog, SqlCatalog) or not _same_database(catalog.engine.url, settings.database_url):
        return None
    with session_scope(settings) as session:
        return catalog_fingerprint(session, settings.catalog)


def stale_tables(settings: Settings) -> list[str]:
    """Tracked, enabled tables the listener has never observed or not within AO_RESCAN_AFTER_SECONDS."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import or_, select


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


def tables_to_scan(settings: Settings) -> set[str]:
    """Tracked, enabled tables whose stats need a whole scan before a snapshot can be rolled forward: never
    observed, flagged for a scan, or observed for another target size. A question of PostgreSQL only (the
    reasons that need the table itself, a replaced table or a gap in its history, are found by observing)."""
    from sqlalchemy import or_, select


    t, c = TrackedTable, TableCursor
    with session_scope(settings) as session:
        return set(session.scalars(
            select(t.identifier).outerjoin(c, c.table_id == t.id)
            .where(t.catalog == settings.catalog, t.enabled.is_(True))
            .where(or_(c.table_id.is_(None), c.needs_scan.is_(True),
                       c.target_file_size.is_distinct_from(t.target_file_size)))))


class ScanHandOff:
    """Hands the tables that need a whole scan to ``send`` (a scan task on the control queue), ``batch``
    tables per call, each table at most once per ``resend_after`` seconds (a lost task is sent again then),
    so that the listener itself only rolls snapshots forward."""

    def __init__(self, send: Callable[[list[str]], None], *, batch: int = 100, resend_after: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if batch < 1:
            raise InvalidArgument(f"batch must be ≥ 1, got {batch!r}")
        if resend_after <= 0:
            raise InvalidArgument(f"resend_after must be > 0 seconds, got {resend_after!r}")
        self._send, self._batch, self._resend_after, self._clock = send, batch, resend_after, clock
        self._sent: dict[str, float] = {}

    def split(self, settings: Settings, names: list[str]) -> list[str]:
        """Send the tables of ``names`` that need a scan; returns the others, to observe here. When sending
        fails (the broker is away) every table is returned: the listener scans them itself."""
        if not names:
            return names
        needing = tables_to_scan(settings) & set(names)
        if not needing:
            return names
        now = self._clock()
        self._sent = {n: at for n, at in self._sent.items() if now - at < self._resend_after}
        fresh = sorted(n for n in needing if n not in self._sent)
        try:
            for i in range(0, len(fresh), self._batch):
                chunk = fresh[i:i + self._batch]
                self._send(chunk)
                self._sent.update((n, now) for n in chunk)
        except Exception as exc:  # the broker may be away: observing here is slower but loses nothing
            log.warning("handing %d table(s) to a scan task failed (%s: %s); scanning here",
                        len(fresh), type(exc).__name__, exc)
            return names
        return [n for n in names if n not in needing]
