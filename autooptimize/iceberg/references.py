"""Which files a table references, and which files lie in its location.

A file is referenced when any snapshot of the table can read it or when the table's metadata names it:
the current metadata file and those in the metadata log, every snapshot's manifest list, every manifest
those lists name, every data and delete file live (ADDED or EXISTING) in those manifests, and the
statistics and partition-statistics files. Paths are compared in one normal form, because writers spell
the same local file ``/x``, ``file:/x`` or ``file:///x``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pyiceberg.manifest import DataFileContent, read_manifest_list
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from autooptimize.domain import fencing
from autooptimize.errors import InvalidArgument

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
METADATA_KINDS = ("metadata", "manifest-list", "manifest", "statistics")


def normalise_path(path: str) -> str:
    """One spelling per file: ``file:///abs/path`` for local files, ``scheme://netloc/path`` otherwise."""
    path = str(path)
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        local = path if not scheme else parts.path
        if scheme and parts.netloc not in ("", "localhost"):
            # file://host/x: keep the host in the path; a false match can only keep a file, never lose one
            local = f"/{parts.netloc}{parts.path}"
        return "file://" + posixpath.normpath("/" + local.lstrip("/"))
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    return f"{scheme}://{parts.netloc}{posixpath.normpath(parts.path or '/')}"


def is_within(directory: str, path: str) -> bool:
    """Whether ``path`` lies strictly inside ``directory`` (both in any spelling)."""
    root = normalise_path(directory).rstrip("/") + "/"
    return normalise_path(path).startswith(root)


class ReferenceReader:
    """Reads what snapshots reference. Manifests are immutable, so each is read once per reader even when
    many snapshots share it; keep one reader across the refreshes of one action."""

    def __init__(self, table: Table) -> None:
        self._table = table
        self._manifest_files: dict[str, list[tuple[str, str]]] = {}

    def _manifest_entries(self, manifest: object) -> list[tuple[str, str]]:
        path = str(manifest.manifest_path)  # type: ignore[attr-defined]
        cached = self._manifest_files.get(path)
        if cached is None:
            cached = [
                (normalise_path(str(e.data_file.file_path)),
                 "data" if e.data_file.content == DataFileContent.DATA else "delete")
                for e in manifest.fetch_manifest_entry(self._table.io, discard_deleted=True)  # type: ignore[attr-defined]
            ]
            self._manifest_files[path] = cached
        return cached

    def snapshot_files(self, snapshot: Snapshot) -> dict[str, str]:
        """Every file ``snapshot`` reads: its manifest list, manifests, data and delete files (path → kind)."""
        return self.manifest_list_files(snapshot.manifest_list)

    def manifest_list_files(self, manifest_list: str, *, missing_ok: bool = False) -> dict[str, str]:
        """Every file a manifest list leads to, itself included. With ``missing_ok`` a manifest list or
        manifest already deleted is skipped (finishing an interrupted clean-up)."""
        files = {normalise_path(manifest_list): "manifest-list"}
        try:
            manifests = list(read_manifest_list(self._table.io.new_input(manifest_list)))
        except FileNotFoundError:
            if not missing_ok:
                raise
            return files
        for manifest in manifests:
            files[normalise_path(str(manifest.manifest_path))] = "manifest"
            try:
                files.update(self._manifest_entries(manifest))
            except FileNotFoundError:
                if not missing_ok:
                    raise
        return files

    def table_references(self, table: Table | None = None) -> dict[str, str]:
        """Every file the table's metadata or any of its snapshots references (normalised path → kind)."""
        table = table or self._table
        self._table = table
        metadata = table.metadata
        files: dict[str, str] = {}
        for snapshot in metadata.snapshots:
            files.update(self.snapshot_files(snapshot))
        files.update(metadata_files(table))
        return files


def metadata_files(table: Table) -> dict[str, str]:
    """Files the metadata itself names: metadata JSON (current and logged) and statistics files."""
    metadata = table.metadata
    files: dict[str, str] = {}
    if table.metadata_location:
        files[normalise_path(table.metadata_location)] = "metadata"
    for entry in metadata.metadata_log:
        files[normalise_path(entry.metadata_file)] = "metadata"
    for stats in metadata.statistics:
        files[normalise_path(stats.statistics_path)] = "statistics"
    for pstats in metadata.partition_statistics:
        files[normalise_path(pstats.statistics_path)] = "statistics"
    return files


def table_directories(table: Table) -> dict[str, str | None]:
    """The data and metadata directories (``write.data.path`` / ``write.metadata.path`` or the defaults);
    a directory configured outside the table location maps to None: nothing there is ever touched."""
    location = table.location().rstrip("/")
    props = table.properties
    dirs: dict[str, str | None] = {}
    for name, key in (("data", "write.data.path"), ("metadata", "write.metadata.path")):
        path = props.get(key, f"{location}/{name}").rstrip("/")
        dirs[name] = path if normalise_path(path) == normalise_path(location) or is_within(location, path) else None
    return dirs


@dataclass(frozen=True)
class StoredFile:
    uri: str  # as the filesystem lists it, with the directory's scheme
    path: str  # normalised
    size: int
    mtime: float | None  # seconds since the epoch; None when the filesystem does not say


def list_files(directory: str) -> Iterator[StoredFile]:
    """Every file below ``directory`` (recursively); nothing when it does not exist."""
    fs, root = pafs.FileSystem.from_uri(directory)
    prefix = directory.split("://", 1)[0] + "://" if "://" in directory else ""
    if prefix == "file://" and not root.startswith("/"):
        root = "/" + root
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        uri = prefix + info.path if prefix else info.path
        mtime = info.mtime.timestamp() if info.mtime is not None else None
        yield StoredFile(uri=uri, path=normalise_path(uri), size=int(info.size or 0), mtime=mtime)


def delete_files(directory: str, uris: Iterable[str]) -> list[str]:
    """Delete files (all inside ``directory``); returns those actually deleted (a missing file is skipped).

    Raises InvalidArgument (before deleting that file) for a URI outside ``directory``. The thread's
    fence (autooptimize.domain.fencing) is asked before the first file and every hundredth."""
    fs, _ = pafs.FileSystem.from_uri(directory)
    deleted = []
    for n, uri in enumerate(uris):
        if not is_within(directory, uri):
            raise InvalidArgument(f"refusing to delete {uri}: not inside {directory}")
        if n % 100 == 0:  # a holder that lost its lease or lock deletes nothing more
            fencing.before_delete(uri)
        _, path = pafs.FileSystem.from_uri(uri)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            continue
        deleted.append(uri)
    return deleted
