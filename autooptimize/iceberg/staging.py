"""What a commit applies: a change staged once (its manifests written) and put on any head that still
admits it. :mod:`autooptimize.iceberg.commits` runs the retry loop around these."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector

from autooptimize.domain import fencing
from autooptimize.errors import ConflictAbort, VerificationFailed
from autooptimize.iceberg import paths
from autooptimize.iceberg.manifest_cache import live_entries_of
from autooptimize.iceberg.v3 import (
    DeleteManifestWriterV3,
    ManifestWriterV3,
    file_key,
    manifests_of,
    with_int_equality_ids,
)

log = logging.getLogger(__name__)


def avro_codec(metadata: TableMetadata) -> Any:
    return metadata.properties.get("write.avro.compression-codec", "gzip")


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg 0.12 only writes data manifests)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file, file_schema=with_int_equality_ids(self._with_partition(2)),
            record_schema=with_int_equality_ids(self._with_partition(DEFAULT_READ_VERSION)),
            schema_name="manifest_entry", metadata=self._meta,
        )


class ManifestFactory:
    """Writes the manifests of one snapshot id (data or delete content, any spec)."""

    def __init__(self, table: Table, snapshot_id: int, owner: str | None = None) -> None:
        self.table = table
        self.snapshot_id = snapshot_id
        # an action's manifests written before its commit carry its id: orphan removal keeps them while it runs
        self.prefix = f"ao-{owner}-{uuid.uuid4()}" if owner else str(uuid.uuid4())
        self.count = 0
        self.paths: list[str] = []

    def writer(self, spec: PartitionSpec, content: ManifestContent) -> Any:
        metadata = self.table.metadata
        path = metadata_path(self.table, f"{self.prefix}-m{self.count}.avro")
        self.count += 1
        self.paths.append(path)
        output = self.table.io.new_output(path)
        if metadata.format_version >= 3:  # pyiceberg 0.12 writes no v3 manifest
            writer_class = ManifestWriterV3 if content == ManifestContent.DATA else DeleteManifestWriterV3
            return writer_class(spec, metadata.schema(), output, self.snapshot_id, avro_codec(metadata))
        if content == ManifestContent.DATA:
            return write_manifest(format_version=metadata.format_version, spec=spec, schema=metadata.schema(),
                                  output_file=output, snapshot_id=self.snapshot_id,
                                  avro_compression=avro_codec(metadata))
        if metadata.format_version < 2:
            raise VerificationFailed("delete manifests need a format-version 2 table")
        return DeleteManifestWriter(spec, metadata.schema(), output, self.snapshot_id, avro_codec(metadata))

    def added(self, files: list[DataFile]) -> list[ManifestFile]:
        """One manifest of ADDED entries per (spec, content)."""
        groups: dict[tuple[int, ManifestContent], list[DataFile]] = {}
        for f in files:
            content = ManifestContent.DATA if f.content == DataFileContent.DATA else ManifestContent.DELETES
            groups.setdefault((f.spec_id, content), []).append(f)
        manifests = []
        specs = self.table.metadata.specs()
        for (spec_id, content), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
            with self.writer(specs[spec_id], content) as writer:
                for data_file in group:
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self.snapshot_id, sequence_number=None,
                        file_sequence_number=None, data_file=data_file))
            manifests.append(writer.to_manifest_file())
        return manifests


def _collector(table: Table, added: list[DataFile], removed: list[DataFile]) -> dict[str, str]:
    metadata = table.metadata
    limit = int(metadata.properties.get("write.summary.partition-limit", 0))
    collector = SnapshotSummaryCollector(partition_summary_limit=limit)
    specs, schema = metadata.specs(), metadata.schema()
    for f in added:
        collector.add_file(f, schema=schema, partition_spec=specs[f.spec_id])
    for f in removed:
        collector.remove_file(f, schema=schema, partition_spec=specs[f.spec_id])
    return collector.build()


class StagedAppend:
    """Files added in one snapshot; applies on any head. ``check`` may refuse a head (exactly-once).

    Data files make an APPEND; delete files alone make a DELETE snapshot (a row delta of deletes).
    """

    def __init__(self, table: Table, added: list[DataFile],
                 check: Callable[[TableMetadata], None] | None = None) -> None:
        if not added:
            raise VerificationFailed("an append must add at least one file")
        self.rewrites_on_retry = 0  # an append rewrites no manifest of the head
        deletes_only = all(f.content != DataFileContent.DATA for f in added)
        self.operation = Operation.DELETE if deletes_only else Operation.APPEND
        self.snapshot_id = table.metadata.new_snapshot_id()
        self._factory = ManifestFactory(table, self.snapshot_id)
        self._added = self._factory.added(added)
        self._summary = _collector(table, added, [])
        self._check = check

    def validate(self, head: TableMetadata, table: Table) -> None:
        if self._check is not None:
            self._check(head)

    def manifests(self, head: TableMetadata, table: Table) -> list[ManifestFile]:
        snapshot = head.snapshot_by_name(MAIN_BRANCH)
        return self._added + manifests_of(table.io, snapshot)

    def summary(self) -> dict[str, str]:
        return dict(self._summary)

    def written(self) -> list[str]:
        return list(self._factory.paths)


def rewrite_holding(table: Table, metadata: TableMetadata, removed: dict[str, DataFile],
                    factory: ManifestFactory) -> dict[str, ManifestFile]:
    """Write the manifests of ``metadata``'s head that hold ``removed`` (by :func:`file_key`) again, those
    files DELETED under the factory's snapshot id and the rest EXISTING, as one manifest per spec and
    content (as Iceberg's manifest merging would); each replaced manifest's path → its rewrite.
    ConflictAbort, before anything is written, when one of ``removed`` is not live there."""
    head = metadata.snapshot_by_name(MAIN_BRANCH)
    specs = metadata.specs()
    found: set[str] = set()
    holding: dict[tuple[int, ManifestContent], list[tuple[ManifestFile, list[ManifestEntry]]]] = {}
    for manifest in manifests_of(table.io, head):
        if not _may_hold(manifest, specs, metadata, removed.values()):
            continue
        entries = live_entries_of(manifest, table.io)
        hits = [e for e in entries if file_key(e.data_file) in removed]
        if not hits:
            continue
        found.update(file_key(e.data_file) for e in hits)
        holding.setdefault((manifest.partition_spec_id, manifest.content), []).append((manifest, entries))
    missing = sorted(set(removed) - found)
    if missing:
        raise ConflictAbort(f"{len(missing)} input file(s) are no longer live, e.g. {missing[0]}")
    replaced: dict[str, ManifestFile] = {}
    for (spec_id, content), held in sorted(holding.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
        with factory.writer(specs[spec_id], content) as writer:
            for _, entries in held:
                for entry in entries:
                    gone = file_key(entry.data_file) in removed
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.DELETED if gone else ManifestEntryStatus.EXISTING,
                        snapshot_id=factory.snapshot_id if gone else entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file))
        rewritten = writer.to_manifest_file()
        replaced.update((manifest.manifest_path, rewritten) for manifest, _ in held)
    return replaced


class StagedRemoval:
    """The half of a REPLACE that depends only on its inputs: the manifests of ``table``'s head that hold
    ``removed``, written again with them DELETED, under a snapshot id of its own. Written ahead of the
    commit (while an action's Spark job runs, services/rewrite/ahead.py); a :class:`StagedReplace` of
    exactly these files takes it over (``taken``) and writes those manifests again only if the head it
    commits on no longer lists the ones they replace. Its manifests are named for ``owner`` (the action id,
    ``ao-<id>-<uuid>-m<n>.avro``), so orphan removal keeps them while that action runs. ConflictAbort
    (nothing written) when one of ``removed`` is not live on that head."""

    def __init__(self, table: Table, removed: list[DataFile], owner: str) -> None:
        self.snapshot_id = table.metadata.new_snapshot_id()
        self.keys = frozenset(file_key(f) for f in removed)
        self.factory = ManifestFactory(table, self.snapshot_id, owner)
        self.taken = False
        try:
            self.replaced = rewrite_holding(table, table.metadata, {file_key(f): f for f in removed}, self.factory)
        except BaseException:
            remove_files(table, self.factory.paths)
            raise

    def written(self) -> list[str]:
        return list(self.factory.paths)


class StagedReplace:
    """A REPLACE: inputs (data and applied delete files) out, outputs in, as Iceberg's RewriteFiles.

    The manifests holding the inputs are rewritten once, with the inputs DELETED; on a new head they
    are reused as long as the head still lists the manifests they replace. ``allowed_deletes`` are
    delete files the rewrite applied to its output: they may stay live beside it.
    """

    operation = Operation.REPLACE

    def __init__(self, table: Table, removed: list[DataFile], added: list[DataFile],
                 allowed_deletes: frozenset[str] = frozenset(), ahead: StagedRemoval | None = None) -> None:
        self._table = table
        self._removed = {file_key(f): f for f in removed}  # a deletion vector by its blob, not its Puffin file
        self._allowed_deletes = allowed_deletes
        self.rewrites_on_retry = 0
        # manifests already checked for new delete files: none yet, so the first validation reads every
        # delete manifest of the head (the inputs were planned on an older snapshot); retries read only
        # the manifests added since
        self._seen: set[str] = set()
        self._replaced: dict[str, ManifestFile] = {}  # head manifest path → its rewrite
        # taken only while every manifest written ahead is still there: a commit must never name a missing file
        taken = ahead if (ahead is not None and ahead.keys == frozenset(self._removed)
                          and all(table.io.new_input(p).exists() for p in ahead.written())) else None
        if taken is not None:
            # written ahead on an older head: validate() writes them again if that head's manifests moved
            taken.taken = True
            self.snapshot_id, self._factory, self._replaced = taken.snapshot_id, taken.factory, taken.replaced
            self._factory.table = table
        else:
            self.snapshot_id = table.metadata.new_snapshot_id()
            self._factory = ManifestFactory(table, self.snapshot_id)
        try:
            self._added = self._factory.added(added)
            self._summary = _collector(table, added, removed)
            self._removed_partitions = {(f.spec_id, f.partition) for f in removed
                                        if f.content == DataFileContent.DATA}
            if taken is None:
                self._replaced = rewrite_holding(table, table.metadata, self._removed, self._factory)
        except BaseException:  # nothing will commit what was written so far
            remove_files(table, self._factory.paths)
            raise

    def _rewrite_against(self, metadata: TableMetadata) -> None:
        """Write again the manifests that hold the inputs in ``metadata``'s head (someone rewrote those of the
        head they were written against); ConflictAbort on a missing one."""
        replaced = rewrite_holding(self._table, metadata, self._removed, self._factory)
        # the earlier rewrites are superseded: remove them rather than leave orphans
        stale = {m.manifest_path for m in self._replaced.values()}
        remove_files(self._table, stale)
        self._factory.paths = [p for p in self._factory.paths if p not in stale]
        self.rewrites_on_retry += len({m.manifest_path for m in replaced.values()})
        self._replaced = replaced

    def validate(self, head: TableMetadata, table: Table) -> None:
        snapshot = head.snapshot_by_name(MAIN_BRANCH)
        listed = {m.manifest_path: m for m in manifests_of(table.io, snapshot)}
        if not all(path in listed for path in self._replaced):
            # someone rewrote the manifests that held the inputs: find them again (no data rewritten)
            self._rewrite_against(head)
        fresh = [m for path, m in listed.items() if path not in self._seen]
        self._check_new_deletes(fresh, head, table)
        self._seen.update(m.manifest_path for m in fresh)

    def _check_new_deletes(self, manifests: list[ManifestFile], head: TableMetadata, table: Table) -> None:
        if not self._removed_partitions:
            return
        specs = head.specs()
        for manifest in manifests:
            if manifest.content != ManifestContent.DELETES:
                continue
            for entry in live_entries_of(manifest, table.io):
                df = entry.data_file
                if file_key(df) in self._allowed_deletes:
                    continue
                if (df.spec_id, df.partition) in self._removed_partitions or not specs[df.spec_id].fields:
                    raise ConflictAbort(f"a delete file now applies to the rewritten partition: {df.file_path}")

    def manifests(self, head: TableMetadata, table: Table) -> list[ManifestFile]:
        snapshot = head.snapshot_by_name(MAIN_BRANCH)
        kept = [m for m in manifests_of(table.io, snapshot) if m.manifest_path not in self._replaced]
        rewrites = list({m.manifest_path: m for m in self._replaced.values()}.values())  # several → one
        return self._added + rewrites + kept

    def summary(self) -> dict[str, str]:
        return dict(self._summary)

    def written(self) -> list[str]:
        return list(self._factory.paths)


def _may_hold(manifest: ManifestFile, specs: dict[int, PartitionSpec], metadata: TableMetadata,
              files: Iterable[DataFile]) -> bool:
    """Whether the manifest's partition summaries admit any of ``files`` (False only when certain)."""
    spec = specs.get(manifest.partition_spec_id)
    if spec is None or not spec.fields or not manifest.partitions:
        return True
    candidates = [f for f in files if f.spec_id == manifest.partition_spec_id]
    if not candidates:
        return False
    types = [field.field_type for field in spec.partition_type(metadata.schema()).fields]
    for f in candidates:
        if all(_in_summary(summary, ftype, f.partition[i]) for i, (summary, ftype)
               in enumerate(zip(manifest.partitions, types, strict=False))):
            return True
    return False


def _in_summary(summary: Any, field_type: Any, value: Any) -> bool:
    if value is None:
        return bool(summary.contains_null)
    if summary.lower_bound is None or summary.upper_bound is None:
        return True
    try:
        lower = from_bytes(field_type, summary.lower_bound)
        upper = from_bytes(field_type, summary.upper_bound)
        return bool(lower <= value <= upper)
    except Exception:  # an unexpected bound encoding: read the manifest rather than guess
        return True


def remove_files(table: Table, uris: Iterable[str]) -> None:
    """Remove metadata files a change wrote and did not commit (a missing one is fine), through the one
    checked delete (autooptimize.iceberg.paths): a path that does not resolve inside the table's location is
    refused and left alone. The thread's fence is asked first: a holder that lost its lease deletes nothing."""
    uris = list(uris)
    if not uris:
        return
    fencing.before_delete(f"{len(uris)} uncommitted metadata file(s) of {'.'.join(table.name())}")
    location = table.location()
    for uri in uris:
        try:
            paths.delete_file(location, uri, table.io)
        except paths.PathRefused as refused:
            log.warning("left uncommitted metadata file alone: %s", refused)
        except Exception as exc:  # orphan removal finds what could not be deleted here
            log.warning("could not remove uncommitted metadata file %s: %s", uri, exc)


def metadata_path(table: Table, name: str) -> str:
    """Where a new metadata file (manifest, manifest list) of the table goes: ``write.metadata.path``
    or ``<location>/metadata``. PathRefused when that does not resolve inside the table's location:
    autooptimize writes nothing outside a table."""
    return paths.check(table.location(), table.location_provider().new_metadata_location(name), "write")
