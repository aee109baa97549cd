"""benchmarks.streaming's diagnostic: the simulator replays a run's own writer commits (read back from the
table) with the settings the service read from its environment, beside the live figures."""

from __future__ import annotations

import os

from autooptimize.domain.replay_clock import CLOCK_PHASES, LISTENER_PASS_SECONDS
from autooptimize.services.learned_timings import TIMER_LAG_SECONDS
from benchmarks.streaming_predict import report_lines, simulate_this_run
from tests.integration.tables import DAY1, DAY2, identifier, make_table


def test_the_simulator_replays_the_tables_own_commits_with_the_services_settings(settings, catalog):
    from autooptimize.services import tracking

    table = make_table(catalog, {DAY1: 14, DAY2: 12}, rows=20, name="predict")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    env = {**os.environ, "AO_MERGE_FAN_IN": "6", "AO_COLD_AFTER_SECONDS": "30"}
    before = dict(os.environ)
    sim = simulate_this_run(env, catalog, name, 20, {"live_files_mean": 26.0, "write_amplification": 0.0})
    assert dict(os.environ) == before  # the service's environment was only borrowed
    assert sim["writes"] == 26  # one writer commit per file
    assert sim["tuning"]["fan_in"] == 6 and sim["tuning"]["cold_after_seconds"] == 30.0
    assert sim["latency_merges"] == 0 and sim["latency_seconds"] == 2.0  # no merge of its own yet
    # so each merge plans the assumed run time before it lands (the service plans a merge when it starts)
    assert sim["start_delay_seconds"] == 1.7
    assert (sim["timer_lag_seconds"], sim["timer_lag_merges"]) == (TIMER_LAG_SECONDS, 0)  # the service's measured lag
    policy = sim["policy"]
    assert 0 < policy["mean_live_files"] <= 13.5  # 1, 2, … 26 files after the commits, with no merge
    assert policy["actions"] > 0 and policy["end_files"] < 26 and policy["write_amplification"] > 0
    assert sim["live_over_simulated"]["mean_live_files"] == round(26.0 / policy["mean_live_files"], 3)
    assert sim["live_over_simulated"]["write_amplification"] == 0.0
    lines = report_lines(sim, {"live_files_mean": 20.0, "write_amplification": 1.2})
    assert "26 writer commits" in lines[0] and "the live bin-pack run: 20.0, 1.2" in lines[1]
    assert "planned 1.7 s after the write" in lines[0] and f"timers judged {TIMER_LAG_SECONDS} s late from 0 timer merges" in lines[0]
    # the figures are the mean over the listener clock's phases, as AutoAnalyze predicts
    assert (sim["listener_pass_seconds"], sim["clock_phases"]) == (LISTENER_PASS_SECONDS, CLOCK_PHASES)
    assert f"on the listener's 1 s passes, the mean of {CLOCK_PHASES} phases" in lines[0]
    assert "planned 0.3 s after the write" in report_lines({**sim, "start_delay_seconds": 0.3}, None)[0]
