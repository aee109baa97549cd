"""What a partition is expected to hold (``domain.policy.expected_partition_bytes``), and the simulator's use of
it: the full partitions' median when any hold a target's bytes, else every partition's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.policy import PolicyTuning, expected_partition_bytes, plan_partition
from autooptimize.domain.simulate import Write, expected_bytes, simulate_policy

T = 8 << 20


def test_the_full_partitions_set_it_when_any_hold_a_target():
    # three hours only late data reached and two full hours: the full ones say what an hour grows to
    assert expected_partition_bytes([T // 30, T // 9, T // 4, 3 * T, 2 * T], T) == (3 * T + 2 * T) // 2
    assert expected_partition_bytes([T // 30, T // 9, T // 4, 3 * T], T) == 3 * T
    # none is full: the median of all, as before
    assert expected_partition_bytes([T // 30, T // 9, T // 4], T) == T // 9
    assert expected_partition_bytes([10, 20], T) == 15
    assert expected_partition_bytes([], T) is None


@given(st.lists(st.integers(0, 4 * T), max_size=12), st.integers(1, 4 * T))
def test_it_is_the_median_of_the_full_ones_or_of_all(others, target):
    got = expected_partition_bytes(others, target)
    pool = sorted(b for b in others if b >= target) or sorted(others)
    if not pool:
        assert got is None
        return
    assert min(pool) <= got <= max(pool)
    assert sum(b < got for b in pool) <= len(pool) // 2 and sum(b > got for b in pool) <= len(pool) // 2


def test_the_simulator_takes_each_partitions_others():
    received = {1: T // 10, 2: T // 5, 3: 2 * T, 4: 3 * T}
    assert expected_bytes(received, 1, T) == (2 * T + 3 * T) // 2
    assert expected_bytes(received, 4, T) == 2 * T
    assert expected_bytes({1: T // 10}, 1, T) is None


def test_a_late_only_hour_beside_a_full_hour_follows_the_priced_rule():
    """Hour 1 fills a target first; then hour 2 is written while hour 0 gets only late trickles. Judged
    beside a full hour, hour 0 is expected to hold what it holds, so it follows the priced rule behind the
    newest (a pair of similar files merges) rather than the tiers (four trickles at a time)."""
    writes, at = [], 0.0
    for hour, late in ((1, ()), (2, ((0, T // 200),))):
        for _ in range(20):
            at += 0.6
            writes.append(Write(at, ((hour, T // 16), *late)))
    seen: list[tuple[int | None, str]] = []

    def watch(state):  # the simulator's planner hook: note hour 0's expected bytes and rule, plan as usual
        if state.partition == 0 and not state.cold:
            plan = plan_partition(state.files, T, state.tuning.tolerance, cold=False, received_bytes=state.received_bytes,
                                  expected_bytes=state.expected_bytes, newest=state.newest,
                                  price=state.tuning.price)
            seen.append((state.expected_bytes, plan.rule))
        return None

    simulate_policy(writes, PolicyTuning(T), latency=0.5, planner=watch)
    assert seen and all(expected is not None and expected >= T for expected, _ in seen), seen
    assert {rule for _, rule in seen} <= {"priced", "priced_wait", "below_excess"}, seen
    assert any(rule == "priced" for _, rule in seen), seen
