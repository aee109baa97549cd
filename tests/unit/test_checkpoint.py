"""The stored checkpoint's JSON shape: rows written before the typed checkpoint still load, and every
shape written today survives a round trip unchanged."""

from __future__ import annotations

import pytest

from autooptimize.domain.actions import ActionOutcome, Checkpoint, Digest, GroupResult, combine_checksums
from autooptimize.services.rewrite.verify import verify_group

BASE = {"spec_id": 0, "partition": "day=2024-01-01", "inputs": ["a", "b"], "outputs": ["c"], "bytes_in": 20,
        "bytes_out": 12, "rows_in": 10, "rows_out": 10, "checksum_in": "10:a:b", "checksum_out": "10:a:b",
        "output_sizes": [12]}
SPARK_SQL = {"sort_order_id": None, **BASE, "engine": "spark_sql"}
SPARK = {**BASE, "engine": "spark", "executor": "host-1:4242"}
SORTED_PART = {**BASE, "sort_order_id": 1, "engine": "spark", "part": 2}
RESPEC = {**BASE, "engine": "local", "output_partitions": [[1, ["00ff", None]]]}
COMPACT = {**BASE, "deletes": ["d1"], "scope": ["d1", "d2"], "refs": {"d1": ["a"]}, "rows_deleted": 3,
           "rows_out": 7, "checksum_out": "7:1:2"}


@pytest.mark.parametrize("entry", [SPARK_SQL, SPARK, SORTED_PART, RESPEC, COMPACT])
def test_group_entries_round_trip(entry):
    assert GroupResult.from_dict(entry).to_dict() == entry


@pytest.mark.parametrize("engine", ["arrow", "arrow_on_spark", "auto"])
def test_groups_recorded_under_the_old_engine_names_still_load(engine):
    assert GroupResult.from_dict({**BASE, "engine": engine}).engine == engine


def test_checkpoints_of_every_shape_load():
    merge = {"base_snapshot_id": 5, "writer": {"spark_session_id": "s"}, "dirs": ["/t/data/ao-x"], "partial": True,
             "groups": [SORTED_PART]}
    assert Checkpoint.from_dict(merge).to_dict() == merge
    first_compact_save = {"writer": {"spark_session_id": "s"}, "dirs": ["/t/data/ao-x"]}  # no groups yet
    loaded = Checkpoint.from_dict(first_compact_save)
    assert loaded.groups == () and loaded.writer_session_id == "s" and loaded.base_snapshot_id is None
    assert Checkpoint.from_dict(None) == Checkpoint()


def test_outcome_figures_sum_the_groups():
    outcome = ActionOutcome(state="succeeded")
    groups = [GroupResult.from_dict(SPARK), GroupResult.from_dict(COMPACT)]
    outcome.add_figures(groups)
    assert (outcome.files_in, outcome.files_out, outcome.rows_in, outcome.rows_out) == (4, 2, 20, 17)
    assert outcome.checksum_out == combine_checksums(["10:a:b", "7:1:2"]) == "17:b:d"


def test_verify_ladder_order():
    same = Digest(10, "10:a:b")
    ok = {"reader": "Spark", "files_in": 2, "metadata_rows": 10, "rows_read": 10, "expected_out": same,
          "digest_out": same, "footer_rows": lambda: 10}
    verify_group("g0", **ok)
    from autooptimize.errors import VerificationFailed

    with pytest.raises(VerificationFailed, match="metadata says 9"):
        verify_group("g0", **{**ok, "metadata_rows": 9})
    with pytest.raises(VerificationFailed, match="differs from its inputs"):
        verify_group("g0", **{**ok, "digest_out": Digest(10, "10:a:c")})
    with pytest.raises(VerificationFailed, match="footers of g0 hold 9"):
        verify_group("g0", **{**ok, "footer_rows": lambda: 9})
    with pytest.raises(VerificationFailed, match="with deletes applied"):
        verify_group("g0", **{**ok, "rows_deleted": 1})
