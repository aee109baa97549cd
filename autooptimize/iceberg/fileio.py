"""Every file operation through the table's own FileIO: one place that turns a URI into a filesystem.

pyarrow's ``FileSystem.from_uri`` knows nothing of the catalog: it ignores ``s3.endpoint``, the keys,
the region and path-style access, so on MinIO or any S3-compatible store it asks AWS instead. Here the
filesystem comes from the table's :class:`~pyiceberg.io.pyarrow.PyArrowFileIO`, built from the
catalog's properties, and the same properties travel to Spark's Python workers
(:func:`io_properties`), so planning, writing, listing, footer reads and deletes all reach one store
with one set of credentials.

URIs keep their scheme on the way out (``file:///a/b``, ``s3://bucket/key``): Iceberg metadata holds
them that way. A bare path is a local file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

__all__ = ["exists", "filesystem", "io_properties", "iter_files", "list_files", "local_io", "normalise",
           "scheme_of", "table_is_local"]


def local_io() -> PyArrowFileIO:
    """A FileIO for local paths (what a table on ``file://`` has)."""
    return PyArrowFileIO()


def table_is_local(table: Any) -> bool:
    """Whether the table's location is on the local filesystem (``file://`` or a bare path)."""
    return scheme_of(str(table.location())) == "file"


def scheme_of(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def normalise(uri: str) -> str:
    """The one spelling of a location: a bare path or ``file:/x`` becomes ``file:///x``; others unchanged."""
    if "://" not in uri:
        if uri.startswith("file:"):
            uri = uri[len("file:"):]
        return "file://" + uri if uri.startswith("/") else uri
    return uri


def _arrow_io(io: FileIO | None) -> PyArrowFileIO:
    if io is None:
        return local_io()
    if isinstance(io, PyArrowFileIO):
        return io
    # another FileIO (fsspec): the same properties build a pyarrow one for listing and deleting
    return PyArrowFileIO(dict(io.properties))


def filesystem(io: FileIO | None, uri: str) -> tuple[pafs.FileSystem, str, str]:
    """``(filesystem, path inside it, prefix)`` for ``uri``; ``prefix + path`` is the URI again (a bare
    local path stays bare, a URI keeps its scheme)."""
    arrow = _arrow_io(io)
    bare = "://" not in uri and not uri.startswith("file:")
    scheme, netloc, path = arrow.parse_location(normalise(uri), arrow.properties)
    fs = arrow.fs_by_scheme(scheme, netloc)
    prefix = "" if bare else "file://" if scheme == "file" else f"{scheme}://"
    return fs, path, prefix


def io_properties(io: FileIO | None) -> dict[str, str]:
    """The FileIO's properties (endpoint, keys, region): what a Spark worker needs to build the same one."""
    return dict(io.properties) if io is not None else {}


def exists(io: FileIO | None, uri: str) -> bool:
    fs, path, _ = filesystem(io, uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def iter_files(io: FileIO | None, directory: str) -> Iterator[tuple[str, pafs.FileInfo]]:
    """Every file under ``directory`` (recursive; a missing directory is empty), as ``(uri, info)``."""
    fs, root, prefix = filesystem(io, directory)
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type == pafs.FileType.File:
            yield _uri(prefix, info.path), info


def _uri(prefix: str, path: str) -> str:
    if prefix in ("", "file://"):
        return prefix + (path if path.startswith("/") else "/" + path)
    return prefix + path


def list_files(io: FileIO | None, directory: str, suffix: str | None = None) -> list[str]:
    """Sorted URIs of the files under ``directory`` (hidden and ``_``-prefixed names left out), ending in
    ``suffix`` when given."""
    out = []
    for uri, info in iter_files(io, directory):
        name = info.base_name
        if name.startswith(("_", ".")) or (suffix is not None and not name.endswith(suffix)):
            continue
        out.append(uri)
    return sorted(out)
