"""One health rule everywhere (issue 25): status, the console's health column, /metrics, the listener's
hand-over and decide all judge a partition by its excess over the best layout its bytes allow, so a
one-file partition smaller than the target is healthy while three small files beside each other are not."""

from __future__ import annotations

from autooptimize.services import tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.attention import observed_state, partitions_needing_attention
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.overview import tables_overview
from autooptimize.services.status import table_status
from autooptimize.storage.db import session_scope
from autooptimize.storage.readmodel import table_figures
from tests.integration.tables import DAY1, DAY2, identifier, key_of, make_table


def test_a_one_file_partition_under_the_target_is_healthy_everywhere(binpack_settings, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    lone = make_table(catalog, {DAY1: 1}, rows=2000, name="health_lone")  # one file, far under 1 MiB
    mixed = make_table(catalog, {DAY1: 1, DAY2: 3}, rows=2000, name="health_mixed")
    names = [identifier(lone), identifier(mixed)]
    for name in names:
        tracking.track(settings, name, target_file_size="1MiB")
        observe_table(settings, name)
    one, three = key_of(DAY1), key_of(DAY2)

    for name in names:  # from the snapshot (status) and from the listener's figures: the same verdicts
        for state in (table_status(settings, name), observed_state(settings, name)):
            verdict = {p["partition_key"]: p["needs_attention"] for p in state["partitions"]}
            assert verdict[one] is False, (name, state["partitions"])
            if name == names[1]:
                assert verdict[three] is True
            # the raw File Size Entropy of the lone file is far over T²: the old rule flagged it
            lone_mse = next(p["mse"] for p in state["partitions"] if p["partition_key"] == one)
            assert lone_mse >= ((1 << 20) // 4) ** 2

    overview = {t["table"]: t for t in tables_overview(settings)}  # with the session's other tables, any state
    assert [(overview[n]["health"], overview[n]["partitions_needing_attention"]) for n in names] == [
        ("healthy", 0), ("attention", 1)]

    with session_scope(settings) as session:
        over = {f.identifier: f.over_threshold for f in table_figures(session, settings.catalog)}
    assert over[names[0]] == 0 and over[names[1]] == 1  # what /metrics reports

    handed = {(a.table, a.partition_key) for a in partitions_needing_attention(settings)}
    assert (names[0], one) not in handed and (names[1], one) not in handed
    assert (names[1], three) in handed

    rows = {r["partition_key"]: r for r in explain(settings, names[1])["partitions"]}
    assert (rows[one]["action"], rows[one]["reason"]) == ("none", "below_threshold")
    assert rows[three]["action"] == "merge"
