"""simulate_policy's ``start_delay``: a merge plans on the files present when it starts, as the service's
action does, not on those present when it lands."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autooptimize.domain.planning import Plan
from autooptimize.domain.planning.essential import MeasuredFiles
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import PartitionState, Write, simulate_policy

TARGET = 1000
TUNING = PolicyTuning(TARGET, cold_after_seconds=60.0)


def merge_everything(state: PartitionState) -> tuple[Plan, str] | None:
    """A planner that merges every file of a partition written to once it holds two or more."""
    if state.cold:
        return None
    m = MeasuredFiles.checked(state.files, state.tuning.target, state.tuning.tolerance)
    return m.plan([list(range(len(m.files)))] if len(m.files) >= 2 else []), "everything"


# a file at 0 and at 0.1 s (the merge is decided at 0.1 s), one more at 0.5 s while it runs
WRITES = [Write(0.0, ((1, 100),)), Write(0.1, ((1, 100),)), Write(0.5, ((1, 100),))]


def test_a_merge_planned_as_it_lands_takes_in_the_file_written_while_it_ran():
    fig = simulate_policy(WRITES, TUNING, latency=1.0, planner=merge_everything)
    assert (fig.actions, fig.files_replaced, fig.bytes_rewritten, fig.end_files) == (1, 3, 300, 1)


def test_a_merge_planned_when_it_starts_leaves_that_file_to_the_next_merge():
    fig = simulate_policy(WRITES, TUNING, latency=1.0, planner=merge_everything, start_delay=0.0)
    # 0.1 s: A+B planned, landing at 1.1 s; then AB + C merge (planned at 1.1 s, landing at 2.1 s)
    assert (fig.actions, fig.files_replaced, fig.bytes_rewritten, fig.end_files) == (2, 4, 500, 1)
    # with the start after the third write, the first merge takes it in again
    late = simulate_policy(WRITES, TUNING, latency=1.0, planner=merge_everything, start_delay=0.5)
    assert (late.actions, late.bytes_rewritten) == (1, 300)


def test_the_files_counted_while_a_merge_runs_follow_its_start():
    now = simulate_policy(WRITES, TUNING, latency=1.0, planner=merge_everything)
    early = simulate_policy(WRITES, TUNING, latency=1.0, planner=merge_everything, start_delay=0.0)
    # both land at 1.1 s, after the last write: the files counted after each write are the same
    assert now.mean_live_files == early.mean_live_files == 2.0


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 2), st.integers(1, 900)), min_size=1, max_size=40),
       st.sampled_from([0, 12]))
def test_starting_as_it_lands_is_planning_as_it_lands(raw, price):
    at, writes = 0.0, []
    for gap, part, size in raw:
        at += gap
        writes.append(Write(at, ((part, size),)))
    tuning = PolicyTuning(TARGET, cold_after_seconds=5.0, price=price)
    assert simulate_policy(writes, tuning, latency=1.0, start_delay=1.0) == simulate_policy(writes, tuning, latency=1.0)


@pytest.mark.parametrize("delay", [-0.1, 1.5, float("nan")])
def test_a_start_delay_outside_zero_to_the_latency_is_refused(delay):
    with pytest.raises(ValueError, match="start_delay"):
        simulate_policy(WRITES, TUNING, latency=1.0, start_delay=delay)
