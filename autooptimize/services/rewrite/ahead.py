"""The inputs' DELETED manifests of an action, written in a thread of the worker while its Spark job runs.

They depend only on the plan: which files the action removes, and the manifests of the head that hold
them. Written at commit time they took 0.10–0.27 s of the action after the job (``commit.stage`` of
``benchmarks.merge``: 1,000 entries through pyiceberg's Avro writer), while the worker process itself sat
idle waiting for the job. The commit takes them over when it removes exactly those files
(:class:`autooptimize.iceberg.staging.StagedRemoval`), and writes them again only when the head it commits
on no longer lists the manifests they replace, as a retried commit does.

Whatever happens to the action, what was written ahead and not taken by a commit is removed when the
action ends (:meth:`RemovalAhead.discard`). Once a commit took it, it is the commit's: removed with the
commit's own files on a conflict, and kept when the commit's outcome is unknown. A worker killed
mid-job leaves it as it would leave a commit's manifests; orphan removal finds them once the action has
ended. Until then it keeps them: they are named for the action (``metadata/ao-<action id>-<uuid>-m0.avro``),
as its data output lies in its ``ao-<action id>`` directories, however old they are. And a commit takes
them only while they are all still there.

The thread only writes: the one deletion it may make is of a manifest it was writing itself when the
write failed, a file nothing references. Every other removal runs in the action's thread, under its
fence (domain/fencing.py).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from autooptimize.domain.profile import add_seconds
from autooptimize.iceberg.staging import StagedRemoval, remove_files

log = logging.getLogger(__name__)


class RemovalAhead:
    """A :class:`StagedRemoval` of ``removed`` being written in a thread; :meth:`take` waits for it."""

    def __init__(self, table: Table, removed: Sequence[DataFile], owner: str) -> None:
        # its own Table object: the action's may be refreshed meanwhile (a failed job's landed check)
        self._table = copy.copy(table)
        self._removal: StagedRemoval | None = None
        self._error: BaseException | None = None
        self._seconds = 0.0
        self._thread = threading.Thread(target=self._write, args=(list(removed), owner), name="ao-removal-ahead",
                                        daemon=True)
        self._thread.start()

    def _write(self, removed: list[DataFile], owner: str) -> None:
        started = time.monotonic()
        try:
            self._removal = StagedRemoval(self._table, removed, owner)
        except BaseException as exc:  # the commit then writes its own (and meets the same problem there)
            self._error = exc
        self._seconds = time.monotonic() - started

    def take(self) -> StagedRemoval | None:
        """The removal once written (its seconds go to the action's ``commit.stage_ahead``), or None when
        writing it failed."""
        self._thread.join()
        if self._error is not None:
            log.info("the inputs' manifests written ahead failed (%s); the commit writes them",
                     type(self._error).__name__)
            return None
        add_seconds("commit.stage_ahead", self._seconds)
        return self._removal

    def discard(self) -> None:
        """Remove what was written unless a commit took it; call once the action is over, on any path."""
        self._thread.join()
        removal = self._removal
        if removal is None or removal.taken:
            return
        try:
            remove_files(self._table, removal.written())
        except Exception as exc:  # a lost lease deletes nothing: orphan removal finds these
            log.warning("could not remove the manifests written ahead: %s", exc)


def removal_ahead(table: Table, removed: Sequence[Any] | None, action_id: str) -> RemovalAhead | None:
    """Start writing ``removed``'s DELETED manifests for ``action_id``, or None when the kind cannot name
    them before its job."""
    return RemovalAhead(table, removed, action_id) if removed else None
