"""AutoAnalyze checks its own predictions: each re-evaluation puts the simulator's figures for the writer
commits since the previous suggestion (or since its tuning was set, when later) beside what the table did
in the same time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from sqlalchemy import select, text

from autooptimize.domain.replay_clock import CLOCK_PHASES, LISTENER_PASS_SECONDS
from autooptimize.domain.suggest import MAX_LIVE_FILES_BIAS
from autooptimize.services import tracking
from autooptimize.services.autotune import suggest
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import AuditLog, TrackedTable
from tests.integration.tables import DAY1, DAY2, batch, identifier, make_table


def test_the_next_suggestion_checks_the_previous_prediction_against_what_the_table_did(settings, catalog):
    table = make_table(catalog, {DAY1: 20}, rows=20, name="tuning_check")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    first = suggest(settings, name, min_commits=10)
    assert first["check"] is None  # nothing to check yet
    time.sleep(1.1)  # the next commits land after the suggestion's time
    for i in range(12):  # paced: the simulated merges (2 s after their decision) land within these commits
        table.append(batch(10_000 + 20 * i, 20, DAY1))
        time.sleep(0.4)
    # nothing merged the table meanwhile (no service runs here): the simulator did merge, the table did not
    shown = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                           capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "since the last suggestion or tuning (12 writer commits" in shown.stdout, shown.stdout
    assert "realised WA 0.00 (-100%)" in shown.stdout, shown.stdout
    with session_scope(settings) as session:
        row = session.scalars(select(TrackedTable).where(TrackedTable.identifier == name)).one()
        check = row.suggested_tuning["check"]
        [event] = session.scalars(select(AuditLog).where(AuditLog.table_id == row.id,
                                                         AuditLog.event == "table.tuning_checked")).all()
        assert event.detail["realised"] == check["realised"]
    assert check["commits"] == 12
    realised, predicted = check["realised"], check["predicted"]
    assert realised["commits"] == 12 and realised["bytes_rewritten"] == 0
    assert realised["write_amplification"] == 0.0 and check["relative_error"]["write_amplification"] == -1.0
    assert realised["mean_live_files"] == 20 + 6.5  # 21, 22, … 32 files after the 12 commits
    assert predicted["write_amplification"] > 0 and predicted["mean_live_files"] < realised["mean_live_files"]
    assert check["relative_error"]["mean_live_files"] > 0
    # the table kept more files than its replay said, but nothing merged it (no service runs here): that
    # says nothing of the replay, so no margin
    assert row.suggested_tuning["live_files_bias"] == 1.0 and "judged on" not in shown.stdout
    assert first["live_files_bias"] == 1.0  # nothing checked, no margin
    assert predicted["bytes_written"] == realised["bytes_written"]  # the same commits, the same bytes
    again = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest", "--json"],
                           capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert json.loads(again.stdout)["check"] is None  # no commit since the last suggestion


def test_a_table_tuned_by_hand_is_checked_from_when_its_tuning_was_set(settings, catalog):
    """No suggestion before: the first one checks the replay against what the table did since its owner
    set the tuning in force, and a later change of tuning starts the window again."""
    from autooptimize.services import actions
    from autooptimize.services.tracking import tuning_in_force_since

    table = make_table(catalog, {DAY1: 20}, rows=20, name="hand_tuned")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    time.sleep(1.1)
    tracking.track(settings, name, merge_fan_in=6)  # the tuning in force from here
    with session_scope(settings) as session:
        row = session.scalars(select(TrackedTable).where(TrackedTable.identifier == name)).one()
        set_at = tuning_in_force_since(session, row)
        tuned = session.scalars(select(AuditLog).where(AuditLog.table_id == row.id, AuditLog.event == "table.tuned")).one()
        assert row.suggested_at is None and set_at == tuned.at
    time.sleep(1.1)
    local = settings.model_copy(update={"rewrite_engine": "local"})
    for i in range(11):
        table.append(batch(10_000 + 20 * i, 20, DAY1))
        time.sleep(0.3)
        if i == 7:  # one real merge in the window, late: the table kept more files than the replay says
            assert actions.execute(local, actions.submit(local, name, dispatch=False), spark=None)["state"] == "succeeded"

    first = suggest(settings, name, min_commits=10)

    check = first["check"]
    assert check is not None and check["commits"] == 11 and check["tuning"]["fan_in"] == 6
    assert check["since_ms"] == int(set_at.timestamp() * 1000)
    assert check["realised"]["bytes_rewritten"] > 0
    error = check["relative_error"]["mean_live_files"]
    assert error > 0, check  # 21 … 28 files, then 2, 3, 4 after the merge
    assert first["live_files_bias"] == pytest.approx(min(MAX_LIVE_FILES_BIAS, 1 + error)) and first["live_files_bias"] > 1
    with session_scope(settings) as session:
        row = session.scalars(select(TrackedTable).where(TrackedTable.identifier == name)).one()
        assert tuning_in_force_since(session, row) == row.suggested_at > set_at  # the suggestion is later now
    # the next suggestion has no check of its own (no commit since): the margin its earlier check asked stays
    again = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest", "--json"],
                           capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert again.returncode == 0, again.stderr
    later = json.loads(again.stdout)
    assert later["check"] is None and later["margin_checks"] == 1
    assert later["live_files_bias"] == pytest.approx(first["live_files_bias"])


def test_the_replay_learns_what_merged_bytes_weigh_from_the_tables_replace_commits(settings, catalog):
    from autooptimize.services import actions
    from autooptimize.services.output_models import learned_output_ratio

    table = make_table(catalog, {DAY1: 24}, rows=20, name="output_ratio")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    assert learned_output_ratio(table) == 1.0  # no REPLACE commit yet
    local = settings.model_copy(update={"rewrite_engine": "local"})
    action_id = actions.submit(local, name, dispatch=False)
    assert actions.execute(local, action_id, spark=None)["state"] == "succeeded"
    table = table.refresh()
    summary = table.current_snapshot().summary
    assert summary.operation.value == "replace"
    expected = int(summary["added-files-size"]) / int(summary["removed-files-size"])
    assert expected != 1.0 and learned_output_ratio(table) == expected
    for i in range(12):  # more writer commits, so a suggestion has a history to replay
        table.append(batch(10_000 + 20 * i, 20, DAY1))
    assert suggest(settings, name, min_commits=10)["output_ratio"] == expected


def test_the_replay_fits_what_a_merge_writes_from_the_tables_replace_commits(settings, catalog):
    """Real merges of 4 to 9 files, each with the output of the one before: the fitted share and weight per
    file removed reproduce what each wrote closer than the mean ratio does, and AutoAnalyze replays with
    them."""
    from autooptimize.domain.output_model import MIN_FIT_COMMITS
    from autooptimize.services import actions
    from autooptimize.services.output_models import learned_output_model, learned_output_ratio

    table = make_table(catalog, {DAY1: 4}, rows=200, name="output_model")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    local = settings.model_copy(update={"rewrite_engine": "local"})
    first = 10_000
    for cycle in range(MIN_FIT_COMMITS + 1):
        if cycle:
            for _ in range(3 + cycle % 6):
                table.append(batch(first, 200, DAY1))
                first += 200
        action_id = actions.submit(local, name, dispatch=False)
        assert actions.execute(local, action_id, spark=None)["state"] == "succeeded"
        table = table.refresh()
        if cycle == MIN_FIT_COMMITS - 2:
            assert learned_output_model(table).file_overhead is None  # 9 REPLACE commits: the mean ratio
    model = learned_output_model(table)
    assert model.commits == MIN_FIT_COMMITS + 1 and model.file_overhead is not None and model.file_overhead > 0
    mean = learned_output_ratio(table)
    fit_error = mean_error = 0.0
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is None or summary.operation.value != "replace":
            continue
        read, wrote = int(summary["removed-files-size"]), int(summary["added-files-size"])
        removed = int(summary["deleted-data-files"]) - int(summary["added-data-files"])
        fit_error += abs(model.share * read - model.file_overhead * removed - wrote)
        mean_error += abs(mean * read - wrote)
    assert fit_error < mean_error / 2, (model, mean, fit_error, mean_error)
    for i in range(12):  # writer commits enough for a suggestion's history
        table.append(batch(first + 20 * i, 20, DAY1))
    shown = suggest(settings, name, min_commits=10, record=False)
    assert (shown["output_ratio"], shown["file_overhead"], shown["output_commits"]) == (
        model.share, model.file_overhead, model.commits)
    printed = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                             capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert printed.returncode == 0, printed.stderr
    assert (f"a merge writes {model.share:.3f}× the bytes it reads, less {model.file_overhead / 1024:.1f} KiB for each "
            f"file it removes (fitted on the table's {model.commits} REPLACE commits)") in printed.stdout


def test_a_table_without_merges_borrows_what_merges_write_from_the_other_tables(settings, spark_server, catalog):
    """Real merges through the Spark Connect server on one table; a second table, never merged, replays with
    the model fitted on the service's merges of the other tables (its own would say merged files weigh what
    their inputs did), and says so; once it has a REPLACE commit of its own, it replays with its own."""
    from autooptimize.domain.output_model import fit_output_model
    from autooptimize.services import actions
    from autooptimize.services.output_models import (
        BORROWED_MERGES,
        borrowed_output_model,
        learned_output_model,
    )
    from autooptimize.storage.models import Action

    merged = make_table(catalog, {DAY1: 4}, rows=200, name="lender")
    tracking.track(settings, identifier(merged), target_file_size="1MiB")
    first = 10_000
    for cycle in range(11):  # merges of 4 to 9 files, each with the output of the one before
        for _ in range(3 + cycle % 6 if cycle else 0):
            merged.append(batch(first, 200, DAY1))
            first += 200
        action_id = actions.submit(settings, identifier(merged), dispatch=False)
        assert actions.execute(settings, action_id)["state"] == "succeeded"
    borrower = make_table(catalog, {DAY1: 24}, rows=20, name="borrower")
    name = identifier(borrower)
    tracking.track(settings, name, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(settings, name)
    assert learned_output_model(borrower).commits == 0  # no REPLACE commit of its own
    with session_scope(settings) as session:
        others = session.execute(select(Action.bytes_in, Action.bytes_out, Action.files_in, Action.files_out)
                                 .where(Action.table_id != table_id, Action.kind == "merge",
                                        Action.state == "succeeded", Action.bytes_in > 0)
                                 .order_by(Action.finished_at.desc()).limit(BORROWED_MERGES)).all()
        model = borrowed_output_model(session, table_id)
        assert borrowed_output_model(session, table_id=None) is not None
    fit = fit_output_model([(i, o, fi - fo) for i, o, fi, fo in others])
    assert fit is not None and model is not None and model.borrowed
    assert (model.share, model.file_overhead, model.commits) == (fit[0], fit[1], len(others))
    assert model.file_overhead > 0  # a merged file weighs less than its inputs did, per file removed
    shown = suggest(settings, name, min_commits=10, record=False)
    assert (shown["output_ratio"], shown["file_overhead"], shown["output_commits"], shown["output_borrowed"]) == (
        model.share, model.file_overhead, model.commits, True)
    # without a calibration of its own (--no-calibrate; the next test file has the calibrated model first)
    printed = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest", "--no-calibrate"],
                             capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert printed.returncode == 0, printed.stderr
    assert (f"less {model.file_overhead / 1024:.1f} KiB for each file it removes (fitted on the service's last "
            f"{model.commits} merges of other tables; the table has no REPLACE commit of its own)") in printed.stdout
    # its own first merge: its own evidence from now on (the mean ratio until it has a fit)
    action_id = actions.submit(settings, name, dispatch=False)
    assert actions.execute(settings, action_id)["state"] == "succeeded"
    own = suggest(settings, name, min_commits=10, record=False)
    assert own["output_borrowed"] is False and own["file_overhead"] is None and own["output_commits"] == 1
    assert own["output_ratio"] == learned_output_model(borrower.refresh()).share != model.share


def test_the_replay_lands_merges_as_late_as_the_tables_own_merges_did(settings, catalog):
    import uuid
    from datetime import UTC, datetime, timedelta

    from autooptimize.domain.simulate import LATENCY_SECONDS
    from autooptimize.services.learned_timings import (
        ASSUMED_RUN_SECONDS,
        MIN_LATENCY_ACTIONS,
        borrowed_timings,
    )
    from autooptimize.storage.models import Action

    table = make_table(catalog, {DAY1: 20}, rows=20, name="latency")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(settings, name)
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def record(n: int, kind: str = "merge", state: str = "succeeded", first: int = 0) -> None:
        with session_scope(settings) as session:
            for i in range(first, first + n):  # merge i took 0.5 + 0.1 i seconds from decision to commit
                created = start + timedelta(seconds=10 * i)
                session.add(Action(id=str(uuid.uuid4()), table_id=table_id, kind=kind, trigger="event",
                                   priority_class="interactive", state=state, created_at=created,
                                   finished_at=created + timedelta(seconds=0.5 + 0.1 * i)))

    record(MIN_LATENCY_ACTIONS - 1)
    record(5, kind="sort", first=100)  # other kinds and failed merges are not the policy's merges
    record(5, state="failed", first=200)
    few = suggest(settings, name, min_commits=10, record=False)
    # nine merges: not their median; the other tables' merges' (tests/integration/test_borrowed_timings.py)
    # when this database holds enough decided ones, else the assumed latency
    with session_scope(settings) as session:
        lent = borrowed_timings(session, table_id)
    assert few["latency_own_merges"] == MIN_LATENCY_ACTIONS - 1 and few["latency_borrowed"] is (lent is not None)
    if lent is None:
        assert (few["latency_seconds"], few["latency_merges"]) == (LATENCY_SECONDS, MIN_LATENCY_ACTIONS - 1)
        assert few["latency_learned"] is False
        printed = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                                 capture_output=True, text=True, env=dict(os.environ), timeout=300)
        assert (f"a merge lands {LATENCY_SECONDS:.2f} s after the write that prompted it and plans "
                f"{LATENCY_SECONDS - ASSUMED_RUN_SECONDS:.2f} s after it (assumed: the table has "
                f"{MIN_LATENCY_ACTIONS - 1} merge(s), too few to learn it from)") in printed.stdout, printed.stdout
    else:
        assert (few["latency_seconds"], few["latency_merges"]) == (lent.latency, lent.merges)
    record(2, first=MIN_LATENCY_ACTIONS - 1)  # 11 merges: 0.5 … 1.5 s, median 1.0 s
    learned = suggest(settings, name, min_commits=10, record=False)
    assert learned["latency_merges"] == MIN_LATENCY_ACTIONS + 1 and learned["latency_learned"] is True
    assert abs(learned["latency_seconds"] - 1.0) < 1e-9
    given = suggest(settings, name, min_commits=10, record=False, latency=3.0)
    assert (given["latency_seconds"], given["latency_merges"]) == (3.0, 0)
    shown = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                           capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert shown.returncode == 0, shown.stderr
    # none of these merges recorded its start: each is taken to run the assumed time before it lands
    assert learned["start_delay_seconds"] == 1.0 - ASSUMED_RUN_SECONDS and learned["start_delay_learned"] is False
    assert (f"a merge lands 1.00 s after the write that prompted it and plans {1.0 - ASSUMED_RUN_SECONDS:.2f} s "
            f"after it (median of the table's last 11 merges; each taken to run {ASSUMED_RUN_SECONDS:.2f} s before "
            f"it lands, too few of them recorded their start)") in shown.stdout, shown.stdout


def _one_written_partition(settings, catalog, name: str):
    """A tracked table of 12 commits into one day: its id, writes as ``table_writes`` gives them, the
    partition's key and the time of its last write; and a function that records one succeeded merge of it."""
    import uuid
    from datetime import UTC, datetime

    from autooptimize.services.autotune import table_writes
    from autooptimize.storage.models import Action

    table = make_table(catalog, {DAY1: 12}, rows=20, name=name)
    table_id = tracking.ensure_tracked(settings, identifier(table))
    writes, start_ms = table_writes(table)
    (spec_id, key), _ = writes[-1].files[0]

    def merge(session, created, started, finished) -> None:
        session.add(Action(id=str(uuid.uuid4()), table_id=table_id, kind="merge", trigger="event",
                           priority_class="interactive", state="succeeded", spec_id=spec_id, partition_key=key,
                           created_at=created, started_at=started, finished_at=finished))

    last_write = datetime.fromtimestamp(start_ms / 1000 + writes[-1].at, UTC)
    return table_id, (writes, start_ms), last_write, merge


def test_a_merge_prompted_by_a_write_counts_its_latency_from_that_write(settings, catalog):
    from datetime import timedelta

    from autooptimize.domain.policy import PolicyTuning
    from autooptimize.domain.simulate import LATENCY_SECONDS
    from autooptimize.services.learned_timings import ASSUMED_RUN_SECONDS, learn_timings

    table_id, (writes, start_ms), last_write, merge = _one_written_partition(settings, catalog, "prompted")
    tuning = PolicyTuning(1 << 20, settle_seconds=3.0)
    with session_scope(settings) as session:
        for i in range(11):
            # six merges created 0.3 s after the partition's last write (the listener noticed it, decide ran),
            # five by a timer 10 s after it; each started 0.1 s and committed 0.5 s after its creation
            created = last_write + timedelta(seconds=0.3 if i < 6 else 10.0)
            merge(session, created, created + timedelta(seconds=0.1), created + timedelta(seconds=0.5))
            if i == 8:  # nine merges so far
                few = learn_timings(session, table_id, (writes, start_ms), tuning)
        with_writes = learn_timings(session, table_id, (writes, start_ms), tuning)
        without = learn_timings(session, table_id)
    # fewer than MIN_LATENCY_ACTIONS merges: each is taken to start the assumed run time before it lands
    assert few.start_delay == LATENCY_SECONDS - ASSUMED_RUN_SECONDS == 1.7
    assert abs(with_writes.start_delay - 0.4) < 0.01 and abs(without.start_delay - 0.1) < 1e-6  # as it started
    assert with_writes.merges == without.merges == 11
    assert abs(with_writes.latency - 0.8) < 0.01  # 0.3 s to be noticed and decided, 0.5 s to run and commit
    assert abs(without.latency - 0.5) < 1e-9  # from creation only


def test_merges_that_did_not_record_their_start_plan_the_assumed_run_time_before_they_land(settings, catalog):
    from datetime import timedelta

    from autooptimize.domain.policy import PolicyTuning
    from autooptimize.services.learned_timings import ASSUMED_RUN_SECONDS, MIN_LATENCY_ACTIONS, learn_timings

    table_id, (writes, start_ms), last_write, merge = _one_written_partition(settings, catalog, "unstarted")
    with session_scope(settings) as session:
        for i in range(MIN_LATENCY_ACTIONS + 2):
            # created 0.3 s after the partition's last write, committed 0.9 s after that; only the first
            # MIN_LATENCY_ACTIONS - 1 recorded their start
            created = last_write + timedelta(seconds=0.3)
            started = created + timedelta(seconds=0.2) if i < MIN_LATENCY_ACTIONS - 1 else None
            merge(session, created, started, created + timedelta(seconds=0.9))
        learned = learn_timings(session, table_id, (writes, start_ms), PolicyTuning(1 << 20, settle_seconds=3.0))
    # the latency is learned (1.2 s from the write); too few starts to learn the start delay from, so each
    # merge plans the assumed run time before it lands, as a table's first merges do; never as it lands
    assert learned.merges == MIN_LATENCY_ACTIONS + 2 and abs(learned.latency - 1.2) < 0.01
    assert learned.start_delay is not None
    assert abs(learned.start_delay - (learned.latency - ASSUMED_RUN_SECONDS)) < 1e-9


def test_the_timer_lag_is_learned_from_the_merges_a_settle_or_cold_moment_prompted(settings, catalog):
    import uuid
    from datetime import UTC, datetime, timedelta

    from autooptimize.services.autotune import default_tuning, table_writes
    from autooptimize.services.learned_timings import MIN_LATENCY_ACTIONS, TIMER_LAG_SECONDS, learn_timings
    from autooptimize.storage.models import Action
    from autooptimize.storage.repositories import tracked_table

    table = make_table(catalog, {DAY1: 20}, rows=20, name="timerlag")
    name = identifier(table)
    # cold after the table's 30 s, not after its gaps: far enough after the settle moment that its
    # handover cannot have waited for the settle verdict to be the settle time old
    tracking.track(settings, name, target_file_size="1MiB", cold_after_seconds=30.0, cold_gap_factor=0.0)
    table_id = tracking.ensure_tracked(settings, name)
    writes, start_ms = table_writes(table)
    (spec_id, key), _ = writes[-1].files[0]
    last_write = datetime.fromtimestamp(start_ms / 1000 + writes[-1].at, UTC)
    with session_scope(settings) as session:  # the service's clocks, as suggest reads them
        tuning = default_tuning(settings, tracked_table(session, settings.catalog, name))
    cold = tuning.cold_after([writes[-1].at - writes[-2].at])
    assert (tuning.settle_seconds, cold) == (3.0, 30.0)

    def record(seconds: float, n: int) -> None:
        with session_scope(settings) as session:
            for _ in range(n):
                created = last_write + timedelta(seconds=seconds)
                session.add(Action(id=str(uuid.uuid4()), table_id=table_id, kind="merge", trigger="event",
                                   priority_class="interactive", state="succeeded", spec_id=spec_id,
                                   partition_key=key, created_at=created, finished_at=created + timedelta(seconds=0.5)))

    def learned():  # noqa: ANN202
        with session_scope(settings) as session:
            return learn_timings(session, table_id, (writes, start_ms), tuning)

    record(0.3, 4)  # prompted by the write: no timer lag
    record(3.0 + 0.4, 5)  # the settle moment's handover, 0.4 s late
    record(cold + 20.0, 3)  # long after both moments: not a handover (a scan, a retry), left out
    record(cold + 1.2, 4)  # the cold moment's handover, 1.2 s late
    few = learned()
    assert few.timer_merges == MIN_LATENCY_ACTIONS - 1 and few.timer_lag == TIMER_LAG_SECONDS  # the assumed lag
    assert few.merges == 16
    shown = suggest(settings, name, min_commits=10, record=False)
    assert (shown["timer_lag_seconds"], shown["timer_lag_merges"], shown["timer_lag_learned"]) == (
        TIMER_LAG_SECONDS, MIN_LATENCY_ACTIONS - 1, False)
    record(cold + 1.2, 2)  # 11 timer merges: five at 0.4 s, six at 1.2 s
    enough = learned()
    assert enough.timer_merges == MIN_LATENCY_ACTIONS + 1
    assert abs(enough.timer_lag - 1.2) < 0.01
    with session_scope(settings) as session:
        assert learn_timings(session, table_id, (writes, start_ms)).timer_merges == 0  # no tuning: no moments
    shown = suggest(settings, name, min_commits=10, record=False)
    assert shown["timer_lag_learned"] and abs(shown["timer_lag_seconds"] - 1.2) < 0.01
    printed = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                             capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert printed.returncode == 0, printed.stderr
    assert ("a settled or cold partition is judged 1.20 s after its moment (median of the table's last 11 merges "
            "a timer prompted)") in printed.stdout
    assert (shown["listener_pass_seconds"], shown["clock_phases"]) == (LISTENER_PASS_SECONDS, CLOCK_PHASES)
    assert (f"the figures are the mean of {CLOCK_PHASES} replays, each with the listener's passes 1 s apart at "
            "another phase") in printed.stdout


def test_the_check_sets_the_end_layout_of_the_finished_partitions_beside_the_replays(settings, catalog, monkeypatch,
                                                                                     capsys):
    """The check puts the end layout of the partitions written since and finished (not written for the tuning's
    cold-after time and two merges' latency, no action of ours queued or running on it) beside the replay's and
    the bin-pack replay's, and the search judges the tuning in force's end layout on what the table did."""
    import datetime as dt

    from autooptimize.cli.actions import print_check
    from autooptimize.domain.entropy import end_layout
    from autooptimize.domain.policy import PolicyTuning
    from autooptimize.iceberg.files import live_partitions
    from autooptimize.services import actions, autotune, end_check
    from autooptimize.services.end_check import finish_after
    from tests.integration.tables import key_of

    monkeypatch.setattr(end_check, "FINISH_SLACK_SECONDS", 0.0)  # finished 3 s + 2 × 0.2 s after its last write
    monkeypatch.setattr(autotune, "IN_FORCE_COMMITS", 10)  # the check's 16 commits are enough to judge live files
    day3, day4, day5 = dt.date(2026, 1, 3), dt.date(2026, 1, 4), dt.date(2026, 1, 5)
    table = make_table(catalog, {DAY1: 2}, rows=20, name="end_check")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    time.sleep(1.1)
    tracking.track(settings, name, cold_after_seconds=3.0)  # the tuning in force, and the check's window, from here
    first = 10_000
    for day in (DAY1, DAY2, day3, day5):
        for _ in range(4):
            table.append(batch(first, 20, day))
            first += 20
            time.sleep(0.1)
    local = settings.model_copy(update={"rewrite_engine": "local"})
    merged = actions.execute(local, actions.submit(local, name, partition="day=2026-01-02", dispatch=False), spark=None)
    assert merged["state"] == "succeeded"
    queued = actions.submit(local, name, partition="day=2026-01-03", dispatch=False)  # not finished while queued
    time.sleep(3.6)
    table.append(batch(first, 20, day4))  # still being written: not finished

    out = suggest(settings, name, min_commits=10, latency=0.2)

    end = out["check"]["end"]
    assert end["partitions"] == 3 and end["finished_after_seconds"] == pytest.approx(3.4)
    assert out["check"]["tuning"]["cold_after_seconds"] == 3.0
    assert finish_after(PolicyTuning(1 << 20, cold_after_seconds=3.0), 0.2) == pytest.approx(3.4)
    parts = live_partitions(catalog.load_table(name))
    finished = [[f.size for f in pf.data_files] for (_, key), pf in parts.items() if key not in (key_of(day3),
                                                                                                   key_of(day4))]
    files, excess = end_layout(finished, 1 << 20)
    assert files == 6 + 1 + 4  # DAY1 as written (2 + 4), DAY2 merged into one, day 5 as written
    assert end["realised"] == {"end_files": files, "end_excess_mse_mib2": pytest.approx(excess / (1 << 40))}
    assert end["baseline"]["end_files"] == 3  # the bin-pack leaves one file in each
    assert end["predicted"]["end_files"] < files  # the replay finished the cold partitions; nothing ran here
    assert end["shortfall"]["realised"] == pytest.approx(files / 3.3 - 1 + max(0.0, end["realised"]["end_excess_mse_mib2"]
                                                         / (1.1 * end["baseline"]["end_excess_mse_mib2"] + 1) - 1))
    assert out["end_in_force"] == end["shortfall"]["realised"] > 0  # judged on the table's, not the replay's
    print_check(out)
    shown = capsys.readouterr().out
    assert f"on the 3 partition(s) finished since (no write for 3 s): predicted {end['predicted']['end_files']} files" in shown
    assert f"realised {files} files" in shown and "judged on what the table did (missed by" in shown
    again = suggest(settings, name, min_commits=10, latency=0.2)  # right after: no commit since, no check
    assert again["check"] is None and again["end_checked_since_ms"] == out["check"]["since_ms"]
    assert again["end_in_force"] == out["end_in_force"]  # what the newest check of the tuning in force saw
    kept = 1 + out["check"]["relative_error"]["mean_live_files"]  # the live files the table kept, over its replay's
    assert out["live_in_force"] == again["live_in_force"] == pytest.approx(kept)
    assert again["live_checked_since_ms"] == out["check"]["since_ms"]
    print_check(again)
    shown = capsys.readouterr().out
    assert "judged on what the table did (missed by" in shown and ", as the check of the commits since 20" in shown
    assert f"live files are judged on what the table kept: {kept:.3f}× its replay's, as the check of the" in shown
    with session_scope(settings) as session:  # the queued action would otherwise wait for a dispatcher
        session.execute(text("UPDATE ao_actions SET state = 'failed', reason = 'test_isolation' WHERE id = :id"),
                        {"id": queued})
