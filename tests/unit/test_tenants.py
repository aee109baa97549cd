"""Tenants: the settings (AO_TENANT_WEIGHTS, AO_FAIRNESS, AO_URGENT_CLASSES, AO_TENANT_MAX_CONCURRENT), the
``tenant`` tuning field, and the dispatcher's wiring (class -> tenant -> table, caps, urgent first) driven
over an in-memory fake of the reliable priority queue (our own interface; Redis is tested in integration)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from autooptimize.config import Settings, load_settings
from autooptimize.domain.fairness import TenantCaps, default_tenant, parse_tenant_caps, parse_tenant_weights
from autooptimize.errors import ConfigError, InvalidArgument
from autooptimize.services.tracking import validate_tuning
from scheduler.dispatcher import Dispatcher, build_scheduler
from scheduler.tenants import Tenancy
from tasks.rpq import Backlog, Lease, QueueItem

WEIGHTS = {"a": 1, "b": 2, "c": 5}


class FakeQueue:
    """The parts of ReliablePriorityQueue the Dispatcher uses: FIFO queues per (class, table), leases
    counted per table and in total, the same refusals as the Lua dequeue."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str], list[QueueItem]] = {}
        self.leases: dict[str, Lease] = {}
        self._ids = itertools.count()

    def put(self, cls: str, table: str, n: int = 1) -> None:
        for _ in range(n):
            i = next(self._ids)
            self.queues.setdefault((cls, table), []).append(QueueItem(f"a{i}", table, f"p{i}", "merge", cls))

    def snapshot(self) -> Backlog:
        in_flight = Counter(lease.item.table for lease in self.leases.values())
        return Backlog({k: (len(v), 1.0) for k, v in self.queues.items() if v}, dict(in_flight), len(self.leases))

    def dequeue(self, cls: str, table: str, *, per_table_limit: int = 0, slots: int = 0) -> Lease | None:
        items = self.queues.get((cls, table))
        backlog = self.snapshot()
        if not items or (slots and backlog.leased >= slots) or (
                per_table_limit and backlog.in_flight.get(table, 0) >= per_table_limit):
            return None
        item = items.pop(0)
        lease = Lease(item, item.action_id, 0.0, 1)
        self.leases[item.action_id] = lease
        return lease

    def ack(self, lease: Lease) -> None:
        del self.leases[lease.item.action_id]

    def nack(self, lease: Lease) -> None:
        self.ack(lease)
        self.queues.setdefault((lease.item.priority_class, lease.item.table), []).insert(0, lease.item)

    def reclaim_expired(self) -> int:
        return 0


def _settings(**env: str) -> Settings:
    return Settings(**{k: v for k, v in env.items()})


def _dispatcher(settings: Settings, queue: FakeQueue, tenancy: Tenancy, slots: int = 4) -> tuple[Dispatcher, list]:
    sent: list[Lease] = []
    recorded: list[tuple[str, str]] = []

    def record(tenant: str, lease: Lease, pick: object, backlog: Backlog, read_at: float) -> None:
        recorded.append((tenant, lease.item.priority_class))

    scheduler = build_scheduler(settings, tenant_of=tenancy.tenant)
    return Dispatcher(queue, scheduler, sent.append, slots=slots, tenancy=tenancy,  # type: ignore[arg-type]
                      tenant_caps=settings.tenant_caps, record=record), recorded


def _saturate(queue: FakeQueue, tables_per_tenant: int = 6, depth: int = 400) -> None:
    for tenant in WEIGHTS:
        for t in range(tables_per_tenant):
            queue.put("normal", f"{tenant}.t{t}", depth)


def _run(dispatcher: Dispatcher, queue: FakeQueue, finishes: int, order: str = "oldest") -> None:
    """Each step finishes one running action (the oldest, or the newest) and lets the dispatcher refill."""
    dispatcher.run_once()
    for _ in range(finishes):
        running = list(queue.leases.values())
        queue.ack(running[0] if order == "oldest" else running[-1])
        dispatcher.run_once()


# settings


def test_tenant_settings_parse_and_default() -> None:
    s = _settings(tenant_weights="a=1,b=2,c=5", priority_classes="urgent,normal", urgent_classes="urgent",
                  fairness="wrr", tenant_max_concurrent="4,a=2")
    assert s.tenant_weight_map == {"a": 1.0, "b": 2.0, "c": 5.0}
    assert s.urgent_classes == ("urgent",) and s.fairness == "wrr"
    assert s.tenant_caps == TenantCaps(4, {"a": 2}) and s.tenant_caps.cap("a") == 2 and s.tenant_caps.cap("z") == 4
    plain = _settings()
    assert plain.fairness == "dwrr" and plain.urgent_classes == () and plain.tenant_weight_map == {}
    assert plain.tenant_caps.unlimited and plain.tenant_caps.cap("a") is None


@pytest.mark.parametrize(("var", "value", "said"), [
    ("AO_TENANT_WEIGHTS", "a=1,b=two", "'b=two' is not tenant=weight"),
    ("AO_TENANT_WEIGHTS", "a=1,a=2", "tenant 'a' is given twice"),
    ("AO_TENANT_WEIGHTS", "a=0", "positive weight"),
    ("AO_TENANT_WEIGHTS", "bad name=1", "not a tenant name"),
    ("AO_TENANT_WEIGHTS", "3", "is not tenant=weight"),
    ("AO_FAIRNESS", "fifo", "must be one of dwrr, wrr"),
    ("AO_URGENT_CLASSES", "urgent", "not among AO_PRIORITY_CLASSES (high, normal, low)"),
    ("AO_TENANT_MAX_CONCURRENT", "0", "'0' is not a positive whole number"),
    ("AO_TENANT_MAX_CONCURRENT", "4,a=x", "'a=x' is not a positive whole number"),
    ("AO_TENANT_MAX_CONCURRENT", "4,5", "the default is given twice"),
])
def test_bad_tenant_settings_name_the_variable_and_what_is_valid(monkeypatch, var, value, said) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert var in str(err.value) and said in str(err.value)


def test_parsers_accept_what_they_document() -> None:
    assert parse_tenant_weights("") == {} and parse_tenant_weights(" a = 1 , b-2=2.5 ") == {"a": 1.0, "b-2": 2.5}
    assert parse_tenant_caps("") == TenantCaps() and parse_tenant_caps("a=2,b=3") == TenantCaps(None, {"a": 2, "b": 3})
    assert default_tenant("sales.eu.orders") == "sales" and default_tenant("orders") == "orders"


def test_tenant_tuning_is_validated_and_resets_to_the_namespace() -> None:
    s = _settings()
    assert validate_tuning(s, None, None, tenant="team_a").tenant == "team_a"
    assert validate_tuning(s, None, None).tenant is None
    current = validate_tuning(s, None, None, tenant="team_a")
    assert validate_tuning(s, current, None, tenant="").tenant is None  # back to the namespace's first level
    for bad in ("two words", "-x", "a.b", "x" * 64, 7):
        with pytest.raises(InvalidArgument, match="tenant must be 1-63 letters"):
            validate_tuning(s, None, None, tenant=bad)


# wiring: class -> tenant -> table, caps, urgent


@pytest.mark.parametrize("fairness", ["dwrr", "wrr"])
@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_saturated_tenants_get_their_weighted_shares(fairness, order) -> None:
    # tenant c has 6 tables and a has 6: without the tenant level they would share equally
    s = _settings(tenant_weights="a=1,b=2,c=5", fairness=fairness)
    queue = FakeQueue()
    _saturate(queue)
    dispatcher, recorded = _dispatcher(s, queue, Tenancy())
    _run(dispatcher, queue, finishes=796)
    counts = Counter(tenant for tenant, _ in recorded)
    assert sum(counts.values()) == 800
    for tenant, weight in WEIGHTS.items():
        assert abs(counts[tenant] / 800 - weight / 8) <= 0.05 * weight / 8, counts


def test_tenant_of_a_table_comes_from_the_tenancy_not_only_the_namespace() -> None:
    s = _settings(tenant_weights="gold=3")
    queue = FakeQueue()
    gold = {f"{ns}.t{i}": "gold" for ns in "xy" for i in range(3)}
    for table in [*gold, *(f"z.t{i}" for i in range(6))]:
        queue.put("normal", table, 200)
    # x and y are one tenant (gold, weight 3), z is its own (weight 1)
    dispatcher, recorded = _dispatcher(s, queue, Tenancy(gold))
    _run(dispatcher, queue, finishes=396)
    counts = Counter(tenant for tenant, _ in recorded)
    assert counts == {"gold": 300, "z": 100}


def test_a_tenant_at_its_cap_is_blocked_and_the_others_use_the_slots() -> None:
    s = _settings(tenant_weights="a=1,b=2,c=5", tenant_max_concurrent="c=1")
    queue = FakeQueue()
    _saturate(queue)
    dispatcher, recorded = _dispatcher(s, queue, Tenancy())
    dispatcher.run_once()
    most = 0
    for _ in range(300):
        in_c = sum(1 for lease in queue.leases.values() if lease.item.table.startswith("c."))
        most = max(most, in_c)
        assert len(queue.leases) == 4  # work-conserving: a and b fill what c may not use
        queue.ack(next(iter(queue.leases.values())))
        dispatcher.run_once()
    assert most == 1
    counts = Counter(tenant for tenant, _ in recorded)
    assert counts["c"] < counts["b"] and counts["a"] > 0


def test_urgent_class_takes_the_first_slot_that_frees() -> None:
    s = _settings(priority_classes="urgent,normal", urgent_classes="urgent", tenant_weights="a=1,b=2,c=5")
    queue = FakeQueue()
    _saturate(queue)
    dispatcher, recorded = _dispatcher(s, queue, Tenancy())
    _run(dispatcher, queue, finishes=50)
    first, busy = list(queue.leases.values())[:2]
    queue.put("urgent", busy.item.table, 1)  # its table is running an action: blocked until that ends
    queue.put("urgent", "b.rare", 1)
    assert dispatcher.run_once() == []  # saturated: nothing is stopped to make room
    before = len(recorded)
    queue.ack(first)  # one running action finishes
    assert [lease.item.table for lease in dispatcher.run_once()] == ["b.rare"]
    queue.ack(busy)  # the busy table's action finishes: its urgent item is next, before any other
    assert [(lease.item.table, lease.item.priority_class) for lease in dispatcher.run_once()] == [
        (busy.item.table, "urgent")]
    assert [cls for _, cls in recorded[before:]] == ["urgent", "urgent"]


def test_without_urgent_classes_an_urgent_named_class_only_shares() -> None:
    s = _settings(priority_classes="urgent,normal", priority_weights="urgent=1,normal=1")
    queue = FakeQueue()
    queue.put("normal", "a.t0", 50)
    queue.put("urgent", "b.t0", 50)
    dispatcher, recorded = _dispatcher(s, queue, Tenancy(), slots=1)
    _run(dispatcher, queue, finishes=19)
    assert Counter(cls for _, cls in recorded) == {"urgent": 10, "normal": 10}
