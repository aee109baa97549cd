"""Sharding the tables among listeners: stable shards, fair shares that cover every shard, and the
rebalance that brings a listener to its share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.shards import fair_share, rebalance, shard_of
from autooptimize.errors import InvalidArgument
from autooptimize.services.notify import snapshot_id_arg


def test_a_tables_shard_is_stable_and_spread():
    # fixed values (blake2b, 8 bytes, big-endian, mod shards): a change of hash would move tables between
    # listeners of different releases during a rolling upgrade
    assert [shard_of(f"bench.t{i:04d}", 16) for i in range(6)] == [12, 0, 11, 4, 15, 15]
    assert shard_of("analytics.events", 1024) == 634
    counts = [0] * 16
    for i in range(1000):
        counts[shard_of(f"bench.t{i:04d}", 16)] += 1
    assert min(counts) > 1000 / 16 / 2 and max(counts) < 1000 / 16 * 2


@given(st.integers(1, 512), st.integers(1, 64))
def test_fair_shares_cover_every_shard_and_differ_by_at_most_one(shards, members):
    share = fair_share(shards, members)
    assert share * members >= shards
    assert (share - 1) * members < shards


@given(st.integers(1, 64), st.integers(1, 8), st.data())
def test_rebalance_brings_a_listener_to_its_share(shards, members, data):
    held = data.draw(st.sets(st.integers(0, shards - 1)))
    plan = rebalance(held, shards, members)
    share = fair_share(shards, members)
    assert set(plan.release) <= held
    assert len(held) - len(plan.release) + plan.take == share
    assert not (plan.release and plan.take)
    assert 0 not in plan.release  # shard 0 (the catalog-wide chores) is the last a listener gives up
    assert all(r > k for r in plan.release for k in held - set(plan.release))  # the highest go


def test_bad_arguments_name_themselves():
    with pytest.raises(InvalidArgument, match="shards"):
        shard_of("a.b", 0)
    with pytest.raises(InvalidArgument, match="held shards"):
        rebalance({17}, 16, 1)
    with pytest.raises(InvalidArgument, match="members"):
        fair_share(16, 0)


@pytest.mark.parametrize("value, expected", [(None, None), (0, 0), (123, 123), ("4567", 4567), (2**63 - 1, 2**63 - 1)])
def test_snapshot_ids_accepted(value, expected):
    assert snapshot_id_arg(value) == expected


@pytest.mark.parametrize("value", [-1, 2**63, "12a", "", 1.5, True, [1], "-5"])
def test_bad_snapshot_ids_are_refused_naming_the_value(value):
    with pytest.raises(InvalidArgument, match="snapshot id"):
        snapshot_id_arg(value)
