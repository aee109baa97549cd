"""The values of a rewrite action (merge, sort, compact_deletes, respec): its request, its outcome, and
the checkpoint it records between attempts.

Pure: stdlib only. The checkpoint is stored in PostgreSQL as JSON; :meth:`Checkpoint.to_dict` and
:meth:`Checkpoint.from_dict` are the only places that know its shape, and ``from_dict`` reads every
checkpoint written so far (older rows included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum
from typing import Any

from autooptimize.domain.policy import DEFAULT_FAN_IN
from autooptimize.domain.priced import DEFAULT_PRICE

#: The default of AO_MAX_GROUP_BYTES: the most input bytes one rewrite group (one Spark job) reads.
DEFAULT_MAX_GROUP_BYTES = 8 * 1024**3


class ActionState(str, Enum):
    """The states of an action, as its record stores them (one enum for the record and the outcome)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"  # nothing worth doing; the reason says why
    REFUSED = "refused"  # cannot be done safely as the partition is now
    ABORTED = "aborted"  # a concurrent change invalidated the output; it was removed
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self not in (ActionState.QUEUED, ActionState.RUNNING)


class Engine(StrEnum):
    """Which path rewrote a group (services/rewrite/engine.py): ``spark``, the groups of the action as the
    tasks of one Spark job on the executors; ``spark_sql``, Spark's own Parquet reader and writer, a job per
    group; ``local``, pyarrow in the worker process (a single machine, chosen explicitly)."""

    SPARK = "spark"
    SPARK_SQL = "spark_sql"
    LOCAL = "local"


@dataclass(frozen=True)
class Sizing:
    """Output bytes per row learned from the table's rewrites (see services/sizing)."""

    bytes_per_row: float | None
    source: str  # history | calibration | none

    def out_size(self, record_count: int) -> int | None:
        if self.bytes_per_row is None:
            return None
        return max(1, round(record_count * self.bytes_per_row))

    def as_dict(self) -> dict[str, Any]:
        return {"bytes_per_row": self.bytes_per_row, "source": self.source}


NO_SIZING = Sizing(None, "none")


@dataclass
class Hooks:
    """Fault-injection points for tests and operators' probes; each defaults to doing nothing."""

    after_write: Callable[[list[str]], None] | None = None
    before_commit: Callable[[], None] | None = None
    after_commit: Callable[[int], None] | None = None


@dataclass(frozen=True)
class ActionRequest:
    """One rewrite action as the executor hands it over (every rewrite kind, not only merge)."""

    action_id: str
    identifier: str
    spec_id: int | None
    partition_key: str | None  # None: every partition of the current spec
    target_file_size: int
    tolerance: int
    min_input_files: int
    max_bytes: int | None
    checkpoint: dict[str, Any] | None  # as stored; read it with Checkpoint.from_dict
    dry_run: bool = False
    kind: str = "merge"
    sort_order: str | None = None  # the table's configured sort order ("col_a,col_b"), if any
    zorder_columns: str | None = None  # the table's configured z-order columns ("col_a, col_b"), if any
    options: dict[str, Any] = field(default_factory=dict)  # the action's options as submitted
    sizing: Sizing = NO_SIZING  # output bytes per row learned from the table's rewrites (services/sizing)
    max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES  # no group reads more (AO_MAX_GROUP_BYTES)
    concurrency: int = 2  # group jobs in flight (AO_REWRITE_CONCURRENCY)
    # how a merge chooses its groups: "tiered" (the live-partition policy, autooptimize.domain.policy)
    # or "binpack" (First Fit Decreasing over every file that needs it); AO_MERGE_POLICY
    policy: str = "tiered"
    settle_seconds: float = 3.0  # no write for this long: quiet, merged with quiet_merge (AO_SETTLE_SECONDS)
    fan_in: int = DEFAULT_FAN_IN  # files of a similar size merged together while live (AO_MERGE_FAN_IN)
    cold_after_seconds: float = 60.0  # no new file for this long: the partition is cold (AO_COLD_AFTER_SECONDS)
    expected_partition_bytes: int | None = None  # policy.expected_partition_bytes from its history, if known
    last_write_ms: int | None = None  # when a writer last added a file to the one partition (the listener's)
    write_gaps: tuple[float, ...] = ()  # that partition's recent gaps between writes, seconds, newest first
    cold_gap_factor: float = 4.0  # the partition is cold sooner after close writes (AO_COLD_GAP_FACTOR)
    late_horizon: bool = True  # finish a partition past the table's late horizon (AO_LATE_HORIZON_FINISH)
    past_late_horizon: bool = False  # the one partition is past it (the listener's ordinals and late lags)
    price: int = DEFAULT_PRICE  # the priced live rule's price (AO_MERGE_PRICE, the table's own; 0: the tiers)
    newest_partition: bool = True  # the one partition is its spec's newest time partition, or has no time field
    leave_alone_below: int = 0  # partitions under this many bytes are never merged (the table's tuning)
    quiet_merge: bool = False  # merge a quiet partition before it goes cold (AO_QUIET_MERGE, the table's tuning)
    cold_absorb: bool = False  # the cold finish gives its remainder a home (AO_COLD_ABSORB, the table's tuning)
    now_ms: int | None = None  # the clock live-ness is judged by (None: now)
    engine: str = "spark"  # which path rewrites the groups (AO_REWRITE_ENGINE; services/rewrite/engine.py)

    @property
    def resume_point(self) -> Checkpoint:
        """The stored checkpoint, typed (empty when there is none)."""
        return Checkpoint.from_dict(self.checkpoint)


@dataclass(frozen=True)
class Digest:
    """Rows and content checksum of a set of rows; equal digests mean equal content (any checksum kind)."""

    rows: int
    checksum: str


@dataclass(frozen=True)
class GroupResult:
    """One rewritten and verified group: what it replaces, what it wrote, and the figures checked.

    ``part`` is set once the group is assigned to a partial-progress part. ``output_partitions`` is set
    for a respec (each output's spec id and hex-encoded partition). ``deletes``/``scope``/``refs``/
    ``rows_deleted`` are set by a delete compaction.
    """

    spec_id: int
    partition: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    bytes_in: int
    bytes_out: int
    rows_in: int
    rows_out: int
    checksum_in: str
    checksum_out: str
    output_sizes: tuple[int, ...]
    engine: str | None = None
    sort_order_id: int | None = None
    part: int | None = None
    output_partitions: tuple[tuple[int, tuple[str | None, ...]], ...] | None = None
    deletes: tuple[str, ...] | None = None
    scope: tuple[str, ...] | None = None
    refs: dict[str, tuple[str, ...]] | None = None
    rows_deleted: int | None = None
    executor: str | None = None  # ``host:pid`` of the executor JVM whose task rewrote it (engine ``spark``)
    #: the outputs' DataFiles as the executors read them from the footers (not checkpointed: a resumed
    #: checkpoint reads the footers again)
    data_files: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)

    def in_part(self, number: int) -> GroupResult:
        return replace(self, part=number)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "spec_id": self.spec_id, "partition": self.partition, "inputs": list(self.inputs),
            "outputs": list(self.outputs), "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
            "rows_in": self.rows_in, "rows_out": self.rows_out, "checksum_in": self.checksum_in,
            "checksum_out": self.checksum_out, "output_sizes": list(self.output_sizes),
        }
        if self.engine is not None:
            out["engine"] = self.engine
        if self.engine == Engine.SPARK_SQL or self.sort_order_id is not None:
            out["sort_order_id"] = self.sort_order_id
        if self.part is not None:
            out["part"] = self.part
        if self.executor is not None:
            out["executor"] = self.executor
        if self.output_partitions is not None:
            out["output_partitions"] = [[sid, list(encoded)] for sid, encoded in self.output_partitions]
        if self.deletes is not None:
            out.update(deletes=list(self.deletes), scope=list(self.scope or ()), rows_deleted=self.rows_deleted,
                       refs={k: list(v) for k, v in (self.refs or {}).items()})
        return out

    @classmethod
    def from_dict(cls, entry: dict[str, Any]) -> GroupResult:
        partitions = entry.get("output_partitions")
        refs = entry.get("refs")
        return cls(
            spec_id=int(entry["spec_id"]), partition=entry["partition"], inputs=tuple(entry["inputs"]),
            outputs=tuple(entry["outputs"]), bytes_in=int(entry["bytes_in"]), bytes_out=int(entry["bytes_out"]),
            rows_in=int(entry["rows_in"]), rows_out=int(entry["rows_out"]), checksum_in=entry["checksum_in"],
            checksum_out=entry["checksum_out"], output_sizes=tuple(int(s) for s in entry.get("output_sizes") or ()),
            engine=entry.get("engine"), sort_order_id=entry.get("sort_order_id"), executor=entry.get("executor"),
            part=None if entry.get("part") is None else int(entry["part"]),
            output_partitions=None if partitions is None else tuple((int(s), tuple(e)) for s, e in partitions),
            deletes=None if entry.get("deletes") is None else tuple(entry["deletes"]),
            scope=None if entry.get("scope") is None else tuple(entry["scope"]),
            refs=None if refs is None else {k: tuple(v) for k, v in refs.items()},
            rows_deleted=entry.get("rows_deleted"),
        )


@dataclass(frozen=True)
class Checkpoint:
    """What an attempt recorded: the snapshot it planned on, its Spark session (to fence it), every
    output directory it may have written, whether it commits in parts, and its verified groups."""

    base_snapshot_id: int | None = None
    writer_session_id: str | None = None
    dirs: tuple[str, ...] = ()
    partial: bool = False
    groups: tuple[GroupResult, ...] = ()
    #: (snapshot id, parent id) of a commit whose answer was lost: it may still land until the branch
    #: moves past the parent without it, so nothing of the action's output is removed before then
    unsettled_commit: tuple[int, int | None] | None = None

    def with_groups(self, groups: list[GroupResult] | tuple[GroupResult, ...]) -> Checkpoint:
        return replace(self, groups=tuple(groups))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"base_snapshot_id": self.base_snapshot_id,
                               "writer": {"spark_session_id": self.writer_session_id},
                               "dirs": list(self.dirs)}
        if self.partial:
            out["partial"] = True
        out["groups"] = [g.to_dict() for g in self.groups]
        if self.unsettled_commit is not None:
            out["unsettled_commit"] = {"snapshot_id": self.unsettled_commit[0], "parent_id": self.unsettled_commit[1]}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Checkpoint:
        data = data or {}
        return cls(base_snapshot_id=data.get("base_snapshot_id"),
                   writer_session_id=(data.get("writer") or {}).get("spark_session_id"),
                   dirs=tuple(data.get("dirs") or ()), partial=bool(data.get("partial")),
                   groups=tuple(GroupResult.from_dict(e) for e in data.get("groups") or ()),
                   unsettled_commit=_unsettled(data.get("unsettled_commit")))


def _unsettled(data: dict[str, Any] | None) -> tuple[int, int | None] | None:
    if not data:
        return None
    parent = data.get("parent_id")
    return int(data["snapshot_id"]), int(parent) if parent is not None else None


@dataclass
class ActionOutcome:
    """What a rewrite action did (filled in as it runs; the executor records it)."""

    state: str  # an ActionState value
    reason: str | None = None
    base_snapshot_id: int | None = None
    committed_snapshot_id: int | None = None
    files_in: int = 0
    files_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    checksum_in: str | None = None
    checksum_out: str | None = None
    mse_before: float | None = None
    mse_after: float | None = None
    plan: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def add_figures(self, groups: tuple[GroupResult, ...] | list[GroupResult]) -> None:
        """Files, bytes, rows and checksums summed over ``groups`` (the committed ones)."""
        self.files_in = sum(len(g.inputs) for g in groups)
        self.files_out = sum(len(g.outputs) for g in groups)
        self.bytes_in = sum(g.bytes_in for g in groups)
        self.bytes_out = sum(g.bytes_out for g in groups)
        self.rows_in = sum(g.rows_in for g in groups)
        self.rows_out = sum(g.rows_out for g in groups)
        self.checksum_in = combine_checksums([g.checksum_in for g in groups])
        self.checksum_out = combine_checksums([g.checksum_out for g in groups])


def combine_checksums(checksums: list[str]) -> str | None:
    """Sum per-group digests ``rows:h1:h2`` (they are sums of row hashes, so they add up)."""
    if not checksums:
        return None
    rows = h1 = h2 = 0
    for c in checksums:
        r, a, b = c.split(":")
        rows, h1, h2 = rows + int(r), h1 + int(a, 16), h2 + int(b, 16)
    return f"{rows}:{h1:x}:{h2:x}"
