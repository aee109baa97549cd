"""The sweeper: actions left queued or running with no live lease are re-queued, or failed once they have
had AO_MAX_ATTEMPTS attempts.

A message can be lost (Redis lost its data, a delivery was dropped after its retries, a worker host died
holding it), and a worker can die mid-attempt. PostgreSQL still says queued or running; no attempt holds
the lease. Each such action untouched for AO_SWEEP_AFTER_SECONDS is taken under its lease (so nothing runs
beside the sweeper's decision) and:

* failed with its last error when it has had its attempts (its uncommitted output removed, as any
  holder giving up does; an action found committed in the table's history succeeds instead);
* failed as abandoned when it is a dry run (nobody waits for its plan any more);
* otherwise put back to queued and handed to ``send`` (Celery, or the reliable priority queue).

Each decision leaves an ``action.swept`` audit record. Beat runs the sweep in both dispatch modes
(``autooptimize.sweep_actions``); the dispatcher also runs it in rpq mode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autooptimize.config import Settings
from autooptimize.errors import ActionBusy
from autooptimize.services.attempt import HeldLease
from autooptimize.services.execution import Claim, claim, give_up
from autooptimize.services.ports import ActionTicket
from autooptimize.storage import leases
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import ActionState
from autooptimize.storage.repositories import audit, get_action

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # taken meanwhile, finished, or still in the queue

    def as_dict(self) -> dict[str, list[str]]:
        return {"requeued": self.requeued, "failed": self.failed, "skipped": self.skipped}


def sweep_actions(settings: Settings, send: Callable[[ActionTicket], Any],
                  queued: Callable[[ActionTicket], bool] | None = None) -> SweepReport:
    """Re-queue or fail every action of the catalog left without a live lease (see the module).

    ``queued`` (when given) says whether the queue still holds an action's item: such an action is only
    waiting its turn and is left alone. One action's failure is logged and does not stop the sweep.
    """
    report = SweepReport()
    with session_scope(settings) as session:
        candidates = leases.unleased_actions(session, settings.catalog, settings.sweep_after_seconds)
    for action_id in candidates:
        try:
            _sweep_one(settings, action_id, send, queued, report)
        except ActionBusy:
            report.skipped.append(action_id)  # an attempt took it meanwhile: it is alive
        except Exception as exc:  # the next sweep tries again
            log.warning("sweep of action %s failed (%s: %s)", action_id, type(exc).__name__, exc)
    if report.requeued or report.failed:
        log.info("sweep: %d action(s) re-queued, %d failed", len(report.requeued), len(report.failed))
    return report


def _sweep_one(settings: Settings, action_id: str, send: Callable[[ActionTicket], Any],
               queued: Callable[[ActionTicket], bool] | None, report: SweepReport) -> None:
    claimed = claim(settings, action_id, "sweeper", start=False)
    if isinstance(claimed, dict):
        report.skipped.append(action_id)  # finished meanwhile
        return
    ticket = ActionTicket(action_id, claimed.request.identifier, claimed.request.partition_key, claimed.request.kind,
                          claimed.priority_class)
    with HeldLease(settings, claimed.lease) as held:
        if claimed.request.dry_run:
            _record(settings, claimed, "failed", "a dry run nobody finished")
            give_up(settings, claimed.request, held, claimed.error or "dry run abandoned", reason="abandoned")
            report.failed.append(action_id)
            return
        if claimed.attempts >= settings.max_attempts:
            error = claimed.error or f"no outcome after {claimed.attempts} attempts"
            _record(settings, claimed, "failed", f"{claimed.attempts} attempts, AO_MAX_ATTEMPTS is "
                                                 f"{settings.max_attempts}")
            give_up(settings, claimed.request, held, error, reason="attempts_exhausted")
            report.failed.append(action_id)
            return
        if claimed.state == ActionState.QUEUED.value and queued is not None and queued(ticket):
            report.skipped.append(action_id)  # waiting its turn in the queue
            return
        with session_scope(settings) as session:
            action = get_action(session, action_id, for_update=True)
            assert action is not None
            held.confirm(session)
            action.state = ActionState.QUEUED.value
            audit(session, "action.swept", action_id=action_id, table_id=action.table_id, decision="requeued",
                  state=claimed.state, attempts=claimed.attempts, error=claimed.error)
            leases.release(session, held.lease)
    try:
        send(ticket)
    except Exception as exc:  # queued in PostgreSQL: the next sweep sends it again
        with session_scope(settings) as session:
            audit(session, "action.swept", action_id=action_id, decision="send_failed",
                  error=f"{type(exc).__name__}: {exc}")
        raise
    report.requeued.append(action_id)


def _record(settings: Settings, claimed: Claim, decision: str, why: str) -> None:
    with session_scope(settings) as session:
        audit(session, "action.swept", action_id=claimed.request.action_id, decision=decision, why=why,
              state=claimed.state, attempts=claimed.attempts, error=claimed.error)
