"""``whatif --suggest`` prints the ``autooptimize track`` command that sets every knob of its suggestion.
A knob left out keeps the table's current value: session 46 ran m03 "with the suggestion" by hand, set
only the fan-in and cold-after, and so ran price 23 and 4 × gaps where the suggestion had both off."""

from __future__ import annotations

import shlex

import pytest

from autooptimize.cli.actions import track_command
from autooptimize.cli.parser import build_parser
from autooptimize.domain.sizes import parse_size


@pytest.mark.parametrize("tuning", [
    {"price": 0, "fan_in": 8, "cold_after_seconds": 300.0, "cold_gap_factor": 0.0, "leave_alone_below": 0,
     "quiet_merge": False, "cold_absorb": False},
    {"price": 32, "fan_in": 12, "cold_after_seconds": 30.0, "cold_gap_factor": 4.0, "leave_alone_below": 1048576,
     "quiet_merge": True, "cold_absorb": True},
])
def test_the_printed_command_sets_every_knob_of_the_suggestion(tuning):
    words = shlex.split(track_command("db.events", tuning))
    assert words[:3] == ["autooptimize", "track", "db.events"]
    args = build_parser().parse_args(words[1:])
    assert args.table == "db.events"
    assert int(args.merge_price) == tuning["price"] and args.merge_fan_in == tuning["fan_in"]
    assert args.cold_after == tuning["cold_after_seconds"]
    assert float(args.cold_gap_factor) == tuning["cold_gap_factor"]
    assert parse_size(args.leave_alone_below) == tuning["leave_alone_below"]
    assert args.quiet_merge is tuning["quiet_merge"] and args.cold_absorb is tuning["cold_absorb"]
