"""The soak's end-of-run checks, each a pass/fail with its evidence.

- content: every table's rows and digest (autooptimize/engines/digest.py) equal what was ingested; on a
  mismatch the ids tell duplicates, missing and unexpected rows apart
- referenced files: the current metadata file, and every manifest list, manifest and live data or delete
  file of every snapshot still in the metadata, exist
- sentinels: files planted beside the warehouse, beside the tables (sharing a table's path prefix), beside
  the buffer zone and behind a symlink inside a table are unchanged (bytes, size, mtime) and no file
  appeared in their directories; no file appeared under the warehouse outside the tables
- stuck actions: nothing queued or running that made no progress during the quiet period; the buffer
  drained (no file waiting, no batch open)
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from sqlalchemy import text
from sqlalchemy.engine import Engine

from autooptimize.engines.digest import DigestAccumulator
from benchmarks.soak_ingest import WriterStats

OLD = 30 * 86400  # sentinels look a month old: no age guard protects them


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def local_path(uri: str) -> str:
    """``file:///x``, ``file:/x`` and ``/x`` are the same local file."""
    return "/" + uri.removeprefix("file://").removeprefix("file:").lstrip("/")


# --- content ---------------------------------------------------------------------------------------------


def check_content(table: Table, stats: WriterStats) -> Check:
    table.refresh()
    acc = DigestAccumulator()
    for batch in table.scan().to_arrow_batch_reader():
        acc.add(batch)
    want, got = stats.digest.digest, acc.digest
    name = f"content {stats.table}"
    if got == want:
        return Check(name, True, f"rows {got.rows} = ingested {want.rows} in {stats.batches} batches; digest equal")
    ids = Counter(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    expected = {i for first, n in stats.id_ranges for i in range(first, first + n)}
    dup = sorted(i for i, n in ids.items() if n > 1)
    missing = sorted(expected - set(ids))
    unexpected = sorted(set(ids) - expected)
    return Check(name, False, f"rows {got.rows} vs ingested {want.rows}, digest {got.checksum} vs {want.checksum}; "
                              f"ids duplicated {len(dup)} {dup[:5]}, missing {len(missing)} {missing[:5]}, "
                              f"unexpected {len(unexpected)} {unexpected[:5]}")


# --- referenced files -------------------------------------------------------------------------------------


def check_referenced_files(table: Table, identifier: str) -> Check:
    missing: list[str] = []
    checked = 0
    seen_manifests: set[str] = set()

    def exists(uri: str, what: str) -> None:
        nonlocal checked
        checked += 1
        if not os.path.exists(local_path(uri)):
            missing.append(f"{what} {uri}")

    table.refresh()
    exists(table.metadata_location, "metadata")
    named: set[str] = set()  # every data file any manifest entry names, in any status
    for snapshot in table.metadata.snapshots:
        exists(snapshot.manifest_list, f"manifest list of {snapshot.snapshot_id}")
        if not os.path.exists(local_path(snapshot.manifest_list)):
            continue
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            exists(manifest.manifest_path, f"manifest of {snapshot.snapshot_id}")
            if not os.path.exists(local_path(manifest.manifest_path)):
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                named.add(os.path.normpath(local_path(entry.data_file.file_path)))
                if entry.status != ManifestEntryStatus.DELETED:
                    exists(entry.data_file.file_path, f"file live in {snapshot.snapshot_id}")
    snapshots = len(table.metadata.snapshots)
    detail = f"{checked} references in {snapshots} snapshot(s)" + (
        f"; {len(missing)} missing: " + "; ".join(missing[:4]) if missing else ", all present")
    data = Path(local_path(table.location())) / "data"
    unnamed = [p for p in data.rglob("*.parquet") if os.path.normpath(p) not in named] if data.is_dir() else []
    if unnamed:  # not a failure: left by killed or aborted work, for orphan removal once old enough
        detail += (f" (and {len(unnamed)} data file(s), {sum(p.stat().st_size for p in unnamed) / 1e6:.1f} MB, "
                   f"in data/ that no snapshot names)")
    return Check(f"referenced files {identifier}", not missing, detail)


# --- sentinels --------------------------------------------------------------------------------------------


def _fingerprint(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns


class Sentinels:
    """Small Parquet files (readable, old-looking) planted where the service has no business writing."""

    def __init__(self, home: Path, warehouse: Path, buffer_root: Path, locations: dict[str, Path]) -> None:
        self.home, self.warehouse, self.locations = home, warehouse, locations
        namespace = next(iter(locations.values())).parent
        spots = [warehouse / "sentinel-root.parquet", namespace / "sentinel-namespace.parquet",
                 buffer_root / "sentinel-buffer.parquet", home / "outside" / "behind-link.parquet",
                 home / "sentinel-home.parquet"]
        for ident, location in locations.items():
            spots += [Path(f"{location}-old") / "data" / "sentinel.parquet",  # shares the table's path prefix
                      Path(f"{location}_backup") / "metadata" / "sentinel.parquet",
                      buffer_root / f"{ident}-old" / "2026010100" / "sentinel.parquet"]
        self.files: dict[Path, tuple[str, int, int]] = {}
        self.links: list[Path] = []
        self.in_table_orphans: list[Path] = []
        data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "note": ["sentinel"] * 3})
        for path in spots:
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(data, path)
            os.utime(path, (path.stat().st_atime - OLD, path.stat().st_mtime - OLD))
        for location in locations.values():
            (location / "data").mkdir(parents=True, exist_ok=True)
            link = location / "data" / "zz-sentinel-link"  # a directory symlink inside the table, to outside it
            link.symlink_to(home / "outside", target_is_directory=True)
            self.links.append(link)
            orphan = location / "data" / "zz-old-orphan.parquet"  # inside the table: removable, not checked
            pq.write_table(data, orphan)
            os.utime(orphan, (orphan.stat().st_atime - OLD, orphan.stat().st_mtime - OLD))
            self.in_table_orphans.append(orphan)
        self.files = {path: _fingerprint(path) for path in spots}
        # directories only the soak writes to (AO_HOME and the buffer root fill up with the service's own files)
        stable = {p.parent for p in spots} - {home, buffer_root}
        self.listings = {d: sorted(os.listdir(d)) for d in stable}

    def check(self) -> list[Check]:
        changed = []
        for path, before in self.files.items():
            if not path.exists():
                changed.append(f"deleted {path}")
            elif _fingerprint(path) != before:
                changed.append(f"modified {path}")
        for directory, before in self.listings.items():
            now = sorted(os.listdir(directory)) if directory.exists() else []
            if now != before:
                changed.append(f"{directory}: {sorted(set(now) ^ set(before))[:4]} appeared or vanished")
        stray = self._stray()
        removed = sum(1 for p in self.in_table_orphans if not p.exists())
        links = sum(1 for p in self.links if not p.is_symlink())
        return [
            Check("sentinels untouched", not changed,
                  f"{len(self.files)} files in {len(self.listings)} directories" +
                  (": " + "; ".join(changed[:6]) if changed else ", unchanged; "
                   f"inside the tables {removed}/{len(self.in_table_orphans)} old orphans and "
                   f"{links}/{len(self.links)} symlinks removed (allowed)")),
            Check("nothing written outside the tables", not stray,
                  f"{len(stray)} stray file(s) under the warehouse: {stray[:4]}" if stray else
                  "every file under the warehouse is inside a table or a sentinel"),
        ]

    def _stray(self) -> list[str]:
        roots = [str(p) + os.sep for p in self.locations.values()]
        out = []
        for dirpath, _, names in os.walk(self.warehouse):
            for name in names:
                path = os.path.join(dirpath, name)
                if not any(path.startswith(r) for r in roots) and Path(path) not in self.files:
                    out.append(path)
        return out


# --- actions and the buffer -------------------------------------------------------------------------------

_ACTIVE = ("SELECT a.id, a.kind, a.state, a.attempts, a.reason, left(coalesce(a.error, ''), 200), t.identifier, "
           "extract(epoch FROM now() - a.created_at)::int, extract(epoch FROM now() - a.started_at)::int, "
           "md5(coalesce(a.checkpoint::text, '')) FROM ao_actions a JOIN ao_tracked_tables t ON t.id = a.table_id "
           "WHERE a.state IN ('queued', 'running') ORDER BY a.created_at")


def active_actions(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        return {r[0]: tuple(r) for r in conn.execute(text(_ACTIVE))}


def buffer_open(engine: Engine) -> tuple[int, int]:
    """(files buffered or claimed, batches neither done nor empty nor committed)."""
    with engine.connect() as conn:
        files = conn.execute(text("SELECT count(*) FROM ao_buffer_files WHERE state IN ('buffered', 'claimed')")).scalar()
        batches = conn.execute(text(
            "SELECT count(*) FROM ao_buffer_batches WHERE state NOT IN ('done', 'empty', 'committed')")).scalar()
    return int(files or 0), int(batches or 0)


def finished_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM ao_actions WHERE finished_at IS NOT NULL")).scalar() or 0)


def check_stuck(engine: Engine, earlier: dict[str, tuple[Any, ...]], window: float) -> Check:
    """Stuck: queued or running, unchanged (state, attempts, checkpoint) over the last ``window`` seconds while
    no other action of its table finished (an action waiting behind its table's busy slot is not stuck)."""
    now = active_actions(engine)
    unchanged = [row for aid, row in now.items()
                 if aid in earlier and (earlier[aid][2], earlier[aid][3], earlier[aid][9]) == (row[2], row[3], row[9])]
    with engine.connect() as conn:
        finished = dict(conn.execute(text(
            "SELECT t.identifier, count(*) FROM ao_actions a JOIN ao_tracked_tables t ON t.id = a.table_id "
            "WHERE a.finished_at >= now() - make_interval(secs => :w) GROUP BY 1"), {"w": window}).tuples().all())
        stuck = [row for row in unchanged if not finished.get(row[6])]
        lines = []
        for row in stuck[:6]:
            events = [e for (e,) in conn.execute(text(
                "SELECT event FROM ao_audit_log WHERE action_id = :a ORDER BY id DESC LIMIT 4"), {"a": row[0]})]
            lines.append(f"{row[1]} {row[0][:8]} on {row[6]} {row[2]} (attempts {row[3]}, created {row[7]} s ago, "
                         f"started {row[8]} s ago, reason {row[4]}, error {row[5]!r}, last events {events[::-1]})")
    waiting = len(unchanged) - len(stuck)
    detail = (f"{len(stuck)} action(s) queued/running without progress for {window:.0f} s while their table did "
              f"nothing else" + (": " + "; ".join(lines) if lines else "")
              + f"; {waiting} waiting behind their table's finished actions, {len(now) - len(unchanged)} moving")
    return Check("no stuck actions", not stuck, detail if now else
                 "nothing queued or running at the end")


def check_buffer(engine: Engine) -> Check:
    files, batches = buffer_open(engine)
    with engine.connect() as conn:
        quarantined = conn.execute(text(
            "SELECT count(*), string_agg(DISTINCT left(reason, 120), ' | ') FROM ao_buffer_files "
            "WHERE state = 'quarantined'")).one()
    detail = f"{files} file(s) waiting, {batches} batch(es) open; {quarantined[0]} quarantined"
    if quarantined[0]:
        detail += f" ({quarantined[1]})"
    return Check("buffer drained", files == 0 and batches == 0, detail)


def action_summary(engine: Engine) -> dict[str, Counter[str]]:
    """Actions by kind → state counts, plus buffer batches by state (as kind ``consolidate``)."""
    out: dict[str, Counter[str]] = {}
    with engine.connect() as conn:
        for kind, state, n in conn.execute(text("SELECT kind, state, count(*) FROM ao_actions GROUP BY 1, 2")):
            out.setdefault(kind, Counter())[state] = int(n)
        for state, n in conn.execute(text("SELECT state, count(*) FROM ao_buffer_batches GROUP BY 1")):
            out.setdefault("consolidate (batches)", Counter())[state] = int(n)
    return out


def failure_reasons(engine: Engine, limit: int = 8) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT kind, state, coalesce(reason, '-'), left(coalesce(error, ''), 160), count(*) FROM ao_actions "
            "WHERE state IN ('failed', 'aborted', 'refused') GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC LIMIT :n"),
            {"n": limit}).all()
    return [f"{n}× {kind} {state}: {reason} {error!r}" for kind, state, reason, error, n in rows]
