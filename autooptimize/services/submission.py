"""Checking a submission: everything an action request names is validated before anything is written."""

from __future__ import annotations

import dataclasses
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.partitions import PartitionRef
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.files import parse_partition
from autooptimize.iceberg.partitions import human_values
from autooptimize.services.kinds import KINDS
from autooptimize.services.tracking import ACTION_KINDS, size_arg


@dataclasses.dataclass(frozen=True)
class CheckedSubmission:
    """A submission that passed every check: the table, the kind's normalised options, the partition."""

    table: Any
    kind: str
    options: dict[str, Any]
    target_file_size: int | None
    spec_id: int | None = None
    partition_key: str | None = None
    partition_values: dict[str, Any] | None = None


def check_submission(settings: Settings, identifier: str, *, partition: str | PartitionRef | None = None,
                     kind: str = "merge", priority: str | None = None, target_file_size: Any = None,
                     options: dict[str, Any] | None = None) -> CheckedSubmission:
    """Validate a submission (table, partition, kind, priority, size, the kind's options); reads only.
    InvalidArgument or TableNotFound names what is wrong and what would be valid."""
    if not isinstance(kind, str) or kind not in ACTION_KINDS:
        raise InvalidArgument(f"action {kind!r} is not supported; valid actions: {', '.join(ACTION_KINDS)}")
    if priority is not None and priority not in settings.priority_classes:
        raise InvalidArgument(f"priority {priority!r} is not one of {', '.join(settings.priority_classes)}")
    if options is not None and (not isinstance(options, dict) or not all(isinstance(k, str) for k in options)):
        raise InvalidArgument(f"options must be a dict of option names to values (got {options!r})")
    target = None if target_file_size is None else size_arg("target_file_size", target_file_size)
    table = load_table(settings, identifier)
    action_kind = KINDS[kind]
    extra = action_kind.validate(table, dict(options or {}))
    if partition is not None and action_kind.scope == "table":
        raise InvalidArgument(f"action {kind!r} works on the whole table; it takes no partition (got {partition!r})")
    if partition is None:
        return CheckedSubmission(table, kind, extra, target)
    ref = resolve_partition(table, partition)
    values = dict(human_values(table.specs()[ref.spec_id], table.schema(), ref))
    return CheckedSubmission(table, kind, extra, target, ref.spec_id, ref.key, values)


def resolve_partition(table: Any, partition: str | PartitionRef) -> PartitionRef:
    """A partition named by a person (``ts_hour=2024-06-01-12``, in the table's current spec) or handed
    over inside the service (a PartitionRef of any of the table's specs); InvalidArgument otherwise."""
    if isinstance(partition, PartitionRef):
        spec = table.specs().get(partition.spec_id)
        if spec is None or len(spec.fields) != len(partition.values) or not spec.fields:
            raise InvalidArgument(f"partition {partition.key!r} does not fit partition spec {partition.spec_id} of "
                                  f"table {'.'.join(table.name())}")
        return partition
    return parse_partition(table, partition)
