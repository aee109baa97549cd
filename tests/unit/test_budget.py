"""The budget's pure parts: the value of a planned action, the cost model learned from history, the
measured core-seconds of an action, and the ranking under a budget."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.budget import (
    ADMIT,
    DEFER,
    GIB,
    PRIOR_WEIGHT,
    BudgetCandidate,
    CostModel,
    CostPrior,
    Sample,
    core_seconds,
    rank,
    worth_of,
)
from autooptimize.domain.decision import DeleteFacts, MergeFacts, PartitionFacts, SortFacts
from autooptimize.errors import InvalidArgument

MIB = 1 << 20
PRIOR = CostPrior(per_action=1.0, per_file=0.05, per_gib=40.0)


def _facts(**over):
    base = dict(files=100, bytes=100 * MIB, mse=float((127 * MIB) ** 2), tolerance=32 * MIB,
                merge=MergeFacts(99 * MIB, 99, 1, float((127 * MIB) ** 2), 0.0), target=128 * MIB)
    base.update(over)
    return PartitionFacts(**base)


def test_merge_value_is_files_removed_plus_distance_closed():
    w = worth_of(_facts(), "merge")
    assert (w.files_removed, w.files_in, w.bytes_in) == (98, 99, 99 * MIB)
    # every rewritten file closes √MSE/target = 127/128 of the target
    assert w.distance_closed == pytest.approx(99 * 127 / 128)
    assert w.value == pytest.approx(98 + 99 * 127 / 128)


def test_sort_value_counts_the_distance_it_closes_and_compaction_the_delete_files():
    sort = SortFacts(overlapping_bytes=50 * MIB, partition_bytes=100 * MIB, files=4, bytes_rewritten=100 * MIB,
                     files_in=4, files_out=4, mse_after=float((100 * MIB) ** 2))
    w = worth_of(_facts(files=4, sort=sort), "sort")
    assert w.files_removed == 0 and w.distance_closed == pytest.approx(4 * 27 / 128)
    deletes = DeleteFacts(files=6, bytes=MIB, rows_deleted_estimate=10, data_rows=100, data_bytes_affected=40 * MIB)
    c = worth_of(_facts(files=3, bytes=40 * MIB, deletes=deletes), "compact_deletes")
    # 6 delete files go and 3 data files become one
    assert (c.files_removed, c.files_in, c.bytes_in) == (6 + 2, 9, 41 * MIB)
    assert worth_of(_facts(), "zorder") is None and worth_of(_facts(), "compact_deletes") is None


def test_core_seconds_is_worker_cpu_plus_executor_tasks_else_wall():
    assert core_seconds({"cpu": 2.5, "task.wall": 4.0, "wall": 3.0}) == 6.5
    # the tasks' CPU seconds when measured: their wall time stretches with the machine's other load
    assert core_seconds({"cpu": 2.5, "task.wall": 4.0, "task.cpu": 1.5, "wall": 3.0}) == 4.0
    assert core_seconds({"cpu": 2.5, "wall": 9.0}) == 2.5
    assert core_seconds({"wall": 3.0}) == 3.0  # recorded before cpu was measured: one core
    assert core_seconds({}) is None and core_seconds(None) is None


def test_cost_model_is_the_prior_until_history_then_scales_to_it():
    assert CostModel.learn(PRIOR, []).estimate(10, GIB) == pytest.approx(1.0 + 0.5 + 40.0)
    # history costing three times the prior: the scale moves towards 3, shrunk by the prior's weight
    history = [Sample(10, GIB // 4, 3 * PRIOR.estimate(10, GIB // 4)) for _ in range(8)]
    model = CostModel.learn(PRIOR, history)
    expected = (8 * 3 + PRIOR_WEIGHT) / (8 + PRIOR_WEIGHT)
    assert model.scale == pytest.approx(expected) and model.samples == 8
    assert model.estimate(20, GIB) == pytest.approx(expected * PRIOR.estimate(20, GIB))
    # more of the same history: closer to 3
    assert 3 > CostModel.learn(PRIOR, history * 5).scale > model.scale
    # nothing measured is no history
    assert CostModel.learn(PRIOR, [Sample(1, 1, 0.0), Sample(1, 1, math.nan)]).scale == 1.0


@pytest.mark.parametrize("bad", [dict(per_action=-1, per_file=0, per_gib=1), dict(per_action=0, per_file=0, per_gib=0),
                                 dict(per_action=math.inf, per_file=0, per_gib=1)])
def test_a_bad_prior_is_refused_naming_it(bad):
    with pytest.raises(InvalidArgument, match="cost prior"):
        CostPrior(**bad)


def test_ranking_admits_by_value_per_cost_within_what_is_left():
    cands = [BudgetCandidate("barely", value=2, cost=2.0, arrived=0), BudgetCandidate("heavy", value=90, cost=6.0, arrived=1),
             BudgetCandidate("mid", value=20, cost=3.0, arrived=2), BudgetCandidate("huge", value=500, cost=50.0, arrived=3)]
    verdicts = {v.key: (v.verdict, v.reason) for v in rank(cands, remaining=10.0, budget=20.0)}
    assert verdicts == {"heavy": (ADMIT, "ranked"), "mid": (ADMIT, "ranked"), "barely": (DEFER, "over_budget"),
                        "huge": (DEFER, "larger_than_budget")}
    # a smaller one still fits after a larger one did not
    v = rank([BudgetCandidate("a", 10, 8.0), BudgetCandidate("b", 4, 4.0), BudgetCandidate("c", 1, 2.0)], remaining=10.0, budget=10.0)
    assert [(x.key, x.verdict) for x in v] == [("a", ADMIT), ("b", DEFER), ("c", ADMIT)]
    # nothing of value is never admitted; nothing left admits nothing
    assert rank([BudgetCandidate("z", 0, 1.0)], 10.0, 10.0)[0].reason == "no_value"
    assert {x.verdict for x in rank(cands, remaining=-5.0, budget=20.0)} == {DEFER}


def test_pacing_holds_estimates_in_flight_to_a_share_of_what_is_left_and_keeps_the_order():
    cands = [BudgetCandidate("a", 40, 3.0), BudgetCandidate("b", 30, 3.0), BudgetCandidate("c", 20, 3.0),
             BudgetCandidate("d", 1, 0.5)]
    # nothing in flight: 10 left, pace 0.5 → estimates may hold 5: a (3) in, b would make 6 → paced, and so
    # is everything after it, even d that would fit (nothing of less value per core-second overtakes b)
    v = rank(cands, remaining=10.0, budget=10.0, pace=0.5)
    assert [(x.key, x.verdict, x.reason) for x in v] == [
        ("a", ADMIT, "ranked"), ("b", DEFER, "paced"), ("c", DEFER, "paced"), ("d", DEFER, "paced")]
    # with 3 already in flight of 10 measured-left (7 left on estimates): the allowance 5 is 2 away
    assert {x.verdict for x in rank(cands, remaining=7.0, budget=10.0, pace=0.5, in_flight=3.0)} == {DEFER}
    # nothing in flight: the next candidate goes when its estimate with the margin fits what is left,
    # however large; without room for the margin it is over budget (and a smaller one may still fit)
    assert rank([BudgetCandidate("last", 10, 1.5)], remaining=2.0, budget=10.0, pace=0.5, margin=0.25)[0].verdict == ADMIT
    v = rank([BudgetCandidate("last", 10, 1.7), BudgetCandidate("small", 1, 0.5)], remaining=2.0, budget=10.0,
             pace=0.5, margin=0.25)
    assert [(x.key, x.verdict, x.reason) for x in v] == [("last", DEFER, "over_budget"), ("small", ADMIT, "ranked")]
    assert rank([BudgetCandidate("big", 10, 8.0)], remaining=10.0, budget=10.0, pace=0.2)[0].verdict == ADMIT
    assert rank([BudgetCandidate("big", 10, 8.0)], remaining=9.0, budget=10.0, pace=0.2,
                in_flight=1.0)[0].reason == "paced"
    # pace 1 is the greedy knapsack of before
    assert [x.verdict for x in rank(cands, 10.0, 10.0, pace=1.0)] == [ADMIT, ADMIT, ADMIT, ADMIT]
    with pytest.raises(InvalidArgument, match="pace"):
        rank(cands, 10.0, 10.0, pace=0.0)


@given(st.lists(st.floats(0.01, 10), min_size=1, max_size=30), st.floats(0.05, 1), st.floats(0, 1.0),
       st.floats(0.01, 100), st.floats(0, 1))
def test_paced_spending_holds_the_budget_while_estimates_err_by_less_than_pace_and_margin_allow(
        costs, pace, err, budget, margin):
    """Ticks admit, the admitted finish at (1 + e) × their estimate with e < min(margin, (1 − pace) / pace),
    and the next tick sees them measured: the measured spend never passes the budget."""
    err = err * min(margin, (1 - pace) / pace) * 0.999
    pending = [BudgetCandidate(f"c{i}", 1.0, c, arrived=i) for i, c in enumerate(costs)]
    spent = 0.0
    while pending:
        verdicts = rank(pending, budget - spent, budget, pace=pace, margin=margin)
        admitted = {v.key for v in verdicts if v.verdict == ADMIT}
        if not admitted:
            break
        batch = [c for c in pending if c.key in admitted]
        spent += sum(c.cost for c in batch) * (1 + err)
        assert spent <= budget * (1 + 1e-9)
        pending = [c for c in pending if c.key not in admitted]


def test_ranking_refuses_repeated_keys_and_bad_numbers():
    with pytest.raises(InvalidArgument, match="unique"):
        rank([BudgetCandidate("a", 1, 1.0), BudgetCandidate("a", 2, 1.0)], 1.0, 1.0)
    with pytest.raises(InvalidArgument, match="cost of a"):
        BudgetCandidate("a", 1, -1.0)
    with pytest.raises(InvalidArgument, match="budget"):
        rank([], 1.0, math.nan)


candidates = st.lists(st.tuples(st.floats(0, 1e3), st.floats(0.01, 1e3)), max_size=30).map(
    lambda xs: [BudgetCandidate(f"c{i}", v, c, arrived=i) for i, (v, c) in enumerate(xs)])


@given(candidates, st.floats(0, 5e3), st.floats(0.01, 5e3))
def test_ranking_never_overspends_and_admits_greedily_by_ratio(cands, remaining, budget):
    verdicts = rank(cands, remaining, budget)
    by_key = {c.key: c for c in cands}
    assert sorted(v.key for v in verdicts) == sorted(by_key)  # one verdict each
    admitted = [by_key[v.key] for v in verdicts if v.verdict == ADMIT]
    assert sum(c.cost for c in admitted) <= max(0.0, remaining) + 1e-9
    # a deferred candidate over budget did not fit what was left when its turn came
    left = max(0.0, remaining)
    for v in verdicts:
        c = by_key[v.key]
        if v.verdict == ADMIT:
            left -= c.cost
        elif v.reason == "over_budget":
            assert c.cost > left and c.value > 0
    # the order is by value per cost
    ratios = [by_key[v.key].value_per_cost for v in verdicts]
    assert ratios == sorted(ratios, reverse=True)


def test_budget_settings_are_checked_naming_what_is_valid(tmp_path):
    from pydantic import ValidationError

    from autooptimize.config import Settings

    with pytest.raises(ValidationError, match="must be one of enforce, shadow"):
        Settings(home=tmp_path, budget_mode="dry")
    with pytest.raises(ValidationError, match="budget_core_seconds_per_hour"):
        Settings(home=tmp_path, budget_core_seconds_per_hour=0)
    assert Settings(home=tmp_path).budget_core_seconds_per_hour is None  # no budget unless set


def test_beat_ticks_the_budget_through_a_registered_control_task(tmp_path):
    import tasks.control  # noqa: F401  (registers the control tasks)
    from autooptimize.config import Settings
    from scheduler.beat import beat_schedule
    from tasks.app import app
    from tasks.routing import CONTROL_QUEUE

    entry = beat_schedule(Settings(home=tmp_path, budget_tick_seconds=12.5))["budget-tick"]
    assert entry["task"] == "autooptimize.budget_tick" and entry["task"] in app.tasks
    assert entry["schedule"] == 12.5 and entry["options"]["queue"] == CONTROL_QUEUE


def test_explain_line_names_value_cost_and_verdict():
    from autooptimize.cli.actions import _budget_text

    line = _budget_text({"value": 58.5, "cost_core_seconds": 0.25, "verdict": "defer", "reason": "over_budget"})
    assert line == ", value 58.5, cost 0.25 core-s, budget: defer (over_budget)"
    assert _budget_text({"verdict": "no_budget"}) == "" and _budget_text(None) == ""
