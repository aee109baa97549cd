"""The budget on real tables, PostgreSQL and actions: under a tight budget, enforce holds back the
candidate of little value per core-second and runs the valuable one; shadow records the same verdicts
and holds nothing back; a deferred candidate runs once the budget allows; ad-hoc work is never held."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from autooptimize import api
from autooptimize.console.metrics import metrics_text
from autooptimize.services import actions, budget, tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.scan import scan_table
from autooptimize.services.overview import table_detail
from autooptimize.services.submit_decided import submit_for_partition
from autooptimize.storage.budget_models import BudgetDecision
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action
from autooptimize.storage.repositories import now, tracked_table
from tests.fakes import RecordingDispatch
from tests.integration.tables import DAY1, identifier, key_of, make_table

HEAVY_FILES, BARELY_FILES = 30, 3
# prior: 1 core-s per action + 0.05 per file → heavy 2.5 core-s for ~29 files removed, barely 1.15 for 2
PRIOR = {"budget_prior_seconds_per_action": 1.0, "budget_prior_seconds_per_file": 0.05,
         "budget_prior_seconds_per_gib": 40.0, "rewrite_engine": "local",
         "budget_pace": 1.0, "budget_margin": 0.0}  # the ranking under test; pacing: tests/unit/test_budget.py, benchmarks/budget.py
ROOM = 3.0  # core-seconds left this hour: the heavy candidate fits, a barely one after it does not


def _estate(settings, catalog, tag):
    """One heavily fragmented table and two barely fragmented ones, tracked and scanned: (name, table id)."""
    out = []
    for name, files in ((f"heavy_{tag}", HEAVY_FILES), (f"barely_a_{tag}", BARELY_FILES),
                        (f"barely_b_{tag}", BARELY_FILES)):
        ident = identifier(make_table(catalog, {DAY1: files}, rows=20, name=name))
        tracking.track(settings, ident, target_file_size="1MiB")
        scan_table(settings, ident)
        with session_scope(settings) as s:
            out.append((ident, tracked_table(s, settings.catalog, ident).id))
    return out


def _tight(settings, mode):
    """Settings whose hourly budget leaves ROOM core-seconds over what this database spent this hour
    (other tests' actions count too: the budget covers every action). The spend is read with the same
    priors the tick prices with: an action of another test still queued is counted at its estimate, and
    read at the default priors (0.02 core-s a file, not 0.05) a queued merge of 30 files counted 0.9 core-s
    less than the tick then did, more than the heavy candidate's margin (found with the files in reverse
    order, 2026-11-30)."""
    # the budget is under test, not the live-partition policy: every barely fragmented partition is a candidate
    priced = settings.model_copy(update={**PRIOR, "merge_policy": "binpack"})
    with session_scope(priced) as s:
        spent = budget.spend(s, priced)["total"]
    return priced.model_copy(update={"budget_mode": mode, "budget_core_seconds_per_hour": spent + ROOM})


def _records(settings, table_ids):
    with session_scope(settings) as s:
        rows = s.scalars(select(BudgetDecision).where(BudgetDecision.table_id.in_(table_ids))
                         .order_by(BudgetDecision.id)).all()
        return [budget.decision_view(r) | {"table_id": r.table_id} for r in rows]


def _actions_of(settings, table_ids):
    with session_scope(settings) as s:
        return list(s.scalars(select(Action.table_id).where(Action.table_id.in_(table_ids))))


def _run(settings, catalog, mode):
    tight = _tight(settings, mode)
    estate = _estate(tight, catalog, mode)
    ids = [t for _, t in estate]
    port = RecordingDispatch()
    arrived = [submit_for_partition(tight, t, 0, key_of(DAY1), dispatch=port) for t in ids]
    verdict = budget.run_budget_tick(tight, port)
    return tight, estate, ids, port, arrived, verdict


def _others(settings, table_ids, since):
    """What else spent this hour's budget since ``since`` (a failure's message): the spend, and the actions
    of other tables created or finished since."""
    with session_scope(settings) as s:
        rows = s.execute(select(Action.table_id, Action.kind, Action.state, Action.created_at, Action.finished_at)
                         .where(Action.table_id.not_in(table_ids),
                                (Action.created_at >= since) | (Action.finished_at >= since))).all()
        return {"spend": budget.spend(s, settings), "actions": [tuple(r) for r in rows]}


def test_enforce_defers_low_value_candidates_and_runs_them_once_the_budget_allows(settings, catalog):
    started = now()
    tight, estate, ids, port, arrived, verdict = _run(settings, catalog, "enforce")
    heavy, barely_a, barely_b = ids
    assert arrived == [None, None, None]  # enforce: every automatic candidate waits for the tick
    assert (verdict["admitted"], verdict["deferred"], verdict["submitted"]) == (1, 2, 1), (
        verdict, tight.budget_core_seconds_per_hour, _others(tight, ids, started))
    records = {r["table_id"]: r for r in _records(tight, ids)}
    assert records[heavy]["verdict"] == "admit" and records[heavy]["action_id"] == port.tickets[0].action_id
    assert records[heavy]["files_removed"] == HEAVY_FILES - 1
    for t in (barely_a, barely_b):
        assert (records[t]["verdict"], records[t]["reason"], records[t]["action_id"]) == ("defer", "over_budget", None)
        assert records[t]["value_per_cost"] < records[heavy]["value_per_cost"]
    assert _actions_of(tight, ids) == [heavy]  # nothing was done for the deferred ones

    # explain (service and Python API), the console's table page and /metrics show value, cost and verdict
    [row] = explain(tight, estate[1][0])["partitions"]
    assert row["budget"]["verdict"] == "defer" and row["budget"]["value"] > 0 and row["budget"]["cost_core_seconds"] > 0
    assert api.explain(estate[0][0], settings=tight)["partitions"][0]["budget"]["verdict"] == "admit"
    [shown] = table_detail(tight, estate[1][0])["budget"]["decisions"]
    assert (shown["verdict"], shown["reason"], shown["deferrals"]) == ("defer", "over_budget", 1)
    assert shown["cost_core_seconds"] == round(records[barely_a]["cost_core_seconds"], 3)
    scraped = metrics_text(tight)[0].decode()
    assert 'autooptimize_budget_spend_core_seconds{source="admitted"}' in scraped
    assert 'autooptimize_budget_candidates{mode="enforce",verdict="defer"}' in scraped
    assert "autooptimize_budget_deferrals_total" in scraped

    # deferred, not lost: ranked again at the next tick (the heavy one still counts at its estimate)
    still = budget.run_budget_tick(tight, port)
    assert (still["candidates"], still["admitted"], still["submitted"]) == (2, 0, 0)

    # the admitted action runs; its core-seconds are measured and replace its estimate in the spend
    with session_scope(tight) as s:
        estimated = budget.spend(s, tight)["admitted"]
    done = actions.execute(tight, port.tickets[0].action_id, spark=None)
    assert done["state"] == "succeeded" and done["files_in"] == HEAVY_FILES, done
    assert done["timings"]["cpu"] > 0
    with session_scope(tight) as s:
        measured = budget.spend(s, tight)["admitted"]
    assert measured - estimated == pytest.approx(done["timings"]["cpu"] - records[heavy]["cost_core_seconds"],
                                                 abs=0.01)

    # an ad-hoc request is never held back by the exhausted budget, and counts in the spend
    with session_scope(tight) as s:
        before = budget.spend(s, tight)
    adhoc = actions.submit(tight, estate[2][0], partition="day=2026-01-01", dispatch=False)
    with session_scope(tight) as s:
        after = budget.spend(s, tight)
    assert after["other"] > before["other"]
    actions.execute(tight, adhoc, spark=None)

    # and run once the budget allows
    roomy = tight.model_copy(update={"budget_core_seconds_per_hour": tight.budget_core_seconds_per_hour + 100})
    later = budget.run_budget_tick(roomy, port)
    # barely_b's partition was merged by the ad-hoc action since: its candidate is closed, not run twice
    assert (later["candidates"], later["admitted"], later["submitted"]) == (1, 1, 1)
    records = {r["table_id"]: r for r in _records(tight, ids)}
    assert records[barely_a]["verdict"] == "admit" and records[barely_a]["deferrals"] == 2
    assert (records[barely_b]["verdict"], records[barely_b]["reason"]) == ("superseded", "done_since")
    assert records[barely_a]["action_id"] == port.tickets[-1].action_id
    assert sorted(_actions_of(tight, ids)) == sorted(ids)


def test_shadow_records_the_same_verdicts_and_holds_nothing_back(settings, catalog):
    tight, estate, ids, port, arrived, verdict = _run(settings, catalog, "shadow")
    heavy, barely_a, barely_b = ids
    assert all(arrived) and len(port.tickets) == 3  # every candidate submitted on arrival
    assert (verdict["admitted"], verdict["deferred"], verdict["submitted"]) == (1, 2, 0)
    records = {r["table_id"]: r for r in _records(tight, ids)}
    assert [records[t]["verdict"] for t in ids] == ["admit", "defer", "defer"]
    assert [records[t]["would_run"] for t in ids] == [True, False, False]
    assert [records[t]["action_id"] for t in ids] == arrived  # what ran is linked to what would have
    assert all(records[t]["mode"] == "shadow" for t in ids)
    for action_id in arrived:
        assert actions.execute(tight, action_id, spark=None)["state"] == "succeeded"
    # the shadow's spend counts what it would have admitted only
    with session_scope(tight) as s:
        spent = budget.spend(s, tight)
    heavy_cost = actions.get_outcome(tight, arrived[0])["timings"]["cpu"]
    assert spent["admitted"] >= heavy_cost
    with session_scope(tight) as s:
        linked = s.scalars(select(BudgetDecision.action_id).where(BudgetDecision.table_id.in_([barely_a, barely_b]))).all()
    assert set(linked) == set(arrived[1:])  # the deferred ones ran, linked, and are not in the admitted spend
    # the cost model learns from what the budget admitted only: an enforcing budget would not have run the rest
    with session_scope(tight) as s:
        assert budget.cost_model(s, tight, heavy).samples == 1
        assert budget.cost_model(s, tight, barely_a).samples == 0
    # close the shadow's open candidates so that later tests see none
    budget.run_budget_tick(tight.model_copy(update={"budget_core_seconds_per_hour": None}), port)
