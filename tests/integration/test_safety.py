"""Safe defaults and secrets (issue 13): reading a table never tracks it, destructive hygiene is off until
allowed per table, and no password or token reaches a message, a log, a stored error, the audit log or
Flower. Real PostgreSQL, Redis and Iceberg tables on disk."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import column as sa_column
from sqlalchemy import create_engine, insert, select
from sqlalchemy import table as sa_table
from sqlalchemy.dialects.postgresql import JSONB

from autooptimize import api
from autooptimize.cli import main as cli_main
from autooptimize.config import load_settings
from autooptimize.errors import ConfigError, InvalidArgument
from autooptimize.services import actions, hygiene
from autooptimize.storage.db import session_scope, upgrade
from autooptimize.storage.models import Action, AuditLog, TrackedTable
from tests.helpers import cli
from tests.integration.state import assert_unchanged, everything
from tests.integration.tables import DAY1, DAY2, identifier, make_table

DESTRUCTIVE_ACTIONS = ("expire_snapshots", "remove_orphans")



def _tracked(settings, ident: str) -> TrackedTable | None:
    with session_scope(settings) as s:
        return s.scalars(select(TrackedTable).where(TrackedTable.identifier == ident)).one_or_none()


# ------------------------------------------------------------------------------------------ safe defaults


def test_reading_a_table_never_tracks_it(settings, catalog, capsys):
    table = make_table(catalog, {DAY1: 4, DAY2: 2}, rows=20)
    ident = identifier(table)
    before = everything(settings)

    assert cli_main(["optimize", ident, "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert (planned["state"], planned["reason"], planned["id"]) == ("skipped", "dry_run", None)
    assert cli_main(["optimize", ident, "--action", "remove_orphans", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "dry_run"
    handle = api.optimize(ident, partition="day=2026-01-01", dry_run=True)
    assert handle.id is None and handle.wait(timeout=1)["reason"] == "dry_run" and handle.done
    assert cli_main(["explain", ident, "--json"]) == 0
    assert cli_main(["status", ident, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["tracked"] is False
    assert cli_main(["whatif", ident, "--target-size", "1MiB,2MiB", "--json"]) == 0

    assert cli_main(["scan", ident]) == 2  # scanning keeps a tracked table's figures: this one is not tracked
    assert "not tracked" in capsys.readouterr().err

    assert _tracked(settings, ident) is None
    assert_unchanged(before, everything(settings), "a read or a dry run")


def test_destructive_hygiene_is_off_until_allowed_per_table(settings, catalog, capsys):
    table = make_table(catalog, {DAY1: 3}, rows=5)
    table.transaction().set_properties({"history.expire.max-snapshot-age-ms": "1"}).commit_transaction()
    ident = identifier(table)
    now = datetime.now(UTC)

    assert cli_main(["track", ident, "--json"]) == 0
    allowed = json.loads(capsys.readouterr().out)["allowed_actions"]
    assert allowed == ["merge", "sort", "zorder", "rewrite_manifests", "compact_deletes"]
    assert not set(allowed) & set(DESTRUCTIVE_ACTIONS)
    # what beat's sweep would submit for the table: nothing that deletes, though snapshots are past retention
    kinds = [d.kind for d in hygiene.hygiene_decisions(settings, table, allowed, None, now)]
    assert not set(kinds) & set(DESTRUCTIVE_ACTIONS)

    assert cli_main(["track", ident, "--allow", "expire_snapshots,remove_orphans", "--json"]) == 0
    allowed = json.loads(capsys.readouterr().out)["allowed_actions"]
    assert set(DESTRUCTIVE_ACTIONS) <= set(allowed) and "merge" in allowed
    kinds = [d.kind for d in hygiene.hygiene_decisions(settings, table, allowed, None, now)]
    assert {"expire_snapshots", "remove_orphans"} <= set(kinds)
    with session_scope(settings) as s:
        tuned = s.scalars(select(AuditLog).where(AuditLog.event == "table.tuned").order_by(AuditLog.id.desc())
                          .limit(1)).one()
    assert tuned.detail["identifier"] == ident and "remove_orphans" in tuned.detail["tuning"]["allowed_actions"]

    assert cli_main(["track", ident, "--disallow", "remove_orphans"]) == 0
    assert "remove_orphans" not in _tracked(settings, ident).allowed_actions
    assert "expire_snapshots" in _tracked(settings, ident).allowed_actions
    # the Python API: the same, as lists or text
    assert set(api.track(ident, disallow=["expire_snapshots"])["allowed_actions"]).isdisjoint(DESTRUCTIVE_ACTIONS)
    with pytest.raises(InvalidArgument, match="allow names 'delete_everything'"):
        api.track(ident, allow="delete_everything")


def test_an_ad_hoc_action_tracks_with_the_safe_defaults(settings, catalog):
    table = make_table(catalog, {DAY1: 2}, rows=5)
    ident = identifier(table)
    actions.submit(settings, ident, kind="rewrite_manifests", dispatch=False)
    assert set(_tracked(settings, ident).allowed_actions).isdisjoint(DESTRUCTIVE_ACTIONS)


# ao_tracked_tables as revision 0005 has it: an insert through the model would name the model's later columns
_TRACKED_0005 = sa_table("ao_tracked_tables", *(sa_column(n) for n in (
    "catalog", "identifier", "target_file_size", "tolerance", "min_input_files", "priority_class", "weight",
    "min_interval_seconds", "enabled")), sa_column("allowed_actions", JSONB))


def test_migration_turns_off_only_the_old_default(settings):
    """Tables tracked by earlier versions: the old default (all six kinds) loses the destructive two, a list
    someone narrowed is kept, each change is audited, and the downgrade gives exactly those back."""
    from alembic import command

    from autooptimize.storage.db import _engines, alembic_config

    url = settings.database_url.rsplit("/", 1)[0] + f"/ao_mig_{uuid.uuid4().hex[:8]}"
    mig = settings.model_copy(update={"database_url": url})
    old_default = ["merge", "sort", "rewrite_manifests", "expire_snapshots", "remove_orphans", "compact_deletes"]
    try:
        upgrade(mig, "0005")
        with session_scope(mig) as s:  # only the columns revision 0005 has (not the model's later ones)
            for name, allowed in (("a.everything", old_default), ("a.narrowed", ["merge", "expire_snapshots"]),
                                  ("a.merge_only", ["merge"])):
                s.execute(insert(_TRACKED_0005).values(
                    catalog="c", identifier=name, target_file_size=1, tolerance=1, min_input_files=2,
                    priority_class="normal", weight=1, allowed_actions=allowed, min_interval_seconds=0,
                    enabled=True))
        upgrade(mig, "head")
        with session_scope(mig) as s:
            after = dict(s.execute(select(TrackedTable.identifier, TrackedTable.allowed_actions)).tuples().all())
            audited = s.scalars(select(AuditLog).where(AuditLog.event == "table.tuned")).all()
        # 0006 takes the destructive two from the old default; 0008 allows zorder wherever sort is
        assert after == {"a.everything": ["merge", "sort", "rewrite_manifests", "compact_deletes", "zorder"],
                         "a.narrowed": ["merge", "expire_snapshots"], "a.merge_only": ["merge"]}
        assert [(a.detail["identifier"], a.detail["migration"]) for a in audited] == [("a.everything", "0006")]
        command.downgrade(alembic_config(mig), "0005")
        with session_scope(mig) as s:
            back = dict(s.execute(select(TrackedTable.identifier, TrackedTable.allowed_actions)).tuples().all())
        assert sorted(back["a.everything"]) == sorted(old_default) and back["a.narrowed"] == ["merge", "expire_snapshots"]
    finally:
        for key in [k for k in _engines if k[1] == url]:
            _engines.pop(key).dispose()
        admin = create_engine(os.environ["AO_TEST_ADMIN_URL"], isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
        admin.dispose()


# ---------------------------------------------------------------------------------------------- secrets


def test_redis_password_never_printed(settings, catalog):
    table = make_table(catalog, {DAY1: 2}, rows=5)
    for url in ("redis://:Hunter2-Redis-Pw@127.0.0.1:1/0", "redis://default:Hunter2-Redis-Pw@127.0.0.1:1/0",
                "redis://127.0.0.1:1/0?password=Hunter2-Redis-Pw"):
        result = cli("optimize", identifier(table), env={"AO_REDIS_URL": url})
        assert result.returncode == 3, result.stderr
        assert "cannot reach Redis" in result.stderr and "127.0.0.1:1" in result.stderr
        assert "Hunter2" not in result.stderr + result.stdout, result.stderr


def test_stored_errors_and_the_audit_log_are_redacted(settings, catalog):
    table = make_table(catalog, {DAY1: 2}, rows=5)
    ident = identifier(table)
    action_id = actions.submit(settings, ident, kind="rewrite_manifests", dispatch=False)
    error = ("ServiceUnavailable: cannot reach Redis at redis://:Audit-Pw-991@redis:6379/0; "
             "catalog sc://spark:15002/;token=Audit-Tok-882")
    out = actions.fail_permanently(settings, action_id, error)
    assert out["state"] == "failed"
    with session_scope(settings) as s:
        stored = s.get(Action, action_id).error
        details = [json.dumps(a.detail) for a in s.scalars(select(AuditLog).where(AuditLog.action_id == action_id))]
    assert stored == "ServiceUnavailable: cannot reach Redis at redis://:***@redis:6379/0; catalog sc://spark:15002/;token=***"
    assert any("redis://:***@redis" in d for d in details)
    assert not any("Audit-Pw" in d or "Audit-Tok" in d for d in details)


def test_flower_task_arguments_are_redacted(settings):
    from tasks.send import send_action

    client = redis.Redis.from_url(settings.redis_url)
    action_id = str(uuid.uuid4())
    send_action(settings, action_id, priority_class="low",
                label={"table": "ns.t", "partition": "src=redis://:Flower-Pw-773@h:6379/0", "kind": "merge"})
    found = []
    for key in client.keys("ao.actor.low*"):
        for raw in client.lrange(key, 0, -1):
            if action_id.encode() in raw:
                found.append(raw)
                client.lrem(key, 0, raw)  # no worker may run it
    client.close()
    assert len(found) == 1
    headers = json.loads(found[0])["headers"]
    assert "Flower-Pw" not in headers["kwargsrepr"] and "redis://:***@h:6379/0" in headers["kwargsrepr"]


@pytest.mark.parametrize("name", ["AO_FLOWER_PASSWORD", "AO_SPARK_TOKEN"])
def test_empty_passwords_and_tokens_are_refused(settings, name, monkeypatch):
    result = cli("status", env={name: ""})
    assert result.returncode == 2 and f"{name}: is empty" in result.stderr, result.stderr
    monkeypatch.setenv(name, "")
    with pytest.raises(ConfigError, match=name):
        load_settings()


def test_flower_credentials_file_without_a_password_is_refused(settings, tmp_path):
    from autooptimize.cli.runtime import flower_credentials

    home = settings.model_copy(update={"home": tmp_path, "flower_password": None})
    (tmp_path / "flower-credentials").write_text("admin:\n")
    with pytest.raises(ConfigError, match="holds no user:password"):
        flower_credentials(home)
    (tmp_path / "flower-credentials").unlink()
    user, password, path = flower_credentials(home)
    assert user == "admin" and len(password) >= 16 and path == tmp_path / "flower-credentials"

