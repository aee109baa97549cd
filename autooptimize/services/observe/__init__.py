"""Observe: keep every tracked partition's N and SSE current from snapshots alone, without scanning.

For each new snapshot, oldest first along the chain since the cursor, only the manifests that snapshot
wrote are read; its per-partition deltas, its history rows and the cursor advance commit in one
transaction. When the chain cannot be followed (first sight, a snapshot expired before it was seen, a
rollback, a re-tuned target, totals that disagree) the table is scanned instead: an exact recomputation
from the current snapshot, recorded as a scan. Partitions whose MSE reaches T² are handed to
``on_attention`` unless an action is already pending for them.
"""

from __future__ import annotations

from autooptimize.services.observe.attention import (
    Attention,
    observed_state,
    partitions_needing_attention,
    sweep_attention,
)
from autooptimize.services.observe.changes import PollSchedule, changed_tables, stale_tables
from autooptimize.services.observe.common import ObserveReport, OnAttention
from autooptimize.services.observe.roll import observe_table, record_observe_error
from autooptimize.services.observe.scan import mark_for_scan, scan_table

__all__ = [
    "Attention",
    "ObserveReport",
    "OnAttention",
    "PollSchedule",
    "changed_tables",
    "mark_for_scan",
    "observe_table",
    "observed_state",
    "partitions_needing_attention",
    "record_observe_error",
    "scan_table",
    "stale_tables",
    "sweep_attention",
]
