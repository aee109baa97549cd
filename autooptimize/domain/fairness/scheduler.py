"""The fair scheduler: which (priority class, table) queue is served next (see the package doc)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from autooptimize.domain.checks import is_positive_number, positive_number
from autooptimize.domain.fairness.selectors import Policy, Selector, selector_for
from autooptimize.errors import InvalidArgument

__all__ = ["FairScheduler", "Head", "Pick", "PickReason", "PriorityClass", "namespace_of"]


class PickReason(StrEnum):
    """Why a queue was picked."""

    AGED = "aged"
    URGENT = "urgent"
    FAIR = "fair"


def namespace_of(table: str) -> str:
    """Tenant of a table identifier: its namespace (``"sales.eu.orders"`` -> ``"sales.eu"``)."""
    return table.rpartition(".")[0]


@dataclass(frozen=True)
class PriorityClass:
    """A priority class: ``weight`` is its share among non-urgent classes; ``urgent`` ones preempt."""

    name: str
    weight: float = 1.0
    urgent: bool = False

    def __post_init__(self) -> None:
        if not self.name or "|" in self.name:
            raise InvalidArgument(f"priority class name must be non-empty and contain no '|', got {self.name!r}")
        object.__setattr__(self, "weight", positive_number(f"weight of class {self.name!r}", self.weight))


@dataclass(frozen=True)
class Head:
    """The next item of one non-empty (priority class, table) queue.

    ``blocked`` marks a queue that cannot be served now (its table is at its concurrency limit): it is
    not picked, keeps its place in the rounds, and does not count as waiting for aging.
    """

    priority_class: str
    table: str
    cost: float = 1.0
    blocked: bool = False


@dataclass(frozen=True)
class Pick:
    """The queue to serve next, and why."""

    priority_class: str
    table: str
    reason: PickReason


class FairScheduler:
    """Two-level (three with tenants) weighted fair scheduler with urgent preemption and aging.

    Not thread-safe; one dispatcher owns one scheduler. State (credits, waiting times) lives in memory:
    a restarted dispatcher starts fresh, which costs at most one round of accuracy.
    """

    def __init__(
        self,
        classes: Sequence[PriorityClass],
        *,
        class_policy: Policy | str = Policy.DWRR,
        table_policy: Policy | str = Policy.DWRR,
        quantum: float = 1.0,
        table_weights: Mapping[str, float] | None = None,
        tenant_of: Callable[[str], str] | None = None,
        tenant_weights: Mapping[str, float] | None = None,
        max_wait: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Create a scheduler.

        ``quantum`` is the credit per unit of weight per turn, in the unit of ``Head.cost`` (1 for
        counting items; e.g. 512 MiB when costs are bytes). ``tenant_of`` maps a table to its tenant
        (e.g. :func:`namespace_of`); when given, tenants share a class by ``tenant_weights`` and tables
        share their tenant. ``max_wait`` is in the unit of ``clock``, or in dispatches when ``clock`` is
        None; set it above :meth:`fair_wait_bound` so that aging only fires when fairness alone would
        not (urgent floods, costs far above the quantum), otherwise it turns sharing into FIFO.
        """
        if not classes:
            raise InvalidArgument("classes must name at least one PriorityClass")
        self._classes: dict[str, PriorityClass] = {}
        for cls in classes:
            if not isinstance(cls, PriorityClass):
                raise InvalidArgument(f"classes must be PriorityClass values, got {cls!r}")
            if cls.name in self._classes:
                raise InvalidArgument(f"priority class {cls.name!r} is given twice")
            self._classes[cls.name] = cls
        try:
            self._class_policy = Policy(class_policy)
            self._table_policy = Policy(table_policy)
        except ValueError:
            raise InvalidArgument(
                f"policy must be one of {[p.value for p in Policy]}, got {class_policy!r}/{table_policy!r}"
            ) from None
        self._quantum = positive_number("quantum", quantum)
        self._max_wait = None if max_wait is None else positive_number("max_wait", max_wait)
        self._clock = clock
        self._rank = {name: i for i, name in enumerate(self._classes)}
        self._urgent = [c.name for c in classes if c.urgent]
        self._table_weights: dict[str, float] = {}
        self.set_table_weights(table_weights or {})
        self._tenant_of = tenant_of
        self._tenant_weights = {t: positive_number(f"weight of tenant {t!r}", w) for t, w in (tenant_weights or {}).items()}
        self._class_selector = selector_for(self._class_policy, lambda c: self._classes[c].weight, self._quantum)
        self._tenant_selectors: dict[str, Selector[str]] = {}
        self._table_selectors: dict[tuple[str, str], Selector[str]] = {}
        self._since: dict[tuple[str, str], float] = {}
        self._dispatched = 0

    @property
    def classes(self) -> tuple[PriorityClass, ...]:
        return tuple(self._classes.values())

    @property
    def dispatched(self) -> int:
        """Number of picks made so far."""
        return self._dispatched

    @property
    def max_wait(self) -> float | None:
        return self._max_wait

    def now(self) -> float:
        """Current time on the scheduler's clock (dispatches made, when no clock was given)."""
        return float(self._dispatched) if self._clock is None else float(self._clock())

    def set_table_weights(self, weights: Mapping[str, float]) -> None:
        """Replace table weights (tables not named weigh 1); takes effect from the next turn."""
        self._table_weights = {t: positive_number(f"weight of table {t!r}", w) for t, w in weights.items()}

    def table_weight(self, table: str) -> float:
        return self._table_weights.get(table, 1.0)

    def pick(self, heads: Iterable[Head]) -> Pick | None:
        """Choose the queue to serve among the unblocked ``heads`` and account for it.

        Returns None when no head is unblocked. The caller should then dequeue from the picked queue; a
        pick that could not be served only costs that queue its turn. Queues absent from ``heads`` are
        idle: they lose their credit and their place, and their waiting time restarts.
        """
        now = self.now()
        by_class: dict[str, dict[str, float]] = {}
        blocked: dict[str, set[str]] = {}
        since: dict[tuple[str, str], float] = {}
        previous = self._since
        for head in heads:
            cls, table, cost = head.priority_class, head.table, head.cost
            if cls not in by_class:
                if cls not in self._classes:
                    raise InvalidArgument(f"unknown priority class {cls!r}; known: {list(self._classes)}")
                by_class[cls] = {}
                blocked[cls] = set()
            key = (cls, table)
            if key in since:
                raise InvalidArgument(f"queue {key!r} is offered twice in one pick")
            if not is_positive_number(cost):
                raise InvalidArgument(f"cost of {key!r} must be a positive finite number, got {cost!r}")
            if head.blocked:
                blocked[cls].add(table)
                since[key] = now  # a queue with work in flight is not starving
            else:
                by_class[cls][table] = cost
                since[key] = previous.get(key, now)
        self._since = since
        eligible = {cls: tables for cls, tables in by_class.items() if tables}
        if not eligible:
            return None
        if self._max_wait is not None:
            overdue = [(t, key) for key, t in since.items() if now - t >= self._max_wait and key[1] in by_class[key[0]]]
            if overdue:
                _, key = min(overdue, key=lambda o: (o[0], self._rank[o[1][0]], o[1][1]))
                return self._served(key, PickReason.AGED, now)
        for cls in self._urgent:
            if cls in eligible:
                table, _ = self._choose_in_class(cls, eligible[cls], blocked[cls], commit=True)
                return self._served((cls, table), PickReason.URGENT, now)
        class_costs = {
            cls: self._choose_in_class(cls, tables, blocked[cls], commit=False)[1]
            for cls, tables in eligible.items()
            if not self._classes[cls].urgent
        }
        class_blocked = {cls for cls, tables in by_class.items() if not tables and not self._classes[cls].urgent}
        chosen = self._class_selector.pick(class_costs, class_blocked)
        assert chosen is not None  # some class is eligible and none of the eligible ones is urgent
        table, _ = self._choose_in_class(chosen, eligible[chosen], blocked[chosen], commit=True)
        return self._served((chosen, table), PickReason.FAIR, now)

    def _served(self, key: tuple[str, str], reason: PickReason, now: float) -> Pick:
        self._dispatched += 1
        self._since[key] = now
        return Pick(key[0], key[1], reason)

    def _tables(self, cls: str, tenant: str) -> Selector[str]:
        selector = self._table_selectors.get((cls, tenant))
        if selector is None:
            selector = selector_for(self._table_policy, self.table_weight, self._quantum)
            self._table_selectors[(cls, tenant)] = selector
        return selector

    def _choose_in_class(
        self, cls: str, tables: Mapping[str, float], blocked: set[str], *, commit: bool
    ) -> tuple[str, float]:
        """(table, cost of its head) the class would serve next; state changes only when ``commit``."""
        if self._tenant_of is None:
            selector = self._tables(cls, "")
            table = selector.pick(tables, blocked) if commit else selector.peek(tables, blocked)
            assert table is not None
            return table, tables[table]
        groups: dict[str, dict[str, float]] = {}
        blocked_groups: dict[str, set[str]] = {}
        for table, cost in tables.items():
            groups.setdefault(self._tenant_of(table), {})[table] = cost
        for table in blocked:
            blocked_groups.setdefault(self._tenant_of(table), set()).add(table)
        candidates: dict[str, tuple[str, float]] = {}
        for tenant, members in groups.items():
            table = self._tables(cls, tenant).peek(members, blocked_groups.get(tenant, set()))
            assert table is not None
            candidates[tenant] = (table, members[table])
        tenants = self._tenant_selectors.get(cls)
        if tenants is None:
            tenants = selector_for(self._table_policy, lambda t: self._tenant_weights.get(t, 1.0), self._quantum)
            self._tenant_selectors[cls] = tenants
        tenant_costs = {tenant: cost for tenant, (_, cost) in candidates.items()}
        tenant_blocked = set(blocked_groups) - set(groups)
        if commit:
            chosen = tenants.pick(tenant_costs, tenant_blocked)
        else:
            chosen = tenants.peek(tenant_costs, tenant_blocked)
        assert chosen is not None
        if commit:
            self._tables(cls, chosen).pick(groups[chosen], blocked_groups.get(chosen, set()))
        return candidates[chosen]

    def fair_wait_bound(
        self, priority_class: str, table: str, other_tables: Iterable[str], backlogged_classes: Iterable[str]
    ) -> int:
        """Most dispatches until ``table``'s first item in ``priority_class`` is served, counting its own.

        Holds for a queue that becomes backlogged while ``other_tables`` (same class) and
        ``backlogged_classes`` stay backlogged, with unit costs, DRR at both levels, no tenant level,
        no urgent class backlogged and no aging pick in between. The length of each other queue does not
        matter. The bound: the class needs ``P = Σ ceil(q_t)`` picks over its tables (``q_t`` = quantum x
        table weight, times ``ceil(1/q_table)`` when the new table's own quantum is below one item) and
        gets at least ``floor(r x q_c)`` picks in ``r`` class rounds, each round lasting at most
        ``R = Σ ceil(q_c)`` dispatches; so the wait is at most ``ceil(P / q_c) x R``.
        """
        if self._class_policy is not Policy.DWRR or self._table_policy is not Policy.DWRR:
            raise InvalidArgument("fair_wait_bound is stated for class_policy=table_policy='dwrr'")
        if self._tenant_of is not None:
            raise InvalidArgument("fair_wait_bound is stated for schedulers without a tenant level")
        if priority_class not in self._classes or self._classes[priority_class].urgent:
            raise InvalidArgument(f"priority_class must be a non-urgent class, got {priority_class!r}")
        table_quanta = [self._quantum * self.table_weight(t) for t in set(other_tables) - {table}]
        own = self._quantum * self.table_weight(table)
        picks = (sum(math.ceil(q) for q in table_quanta) + math.ceil(own)) * math.ceil(1 / own)
        classes = set(backlogged_classes) | {priority_class}
        unknown = classes - set(self._classes)
        if unknown:
            raise InvalidArgument(f"unknown priority classes {sorted(unknown)}; known: {list(self._classes)}")
        round_length = sum(math.ceil(self._quantum * self._classes[c].weight) for c in classes if not self._classes[c].urgent)
        class_quantum = self._quantum * self._classes[priority_class].weight
        return math.ceil(picks / class_quantum) * round_length

    def aged_wait_bound(self, queues: int) -> float:
        """Most time (dispatches when no clock) until an eligible queue is served: ``max_wait + queues``.

        ``queues`` is the number of distinct (class, table) queues that may be offered meanwhile.
        Holds whatever the classes, weights and costs, including a flood in an urgent class: once a
        queue has waited ``max_wait`` only queues that started waiting earlier are served before it,
        each once. In dispatch units only; with a clock the bound also depends on the dispatch rate.
        """
        if self._max_wait is None:
            raise InvalidArgument("aged_wait_bound needs max_wait to be set")
        if self._clock is not None:
            raise InvalidArgument("aged_wait_bound is stated in dispatches: build the scheduler without a clock")
        return self._max_wait + queues
