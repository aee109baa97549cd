"""Landing checks that need no service: type compatibility by name, and duration parsing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autooptimize.errors import InvalidArgument
from autooptimize.services.buffer.landing import _compatible
from autooptimize.services.buffer.rules import check_rules


@pytest.mark.parametrize(("src", "dst", "ok"), [
    (pa.int32(), pa.int64(), True),
    (pa.int16(), pa.int32(), True),
    (pa.uint32(), pa.int64(), True),
    (pa.int64(), pa.int32(), False),  # narrowing loses values
    (pa.uint64(), pa.int64(), False),
    (pa.float32(), pa.float64(), True),
    (pa.float64(), pa.float32(), False),
    (pa.string(), pa.large_string(), True),
    (pa.int64(), pa.string(), False),  # no re-parsing or re-formatting
    (pa.string(), pa.int64(), False),
    (pa.dictionary(pa.int32(), pa.string()), pa.large_string(), True),
    (pa.timestamp("ms"), pa.timestamp("us"), True),
    (pa.timestamp("ns", tz="UTC"), pa.timestamp("us", tz="UTC"), False),  # Spark cannot read nanos
    (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),  # local vs UTC instant
    (pa.decimal128(10, 2), pa.decimal128(12, 2), True),
    (pa.decimal128(10, 3), pa.decimal128(12, 2), False),
    (pa.date32(), pa.date32(), True),
    (pa.struct([("a", pa.int32())]), pa.struct([("a", pa.int64()), ("b", pa.string())]), True),
    (pa.struct([("z", pa.int32())]), pa.struct([("a", pa.int64())]), False),
])
def test_compatible_means_a_lossless_cast(src, dst, ok):
    assert _compatible(src, dst) is ok


@pytest.mark.parametrize(("text", "seconds"), [("900", 900), (60, 60), ("90s", 90), ("15m", 900), ("2h", 7200),
                                               ("1.5h", 5400), ("3d", 259200), ("1w", 604800)])
def test_duration(text, seconds):
    assert check_rules(max_age=text) == {"max_age_seconds": seconds}


@pytest.mark.parametrize("text", ["", "soon", "5y", "-1", "0", "0m", "inf", "nan", "1" * 40, "15m\n", -5, 1.5e300])
def test_bad_duration_names_the_input(text):
    with pytest.raises(InvalidArgument, match="max-age"):
        check_rules(max_age=text)
