"""Table hygiene actions: rewrite_manifests, expire_snapshots and remove_orphans.

Each is an action kind (services/kinds.py) run by the executor like a merge, with the same audit trail.
The rules they share:

- A file that any snapshot of the table references is never deleted, nor any file outside the table's
  location. Referenced means what ``iceberg/references.py`` says, with paths compared in one normal form.
- Retrying is safe. rewrite_manifests carries the action id in its snapshot summary and a retry that
  finds it only records it; expire_snapshots checkpoints the snapshots it expires before committing, and
  a retry that finds them gone finishes deleting their files; a rerun of either with nothing left to do
  is skipped; remove_orphans recomputes everything each time.
- When in doubt nothing is deleted and the reason is recorded: a file too young, one in the output
  directory (``ao-<id>``) of an action that is queued, running or unknown, a hidden file, one whose age
  the filesystem does not give. A measuring sample's directory (``ao-explain-…``, ``ao-calibrate-…``)
  belongs to no action and is removed by its writer: once older than the minimum age it is litter.
"""

from __future__ import annotations

from autooptimize.services.hygiene.expire import run_expire_snapshots, validate_expire_snapshots
from autooptimize.services.hygiene.manifests import run_rewrite_manifests, validate_rewrite_manifests
from autooptimize.services.hygiene.orphans import run_remove_orphans, validate_remove_orphans
from autooptimize.services.hygiene.sweep import (
    HYGIENE_KINDS,
    HygieneDecision,
    hygiene_decisions,
    sweep_hygiene,
)

__all__ = [
    "HYGIENE_KINDS",
    "HygieneDecision",
    "hygiene_decisions",
    "run_expire_snapshots",
    "run_remove_orphans",
    "run_rewrite_manifests",
    "sweep_hygiene",
    "validate_expire_snapshots",
    "validate_remove_orphans",
    "validate_rewrite_manifests",
]
