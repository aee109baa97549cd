"""benchmarks.streaming waits for quiet for the cold-after time plus 20 s, so the service's cold finishes
land before it is stopped: the table's own cold-after (``--track``) first, then the service's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.streaming import drain_quiet_seconds, parse_args

SERVICE = SimpleNamespace(cold_after_seconds=60.0)


@pytest.mark.parametrize(("argv", "seconds"), [
    ([], 80.0),
    (["--service-env", "AO_COLD_AFTER_SECONDS=30"], 50.0),
    (["--track", "merge-fan-in=8", "--track", "cold-after=300"], 320.0),
    (["--track", "cold-after=300", "--service-env", "AO_COLD_AFTER_SECONDS=30"], 320.0),
    (["--track", "cold-after=300", "--quiet-seconds", "90"], 90.0),
])
def test_the_wait_covers_the_cold_after_time_the_table_will_use(argv, seconds):
    assert drain_quiet_seconds(SERVICE, parse_args(argv)) == seconds


def test_a_cold_after_that_is_not_seconds_is_named():
    with pytest.raises(SystemExit, match="--track cold-after wants seconds, got '5m'"):
        drain_quiet_seconds(SERVICE, parse_args(["--track", "cold-after=5m"]))
