"""The one way the service turns a location into a filesystem (autooptimize.iceberg.fileio), on local files."""

from __future__ import annotations

import os

from autooptimize.iceberg.fileio import (
    exists,
    filesystem,
    list_files,
    normalise,
    scheme_of,
    table_is_local,
)


def test_listing_keeps_the_callers_spelling_and_skips_hidden_files(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/b/x.parquet", "a/_SUCCESS", "a/.x.crc", "a/y.parquet", "a/z.txt"):
        (tmp_path / name).write_bytes(b"1")
    bare = str(tmp_path)
    assert list_files(None, bare, ".parquet") == [f"{bare}/a/b/x.parquet", f"{bare}/a/y.parquet"]
    assert list_files(None, f"file://{bare}") == [f"file://{bare}/a/b/x.parquet", f"file://{bare}/a/y.parquet",
                                                   f"file://{bare}/a/z.txt"]
    assert list_files(None, f"{bare}/missing") == []


def test_delete_tree_is_only_the_checked_one_and_exists(tmp_path):
    """fileio offers no unchecked delete: every delete goes through iceberg.paths (containment, fence)."""
    import autooptimize.iceberg.fileio as fileio
    from autooptimize.iceberg.paths import PathRefused, delete_tree

    assert not hasattr(fileio, "delete_tree")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.parquet").write_bytes(b"1")
    (tmp_path / "keep.parquet").write_bytes(b"1")
    assert exists(None, f"file://{tmp_path}/d") and not exists(None, f"{tmp_path}/nope")
    try:
        delete_tree(f"file://{tmp_path}/d", f"file://{tmp_path}/keep.parquet")
        raise AssertionError("a path outside its root was deleted")
    except PathRefused:
        pass
    assert delete_tree(f"file://{tmp_path}", f"file://{tmp_path}/d")
    assert not delete_tree(f"file://{tmp_path}", f"file://{tmp_path}/d")  # missing is fine
    assert os.listdir(tmp_path) == ["keep.parquet"]


def test_locations_are_spelled_one_way():
    assert normalise("/x/y") == normalise("file:/x/y") == normalise("file:///x/y") == "file:///x/y"
    assert normalise("s3://b/k") == "s3://b/k"
    assert (scheme_of("/x"), scheme_of("S3://b/k"), scheme_of("gs://b")) == ("file", "s3", "gs")

    class _Table:
        def __init__(self, location: str) -> None:
            self._location = location

        def location(self) -> str:
            return self._location

    assert table_is_local(_Table("file:///w/t")) and table_is_local(_Table("/w/t")) and not table_is_local(_Table("s3://b/t"))
    _, path, prefix = filesystem(None, "file:///w/t")
    assert (path, prefix) == ("/w/t", "file://")


def test_the_field_id_cache_keeps_no_fileio_alive(tmp_path):
    """A long-lived worker loads a table (and a new FileIO) per action: the footer cache must not pile them up."""
    import gc
    import weakref
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from autooptimize.services.evolution import has_field_ids

    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"a": [1]}), path)
    refs = []
    for _ in range(20):
        io = PyArrowFileIO()
        refs.append(weakref.ref(io))
        assert has_field_ids(SimpleNamespace(io=io), path) is False
        del io
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
