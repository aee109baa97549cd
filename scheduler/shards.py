"""Which tables this listener observes: the shards it holds leases on, kept on a thread of their own.

The tracked tables are split into AO_LISTENER_SHARDS shards (``domain/shards.py``). Every ``check``
seconds (a tenth of AO_LISTENER_LEASE_SECONDS, at most one second) this listener, in one transaction,
heartbeats as a live member, renews the leases it holds, gives up shards over its fair share (a listener
joined) and takes free ones up to it (a listener left, or died and its leases ran out). Renewals are
written with a term of ``lease − 2·check``: a listener killed right after renewing has its shards free
that long after, and taken within one more check (plus the round's own time, for which the second check
is the margin), so a dead listener's shards move within AO_LISTENER_LEASE_SECONDS. A live listener
renews every check, ten times per term, so a slow round or two costs it nothing. A listener that stops
cleanly releases its shards at once.

Every cursor write made while observing a table is fenced on the lease of the table's shard
(:meth:`ShardOwnership.fence`, ``storage/shard_leases.py``): a listener that lost the shard meanwhile
(stalled past the term, or gave it up) writes nothing more for that table. The holder of shard 0 also
runs the catalog-wide chores (auto-tracking, the settled-partition recheck): exactly one listener does.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable

from sqlalchemy.orm import Session

from autooptimize.config import Settings
from autooptimize.domain.shards import rebalance, shard_of
from autooptimize.errors import LeaseLost
from autooptimize.storage import shard_leases
from autooptimize.storage.db import session_scope
from autooptimize.storage.leases import holder_identity

log = logging.getLogger("autooptimize.listener")


class ShardOwnership:
    """The shards this listener holds (shard → fencing token), maintained by :meth:`start`'s thread."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.catalog = settings.catalog
        self.shards = settings.listener_shards
        self.lease_seconds = float(settings.listener_lease_seconds)
        self.check_seconds = min(1.0, self.lease_seconds / 10)
        self.term_seconds = self.lease_seconds - 2 * self.check_seconds
        # one process may run several listeners (tests, `up` restarting one): each is its own holder
        self.holder = json.dumps({**json.loads(holder_identity("listener")), "listener": uuid.uuid4().hex[:12]},
                                 sort_keys=True)
        self._held: dict[int, int] = {}
        self._rows_ensured = False
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_taken: Callable[[], None] | None = None  # told when shards were taken (their tables wait)

    # --- what the listener asks ---------------------------------------------------------------------

    def held(self) -> dict[int, int]:
        with self._mutex:
            return dict(self._held)

    def lease_of(self, identifier: str) -> tuple[int, int] | None:
        """(shard, token) when this listener holds the table's shard, else None."""
        shard = shard_of(identifier, self.shards)
        with self._mutex:
            token = self._held.get(shard)
        return None if token is None else (shard, token)

    def owns(self, identifier: str) -> bool:
        return self.lease_of(identifier) is not None

    def leads(self) -> bool:
        """Whether this listener runs the catalog-wide chores (it holds shard 0)."""
        with self._mutex:
            return 0 in self._held

    def fence(self, shard: int, token: int) -> shard_leases.CursorFence:
        """A cursor fence for tables of ``shard``: each write asks PostgreSQL whether lease ``token`` is
        still current (and holds the lease row until the write commits), else raises LeaseLost."""

        def check(session: Session, table_id: int) -> None:
            if not shard_leases.confirm_shard(session, self.catalog, shard, token):
                with self._mutex:
                    if self._held.get(shard) == token:
                        del self._held[shard]
                raise LeaseLost(f"shard {shard} (lease token {token}) is no longer this listener's; "
                                f"table {table_id} is left to its new holder", delay=0.0)

        return check

    # --- keeping the leases ---------------------------------------------------------------------------

    def tick(self) -> dict[int, int]:
        """One round: heartbeat, renew, rebalance; returns the shards taken in it."""
        with self._mutex:
            held = dict(self._held)
        if not self._rows_ensured:
            with session_scope(self._settings) as session:
                shard_leases.ensure_shards(session, self.catalog, self.shards)
            self._rows_ensured = True
        with session_scope(self._settings) as session:
            members = shard_leases.heartbeat(session, self.catalog, self.holder, self.term_seconds)
            kept = shard_leases.renew_shards(session, self.catalog, held, self.term_seconds)
            lost = sorted(set(held) - kept)
            held = {s: t for s, t in held.items() if s in kept}
            plan = rebalance(held, self.shards, members)
            for shard in plan.release:
                shard_leases.release_shard(session, self.catalog, shard, held.pop(shard))
            taken = shard_leases.take(session, self.catalog, self.holder, self.shards, plan.take, self.term_seconds)
            held.update(taken)
        with self._mutex:
            self._held = held
        if lost:
            log.warning("listener lost shard(s) %s (lease ran out before it was renewed)", lost)
        if plan.release:
            log.info("listener gave up shard(s) %s to rebalance among %d listeners", sorted(plan.release), members)
        if taken:
            log.info("listener took shard(s) %s; holds %d of %d (%d listeners)", sorted(taken), len(held),
                     self.shards, members)
            if self.on_taken is not None:
                self.on_taken()
        return taken

    def start(self) -> None:
        """Take a first share (creating the shard rows where missing), and keep the leases on a daemon
        thread; a database that cannot be reached yet is tried again every check."""
        self._safe_tick()
        self._thread = threading.Thread(target=self._run, name="ao-shard-leases", daemon=True)
        self._thread.start()

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # the database went away: the leases run out unless a later tick renews them
            log.warning("shard leases not renewed (%s: %s)", type(exc).__name__, exc)

    def _run(self) -> None:
        while not self._stop.wait(self.check_seconds):
            self._safe_tick()

    def stop(self) -> None:
        """Stop renewing, release every shard and leave the members: the others take over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._mutex:
            held, self._held = dict(self._held), {}
        try:
            with session_scope(self._settings) as session:
                for shard, token in held.items():
                    shard_leases.release_shard(session, self.catalog, shard, token)
                shard_leases.leave(session, self.catalog, self.holder)
        except Exception as exc:  # unreachable database: the leases run out instead
            log.warning("shard leases not released (%s: %s); they run out within %.0f s", type(exc).__name__,
                        exc, self.term_seconds)
