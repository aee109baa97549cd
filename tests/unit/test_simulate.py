"""The policy simulator and the trace family: bytes are conserved, the cold rule ends every partition at
the bin-pack's layout, the suggestion keeps the defaults unless a tuning does better, traces are seeded."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autooptimize.domain.entropy import EntropyStats, excess_needs_attention
from autooptimize.domain.goals import end_layout_holds
from autooptimize.domain.planning.types import RewriteGroup
from autooptimize.domain.policy import PolicyTuning, capped_bytes
from autooptimize.domain.priced import DEFAULT_PRICE
from autooptimize.domain.replay_clock import mean_figures, simulate_on_clock
from autooptimize.domain.simulate import Figures, Merge, Write, _Table, simulate_baseline, simulate_policy
from autooptimize.domain.suggest import SUGGEST_PRICES, _rank, candidate_tunings, shortfall, suggest_tuning
from benchmarks.trace_family import FAMILY, LATE_P, MiB, make_commits, member

FAST = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
TARGET = 1000

writes_st = st.lists(
    st.tuples(st.floats(0.0, 3.0), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 900)), min_size=1, max_size=3)),
    min_size=1, max_size=60,
)


def _writes(raw: list[tuple[float, list[tuple[int, int]]]]) -> list[Write]:
    at, out = 0.0, []
    for gap, files in raw:
        at += gap
        out.append(Write(at, tuple(files)))
    return out


@FAST
@given(writes_st, st.integers(2, 16), st.sampled_from([0.0, 1.0, 5.0]), st.sampled_from([0.0, 0.3]))
def test_the_policy_loses_no_byte_and_ends_every_partition_at_the_bin_packs_layout(raw, fan_in, cold, phase):
    writes = _writes(raw)
    tuning = PolicyTuning(TARGET, fan_in, min(1.0, cold), cold)
    captured: list[_Table] = []
    original = _Table.figures

    def keep(self, *a, **k):  # the table as the run left it
        captured.append(self)
        return original(self, *a, **k)

    _Table.figures = keep  # type: ignore[method-assign]
    try:
        # with the listener's clock at a phase, or without it (every timer judged at its moment)
        fig = simulate_policy(writes, tuning, latency=0.5, timer_lag=0.8 if phase else 0.0,
                              timer_every=1.0 if phase else 0.0, timer_phase=phase)
    finally:
        _Table.figures = original  # type: ignore[method-assign]
    table = captured[-1]
    written = sum(s for w in writes for _, s in w.files)
    assert fig.bytes_written == written
    assert sum(sum(files.values()) for files in table.parts.values()) == written  # merges keep every byte
    assert fig.end_files == sum(map(len, table.parts.values()))
    for files in table.parts.values():  # cold: within the excess rule, or at most one file under 3/4 target
        sizes = list(files.values())
        stats = EntropyStats.from_sizes(sizes, TARGET)
        quiet = not excess_needs_attention(stats.sse, stats.n, capped_bytes(sizes, TARGET), TARGET, TARGET // 4)
        assert quiet or sum(1 for s in sizes if s < TARGET * 3 // 4) <= 1, sizes


@FAST
@given(writes_st)
def test_the_baseline_loses_no_byte_and_its_figures_add_up(raw):
    writes = _writes(raw)
    fig = simulate_baseline(writes, TARGET, every=5)
    assert fig.bytes_written == sum(s for w in writes for _, s in w.files)
    assert fig.write_amplification == pytest.approx(fig.bytes_rewritten / fig.bytes_written)
    assert len(writes) and fig.max_live_files >= fig.mean_live_files > 0


def test_the_baseline_counts_each_writes_files_before_the_bin_pack_that_follows_it():
    # as benchmarks.streaming counts its live bin-pack run: right after the writer's commit
    writes = [Write(float(i), (("p", 100),)) for i in range(4)]
    fig = simulate_baseline(writes, TARGET, every=2)
    # 1, 2 (then merged into 1), 2, 3 (then merged into 1): counted after the bin-pack it was 1, 1, 2, 1
    assert fig.max_live_files == 3 and fig.mean_live_files == (1 + 2 + 2 + 3) / 4
    assert fig.files_replaced == 2 + 3 and fig.end_files == 1


def test_the_suggestion_keeps_the_defaults_unless_a_tuning_does_better():
    writes = [Write(i * 0.5, ((i // 40, 9_000 + 37 * (i % 13)),)) for i in range(160)]
    default = PolicyTuning(8 * MiB, 12, 3.0, 60.0)
    alone = suggest_tuning(writes, default, [default])
    assert alone.tuning == default and alone.tried == 1 and alone.predicted == alone.defaults
    wider = suggest_tuning(writes, default)
    assert wider.tried > 1
    if wider.meets_goal:
        assert wider.predicted.bytes_rewritten <= min(
            [alone.defaults.bytes_rewritten] if alone.meets_goal else [wider.predicted.bytes_rewritten])
    else:
        assert shortfall(wider.predicted, wider.baseline) <= shortfall(wider.defaults, wider.baseline)
    with pytest.raises(ValueError, match="at least one write"):
        suggest_tuning([], default)


def test_on_the_listeners_clock_the_suggestion_predicts_the_mean_over_its_phases():
    """The search runs on one phase of the clock; the tuning found and the defaults are predicted by their
    mean over the phases, and the goal is judged on that mean."""
    writes = [Write(i * 0.7, ((i // 30 - (i % 7 == 3), 9_000 + 37 * (i % 13)),)) for i in range(150)]
    default = PolicyTuning(8 * MiB)
    replay = {"latency": 0.4, "start_delay": 0.2, "timer_lag": 0.85}
    s = suggest_tuning(writes, default, timer_every=1.0, **replay)
    assert s.predicted == simulate_on_clock(writes, s.tuning, **replay)
    assert s.defaults == simulate_on_clock(writes, default, **replay)
    assert s.meets_goal == (s.predicted.mean_live_files <= 1.05 * s.baseline.mean_live_files
                            and end_layout_holds(s.predicted, s.baseline))
    # a tuning found on one phase replaces the defaults only when it is better over all of them too
    assert s.tuning == default or _rank(s.predicted, s.baseline) < _rank(s.defaults, s.baseline)
    at_once = suggest_tuning(writes, default, **replay)  # without the clock: one replay, as before
    assert at_once.defaults == simulate_policy(writes, default, **replay)


def test_the_family_covers_the_axes_and_is_seeded():
    assert {m.target // MiB for m in FAMILY} == {8, 32, 128, 512}
    assert {m.grain for m in FAMILY} == {"hour", "day"}
    assert {m.late_share for m in FAMILY} == {0.0, 0.10, 0.35}
    assert min(m.rate for m in FAMILY) == 0.2 and max(m.rate for m in FAMILY) == 5.0
    assert min(m.bytes_per_hour for m in FAMILY) == 1_000_000 and max(m.bytes_per_hour for m in FAMILY) == 2 * 10**9
    assert any(m.burst_p for m in FAMILY) and any(not m.burst_p for m in FAMILY)
    m = member("m00")
    assert make_commits(m) == make_commits(m)
    assert make_commits(m) != make_commits(member("m01"))  # other seed, other draws


def test_a_members_bytes_and_late_share_are_what_it_says():
    m = member("m07")  # 50 MB per partition-hour, 35 % late, bursts
    commits = make_commits(m)
    hours = {}
    late = 0
    for c in commits:
        now = int(c.at // 60)
        for part, size in c.files:
            hours[part] = hours.get(part, 0) + size
            late += size if part != now else 0
    full = [hours[h] for h in range(3, m.hours)]  # hours that got all their on-time and late data
    total = sum(hours.values())
    assert 0.2 < late / total < 0.45  # 35 % late, less the hours whose late data is after the run
    assert all(30e6 < b < 120e6 for b in full), full  # 50 MB an hour, bursts on top
    assert len(LATE_P) == 3


def test_measure_from_counts_only_what_happens_from_then_on() -> None:
    writes = [Write(float(i), (("h", 50),)) for i in range(40)]
    tuning = PolicyTuning(TARGET, fan_in=4)
    whole = simulate_policy(writes, tuning)
    assert simulate_policy(writes, tuning, measure_from=0.0) == whole
    late = simulate_policy(writes, tuning, measure_from=30.0)
    assert late.bytes_written == 10 * 50  # the ten writes at 30 s and after
    assert late.files_replaced < whole.files_replaced and late.bytes_rewritten < whole.bytes_rewritten
    assert late.end_files == whole.end_files  # the same table at the end
    nothing = simulate_policy(writes, tuning, measure_from=1000.0)
    assert (nothing.bytes_written, nothing.mean_live_files) == (0, 0.0)


def test_an_output_ratio_shrinks_a_writers_files_when_first_merged() -> None:
    # hour "g", a target's bytes in one file, sets the scale of "h" at the target under both ratios (the
    # policy judges a partition by what the table's partitions hold, and merges at 0.5 hold less)
    writes = [Write(0.0, (("g", 2 * TARGET),))] + [Write(float(i + 1), (("h", 50),)) for i in range(40)]
    tuning = PolicyTuning(TARGET, fan_in=4)
    assert simulate_policy(writes, tuning, output_ratio=1.0) == simulate_policy(writes, tuning)
    same = simulate_policy(writes, tuning)
    half = simulate_policy(writes, tuning, output_ratio=0.5)
    # the first merge of each writer file halves its bytes: later merges rewrite fewer bytes
    assert half.bytes_written == same.bytes_written and half.bytes_rewritten < same.bytes_rewritten
    base_same, base_half = simulate_baseline(writes, TARGET, 5), simulate_baseline(writes, TARGET, 5, 0.5)
    # the bin-pack sees the same output model: its smaller outputs stay under ¾ of the target longer
    assert base_half != base_same and base_half.end_files < base_same.end_files


def test_an_hour_only_late_data_reaches_is_finished_after_its_own_gaps_not_the_tables_cold_after() -> None:
    """Hour "a" gets a late file every 3 s while hour "b" is written every 0.5 s for 90 s: once a's late
    writes stop (at 30 s) it is cold after 4 × 3 s, not after the table's 60 s, so its files are merged
    while b is still written, and the table at the end is the same."""
    writes = [Write(i * 0.5, (("b", 40),) + ((("a", 30),) if i % 6 == 0 and i <= 60 else ())) for i in range(180)]
    tuning = PolicyTuning(TARGET, fan_in=12)
    own = simulate_policy(writes, tuning)
    table = simulate_policy(writes, PolicyTuning(TARGET, fan_in=12, cold_gap_factor=0.0))
    assert own.mean_live_files < table.mean_live_files
    assert (own.end_files, own.end_excess_mse) == (table.end_files, table.end_excess_mse)
    assert dict(own.rules)["cold_finish"] >= dict(table.rules)["cold_finish"]


def test_the_suggestion_tries_each_partitions_own_cold_after_time_on_and_off() -> None:
    tunings = candidate_tunings(PolicyTuning(TARGET))
    assert {t.cold_gap_factor for t in tunings} == {4.0, 0.0} and tunings[0] == PolicyTuning(TARGET)
    tiers = [t for t in tunings if not t.price]
    assert len(tiers) == len(set(tiers)) == 7 * 4 * 2 * 2  # the tiers: price 0, beside the default's κ23
    priced = [t for t in tunings if t.price]  # each price with every cold-after time and gap factor
    assert DEFAULT_PRICE not in SUGGEST_PRICES and {t.price for t in priced} == {*SUGGEST_PRICES, DEFAULT_PRICE}
    assert len(priced) == len(set(priced)) == 6 * 4 * 2 and {t.quiet_merge for t in priced} == {False}
    assert PolicyTuning(TARGET) in priced  # the default is not tried twice
    assert {t.cold_gap_factor for t in candidate_tunings(PolicyTuning(TARGET, cold_gap_factor=0.0))} == {0.0}


def test_a_write_before_a_lagged_timer_judges_the_partition_cancels_its_early_finish() -> None:
    """The service judges a partition's cold-after moment up to a second or two late (its listener hands
    partitions over at most once a second): a write meanwhile makes it live again, so the finish that a
    judgement at the very moment would have made, and made again after the write, happens once."""
    writes = [Write(at, (("a", 100),)) for at in (0.0, 0.5, 1.0, 6.5, 7.0, 7.5)]
    tuning = PolicyTuning(TARGET, fan_in=12, price=0)  # cold 5 s after the third write (4 × 0.5 s, the floor)
    at_once = simulate_policy(writes, tuning, latency=0.35)
    lagged = simulate_policy(writes, tuning, latency=0.35, timer_lag=1.0)
    assert at_once.bytes_rewritten == 300 + 600  # finished at 6 s, and again with the three later files
    assert lagged.bytes_rewritten == 600  # the judgement at 7 s came after the write at 6.5 s: one finish
    assert at_once.end_files == lagged.end_files == 1
    with pytest.raises(ValueError, match="timer_lag must be seconds ≥ 0, got -1"):
        simulate_policy(writes, tuning, timer_lag=-1)


def test_on_the_listeners_clock_a_cold_moment_waits_for_the_next_pass_and_a_write_first_cancels_it() -> None:
    """The listener hands a cold partition over on its next pass (once a second), so whether the write that
    follows a pause comes first depends on where the moment falls between passes: the same writes are
    finished once or twice by phase, and :func:`simulate_on_clock` gives the mean over the phases."""
    writes = [Write(at, (("a", 100),)) for at in (0.0, 0.5, 1.0, 6.5, 7.0, 7.5)]
    # cold at 6.0 s (5 s after the third write); judged at its settle moment by 3.0 s, long enough before
    tuning = PolicyTuning(TARGET, fan_in=12, settle_seconds=1.0, price=0)
    run = {"latency": 0.35, "start_delay": 0.0}  # a merge plans when it is decided

    def on_clock(phase: float) -> Figures:  # a mean lag of half a pass: nothing after the pass itself
        return simulate_policy(writes, tuning, timer_lag=0.5, timer_every=1.0, timer_phase=phase, **run)
    assert on_clock(0.0).bytes_rewritten == 300 + 600  # a pass at 6.0: finished before the write at 6.5
    assert on_clock(0.25).bytes_rewritten == 300 + 600  # the pass at 6.25
    assert on_clock(0.75).bytes_rewritten == 600  # the next pass is at 6.75: the write at 6.5 came first
    # a lag of 0.7 s on average: 0.2 s after the pass; the pass at 6.0 then judges at 6.2, the one at 6.25 at 6.45
    assert simulate_policy(writes, tuning, timer_lag=0.7, timer_every=1.0, timer_phase=0.25, **run).bytes_rewritten == 900
    assert simulate_policy(writes, tuning, timer_lag=0.8, timer_every=1.0, timer_phase=0.25,
                           **run).bytes_rewritten == 600  # 6.25 + 0.3 = 6.55: after the write
    mean = simulate_on_clock(writes, tuning, timer_lag=0.5, **run)  # phases 0, 0.25, 0.5 and 0.75
    assert mean.bytes_rewritten == round((900 * 3 + 600) / 4)  # at 0.5 the pass is at 6.5, before the write
    assert mean.end_files == 1 and mean.bytes_written == 600
    with pytest.raises(ValueError, match="timer_every must be seconds ≥ 0 \\(0: no clock\\), got -1"):
        simulate_policy(writes, tuning, timer_every=-1)
    with pytest.raises(ValueError, match="phases must be an integer ≥ 1, got 0"):
        simulate_on_clock(writes, tuning, phases=0)
    with pytest.raises(ValueError, match="every must be seconds > 0, got 0"):
        simulate_on_clock(writes, tuning, every=0)


def test_the_mean_of_replays_averages_their_figures_and_keeps_the_worst_peak() -> None:
    a = Figures(10.0, 20, 30, 1000, 500, 3, 4.0, 7, (("tiered", 5), ("cold_finish", 2)))
    b = Figures(12.0, 25, 31, 1100, 500, 4, 6.0, 8, (("tiered", 7),))
    m = mean_figures([a, b])
    assert (m.mean_live_files, m.max_live_files, m.files_replaced, m.bytes_rewritten) == (11.0, 25, 30, 1050)
    assert (m.bytes_written, m.end_files, m.end_excess_mse, m.actions) == (500, 4, 5.0, 8)  # halves to even
    assert dict(m.rules) == {"tiered": 6, "cold_finish": 1}
    assert m.write_amplification == 1050 / 500
    with pytest.raises(ValueError, match="at least one run"):
        mean_figures([])


def test_on_the_listeners_clock_a_partition_just_left_alone_is_judged_again_only_after_the_settle_time() -> None:
    """The service judges a partition it left alone as written to again only once that verdict is the
    settle time old (``services.submit_decided``): the cold moment 2 s after the settle judgement waits
    for the first pass after it, and a write before then cancels the finish. Without the clock every timer
    is judged at its moment, as before."""
    tuning = PolicyTuning(TARGET, fan_in=12, price=0)  # settle 3 s, cold 5 s after the third write
    run = {"latency": 0.35, "start_delay": 0.0, "timer_lag": 0.5}

    def rewritten(late: float, every: float) -> list[int]:
        writes = [Write(at, (("a", 100),)) for at in (0.0, 0.5, 1.0, late, late + 0.5, late + 1.0)]
        return [simulate_policy(writes, tuning, timer_every=every, timer_phase=k / 4, **run).bytes_rewritten
                for k in range(4)]
    # left alone at its settle moment (4.0–5.0 s), so the cold moment at 6.0 s is judged at 7.0–8.0 s
    assert rewritten(6.5, every=1.0) == [600] * 4  # the late write at 6.5 s comes first at every phase
    assert rewritten(8.5, every=1.0) == [900] * 4  # finished before a late write at 8.5 s, and again after it
    assert rewritten(6.5, every=0.0) == [900] * 4  # no clock: judged at 6.5 s (the lag), before that write


def test_each_merge_is_logged_as_it_lands_and_the_log_adds_up_to_the_figures() -> None:
    writes = [Write(i * 0.5, ((i // 20, 9_000 + 37 * (i % 13)),)) for i in range(80)]
    merges: list[Merge] = []
    fig = simulate_policy(writes, PolicyTuning(8 * MiB), latency=0.4, start_delay=0.2, on_merge=merges.append)
    assert len(merges) == fig.actions > 0
    assert sum(m.bytes_in for m in merges) == fig.bytes_rewritten
    assert sum(m.files for m in merges) == fig.files_replaced
    assert [m.at for m in merges] == sorted(m.at for m in merges)
    assert {m.rule for m in merges} <= {r for r, _ in fig.rules} and {m.partition for m in merges} <= {0, 1, 2, 3}


def test_the_replay_plans_with_what_a_writers_file_will_weigh_once_merged_as_the_service_does():
    """The service's planner sizes each file's output from the table's rewrites (bytes per row, within
    0.1 % of what its merges wrote), so the priced rule's fill and the bins count a writer's file at what it
    will weigh merged; the replay does the same under the output model, and a merged file keeps its size."""
    t = _Table(8 << 20, output_ratio=0.99, file_overhead=50_000)
    t.add("p", 1_000_000, 0.0)
    t.add("p", 2_000_000, 1.0)
    [a, b] = t.files("p")
    assert (a.rewritten_size, b.rewritten_size) == (990_000 - 50_000, 1_980_000 - 50_000)
    t.apply("p", [RewriteGroup((a, b), 1)])
    [merged] = t.files("p")  # 0.99 of the 3 MB read, less one footer for the one file removed
    assert merged.rewritten_size == merged.size == 2_970_000 - 50_000
    tiny = _Table(8 << 20, output_ratio=0.99, file_overhead=50_000)
    tiny.add("p", 20_000, 0.0)  # a file lighter than the footer: at least a byte, never nothing or less
    assert tiny.files("p")[0].rewritten_size == 1
    plain = _Table(8 << 20)
    plain.add("p", 1_000_000, 0.0)
    assert plain.files("p")[0].rewritten_size == 1_000_000


def test_the_policy_is_told_the_bytes_a_partition_holds_as_the_service_reads_them():
    """The service's policy sets a partition's scale by the bytes its files hold now (what merges saved
    is gone) and the other partitions' statistics; the replay tells it the same, not the writers' bytes."""
    from autooptimize.domain.simulate import PartitionState, simulate_policy

    seen: list[PartitionState] = []

    def planner(state: PartitionState):
        seen.append(state)
        return None  # the shipped policy plans

    writes = [Write(i * 0.6, ((0, 300_000), (1, 90_000))) for i in range(40)]
    fig = simulate_policy(writes, PolicyTuning(8 * MiB), 0.4, output_ratio=0.9, planner=planner)
    assert fig.files_replaced > 0 and seen
    for state in seen:
        assert state.received_bytes == sum(f.size for f in state.files)
    # after a merge a partition holds less than its writers gave it (0.9 of what the merge read)
    assert any(s.partition == 0 and s.received_bytes % 300_000 for s in seen)
