"""/metrics after actions that ran in two worker processes: every counter equals what PostgreSQL holds;
the CLI's history, and status with nothing tracked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from sqlalchemy import func, select

from autooptimize.services import actions, tracking
from autooptimize.services.observe.scan import scan_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, AuditLog, PartitionStats, TrackedTable
from tests.integration.tables import DAY1, DAY2, identifier, make_table
from tests.integration.web import ROOT, console_process, families, get, samples, scrape

pytestmark = pytest.mark.spark

# One worker process: executes the action ids it is given, one after the other, as a Celery task would.
WORKER = r"""
import os, sys
from autooptimize.config import get_settings
from autooptimize.services.actions import execute
from spark_actors.session import close_session

settings = get_settings()
for action_id in sys.argv[1:]:
    print(os.getpid(), action_id, execute(settings, action_id)["state"], flush=True)
close_session()
"""


def _run_in_two_processes(batches: list[list[str]]) -> list[tuple[int, str, str]]:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, *ids], cwd=ROOT, env=os.environ, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for ids in batches]
    done: list[tuple[int, str, str]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        done += [(int(pid), action_id, state) for pid, action_id, state in (line.split() for line in out.splitlines())]
    return done


def _db_figures(settings, name: str) -> dict[str, object]:
    with session_scope(settings) as s:
        rows = s.execute(select(Action.kind, Action.state, Action.trigger, func.count())
                         .group_by(Action.kind, Action.state, Action.trigger)).all()
        finished = dict(s.execute(select(Action.kind, func.count()).where(Action.finished_at.is_not(None),
                                                                          Action.started_at.is_not(None))
                                  .group_by(Action.kind)).all())
        merged = s.execute(select(func.coalesce(func.sum(Action.bytes_in), 0)).where(
            Action.kind == "merge", Action.committed_snapshot_id.is_not(None))).scalar_one()
        plans = [p for (p,) in s.execute(select(Action.plan).where(Action.plan.is_not(None)))]
        aborted = s.execute(select(func.count()).select_from(Action).where(
            Action.state == "aborted", Action.reason == "conflict")).scalar_one()
        failures = s.execute(select(func.count()).select_from(AuditLog)
                             .where(AuditLog.event == "decision.failed")).scalar_one()
        files = s.execute(select(func.sum(PartitionStats.n_files)).join(
            TrackedTable, TrackedTable.id == PartitionStats.table_id).where(TrackedTable.identifier == name)).scalar_one()
    terminal = {(k, st, t): n for k, st, t, n in rows if ActionState(st).terminal}
    return {"terminal": terminal, "finished": finished, "merged_bytes": int(merged), "aborted": int(aborted),
            "retried": sum(int((p.get("commit") or {}).get("conflicts") or 0) for p in plans),
            "decision_failures": int(failures), "files": int(files)}


def test_metrics_equal_the_database_after_actions_in_two_worker_processes(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 5, DAY2: 4}, rows=400)
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB",
                   allowed_actions="merge,rewrite_manifests,expire_snapshots")
    submit = lambda **kw: actions.submit(settings, name, **kw)  # noqa: E731  (recorded only: no dispatch)
    # one process merges (Spark), the other tidies metadata at the same time (no Spark: one session is enough)
    first = [submit(partition="day=2026-01-01"), submit(partition="day=2026-01-02")]
    second = [submit(kind="rewrite_manifests", options={"manifest_threshold": 1}),
              submit(kind="expire_snapshots", options={"older_than": "1s", "allow_short_retention": "true"})]

    done = _run_in_two_processes([first, second])

    assert len({pid for pid, _, _ in done}) == 2, "the actions must have run in two processes"
    states = {action_id: state for _, action_id, state in done}
    assert states[first[0]] == states[first[1]] == "succeeded", done
    assert all(ActionState(s).terminal for s in states.values())
    scan_table(settings, name, None, reason="test")  # the partition statistics the table metrics read
    db = _db_figures(settings, name)

    with console_process() as (base, auth):
        assert get(f"{base}/metrics")[0] == 401, "metrics require credentials"
        text = scrape(base, auth)
    metrics = samples(text)

    counted = {(dict(labels)["kind"], dict(labels)["state"], dict(labels)["trigger"]): value
               for (sample, labels), value in metrics.items() if sample == "autooptimize_actions_total"}
    assert counted == db["terminal"]
    assert counted[("merge", "succeeded", "ad-hoc")] >= 2
    for kind, count in db["finished"].items():
        assert metrics[("autooptimize_action_seconds_count", (("kind", kind),))] == count
        assert metrics[("autooptimize_action_seconds_bucket", (("kind", kind), ("le", "+Inf")))] == count
    assert metrics[("autooptimize_bytes_rewritten_total", (("kind", "merge"),))] == db["merged_bytes"]
    with session_scope(settings) as s:
        ours = s.execute(select(func.sum(Action.bytes_in)).where(Action.id.in_(first))).scalar_one()
    assert db["merged_bytes"] >= ours > 0
    assert metrics[("autooptimize_commit_conflicts_total", (("outcome", "retried"),))] == db["retried"]
    assert metrics[("autooptimize_commit_conflicts_total", (("outcome", "aborted"),))] == db["aborted"]
    assert metrics[("autooptimize_decision_failures_total", ())] == db["decision_failures"]
    assert metrics[("autooptimize_table_files", (("table", name),))] == db["files"] == len(
        table.refresh().inspect.files())
    # one file of KBs each: at the best layout their bytes allow, healthy by the one health rule (issue 25)
    assert metrics[("autooptimize_partitions_over_threshold", (("table", name),))] == 0
    for cls in settings.priority_classes:
        assert ("autooptimize_queue_depth", (("priority_class", cls),)) in metrics
    assert metrics[("autooptimize_source_up", (("source", "postgresql"),))] == 1
    assert metrics[("autooptimize_source_up", (("source", "redis"),))] == 1
    # the names, and every metric the Grafana dashboard in deploy/ queries, are served
    declared = families(text)
    assert {"autooptimize_actions", "autooptimize_action_seconds", "autooptimize_bytes_rewritten",
            "autooptimize_commit_conflicts", "autooptimize_decision_failures", "autooptimize_partitions_over_threshold",
            "autooptimize_table_files", "autooptimize_queue_depth"} <= declared
    dashboard = (ROOT / "deploy" / "grafana" / "autooptimize.json").read_text()
    queried = {re.sub(r"_(total|bucket|count|sum)$", "", m) for m in re.findall(r"autooptimize_\w+", dashboard)}
    assert queried - {"autooptimize"} <= declared, queried - declared


def test_history_and_status_with_nothing_tracked(settings, catalog, capsys, monkeypatch):
    from autooptimize.cli import actions as cli_actions
    from autooptimize.cli import main

    table = make_table(catalog, {DAY1: 3})
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB", allowed_actions="merge,rewrite_manifests")
    action_id = actions.submit(settings, name, kind="rewrite_manifests", options={"manifest_threshold": 1})
    actions.execute(settings, action_id, spark=None)

    assert main(["history", name, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    with session_scope(settings) as s:
        recorded = s.get(Action, action_id)
        assert [r["id"] for r in rows] == [action_id]
        assert rows[0]["files_in"] == recorded.files_in and rows[0]["state"] == recorded.state
        assert rows[0]["seconds"] == pytest.approx((recorded.finished_at - recorded.started_at).total_seconds())
    assert main(["history", name]) == 0
    text = capsys.readouterr().out
    assert "rewrite_manifests" in text and recorded.state in text

    monkeypatch.setattr(cli_actions, "current_settings", lambda: settings.model_copy(update={"catalog": "empty"}))
    assert main(["status"]) == 0
    assert "no table is tracked" in capsys.readouterr().out
