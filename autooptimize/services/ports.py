"""Ports: what services need from the layers above them, as small Protocols.

A service never imports ``tasks`` or ``scheduler``. The entry point that calls it (the API, the CLI, a
Celery task, the listener) hands in an implementation: ``tasks.send.CeleryDispatch`` in production, an
in-memory recorder in unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ActionTicket:
    """What dispatch needs to route one recorded action to the actors."""

    action_id: str
    table: str
    partition: str | None  # the partition's key, None for the whole table
    kind: str
    priority_class: str


class Dispatch(Protocol):
    """Sends work to the actors. Every method raises ServiceUnavailable when the broker cannot be reached."""

    def check(self) -> None:
        """Raise ServiceUnavailable (URL redacted) unless the broker answers."""

    def action(self, ticket: ActionTicket) -> None:
        """Queue a recorded action: on the reliable priority queue or straight to Celery, as configured."""

    def consolidation(self, identifier: str, *, flush: bool = False) -> bool:
        """Queue a consolidation of the table's buffer unless one is queued (a flush is always sent);
        returns whether one was sent."""

    def consolidation_started(self, identifier: str) -> None:
        """Forget the queued consolidation request, so landings from now on may queue another."""
