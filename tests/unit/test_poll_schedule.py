"""Adaptive polling of catalogs without a table list: hot tables often, cold ones backing off, under a
global calls-per-second limit. A fake clock; no catalog."""

from __future__ import annotations

import pytest

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument
from autooptimize.services.observe.changes import PollSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_table_without_changes_backs_off_exponentially_to_the_maximum_and_a_change_makes_it_hot():
    clock = Clock()
    poll = PollSchedule(min_interval=5, max_interval=40, clock=clock)
    polled_at = []
    for _ in range(600):  # ten minutes, asked every second
        if poll.due(["a"]):
            polled_at.append(clock.now)
            poll.observed("a", changed=False)
        clock.now += 1
    gaps = [b - a for a, b in zip(polled_at, polled_at[1:], strict=False)]
    assert gaps[:4] == [10, 20, 40, 40] and set(gaps[3:]) == {40}
    poll.observed("a", changed=True)
    assert poll.interval("a") == 5
    clock.now += 5
    assert poll.due(["a"]) == ["a"]


def test_hot_tables_are_polled_more_often_than_cold_ones():
    clock = Clock()
    poll = PollSchedule(min_interval=2, max_interval=64, clock=clock)
    counts = {"hot": 0, "cold": 0}
    for _ in range(300):
        for name in poll.due(["hot", "cold"]):
            counts[name] += 1
            poll.observed(name, changed=name == "hot")
        clock.now += 1
    assert counts["hot"] == 150  # every 2 s
    assert counts["cold"] <= 10  # 1, 4, 8, 16, 32, then every 64 s


def test_the_global_rate_limit_holds_over_any_window_and_the_most_overdue_go_first():
    clock = Clock()
    names = [f"t{i:03d}" for i in range(500)]
    poll = PollSchedule(min_interval=0, max_interval=0, calls_per_second=10, max_per_call=1000, clock=clock)
    handed: list[tuple[float, str]] = []
    for _ in range(200):  # 20 s asked every 0.1 s
        for name in poll.due(names):
            handed.append((clock.now, name))
            poll.observed(name, changed=False)
        clock.now += 0.1
    # no second holds more than 10, and the limit is used: 10 per second
    assert 10 * 20 - 10 <= len(handed) <= 10 * 20
    for tenth in range(0, 190):
        start = 1000 + tenth / 10
        assert sum(1 for at, _ in handed if start - 1e-9 <= at < start + 1 - 1e-9) <= 10
    # never-polled tables went first, in order, and none twice before every table had its turn
    first_round = [n for _, n in handed[:200]]
    assert first_round == names[:200]


def test_a_table_not_listed_any_more_is_forgotten():
    clock = Clock()
    poll = PollSchedule(min_interval=1, max_interval=8, clock=clock)
    assert poll.due(["a", "b"]) == ["a", "b"]
    poll.observed("a", changed=False)
    clock.now += 100
    assert poll.due(["b"]) == ["b"]
    poll.observed("a", changed=False)  # unknown now: ignored
    assert poll.interval("a") == 1


def test_from_settings_and_bad_arguments():
    settings = Settings(poll_min_seconds=3, poll_max_seconds=90, catalog_calls_per_second=7)
    poll = PollSchedule.from_settings(settings)
    assert (poll.min_interval, poll.max_interval, poll.calls_per_second) == (3, 90, 7)
    with pytest.raises(InvalidArgument, match="max_interval"):
        PollSchedule(min_interval=10, max_interval=5)
    with pytest.raises(InvalidArgument, match="calls_per_second"):
        PollSchedule(calls_per_second=0)
    with pytest.raises(ValueError, match="AO_POLL_MIN_SECONDS"):
        Settings(poll_min_seconds=60, poll_max_seconds=30)
