"""The rules deciding which delete file applies to which data file (Iceberg spec, "Scan Planning")."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from autooptimize.iceberg.deletes import POS_FILE_PATH_ID
from autooptimize.iceberg.files import LiveFile
from autooptimize.services.compact import _may_name, applies


def _file(path: str, content: DataFileContent, seq: int, bounds: tuple[bytes, bytes] | None = None) -> LiveFile:
    df = DataFile.from_args(
        content=content, file_path=path, file_format=FileFormat.PARQUET, partition=Record(), record_count=1,
        file_size_in_bytes=1, lower_bounds={POS_FILE_PATH_ID: bounds[0]} if bounds else None,
        upper_bounds={POS_FILE_PATH_ID: bounds[1]} if bounds else None,
        equality_ids=[1] if content == DataFileContent.EQUALITY_DELETES else None,
    )
    return LiveFile(df, seq, seq)


DATA = "file:///t/data/a.parquet"


@pytest.mark.parametrize(("delete_seq", "data_seq", "expected"), [(3, 2, True), (2, 2, True), (1, 2, False)])
def test_position_delete_applies_to_named_files_not_newer_than_itself(delete_seq, data_seq, expected):
    delete = _file("file:///t/data/pos.parquet", DataFileContent.POSITION_DELETES, delete_seq)
    refs = {delete.path: frozenset({DATA})}
    assert applies(delete, _file(DATA, DataFileContent.DATA, data_seq), refs) is expected
    assert applies(delete, _file("file:///t/data/b.parquet", DataFileContent.DATA, 0), refs) is False


@pytest.mark.parametrize(("delete_seq", "data_seq", "expected"), [(3, 2, True), (2, 2, False), (1, 2, False)])
def test_equality_delete_applies_only_to_strictly_older_files(delete_seq, data_seq, expected):
    delete = _file("file:///t/data/eq.parquet", DataFileContent.EQUALITY_DELETES, delete_seq)
    assert applies(delete, _file(DATA, DataFileContent.DATA, data_seq), {}) is expected


def test_path_bounds_prune_only_delete_files_that_cannot_name_a_path():
    exact = _file("p", DataFileContent.POSITION_DELETES, 1, (DATA.encode(), DATA.encode()))
    elsewhere = _file("q", DataFileContent.POSITION_DELETES, 1, (b"file:///t/data/x", b"file:///t/data/z"))
    truncated = _file("r", DataFileContent.POSITION_DELETES, 1, (b"file:///t/da", b"file:///t/db"))
    unknown = _file("s", DataFileContent.POSITION_DELETES, 1)
    assert _may_name(exact, {DATA}) and _may_name(truncated, {DATA}) and _may_name(unknown, {DATA})
    assert not _may_name(elsewhere, {DATA})
