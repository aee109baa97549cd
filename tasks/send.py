"""The Dispatch port (autooptimize.services.ports) implemented on Celery and the reliable priority queue."""

from __future__ import annotations

from autooptimize.config import Settings
from autooptimize.services.ports import ActionTicket


class CeleryDispatch:
    """Sends actions and consolidations as Celery tasks, through the reliable priority queue in rpq mode."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def check(self) -> None:
        from tasks.dispatch import check_broker

        check_broker(self.settings)

    def action(self, ticket: ActionTicket) -> None:
        if self.settings.dispatch == "rpq":
            from scheduler.dispatcher import enqueue_action

            enqueue_action(self.settings, ticket.action_id, ticket.table, ticket.partition, ticket.kind,
                           ticket.priority_class)
            return
        from tasks.dispatch import send_action

        send_action(self.settings, ticket.action_id, priority_class=ticket.priority_class,
                    label={"table": ticket.table, "partition": ticket.partition, "kind": ticket.kind})

    def consolidation(self, identifier: str, *, flush: bool = False) -> bool:
        from tasks.dispatch import send_consolidation

        return send_consolidation(self.settings, identifier, flush=flush)

    def consolidation_started(self, identifier: str) -> None:
        from tasks.dispatch import clear_consolidation_request

        clear_consolidation_request(self.settings, identifier)
