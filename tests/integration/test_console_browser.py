"""The console in a real browser, served by ``autooptimize up`` after a demo-sized run.

Headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by selenium; no browser is
downloaded) logs in with the generated password, opens every page and checks what it shows against
PostgreSQL and the table's live files. Screenshots go to ``$AO_TEST_ARTIFACTS/console`` (default
``.artifacts/console``). The same ``up`` shows Flower listing a sort and an expiry under their own task
names, and answers 401 to a request without credentials.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from autooptimize import api
from autooptimize.domain.histogram import power_of_two_edges, size_histogram
from autooptimize.services.autotune import suggest
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, AuditLog, TrackedTable
from autooptimize.storage.repositories import audit, audit_events, tracked_table
from tests.helpers import free_port
from tests.integration.tables import batch, identifier, live_files, make_table
from tests.integration.web import ROOT, get, wait_until_answering

pytestmark = [pytest.mark.spark, pytest.mark.browser]

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("AO_TEST_ARTIFACTS") or ROOT / ".artifacts") / "console"
DAYS = [dt.date(2026, 1, d) for d in (1, 2, 3, 4)]


def _chromium_or_skip() -> None:
    """Skip (with the reason) only when Chromium is missing and scripts/browser.sh cannot install it."""
    def present() -> bool:
        return all(os.access(p, os.X_OK) for p in (CHROMIUM, DRIVER))

    if not present():
        tried = subprocess.run(["bash", str(ROOT / "scripts" / "browser.sh")], capture_output=True, text=True,
                               timeout=900)
        if not present():
            pytest.skip("Debian's chromium and chromium-driver are not installed and scripts/browser.sh could "
                        f"not install them: {(tried.stderr or tried.stdout).strip()[-300:]}")
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")


@pytest.fixture()
def service(settings, spark) -> Iterator[dict[str, Any]]:
    """``autooptimize up`` (one worker, no beat) with Flower and the console on free ports."""
    _chromium_or_skip()
    ports = {"flower": free_port(), "console": free_port()}
    env = {**os.environ, "AO_FLOWER_PORT": str(ports["flower"]), "AO_FLOWER_USER": "ops",
           "AO_FLOWER_PASSWORD": "flower-pw", "AO_CONSOLE_PORT": str(ports["console"]),
           "AO_WORKER_CONCURRENCY": "1"}  # one Spark session to start on two shared cores, not two
    env.pop("AO_CONSOLE_PASSWORD", None)  # generated into AO_HOME, as a first run would
    proc = subprocess.Popen([sys.executable, "-m", "autooptimize.cli", "up", "--workers", "1", "--no-beat"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{ports['console']}"
        wait_until_answering(f"{base}/api/tables", proc, timeout=120)
        wait_until_answering(f"http://127.0.0.1:{ports['flower']}/", proc, timeout=120)
        user, password = (settings.home_dir / "console-credentials").read_text().strip().split(":", 1)
        yield {"base": base, "auth": (user, password), "flower": f"http://127.0.0.1:{ports['flower']}"}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            output = proc.communicate(timeout=90)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert "autooptimize stopped" in output, output[-2000:]


def _wait_for_actions(settings, name: str, ids: list[str], timeout: float = 300) -> None:
    """Until ``ids`` are final and the table has had nothing queued or running for 3 s."""
    deadline, quiet_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        with session_scope(settings) as s:
            busy = s.execute(select(func.count()).select_from(Action).join(TrackedTable).where(
                TrackedTable.identifier == name, Action.state.in_(["queued", "running"]))).scalar_one()
            pending = s.execute(select(func.count()).select_from(Action).where(
                Action.id.in_(ids), Action.state.in_(["queued", "running"]))).scalar_one()
        if busy or pending:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"actions of {name} still queued or running after {timeout} s")


def _driver(base: str, auth: tuple[str, str]):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.set_page_load_timeout(60)
    # log in as a person would: the credentials once, then the browser resends them for the origin
    driver.get(base.replace("http://", f"http://{auth[0]}:{auth[1]}@") + "/tables")
    return driver


def _open(driver, base: str, path: str, shot: str) -> None:  # type: ignore[no-untyped-def]
    driver.get(base + path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not driver.execute_script("return document.body.dataset.ready"):
        time.sleep(0.2)
    ready = driver.execute_script("return document.body.dataset.ready")
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(height + 40, 700), 4000))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{shot}.png"))
    error = driver.execute_script("return document.getElementById('error').textContent")
    assert ready == "true", f"{path} did not render: {error}"


def _cells(driver, testid: str, col: str) -> list[str]:  # type: ignore[no-untyped-def]
    return driver.execute_script(
        "return [...document.querySelectorAll(`[data-testid='${arguments[0]}'] tbody td[data-col='${arguments[1]}']`)]"
        ".map((c) => c.textContent)", testid, col)


def _histogram(driver, testid: str) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """series name -> counts per bucket, as the page's numbers table shows them under the chart."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll(`table[data-testid='${arguments[0]}'] tbody tr`)].map((r) => "
        "[r.dataset.series, [...r.querySelectorAll('td[data-bucket]')].map((c) => c.textContent)])", testid)
    return {name: [int(c) for c in counts] for name, counts in rows}


def _to_fixed(x: float, digits: int) -> str:
    """``x.toFixed(digits)`` as the console's JavaScript writes it: the exact binary value, a tie rounded up
    (Python's format rounds a tie to even: 1280 bytes is 1.2 KiB there and 1.3 KiB in the browser)."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _card(driver, testid: str) -> str:  # type: ignore[no-untyped-def]
    return driver.execute_script("return document.querySelector(`[data-testid='${arguments[0]}']`).textContent",
                                 testid)


def test_console_pages_show_the_database_after_a_demo_sized_run(settings, catalog, spark, service):
    table = make_table(catalog, {day: 8 for day in DAYS}, rows=300, name="demo")
    name = identifier(table)
    api.track(name, settings=settings, target_file_size="1MiB", sort_order="id",
              allowed_actions="merge,sort,expire_snapshots")
    # AutoAnalyze's, recorded on the table; the table has no merge of its own yet, so what merged files weigh
    # is calibrated on the executors
    first = suggest(settings, name, spark=lambda: spark)
    time.sleep(1.1)  # eleven writer commits after it, then real merges
    for i in range(11):
        table.append(batch(100_000 + 300 * i, 300, DAYS[0]))
        time.sleep(0.3)
    merges = [api.optimize(name, partition=f"day={d.isoformat()}", settings=settings).id for d in DAYS[:3]]
    sort = api.optimize(name, partition=f"day={DAYS[3].isoformat()}", action="sort", settings=settings).id
    _wait_for_actions(settings, name, [*merges, sort])
    # the next suggestion checks the first against what the table did (the expiry below ends the history); it
    # reuses the first's calibration. Whether this check asks a margin depends on whether the replay merged
    # during these commits and the table did not (seen both ways), so the table also has an earlier check on
    # record that asked 8 % (the margin is the largest of its last three checks: domain.suggest), and the page
    # must say its goal is judged with it
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, name)
        audit(session, "table.tuning_checked", table_id=row.id, identifier=name, since_ms=0, commits=30,
              realised={"bytes_rewritten": 1 << 20}, relative_error={"mean_live_files": 0.08})
    suggestion = suggest(settings, name, spark=lambda: spark)
    assert suggestion["output_calibration"] == first["output_calibration"]
    assert suggestion["check"]["commits"] == 11, suggestion["check"]
    assert suggestion["live_files_bias"] >= 1.08 and suggestion["margin_checks"] == 2, suggestion
    expiry = api.optimize(name, action="expire_snapshots", settings=settings,
                          options={"older_than": "1s", "allow_short_retention": "true", "retain_last": "2"}).id
    _wait_for_actions(settings, name, [expiry])
    base, auth = service["base"], service["auth"]

    # without credentials: 401 everywhere, assets and metrics included
    for path in ("/tables", "/api/tables", "/metrics", "/static/console.js", "/api/openapi.json"):
        assert get(base + path)[0] == 401, path
    assert get(base + "/api/tables", (auth[0], "wrong"))[0] == 401

    # Flower (through `up`) lists the sort and the expiry under their own task names
    deadline, tasks = time.monotonic() + 30, {}
    while time.monotonic() < deadline and not {sort, expiry} <= set(tasks):
        status, body = get(f"{service['flower']}/api/tasks", ("ops", "flower-pw"))
        tasks = json.loads(body or b"{}") if status == 200 else {}
        time.sleep(1)
    assert tasks[sort]["name"] == "autooptimize.sort"
    assert tasks[expiry]["name"] == "autooptimize.expire_snapshots"

    sizes = {day: [] for day in DAYS}
    table.refresh()
    for row in table.inspect.files().select(["file_size_in_bytes", "partition"]).to_pylist():
        sizes[row["partition"]["day"]].append(int(row["file_size_in_bytes"]))
    every = [s for group in sizes.values() for s in group]
    assert len(every) == len(live_files(table))
    with session_scope(settings) as s:
        mine = list(s.scalars(select(Action).join(TrackedTable).where(TrackedTable.identifier == name)
                              .order_by(Action.created_at.desc(), Action.id)))
        merge = next(a for a in mine if a.kind == "merge" and a.state == "succeeded")
        merge_plan, merge_checkpoint = merge.plan, merge.checkpoint
        merge_audit = len(audit_events(s, merge.id))
        all_actions = _catalog_actions(s, settings)
        failures = s.execute(select(func.count()).select_from(AuditLog).join(
            TrackedTable, TrackedTable.id == AuditLog.table_id).where(
            TrackedTable.identifier == name, AuditLog.event == "decision.failed")).scalar_one()

    driver = _driver(base, auth)
    try:
        _open(driver, base, "/tables", "tables")
        row = driver.execute_script("return [...document.querySelectorAll(`tr[data-table='${arguments[0]}'] td`)]"
                                    ".map((c) => [c.dataset.col, c.textContent])", name)
        shown = {k: v for k, v in row if k}
        assert shown["files"] == str(len(every))
        assert shown["failures"] == str(failures)
        assert shown["small"].startswith(f"{sum(1 for s in every if s < 1024 * 1024)} ")

        _open(driver, base, f"/tables/{name}", "table")
        assert _card(driver, "files") == f"{len(every):,}"
        tuning = suggestion["tuning"]
        assert (f"fan-in {tuning['fan_in']}, cold after {tuning['cold_after_seconds']:g} s"
                in _card(driver, "suggestion")), _card(driver, "suggestion")
        own = (f" (or {tuning['cold_gap_factor']:g} × a partition's recent gaps between writes)"
               if tuning["cold_gap_factor"] else "")
        assert f"cold after {tuning['cold_after_seconds']:g} s{own}, leave alone" in _card(driver, "suggestion")
        assert f"from {suggestion['commits']} commits" in _card(driver, "suggestion")
        # the table has no merge of its own yet: its calibration, which comes before the other tables' fit
        cal, overhead = suggestion["output_calibration"], suggestion["file_overhead"]
        assert cal is not None and cal["groups"] >= 6 and not suggestion["output_borrowed"], suggestion
        alone = (f"; a writer's file alone weighs {_to_fixed(cal['first_ratio'], 3)}× its bytes before that)"
                 if overhead is not None and cal["first_ratio"] != 1 else ")")
        borrowed = (("" if overhead is None else f" less {_to_fixed(overhead / 1024, 1)} KiB per file removed")
                    + f" (calibrated: {cal['groups']} groups and {cal['singles']} single files of the table's "
                    f"rewritten by the spark engine and removed{alone}")
        # and the other tables' merge timings, when this run has merged enough of them after deciding them
        timed = (f"median of the service's last {suggestion['latency_merges']} merges of other tables; too few of its own"
                 if suggestion["latency_borrowed"] else "assumed: too few merges yet")
        assert _card(driver, "suggestion-replay") == (
            f"replayed with merges landing {_to_fixed(suggestion['latency_seconds'], 2)} s after the write that prompted them "
            f"({timed}), merged bytes weighing {_to_fixed(suggestion['output_ratio'], 2)}× their "
            f"inputs{borrowed}, settled and cold partitions judged {_to_fixed(suggestion['timer_lag_seconds'], 2)} s after their moment (the service's measured lag); "
            f"the mean of {suggestion['clock_phases']} replays on the listener's {suggestion['listener_pass_seconds']:g} s "
            f"passes at other phases")
        check = suggestion["check"]
        assert _card(driver, "suggestion-check").startswith(
            "since the last suggestion or tuning (11 commits): predicted ")
        assert _card(driver, "suggestion-check").endswith(
            f"; realised {_to_fixed(check['realised']['mean_live_files'], 1)} live files, WA "
            f"{_to_fixed(check['realised']['write_amplification'], 2)}"
            + f"; so this suggestion's file goal is judged on {_to_fixed(suggestion['live_files_bias'], 3)}× the "
            "live files its replay predicts"), \
            _card(driver, "suggestion-check")
        assert suggestion["end_in_force"] is None  # no partition finished in the check: no end card
        assert driver.execute_script("return document.querySelector(`[data-testid='suggestion-end']`)") is None
        edges = power_of_two_edges(every, 1024 * 1024)
        assert _histogram(driver, "hist-table") == {"table": list(size_histogram(every, edges).counts)}
        assert len(_cells(driver, "partitions", "partition")) == len(DAYS)
        worst = _cells(driver, "partitions", "partition")[0]
        day = dt.date.fromisoformat(worst.split("=")[1])
        assert list(_histogram(driver, "hist-partition").values()) == [list(size_histogram(sizes[day], edges).counts)]
        # the merge's before/after: its plan's input sizes and its committed outputs, from PostgreSQL
        before = [s for p in merge_plan["partitions"] for g in p["groups"] for s in g["sizes"]]
        after = [s for g in merge_checkpoint["groups"] for s in g["output_sizes"]]
        ba_edges = power_of_two_edges(before + after, 1024 * 1024)
        assert _histogram(driver, f"ba-{merge.id}") == {"before": list(size_histogram(before, ba_edges).counts),
                                                        "after": list(size_histogram(after, ba_edges).counts)}
        assert sum(size_histogram(before, ba_edges).counts) == merge.files_in

        # a suggestion made with no check of its own judges the tuning in force's end layout on an earlier check
        since = 1_796_152_806_000
        with session_scope(settings) as session:
            row = tracked_table(session, settings.catalog, name)
            row.suggested_tuning = {**row.suggested_tuning, "check": None, "end_in_force": 0.25,
                                    "end_checked_since_ms": since, "live_in_force": 0.9416,
                                    "live_checked_since_ms": since,
                                    "passed_over": {"tuning": {**row.suggested_tuning["tuning"], "fan_in": 8},
                                                    "predicted": row.suggested_tuning["predicted"], "saving": 0.0005,
                                                    "phases_fewer": 4, "phases": 4, "switch_saving": 0.02,
                                                    "reason": "saving"}}
        _open(driver, base, f"/tables/{name}", "table-end-in-force")
        assert _card(driver, "suggestion-end") == (
            "the tuning in force's end layout judged on what the table did (missed by 25 %, as the check of the "
            f"commits since {dt.datetime.fromtimestamp(since / 1000, dt.UTC).isoformat(timespec='milliseconds')[:-6]}Z "
            "saw it), not on its replay")
        assert _card(driver, "suggestion-live").startswith(
            "the tuning in force's live files judged on what the table kept: 0.942× its replay's, as the check of "
            "the commits since 20")
        kept = _card(driver, "suggestion-kept")  # the tuning the tuning in force was kept over, and why
        assert kept.startswith("the tuning in force is kept over ") and "fan-in 8, cold after" in kept, kept
        assert kept.endswith(": it would rewrite 0.05 % fewer bytes, under the 2 % a change needs"), kept

        _open(driver, base, "/actions", "actions")
        # the service under test keeps working (beat's hygiene sweep may queue actions of other tables):
        # the page shows this catalog's actions between the count before it and the count after it
        shown_total = int(_card(driver, "actions-total").split()[0].replace(",", ""))
        with session_scope(settings) as s:
            now_actions = _catalog_actions(s, settings)
        assert all_actions <= shown_total <= now_actions
        _open(driver, base, f"/actions?table={name}", "actions-filtered")
        assert _cells(driver, "actions", "kind") == [a.kind for a in mine]
        assert _cells(driver, "actions", "state") == [a.state for a in mine]
        assert _cells(driver, "actions", "files") == [f"{_n(a.files_in)} → {_n(a.files_out)}" for a in mine]
        _open(driver, base, f"/actions?table={name}&kind=sort", "actions-sort")
        assert _cells(driver, "actions", "kind") == ["sort"]

        _open(driver, base, f"/actions/{merge.id}", "action")
        assert _card(driver, "files") == f"{merge.files_in} → {merge.files_out}"
        assert _card(driver, "rows") == f"{merge.rows_in:,} → {merge.rows_out:,}"
        assert len(_cells(driver, "audit", "event")) == merge_audit
        assert _histogram(driver, "ba")["before"] == list(size_histogram(before, ba_edges).counts)

        _open(driver, base, f"/explain/{name}", "explain")
        assert _cells(driver, "explain", "partition") == sorted(f"day={d.isoformat()}" for d in DAYS)

        # the page shows the backlog as the queue holds it; the service under test keeps running (beat's
        # hygiene sweep may queue and run an action while the page loads), so compare when the queue held
        # still across the page's load, and see it drain to 0
        deadline, seen = time.monotonic() + 90, []
        while time.monotonic() < deadline:
            before = api.queues(settings=settings)["queued"]
            _open(driver, base, "/queues", "queues")
            shown_queued, after = _card(driver, "queued"), api.queues(settings=settings)["queued"]
            if before == after:
                assert shown_queued == f"{before:,}"
                seen.append(before)
                if before == 0:
                    break
            time.sleep(1)
        assert seen and seen[-1] == 0, f"the backlog did not drain to 0 within 90 s: {seen}"
        assert sorted(set(_cells(driver, "queues", "class"))) == sorted(settings.priority_classes)
    finally:
        driver.quit()


def _n(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def _catalog_actions(session, settings) -> int:
    """Actions of the catalog the console shows (the session's S3 tests use a catalog of their own)."""
    return session.execute(select(func.count()).select_from(Action).join(TrackedTable)
                           .where(TrackedTable.catalog == settings.catalog)).scalar_one()
