"""Our code on the executors, the Spark Connect way: one zip of our packages, added to the session as a
Python file (``session.addArtifacts(zip, pyfile=True)``), once per session and content.

Spark Connect keeps a session's artifacts apart from other sessions' and puts the zip on the path of
every Python worker that runs the session's tasks, on every executor. So the executors need only the
third-party libraries our tasks import (docs/engines.md lists them), never an install of this package,
and a worker of a newer version ships its own code with its own session.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

import autooptimize

log = logging.getLogger(__name__)

#: the packages a task imports: the pyarrow rewrite (autooptimize/arrow), the digest, the Iceberg helpers
#: (autooptimize), the task functions (spark_actors)
PACKAGES = ("autooptimize", "spark_actors")

_lock = threading.Lock()
_archive: tuple[str, Path] | None = None  # (content hash, zip) of this process's code
_shipped: set[tuple[str, str]] = set()  # (session id, content hash) already added


def _sources() -> list[tuple[str, Path]]:
    """(name in the zip, file) of every .py file of :data:`PACKAGES`, in a stable order."""
    root = Path(autooptimize.__file__).resolve().parent.parent
    out: list[tuple[str, Path]] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out.append((path.relative_to(root).as_posix(), path))
    return out


def partial_path(target: Path) -> Path:
    """Where this process and thread write ``target`` before moving it into place. The process id is part
    of it: the pool's worker processes are forks of one parent, and a forked thread keeps its parent's
    thread id, so two actors warming up at once wrote one temporary file, and the second to move it found
    it gone (FileNotFoundError: its warm-up failed and its first action opened the session itself)."""
    return target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")


def build_archive() -> tuple[str, Path]:
    """The zip of our packages and its content hash, built once per process (the code a process runs does
    not change under it)."""
    global _archive
    with _lock:
        if _archive is not None and _archive[1].is_file():
            return _archive
        sources = _sources()
        digest = hashlib.sha256()
        for name, path in sources:
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        content = digest.hexdigest()[:16]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, path in sources:
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # same content, same bytes
                zf.writestr(info, path.read_bytes())
        directory = Path(tempfile.gettempdir()) / "autooptimize-artifacts"
        directory.mkdir(exist_ok=True)
        target = directory / f"autooptimize-{content}.zip"
        if not target.is_file():
            partial = partial_path(target)
            partial.write_bytes(buffer.getvalue())
            partial.replace(target)  # atomic: a process that lost the race replaces it with the same bytes
        _archive = (content, target)
        return _archive


def ship_code(spark: Any) -> bool:
    """Add our code to ``spark``'s session unless this session already has this content; True when added."""
    content, archive = build_archive()
    key = (str(getattr(spark, "session_id", id(spark))), content)
    with _lock:
        if key in _shipped:
            return False
    try:
        spark.addArtifacts(str(archive), pyfile=True)
    except Exception as exc:
        # the server keeps an artifact once per session: a second add of the same name (another thread
        # of this worker won the race) is no failure
        if "already exists" not in str(exc).lower():
            raise
    with _lock:
        _shipped.add(key)
    log.info("shipped %s to Spark session %s", archive.name, key[0])
    return True
