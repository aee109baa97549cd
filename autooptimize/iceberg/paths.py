"""Where autooptimize may delete or write: only strictly under a root, judged on resolved paths.

Every path autooptimize deletes or writes lies under one root: a table's location (rewrite and batch
outputs, orphan and expiry deletes) or the buffer root (landed, quarantined and swept files). Both
sides are resolved before they are compared. A local path (``/x``, ``file:/x``, ``file:///x``) is
resolved with ``os.path.realpath``, so ``..`` and a symlink anywhere on the way count for where they
lead. Object stores have neither, so their paths are compared as normalised text; :data:`CONTAINMENT`
maps a scheme to its check, where a store with its own rule (a bucket prefix policy) plugs in. Local
files are listed and deleted here (links need care); an object store is reached through the table's
FileIO (autooptimize.iceberg.fileio).

A path outside its root raises :class:`PathRefused` (path, root, reason) before anything is done to
it; the caller records it in the audit log as ``path.refused``. Listing never follows a symlink: a
linked directory is not descended into and a link is listed as a link, never as what it points at.
Deleting a file unlinks its last component inside the resolved parent directory, so a link is removed
and never its target. What this cannot stop: someone with write access to the table's directories
swapping a directory for a link between the check and the delete.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pyiceberg.io import FileIO

from autooptimize.domain import fencing
from autooptimize.errors import ActionRefused
from autooptimize.iceberg.fileio import exists, filesystem, list_files

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


class PathRefused(ActionRefused):
    """A path to delete or write does not lie under its root; nothing was done to it."""

    def __init__(self, path: str, root: str, reason: str, operation: str) -> None:
        super().__init__("path_refused", f"refusing to {operation} {path}: {reason.replace('_', ' ')} "
                                         f"(it must lie under {root})")
        self.path, self.root, self.why, self.operation = path, root, reason, operation

    def audit_detail(self) -> dict[str, str]:
        """What a ``path.refused`` audit record holds."""
        return {"path": self.path, "root": self.root, "reason": self.why, "operation": self.operation}


def normalise_path(path: str) -> str:
    """One spelling per file: ``file:///abs/path`` for local files, ``scheme://netloc/path`` otherwise
    (``..`` collapsed as text; links are not followed here, see :func:`resolve`)."""
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


def is_local(path: str) -> bool:
    return normalise_path(path).startswith("file://")


def local_path(path: str) -> str:
    """The file-system path of a local URI (``/x`` for ``file:///x``, ``file:/x`` or ``/x``)."""
    return normalise_path(path).removeprefix("file://")


def resolve(path: str) -> str:
    """The path in its normal spelling, with every symlink and ``..`` of a local path resolved."""
    if is_local(path):
        return "file://" + os.path.realpath(local_path(path))
    return normalise_path(path)


def canonical(path: str) -> str:
    """The one identity of a file, for comparing a listing with a set of referenced files: the normal
    spelling with every symlink and ``..`` of a local path resolved (:func:`resolve`). Two spellings of
    one file (``/whlink/t/x`` and ``file:///whreal/t/x`` through a link) compare equal only this way."""
    return resolve(path)


def is_within(directory: str, path: str) -> bool:
    """Whether ``path`` lies strictly inside ``directory`` as text (both in any spelling, no links followed)."""
    root = normalise_path(directory).rstrip("/") + "/"
    return normalise_path(path).startswith(root)


def _prefix_within(root: str, path: str) -> bool:
    return is_within(root, path)


def _local_within(root: str, path: str) -> bool:
    return is_within(resolve(root), resolve(path))


#: scheme → whether a path lies strictly under a root of that scheme
CONTAINMENT: dict[str, Callable[[str, str], bool]] = {"file": _local_within}


def _scheme(path: str) -> str:
    return normalise_path(path).split("://", 1)[0]


def refusal(root: str, path: str, operation: str) -> PathRefused | None:
    """Why ``path`` may not be touched under ``root``, or None when it lies strictly under it."""
    if _scheme(root) != _scheme(path):
        return PathRefused(path, root, "other_file_system", operation)
    if not is_within(root, path):
        return PathRefused(path, root, "outside_root", operation)
    if not CONTAINMENT.get(_scheme(path), _prefix_within)(root, path):
        return PathRefused(path, root, "resolves_outside_root", operation)
    return None


def check(root: str, path: str, operation: str) -> str:
    """``path`` unchanged when it lies strictly under ``root``; PathRefused otherwise."""
    problem = refusal(root, path, operation)
    if problem is not None:
        raise problem
    return path


def check_parent(root: str, path: str, operation: str) -> str:
    """Like :func:`check` for a file about to be removed: its directory must resolve under ``root`` too
    (its last component is unlinked, never followed)."""
    check(root, path, operation)
    parent = normalise_path(path).rsplit("/", 1)[0]
    if normalise_path(parent) != normalise_path(root):
        check(root, parent, operation)
    return path


@dataclass(frozen=True)
class Entry:
    """One entry of a listing: a file, a directory, or a link (never followed)."""

    uri: str  # with the listed directory's scheme
    kind: str  # "file", "dir" or "link"
    size: int
    mtime: float | None  # seconds since the epoch; None when the file system does not say


def _uri_prefix(directory: str) -> str:
    if is_local(directory):
        return "file://" if "://" in directory or directory.startswith("file:") else ""
    return directory.split("://", 1)[0] + "://"


def walk(root: str, directory: str, io: FileIO | None = None) -> Iterator[Entry]:
    """Everything below ``directory`` (which must lie under ``root``, or be it), without following links;
    nothing when it does not exist. ``io`` (the table's FileIO) reaches an object store."""
    if normalise_path(directory) != normalise_path(root):
        check(root, directory, "list")
    if is_local(directory):
        yield from _walk_local(local_path(directory), _uri_prefix(directory))
        return
    fs, start, prefix = filesystem(io, directory)
    for info in fs.get_file_info(pafs.FileSelector(start, recursive=True, allow_not_found=True)):
        kind = {pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}.get(info.type)
        if kind is not None:
            mtime = info.mtime.timestamp() if info.mtime is not None else None
            yield Entry(prefix + info.path, kind, int(info.size or 0), mtime)


def _walk_local(top: str, prefix: str) -> Iterator[Entry]:
    pending = [top]
    while pending:
        try:
            listing = os.scandir(pending.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with listing:
            for item in listing:
                stat = item.stat(follow_symlinks=False)
                if item.is_symlink():
                    yield Entry(prefix + item.path, "link", 0, stat.st_mtime)
                elif item.is_dir(follow_symlinks=False):
                    yield Entry(prefix + item.path, "dir", 0, stat.st_mtime)
                    pending.append(item.path)
                elif item.is_file(follow_symlinks=False):
                    yield Entry(prefix + item.path, "file", stat.st_size, stat.st_mtime)


def delete_file(root: str, path: str, io: FileIO | None = None) -> bool:
    """Remove one file (or link) under ``root``; False when it was already gone. PathRefused (before
    anything is removed) for a path outside ``root``. ``io`` reaches an object store."""
    check_parent(root, path, "delete")
    if is_local(path):
        parent, name = posixpath.split(local_path(path))
        try:
            os.unlink(os.path.join(os.path.realpath(parent), name))
        except FileNotFoundError:
            return False
        return True
    fs, target, _ = filesystem(io, path)
    try:
        fs.delete_file(target)
    except FileNotFoundError:
        return False
    return True


def delete_tree(root: str, directory: str, io: FileIO | None = None) -> bool:
    """Remove ``directory`` (under ``root``) and everything below it, never following a link out of it;
    False when it did not exist. PathRefused (before anything is removed) for a directory outside ``root``.
    On an object store (through ``io``) a directory is a key prefix: every object under it goes. The
    thread's fence is asked first (autooptimize.domain.fencing): a holder that lost its lease or lock
    deletes nothing."""
    check_parent(root, directory, "delete")
    fencing.before_delete(directory)
    if is_local(directory):
        parent, name = posixpath.split(local_path(directory))
        target = os.path.join(os.path.realpath(parent), name)
        if not os.path.lexists(target):
            return False
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)  # removes the links it meets, never what they point at
        else:
            os.unlink(target)  # a file, or a link (never what it points at)
        return True
    existed = exists(io, directory) or bool(list_files(io, directory))
    _delete_store_tree(io, directory)
    return existed


def _delete_store_tree(io: FileIO | None, directory: str) -> None:
    """Remove ``directory`` on an object store (a key prefix: every object under it); missing is fine.
    Only :func:`delete_tree` calls this, after its checks."""
    fs, root, _ = filesystem(io, directory)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        fs.delete_file(root)
        return
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if entry.type == pafs.FileType.File:
            fs.delete_file(entry.path)
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(root)
