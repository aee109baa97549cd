"""Decide: for one partition, which action (merge, sort, zorder, delete compaction or nothing) and why.

Pure code over facts the caller measured (the planners' plans, the partition's delete load, whether
its files overlap on the sort column). Every candidate is scored by **value** against **cost** in
the same unit, bytes:

* **merge** — value: the bytes a reader no longer pays as per-file overhead, ``files removed ×
  FILE_OVERHEAD_BYTES``, plus the MSE reduction expressed in bytes (``√MSE_before − √MSE_after``,
  the RMS distance from the target it closes, per file it touches); cost: bytes rewritten.
* **compact_deletes** — value: the data rows every read skips again (``deleted fraction × data
  bytes``) plus the delete bytes every read loads and joins, plus the files merged; cost: the data
  bytes rewritten (those the deletes apply to).
* **sort** — value: what its rewrite saves as a merge would (files removed, MSE closed) plus the
  bytes of files whose ranges of the first sort column overlap others (a filter on that column cannot
  skip them); cost: the bytes it rewrites (the whole partition, or the runs its ordered plan merges).
* **zorder** — the same as a sort, with the bytes of files whose boxes on the z-order columns (every
  column's range) meet another file's as the overlap; offered only when the table names z-order columns.

Rules come before scores where correctness needs them: a partition holding delete files cannot be
merged or sorted before its deletes are folded in (``has_delete_files``), and a candidate over the
table's byte budget is never taken (``budget``). Among the remaining candidates that pass their
threshold, the one with the best value per byte wins. The reason codes, recorded in the audit log:

``delete_heavy``        the deleted fraction or the delete file count passes its threshold
``has_delete_files``    sizes need a merge, but deletes must be folded in first
``unsorted``            files overlap on the sort column and the partition needs a rewrite
``unclustered``         files' boxes overlap on the z-order columns and the partition needs a rewrite
``above_threshold``     MSE ≥ T²: a merge plan brings it under (or as close as the budget allows)
``budget``              the best candidate would rewrite more than max_bytes_per_action
``below_threshold``     MSE < T² and no delete load worth folding: nothing to do
``nothing_to_merge``    MSE ≥ T² but no plan helps (e.g. too few small files)
``not_allowed``         the only useful action is not in the table's allowed actions
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from autooptimize.domain.entropy import excess_needs_attention, mse_needs_attention, needs_attention

#: What a reader pays per file beyond its bytes (open, footer, planning), as bytes of reading:
#: about one object-store round trip at ~100 MB/s. Used only to put "files removed" in bytes.
FILE_OVERHEAD_BYTES = 4 * 1024 * 1024
#: A partition whose deletes remove at least this fraction of its rows is delete-heavy.
DELETE_HEAVY_FRACTION = 0.05
#: … or that carries at least this many delete files.
DELETE_HEAVY_FILES = 8
#: Sort only when at least this fraction of the partition's bytes sits in overlapping files.
SORT_OVERLAP_FRACTION = 0.5


@dataclass(frozen=True)
class MergeFacts:
    """The merge planner's plan for the partition."""

    bytes_rewritten: int
    files_in: int
    files_out: int
    mse_before: float
    mse_after: float
    limited_by_budget: bool = False  # the planner stopped at max_bytes before reaching MSE < T²


@dataclass(frozen=True)
class DeleteFacts:
    """The partition's delete load: delete files, their bytes, and the rows they remove."""

    files: int = 0
    bytes: int = 0
    rows_deleted_estimate: int = 0
    data_rows: int = 0
    data_bytes_affected: int = 0  # bytes of the data files a delete applies to (what compaction rewrites)

    @property
    def deleted_fraction(self) -> float:
        """Share of the data rows the deletes remove, at most 1.0; 0.0 when no rows are known."""
        return min(1.0, self.rows_deleted_estimate / self.data_rows) if self.data_rows else 0.0


@dataclass(frozen=True)
class SortFacts:
    """The sort planner's plan for the partition, and how much of it overlaps on the sort column."""

    overlapping_bytes: int  # bytes of files whose first-sort-column range overlaps another file's
    partition_bytes: int
    files: int
    bytes_rewritten: int = 0
    files_in: int = 0
    files_out: int = 0
    mse_after: float = 0.0


@dataclass(frozen=True)
class PartitionFacts:
    """Everything :func:`decide` knows about one partition, measured by the caller."""

    files: int
    bytes: int
    mse: float
    tolerance: int
    merge: MergeFacts | None  # None: the planner found nothing to do
    deletes: DeleteFacts = field(default_factory=DeleteFacts)
    sort: SortFacts | None = None  # None: the table has no sort order
    zorder: SortFacts | None = None  # None: the table names no z-order columns (overlap: of boxes)
    allowed: frozenset[str] = frozenset({"merge"})
    max_bytes: int | None = None
    #: The partition's exact SSE (Σ e² over its data files); when given, the attention rule uses it
    #: rather than the float ``mse``.
    sse: int | None = None
    #: ``Σ min(s, target)`` and the target: when given with ``sse``, the health rule judges the excess
    #: over the best layout those bytes allow (:func:`~autooptimize.domain.entropy.excess_needs_attention`).
    capped_bytes: int | None = None
    target: int | None = None

    @property
    def needs_attention(self) -> bool:
        """The health rule when the SSE, capped bytes and target are known, else ``MSE ≥ tolerance²``
        (:func:`~autooptimize.domain.entropy.needs_attention`), exact in integers."""
        if self.sse is not None and self.capped_bytes is not None and self.target is not None:
            return excess_needs_attention(self.sse, self.files, self.capped_bytes, self.target, self.tolerance)
        if self.sse is not None:
            return needs_attention(self.sse, self.files, self.tolerance)
        return mse_needs_attention(self.mse, self.files, self.tolerance)


@dataclass(frozen=True)
class Candidate:
    """One action considered for the partition, scored in bytes, and whether it may be taken."""

    kind: str
    value: float  # bytes of reading saved
    cost: int  # bytes rewritten
    eligible: bool
    reason: str

    @property
    def value_per_byte(self) -> float:
        return self.value / self.cost if self.cost else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": round(self.value), "cost": self.cost, "eligible": self.eligible,
                "reason": self.reason, "value_per_byte": round(self.value_per_byte, 4)
                if math.isfinite(self.value_per_byte) else None}


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` chose (``kind`` None: nothing), the reason code, and every candidate scored."""

    kind: str | None  # None: leave the partition alone
    reason: str
    candidates: tuple[Candidate, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "candidates": [c.as_dict() for c in self.candidates]}


def _over_budget(cost: int, max_bytes: int | None) -> bool:
    return max_bytes is not None and cost > max_bytes


def _rewrite_value(files_in: int, files_out: int, mse_before: float, mse_after: float) -> float:
    closed = max(0.0, math.sqrt(max(mse_before, 0.0)) - math.sqrt(max(mse_after, 0.0)))
    return (files_in - files_out) * FILE_OVERHEAD_BYTES + closed * files_in


def _merge_candidate(facts: PartitionFacts) -> Candidate | None:
    plan = facts.merge
    if plan is None or plan.files_in == 0:
        return None
    value = _rewrite_value(plan.files_in, plan.files_out, plan.mse_before, plan.mse_after)
    reason = "budget" if plan.limited_by_budget else "above_threshold"
    eligible = facts.needs_attention and not facts.deletes.files and not _over_budget(plan.bytes_rewritten,
                                                                                      facts.max_bytes)
    return Candidate("merge", value, plan.bytes_rewritten, eligible, reason)


def _compaction_candidate(facts: PartitionFacts) -> Candidate | None:
    d = facts.deletes
    if not d.files:
        return None
    cost = d.data_bytes_affected or facts.bytes
    value = d.deleted_fraction * facts.bytes + d.bytes + d.files * FILE_OVERHEAD_BYTES
    heavy = d.deleted_fraction >= DELETE_HEAVY_FRACTION or d.files >= DELETE_HEAVY_FILES
    reason = "delete_heavy" if heavy else "has_delete_files"
    eligible = (heavy or facts.needs_attention) and not _over_budget(cost, facts.max_bytes)
    return Candidate("compact_deletes", value, cost, eligible, "budget" if _over_budget(cost, facts.max_bytes)
                     else reason)


def _sort_candidate(facts: PartitionFacts, kind: str = "sort") -> Candidate | None:
    s = facts.sort if kind == "sort" else facts.zorder
    if s is None or s.files < 2 or not s.overlapping_bytes or not s.files_in:
        return None
    cost = s.bytes_rewritten
    overlapping = s.overlapping_bytes / s.partition_bytes if s.partition_bytes else 0.0
    value = _rewrite_value(s.files_in, s.files_out, facts.mse, s.mse_after) + s.overlapping_bytes
    eligible = (facts.needs_attention and not facts.deletes.files and overlapping >= SORT_OVERLAP_FRACTION
                and not _over_budget(cost, facts.max_bytes))
    reason = "unsorted" if kind == "sort" else "unclustered"
    return Candidate(kind, value, cost, eligible, "budget" if _over_budget(cost, facts.max_bytes) else reason)


def decide(facts: PartitionFacts) -> Decision:
    """The action for one partition, with every candidate's value, cost and reason (see module doc)."""
    candidates = tuple(c for c in (_compaction_candidate(facts), _sort_candidate(facts),
                                   _sort_candidate(facts, "zorder"), _merge_candidate(facts)) if c is not None)
    eligible = [c for c in candidates if c.eligible]
    allowed = [c for c in eligible if c.kind in facts.allowed]
    if allowed:
        # folding deletes in comes first: nothing else may rewrite the partition while they exist
        compaction = next((c for c in allowed if c.kind == "compact_deletes"), None)
        best = compaction or max(allowed, key=lambda c: (c.value_per_byte, c.kind == "merge"))
        return Decision(best.kind, best.reason, candidates)
    if eligible:
        return Decision(None, "not_allowed", candidates)
    if any(c.reason == "budget" for c in candidates):
        return Decision(None, "budget", candidates)
    if not facts.needs_attention:
        return Decision(None, "below_threshold", candidates)
    return Decision(None, "nothing_to_merge", candidates)
