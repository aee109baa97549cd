from __future__ import annotations

import pytest

from autooptimize.domain.durations import format_duration, parse_duration
from autooptimize.errors import InvalidArgument


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("45m", 2700), ("36h", 129600), ("7d", 604800), ("2w", 1209600), ("3600", 3600),
    (" 1.5h ", 5400), ("0", 0), (0, 0), (86400, 86400), ("7D", 604800),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text, "min_age") == seconds


@pytest.mark.parametrize("bad", ["", "7 days", "-1d", "d", "1y", True, None, [], -5, "1e3"])
def test_parse_duration_names_the_input(bad):
    with pytest.raises(InvalidArgument, match="min_age"):
        parse_duration(bad, "min_age")


@pytest.mark.parametrize("seconds", [0, 59, 60, 5400, 86400, 604800, 3 * 86400 + 1])
def test_format_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds
