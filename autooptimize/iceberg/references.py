"""Which files a table references, and which files lie in its location.

A file is referenced when any snapshot of the table can read it or when the table's metadata names it:
the current metadata file and those in the metadata log, every snapshot's manifest list, every manifest
those lists name, every data and delete file live (ADDED or EXISTING) in those manifests, and the
statistics and partition-statistics files. Paths are compared in one normal form, because writers spell
the same local file ``/x``, ``file:/x`` or ``file:///x``. Listing and deleting go through
autooptimize.iceberg.paths: no link is followed, nothing outside the table's resolved location is touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFileContent, read_manifest_list
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from autooptimize.domain import fencing
from autooptimize.iceberg.paths import PathRefused, delete_file, normalise_path, refusal, walk

METADATA_KINDS = ("metadata", "manifest-list", "manifest", "statistics")


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
    a directory configured outside the table location, or reached through a link leading out of it,
    maps to None: nothing there is ever touched."""
    location = table.location().rstrip("/")
    props = table.properties
    dirs: dict[str, str | None] = {}
    for name, key in (("data", "write.data.path"), ("metadata", "write.metadata.path")):
        path = props.get(key, f"{location}/{name}").rstrip("/")
        inside = normalise_path(path) == normalise_path(location) or refusal(location, path, "list") is None
        dirs[name] = path if inside else None
    return dirs


@dataclass(frozen=True)
class StoredFile:
    uri: str  # as the filesystem lists it, with the directory's scheme
    path: str  # normalised
    size: int
    mtime: float | None  # seconds since the epoch; None when the filesystem does not say
    link: bool = False  # a symlink (listed, never followed)


def stored_files(location: str, directory: str, io: FileIO | None = None) -> Iterator[StoredFile]:
    """Every file and link below ``directory`` (recursively, under the table ``location``, through the
    table's FileIO ``io``), never following a link; nothing when it does not exist. PathRefused when
    ``directory`` itself resolves outside ``location``."""
    for entry in walk(location, directory, io):
        if entry.kind != "dir":
            yield StoredFile(uri=entry.uri, path=normalise_path(entry.uri), size=entry.size, mtime=entry.mtime,
                             link=entry.kind == "link")


@dataclass
class Deletion:
    """What :func:`delete_files` did: the URIs deleted, and each one refused (with why)."""

    deleted: list[str] = field(default_factory=list)
    refused: list[PathRefused] = field(default_factory=list)


def delete_files(location: str, uris: Iterable[str], io: FileIO | None = None) -> Deletion:
    """Delete files (each must resolve under the table ``location``) through the table's FileIO ``io``;
    a missing file is skipped, a file outside is refused and left alone (see autooptimize.iceberg.paths).
    The thread's fence (autooptimize.domain.fencing) is asked before the first file and every hundredth:
    a holder that lost its lease or lock deletes nothing more."""
    done = Deletion()
    for n, uri in enumerate(uris):
        if n % 100 == 0:
            fencing.before_delete(uri)
        try:
            if delete_file(location, uri, io):
                done.deleted.append(uri)
        except PathRefused as refused:
            done.refused.append(refused)
    return done
