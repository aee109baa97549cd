"""The Python API: track tables, submit optimizations, inspect status.

    >>> from autooptimize import api
    >>> api.track("analytics.events", target_file_size="128MiB")
    >>> handle = api.optimize("analytics.events", partition="event_date=2026-11-01")
    >>> handle.wait(timeout=600)["state"]
    'succeeded'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autooptimize.config import Settings, get_settings
from autooptimize.services import actions as _actions
from autooptimize.services import status as _status
from autooptimize.services import tracking as _tracking
from autooptimize.storage.models import ActionState, Trigger
from tasks.send import CeleryDispatch


@dataclass(frozen=True)
class ActionHandle:
    """A submitted action. ``wait`` blocks until it is terminal; ``result`` reads it now."""

    id: str
    settings: Settings

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        return _actions.wait(self.settings, self.id, timeout)

    @property
    def result(self) -> dict[str, Any]:
        return _actions.get_outcome(self.settings, self.id)

    @property
    def done(self) -> bool:
        return ActionState(self.result["state"]).terminal


def track(table: str, *, settings: Settings | None = None, **tuning: Any) -> dict[str, Any]:
    """Track ``table`` (``namespace.table``) with tuning such as ``target_file_size="64MiB"``."""
    return _tracking.track(settings or get_settings(), table, **tuning)


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

    ``options`` are the action kind's own (validated before anything is written).
    """
    settings = settings or get_settings()
    action_id = _actions.submit(
        settings, table, partition=partition, kind=action, priority=priority, trigger=Trigger.AD_HOC,
        dry_run=dry_run, target_file_size=target_file_size, options=options, dispatch=CeleryDispatch(settings),
    )
    return ActionHandle(action_id, settings)


def status(table: str | None = None, *, settings: Settings | None = None) -> Any:
    """A table's partitions ranked by File Size Entropy, or one line per tracked table."""
    settings = settings or get_settings()
    return _status.table_status(settings, table) if table else _status.all_status(settings)


def queues(*, settings: Settings | None = None) -> dict[str, Any]:
    """The dispatch backlog per priority class and table, its trend, and a recommendation to add actors."""
    from scheduler.orient import queue_status

    return queue_status(settings or get_settings())


def land(table: str, files: list[Any], *, move: bool = False, settings: Settings | None = None) -> dict[str, Any]:
    """Land small Parquet files in ``table``'s buffer zone (copied, or moved with ``move``).

    Returns ``landed`` (with rows, bytes, partitions) and ``rejected`` (file and reason) lists; a rejected
    file is left where it was. When a rule fires, a consolidation is queued.
    """
    from autooptimize.services.buffer.landing import land as land_files

    settings = settings or get_settings()
    return land_files(settings, table, files, move=move, dispatch=CeleryDispatch(settings))


def buffer_status(table: str | None = None, *, settings: Settings | None = None) -> list[dict[str, Any]]:
    """Per buffered table: files, bytes, oldest age, and which rule fires next."""
    from autooptimize.services.buffer.rules import status as buffered_status

    return buffered_status(settings or get_settings(), table)


def buffer_rules(table: str, *, settings: Settings | None = None, **rules: Any) -> dict[str, Any]:
    """Set ``table``'s rules: ``max_age`` ("15m"), ``min_bytes``, ``max_bytes``, ``max_files``, ``combinable``,
    ``callback_url``; returns the rules in force."""
    from autooptimize.services.buffer.rules import set_rules

    return set_rules(settings or get_settings(), table, **rules)


def flush(table: str, *, wait: bool = True, settings: Settings | None = None) -> dict[str, Any]:
    """Consolidate what ``table`` has buffered now, whatever the rules say: here (``wait``) or on a worker."""
    from autooptimize.services.buffer.consolidate import consolidate_table

    settings = settings or get_settings()
    dispatch = CeleryDispatch(settings)
    if not wait:
        return {"table": table, "queued": dispatch.consolidation(table, flush=True)}
    return consolidate_table(settings, table, flush=True, wait=600.0, dispatch=dispatch)
