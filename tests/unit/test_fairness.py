from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autooptimize.domain.fairness import (
    DeficitRoundRobin,
    FairScheduler,
    Head,
    PickReason,
    Policy,
    PriorityClass,
    WeightedRoundRobin,
    namespace_of,
)
from autooptimize.errors import InvalidArgument

CLASSES = [PriorityClass("high", 6), PriorityClass("normal", 3), PriorityClass("low", 1)]
WITH_URGENT = [PriorityClass("urgent", 1, urgent=True), *CLASSES]


def saturated_tables(n: int = 50) -> dict[str, str]:
    """Table -> class, spread round robin over high/normal/low."""
    return {f"db.t{i:02d}": CLASSES[i % 3].name for i in range(n)}


def simulate(scheduler: FairScheduler, backlog: dict[tuple[str, str], int], picks: int) -> Counter:
    """Serve ``picks`` items from finite queues (class, table) -> length; returns picks per queue."""
    served: Counter = Counter()
    backlog = dict(backlog)
    for _ in range(picks):
        pick = scheduler.pick(Head(c, t) for (c, t), n in backlog.items() if n > 0)
        if pick is None:
            break
        key = (pick.priority_class, pick.table)
        assert backlog[key] > 0
        backlog[key] -= 1
        served[key] += 1
    return served


# ---- WeightedRoundRobin ----------------------------------------------------------------------------


@settings(deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=8), st.integers(1, 4))
def test_wrr_serves_exact_weights_in_every_aligned_window(weights: list[int], windows: int) -> None:
    keys = {f"k{i}": w for i, w in enumerate(weights)}
    wrr: WeightedRoundRobin[str] = WeightedRoundRobin(keys)
    total = sum(weights)
    for _ in range(windows):
        counts = Counter(wrr.pick(dict.fromkeys(keys, 1.0)) for _ in range(total))
        assert counts == Counter(keys)


def test_wrr_interleaves_rather_than_runs() -> None:
    wrr: WeightedRoundRobin[str] = WeightedRoundRobin({"a": 5, "b": 1, "c": 1})
    order = "".join(str(wrr.pick({"a": 1, "b": 1, "c": 1})) for _ in range(7))
    assert order == "aabacaa"


def test_wrr_peek_does_not_change_state() -> None:
    wrr: WeightedRoundRobin[str] = WeightedRoundRobin({"a": 2, "b": 1})
    costs = {"a": 1.0, "b": 1.0}
    assert [wrr.peek(costs) for _ in range(3)] == ["a", "a", "a"]
    assert [wrr.pick(costs) for _ in range(3)] == ["a", "b", "a"]
    assert wrr.pick({}) is None


# ---- DeficitRoundRobin -----------------------------------------------------------------------------


@settings(deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=8), st.integers(1, 5))
def test_drr_unit_costs_serve_quantum_times_weight_per_round(weights: list[int], rounds: int) -> None:
    keys = {f"k{i}": w for i, w in enumerate(weights)}
    drr: DeficitRoundRobin[str] = DeficitRoundRobin(keys, quantum=2)
    counts = Counter(drr.pick(dict.fromkeys(keys, 1.0)) for _ in range(rounds * 2 * sum(weights)))
    assert counts == Counter({k: rounds * 2 * w for k, w in keys.items()})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=2, max_size=6),
    st.floats(0.5, 20),
    st.lists(st.floats(0.1, 30), min_size=1, max_size=40),
    st.integers(1, 400),
)
def test_drr_cost_shares_stay_within_quantum_and_max_cost(
    weights: list[int], quantum: float, cost_cycle: list[float], picks: int
) -> None:
    """Classic DRR bound: |sent_i/w_i - sent_j/w_j| <= quantum + max_cost/w_i + max_cost/w_j."""
    keys = {f"k{i}": w for i, w in enumerate(weights)}
    drr: DeficitRoundRobin[str] = DeficitRoundRobin(keys, quantum=quantum)
    position = dict.fromkeys(keys, 0)
    sent = dict.fromkeys(keys, 0.0)
    for _ in range(picks):
        heads = {k: cost_cycle[(position[k] + i) % len(cost_cycle)] for i, k in enumerate(keys)}
        key = drr.pick(heads)
        assert key is not None
        sent[key] += heads[key]
        position[key] += 1
    max_cost = max(cost_cycle)
    for a in keys:
        for b in keys:
            bound = quantum + max_cost / keys[a] + max_cost / keys[b]
            assert sent[a] / keys[a] - sent[b] / keys[b] <= bound + 1e-6


def test_drr_costs_far_above_quantum_still_progress() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin({"a": 1, "b": 3}, quantum=1)
    heads = {"a": 1e9, "b": 1e9}
    counts = Counter(drr.pick(heads) for _ in range(400))
    assert counts["b"] == 3 * counts["a"]


def test_drr_blocked_key_keeps_its_place_but_is_passed_over() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin({"a": 1, "b": 1, "c": 1})
    everyone = {"a": 1.0, "b": 1.0, "c": 1.0}
    assert drr.pick(everyone) == "a"
    assert drr.pick({"a": 1, "c": 1}, blocked={"b"}) == "c"
    assert drr.pick(everyone) == "a"  # b kept its place: the ring is still a, b, c
    assert drr.pick(everyone) == "b"
    assert drr.pick({}, blocked={"a", "b", "c"}) is None
    assert drr.pick(everyone) == "c"


def test_drr_key_blocked_at_its_turn_does_not_bank_credit() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin({"a": 3, "b": 1})
    assert drr.pick({"a": 1, "b": 1}) == "a"
    for _ in range(10):  # a is blocked after one item of each turn
        assert drr.pick({"b": 1}, blocked={"a"}) == "b"
        assert drr.pick({"a": 1, "b": 1}) == "a"
    assert [drr.pick({"a": 1, "b": 1}) for _ in range(4)] == ["a", "a", "b", "a"]


def test_wrr_blocked_key_keeps_its_credit() -> None:
    wrr: WeightedRoundRobin[str] = WeightedRoundRobin({"a": 1, "b": 1})
    assert wrr.pick({"a": 1, "b": 1}) == "a"
    assert wrr.pick({"a": 1}, blocked={"b"}) == "a"
    assert [wrr.pick({"a": 1, "b": 1}) for _ in range(2)] == ["b", "a"]  # b kept the credit it had


def test_drr_returning_key_loses_credit_and_joins_tail() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin({"a": 1, "b": 1, "c": 1})
    assert drr.pick({"a": 1, "b": 1, "c": 1}) == "a"
    assert drr.pick({"b": 1, "c": 1}) == "b"
    assert drr.pick({"a": 1, "b": 1, "c": 1}) == "c"  # a came back behind c
    assert drr.pick({"a": 1, "b": 1, "c": 1}) == "a"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "x"])
def test_invalid_quantum_weight_and_cost_are_named(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="quantum"):
        DeficitRoundRobin(quantum=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="weight of 'a'"):
        DeficitRoundRobin({"a": bad})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgument, match="cost of 'a'"):
        DeficitRoundRobin[str]().pick({"a": bad})  # type: ignore[dict-item]


# ---- FairScheduler: shares -------------------------------------------------------------------------


def share_errors(
    scheduler: FairScheduler, tables: dict[str, str], served: Counter, total: int
) -> tuple[float, float]:
    by_class: Counter[str] = Counter()
    for (cls, _), n in served.items():
        by_class[cls] += n
    weight_sum = sum(c.weight for c in scheduler.classes if not c.urgent)
    class_err = max(abs(by_class[c.name] / (total * c.weight / weight_sum) - 1) for c in scheduler.classes)
    table_err = 0.0
    for cls in by_class:
        members = [t for t, c in tables.items() if c == cls]
        wsum = sum(scheduler.table_weight(t) for t in members)
        for t in members:
            expected = by_class[cls] * scheduler.table_weight(t) / wsum
            table_err = max(table_err, abs(served[(cls, t)] / expected - 1))
    return class_err, table_err


@pytest.mark.parametrize("policy", list(Policy))
def test_saturation_6_3_1_with_50_tables_is_within_5_percent(policy: Policy) -> None:
    tables = saturated_tables()
    weights = {t: 2.0 for i, t in enumerate(tables) if i % 5 == 0}
    scheduler = FairScheduler(CLASSES, class_policy=policy, table_policy=policy, table_weights=weights)
    served = simulate(scheduler, {(c, t): 10_000 for t, c in tables.items()}, 10_000)
    class_err, table_err = share_errors(scheduler, tables, served, 10_000)
    assert class_err <= 0.05
    assert table_err <= 0.05
    # tables of equal weight in a class get equal shares
    for cls in ("high", "normal", "low"):
        for weight in (1.0, 2.0):
            counts = [served[(cls, t)] for t, c in tables.items() if c == cls and scheduler.table_weight(t) == weight]
            mean = sum(counts) / len(counts)
            assert max(abs(n / mean - 1) for n in counts) <= 0.05


@pytest.mark.parametrize("per_table", [2, 3])
def test_saturation_shares_hold_under_actor_capacity_limits(per_table: int) -> None:
    """8 actor slots finishing in start order, at most per_table actions per table: blocked tables keep their place."""
    tables = saturated_tables()
    weights = {t: 2.0 for i, t in enumerate(tables) if i % 5 == 0}
    scheduler = FairScheduler(CLASSES, table_weights=weights, max_wait=300)
    running: list[str] = []
    served: Counter = Counter()
    for _ in range(10_000):
        if len(running) == 8:
            running.pop(0)
        in_flight = Counter(running)
        pick = scheduler.pick(Head(c, t, blocked=in_flight[t] >= per_table) for t, c in tables.items())
        assert pick is not None and pick.reason is PickReason.FAIR
        assert in_flight[pick.table] < per_table
        served[(pick.priority_class, pick.table)] += 1
        running.append(pick.table)
    class_err, table_err = share_errors(scheduler, tables, served, 10_000)
    assert class_err <= 0.05 and table_err <= 0.05


def test_blocked_queues_are_not_picked_and_do_not_age() -> None:
    scheduler = FairScheduler(WITH_URGENT, max_wait=2)
    assert scheduler.pick([Head("urgent", "db.u", blocked=True), Head("low", "db.a", blocked=True)]) is None
    for _ in range(5):
        pick = scheduler.pick([Head("urgent", "db.u"), Head("low", "db.a", blocked=True), Head("high", "db.b")])
        assert pick is not None and pick.table != "db.a"
    # db.a was blocked all along, so it has not been waiting: it does not jump ahead once unblocked
    assert scheduler.pick([Head("urgent", "db.u"), Head("low", "db.a")]).table == "db.u"  # type: ignore[union-attr]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=4),
    st.lists(st.integers(1, 6), min_size=1, max_size=12),
    st.integers(1, 12),
)
def test_class_and_table_shares_converge_to_weights(
    class_weights: list[int], table_weights: list[int], rounds: int
) -> None:
    """After whole rounds of DRR with unit costs every queue got exactly its weighted share."""
    classes = [PriorityClass(f"c{i}", w) for i, w in enumerate(class_weights)]
    tables = {f"t{j}": classes[j % len(classes)].name for j in range(len(table_weights))}
    tw = {f"t{j}": w for j, w in enumerate(table_weights)}
    scheduler = FairScheduler(classes, table_weights=tw)
    # one class round = sum of class weights picks; give each class enough rounds for its table round
    active = {tables[t] for t in tables}
    table_round = {c: sum(tw[t] for t in tables if tables[t] == c) for c in active}
    lcm = 1
    for c in active:
        w = next(x.weight for x in classes if x.name == c)
        lcm = math.lcm(lcm, table_round[c] // math.gcd(table_round[c], int(w)))
    total_weight = sum(int(c.weight) for c in classes if c.name in active)
    picks = rounds * lcm * total_weight
    assume(picks <= 20_000)
    served = simulate(scheduler, {(c, t): picks for t, c in tables.items()}, picks)
    for t, c in tables.items():
        w_c = next(x.weight for x in classes if x.name == c)
        expected = picks * w_c / total_weight * tw[t] / table_round[c]
        assert served[(c, t)] == pytest.approx(expected)


def test_byte_costs_share_bytes_by_weight() -> None:
    scheduler = FairScheduler(CLASSES, quantum=64)
    sizes = {"high": 100.0, "normal": 10.0, "low": 1.0}  # very different item sizes per class
    served_bytes = dict.fromkeys(sizes, 0.0)
    for _ in range(20_000):
        pick = scheduler.pick(Head(c, "db.t", sizes[c]) for c in sizes)
        assert pick is not None
        served_bytes[pick.priority_class] += sizes[pick.priority_class]
    total = sum(served_bytes.values())
    for cls in CLASSES:
        assert served_bytes[cls.name] / total == pytest.approx(cls.weight / 10, rel=0.05)


def test_tenants_share_a_class_before_their_tables() -> None:
    scheduler = FairScheduler([PriorityClass("normal")], tenant_of=namespace_of, tenant_weights={"big": 1, "small": 1})
    backlog = {("normal", f"big.t{i}"): 10_000 for i in range(9)} | {("normal", "small.only"): 10_000}
    served = simulate(scheduler, backlog, 1800)
    assert served[("normal", "small.only")] == 900
    assert all(served[("normal", f"big.t{i}")] == 100 for i in range(9))


# ---- urgent, aging, bursts -------------------------------------------------------------------------


def test_urgent_class_preempts_while_it_has_work() -> None:
    scheduler = FairScheduler(WITH_URGENT)
    backlog = {("urgent", "db.u"): 5, ("high", "db.a"): 100, ("low", "db.b"): 100}
    served = [scheduler.pick(Head(c, t) for (c, t), n in backlog.items() if n > 0) for _ in range(5)]
    assert all(p is not None and p.reason is PickReason.URGENT and p.table == "db.u" for p in served)


@pytest.mark.parametrize("cls, bound", [("high", 40), ("normal", 70), ("low", 180)])
def test_burst_for_one_table_delays_another_tables_first_item_by_at_most_the_fair_bound(cls: str, bound: int) -> None:
    """50 saturated tables (17/17/16 per class) plus a 5,000-item burst for one table: a newcomer in the
    same class is served within ceil(P / w_class) x 10 dispatches, P = backlogged tables of its class."""
    tables = saturated_tables()
    others = [t for t, c in tables.items() if c == cls] + ["db.burst"]
    worst = 0
    for offset in range(0, 400, 9):  # the newcomer arrives at every point of the rounds
        scheduler = FairScheduler(CLASSES, max_wait=1000)
        backlog = {(c, t): 10_000 for t, c in tables.items()} | {(cls, "db.burst"): 5000}
        simulate(scheduler, backlog, offset)
        backlog[(cls, "db.newcomer")] = 1
        assert scheduler.fair_wait_bound(cls, "db.newcomer", others, ["high", "normal", "low"]) == bound
        delay = 0
        while backlog[(cls, "db.newcomer")]:
            pick = scheduler.pick(Head(c, t) for (c, t), n in backlog.items() if n > 0)
            assert pick is not None and pick.reason is PickReason.FAIR
            backlog[(pick.priority_class, pick.table)] -= 1
            delay += 1
        worst = max(worst, delay)
    assert worst <= bound
    assert worst >= bound * 0.7  # the bound is not loose by much


@settings(max_examples=30, deadline=None)
@given(
    urgent_burst=st.integers(0, 3000),
    tables=st.integers(1, 40),
    max_wait=st.integers(1, 200),
    arrivals=st.lists(st.tuples(st.integers(0, 400), st.sampled_from(["high", "normal", "low"])), max_size=30),
)
def test_no_queue_waits_longer_than_max_wait_plus_queue_count(
    urgent_burst: int, tables: int, max_wait: int, arrivals: list[tuple[int, str]]
) -> None:
    """Aging bounds every wait, even under an urgent flood that would starve everyone else."""
    scheduler = FairScheduler(WITH_URGENT, max_wait=max_wait)
    backlog = {(CLASSES[i % 3].name, f"db.t{i}"): 50 for i in range(tables)}
    backlog[("urgent", "db.flood")] = urgent_burst
    arrivals_at: dict[int, list[tuple[str, str]]] = {}
    for i, (at, cls) in enumerate(arrivals):
        arrivals_at.setdefault(at, []).append((cls, f"db.late{i}"))
        backlog[(cls, f"db.late{i}")] = 0
    queues = len(backlog)
    waiting_since: dict[tuple[str, str], int] = {}
    for step in range(1500):
        for key in arrivals_at.get(step, []):
            backlog[key] += 3
        for key, n in backlog.items():
            if n > 0:
                waiting_since.setdefault(key, step)
        pick = scheduler.pick(Head(c, t) for (c, t), n in backlog.items() if n > 0)
        if pick is None:
            continue
        key = (pick.priority_class, pick.table)
        assert step - waiting_since[key] + 1 <= scheduler.aged_wait_bound(queues)
        backlog[key] -= 1
        del waiting_since[key]
        for other, since in waiting_since.items():
            assert step - since + 1 <= scheduler.aged_wait_bound(queues), other


def test_aged_picks_go_oldest_first_and_use_the_injected_clock() -> None:
    now = [0.0]
    scheduler = FairScheduler(WITH_URGENT, max_wait=60, clock=lambda: now[0])
    flood = Head("urgent", "db.flood")
    assert scheduler.pick([flood, Head("low", "db.a")]).reason is PickReason.URGENT  # type: ignore[union-attr]
    now[0] = 30
    assert scheduler.pick([flood, Head("low", "db.a"), Head("high", "db.b")]).reason is PickReason.URGENT  # type: ignore[union-attr]
    now[0] = 95
    first = scheduler.pick([flood, Head("low", "db.a"), Head("high", "db.b")])
    second = scheduler.pick([flood, Head("low", "db.a"), Head("high", "db.b")])
    third = scheduler.pick([flood, Head("low", "db.a"), Head("high", "db.b")])
    fourth = scheduler.pick([flood, Head("low", "db.a"), Head("high", "db.b")])
    # a waited since 0; the flood (last served at 30) and b (first seen at 30) tie: class order decides
    assert [(p.table, p.reason) for p in (first, second, third)] == [  # type: ignore[union-attr]
        ("db.a", PickReason.AGED), ("db.flood", PickReason.AGED), ("db.b", PickReason.AGED)
    ]
    assert fourth.reason is PickReason.URGENT  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match="dispatches"):
        scheduler.aged_wait_bound(10)


def test_aging_does_not_fire_under_saturation_when_max_wait_exceeds_the_fair_bound() -> None:
    tables = saturated_tables()
    scheduler = FairScheduler(CLASSES, max_wait=300)
    backlog = {(c, t): 10_000 for t, c in tables.items()}
    reasons: Counter[PickReason] = Counter()
    for _ in range(5000):
        pick = scheduler.pick(Head(c, t) for (c, t) in backlog)
        assert pick is not None
        reasons[pick.reason] += 1
    assert reasons == Counter({PickReason.FAIR: 5000})


# ---- validation ------------------------------------------------------------------------------------


def test_bad_configuration_and_heads_are_named() -> None:
    with pytest.raises(InvalidArgument, match="at least one"):
        FairScheduler([])
    with pytest.raises(InvalidArgument, match="given twice"):
        FairScheduler([PriorityClass("a"), PriorityClass("a")])
    with pytest.raises(InvalidArgument, match="weight of class 'a'"):
        PriorityClass("a", 0)
    with pytest.raises(InvalidArgument, match="'\\|'"):
        PriorityClass("a|b")
    with pytest.raises(InvalidArgument, match="policy"):
        FairScheduler(CLASSES, class_policy="fifo")
    scheduler = FairScheduler(CLASSES)
    with pytest.raises(InvalidArgument, match="unknown priority class 'nope'"):
        scheduler.pick([Head("nope", "db.t")])
    with pytest.raises(InvalidArgument, match="offered twice"):
        scheduler.pick([Head("low", "db.t"), Head("low", "db.t")])
    with pytest.raises(InvalidArgument, match="weight of table 'db.t'"):
        scheduler.set_table_weights({"db.t": -1})
    assert scheduler.pick([]) is None
    assert scheduler.dispatched == 0
