"""The Python API: track tables, submit optimizations, inspect status.

    >>> from autooptimize import api
    >>> api.track("analytics.events", target_file_size="128MiB")
    >>> handle = api.optimize("analytics.events", partition="event_date=2026-11-01")
    >>> handle.wait(timeout=600)["state"]
    'succeeded'

Every argument is checked before anything is read or written: a bad one raises InvalidArgument (or
TableNotFound) naming it and what would be valid, and changes nothing. Importing this module makes the
process's log records redacted (:func:`autooptimize.redact.install_log_redaction`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from autooptimize.config import Settings, get_settings
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import parse_identifier
from autooptimize.redact import install_log_redaction
from autooptimize.services import actions as _actions
from autooptimize.services import status as _status
from autooptimize.services import tracking as _tracking
from autooptimize.services.budget import summary as budget_summary
from autooptimize.services.buffer.consolidate import consolidate_table
from autooptimize.services.buffer.landing import land as land_files
from autooptimize.services.buffer.rules import buffer_status as buffered_status
from autooptimize.services.buffer.rules import set_rules
from autooptimize.services.explain import explain as _explain
from autooptimize.services.notify import notify as notify_table
from autooptimize.services.preview import preview
from autooptimize.storage.models import ActionState, Trigger
from scheduler.orient import queue_status
from scheduler.wake import publish
from tasks.send import CeleryDispatch

install_log_redaction()


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False (got {value!r})")
    return value


def _table(table: Any) -> str:
    parse_identifier(table)
    return str(table)


def _settings(settings: Any) -> Settings:
    if settings is None:
        return get_settings()
    if not isinstance(settings, Settings):
        raise InvalidArgument(f"settings must be an autooptimize.config.Settings (got {type(settings).__name__})")
    return settings


@dataclass(frozen=True)
class ActionHandle:
    """A submitted action. ``wait`` blocks until it is terminal; ``result`` reads it now. A dry run's
    handle has no id (nothing was recorded) and holds its outcome."""

    id: str | None
    settings: Settings
    planned: dict[str, Any] | None = field(default=None, repr=False)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """The outcome once terminal; WaitTimeout (a TimeoutError) after ``timeout`` seconds (None: no limit)."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not math.isfinite(timeout) or timeout <= 0):
            raise InvalidArgument(f"timeout must be a positive number of seconds or None (got {timeout!r})")
        if self.planned is not None or self.id is None:
            return dict(self.planned or {})
        return _actions.wait(self.settings, self.id, timeout)

    @property
    def result(self) -> dict[str, Any]:
        if self.planned is not None or self.id is None:
            return dict(self.planned or {})
        return _actions.get_outcome(self.settings, self.id)

    @property
    def done(self) -> bool:
        return ActionState(self.result["state"]).terminal


def track(table: str, *, settings: Settings | None = None, **tuning: Any) -> dict[str, Any]:
    """Track ``table`` (``namespace.table``) with tuning such as ``target_file_size="64MiB"``.

    A newly tracked table allows every action but the destructive hygiene; ``allow=["expire_snapshots",
    "remove_orphans"]`` (or ``"expire_snapshots,remove_orphans"``) turns that on, ``disallow`` turns
    kinds off, ``allowed_actions`` sets the whole list. ``tenant="sales"`` names who the table is shared
    under in the fair dispatch (default: the first level of its namespace; ``""`` resets to that)."""
    return _tracking.track(_settings(settings), _table(table), **tuning)


def optimize(
    table: str,
    partition: str | None = None,
    action: str = "merge",
    priority: str | None = None,
    dry_run: bool = False,
    *,
    target_file_size: Any = None,
    options: dict[str, Any] | None = None,
    settings: Settings | None = None,
) -> ActionHandle:
    """Submit an ad-hoc action; ``partition`` is ``col=value[,col2=value2]`` or None for every partition.

    ``options`` are the action kind's own (validated before anything is written). A dry run plans
    and returns at once: it records nothing, and an untracked table stays untracked.
    """
    settings = _settings(settings)
    _table(table)
    if partition is not None and not isinstance(partition, str):
        raise InvalidArgument(f"partition must be a string such as day=2026-01-01 or None (got {partition!r})")
    if _flag("dry_run", dry_run):
        return ActionHandle(None, settings, preview(settings, table, partition=partition, kind=action,
                                                    target_file_size=target_file_size, options=options))
    action_id = _actions.submit(
        settings, table, partition=partition, kind=action, priority=priority, trigger=Trigger.AD_HOC,
        target_file_size=target_file_size, options=options, dispatch=CeleryDispatch(settings),
    )
    return ActionHandle(action_id, settings)


def status(table: str | None = None, *, settings: Settings | None = None) -> Any:
    """A table's partitions ranked by File Size Entropy, or one line per tracked table."""
    settings = _settings(settings)
    return _status.table_status(settings, _table(table)) if table is not None else _status.all_status(settings)


def notify(table: str, snapshot_id: int | None = None, *, settings: Settings | None = None) -> dict[str, Any]:
    """Say ``table`` (tracked) has a new snapshot, ``snapshot_id`` when known: the listener holding the
    table's shard observes it at once rather than on its next poll. The notice is kept in PostgreSQL until
    observed, so it survives a lost wake-up. Returns ``table``, ``snapshot_id``, ``shard``, ``notified_at``
    and ``woken``; TableNotFound for an untracked table, InvalidArgument for a bad snapshot id."""
    settings = _settings(settings)
    return notify_table(settings, _table(table), snapshot_id, wake=lambda t, s: publish(settings, t, s))


def explain(table: str, partition: str | None = None, *, settings: Settings | None = None) -> dict[str, Any]:
    """Per partition: the action decide would choose and why, its plan, and the budget's view of it
    (``budget``: value, estimated core-seconds, value per cost, the latest verdict). Changes nothing;
    plans on raw file sizes before the table's first rewrite (the CLI may calibrate with Spark)."""
    if partition is not None and not isinstance(partition, str):
        raise InvalidArgument(f"partition must be a string such as 'day=2026-01-01' (got {partition!r})")
    return _explain(_settings(settings), _table(table), partition)


def budget(*, settings: Settings | None = None) -> dict[str, Any]:
    """The budget now: AO_BUDGET_CORE_SECONDS_PER_HOUR, its mode, the rolling hour's spend (admitted
    candidates, other actions), the candidates per verdict and the deferrals recorded."""
    return budget_summary(_settings(settings))


def queues(*, settings: Settings | None = None) -> dict[str, Any]:
    """The dispatch backlog per priority class and table, its trend, and a recommendation to add actors."""
    return queue_status(_settings(settings))


def land(table: str, files: list[Any], *, move: bool = False, settings: Settings | None = None) -> dict[str, Any]:
    """Land small Parquet files in ``table``'s buffer zone (copied, or moved with ``move``).

    Returns ``landed`` (with rows, bytes, partitions) and ``rejected`` (file and reason) lists; a rejected
    file is left where it was. When a rule fires, a consolidation is queued.
    """
    settings = _settings(settings)
    if not isinstance(files, list | tuple) or not files:
        raise InvalidArgument(f"files must be a non-empty list of Parquet file paths (got {files!r})")
    return land_files(settings, _table(table), list(files), move=_flag("move", move), dispatch=CeleryDispatch(settings))


def buffer_status(table: str | None = None, *, settings: Settings | None = None) -> list[dict[str, Any]]:
    """Per buffered table: files, bytes, oldest age, and which rule fires next."""
    return buffered_status(_settings(settings), None if table is None else _table(table))


def buffer_rules(table: str, *, settings: Settings | None = None, **rules: Any) -> dict[str, Any]:
    """Set ``table``'s rules: ``max_age`` ("15m"), ``min_bytes``, ``max_bytes``, ``max_files``, ``combinable``,
    ``callback_url``; returns the rules in force."""
    valid = ("max_age", "min_bytes", "max_bytes", "max_files", "combinable", "callback_url", "reset")
    unknown = sorted(set(rules) - set(valid))
    if unknown:
        raise InvalidArgument(f"unknown rule(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return set_rules(_settings(settings), _table(table), **rules)


def flush(table: str, *, wait: bool = True, settings: Settings | None = None) -> dict[str, Any]:
    """Consolidate what ``table`` has buffered now, whatever the rules say: here (``wait``) or on a worker."""
    settings = _settings(settings)
    _table(table)
    dispatch = CeleryDispatch(settings)
    if not _flag("wait", wait):
        return {"table": table, "queued": dispatch.consolidation(table, flush=True)}
    return consolidate_table(settings, table, flush=True, wait=600.0, dispatch=dispatch)
