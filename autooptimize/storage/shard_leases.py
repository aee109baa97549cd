"""Shard leases of the listeners (``ao_listener_shards``, ``ao_listener_members``), with fencing tokens.

The tracked tables are split into shards (``domain/shards.py``); a listener observes only the tables of
the shards it holds. One row per (catalog, shard). A listener takes a shard when it is free: never
taken, released, or expired. Taking it draws a new token from ``ao_lease_tokens`` (shared with the
action leases), so a later holder always has the larger token. The holder renews its shards well within
the term; every write to a table's cursor or stats it makes is conditional on its shard's lease still
being current (:func:`confirm_shard`, run by the cursor fence inside the writing transaction, which locks the
lease row until that transaction ends), so a listener that lost a shard (it stalled past the term, or
gave the shard up in a rebalance) cannot write that table's cursor afterwards, and no takeover slips in
between its check and its commit. Live listeners heartbeat in ``ao_listener_members``; their count sets
each one's fair share. Times are PostgreSQL's clock: hosts need not agree on the time.

Functions take a Session and never commit, like the repositories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from sqlalchemy import text
from sqlalchemy.orm import Session

CursorFence = Callable[[Session, int], None]
"""Called with the writing transaction's session and the table id before a cursor write; raises to stop it."""

_fence: ContextVar[CursorFence | None] = ContextVar("autooptimize_cursor_fence", default=None)


@contextmanager
def fenced_cursor_writes(fence: CursorFence) -> Iterator[None]:
    """Make every cursor write of this thread (``storage/stats.py``) ask ``fence`` first, until the block ends."""
    token = _fence.set(fence)
    try:
        yield
    finally:
        _fence.reset(token)


def check_cursor_write(session: Session, table_id: int) -> None:
    """Ask this thread's cursor fence, if one is installed; a no-op otherwise (API, CLI, beat)."""
    fence = _fence.get()
    if fence is not None:
        fence(session, table_id)


# --- members ----------------------------------------------------------------------------------------

def heartbeat(session: Session, catalog: str, holder: str, seconds: float) -> int:
    """Record ``holder`` as a live listener of ``catalog`` for ``seconds``; returns the live listeners
    (this one included). Members gone for an hour are forgotten."""
    session.execute(text("""
        INSERT INTO ao_listener_members (catalog, holder, started_at, expires_at)
        VALUES (:c, :h, clock_timestamp(), clock_timestamp() + make_interval(secs => :s))
        ON CONFLICT (catalog, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at
    """), {"c": catalog, "h": holder, "s": float(seconds)})
    session.execute(text("DELETE FROM ao_listener_members WHERE catalog = :c "
                         "AND expires_at < clock_timestamp() - interval '1 hour'"), {"c": catalog})
    return int(session.execute(text("SELECT count(*) FROM ao_listener_members WHERE catalog = :c "
                                    "AND expires_at > clock_timestamp()"), {"c": catalog}).scalar_one())


def leave(session: Session, catalog: str, holder: str) -> None:
    """``holder`` stops: it no longer counts among the live listeners."""
    session.execute(text("DELETE FROM ao_listener_members WHERE catalog = :c AND holder = :h"),
                    {"c": catalog, "h": holder})


# --- shards -----------------------------------------------------------------------------------------

_LIVE = "released_at IS NULL AND expires_at > clock_timestamp()"


def ensure_shards(session: Session, catalog: str, shards: int) -> None:
    """Create the rows of shards ``0 … shards-1`` (free) where missing."""
    session.execute(text("""
        INSERT INTO ao_listener_shards (catalog, shard, token, holder, acquired_at, renewed_at, expires_at,
                                        released_at)
        SELECT :c, s, 0, '', clock_timestamp(), clock_timestamp(), clock_timestamp(), clock_timestamp()
        FROM generate_series(0, :n - 1) AS s
        ON CONFLICT (catalog, shard) DO NOTHING
    """), {"c": catalog, "n": int(shards)})


def take(session: Session, catalog: str, holder: str, shards: int, limit: int, seconds: float) -> dict[int, int]:
    """Take up to ``limit`` free shards among ``0 … shards-1`` (lowest first) for ``seconds``; returns
    shard → fencing token of those taken. Rows another transaction has locked are skipped."""
    if limit <= 0:
        return {}
    rows = session.execute(text(f"""
        UPDATE ao_listener_shards SET token = nextval('ao_lease_tokens'), holder = :h,
               acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
               expires_at = clock_timestamp() + make_interval(secs => :s), released_at = NULL
        WHERE catalog = :c AND shard IN (
            SELECT shard FROM ao_listener_shards
            WHERE catalog = :c AND shard < :n AND NOT ({_LIVE})
            ORDER BY shard LIMIT :k FOR UPDATE SKIP LOCKED)
        RETURNING shard, token
    """), {"c": catalog, "h": holder, "s": float(seconds), "n": int(shards), "k": int(limit)})
    return {int(r.shard): int(r.token) for r in rows}


def renew_shards(session: Session, catalog: str, held: Mapping[int, int], seconds: float) -> set[int]:
    """Extend the leases ``held`` (shard → token) by ``seconds`` from now; returns the shards still held
    (a lease expired, released or taken over is not revived)."""
    if not held:
        return set()
    shards = sorted(held)
    rows = session.execute(text(f"""
        UPDATE ao_listener_shards SET renewed_at = clock_timestamp(),
               expires_at = clock_timestamp() + make_interval(secs => :s)
        WHERE catalog = :c AND {_LIVE}
          AND (shard, token) IN (SELECT * FROM unnest(CAST(:shards AS integer[]), CAST(:tokens AS bigint[])))
        RETURNING shard
    """), {"c": catalog, "s": float(seconds), "shards": shards, "tokens": [held[s] for s in shards]})
    return {int(r.shard) for r in rows}


def release_shard(session: Session, catalog: str, shard: int, token: int) -> bool:
    """Give the shard up (only while this token holds it); another listener may take it at once."""
    return session.execute(text("""
        UPDATE ao_listener_shards SET released_at = clock_timestamp()
        WHERE catalog = :c AND shard = :s AND token = :t AND released_at IS NULL RETURNING shard
    """), {"c": catalog, "s": int(shard), "t": int(token)}).scalar() is not None


def confirm_shard(session: Session, catalog: str, shard: int, token: int) -> bool:
    """Whether the lease (shard, token) is still current, locking its row until the caller's transaction
    ends: a write made in that transaction is made only by the holder, and no takeover slips in before
    it commits."""
    return session.execute(text(f"""
        SELECT 1 FROM ao_listener_shards WHERE catalog = :c AND shard = :s AND token = :t AND {_LIVE}
        FOR SHARE
    """), {"c": catalog, "s": int(shard), "t": int(token)}).scalar() is not None


def holders(session: Session, catalog: str, shards: int) -> dict[int, str | None]:
    """Every shard ``0 … shards-1`` and who holds it now (None: free)."""
    found: dict[int, str | None] = dict.fromkeys(range(shards))
    rows = session.execute(text(f"""
        SELECT shard, CASE WHEN {_LIVE} THEN holder END AS holder FROM ao_listener_shards
        WHERE catalog = :c AND shard < :n
    """), {"c": catalog, "n": int(shards)})
    for r in rows:
        found[int(r.shard)] = r.holder
    return found
