"""One attempt at an action, held under its lease (``storage/leases.py``) from start to end.

While the attempt works a heartbeat thread renews the lease every quarter of its term
(``AO_ACTION_LEASE_SECONDS``) and watches the deadline (``AO_ACTION_TIMEOUT_SECONDS``). When the lease
is lost (taken over, or not renewed in time because PostgreSQL was away) or the deadline passes, the
attempt is *stopped*: the callbacks registered with :meth:`HeldLease.on_stop` run (they interrupt the
attempt's Spark jobs) and keep running until the attempt ends.

The held lease is the attempt's fence (``domain/fencing.py``): immediately before each catalog swap and
each deletion it renews the lease in PostgreSQL, token-conditional, and raises LeaseLost when that fails;
a commit after the deadline raises AttemptTimedOut. Every write about the action is conditional on the
token too: :meth:`HeldLease.confirm` inside the writing transaction. Only the holder commits, cleans up
or records; a process that lost the lease stops and leaves everything to whoever holds it now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from types import TracebackType

from sqlalchemy.orm import Session

from autooptimize.config import Settings
from autooptimize.domain import fencing
from autooptimize.errors import AttemptTimedOut, LeaseLost
from autooptimize.storage import leases
from autooptimize.storage.db import session_scope

log = logging.getLogger(__name__)

#: What an attempt may take beyond AO_ACTION_TIMEOUT_SECONDS to stop: interrupt its Spark jobs and wait
#: for their ``_temporary`` to go (services/rewrite/outputs.WRITER_WAIT_SECONDS, 120 s at most), remove
#: its uncommitted output and record the result.
STOP_GRACE_SECONDS = 300
#: While stopped, how often the stop callbacks run again (a job started after the first interrupt).
_STOPPED_EVERY = 1.0


def attempt_limit_seconds(settings: Settings) -> int:
    """The longest one attempt runs: its timeout, then the time it may take to stop and clean up."""
    return settings.action_timeout_seconds + STOP_GRACE_SECONDS


class HeldLease:
    """A lease this process holds, kept alive by a heartbeat thread while the ``with`` block runs.

    Entering installs it as the thread's fence; leaving stops the heartbeat and releases the lease if it
    is still this holder's (recording the attempt's end releases it in the same transaction already).
    ``stopped`` is None while the attempt may go on, else ``"lease_lost"`` or ``"timed_out"``.
    """

    def __init__(self, settings: Settings, lease: leases.LeaseGrant, *, timeout: float | None = None) -> None:
        self.settings, self.lease = settings, lease
        self.timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._until = time.monotonic() + lease.seconds  # the lease is ours at least until then
        self._callbacks: list[Callable[[], None]] = []
        self._quit = threading.Event()
        self._guard = threading.Lock()  # renewals from the heartbeat and from fence checks take turns
        self._thread = threading.Thread(target=self._beat, name=f"lease-{lease.action_id[:8]}", daemon=True)
        self._fence = ExitStack()
        self.stopped: str | None = None

    # --- the heartbeat ---------------------------------------------------------------------------

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (from the heartbeat thread) once the attempt is stopped, and again every
        second until it ends; it must be safe to call from another thread and more than once."""
        self._callbacks.append(callback)

    def _beat(self) -> None:
        interval = self.lease.seconds / 4
        next_renewal = time.monotonic() + interval
        while True:
            now = time.monotonic()
            wake = next_renewal
            if self.stopped:
                wake = min(wake, now + _STOPPED_EVERY)
            elif self._deadline is not None:
                wake = min(wake, self._deadline)
            if self._quit.wait(max(0.0, wake - now)):
                return
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline and self.stopped is None:
                self._stop("timed_out")
            elif self.stopped:
                self._run_callbacks()  # again: a job may have started since
            if now >= next_renewal and self.stopped != "lease_lost":
                next_renewal = now + interval
                if self._renew() is False:
                    self._stop("lease_lost")

    def _renew(self) -> bool | None:
        """Renew now: True when renewed, False when the lease is lost (or could not be confirmed in
        time), None when PostgreSQL did not answer but the lease has not run out yet."""
        with self._guard:
            asked = time.monotonic()
            try:
                with session_scope(self.settings) as session:
                    renewed = leases.renew(session, self.lease)
            except Exception as exc:  # the database is away: the lease holds until its term runs out
                log.warning("action %s: cannot renew its lease (%s: %s)", self.lease.action_id,
                            type(exc).__name__, exc)
                return None if time.monotonic() < self._until else False
            if renewed:
                self._until = asked + self.lease.seconds
            return renewed

    def _stop(self, reason: str) -> None:
        if self.stopped != reason and (self.stopped is None or reason == "lease_lost"):
            self.stopped = reason
            log.warning("action %s: attempt stopped (%s)", self.lease.action_id, reason)
        self._run_callbacks()

    def _run_callbacks(self) -> None:
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception as exc:  # stopping early is an optimisation: the fence is the guarantee
                log.warning("action %s: stop callback failed: %s", self.lease.action_id, exc)

    # --- the fence -------------------------------------------------------------------------------

    def before_commit(self, what: str) -> None:
        if self.stopped == "timed_out" or (self._deadline is not None and time.monotonic() >= self._deadline):
            self._stop("timed_out")
            raise AttemptTimedOut(f"action {self.lease.action_id} ran past its {self.timeout:.0f} s timeout; "
                                  f"not going to {what}", delay=5.0)
        self._ensure(what)

    def before_delete(self, what: str) -> None:
        self._ensure(f"delete {what}")

    def _ensure(self, what: str) -> None:
        """Renew the lease in PostgreSQL now; LeaseLost unless that worked."""
        if self.holds():
            return
        raise LeaseLost(f"action {self.lease.action_id} no longer holds its lease (token {self.lease.token}); "
                        f"not going to {what}", delay=self.lease.seconds)

    def holds(self) -> bool:
        """Whether the lease is still this holder's, asked of PostgreSQL now (renewing it)."""
        if self.stopped != "lease_lost" and self._renew():
            return True
        self._stop("lease_lost")
        return False

    def confirm(self, session: Session) -> None:
        """Lock the lease row in ``session``'s transaction and raise LeaseLost unless this holder's token
        is still current: the transaction's writes then count only if this holder made them."""
        if self.stopped == "lease_lost" or not leases.confirm(session, self.lease):
            self.stopped = "lease_lost"
            raise LeaseLost(f"action {self.lease.action_id} no longer holds its lease (token {self.lease.token}); "
                            "nothing recorded", delay=self.lease.seconds)

    # --- the block -------------------------------------------------------------------------------

    def __enter__(self) -> HeldLease:
        self._fence.enter_context(fencing.fenced(self))
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._quit.set()
        self._thread.join()
        self._fence.close()
        try:  # token-conditional: a lease someone else took over is left alone
            with session_scope(self.settings) as session:
                leases.release(session, self.lease)
        except Exception as exc:  # it runs out on its own
            log.warning("action %s: could not release its lease: %s", self.lease.action_id, exc)
