"""What a merge writes against what it reads: the fit on a table's REPLACE commits, and the replay with it."""

from __future__ import annotations

from autooptimize.domain.output_model import MIN_FIT_COMMITS, fit_output_model
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import Merge, Write, simulate_policy


def _commits(share: float, overhead: int, n: int = 12) -> list[tuple[int, int, int]]:
    out = []
    for i in range(n):
        read, removed = 200_000 + 90_000 * i, 2 + i % 11  # 3 to 12 files merged into one
        out.append((read, round(share * read - overhead * removed), removed))
    return out


def test_the_fit_recovers_the_share_and_the_weight_of_a_file() -> None:
    share, overhead = fit_output_model(_commits(0.989, 3_900))
    assert abs(share - 0.989) < 1e-6 and overhead == 3_900
    noisy = [(r, w + (1_500 if k % 2 else -1_500), d) for k, (r, w, d) in enumerate(_commits(0.97, 4_500))]
    share, overhead = fit_output_model(noisy)
    assert abs(share - 0.97) < 0.005 and abs(overhead - 4_500) < 600


def test_no_fit_from_too_few_commits_nor_from_commits_that_cannot_tell_the_two_apart() -> None:
    assert fit_output_model(_commits(0.99, 4_000, n=MIN_FIT_COMMITS - 1)) is None
    same_shape = [(100_000 * k, 95_000 * k, 2 * k) for k in range(1, 13)]  # files removed ∝ bytes read
    assert fit_output_model(same_shape) is None
    assert fit_output_model(_commits(0.3, 0)) is None  # a share nobody's merges have: not believed
    assert fit_output_model(_commits(1.0, -5_000)) is None  # merging cannot add bytes for each file removed


def test_the_replay_weighs_each_merge_by_the_share_less_the_weight_of_the_files_it_removed() -> None:
    # four writer files of 60 kB into one, by the cold finish
    writes = [Write(at, (("a", 60_000),)) for at in (0.0, 0.5, 1.0, 1.5)]
    tuning = PolicyTuning(8 << 20, price=0)
    captured: list[Merge] = []
    fig = simulate_policy(writes, tuning, latency=0.3, output_ratio=0.99, file_overhead=4_000,
                          on_merge=captured.append)
    assert fig.end_files == 1 and [m.bytes_in for m in captured] == [240_000]
    # the one file left: 0.99 × 240 kB less 3 × 4 kB (four files became one)
    again = simulate_policy(writes + [Write(60.0, (("a", 10),))], tuning, latency=0.3, output_ratio=0.99,
                            file_overhead=4_000, on_merge=captured.append)
    assert captured[-1].bytes_in == round(0.99 * 240_000) - 3 * 4_000 + 10 and again.end_files == 1
    # without the weight per file: the older model, a writer's file weighing the ratio once first merged
    older: list[Merge] = []
    simulate_policy(writes + [Write(60.0, (("a", 10),))], tuning, latency=0.3, output_ratio=0.99,
                    on_merge=older.append)
    assert older[-1].bytes_in == 4 * round(0.99 * 60_000) + 10


def test_a_calibrated_model_counts_a_writers_file_at_its_first_ratio_and_a_merged_file_at_its_size() -> None:
    """A calibration measures what the engine's writer makes of a writer's file alone (``first_ratio``); the
    share and the footers come on top, and a merged file, the engine's own, is read at its size."""
    writes = [Write(at, (("a", 60_000),)) for at in (0.0, 0.5, 1.0, 1.5)]
    tuning = PolicyTuning(8 << 20, price=0)
    captured: list[Merge] = []
    simulate_policy(writes + [Write(60.0, (("a", 10_000),))], tuning, latency=0.3, output_ratio=1.0,
                    file_overhead=1_000, first_ratio=0.9, on_merge=captured.append)
    first = round(0.9 * 240_000) - 3 * 1_000  # four writer files into one
    # the merged file at its size, the late writer file at 0.9 of its; one file removed
    assert [m.bytes_in for m in captured] == [240_000, first + 10_000]
    plain: list[Merge] = []  # the same without a first ratio: only the footers come off
    simulate_policy(writes + [Write(60.0, (("a", 10_000),))], tuning, latency=0.3, output_ratio=1.0,
                    file_overhead=1_000, on_merge=plain.append)
    assert [m.bytes_in for m in plain] == [240_000, 240_000 - 3 * 1_000 + 10_000]
    # a fit on REPLACE commits has no first ratio: the share takes the writer's part in, as before
    same: list[Merge] = []
    simulate_policy(writes, tuning, latency=0.3, output_ratio=0.99, file_overhead=4_000, first_ratio=1.0,
                    on_merge=same.append)
    assert [m.bytes_in for m in same] == [240_000]
