"""What the hygiene actions share: option checks, the audit trail and the states of other actions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.checks import bool_option
from autooptimize.domain.durations import format_duration, parse_duration
from autooptimize.errors import InvalidArgument
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState
from autooptimize.storage.repositories import audit

MIN_SAFE_AGE_SECONDS = 3600  # below this, orphan removal and expiry need an explicit allow_short_* option
SAMPLE = 100  # paths kept in an outcome's plan; the audit log keeps up to AUDIT_PATHS
AUDIT_PATHS = 1000


def int_option(kind: str, name: str, value: Any, minimum: int) -> int:
    """``value`` as an integer ≥ ``minimum``; InvalidArgument otherwise (a bool is not an integer here)."""
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise InvalidArgument(f"option {name} of {kind} must be an integer ≥ {minimum} (got {value!r})")
    return number


def check_option_names(kind: str, options: dict[str, Any], valid: tuple[str, ...]) -> None:
    """InvalidArgument for an option not in ``valid``, or for ``dry_run`` passed as an option."""
    if "dry_run" in options:
        raise InvalidArgument(f"{kind}: ask for a dry run with --dry-run (API: dry_run=True), not an option")
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidArgument(f"unknown option(s) {', '.join(unknown)} for {kind}; valid: {', '.join(valid)}")


def age_option(kind: str, name: str, value: Any, allow_short: bool, allow_name: str) -> int:
    """A duration in seconds, refused below MIN_SAFE_AGE_SECONDS unless ``allow_short``."""
    seconds = parse_duration(value, f"option {name} of {kind}")
    if seconds < MIN_SAFE_AGE_SECONDS and not allow_short:
        raise InvalidArgument(
            f"option {name} of {kind} is {format_duration(seconds)}, below the safe minimum of "
            f"{format_duration(MIN_SAFE_AGE_SECONDS)}: files of writers still in flight could be lost. "
            f"Use a longer {name}, or also pass {allow_name}=true if you are sure"
        )
    return seconds


def age_options(kind: str, options: dict[str, Any], age_name: str, allow_name: str) -> dict[str, Any]:
    """The checked ``age_name`` option and its ``allow_name`` escape hatch (kept only when true)."""
    out: dict[str, Any] = {}
    allow = bool_option(allow_name, options.get(allow_name, False), kind)
    if allow:
        out[allow_name] = True
    if age_name in options:
        out[age_name] = age_option(kind, age_name, options[age_name], allow, allow_name)
    return out


def audit_action(settings: Settings, action_id: str, event: str, **detail: Any) -> None:
    """Append ``event`` to the audit log of the action (and of its table) in its own transaction."""
    with session_scope(settings) as session:
        action = session.get(Action, action_id)
        audit(session, event, action_id=action_id, table_id=action.table_id if action else None, **detail)


def action_states(settings: Settings, ids: Iterable[str]) -> dict[str, str]:
    """The state of each known action among ``ids`` (unknown ids are absent)."""
    ids = sorted(set(ids))
    if not ids:
        return {}
    with session_scope(settings) as session:
        return dict(session.execute(select(Action.id, Action.state).where(Action.id.in_(ids))).tuples().all())


def in_flight_action_ids(settings: Settings) -> set[str]:
    """Ids of the actions queued or running now."""
    with session_scope(settings) as session:
        return set(session.scalars(select(Action.id).where(
            Action.state.in_([ActionState.QUEUED.value, ActionState.RUNNING.value]))))
