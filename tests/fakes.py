"""In-memory fakes of our own ports, for tests (never of PostgreSQL, Redis or Spark)."""

from __future__ import annotations

from dataclasses import dataclass, field

from autooptimize.services.ports import ActionTicket


@dataclass
class RecordingDispatch:
    """A Dispatch that remembers what it was asked to send."""

    checks: int = 0
    tickets: list[ActionTicket] = field(default_factory=list)
    consolidations: list[tuple[str, bool]] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    def check(self) -> None:
        self.checks += 1

    def action(self, ticket: ActionTicket) -> None:
        self.tickets.append(ticket)

    def consolidation(self, identifier: str, *, flush: bool = False) -> bool:
        self.consolidations.append((identifier, flush))
        return True

    def consolidation_started(self, identifier: str) -> None:
        self.started.append(identifier)
