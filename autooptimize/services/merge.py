"""The merge action's public names, kept at their old import path.

The lifecycle every rewrite kind shares (exactly once, fencing, checkpoint, cleanup, partial progress)
is services/rewrite/lifecycle.py; the merge/sort kind is services/rewrite/merge.py; the action's values
(request, outcome, checkpoint) are autooptimize/domain/actions.py.
"""

from __future__ import annotations

from autooptimize.domain.actions import DEFAULT_MAX_GROUP_BYTES, Hooks, MergeOutcome, MergeRequest
from autooptimize.services.rewrite.kind import CheckpointWriter
from autooptimize.services.rewrite.lifecycle import abandon, committed_outcome, committed_parts
from autooptimize.services.rewrite.merge import (
    plan_partition,
    plan_partitions,
    plan_to_dict,
    refusal,
    run_merge,
    select_partitions,
)
from autooptimize.services.rewrite.outputs import action_dir, data_location
from autooptimize.services.rewrite.sort import sort_spec

__all__ = [
    "DEFAULT_MAX_GROUP_BYTES", "CheckpointWriter", "Hooks", "MergeOutcome", "MergeRequest", "abandon",
    "action_dir", "committed_outcome", "committed_parts", "data_location", "plan_partition", "plan_partitions",
    "plan_to_dict", "refusal", "run_merge", "select_partitions", "sort_spec",
]
