"""Dry runs: what an action would do, planned now, with nothing recorded or changed.

A dry run is not an action. It writes no row (no action, no audit record, and the table is not
tracked by it), no file and no commit: the same validation and the same runner as a real action see
the same request, built from the table's tuning when it is tracked and the defaults otherwise, and the
runner stops before its first write.
"""

from __future__ import annotations

import uuid
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.partitions import PartitionRef
from autooptimize.errors import AutoOptimizeError
from autooptimize.services.actions import action_request, outcome_of, record_outcome
from autooptimize.services.kinds import KINDS
from autooptimize.services.submission import check_submission
from autooptimize.services.tracking import tuning_of, validate_tuning
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable, Trigger
from autooptimize.storage.repositories import tracked_table


class _NoCheckpoint(AutoOptimizeError):
    """A runner asked to save a checkpoint during a dry run (it must stop before writing)."""


def _refuse_checkpoint(_checkpoint: dict[str, Any]) -> None:
    raise _NoCheckpoint("a dry run writes no checkpoint")


def preview(
    settings: Settings,
    identifier: str,
    *,
    partition: str | PartitionRef | None = None,
    kind: str = "merge",
    target_file_size: Any = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Plan ``kind`` on ``identifier`` (one partition or all) as :func:`~autooptimize.services.actions.submit`
    would have it run, and return the outcome (state ``skipped``, reason ``dry_run`` when there is
    something to do, with the plan), its ``id`` None: nothing is recorded. Validation errors are those of
    ``submit``."""
    checked = check_submission(settings, identifier, partition=partition, kind=kind,
                               target_file_size=target_file_size, options=options)
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        tuning = tuning_of(row) if row is not None else validate_tuning(settings, None, checked.table)
    # Unsaved rows: the request is built exactly as for a recorded action, and never reaches PostgreSQL.
    tracked = TrackedTable(catalog=settings.catalog, identifier=identifier, **tuning.as_dict())
    action = Action(
        id=str(uuid.uuid4()), spec_id=checked.spec_id, partition_key=checked.partition_key,
        partition_values=checked.partition_values, kind=kind, trigger=Trigger.AD_HOC.value,
        priority_class=tuning.priority_class, state=ActionState.RUNNING.value, attempts=0, checkpoint=None,
        options={**checked.options, "target_file_size": checked.target_file_size, "dry_run": True},
    )
    request = action_request(settings, action, tracked)
    outcome = KINDS[kind].resolve()(settings, request, None, _refuse_checkpoint, None)
    record_outcome(action, outcome)
    action.state, action.reason = ActionState(outcome.state).value, outcome.reason
    return {**outcome_of(action, identifier), "id": None}
