"""The budget: automatic actions spend at most AO_BUDGET_CORE_SECONDS_PER_HOUR core-seconds per rolling
hour, the candidates of most value per core-second first (value, cost and ranking: domain/budget.py).

**Why an admission window.** Decide hands candidates over one at a time, as the listener sees commits;
a gate that admitted each on arrival while money was left would spend the hour on whatever came first.
So a candidate is recorded (``ao_budget_decisions``, verdict ``pending``) and waits for the next
*tick* (beat, every AO_BUDGET_TICK_SECONDS): the tick ranks every open candidate — new ones and those
deferred before — by value per estimated core-second and admits them in that order while they fit what
is left of the hour. A deferred candidate stays open and competes again at every tick (never lost) until
it is admitted or a newer candidate for the same partition replaces it (``superseded``). The price is a
delay of at most one tick before an automatic action starts; a threshold learned from past candidates
would admit at once but ranks only against the past, and not at all on a cold start.

**The spend** of the rolling hour: every admitted candidate of the last hour at its action's measured
core-seconds (:func:`~autooptimize.domain.budget.core_seconds`) once finished, at its estimate until then;
plus every action of the last hour no candidate stands for (ad-hoc actions, hygiene), measured once
finished and estimated while queued or running. Ad-hoc actions are never held back; they only count.

**Pacing** (AO_BUDGET_PACE, AO_BUDGET_MARGIN; domain/budget.py): estimates in flight hold at most that
share of what the measured spend leaves, and with nothing in flight a candidate goes when its estimate
with the margin fits, so an estimate's error cannot overspend the hour; each tick also estimates the
open candidates again with their table's newest measurements. The model learns from the actions that
ran under the budget (and those no candidate stands for): in shadow mode, the actions of candidates it
never admitted ran only because shadow holds nothing back, and an enforcing budget would not have known
their cost.

**Shadow mode** (AO_BUDGET_MODE=shadow) records and ranks exactly the same way but holds nothing back:
each candidate's action is submitted on arrival and linked to its record. Its spend counts only what the
budget admitted, so its verdicts are the ones an enforcing budget would have given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from autooptimize.config import Settings
from autooptimize.domain.budget import (
    ADMIT,
    DEFER,
    HISTORY,
    PENDING,
    BudgetCandidate,
    CostModel,
    CostPrior,
    Sample,
    core_seconds,
    rank,
    worth_of,
)
from autooptimize.domain.decision import PartitionFacts
from autooptimize.domain.partitions import PartitionRef
from autooptimize.services import actions
from autooptimize.services.ports import Dispatch
from autooptimize.services.sizing import REWRITE_KINDS
from autooptimize.storage.budget_models import BudgetDecision
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, PartitionStats, TrackedTable, Trigger
from autooptimize.storage.repositories import audit, now

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
OPEN = (PENDING, DEFER)
SUPERSEDED, DROPPED = "superseded", "dropped"
_TICK_LOCK = 0x6275646765740001  # pg advisory lock: one tick at a time across the estate


def prior_of(settings: Settings) -> CostPrior:
    return CostPrior(settings.budget_prior_seconds_per_action, settings.budget_prior_seconds_per_file,
                     settings.budget_prior_seconds_per_gib)


def cost_model(session: Session, settings: Settings, table_id: int | None) -> CostModel:
    """The table's cost model: the prior scaled by its newest finished rewrites that ran under the budget
    (module doc; the prior when none)."""
    if table_id is None:
        return CostModel(prior_of(settings))
    never_admitted = select(BudgetDecision.action_id).where(BudgetDecision.action_id.is_not(None),
                                                            BudgetDecision.admitted_at.is_(None))
    rows = session.execute(
        select(Action.files_in, Action.bytes_in, Action.timings)
        .where(Action.table_id == table_id, Action.state == ActionState.SUCCEEDED.value,
               Action.kind.in_(REWRITE_KINDS), Action.files_in > 0, Action.id.not_in(never_admitted))
        .order_by(Action.finished_at.desc()).limit(HISTORY)).all()
    samples = [Sample(int(files or 0), int(bytes_ or 0), spent) for files, bytes_, timings in rows
               if (spent := core_seconds(timings)) is not None]
    return CostModel.learn(prior_of(settings), samples)


def judge(settings: Settings, table_id: int, spec_id: int, partition_key: str, choice: Any, trigger: Trigger,
          submit: Callable[[], str]) -> str | None:
    """Decide's one call into the budget, in place of submitting ``choice`` itself: without a budget, for an
    ad-hoc trigger or a choice the model cannot value, ``submit()`` at once; otherwise record the candidate
    (replacing an open one of the same partition) and, in shadow mode, ``submit()`` and link the action.
    Returns the action id, or None when the candidate waits for the next tick (enforce)."""
    facts: PartitionFacts | None = getattr(choice, "facts", None)
    kind = choice.decision.kind
    worth = worth_of(facts, kind) if facts is not None and kind else None
    if settings.budget_core_seconds_per_hour is None or trigger == Trigger.AD_HOC or worth is None:
        return submit()
    with session_scope(settings) as session:
        cost = cost_model(session, settings, table_id).estimate(worth.files_in, worth.bytes_in)
        waited = 0  # the deferrals of the candidate it replaces carry over (metrics, the console)
        for old in _open(session, table_id, spec_id, partition_key):
            old.verdict, old.reason, old.decided_at = SUPERSEDED, "newer_candidate", now()
            waited = max(waited, old.deferrals)
        row = BudgetDecision(table_id=table_id, spec_id=spec_id, partition_key=partition_key, kind=kind,
                             mode=settings.budget_mode, files_removed=worth.files_removed,
                             distance_closed=worth.distance_closed, files_in=worth.files_in,
                             bytes_in=worth.bytes_in, value=worth.value, cost=cost, verdict=PENDING, deferrals=waited)
        session.add(row)
        session.flush()
        row_id = row.id
    if settings.budget_mode != "shadow":
        return None
    action_id = submit()
    _link(settings, row_id, action_id)
    return action_id


def _open(session: Session, table_id: int, spec_id: int, partition_key: str) -> list[BudgetDecision]:
    return list(session.scalars(select(BudgetDecision).where(
        BudgetDecision.table_id == table_id, BudgetDecision.spec_id == spec_id,
        BudgetDecision.partition_key == partition_key, BudgetDecision.verdict.in_(OPEN)).with_for_update()))


def _link(settings: Settings, row_id: int, action_id: str) -> None:
    with session_scope(settings) as session:
        row = session.get(BudgetDecision, row_id)
        if row is not None:
            row.action_id = action_id


def spend(session: Session, settings: Settings, at: datetime | None = None) -> dict[str, float]:
    """Core-seconds of the rolling hour up to ``at``: ``admitted`` (candidates the budget admitted),
    ``other`` (actions no candidate stands for: ad hoc, hygiene), their ``total`` (module doc), and
    ``in_flight``: the part of ``admitted`` still at its estimate (its action not finished)."""
    at = at or now()
    since = at - HOUR
    admitted = in_flight = 0.0
    rows = session.execute(
        select(BudgetDecision.cost, Action.state, Action.timings)
        .outerjoin(Action, Action.id == BudgetDecision.action_id)
        .where(BudgetDecision.verdict == ADMIT, BudgetDecision.admitted_at > since)).all()
    for estimate, state, timings in rows:
        measured = core_seconds(timings) if state is not None and ActionState(state).terminal else None
        admitted += measured if measured is not None else estimate
        in_flight += estimate if measured is None else 0.0
    linked = select(BudgetDecision.action_id).where(BudgetDecision.action_id.is_not(None))
    others = session.scalars(select(Action).where(Action.created_at > since, Action.id.not_in(linked))).all()
    other = sum(_action_cost(session, settings, a) for a in others)
    return {"admitted": admitted, "other": other, "total": admitted + other, "in_flight": in_flight}


def _action_cost(session: Session, settings: Settings, action: Action) -> float:
    """What an action no candidate stands for counts: measured once finished, else estimated."""
    measured = core_seconds(action.timings) if ActionState(action.state).terminal else None
    if measured is not None:
        return measured
    if ActionState(action.state).terminal and not action.files_in:
        return 0.0  # ended before reading anything
    if action.kind not in REWRITE_KINDS:
        return prior_of(settings).per_action
    where = [PartitionStats.table_id == action.table_id]
    if action.partition_key is not None:
        where += [PartitionStats.spec_id == action.spec_id, PartitionStats.partition_key == action.partition_key]
    files, bytes_ = session.execute(select(func.coalesce(func.sum(PartitionStats.n_files), 0),
                                           func.coalesce(func.sum(PartitionStats.total_bytes), 0)).where(*where)).one()
    return cost_model(session, settings, action.table_id).estimate(int(files), int(bytes_))


def run_budget_tick(settings: Settings, dispatch: Dispatch | None = None) -> dict[str, Any]:
    """Rank every open candidate against what is left of the rolling hour (module doc); submit those
    admitted that have no action yet (enforce), or every one without an action (shadow, or no budget
    any more: nothing is held back then). Returns the counts and the spend."""
    budget = settings.budget_core_seconds_per_hour
    with session_scope(settings) as session:
        if not session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _TICK_LOCK}).scalar():
            return {"skipped": "another tick is running"}
        rows = list(session.scalars(select(BudgetDecision).where(BudgetDecision.verdict.in_(OPEN))
                                    .order_by(BudgetDecision.arrived_at, BudgetDecision.id)))
        when = now()
        for r in rows:
            if _done_since(session, r):  # another action (e.g. ad hoc) rewrote the partition since
                r.verdict, r.reason, r.decided_at = SUPERSEDED, "done_since", when
        rows = [r for r in rows if r.verdict in OPEN]
        models: dict[int, CostModel] = {}
        for r in rows:  # estimated again with the table's newest measurements
            if r.table_id not in models:
                models[r.table_id] = cost_model(session, settings, r.table_id)
            r.cost = models[r.table_id].estimate(r.files_in, r.bytes_in)
        spent = spend(session, settings)
        if budget is None:
            verdicts = {r.id: (ADMIT, "no_budget") for r in rows}
        else:
            ranked = rank([BudgetCandidate(str(r.id), r.value, r.cost, r.arrived_at.timestamp()) for r in rows],
                          budget - spent["total"], budget, pace=settings.budget_pace, in_flight=spent["in_flight"],
                          margin=settings.budget_margin)
            verdicts = {int(v.key): (v.verdict, v.reason) for v in ranked}
        for r in rows:
            r.verdict, r.reason = verdicts[r.id]
            r.decided_at, r.budget, r.spent = when, budget, spent["total"]
            if r.verdict == ADMIT:
                r.admitted_at = when
            else:
                r.deferrals += 1
        to_submit = [(r.id, r.table_id, r.spec_id, r.partition_key, r.kind) for r in rows if r.action_id is None
                     and (r.verdict == ADMIT or settings.budget_mode == "shadow")]
        admitted = sum(1 for r in rows if r.verdict == ADMIT)
        if rows:
            audit(session, "budget.tick", budget=budget, mode=settings.budget_mode, spent=round(spent["total"], 3),
                  admitted=admitted, deferred=len(rows) - admitted)
    submitted = sum(1 for row in to_submit if _submit(settings, *row, dispatch=dispatch))
    return {"candidates": len(rows), "admitted": admitted, "deferred": len(rows) - admitted,
            "submitted": submitted, "spent": spent, "budget": budget}


def _done_since(session: Session, row: BudgetDecision) -> bool:
    """True when a rewrite other than the candidate's own action succeeded on its partition since it arrived."""
    return bool(session.scalar(select(Action.id).where(
        Action.table_id == row.table_id, Action.spec_id == row.spec_id, Action.partition_key == row.partition_key,
        Action.kind.in_(REWRITE_KINDS), Action.state == ActionState.SUCCEEDED.value,
        Action.finished_at > row.arrived_at, Action.id != (row.action_id or "")).limit(1)))


def _submit(settings: Settings, row_id: int, table_id: int, spec_id: int, key: str, kind: str, *,
            dispatch: Dispatch | None) -> bool:
    """Submit an admitted candidate's action and link it; a candidate that can no longer be submitted
    (the table untracked, the partition gone) is closed as ``dropped`` with the reason."""
    with session_scope(settings) as session:
        tracked = session.get(TrackedTable, table_id)
        identifier = tracked.identifier if tracked is not None and tracked.enabled else None
    try:
        if identifier is None:
            raise LookupError(f"table {table_id} is no longer tracked or is disabled")
        action_id = actions.submit(settings, identifier, partition=PartitionRef.of_key(spec_id, key) if key else None,
                                   kind=kind, trigger=Trigger.EVENT, dispatch=dispatch)
    except Exception as exc:  # recorded on the candidate; the other candidates go on
        log.warning("budget: candidate %s (table %s, %s) could not be submitted: %s", row_id, table_id, kind, exc)
        with session_scope(settings) as session:
            row = session.get(BudgetDecision, row_id)
            if row is not None:
                row.verdict, row.reason = DROPPED, type(exc).__name__[:40]
        return False
    _link(settings, row_id, action_id)
    return True


def decision_view(row: BudgetDecision) -> dict[str, Any]:
    return {"id": row.id, "spec_id": row.spec_id, "partition_key": row.partition_key, "kind": row.kind,
            "mode": row.mode, "value": round(row.value, 3), "files_removed": row.files_removed,
            "distance_closed": round(row.distance_closed, 3), "cost_core_seconds": round(row.cost, 3),
            "value_per_cost": round(row.value / row.cost, 4) if row.cost > 0 else None,
            "verdict": row.verdict, "reason": row.reason, "deferrals": row.deferrals,
            "would_run": row.verdict == ADMIT, "action_id": row.action_id,
            "arrived_at": row.arrived_at.isoformat() if row.arrived_at else None,
            "decided_at": row.decided_at.isoformat() if row.decided_at else None}


def latest_decisions(settings: Settings, table_id: int) -> dict[tuple[int, str], dict[str, Any]]:
    """The newest budget record of each partition of the table, by (spec id, partition key)."""
    with session_scope(settings) as session:
        rows = session.scalars(select(BudgetDecision).where(BudgetDecision.table_id == table_id)
                               .order_by(BudgetDecision.id)).all()
        return {(r.spec_id, r.partition_key): decision_view(r) for r in rows}


def explain_view(settings: Settings, table_id: int | None, partitions: Iterable[tuple[int, str, Any]]
                 ) -> dict[tuple[int, str], dict[str, Any]]:
    """For explain: per (spec id, partition key) with its ``Choice``, the chosen action's value, estimated
    cost and value per cost now, and the budget's latest verdict on the partition (``verdict``
    ``no_budget`` when no budget is set, ``not_judged`` when no candidate of it has been recorded)."""
    with session_scope(settings) as session:
        model = cost_model(session, settings, table_id)
    latest = latest_decisions(settings, table_id) if table_id is not None else {}
    out = {}
    for spec_id, key, choice in partitions:
        facts, kind = getattr(choice, "facts", None), choice.decision.kind
        worth = worth_of(facts, kind) if facts is not None and kind else None
        record = latest.get((spec_id, key))
        view: dict[str, Any] = {"mode": settings.budget_mode, "budget": settings.budget_core_seconds_per_hour,
                                "cost_model": model.as_dict()}
        if worth is not None:
            cost = model.estimate(worth.files_in, worth.bytes_in)
            view.update(value=round(worth.value, 3), files_removed=worth.files_removed,
                        distance_closed=round(worth.distance_closed, 3), cost_core_seconds=round(cost, 3),
                        value_per_cost=round(worth.value / cost, 4) if cost > 0 else None)
        if settings.budget_core_seconds_per_hour is None:
            view.update(verdict="no_budget", reason=None)
        elif record is None:
            view.update(verdict="not_judged", reason=None)
        else:
            view.update(verdict=record["verdict"], reason=record["reason"], deferrals=record["deferrals"],
                        judged_kind=record["kind"], judged_at=record["decided_at"], action_id=record["action_id"])
        out[(spec_id, key)] = view
    return out


def summary(settings: Settings) -> dict[str, Any]:
    """The budget now (console and /metrics): the hourly budget, mode, the rolling hour's spend, the
    candidates open, and the deferrals recorded (each tick a candidate waits counts one)."""
    with session_scope(settings) as session:
        spent = spend(session, settings)
        counts = dict(session.execute(select(BudgetDecision.verdict, func.count())
                                      .group_by(BudgetDecision.verdict)).all())
        deferrals = session.execute(select(func.coalesce(func.sum(BudgetDecision.deferrals), 0))).scalar()
    return {"budget": settings.budget_core_seconds_per_hour, "mode": settings.budget_mode, "spent": spent,
            "verdicts": {k: int(v) for k, v in counts.items()}, "deferrals": int(deferrals or 0)}
