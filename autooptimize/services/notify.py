"""The push path: a writer or an event consumer says a tracked table has a new snapshot, and the
listener holding the table's shard observes it at once instead of waiting for its poll.

The notice is written to PostgreSQL first (``storage/notices.py``), then the caller's ``wake`` port
(the listeners' Redis channel, ``scheduler/wake.py``) is told; if the wake-up is lost the listener
still finds the notice on its next pass. Notifying twice, or for a snapshot already observed, is
harmless: the listener observes from its cursor and finds nothing new.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.shards import shard_of
from autooptimize.errors import InvalidArgument, TableNotFound
from autooptimize.iceberg.catalog import parse_identifier
from autooptimize.storage.db import session_scope
from autooptimize.storage.notices import add_notice
from autooptimize.storage.repositories import tracked_table

Wake = Callable[[str, int | None], bool]
"""Wakes the listener of the table (identifier, snapshot id); True when the wake-up was sent."""

MAX_SNAPSHOT_ID = 2**63 - 1


def snapshot_id_arg(value: Any) -> int | None:
    """``value`` as a snapshot id: None, or an integer (or its decimal digits) in 0 … 2⁶³−1, the ids
    Iceberg writers generate; InvalidArgument naming the value otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,19}\s*", value):
        value = int(value)
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or not 0 <= number <= MAX_SNAPSHOT_ID:
        raise InvalidArgument(f"snapshot id {value!r} is not valid; give the snapshot's id as an integer "
                              f"from 0 to {MAX_SNAPSHOT_ID} (as in the table's metadata), or leave it out")
    return number


def notify(settings: Settings, identifier: str, snapshot_id: Any = None, *, wake: Wake | None = None) -> dict[str, Any]:
    """Leave a notice that ``identifier`` has a new snapshot (``snapshot_id`` when known) and wake its
    listener. Returns the table, the snapshot id, the table's shard, when the notice was recorded and
    whether the wake-up was sent. InvalidArgument for a malformed identifier or snapshot id,
    TableNotFound for a table that is not tracked; nothing is written then."""
    parse_identifier(identifier)
    snapshot = snapshot_id_arg(snapshot_id)
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is None:
            raise TableNotFound(f"table {identifier!r} is not tracked in catalog {settings.catalog!r}; "
                                f"track it first (autooptimize track {identifier})")
        notified_at = add_notice(session, row.id, snapshot)
    woken = bool(wake(identifier, snapshot)) if wake is not None else False
    return {"table": identifier, "snapshot_id": snapshot, "shard": shard_of(identifier, settings.listener_shards),
            "notified_at": notified_at.isoformat(), "woken": woken}
