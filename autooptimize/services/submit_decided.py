"""Submitting the decided action: a partition the listener hands over (MSE ≥ T², or new delete files)
is measured and given the action that wins on value against cost (autooptimize.domain.decision) — merge, sort, delete
compaction or nothing — through the same submission path, queue and audit trail as an ad-hoc
request (trigger "event"). Every decision is audited as ``decision.made`` or ``decision.skipped`` with
its reason code and each candidate's value and cost."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import TIMESTAMP, and_, func, literal, or_, select, update

from autooptimize.config import Settings
from autooptimize.domain.partitions import PartitionRef
from autooptimize.domain.policy import COLD_FLOOR_SECONDS, COLD_GAPS_KEPT
from autooptimize.errors import AutoOptimizeError, TableRefused
from autooptimize.iceberg.catalog import load_table
from autooptimize.services import actions, budget
from autooptimize.services.choose import (
    PlanningFacts,
    choose,
    planning_facts,
    planning_request,
    policy_tuning,
    table_target,
)
from autooptimize.services.ports import Dispatch
from autooptimize.services.rewrite.merge import select_partitions
from autooptimize.services.sizing import REWRITE_KINDS
from autooptimize.services.table_refusals import note_refused
from autooptimize.services.tracking import tuning_of
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, PartitionStats, TrackedTable, Trigger
from autooptimize.storage.repositories import audit, now
from autooptimize.storage.write_clock import is_past_late_horizon, past_horizon, with_span

log = logging.getLogger(__name__)
_reported: set[tuple[int, str]] = set()  # (table, cause) already logged at ERROR by this process


def submit_for_partition(settings: Settings, table_id: int, spec_id: int, partition_key: str,
                         trigger: Trigger = Trigger.EVENT, *, dispatch: Dispatch | None = None) -> str | None:
    """Submit the action chosen for one observed partition (handed to ``dispatch``, recorded only without
    one); returns the action id, or None when nothing is to be done."""
    with session_scope(settings) as session:
        tracked = session.get(TrackedTable, table_id)
        stats = session.scalars(select(PartitionStats).where(
            PartitionStats.table_id == table_id, PartitionStats.spec_id == spec_id,
            PartitionStats.partition_key == partition_key)).one_or_none()
        if tracked is None or not tracked.enabled:
            return None
        tuning = tuning_of(tracked)
        identifier = tracked.identifier
        last_write = stats.last_write_at if stats is not None else None  # what prompted it (Action.prompted_at)
        last = session.scalars(select(Action).where(
            Action.table_id == table_id, Action.spec_id == spec_id, Action.partition_key == partition_key,
            Action.kind.in_(REWRITE_KINDS)).order_by(Action.created_at.desc()).limit(1)).one_or_none()
        # a partition left alone may be judged otherwise once it has settled: the policy's inputs change
        # without a write to it (the table's other partitions grow, a newer partition starts, it goes quiet
        # or cold); settled_partitions hands it over then and once cold
        knobs = policy_tuning(settings, tracked)

        def past() -> bool:  # past the table's late horizon: not written again, so the cold rule may finish it
            return bool(knobs["late_horizon"]) and is_past_late_horizon(session, table_id, spec_id, partition_key)

        if (last is not None and last.state in (ActionState.SKIPPED.value, ActionState.REFUSED.value)
                and last.finished_at is not None and stats is not None and stats.updated_at <= last.finished_at
                and not _settled_after(settings, last.finished_at) and not past()):
            # Judged already and the partition has not changed since: asking again would change nothing
            # (unless it has settled since: what the policy waits for may have changed).
            return None
        if (stats is not None and stats.last_decision_at is not None and (stats.last_decision or "").startswith("skip")
                and stats.updated_at <= stats.last_decision_at
                and not _left_alone_and_settled(settings, stats)
                and not (stats.last_decision in LIVE_VERDICTS and past())):
            return None  # decided to leave it alone, and it has not changed since
        if (last is not None and tracked.min_interval_seconds > 0 and last.finished_at is not None
                and last.state == ActionState.SUCCEEDED.value
                and (now() - last.finished_at).total_seconds() < tracked.min_interval_seconds):
            audit(session, "decision.deferred", table_id=table_id, reason="min_interval", partition=partition_key,
                  last_action=last.id, min_interval_seconds=tracked.min_interval_seconds)
            # judged now: the settle and cold hand-overs do not ask again on every pass
            _note_judged(session, table_id, spec_id, partition_key)
            return None
        # read here, in the same transaction, rather than in sessions of their own while planning
        known = planning_facts(session, settings.catalog, identifier, table_id, spec_id, partition_key,
                               table_target(settings, tuning))
    # the partition travels as its Iceberg values (PartitionRef), never through its human text
    partition = PartitionRef.of_key(spec_id, partition_key) if partition_key else None
    choice = _choose(settings, identifier, spec_id, partition_key, tuning, table_id, known)
    if choice is None:
        return None
    decision = choice.decision
    with session_scope(settings) as session:
        _note_judged(session, table_id, spec_id, partition_key, last_decision=decision.kind or f"skip:{decision.reason}")
        audit(session, "decision.made" if decision.kind else "decision.skipped", table_id=table_id,
              partition=partition_key, kind=decision.kind, reason=decision.reason,
              candidates=[c.as_dict() for c in decision.candidates])
    if decision.kind is None:
        return None
    # the budget (services/budget.py) submits now, or records the candidate for its next tick
    return budget.judge(settings, table_id, spec_id, partition_key, choice, trigger, lambda: actions.submit(
        settings, identifier, partition=partition, kind=decision.kind, trigger=trigger, dispatch=dispatch,
        prompted_at=last_write))


def _note_judged(session: Any, table_id: int, spec_id: int, partition_key: str, **verdict: Any) -> None:
    """Record that the partition was judged now (and ``verdict``'s columns); ``updated_at`` is set to
    itself so that recording it does not count as a change."""
    session.execute(update(PartitionStats).where(
        PartitionStats.table_id == table_id, PartitionStats.spec_id == spec_id,
        PartitionStats.partition_key == partition_key,
    ).values(last_decision_at=func.now(), updated_at=PartitionStats.updated_at, **verdict))


#: Verdicts that depend on time: a partition left alone because it was written to is judged again once cold.
LIVE_VERDICTS = ("skip:live_wait",)


def _settled_after(settings: Settings, when: Any) -> bool:
    """True when the tiered policy is on and ``when`` is at least the settle time ago."""
    return settings.merge_policy == "tiered" and (now() - when).total_seconds() >= settings.settle_seconds


def _left_alone_and_settled(settings: Settings, stats: PartitionStats) -> bool:
    """True when the partition was left alone only because it was written to, and that was at least the
    settle time ago: the policy may judge it otherwise now (grown neighbours, a newer partition, quiet or
    cold)."""
    if stats.last_decision not in LIVE_VERDICTS or stats.last_decision_at is None:
        return False
    return (now() - stats.last_decision_at).total_seconds() >= settings.settle_seconds


def settled_partitions(settings: Settings) -> list[tuple[int, int, str]]:
    """(table, spec, key) of partitions that went quiet or cold since they were last judged, and have not
    changed since: those left alone as written to, and those a merge was submitted for that committed
    nothing (no snapshot changed them) and has nothing queued or running. The listener hands them to
    decide again, so a partition whose writes stopped gets its quiet merge and its cold finish.

    From the partition's last write (``last_write_at``): once ``settle_seconds`` after it (what the policy
    waited for may have changed meanwhile: the table's other partitions grew, a newer partition started;
    the simulator judges every partition then too), and once its cold-after time after it (its table's, AO_COLD_AFTER_SECONDS
    unless the table sets its own, or sooner from its recent gaps between writes, as
    :func:`~autooptimize.domain.policy.partition_cold_after` computes it); each moment hands a partition
    over at most once, however long it then stays quiet. Besides the verdicts that depend on time, a
    partition changed since it was last judged (or never judged) with more than one file is handed over at
    those moments too: observe hands over only a partition that needs attention and has nothing queued.
    A partition with no recorded write time is handed over once its cold-after time has passed
    since it was last judged. With AO_LATE_HORIZON_FINISH, a partition left alone as written to is handed
    over once it is past its table's late horizon (:func:`~autooptimize.domain.policy.past_late_horizon`,
    from the ordinals and late lags the listener keeps): a newer partition started, and no write has ever
    reached back that far."""
    p, t, a = PartitionStats, TrackedTable, Action
    cold_after = func.coalesce(t.cold_after_seconds, settings.cold_after_seconds)
    # partition_cold_after in SQL: no gap yet (NULL) or a factor of 0 keeps the table's time
    factor = func.nullif(func.coalesce(t.cold_gap_factor, settings.cold_gap_factor), 0)
    longest = func.greatest(*(p.write_gaps[i + 1] for i in range(COLD_GAPS_KEPT)))
    partition_cold = func.least(cold_after, func.greatest(
        COLD_FLOOR_SECONDS, settings.settle_seconds, func.coalesce(factor * longest, cold_after)))
    settle_at = p.last_write_at + func.make_interval(0, 0, 0, 0, 0, 0, settings.settle_seconds)
    cold_at = p.last_write_at + func.make_interval(0, 0, 0, 0, 0, 0, partition_cold)
    judged = func.coalesce(p.last_decision_at, literal("-infinity", TIMESTAMP(timezone=True)))
    due = or_(
        and_(judged < settle_at, settle_at <= func.now()),
        and_(judged < cold_at, cold_at <= func.now()),
        and_(p.last_write_at.is_(None),
             p.last_decision_at <= func.now() - func.make_interval(0, 0, 0, 0, 0, 0, cold_after)))
    # judged and unchanged since, on a verdict that depends on time (left alone as written to, or a merge
    # that committed nothing); or changed since it was last judged (or never judged) and not handed over
    # for it: observe hands over only a partition that needs attention and has nothing queued, so a write
    # that lands while its merge is queued, or leaves a partition below the attention threshold, would
    # otherwise never be judged at its settle and cold moments (the simulator judges every written
    # partition then). One file has nothing to merge.
    unjudged = or_(p.last_decision_at.is_(None), p.updated_at > p.last_decision_at)
    candidates = or_(and_(p.last_decision.in_(LIVE_VERDICTS + ("merge",)), p.updated_at <= p.last_decision_at),
                     and_(unjudged, p.n_files > 1))
    query = select(p.table_id, p.spec_id, p.partition_key).join(t, t.id == p.table_id)
    if settings.late_horizon_finish:
        # each spec's span as the listener keeps it (migration 0016): aggregating every partition of the
        # table per row instead took 311 ms per pass at 1,000 tables of 48 hours and 3.1 s at 10,000
        query = with_span(query)
        due = or_(due, and_(p.last_decision.in_(LIVE_VERDICTS), past_horizon()))
    busy = (select(a.id).where(a.table_id == p.table_id, a.spec_id == p.spec_id, a.partition_key == p.partition_key,
                               a.state.in_([ActionState.QUEUED.value, ActionState.RUNNING.value])).exists())
    with session_scope(settings) as session:
        rows = session.execute(query.where(candidates, due, ~busy)).all()
    return [(int(ti), int(sp), str(k)) for ti, sp, k in rows]


def _choose(settings: Settings, identifier: str, spec_id: int, partition_key: str, tuning: Any,
            table_id: int | None = None, known: PlanningFacts | None = None) -> Any:
    """The decision for one partition of the table as it is now (None when the partition is gone)."""

    table = load_table(settings, identifier)
    found = select_partitions(table, spec_id, partition_key)
    if not found:
        return None
    request = planning_request(settings, identifier, tuning, spec_id=spec_id, partition_key=partition_key,
                               table_id=table_id, known=known)
    return choose(table, found[0], request, frozenset(tuning.allowed_actions))


def record_decision_failure(settings: Settings, table_id: int, spec_id: int, partition_key: str,
                            exc: BaseException) -> None:
    """A partition decide or submit could not handle: an audit record ``decision.failed`` with the reason
    (status shows the count and the last reason per table), and an ERROR log line once per table and
    cause in this process, not once per snapshot."""
    if isinstance(exc, TableRefused):  # the whole table: audited once per cause, not per partition or snapshot

        with session_scope(settings) as session:
            row = session.get(TrackedTable, table_id)
            identifier = row.identifier if row is not None else str(table_id)
        note_refused(settings, identifier, exc)
        return
    reason = f"{type(exc).__name__}: {exc}"
    cause = type(exc).__name__ if not isinstance(exc, AutoOptimizeError) else f"{type(exc).__name__}:{str(exc)[:80]}"
    try:
        with session_scope(settings) as session:
            audit(session, "decision.failed", table_id=table_id, spec_id=spec_id, partition=partition_key,
                  reason=reason[:2000])
    except Exception as db_exc:  # PostgreSQL itself may be what failed: the log line must still say why
        log.error("table %s partition %s: decide failed (%s) and could not be recorded: %s", table_id,
                  partition_key, reason, db_exc)
        return
    if (table_id, cause) not in _reported:
        _reported.add((table_id, cause))
        log.error("table %s partition %s: decide failed: %s (recorded as decision.failed; further failures of "
                  "this kind on this table are only recorded)", table_id, partition_key, reason)


def on_attention_handler(settings: Settings, dispatch: Dispatch) -> Callable[[int, int, str], None]:
    """The listener's ``on_attention``: decide and hand the chosen action, if any, to ``dispatch``."""

    def handle(table_id: int, spec_id: int, partition_key: str) -> None:
        try:
            action_id = submit_for_partition(settings, table_id, spec_id, partition_key, dispatch=dispatch)
        except Exception as exc:  # recorded and shown in status; the listener goes on with the others
            record_decision_failure(settings, table_id, spec_id, partition_key, exc)
            return
        if action_id:
            log.info("table %s partition %s: merge %s submitted", table_id, partition_key, action_id)

    return handle
