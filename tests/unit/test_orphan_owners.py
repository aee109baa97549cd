"""Which action a file of a table belongs to, as orphan removal reads its path
(autooptimize/services/hygiene/orphans._ao_segments): an in-flight action's files are kept."""

from __future__ import annotations

from autooptimize.services.hygiene.orphans import _ao_segments

ACTION = "0b9d5c1e-7f3a-4c2e-9d1b-5e6f7a8b9c0d"


def test_data_output_belongs_to_the_action_of_its_directory():
    assert _ao_segments(f"data/day=2026-01-01/ao-{ACTION}/g0/part-0.parquet") == [ACTION]


def test_a_manifest_written_ahead_of_a_commit_belongs_to_the_action_its_name_starts_with():
    assert _ao_segments(f"metadata/ao-{ACTION}-5f0c2a9e-1d2b-4c3d-8e9f-0a1b2c3d4e5f-m0.avro") == [ACTION]


def test_other_names_keep_their_meaning():
    assert _ao_segments("metadata/5f0c2a9e-1d2b-4c3d-8e9f-0a1b2c3d4e5f-m0.avro") == []
    assert _ao_segments("data/ao-not-a-uuid/x.parquet") == ["not-a-uuid"]  # an unknown ao- directory: kept
    assert _ao_segments(f"metadata/ao-{ACTION}-notes.txt") == [f"{ACTION}-notes.txt"]  # not a manifest: unknown
