"""The JSON API's response shapes, as the OpenAPI file documents them (docs/openapi.json).

Every model allows fields beyond those named, so the API may add a field without breaking a reader.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Histogram(Open):
    edges: list[int] = Field(description="lower edge of each bucket in bytes; the last bucket is open")
    labels: list[str]
    counts: list[int] = Field(description="files per bucket")
    bytes: list[int] = Field(description="bytes of the files in each bucket")
    files: int
    total_bytes: int


class Series(Open):
    counts: list[int]
    bytes: list[int]
    files: int | None = None


class ActionBrief(Open):
    id: str
    kind: str
    state: str
    reason: str | None = None
    at: str | None = None


class TableLine(Open):
    table: str
    health: str = Field(description="healthy, attention (a partition's error beyond the best layout its bytes "
                                    "allow is ≥ T² per file) or error")
    target_file_size: int
    tolerance: int
    files: int | None = None
    bytes: int | None = None
    partitions: int | None = None
    partitions_needing_attention: int | None = None
    small_files: int | None = None
    small_file_share: float | None = None
    worst_partition: str | None = None
    worst_mse: float | None = None
    worst_ratio: float | None = Field(None, description="worst raw MSE / T² (health judges the excess over "
                                                        "the best layout, not this)")
    delete_files: int | None = None
    decision_failures: int | None = None
    last_decision_failure: str | None = None
    last_action: ActionBrief | None = None
    error: str | None = None


class BeforeAfterPartition(Open):
    partition: str | None = None
    mse_before: float | None = None
    mse_after: float | None = None
    files_in: int | None = None
    files_out: int | None = None


class BeforeAfter(Open):
    edges: list[int]
    labels: list[str]
    before: Series
    after: Series
    before_source: str = Field(description="plan (recorded input sizes) or plan_estimate")
    after_source: str = Field(description="measured (committed output sizes) or plan_estimate")
    partitions: list[BeforeAfterPartition]


class ActionView(Open):
    id: str
    table: str | None = None
    state: str
    reason: str | None = None
    kind: str
    trigger: str
    priority_class: str
    partition: str | None = None
    files_in: int | None = None
    files_out: int | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    mse_before: float | None = None
    mse_after: float | None = None
    snapshot_id: int | None = None
    target_file_size: int | None = None
    attempts: int
    error: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    seconds: float | None = None
    phases: dict[str, float] = Field(description="seconds per phase: plan, rewrite, commit, total, wall")
    commit_conflicts: int
    before_after: BeforeAfter | None = None


class AuditRecord(Open):
    id: int
    at: str | None = None
    event: str
    detail: dict[str, Any]


class ActionDetail(ActionView):
    options: dict[str, Any] | None = None
    audit: list[AuditRecord]


class ActionPage(Open):
    total: int
    limit: int
    offset: int
    actions: list[ActionView]
    choices: dict[str, list[str]] = Field(description="kinds, states and triggers present, for filters")


class PartitionLine(Open):
    partition: str
    partition_key: str
    spec_id: int
    n: int
    mse: float
    rmse_bytes: int
    mse_ratio: float | None = None
    needs_attention: bool
    bytes: int
    rows: int
    small_files: int
    delete_files: int
    last_action: dict[str, Any] | None = None
    histogram: Series


class TableDetail(Open):
    table: str
    tracked: bool
    target_file_size: int
    tolerance: int
    threshold_mse: int = Field(description="T²: a partition needs attention when its error beyond the best "
                                           "layout its bytes allow reaches T² per file")
    snapshot_id: int | None = None
    files: int
    bytes: int
    small_files: int
    delete_files: int
    partitions_needing_attention: int
    histogram: Histogram
    partitions: list[PartitionLine] = Field(description="worst MSE first")
    actions: list[ActionView]
    suggested_tuning: dict[str, Any] | None = Field(
        None, description="AutoAnalyze's last suggestion (whatif --suggest, beat): tuning, predicted, current "
                          "and bin-pack figures, whether it keeps the file goal, whether it was applied, and "
                          "`check`: the previous suggestion's prediction beside what the table did since, and "
                          "`live_files_bias`: the margin that check put on this suggestion's file goal, and "
                          "`output_calibration`: what a few groups of the table's files weighed once rewritten "
                          "by the merge engine, for a table with no fitted output model of its own")
    budget: dict[str, Any] | None = Field(
        None, description="the budget (AO_BUDGET_CORE_SECONDS_PER_HOUR, mode) and its latest verdict per partition: "
                          "value, estimated core-seconds, value per cost, admit or defer and why")


class QueueClass(Open):
    queued: int
    tables: dict[str, int]


class QueueStatus(Open):
    dispatch: str
    slots: int
    in_flight: int
    queued: int
    classes: dict[str, QueueClass]
    trend: list[dict[str, float]]
    growing: bool
    recommendation: str | None = None


class TenantLine(Open):
    tenant: str
    weight: float
    target_share: float | None = Field(None, description="weight / Σ weights of the tenants active in the window")
    dispatched: int = Field(description="dispatches in the window")
    dispatch_share: float | None = None
    busy_seconds: float = Field(description="start-to-finish seconds of its actions that finished in the window")
    busy_share: float | None = None
    dispatched_total: int = Field(description="dispatches since the queue was created")
    queued: int
    in_flight: int
    max_concurrent: int | None = Field(None, description="AO_TENANT_MAX_CONCURRENT for it; null: no cap")


class TenantShares(Open):
    window_minutes: int
    fairness: str
    urgent_classes: list[str]
    tenants: list[TenantLine]


class Progress(Open):
    id: str
    state: str
    phase: str
    attempt: int
    groups_done: int
    bytes_done: int
    partitions: int
    seconds: float | None = None


class NotifyRequest(BaseModel):
    """The body of POST /api/notify: only these two fields."""

    model_config = ConfigDict(extra="forbid")

    table: str = Field(description="a tracked table, namespace.table")
    snapshot_id: int | str | None = Field(
        default=None, description="the new snapshot's id when known (an integer 0 … 2^63-1); 400 otherwise")


class NotifyResult(Open):
    table: str
    snapshot_id: int | None = None
    shard: int = Field(description="the table's shard: the listener holding it is woken")
    notified_at: str = Field(description="when the notice was recorded (kept until the listener has observed it)")
    woken: bool = Field(description="whether the wake-up was published (false: the listener's next pass finds it)")
