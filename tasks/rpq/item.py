"""The values the reliable priority queue holds and reports: an item, a backlog snapshot, a rebuild's result."""

from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass

from autooptimize.errors import InvalidArgument

MAX_PRIORITY = 1_000_000


@dataclass(frozen=True)
class QueueItem:
    """One action waiting to run. ``key`` (table|partition|kind) identifies it in the queue.

    ``priority`` orders items of one (class, table) queue: 0 first; each step is worth
    ``priority_step`` seconds of waiting. ``cost`` is what fair sharing counts (1 per item, or bytes).
    ``enqueued_at`` (seconds since the epoch) is set on enqueue when None; keep the original time when
    rebuilding so items keep their place.
    """

    action_id: str
    table: str
    partition: str
    kind: str
    priority_class: str
    priority: int = 0
    cost: float = 1.0
    enqueued_at: float | None = None

    def __post_init__(self) -> None:
        for name in ("action_id", "table", "kind", "priority_class"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"QueueItem.{name} must be a non-empty string, got {value!r}")
        for name in ("table", "kind", "priority_class"):
            if any(c in getattr(self, name) for c in "|\t\n"):
                raise InvalidArgument(
                    f"QueueItem.{name} must not contain '|', a tab or a newline, got {getattr(self, name)!r}"
                )
        if not isinstance(self.partition, str):
            raise InvalidArgument(f"QueueItem.partition must be a string ('' when unpartitioned), got {self.partition!r}")
        try:
            priority = operator.index(self.priority)
        except TypeError:
            raise InvalidArgument(f"QueueItem.priority must be an integer, got {self.priority!r}") from None
        if not 0 <= priority <= MAX_PRIORITY:
            raise InvalidArgument(f"QueueItem.priority must be in 0..{MAX_PRIORITY}, got {self.priority!r}")
        try:
            cost = float(self.cost)
            enqueued_ok = self.enqueued_at is None or math.isfinite(float(self.enqueued_at))
        except (TypeError, ValueError):
            cost, enqueued_ok = math.nan, False
        if not math.isfinite(cost) or cost <= 0:
            raise InvalidArgument(f"QueueItem.cost must be a positive finite number, got {self.cost!r}")
        if not enqueued_ok:
            raise InvalidArgument(f"QueueItem.enqueued_at must be finite seconds or None, got {self.enqueued_at!r}")
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "cost", cost)

    @property
    def key(self) -> str:
        """Dedupe key ``table|partition|kind``; table and kind hold no '|', so it splits back uniquely."""
        return f"{self.table}|{self.partition}|{self.kind}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "action_id": self.action_id,
                "table": self.table,
                "partition": self.partition,
                "kind": self.kind,
                "priority_class": self.priority_class,
                "priority": self.priority,
                "cost": self.cost,
                "enqueued_at": self.enqueued_at,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, payload: str | bytes) -> QueueItem:
        data = json.loads(payload)
        return cls(**data)


@dataclass(frozen=True)
class Backlog:
    """What the queue holds right now, from one atomic read.

    ``queues`` maps (class, table) to (queued items, cost of the item a dequeue would lease); ``in_flight``
    maps a table to its leased items; ``leased`` is the total number of leases; ``busy`` holds the
    (class, table) queues a dequeue would refuse because each item it may lease is of a partition that
    already has a lease (two actions never run on one partition at once).
    """

    queues: dict[tuple[str, str], tuple[int, float]]
    in_flight: dict[str, int]
    leased: int
    busy: frozenset[tuple[str, str]] = frozenset()

    def counts(self) -> dict[str, dict[str, int]]:
        """Queued items per class, then per table."""
        out: dict[str, dict[str, int]] = {}
        for (cls, table), (count, _) in sorted(self.queues.items()):
            out.setdefault(cls, {})[table] = count
        return out


@dataclass(frozen=True)
class RebuildResult:
    added: int
    removed: int

