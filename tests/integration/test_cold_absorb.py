"""The cold finish that gives its remainder a home (``cold_absorb``, ``autooptimize.domain.remainder``), end
to end: a cold day of one nearly full file and two small ones. Off (the default), the two small files merge
into one file that is still small; on (``track --cold-absorb``), the nearly full file is rewritten with them
and the day ends as one file, through the service's decide and a real Spark merge, rows and content kept."""

from __future__ import annotations

import json
import random
import time

import pyarrow as pa
import pytest

from autooptimize.cli import main as cli_main
from autooptimize.errors import InvalidArgument
from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.submit_decided import on_attention_handler
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import TrackedTable
from tests.fakes import RecordingDispatch
from tests.integration.tables import ARROW, DAY1, SCHEMA, SPEC, identifier, second_reader_checksum

MiB = 1 << 20


def _rows(first: int, n: int) -> pa.Table:
    rng = random.Random(first)  # random payloads: the file's size follows its rows
    return pa.table({"id": list(range(first, first + n)), "day": [DAY1] * n,
                     "v": [rng.randbytes(16).hex() for _ in range(n)], "x": [rng.random() for _ in range(n)]},
                    schema=ARROW)


def _cold_day(live, catalog, name: str, **tuning):
    """A day of one file between ¾ of a 1 MiB target and the target, and two files of 20 rows, tracked
    with ``tuning``, observed, and left until it is cold: (table, identifier, dispatch, handler)."""
    table = catalog.create_table(f"test.{name}_{random.randrange(10**9)}", schema=SCHEMA, partition_spec=SPEC)
    table.append(_rows(0, 28_000))
    table.append(_rows(28_000, 20))
    table.append(_rows(28_020, 20))
    sizes = sorted(t.file.file_size_in_bytes for t in table.scan().plan_files())
    assert len(sizes) == 3 and 3 * MiB // 4 <= sizes[-1] < MiB and sizes[1] < MiB // 8, sizes  # the premise
    ident = identifier(table)
    tracking.track(live, ident, target_file_size="1MiB", **tuning)
    port = RecordingDispatch()
    handler = on_attention_handler(live, port)
    observe_table(live, ident, on_attention=handler)
    time.sleep(live.cold_after_seconds + 0.5)
    return table, ident, port, handler


@pytest.fixture
def live(settings):
    return settings.model_copy(update={"merge_policy": "tiered", "settle_seconds": 1.0, "cold_after_seconds": 2.0})


def test_off_the_cold_finish_merges_only_the_small_files(live, catalog):
    _, ident, _, _ = _cold_day(live, catalog, "absorb_off")
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["action"], row["files_replaced"]) == ("cold_finish", "merge", 2)


def test_on_the_cold_finish_gives_its_remainder_a_home_and_spark_writes_one_file(live, catalog, spark_server):
    table, ident, port, handler = _cold_day(live, catalog, "absorb_on", cold_absorb=True)
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["action"], row["files_replaced"]) == ("cold_absorb", "merge", 3)
    before = second_reader_checksum(table)
    table_id = tracking.ensure_tracked(live, ident)
    handler(table_id, 0, row["partition_key"])
    assert len(port.tickets) == 1
    result = actions.execute(live, port.tickets[0].action_id)
    assert result["state"] == "succeeded", result
    table.refresh()
    sizes = [t.file.file_size_in_bytes for t in table.scan().plan_files()]
    assert len(sizes) == 1, sizes  # Spark's Parquet may weigh under the writer's: one file, not a size
    assert second_reader_checksum(table) == before  # every row, the same content
    assert table.current_snapshot().summary.operation.value == "replace"


def test_the_knob_is_stored_shown_and_a_nonsense_value_changes_nothing(live, catalog, capsys):
    table = catalog.create_table(f"test.absorb_knob_{random.randrange(10**9)}", schema=SCHEMA, partition_spec=SPEC)
    ident = identifier(table)
    assert cli_main(["track", ident, "--cold-absorb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cold_absorb"] is True
    with pytest.raises(InvalidArgument, match="cold_absorb must be true or false"):
        tracking.track(live, ident, cold_absorb="yes")
    with session_scope(live) as session:
        row = session.query(TrackedTable).filter_by(identifier=ident).one()
        assert row.cold_absorb is True
    assert tracking.track(live, ident, cold_absorb=False)["cold_absorb"] is False
