"""The watched folder: settled Parquet files under ``<root>/<namespace.table>/`` are landed (moved)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from autooptimize.config import Settings
from autooptimize.services.buffer.landing import land, quarantine_dropped
from autooptimize.services.ports import Dispatch


def poll_watch(settings: Settings, root: Path | None = None, *, dispatch: Dispatch | None = None) -> dict[str, Any]:
    """Land every settled ``*.parquet`` under ``<root>/<namespace.table>/`` (moved, not copied).

    A file is settled when unmodified for AO_BUFFER_SETTLE_SECONDS; names starting with '.' or '_' are
    being written (write-then-rename) and are skipped. A rejected file goes to ``.quarantine/`` beside a
    ``<name>.reason`` file. A directory that names no valid table is reported and left alone. A table
    whose rules fire is handed to ``dispatch`` for consolidation (see landing.land).
    """
    root = root or settings.buffer_watch_root
    if root is None:
        return {"landed": 0, "rejected": 0, "errors": {}}
    root = Path(root).expanduser()
    now = time.time()
    landed = rejected = 0
    errors: dict[str, str] = {}
    if not root.is_dir():
        return {"landed": 0, "rejected": 0, "errors": {str(root): "watch root does not exist"}}
    for table_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        ready = [
            p for p in sorted(table_dir.iterdir())
            if p.is_file() and p.suffix == ".parquet" and not p.name.startswith((".", "_"))
            and now - p.stat().st_mtime >= settings.buffer_settle_seconds
        ]
        if not ready:
            continue
        try:
            result = land(settings, table_dir.name, ready, move=True, dispatch=dispatch)
        except Exception as exc:  # a wrong table name must not stop the other tables
            errors[table_dir.name] = str(exc)
            continue
        landed += len(result["landed"])
        for item in result["rejected"]:
            quarantine_dropped(Path(item["file"]), item["reason"])
            rejected += 1
    return {"landed": landed, "rejected": rejected, "errors": errors}
