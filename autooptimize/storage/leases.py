"""Action leases (``ao_action_leases``): which attempt may work on an action, with a fencing token.

One row per action. An attempt takes the lease when it is free: never taken, released, expired, or held
by a process of this host that no longer exists. Taking it draws a new token from ``ao_lease_tokens``,
so a later holder always has a larger token than every earlier one. The holder renews the lease while
it works and every write it makes about the action is conditional on its token still being current
(:func:`confirm` inside the writing transaction), so a holder that lost its lease (it stalled past the
term, or the database lost it for a while) finds out before it records anything. Times are PostgreSQL's
clock (``clock_timestamp()``): hosts need not agree on the time.

Functions take a Session and never commit, like the repositories.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class LeaseGrant:
    """A lease this process holds: the action, the fencing token, who holds it and for how long."""

    action_id: str
    token: int
    holder: str
    seconds: float


@dataclass(frozen=True)
class Taken:
    """A lease just taken, and what became of the one before it (``None``: the action had none)."""

    lease: LeaseGrant
    previous_holder: str | None
    previous_released: bool  # the attempt before ended and said so; False: it died or lost its lease


@dataclass(frozen=True)
class Busy:
    """The lease is held by a live attempt for ``remaining`` more seconds unless renewed."""

    holder: str
    remaining: float


_ROW = text("""
    SELECT token, holder, released_at IS NOT NULL AS released, expires_at <= clock_timestamp() AS expired,
           EXTRACT(EPOCH FROM expires_at - clock_timestamp()) AS remaining
    FROM ao_action_leases WHERE action_id = :id FOR UPDATE
""")
_CURRENT = "action_id = :id AND token = :t AND released_at IS NULL AND expires_at > clock_timestamp()"


def acquire(session: Session, action_id: str, holder: str, seconds: float) -> Taken | Busy:
    """Take the action's lease for ``seconds`` unless a live attempt holds it.

    The row stays locked until the caller's transaction ends: take the lease in the transaction that
    marks the attempt, with the action's row locked first (every writer locks action, then lease).
    """
    session.execute(text("""
        INSERT INTO ao_action_leases (action_id, token, holder, acquired_at, renewed_at, expires_at, released_at)
        VALUES (:id, 0, '', clock_timestamp(), clock_timestamp(), clock_timestamp(), clock_timestamp())
        ON CONFLICT (action_id) DO NOTHING
    """), {"id": action_id})
    row = session.execute(_ROW, {"id": action_id}).one()
    never = row.token == 0
    if not never and not row.released and not row.expired and not holder_is_gone(row.holder):
        return Busy(row.holder, max(0.0, float(row.remaining)))
    token = session.execute(text("""
        UPDATE ao_action_leases SET token = nextval('ao_lease_tokens'), holder = :h,
               acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
               expires_at = clock_timestamp() + make_interval(secs => :s), released_at = NULL
        WHERE action_id = :id RETURNING token
    """), {"id": action_id, "h": holder, "s": float(seconds)}).scalar_one()
    return Taken(LeaseGrant(action_id, int(token), holder, float(seconds)),
                 previous_holder=None if never else row.holder, previous_released=never or bool(row.released))


def renew(session: Session, lease: LeaseGrant) -> bool:
    """Extend the lease by its term from now; False when it is no longer this holder's (taken over,
    released or already expired: an expired lease is not revived, someone may be cleaning up)."""
    renewed = session.execute(text(f"""
        UPDATE ao_action_leases SET renewed_at = clock_timestamp(),
               expires_at = clock_timestamp() + make_interval(secs => :s)
        WHERE {_CURRENT} RETURNING token
    """), {"id": lease.action_id, "t": lease.token, "s": lease.seconds}).scalar()
    return renewed is not None


def confirm(session: Session, lease: LeaseGrant) -> bool:
    """Whether ``lease`` is still current, locking its row until the caller's transaction ends: a write
    made in the same transaction is made only by the holder, and no takeover slips in before it commits."""
    return session.execute(text(f"SELECT 1 FROM ao_action_leases WHERE {_CURRENT} FOR UPDATE"),
                           {"id": lease.action_id, "t": lease.token}).scalar() is not None


def release(session: Session, lease: LeaseGrant) -> bool:
    """End the lease (only while it is this holder's); the next attempt may take it at once."""
    return session.execute(text("""
        UPDATE ao_action_leases SET released_at = clock_timestamp()
        WHERE action_id = :id AND token = :t AND released_at IS NULL RETURNING token
    """), {"id": lease.action_id, "t": lease.token}).scalar() is not None


def unleased_actions(session: Session, catalog: str, idle_seconds: float) -> list[str]:
    """Actions of ``catalog`` queued or running with no live lease and nothing done to them for
    ``idle_seconds`` (since they were created, their last attempt released its lease, or its lease ran
    out), oldest first."""
    return list(session.scalars(text("""
        SELECT a.id FROM ao_actions a
        JOIN ao_tracked_tables t ON t.id = a.table_id
        LEFT JOIN ao_action_leases l ON l.action_id = a.id
        WHERE a.state IN ('queued', 'running') AND t.catalog = :catalog
          AND (l.action_id IS NULL OR l.released_at IS NOT NULL OR l.expires_at <= clock_timestamp())
          AND GREATEST(a.created_at, COALESCE(l.released_at, l.expires_at, a.created_at))
              <= clock_timestamp() - make_interval(secs => :idle)
        ORDER BY a.created_at, a.id
    """), {"catalog": catalog, "idle": float(idle_seconds)}))


# --- who holds a lease ------------------------------------------------------------------------------

def holder_identity(role: str) -> str:
    """This process as a lease holder: role, host and pid, and what lets another process of this host
    prove it gone (boot id, pid namespace, the process's start time)."""
    return json.dumps({"role": role, "host": socket.gethostname(), "pid": os.getpid(), **_marks(os.getpid())},
                      sort_keys=True)


def holder_is_gone(holder: str) -> bool:
    """True only when ``holder`` is provably not running: a process of this very host (same boot, same
    pid namespace) whose pid is gone or now belongs to a process started at another time. A holder on
    another host, or one that cannot be checked, counts as alive: its lease must run out instead."""
    try:
        data = json.loads(holder)
        pid = int(data["pid"])
        recorded = {k: data[k] for k in ("boot", "pidns", "start")}
    except (ValueError, KeyError, TypeError):
        return False
    if data.get("host") != socket.gethostname():
        return False
    mine = _marks(os.getpid())
    if not mine or recorded["boot"] != mine["boot"] or recorded["pidns"] != mine["pidns"]:
        return False
    try:
        start = _start_time(pid)
    except PermissionError:  # /proc hides it (hidepid): it cannot be checked, so it counts as alive
        return False
    if start is None and not _pid_gone(pid):
        return False  # /proc does not show it (hidepid=2), yet the pid exists: cannot be checked
    return start is None or start != recorded["start"]


def _pid_gone(pid: int) -> bool:
    """Whether no process has ``pid`` (signal 0 reaches it whatever /proc shows)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    return False


@functools.lru_cache(maxsize=4)
def _marks(pid: int) -> dict[str, str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pidns = os.readlink("/proc/self/ns/pid")
        start = _start_time(pid)
    except OSError:
        return {}
    return {"boot": boot, "pidns": pidns, "start": start} if start else {}


def _read_stat(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat``), None when there is no
    such process or it has exited (a zombie commits nothing). PermissionError when /proc will not say."""
    try:
        fields = _read_stat(pid).rsplit(")", 1)[1].split()
    except PermissionError:
        raise
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]
