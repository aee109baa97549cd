"""Retired: the senders live in :mod:`tasks.send`. These names stay importable until every caller
takes the Dispatch port (``tasks.send.CeleryDispatch``) instead."""

from __future__ import annotations

from tasks.send import check_broker, clear_consolidation_request, send_action, send_consolidation

__all__ = ["check_broker", "clear_consolidation_request", "send_action", "send_consolidation"]
