"""benchmarks.policy_foresight: the best schedule with foresight, checked against an exhaustive search."""

from __future__ import annotations

import json
import math
import random

import pytest

from autooptimize.domain.simulate import Write
from autooptimize.errors import InvalidArgument
from benchmarks.policy_foresight import (
    MAX_FILES_PER_PARTITION,
    at_live_files,
    by_partition,
    delay_writes,
    main,
    partition_schedule,
    table_schedule,
    within_model,
)
from benchmarks.policy_sim import streaming_writes

MiB = 1 << 20


def _set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]


def _exhaustive(at, sizes, writes, lam, cap, delay):
    """The least ``rewritten + lam · file-writes`` over every schedule: after each write's count, any
    files not already being merged may be merged in any groups (each ≤ cap), landing ``delay`` counts
    later; at the end two or more files under ¾ of cap are read once more by the finish."""
    states = {((), ()): 0.0}  # (files free to merge, merges in flight (lands at, output, inputs)) → cost
    for k in range(writes):
        arrived = [s for a, s in zip(at, sizes, strict=True) if a == k]
        following: dict = {}
        for (free, flight), cost in states.items():
            files = [*free, *arrived]
            counted = cost + lam * (len(files) + sum(n for _, _, n in flight))
            for part in _set_partitions(files):
                if any(len(g) > 1 and sum(g) > cap for g in part):
                    continue
                merged = [(k + delay, sum(g), len(g)) for g in part if len(g) > 1]
                total = counted + sum(m[1] for m in merged)
                going = [*flight, *merged]
                landed = [out for lands, out, _ in going if lands <= k]
                key = (tuple(sorted([g[0] for g in part if len(g) == 1] + landed)),
                       tuple(sorted(m for m in going if m[0] > k)))
                following[key] = min(following.get(key, math.inf), total)
        states = following
    best = math.inf
    for (free, flight), cost in states.items():
        small = [s for s in [*free, *(out for _, out, _ in flight)] if s < 0.75 * cap]
        best = min(best, cost + (sum(small) if len(small) >= 2 else 0))
    return best


def _combined(at, sizes, writes, lam, cap, delay):
    s = partition_schedule(at, sizes, writes, lam, cap, delay, finish=True)
    return s.rewritten + lam * s.file_writes


def _case(rng: random.Random, equal: bool):
    n = rng.randint(1, 6)
    writes = rng.randint(n, n + 4)
    at = sorted(rng.randrange(writes) for _ in range(n))
    sizes = [1] * n if equal else [rng.randint(1, 3) for _ in range(n)]
    return at, sizes, writes, rng.choice([0.3, 1.0, 2.5, 6.0, 20.0])


def test_with_equal_files_merged_as_soon_as_made_it_is_the_best_schedule_there_is():
    rng = random.Random(11)
    for _ in range(250):
        at, sizes, writes, lam = _case(rng, equal=True)
        assert _combined(at, sizes, writes, lam, 1000, 0) == pytest.approx(
            _exhaustive(at, sizes, writes, lam, 1000, 0)), (at, writes, lam)


def test_every_schedule_it_finds_is_one_that_can_be_run():
    # never under the exhaustive search: its schedules are real ones (with any sizes, caps and delays)
    rng = random.Random(12)
    excess = []
    for _ in range(250):
        at, sizes, writes, lam = _case(rng, equal=False)
        cap, delay = rng.choice([4, 6, 1000]), rng.choice([0, 1, 2])
        ours, best = _combined(at, sizes, writes, lam, cap, delay), _exhaustive(at, sizes, writes, lam, cap, delay)
        assert ours >= best - 1e-9, (at, sizes, writes, lam, cap, delay)
        excess.append(ours / best - 1)
    # and on average within 2 % of the best (0.7 % measured; 27 of these 250 cost more, at most 32 %: a
    # merge that skips a file, one that waits for a merge in flight, or pairs files under a tight cap)
    assert sum(excess) / len(excess) < 0.02


def test_the_split_of_rewritten_bytes_and_live_files_adds_up():
    at, sizes, writes = [0, 1, 2, 3, 3, 5], [2, 1, 1, 3, 1, 2], 8
    cheap = partition_schedule(at, sizes, writes, 0.01, 100, 0, finish=False)
    assert cheap.rewritten == 0 and cheap.file_writes == pytest.approx(sum(writes - a for a in at))  # no merge pays
    dear = partition_schedule(at, sizes, writes, 1000.0, 100, 0, finish=False)
    assert dear.rewritten > 0 and dear.file_writes < cheap.file_writes


def test_a_partition_too_large_for_the_model_is_refused_by_name():
    with pytest.raises(InvalidArgument, match="partition of 401 files"):
        partition_schedule(list(range(401)), [1] * 401, 401, 1.0, 100)


def test_latency_in_seconds_becomes_counted_writes_at_the_benchmark_rate():
    assert [delay_writes(x) for x in (0.0, 0.5, 0.7, 1.0, 2.0)] == [0, 0, 1, 1, 3]


def test_at_the_binpack_files_the_schedule_found_is_within_them_and_above_the_least():
    writes = streaming_writes(7, 60)
    parts = by_partition(writes)
    free = table_schedule(parts, len(writes), 1.0, 8 * MiB, 1)  # a file costs almost nothing: few merges
    found = at_live_files(writes, 8 * MiB, 0.8 * free.file_writes / len(writes), 1, True)
    sch = found["schedule"]
    assert sch is not None and sch.file_writes <= 0.8 * free.file_writes
    assert 0 < found["bound_bytes"] <= sch.rewritten * (1 + 1e-9)


def test_the_cli_reports_a_seed_and_exits_0(capsys):
    assert main(["--seed", "8", "--commits", "40", "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert r["seed"] == 8 and r["bytes_written"] > 0 and r["binpack"]["bytes_rewritten"] > 0
    assert r["schedule"]["live_ratio"] <= 1.0
    assert r["least_write_amplification"] <= r["schedule"]["write_amplification"] + 1e-9


def test_nonsense_options_are_refused(capsys):
    for argv in (["--commits", "5"], ["--latency", "-1"], ["--target", "lots"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    assert "--target" in capsys.readouterr().err


def test_a_family_member_is_reported_at_its_own_target_and_at_the_issues_live_files_goal(capsys):
    assert main(["--member", "m01", "--commits", "40", "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert r["member"].startswith("m01-") and r["target"] == 128 * MiB and r["commits"] == 40
    assert r["live_ratio"] == 1.05 and r["latency"] == 2.0
    assert r["bytes_written"] > 0 and r["binpack"]["bytes_rewritten"] > 0
    assert r["schedule"]["live_ratio"] <= 1.05
    assert r["least_write_amplification"] <= r["schedule"]["write_amplification"] + 1e-9


def test_a_member_is_cut_where_a_partition_would_outgrow_the_model():
    writes = [Write(float(k), ((0, 10), (1, 10)) if k % 2 else ((0, 10),)) for k in range(MAX_FILES_PER_PARTITION + 9)]
    kept = within_model(writes)
    assert len(kept) == MAX_FILES_PER_PARTITION  # the next write would give partition 0 its 401st file
    assert within_model(writes[:50]) == writes[:50]


def test_member_options_that_make_no_sense_are_refused(capsys):
    for argv, said in ((["--member", "m99"], "no single family member"), (["--seed", "7", "--member", "m01"], "not both"),
                       (["--member", "m01", "--live-ratio", "0"], "--live-ratio")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert said in capsys.readouterr().err
