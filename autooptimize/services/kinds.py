"""The action kinds the executor knows: what runs each one and what it needs.

``services/actions.execute`` looks the kind up here; each runner has the signature of
``services.rewrite.merge.rewrite_data_files``: ``(settings, request, spark, save_checkpoint, hooks) -> ActionOutcome``.
Runners are named as "module:function" and imported on first use, so this module imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autooptimize.errors import InvalidArgument


@dataclass(frozen=True)
class ActionKind:
    name: str
    runner: str  # "package.module:function"
    needs_spark: bool  # the executor opens the persistent Spark Connect session first
    scope: str  # "partition" (may name a partition) or "table" (table-wide maintenance)
    help: str
    # "module:function" (table, options) -> options: validates and normalises the kind's own options
    # before anything is written; raises InvalidArgument naming the option and what is valid.
    validator: str | None = None

    def resolve(self) -> Callable[..., Any]:
        return _load(self.runner)

    def validate(self, table: Any, options: dict[str, Any]) -> dict[str, Any]:
        if self.validator is None:
            if options:
                raise InvalidArgument(f"action {self.name!r} takes no options (got {', '.join(sorted(options))})")
            return {}
        return _load(self.validator)(table, options)  # type: ignore[no-any-return]


def _load(ref: str) -> Callable[..., Any]:
    module, _, function = ref.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


KINDS: dict[str, ActionKind] = {
    "merge": ActionKind("merge", "autooptimize.services.rewrite.merge:rewrite_data_files", True, "partition",
                        "merge small files into target-size files (fewest replacements)",
                        validator="autooptimize.services.evolution:validate_merge_options"),
    "sort": ActionKind("sort", "autooptimize.services.rewrite.merge:rewrite_data_files", True, "partition",
                       "rewrite a partition ordered by the sort order into files of disjoint ranges",
                       validator="autooptimize.services.sort:validate_options"),
    "zorder": ActionKind("zorder", "autooptimize.services.rewrite.merge:rewrite_data_files", True, "partition",
                         "rewrite a partition clustered on 2-4 columns by their interleaved bits (z-order)",
                         validator="autooptimize.services.zorder:validate_options"),
    # table hygiene (services/hygiene/): metadata work and deletions, no Spark
    "rewrite_manifests": ActionKind("rewrite_manifests", "autooptimize.services.hygiene.manifests:run_rewrite_manifests",
                                    False, "table", "rewrite the data manifests clustered by partition when "
                                    "there are more than manifest_threshold",
                                    "autooptimize.services.hygiene.manifests:validate_rewrite_manifests"),
    "expire_snapshots": ActionKind("expire_snapshots", "autooptimize.services.hygiene.expire:run_expire_snapshots",
                                   False, "table", "expire snapshots older than older_than (keeping retain_last) "
                                   "and delete the files only they referenced",
                                   "autooptimize.services.hygiene.expire:validate_expire_snapshots"),
    "remove_orphans": ActionKind("remove_orphans", "autooptimize.services.hygiene.orphans:run_remove_orphans",
                                 False, "table", "delete files in the table location that no snapshot references "
                                 "and that are older than min_age",
                                 "autooptimize.services.hygiene.orphans:validate_remove_orphans"),
    "compact_deletes": ActionKind("compact_deletes", "autooptimize.services.rewrite.compact:run_compact_deletes", True,
                                  "partition", "rewrite data files with their position and equality deletes "
                                  "applied, and drop the delete files that no longer apply",
                                  validator="autooptimize.services.evolution:validate_compact_options"),
}


def kind_of(name: str) -> ActionKind | None:
    return KINDS.get(name)
