"""The policy simulator and the trace family: bytes are conserved, the cold rule ends every partition at
the bin-pack's layout, the suggestion keeps the defaults unless a tuning does better, traces are seeded."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autooptimize.domain.entropy import EntropyStats, excess_needs_attention
from autooptimize.domain.policy import PolicyTuning, capped_bytes
from autooptimize.domain.priced import DEFAULT_PRICE
from autooptimize.domain.simulate import Write, _Table, simulate_baseline, simulate_policy
from autooptimize.domain.suggest import SUGGEST_PRICES, candidate_tunings, shortfall, suggest_tuning
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
@given(writes_st, st.integers(2, 16), st.sampled_from([0.0, 1.0, 5.0]))
def test_the_policy_loses_no_byte_and_ends_every_partition_at_the_bin_packs_layout(raw, fan_in, cold):
    writes = _writes(raw)
    tuning = PolicyTuning(TARGET, fan_in, min(1.0, cold), cold)
    captured: list[_Table] = []
    original = _Table.figures

    def keep(self, *a, **k):  # the table as the run left it
        captured.append(self)
        return original(self, *a, **k)

    _Table.figures = keep  # type: ignore[method-assign]
    try:
        fig = simulate_policy(writes, tuning, latency=0.5)
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
    writes = [Write(float(i), (("h", 50),)) for i in range(40)]
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
