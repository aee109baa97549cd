"""Sharding the tracked tables among listeners: a table's shard, a listener's fair share, and the
moves that bring a listener to it.

A table's shard is ``blake2b(identifier) mod shards``: the same in every process, host and release
(Python's ``hash`` is salted per process, so it is not used). A listener's fair share of ``shards``
among ``members`` live listeners is ``ceil(shards / members)``: every listener at its share covers all
shards, and no listener holds more than one shard above another's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from autooptimize.domain.checks import positive_int
from autooptimize.errors import InvalidArgument


def shard_of(identifier: str, shards: int) -> int:
    """The shard (``0 … shards-1``) of the table named ``identifier`` (``namespace.table``)."""
    positive_int("shards", shards)
    if not isinstance(identifier, str) or not identifier:
        raise InvalidArgument(f"identifier must be a non-empty table name such as ns.table (got {identifier!r})")
    digest = hashlib.blake2b(identifier.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def fair_share(shards: int, members: int) -> int:
    """How many shards one of ``members`` live listeners holds at most: ``ceil(shards / members)``."""
    positive_int("shards", shards)
    positive_int("members", members)
    return -(-shards // members)


@dataclass(frozen=True)
class Rebalance:
    """What one listener does now: give up ``release`` (over its share) or take up to ``take`` free shards."""

    release: tuple[int, ...]
    take: int


def rebalance(held: Iterable[int], shards: int, members: int) -> Rebalance:
    """Bring a listener holding ``held`` to its fair share: the highest-numbered shards over the share
    are released (shard 0, which carries the catalog-wide chores, moves last); a listener under its
    share takes free shards up to it. ``members`` counts this listener too."""
    mine = sorted(set(held))
    bad = [s for s in mine if not isinstance(s, int) or not 0 <= s < shards]
    if bad:
        raise InvalidArgument(f"held shards {bad} are outside 0…{shards - 1}")
    share = fair_share(shards, members)
    over = len(mine) - share
    if over > 0:
        return Rebalance(release=tuple(reversed(mine[-over:])), take=0)
    return Rebalance(release=(), take=share - len(mine))
