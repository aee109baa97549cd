"""The simulator replays a family member as the live benchmark's writer puts it on the table: pyiceberg's
append cuts a partition's rows into data files of 512 MiB of Arrow, so m03's 78 family files are 147
(the count its live runs added)."""

from __future__ import annotations

import pytest

from benchmarks.policy_sim import family_writes
from benchmarks.trace import BASE_HOUR, FileSpec, writer_cut
from benchmarks.trace_family import FAMILY, member


def test_a_commit_handed_whole_is_cut_per_partition_at_the_rows_per_file():
    files = (FileSpec(BASE_HOUR, 1_250, 0), FileSpec(BASE_HOUR - 1, 300, 0))
    assert writer_cut(files, 500) == [(BASE_HOUR, 500), (BASE_HOUR, 500), (BASE_HOUR, 250), (BASE_HOUR - 1, 300)]


def test_a_commit_over_the_whole_limit_is_cut_at_its_parts_too():
    files = (FileSpec(BASE_HOUR, 700, 0), FileSpec(BASE_HOUR - 1, 500, 0))
    # parts of 600: [600 of h], [100 of h, 500 of h-1]
    assert writer_cut(files, 400, whole_rows=1_000, part_rows=600) == [
        (BASE_HOUR, 400), (BASE_HOUR, 200), (BASE_HOUR, 100), (BASE_HOUR - 1, 400), (BASE_HOUR - 1, 100)]
    assert writer_cut(files, 400, whole_rows=1_200, part_rows=600) == [
        (BASE_HOUR, 400), (BASE_HOUR, 300), (BASE_HOUR - 1, 400), (BASE_HOUR - 1, 100)]


@pytest.mark.parametrize("bad", [{"rows_per_file": 0}, {"whole_rows": 0}, {"part_rows": -1}])
def test_nonsense_sizes_are_refused_by_name(bad):
    args = {"rows_per_file": 10, "whole_rows": 10, "part_rows": 10} | bad
    with pytest.raises(ValueError, match="rows_per_file, whole_rows and part_rows"):
        writer_cut((FileSpec(BASE_HOUR, 5, 0),), **args)


def test_m03_and_m11_are_cut_into_the_files_the_live_writer_added_and_no_other_member_is():
    cut = {m.name[:3]: family_writes(m) for m in FAMILY}
    whole = {m.name[:3]: family_writes(m, one_file_per_partition=True) for m in FAMILY}
    assert sum(len(w.files) for w in cut["m03"]) == 147  # session 46's live runs of m03 added 147
    assert sum(len(w.files) for w in whole["m03"]) == 78
    assert sum(len(w.files) for w in cut["m11"]) > sum(len(w.files) for w in whole["m11"])
    for name in ("m03", "m11"):
        assert [w.at for w in cut[name]] == [w.at for w in whole[name]]
        for c, w in zip(cut[name], whole[name], strict=True):
            assert {p for p, _ in c.files} == {p for p, _ in w.files}
            assert sum(b for _, b in c.files) == pytest.approx(sum(b for _, b in w.files), rel=1e-3, abs=200)
    assert all(cut[k] == whole[k] for k in cut if k not in ("m03", "m11"))
    assert len(family_writes(member("m03"))) == member("m03").commits
