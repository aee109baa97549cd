"""Where a rewrite action writes, and how its output is fenced and removed.

An action owns the ``ao-<action id>`` directories under the table's data location. Output that is not
committed is removed, and never a file the table references. Every directory written or removed must
resolve inside the table's location (autooptimize.iceberg.paths); a link is never followed.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionRequest
from autooptimize.errors import Retry
from autooptimize.iceberg import paths
from autooptimize.iceberg.commit import action_added_paths, live_data_paths
from autooptimize.iceberg.fileio import exists
from autooptimize.iceberg.files import PartitionFiles, partition_dir
from spark_actors.session import fence

log = logging.getLogger(__name__)

#: How long a retry waits for an interrupted earlier write of its action to clean up after itself.
WRITER_WAIT_SECONDS = 120.0
#: Once nothing of the earlier attempt runs, how long to wait for its job's _temporary (or its tasks'
#: .writing markers: a killed Python worker stops within spark.python.task.killTimeout, 2 s) to go.
WRITER_GRACE_SECONDS = 10.0


def data_location(table: Table) -> str:
    """Where rewritten files go; PathRefused for a data path that does not resolve inside the table's
    location (``../x`` in it, or a link on its way out)."""
    location = table.location().rstrip("/")
    data_path = table.properties.get("write.data.path", f"{location}/data").rstrip("/")
    if paths.normalise_path(data_path) == paths.normalise_path(location):
        return data_path
    return paths.check(location, data_path, "write under")


def action_dir(table: Table, pf: PartitionFiles, action_id: str) -> str:
    """The directory an action writes a partition's output to; owned by that action alone, and by
    that partition alone.

    The partition part is :func:`~autooptimize.iceberg.files.partition_dir` of Iceberg's partition path
    (no ``%XX`` escapes or glob characters reach Spark); the ``ao-<id>`` part keeps it unique to the
    action. Where that name could stand for another partition too (a null and the string "null" are
    both ``null`` in Iceberg's path; ``a b`` and ``a_b`` are both ``a_b`` once escapes are replaced), a
    ``key-<hash of the partition's identity>`` level keeps the two apart.
    """
    base = data_location(table)
    part = "/" + _partition_part(pf) if pf.path else ""
    return paths.check(table.location(), f"{base}{part}/ao-{action_id}", "write")


def _partition_part(pf: PartitionFiles) -> str:
    name = partition_dir(pf.path)
    ambiguous = name != pf.path or any(segment.endswith("=null") for segment in pf.path.split("/"))
    if not ambiguous:
        return name
    identity = hashlib.sha256(f"{pf.spec_id}:{pf.key}".encode()).hexdigest()[:12]
    return f"{name}/key-{identity}"


def action_dirs(table: Table, action_id: str) -> list[str]:
    """Every ``ao-<action_id>`` directory under the table's data location (links are not followed)."""
    return sorted(e.uri for e in paths.walk(table.location(), data_location(table), table.io)
                  if e.kind == "dir" and e.uri.rsplit("/", 1)[-1] == f"ao-{action_id}")


def still_writing(directories: list[str] | tuple[str, ...], io: Any = None) -> bool:
    """True while a Spark SQL job's ``_temporary`` directory, or a task's ``.writing`` marker
    (spark_actors/group_tasks.writing), exists below one of ``directories`` (listed through ``io``, the
    table's FileIO); links are not followed."""
    return any((e.kind == "dir" and e.uri.rsplit("/", 1)[-1] == "_temporary")
               or (e.kind != "dir" and e.uri.endswith(".writing"))
               for directory in directories for e in paths.walk(directory, directory, io))


def remove_uncommitted(table: Table, directories: list[str] | tuple[str, ...], action_id: str | None = None) -> None:
    """Delete our output directories, never a file the table references, never outside the table.

    A file is referenced when it is live, or (given ``action_id``) when a snapshot of that action added
    it: parts committed under partial progress may since have been replaced, yet history keeps them. A
    directory holding referenced files is descended into, and only its unreferenced subdirectories go.
    A directory that is not an ``ao-`` output resolving inside the table raises PathRefused before
    anything is deleted.
    """
    if not directories:
        return
    location = table.location()
    for directory in directories:
        if "/ao-" not in directory:
            raise paths.PathRefused(directory, location, "not_an_autooptimize_output", "delete")
        paths.check(location, directory, "delete")
    # none there (an action's first attempt): nothing to remove, no need to list the table's live files
    present = [d for d in directories if exists(table.io, d) or next(paths.walk(location, d, table.io), None)]
    if not present:
        return
    table.refresh()
    keep = {paths.normalise_path(p) for p in live_data_paths(table) | (
        action_added_paths(table, action_id) if action_id else set())}
    for directory in present:
        _prune(table.io, location, directory, keep)


def _prune(io: Any, location: str, directory: str, keep: set[str]) -> None:
    below = list(paths.walk(location, directory, io))
    if not any(paths.normalise_path(e.uri) in keep for e in below if e.kind != "dir"):
        paths.delete_tree(location, directory, io)
        return
    here = paths.normalise_path(directory)
    children = [e.uri for e in below if e.kind == "dir" and paths.normalise_path(e.uri).rsplit("/", 1)[0] == here]
    if not children:
        log.info("keeping %s: it holds files the table references", directory)
    for child in children:
        _prune(io, location, child, keep)


def fence_earlier_writer(settings: Settings, table: Table, request: ActionRequest,
                         wait: float = WRITER_WAIT_SECONDS) -> None:
    """Stop a killed attempt's Spark job before touching its output (see spark_actors.session.fence).

    Raises Retry when the interrupted job has not cleaned up within ``wait`` seconds: the action is
    tried again later rather than racing a writer.
    """
    previous = request.resume_point.writer_session_id
    if not previous:
        return
    interrupted = fence(settings, previous)
    if not interrupted:
        return  # nothing of it runs (it finished, or its server died): leftovers are inert
    log.warning("action %s: interrupted %d operation(s) of an earlier attempt", request.action_id, interrupted)
    deadline = time.monotonic() + wait
    quiet_since: float | None = None
    while True:
        time.sleep(0.5)
        # interrupting again until nothing runs; then give the aborted job a moment to remove its
        # _temporary directory (it usually does at once; if not, the leftovers are inert)
        now_ = time.monotonic()
        if fence(settings, previous):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now_
        if quiet_since is not None and (not still_writing(action_dirs(table, request.action_id), table.io)
                                        or now_ - quiet_since >= WRITER_GRACE_SECONDS):
            return
        if now_ >= deadline:
            raise Retry(f"an earlier write of action {request.action_id} is still running", delay=60)
