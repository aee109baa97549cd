"""Services hand their work to the Dispatch port they are given (here an in-memory recorder): no broker,
but real PostgreSQL and a real table (so it lives with the integration tests)."""

from __future__ import annotations

from autooptimize.services import actions
from autooptimize.services.ports import ActionTicket
from tests.fakes import RecordingDispatch
from tests.integration.tables import DAY1, DAY2, identifier, make_table


def test_submit_hands_the_ticket_to_the_port(settings, catalog):
    ident = identifier(make_table(catalog, {DAY1: 3, DAY2: 1}))
    port = RecordingDispatch()
    action_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=port)
    outcome = actions.get_outcome(settings, action_id)
    assert port.checks == 1
    assert port.tickets == [ActionTicket(action_id=action_id, table=ident, partition=outcome["partition_key"],
                                         kind="merge", priority_class=outcome["priority_class"])]
    assert outcome["partition"] is not None and outcome["state"] == "queued"
    # a duplicate returns the queued action and sends nothing more
    assert actions.submit(settings, ident, partition="day=2026-01-01", dispatch=port) == action_id
    assert len(port.tickets) == 1


def test_submit_without_a_port_only_records(settings, catalog):
    ident = identifier(make_table(catalog, {DAY1: 2}))
    action_id = actions.submit(settings, ident, partition="day=2026-01-01")
    assert actions.get_outcome(settings, action_id)["state"] == "queued"
