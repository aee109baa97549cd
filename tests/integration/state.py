"""What "nothing changed" means in a test: the row count of every table in the test database (ours and
the catalog's), every file under AO_HOME (path, size and modification time), and the keys in Redis."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import text

from autooptimize.storage.db import get_engine

# The Spark Connect server the session started writes its own logs under AO_HOME/spark while it runs.
_NOT_OURS = ("spark",)


def row_counts(settings: Any) -> dict[str, int]:
    with get_engine(settings).connect() as conn:
        names = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")).scalars()
        return {n: conn.execute(text(f'SELECT count(*) FROM "{n}"')).scalar_one() for n in list(names)}


def file_tree(root: Path) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for base, dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        if rel.split(os.sep)[0] in _NOT_OURS:
            dirs[:] = []
            continue
        found[rel + os.sep] = (0, 0)  # a new empty directory counts too
        for name in files:
            st = os.stat(os.path.join(base, name))
            found[os.path.join(rel, name)] = (st.st_size, st.st_mtime_ns)
    return found


def redis_keys(settings: Any) -> set[bytes]:
    client = redis.Redis.from_url(settings.redis_url)
    try:
        return set(client.keys("*"))
    finally:
        client.close()


def everything(settings: Any) -> tuple[dict[str, int], dict[str, tuple[int, int]], set[bytes]]:
    """Rows per table, files under AO_HOME, Redis keys: equal before and after means nothing was written."""
    return row_counts(settings), file_tree(settings.home_dir), redis_keys(settings)


def assert_unchanged(before: Any, after: Any, what: str = "") -> None:
    """Rows and files exactly as before, and no new Redis key (a key of an earlier test may expire)."""
    rows, files, keys = before
    rows_after, files_after, keys_after = after
    changed = {t: (rows.get(t), n) for t, n in rows_after.items() if rows.get(t) != n}
    assert not changed, f"{what}: rows changed {changed}"
    assert files_after == files, f"{what}: files changed {sorted(set(files_after) ^ set(files))}"
    assert not keys_after - keys, f"{what}: new Redis keys {sorted(keys_after - keys)}"
